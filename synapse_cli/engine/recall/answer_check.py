"""`recall --verify`: seed 000's second rejection stage ("Is this EXPLICITLY mentioned?").

After the gate lets a query through, the local model (llama.cpp, the GGUF consolidate uses,
loaded by `models.extractor.LlamaExtractor`) reads the top returned memories and the query and
is asked whether the memories explicitly mention what the query asks. It does not write an
answer: the score is log P(yes) - log P(no) of its first answer token (summed over the
spellings of each word), and the query is rejected when the score is below a threshold that
bench/quality/locomo_recall.py --verify calibrates. A log-odds with a threshold can be calibrated;
free text from a 135M model cannot (it says "Yes" to almost anything).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

YES = ("Yes", "yes", " Yes", " yes", "YES")
NO = ("No", "no", " No", " no", "NO")
MAX_MEMORY_CHARS = 400   # per memory shown to the model: a long document chunk is cut

_SYSTEM = ("You check a question against memories. Answer Yes only if the memories explicitly "
           "mention what the question asks about, for the same person. If the memories do not "
           "mention it, answer No.")


@dataclass
class VerifyConfig:
    memories: int = 5          # how many of the top results the model reads
    # reject iff log P(yes) - log P(no) < threshold. Calibrated on LoCoMo dev after the gate
    # (bench/quality/locomo_recall.py --verify): the most category-5 refusals with <= 5% of questions
    # 1-4 refused in all is at -1.2, and it adds little (54.0% -> 54.4% of category 5 for
    # 4.3% -> 5.0% of 1-4): the packaged 135M model barely tells the two apart. At 0 it
    # refused 89% of the answerable questions.
    threshold: float = -1.2


def memory_line(r: dict) -> str:
    """One result as the model sees it: 'speaker: text', whitespace collapsed, cut short."""
    text = " ".join(str(r.get("text") or "").split())
    if len(text) > MAX_MEMORY_CHARS:
        text = text[:MAX_MEMORY_CHARS] + " ..."
    return f"{r['speaker']}: {text}" if r.get("speaker") else text


def build_prompt(query: str, results: list[dict]) -> str:
    """ChatML (SmolLM2's template); the fixed system part first, so llama.cpp reuses its KV
    cache from one query to the next."""
    listing = "\n".join(f"- {memory_line(r)}" for r in results)
    return (f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n<|im_start|>user\nMemories:\n{listing}\n"
            f"Question: {' '.join(query.split())}\nIs this explicitly mentioned in the memories? "
            f"Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n")


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + math.log(float(np.sum(np.exp(x - m))))


class AnswerChecker:
    """Scores (query, memories) with the local model; the model loads on the first check."""

    def __init__(self, model_path=None, threads: int = 2, extractor=None):
        if extractor is None:
            from ...models.extractor import LlamaExtractor

            extractor = LlamaExtractor(model_path, threads=threads)
        self._holder = extractor   # owns the llama.cpp model and its loading quirks
        self._yes: list[int] | None = None
        self._no: list[int] | None = None

    @property
    def llm(self):
        self._holder.load()
        return self._holder.llm

    def _word_tokens(self, words) -> list[int]:
        """First token of each spelling that is a single token (one id per spelling)."""
        ids = []
        for w in words:
            toks = self.llm.tokenize(w.encode("utf-8"), add_bos=False, special=False)
            if len(toks) == 1 and toks[0] not in ids:
                ids.append(toks[0])
        return ids

    def score(self, query: str, results: list[dict]) -> float:
        """log P(yes) - log P(no) for the first token of the model's answer."""
        llm = self.llm
        if self._yes is None:
            self._yes, self._no = self._word_tokens(YES), self._word_tokens(NO)
            if not self._yes or not self._no:
                raise RuntimeError("the model has no single-token Yes/No")
        captured: list[np.ndarray] = []

        def grab(_ids, logits):
            captured.append(np.array(logits, dtype=np.float64, copy=True))
            return logits

        from llama_cpp import LogitsProcessorList

        from ...models.extractor import _quiet_stderr

        prompt = build_prompt(query, results)
        with _quiet_stderr():
            llm.create_completion(prompt, max_tokens=1, temperature=0.0, seed=0,
                                  repeat_penalty=1.0,
                                  logits_processor=LogitsProcessorList([grab]))
        if not captured:
            raise RuntimeError("llama.cpp returned no logits")
        logits = captured[0]
        return _logsumexp(logits[self._yes]) - _logsumexp(logits[self._no])

    def check(self, result: dict, cfg: VerifyConfig) -> dict:
        """Add the verdict to a recall result (in place) and return it: `verify` holds the
        score and threshold; `rejected` becomes true, with no results, when the score is below
        the threshold. A result the gate already rejected is not checked."""
        if result.get("rejected") or not result.get("results"):
            return result
        t = time.perf_counter()
        s = self.score(result["query"], result["results"][: cfg.memories])
        passed = s >= cfg.threshold
        result["verify"] = {"score": round(s, 4), "threshold": cfg.threshold,
                            "memories": min(cfg.memories, len(result["results"])),
                            "passed": bool(passed),
                            "elapsed_ms": round((time.perf_counter() - t) * 1000, 3)}
        if not passed:
            result["rejected"] = True
            result["results"] = []
        return result
