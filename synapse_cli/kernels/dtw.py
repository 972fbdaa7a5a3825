"""Temporal association of two spike trains, seed 001 section 3.2, eqs. 1-5.

    W(i, j) = exp(-|t_i^a - t_j^b| / tau_bar),  tau_bar = (tau_A + tau_B) / 2        (1)
    L(i, 1) = sum_{k<=i} W(k, 1),  L(1, j) = sum_{k<=j} W(1, k)                     (2, 3)
    L(i, j) = W(i, j) + max(L(i-1, j), L(i, j-1), L(i-1, j-1))                       (4)
    T(A, B) = sigmoid(L(n, m))                                                        (5)

Spike trains are CSR over node positions: node x's spikes are times[indptr[x]:indptr[x+1]]
(float64, already in scaled time units, ascending); taus[x] is the node's time constant
(already multiplied by tau_scale). Trains are short (the store keeps the timestamp plus the
last 16 spikes), so each pair is a small dynamic programme over two rolling rows.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def pair_scores(indptr, times, taus, src, dst, out):
    """T(src[k], dst[k]) for every k into out[k].

    indptr: int64[n+1]; times: float64[m]; taus: float64[n]; src, dst: int64[p]; out: float64[p].
    """
    width = 1
    for x in range(len(indptr) - 1):
        width = max(width, indptr[x + 1] - indptr[x])
    prev = np.empty(width)
    cur = np.empty(width)
    for k in range(len(src)):
        a, b = src[k], dst[k]
        a0, na = indptr[a], indptr[a + 1] - indptr[a]
        b0, nb = indptr[b], indptr[b + 1] - indptr[b]
        if na == 0 or nb == 0:
            out[k] = 0.5  # sigmoid(0): no spikes, no association
            continue
        tau = 0.5 * (taus[a] + taus[b])
        for i in range(na):
            ta = times[a0 + i]
            for j in range(nb):
                w = np.exp(-abs(ta - times[b0 + j]) / tau)
                if i == 0:
                    cur[j] = w if j == 0 else cur[j - 1] + w
                elif j == 0:
                    cur[j] = prev[0] + w
                else:
                    cur[j] = w + max(prev[j], cur[j - 1], prev[j - 1])
            for j in range(nb):
                prev[j] = cur[j]
        out[k] = 1.0 / (1.0 + np.exp(-prev[nb - 1]))
    return out
