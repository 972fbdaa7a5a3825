"""Attribution check: the part of recall's gate that refuses answers about the wrong person.

Memories of a conversation answer "what did Caroline realise after her charity race?" with
whatever matches best, and in a dialogue that is often the other person's turn: Melanie ran the
race, Caroline only replied "that charity race sounds great, Mel!". Activation and similarity
cannot tell the two apart (LoCoMo category 5 is built from such swapped questions: the top
activation separates them from answerable questions no better than chance, AUC 0.45-0.50).

The check, for a query that names exactly one person who speaks in the top `depth` memories:
- only statements count as evidence: a memory whose last sentence is a question states nothing
  (a trailing bracketed annotation such as "[shares a photo]" is not part of the speech);
- content = BM25 of the query with that name removed (the store indexes "speaker: text", so the
  name alone would favour every turn of that speaker), over the top `depth` memories, counting
  only the query words a memory uses outside its questions: "They're adorable! What are their
  names? Pets bring such joy!" asks for the names, it does not state them (BM25 is a sum over
  query words, so this is the per-word scores summed over the words its statements use);
- margin = (best content of another speaker's statement - best of the named person's), divided
  by the best content of any statement (a relative margin); no statement of the named person
  gives margin 1. Memories without a speaker (notes, semantic nodes) count for nobody.
The query is rejected when the margin is above `threshold`: someone else said it.

Measured on LoCoMo dev (bench/locomo_recall.py, gate section): see README "Evaluation".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..models.tokenize import tokenize

_TRAILING_NOTE = re.compile(r"\s*\[[^\]]*\]\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Verdict:
    name: str
    margin: float
    threshold: float

    @property
    def passed(self) -> bool:
        return self.margin <= self.threshold

    def as_dict(self) -> dict:
        return {"name": self.name, "margin": round(self.margin, 6), "threshold": self.threshold,
                "passed": self.passed}


def _name_pattern(name: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(name) + r"(?:['\u2019]s)?(?!\w)")


def named_speaker(query: str, speakers: set[str]) -> str | None:
    """The one speaker the query names as a whole word (case-sensitive), else None."""
    named = [s for s in speakers if s.strip() and _name_pattern(s).search(query)]
    return named[0] if len(named) == 1 else None


def without_name(query: str, name: str) -> str:
    return _name_pattern(name).sub(" ", query)


def is_statement(text: str | None) -> bool:
    """False for a text whose last sentence is a question (it asserts nothing)."""
    spoken = _TRAILING_NOTE.sub("", text or "").rstrip()
    return bool(spoken) and not spoken.endswith("?")


def stated_words(text: str | None) -> set[str]:
    """Tokens of the sentences of `text` that are not questions (a trailing "[shares a photo
    of ...]" note counts as one)."""
    return {t for sentence in _SENTENCE_END.split((text or "").strip())
            if not sentence.rstrip().endswith("?") for t in tokenize(sentence)}


def stated_content(words: list[str], per_word: np.ndarray, texts: list[str | None]) -> np.ndarray:
    """Per text, the sum of `per_word[j]` (word j's BM25 share) over the words it states."""
    stated = [stated_words(t) for t in texts]
    used = np.array([[w in s for s in stated] for w in words], dtype=bool).reshape(len(words),
                                                                                 len(texts))
    return (np.asarray(per_word, np.float64).reshape(used.shape) * used).sum(axis=0)


def margin(name: str, speakers: list[str | None], texts: list[str | None],
           content: np.ndarray) -> float | None:
    """How much better another speaker's best statement matches than the named person's
    (see the module docstring); None when no statement matches at all."""
    mine, others = [], []
    for spk, text, c in zip(speakers, texts, content.tolist()):
        if spk and is_statement(text):  # a note with no speaker is nobody's word against hers
            (mine if spk == name else others).append(c)
    best = max(mine + others, default=0.0)
    if best <= 0:
        return None
    if not others:
        return -1.0
    if not mine:
        return 1.0
    return (max(others) - max(mine)) / best


def check(query: str, bodies: list[dict], word_scores, depth: int,
          threshold: float) -> Verdict | None:
    """The verdict for a query over its ranked result bodies, or None when the check does not
    apply (no single named speaker among them, or no statement matches).
    `word_scores(query_without_name)` returns (its distinct words, their BM25 shares [words,
    depth]) for the first `depth` results (BM25Index.word_scores). Only those `depth` results
    are read, so the verdict does not depend on how many results the caller asked for."""
    top = bodies[:depth]
    speakers = [b.get("speaker") for b in top]
    name = named_speaker(query, {s for s in speakers if s})
    if name is None:
        return None
    texts = [b.get("text") for b in top]
    words, per_word = word_scores(without_name(query, name))
    m = margin(name, speakers, texts, stated_content(words, per_word, texts))
    return None if m is None else Verdict(name, m, threshold)
