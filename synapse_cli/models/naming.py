"""The model's judgement of candidate spans: how readily it *names* each one itself when asked
for something from the chat worth remembering, read from its log-probabilities (never generated).

Asking a small model to write a selection fails (README_extract.md: it copies the list, or says
yes and no in turn as in its example, or one answer word dominates). Here the window is
evaluated once; each candidate costs only its own few tokens on top of the window's KV cache:
log P(span, end of answer | window), per word of the span, z-scored within the window so that
only the model's preference among this window's candidates is left. `trust` measures once per
model, on the labelled chats of calibration.py, how well that score separates topics from
asides; the extractor weighs the score by it (weak model: weight 0, the rules decide).
"""
from __future__ import annotations

import numpy as np

from .calibration import CHATS

_SYSTEM = ("You read a chat and name one specific person, place, organization, event, activity, "
           "object or topic from it that is worth remembering about the speakers, copying the "
           "words from the chat.")


def _prompt(window: str) -> str:
    """ChatML (SmolLM2's and Qwen2.5's template); the answer starts right after it."""
    return (f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n<|im_start|>user\nChat:\n{window}"
            "<|im_end|>\n<|im_start|>assistant\n")


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def zscore(xs: list[float]) -> list[float]:
    a = np.asarray(xs, dtype=np.float64)
    if a.size < 2 or a.std() == 0:
        return [0.0] * a.size
    return ((a - a.mean()) / a.std()).tolist()


class NamingScorer:
    """Scores of a loaded `llama_cpp.Llama` (private parts of llama-cpp-python 0.3: its context
    and batch, to read the logits of every span token from one decode)."""

    def __init__(self, llm):
        self.llm = llm
        self.tokens_evaluated = 0  # prompt tokens pushed through the model (for benchmarks)
        self._end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)

    def _logits(self, rows: int) -> np.ndarray:
        n = self.llm.n_vocab()
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(),
                                     shape=(rows * n,)).reshape(rows, n)

    def _eval_prefix(self, text: str) -> int:
        """Evaluate `text`, reusing the KV cache of the longest common token prefix; returns its
        length (the last position's logits are then those of the answer's first token)."""
        llm = self.llm
        toks = llm.tokenize(text.encode(), add_bos=False, special=True)
        common = 0
        limit = min(len(toks), llm.n_tokens)
        while common < limit and llm.input_ids[common] == toks[common]:
            common += 1
        common = min(common, len(toks) - 1)  # re-evaluate at least the last token
        llm.n_tokens = common
        llm.eval(toks[common:])
        self.tokens_evaluated += len(toks) - common
        return len(toks)

    def scores(self, window: str, spans: list[str]) -> list[float]:
        """log P(span, end of answer | window) per word of each span."""
        if not spans:
            return []
        llm = self.llm
        base = self._eval_prefix(_prompt(window))
        first = _log_softmax(self._logits(1)[0].copy())
        out = []
        for s in spans:
            toks = llm.tokenize(s.encode(), add_bos=False, special=False) + self._end
            lp = float(first[toks[0]])
            rest = toks[:-1]
            llm._ctx.kv_cache_seq_rm(-1, base, -1)
            llm._batch.set_batch(batch=rest, n_past=base, logits_all=True)
            llm._ctx.decode(llm._batch)
            self.tokens_evaluated += len(rest)
            lps = _log_softmax(self._logits(len(rest)))
            lp += float(sum(lps[k, t] for k, t in enumerate(toks[1:])))
            out.append(lp / max(1, len(s.split())))
        llm._ctx.kv_cache_seq_rm(-1, base, -1)
        llm.n_tokens = base  # the window stays cached; later tokens are gone from the cache
        return out

    def trust(self) -> float:
        """AUC, over the calibration chats, of the window-z-scored score between the spans worth
        remembering and the asides (0.5: no better than chance)."""
        pos, neg = [], []
        for turns, good, bad in CHATS:
            z = zscore(self.scores("\n".join(turns), good + bad))
            pos += z[:len(good)]
            neg += z[len(good):]
        p, n = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
        return float(((p > n) + 0.5 * (p == n)).mean())
