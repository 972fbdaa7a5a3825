"""Weighted PageRank by power iteration over a CSR graph (row = source).

    r'_i = (1 - d) / n + d * (sum_j r_j * w_ji / W_j + D / n)

W_j = sum of j's out-edge weights; a node with W_j = 0 (no out-edges, or only zero weights) is
dangling and its rank D = sum of dangling r_j is spread uniformly.  Starts from r = 1/n and
stops when sum |r' - r| < tol or after max_iter steps.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types

from synapse_cli.kernels.activation import validate_csr

_I64_RO = types.Array(types.int64, 1, "C", readonly=True)
_I32_RO = types.Array(types.int32, 1, "C", readonly=True)
_F32_RO = types.Array(types.float32, 1, "C", readonly=True)
_OUT = types.Tuple((types.Array(types.float32, 1, "C"), types.int64))


@njit(_OUT(_I64_RO, _I32_RO, _F32_RO, types.float64, types.float64, types.int64), cache=True)
def pagerank_csr(indptr, indices, weights, damping, tol, max_iter):
    """Power-iteration PageRank.  Inputs must be validated CSR with weights >= 0.

    Parameters
    ----------
    indptr : int64[n+1]; indices : int32[m]; weights : float32[m]
        CSR by source.
    damping : float (0.85); tol : float (1e-6, on the L1 change); max_iter : int (100)

    Returns
    -------
    rank : float32[n]
        Sums to 1 (up to rounding); empty for n = 0.
    iterations : int
        Steps performed.
    """
    n = indptr.shape[0] - 1
    if n <= 0:
        return np.zeros(0, np.float32), 0
    out_w = np.zeros(n, np.float64)
    for j in range(n):
        s = 0.0
        for e in range(indptr[j], indptr[j + 1]):
            s += np.float64(weights[e])
        out_w[j] = s
    r = np.full(n, 1.0 / n)
    nxt = np.empty(n, np.float64)
    it = 0
    while it < max_iter:
        it += 1
        dangling = 0.0
        for j in range(n):
            if out_w[j] <= 0.0:
                dangling += r[j]
        base = (1.0 - damping) / n + damping * dangling / n
        for i in range(n):
            nxt[i] = 0.0
        for j in range(n):
            if out_w[j] <= 0.0:
                continue
            f = damping * r[j] / out_w[j]
            for e in range(indptr[j], indptr[j + 1]):
                nxt[indices[e]] += f * np.float64(weights[e])
        err = 0.0
        for i in range(n):
            x = nxt[i] + base
            err += abs(x - r[i])
            r[i] = x
        if err < tol:
            break
    return r.astype(np.float32), it


def pagerank(indptr, indices, weights, *, damping=0.85, tol=1e-6, max_iter=100, validate=True):
    """Checked entry point for ``pagerank_csr``; returns (rank float32[n], iterations)."""
    indptr = np.ascontiguousarray(indptr, np.int64)
    indices = np.ascontiguousarray(indices, np.int32)
    weights = np.ascontiguousarray(weights, np.float32)
    if validate:
        validate_csr(indptr, indices, indptr.shape[0] - 1)
        if weights.shape[0] != indices.shape[0]:
            raise ValueError("weights must have one entry per edge")
        if weights.shape[0] and not (np.all(np.isfinite(weights)) and weights.min() >= 0):
            raise ValueError("weights must be finite and >= 0")
    return pagerank_csr(indptr, indices, weights, float(damping), float(tol), int(max_iter))
