"""Salience of candidate spans, from the MiniLM embedder that consolidation already loads.

A concrete noun mentioned in passing ("wallet", "sky") and a topic of the turn ("hoodie",
"pottery") look alike to the span rules; what separates them best among the signals measured
(bench/README_extract.md: document frequency, mention counts, the model's log-probabilities) is
how close the span's embedding is to the turn that mentions it: a topic carries the turn's
meaning, an aside does not.
"""
from __future__ import annotations

import numpy as np

from .words import _SPEAKER

MIN_SALIENCE = 0.35  # cosine(span, its turn) under which a common noun is dropped (chosen on the
# tune split of bench/extract_gold.json only; bench/README_extract.md)
MIN_SALIENCE_TAGGED = 0.45  # the same for a bare noun only the part-of-speech tagger found
# (candidates.py, postag.py): they are more often asides; chosen on the tune split only


def turn_bodies(window_texts: list[str]) -> list[str]:
    """The window's turns without their "Speaker: " prefix (a name would pull every span
    toward the speaker rather than the content)."""
    out = []
    for t in window_texts:
        m = _SPEAKER.match(t)
        out.append(" ".join((t[m.end():] if m else t).split()))
    return out


def salience(candidates: list[str], window_texts: list[str], embedder) -> list[float]:
    """For each candidate, the highest cosine similarity between its embedding and a turn that
    contains it verbatim (0.0 if none does). One `encode` call for spans and turns together."""
    if not candidates:
        return []
    bodies = turn_bodies(window_texts)
    vecs = np.asarray(embedder.encode(list(candidates) + bodies), dtype=np.float32)
    cand, turns = vecs[:len(candidates)], vecs[len(candidates):]
    sims = cand @ turns.T
    out = []
    for i, c in enumerate(candidates):
        where = [j for j, b in enumerate(bodies) if c in b]
        out.append(float(max(sims[i, j] for j in where)) if where else 0.0)
    return out


def is_name_like(span: str) -> bool:
    """Titles, proper names, acronyms and times (capitalised or numeric): these name one
    specific thing, and the salience filter leaves them alone. A capitalised gerund alone
    ("Connecting with ...", "Winning ...": an activity that starts a sentence) is a common noun
    when the tagger's lexicon knows the word, and the filter judges it like one."""
    if span[:1].isdigit():
        return True
    if not span[:1].isupper():
        return False
    if " " not in span and span.endswith("ing") and span[1:].islower():
        from . import postag

        return not postag.common_word(span)
    return True


def keep_salient(candidates: list[str], scores: list[float], threshold: float = MIN_SALIENCE,
                 limit: int | None = None, tagged=frozenset(),
                 tagged_threshold: float = MIN_SALIENCE_TAGGED) -> list[str]:
    """Candidates in their order, name-like ones always, common nouns only at `threshold` or
    above (`tagged_threshold` for those in `tagged`); at most `limit`."""
    kept = [c for c, s in zip(candidates, scores) if is_name_like(c)
            or s >= (tagged_threshold if c in tagged else threshold)]
    return kept[:limit] if limit else kept
