"""Probe helpers (extract_judge_probe.py): the model's answers about candidate spans, read from its
next-token log-probabilities. The extractor keeps only the naming score (models/naming.py).

Asking a small model to *write* a selection fails (README_extract.md: it copies the list, or
answers yes and no in turn as in its example). Here every candidate gets its own question after
the window, and the answer is never generated: the judge compares the log-probabilities of the
possible first answer tokens (" yes" against " no"; one word per entity type). The window is
evaluated once and its KV cache reused for every question, so a candidate costs only its
question's ~20 tokens. A question is independent of the others' answers, so no list can be
copied, and each answer is a number a caller can calibrate (against filler words of the window)
and weigh against the rules' own evidence (salience).

The prompt is ChatML, the template of both SmolLM2 and Qwen2.5.
"""
from __future__ import annotations

import math

import numpy as np

# the naming prompt is the extractor's own, so the probe measures what runs
from synapse_cli.models.naming import _prompt as _name_prefix

# One system prompt for both questions, fixed, so llama.cpp keeps it in the KV cache across
# windows; its example answers both ways so that neither answer word is the only one it has seen.
TYPE_WORDS = {"person": "person", "place": "place", "organization": "organization",
              "event": "event", "hobby": "preference", "thing": "object", "topic": "concept"}
_SYSTEM = (
    "You read a chat, then one question about a phrase from it.\n"
    "Keep: <phrase> - answer yes if the phrase names a specific person, place, organization, "
    "event, activity, object or topic that the chat is about and worth remembering; answer no "
    "if it is filler, said in passing, or too vague.\n"
    "Kind: <phrase> - answer with one word: person (a person or pet), place, organization (a "
    "company, shop, group or team), event, hobby (an activity someone does or likes), thing "
    "(an object or food) or topic (an idea, feeling or subject).\n"
    "Example chat:\nAnna: We adopted a rescue dog named Max last week, and I finally started "
    "pottery classes in Denver. It's been a crazy time, lots of stuff going on!\n"
    "Keep: rescue dog -> yes\nKeep: time -> no\nKeep: Max -> yes\nKeep: stuff -> no\n"
    "Keep: pottery classes -> yes\nKeep: week -> no\nKind: Max -> person\n"
    "Kind: pottery classes -> hobby\nKind: Denver -> place")
_ASK = "Keep: {c}"
_TYPE_ASK = "Kind: {c}"


def _chat_prefix(system: str, window: str) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nChat:\n{window}\n\n")


def _chat_suffix(question: str) -> str:
    return f"{question}<|im_end|>\n<|im_start|>assistant\n"


class LogitJudge:
    """Per-candidate answers of a loaded `llama_cpp.Llama`, as log-probabilities."""

    def __init__(self, llm):
        self.llm = llm
        self._ids: dict[str, list[int]] = {}
        self.tokens_evaluated = 0  # prompt tokens pushed through the model (for benchmarks)

    def _first_tokens(self, words) -> list[list[int]]:
        """For each answer word, the first token of its spellings ("yes", "Yes", " yes")."""
        out = []
        for w in words:
            ids = set()
            for form in (w, w.capitalize(), " " + w, " " + w.capitalize()):
                toks = self.llm.tokenize(form.encode(), add_bos=False, special=False)
                if toks:
                    ids.add(toks[0])
            out.append(sorted(ids))
        return out

    def _logits(self) -> np.ndarray:
        n = self.llm.n_vocab()
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(n,)).astype(np.float64)

    def _ask_all(self, system: str, window: str, questions: list[str], words) -> np.ndarray:
        """[len(questions), len(words)] log-probabilities (each row renormalised over `words`,
        each word the log-sum-exp of its spellings' first tokens)."""
        if not questions:
            return np.zeros((0, len(words)))
        llm = self.llm
        key = "\x00".join(words)
        if key not in self._ids:
            self._ids[key] = self._first_tokens(words)
        ids = self._ids[key]
        prefix = llm.tokenize(_chat_prefix(system, window).encode(), add_bos=False, special=True)
        # The cached prefix: keep what the previous call left in the KV cache if it matches.
        common = 0
        limit = min(len(prefix), llm.n_tokens)
        while common < limit and llm.input_ids[common] == prefix[common]:
            common += 1
        llm.n_tokens = common
        llm.eval(prefix[common:])
        self.tokens_evaluated += len(prefix) - common
        base = len(prefix)
        out = np.zeros((len(questions), len(words)))
        for qi, q in enumerate(questions):
            suffix = llm.tokenize(_chat_suffix(q).encode(), add_bos=False, special=True)
            llm.n_tokens = base
            llm.eval(suffix)
            self.tokens_evaluated += len(suffix)
            z = self._logits()
            m = z.max()
            lse = m + math.log(np.exp(z - m).sum())
            row = [float(np.logaddexp.reduce(z[i] - lse)) for i in ids]
            row = np.asarray(row)
            out[qi] = row - np.logaddexp.reduce(row)
        llm.n_tokens = base  # leave the window's prefix cached for the next question batch
        return out

    def margins(self, window: str, candidates: list[str]) -> list[float]:
        """log P(yes) - log P(no) for each candidate of `window` (positive: an entity)."""
        lp = self._ask_all(_SYSTEM, window, [_ASK.format(c=c) for c in candidates], ("yes", "no"))
        return [float(a - b) for a, b in lp]

    def type_logprobs(self, window: str, candidates: list[str]) -> list[dict[str, float]]:
        """For each candidate, {entity type: log-probability} over TYPE_WORDS' types."""
        lp = self._ask_all(_SYSTEM, window, [_TYPE_ASK.format(c=c) for c in candidates],
                           tuple(TYPE_WORDS))
        return [{TYPE_WORDS[w]: float(v) for w, v in zip(TYPE_WORDS, row)} for row in lp]


class SpanScorer(LogitJudge):
    """How likely the model is to *name* each candidate itself (log P(span, end | window)),
    against how likely it names it with no chat at all: the pointwise mutual information removes
    the model's preference for short or common words, so what is left is what this window
    makes it say."""

    def _prefix(self, text: str) -> int:
        llm = self.llm
        prefix = llm.tokenize(text.encode(), add_bos=False, special=True)
        common = 0
        limit = min(len(prefix), llm.n_tokens)
        while common < limit and llm.input_ids[common] == prefix[common]:
            common += 1
        llm.n_tokens = common
        if common == len(prefix):  # need the last position's logits again
            llm.n_tokens = common - 1
            common -= 1
        llm.eval(prefix[common:])
        self.tokens_evaluated += len(prefix) - common
        return len(prefix)

    def _continuations(self, prefix: str, spans: list[str]) -> list[float]:
        llm = self.llm
        end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
        base = self._prefix(prefix)
        first = self._logits()
        first = first - np.logaddexp.reduce(first)
        out = []
        nv = llm.n_vocab()
        for s in spans:
            toks = llm.tokenize(s.encode(), add_bos=False, special=False) + end
            lp = float(first[toks[0]])
            if len(toks) > 1:
                llm.n_tokens = base
                llm._ctx.kv_cache_seq_rm(-1, base, -1)
                llm._batch.set_batch(batch=toks[:-1], n_past=base, logits_all=True)
                llm._ctx.decode(llm._batch)
                self.tokens_evaluated += len(toks) - 1
                z = np.ctypeslib.as_array(llm._ctx.get_logits(),
                                          shape=((len(toks) - 1) * nv,)).reshape(len(toks) - 1, nv)
                z = z.astype(np.float64)
                for k, t in enumerate(toks[1:]):
                    lp += float(z[k, t] - np.logaddexp.reduce(z[k]))
            out.append(lp)
        llm.n_tokens = base
        llm._ctx.kv_cache_seq_rm(-1, base, -1)
        return out

    def pmi(self, window: str, spans: list[str]) -> tuple[list[float], list[float]]:
        """(log P(span | window), log P(span | empty chat)) for each span."""
        prior = self._continuations(_name_prefix(""), spans)
        cond = self._continuations(_name_prefix(window), spans)
        return cond, prior
