"""Ranking kernels: the fused score of the default mode, and top-k selection.

At a million records the numpy version of these steps (masks, min-max, five weighted arrays,
a partition) made ~25 passes over the data; here they are two passes and one.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types

_F32_RO = types.Array(types.float32, 1, "C", readonly=True)
_F64_RO = types.Array(types.float64, 1, "C", readonly=True)
_F64 = types.Array(types.float64, 1, "C")
_I64 = types.Array(types.int64, 1, "C")


@njit(cache=True, inline="always")
def _worse(sa, ia, sb, ib):
    return sa < sb or (sa == sb and ia > ib)


@njit(cache=True)
def _sift_down(scores, heap, size, pos):
    while True:
        c = 2 * pos + 1
        if c >= size:
            return
        if c + 1 < size and _worse(scores[heap[c + 1]], heap[c + 1], scores[heap[c]], heap[c]):
            c += 1
        if _worse(scores[heap[c]], heap[c], scores[heap[pos]], heap[pos]):
            heap[c], heap[pos] = heap[pos], heap[c]
            pos = c
        else:
            return


@njit([_I64(_F32_RO, types.int64, types.float64), _I64(_F64_RO, types.int64, types.float64)],
      cache=True)
def top_k(scores, k, floor):
    """Indices of the k best scores above `floor`, best first; ties broken by the lower index.

    Entries <= floor and NaN are never returned (floor = -inf excludes only -inf and NaN;
    floor = 0 keeps positive scores). One pass with a k-entry min-heap: O(n log k).
    """
    n = scores.shape[0]
    if k < 0:
        raise ValueError("k must be >= 0")
    cap = min(k, n)
    heap = np.empty(cap, np.int64)  # min-heap: root is the worst kept entry
    size = 0
    for i in range(n):
        s = scores[i]
        if not s > floor or cap == 0:  # also false for NaN
            continue
        if size < cap:
            heap[size] = i
            pos = size
            size += 1
            while pos > 0:  # sift up
                p = (pos - 1) // 2
                if _worse(scores[heap[pos]], heap[pos], scores[heap[p]], heap[p]):
                    heap[pos], heap[p] = heap[p], heap[pos]
                    pos = p
                else:
                    break
        elif _worse(scores[heap[0]], heap[0], s, i):
            heap[0] = i
            _sift_down(scores, heap, size, 0)
    out = np.empty(size, np.int64)
    for r in range(size - 1, -1, -1):  # pop worst first, fill from the back
        out[r] = heap[0]
        heap[0] = heap[r]
        _sift_down(scores, heap, r, 0)
    return out


@njit(types.void(_F32_RO, _F32_RO, _F32_RO, _F64_RO, _F32_RO, _F32_RO, types.float64,
                 types.float64, types.float64, types.float64, types.float64, types.boolean,
                 types.boolean, _F64), cache=True)
def fused_scores(sim, act, pr, bm25, decay, importance, lam_sim, lam_act, lam_pr, lam_bm25,
                 lam_decay, minmax, use_decay, out):
    """Score of the default mode (recall.rank), -inf where sim is not finite (filtered out):

        lam_sim * sim' + lam_act * act + lam_pr * pr + lam_bm25 * bm25 / max(bm25)
        + lam_decay * decay * min(importance, 10) / 10

    sim' = sim min-max scaled over the finite entries when `minmax`, else sim; decay = 1 when
    not `use_decay`. Arithmetic in float64.
    """
    n = sim.shape[0]
    lo, hi, top = np.inf, -np.inf, 0.0
    for i in range(n):
        s = np.float64(sim[i])
        if np.isfinite(s):
            lo = min(lo, s)
            hi = max(hi, s)
        top = max(top, bm25[i])
    span = hi - lo
    for i in range(n):
        s = np.float64(sim[i])
        if not np.isfinite(s):
            out[i] = -np.inf
            continue
        if minmax:
            s = (s - lo) / span if span > 0 else 0.0
        b = bm25[i] / top if top > 0 else 0.0
        d = np.float64(decay[i]) if use_decay else 1.0
        out[i] = (lam_sim * s + lam_act * np.float64(act[i]) + lam_pr * np.float64(pr[i])
                  + lam_bm25 * b + lam_decay * d * min(np.float64(importance[i]), 10.0) / 10.0)
