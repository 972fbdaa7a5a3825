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


def stated_content(query: str, texts: list[str | None], content_of) -> np.ndarray:
    """BM25 of `query` per text, from the query words each text uses outside its questions."""
    words = sorted(set(tokenize(query)))
    if not words or not texts:
        return np.zeros(len(texts))
    per_word = np.array([np.asarray(content_of(w), np.float64) for w in words])
    used = np.array([[w in stated for stated in map(stated_words, texts)] for w in words])
    return (per_word * used).sum(axis=0)


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


def check(query: str, bodies: list[dict], content_of, depth: int,
          threshold: float) -> Verdict | None:
    """The verdict for a query over its ranked result bodies, or None when the check does not
    apply (no single named speaker among them, or no statement matches).
    `content_of(text)` returns the BM25 score of `text` for each of the first `depth` results
    (called once per word of the query without the name). Only those `depth` results are read,
    so the verdict does not depend on how many results the caller asked for."""
    top = bodies[:depth]
    speakers = [b.get("speaker") for b in top]
    name = named_speaker(query, {s for s in speakers if s})
    if name is None:
        return None
    texts = [b.get("text") for b in top]
    m = margin(name, speakers, texts, stated_content(without_name(query, name), texts, content_of))
    return None if m is None else Verdict(name, m, threshold)
