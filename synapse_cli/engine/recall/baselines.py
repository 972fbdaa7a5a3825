"""The baselines recall is compared with: `vector` (cosine), `bm25` (the persisted postings)
and `hybrid` (reciprocal-rank fusion of the two). They run through the default pipeline
(synapse.py: the same header scan, filters and result shape, no activation and no gate); what
differs is the score their ranking uses, here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scan import top as _top

MODES = ("vector", "bm25", "hybrid")


@dataclass
class BaselineSettings:
    rrf_k: int = 60


def scores(sig, cfg) -> tuple[np.ndarray, float]:
    """(score per record position, the floor a result must pass) of baseline `cfg.mode`."""
    floor = -np.inf
    if cfg.mode == "vector":
        score = sig.sim
    elif cfg.mode == "bm25":
        score = _matched(sig.bm25)
    else:  # hybrid
        dense = _top(sig.sim, 1000)
        lex = _top(_matched(sig.bm25), 1000)
        score, floor = _rrf([dense, lex], len(sig.sim), cfg.rrf_k), 0.0
    return score, floor


def _rrf(rankings: list[np.ndarray], n: int, k: int) -> np.ndarray:
    score = np.zeros(n, np.float64)
    for order in rankings:
        score[order] += 1.0 / (k + 1 + np.arange(len(order)))
    return score


def _matched(bm25: np.ndarray) -> np.ndarray:
    """BM25 scores of the records that share a term with the query, -inf for the others. Not
    a floor of 0: rank-bm25's IDF, which the kernel reproduces, is negative for a term in more
    than half the records, so in a small store an exact match can score below 0."""
    return np.where(bm25 != 0, bm25, -np.inf)
