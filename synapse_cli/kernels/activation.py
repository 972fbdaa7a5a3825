"""Spreading activation, seed 000 section 3.2, eqs. 1-4, over a CSR graph (row = source).

    a_i(0)   = alpha * sim_i for anchors, 0 otherwise                                (1)
    u_i(t+1) = (1 - delta) a_i(t) + sum_j S * w_ji * a_j(t) / fan(j)                 (2)
    û_i(t+1) = max(0, u_i - beta * sum_{k in top-M, u_k > u_i} (u_k - u_i))          (3)
    a_i(t+1) = 1 / (1 + exp(-gamma (û_i - theta)))                                   (4)

Eq. 3 is garbled in the seed's text; the reading implemented here: T_M is the set of the M
highest potentials u among the candidate nodes; *every* candidate i (members of T_M included)
is inhibited by beta times the sum of (u_k - u_i) over the k in T_M with u_k > u_i, and the
result is clamped at 0.  Ties at the M-th place do not matter (only the values enter).

Edge weights: w_ji = weights[e], times exp(-rho * |t_i - t_j|) for TEMPORAL edges (type 0),
with |t_i - t_j| in HOURS (timestamps are ms; rho = 0.01/h gives 0.79 across a day, 0.03 across
a year).  The seed gives no unit for tau; hours keep same-day neighbours strongly linked.
fan(j) = out-degree of j (edge count, zero-weight edges and self loops included).

Eq. 2 is computed as a push over the out-edges of nodes with a_j != 0.  Two candidate sets:
- frontier_only=False (literal seed): Eq. 3-4 apply to every node, so after the first step
  every node fires at least sigmoid(-gamma*theta) (0.076 with the defaults) and pushes.
- frontier_only=True: Eq. 3-4 apply only to nodes the wave has reached (anchors and nodes that
  received a nonzero contribution); the others stay at 0.  Cost is proportional to the reached
  subgraph, not to the whole graph.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types

MS_PER_HOUR = 3_600_000.0
TEMPORAL = 0

_I64_RO = types.Array(types.int64, 1, "C", readonly=True)
_I32_RO = types.Array(types.int32, 1, "C", readonly=True)
_F32_RO = types.Array(types.float32, 1, "C", readonly=True)
_U8_RO = types.Array(types.uint8, 1, "C", readonly=True)
_OUT = types.Tuple((types.Array(types.float32, 1, "C"), types.Array(types.int32, 1, "C")))


@njit(
    _OUT(
        _I64_RO, _I32_RO, _F32_RO, _U8_RO, _I64_RO, _I32_RO, _F32_RO,
        types.float64, types.float64, types.float64, types.float64, types.float64,
        types.int64, types.float64, types.float64, types.int64,
        types.boolean, types.boolean, types.boolean, types.boolean,
    ),
    cache=True,
)
def spread_activation(indptr, indices, weights, edge_type, timestamps_ms, anchors, anchor_sims,
                      alpha, S, delta, rho, beta, M, gamma, theta, T,
                      use_fan, use_inhibition, use_sigmoid, frontier_only):
    """Run T steps of eqs. 2-4 from the anchors (eq. 1).  Inputs must be validated CSR.

    Parameters
    ----------
    indptr : int64[n+1]; indices : int32[m]; weights : float32[m]; edge_type : uint8[m]
        CSR by source: edges of j are indptr[j]..indptr[j+1], destination indices[e].
    timestamps_ms : int64[n]
        Node timestamps, for the temporal weight of type-0 edges.
    anchors : int32[k]; anchor_sims : float32[k]
        Anchor nodes and their cosine to the query; a duplicated anchor keeps its max sim.
    alpha, S, delta, rho, beta, M, gamma, theta, T
        Seed parameters (defaults 1.0, 0.8, 0.5, 0.01/h, 0.15, 7, 5.0, 0.5, 3).
    use_fan, use_inhibition, use_sigmoid : bool
        Ablations: False gives fan(j) = 1; beta = 0 (the clamp at 0 remains); a = û (linear).
    frontier_only : bool
        See the module docstring.

    Returns
    -------
    act : float32[n]
        a(T).
    pred : int32[n]
        For each node, the source that pushed the largest positive contribution to it in the
        last step in which it received one (ties: lower source), -1 if never.  Chains can
        loop (A->B then B->A), so follow them with a visited set and stop at an anchor.
    """
    n = timestamps_ms.shape[0]
    a = np.zeros(n, np.float64)
    u = np.zeros(n, np.float64)
    best_c = np.zeros(n, np.float64)
    best_src = np.full(n, -1, np.int32)
    pred = np.full(n, -1, np.int32)
    is_active = np.zeros(n, np.bool_)
    active = np.empty(n, np.int32)
    n_active = 0
    if frontier_only:
        for r in range(anchors.shape[0]):
            v = anchors[r]
            if not is_active[v]:
                is_active[v] = True
                active[n_active] = v
                n_active += 1
    else:
        for v in range(n):
            is_active[v] = True
            active[v] = v
        n_active = n
    seen = np.zeros(n, np.bool_)
    for r in range(anchors.shape[0]):  # eq. 1
        v = anchors[r]
        s = alpha * np.float64(anchor_sims[r])
        if not seen[v] or s > a[v]:
            a[v] = s
        seen[v] = True
    if not use_inhibition:
        beta = 0.0
    topv = np.empty(max(M, 0), np.float64)
    for _ in range(T):
        n0 = n_active
        for r in range(n0):
            v = active[r]
            u[v] = (1.0 - delta) * a[v]
            best_c[v] = 0.0
            best_src[v] = -1
        for r in range(n0):  # eq. 2 as a push
            j = active[r]
            aj = a[j]
            lo = indptr[j]
            hi = indptr[j + 1]
            if aj == 0.0 or hi == lo:
                continue
            fan = np.float64(hi - lo) if use_fan else 1.0
            tj = timestamps_ms[j]
            for e in range(lo, hi):
                i = indices[e]
                w = np.float64(weights[e])
                if edge_type[e] == TEMPORAL:
                    w = w * np.exp(-rho * (abs(np.float64(timestamps_ms[i] - tj)) / MS_PER_HOUR))
                c = S * w * aj / fan
                if c == 0.0:
                    continue
                if not is_active[i]:
                    is_active[i] = True
                    active[n_active] = i
                    n_active += 1
                    u[i] = 0.0
                    best_c[i] = 0.0
                    best_src[i] = -1
                u[i] += c
                if c > best_c[i] or (c == best_c[i] and c > 0.0 and j < best_src[i]):
                    best_c[i] = c
                    best_src[i] = j
        nm = 0  # eq. 3: the M highest potentials, kept sorted descending in topv[:nm]
        for r in range(n_active):
            x = u[active[r]]
            if nm < M:
                p = nm
                nm += 1
            elif nm > 0 and x > topv[nm - 1]:
                p = nm - 1
            else:
                continue
            while p > 0 and topv[p - 1] < x:
                topv[p] = topv[p - 1]
                p -= 1
            topv[p] = x
        for r in range(n_active):
            v = active[r]
            ui = u[v]
            inh = 0.0
            for q in range(nm):
                if topv[q] > ui:
                    inh += topv[q] - ui
                else:
                    break
            uh = max(0.0, ui - beta * inh)
            if use_sigmoid:  # eq. 4
                a[v] = 1.0 / (1.0 + np.exp(-gamma * (uh - theta)))
            else:
                a[v] = uh
            if best_src[v] >= 0:
                pred[v] = best_src[v]
    return a.astype(np.float32), pred


def validate_csr(indptr, indices, n_nodes: int) -> None:
    """Raise ValueError unless (indptr, indices) is a CSR graph over n_nodes nodes."""
    if indptr.ndim != 1 or indptr.shape[0] != n_nodes + 1:
        raise ValueError("indptr must have n_nodes + 1 entries")
    if indptr[0] != 0 or indptr[-1] != indices.shape[0] or np.any(np.diff(indptr) < 0):
        raise ValueError("indptr must start at 0, be non-decreasing and end at n_edges")
    if indices.shape[0] and (indices.min() < 0 or indices.max() >= n_nodes):
        raise ValueError("edge destination out of range")


def activate(indptr, indices, weights, edge_type, timestamps_ms, anchors, anchor_sims, *,
             alpha=1.0, S=0.8, delta=0.5, rho=0.01, beta=0.15, M=7, gamma=5.0, theta=0.5, T=3,
             use_fan=True, use_inhibition=True, use_sigmoid=True, frontier_only=False,
             validate=True):
    """Checked entry point for ``spread_activation`` (converts dtypes, validates the CSR)."""
    indptr = np.ascontiguousarray(indptr, np.int64)
    indices = np.ascontiguousarray(indices, np.int32)
    weights = np.ascontiguousarray(weights, np.float32)
    edge_type = np.ascontiguousarray(edge_type, np.uint8)
    timestamps_ms = np.ascontiguousarray(timestamps_ms, np.int64)
    anchors = np.ascontiguousarray(anchors, np.int32)
    anchor_sims = np.ascontiguousarray(anchor_sims, np.float32)
    n = timestamps_ms.shape[0]
    if validate:
        validate_csr(indptr, indices, n)
        m = indices.shape[0]
        if weights.shape[0] != m or edge_type.shape[0] != m:
            raise ValueError("weights and edge_type must have one entry per edge")
        if anchors.shape != anchor_sims.shape:
            raise ValueError("anchors and anchor_sims must have the same length")
        if anchors.shape[0] and (anchors.min() < 0 or anchors.max() >= n):
            raise ValueError("anchor out of range")
    return spread_activation(indptr, indices, weights, edge_type, timestamps_ms, anchors,
                             anchor_sims, float(alpha), float(S), float(delta), float(rho),
                             float(beta), int(M), float(gamma), float(theta), int(T),
                             bool(use_fan), bool(use_inhibition), bool(use_sigmoid),
                             bool(frontier_only))
