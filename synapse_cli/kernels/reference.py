"""Plain-numpy twins of the numba kernels, for tests.  Same inputs and outputs, no numba.

Written for clarity over speed: whole-array operations, with the scoring rules taken from
synapse_cli.kernels.decay_rules.
"""
from __future__ import annotations

import numpy as np

from synapse_cli.kernels.decay_rules import (
    FLAG_TOMBSTONE,
    TYPE_SHIFT,
    effective_decay_array,
)
from synapse_cli.kernels.activation import MS_PER_HOUR, TEMPORAL

HEADER_BYTES = {1: 32, 2: 48, 3: 64}


def _field(records, off, dtype):
    size = np.dtype(dtype).itemsize
    return np.ascontiguousarray(records[:, off:off + size]).view(dtype).reshape(-1)


def scan_scores(records, header_version, dim, query, now_ms, type_mask, t_min, t_max,
                tag_query, out_sim, out_decay, out_importance, inv_norm=None,
                inv_norm_ready=False):
    """Reference for header_scan.scan_scores (the norms are always computed here)."""
    hb = HEADER_BYTES[header_version]
    ts = _field(records, 0, "<i8")
    tags = _field(records, 8, "<u8")
    importance = _field(records, 20, "<f4")
    recall = _field(records, 24, "<u4")
    flags = records[:, 31].astype(np.int64)
    arousal = records[:, 32] if header_version >= 2 else np.zeros(len(records), np.uint8)
    mtype = (flags >> TYPE_SHIFT) & 3
    keep = ((flags & FLAG_TOMBSTONE) == 0) & (((int(type_mask) >> mtype) & 1) == 1)
    keep &= (ts >= t_min) & (ts <= t_max)
    keep &= (tags & np.uint64(tag_query)) == np.uint64(tag_query)
    vec = records[:, hb:hb + dim].view(np.int8).astype(np.float32)
    dot = vec @ np.asarray(query, np.float32)
    sq = (vec.astype(np.int64) ** 2).sum(axis=1).astype(np.float64)
    inv = np.where(sq > 0, 1.0 / np.sqrt(np.where(sq > 0, sq, 1)), 0).astype(np.float32)
    sim = (dot * inv).astype(np.float32)
    if inv_norm is not None:
        inv_norm[:] = inv
    dec = effective_decay_array(now_ms - ts, recall, arousal, flags)
    out_sim[:] = np.where(keep, sim, -np.inf)
    out_decay[:] = np.where(keep, dec, 0)
    out_importance[:] = np.where(keep, importance, 0)
    return int(keep.sum())


def top_k(scores, k, floor=-np.inf):
    """Reference for ranking.top_k."""
    scores = np.asarray(scores)
    idx = np.flatnonzero(scores > floor)
    order = np.lexsort((idx, -scores[idx].astype(np.float64)))
    return idx[order[:k]].astype(np.int64)


def fused_scores(sim, act, pr, bm25, decay, importance, lam_sim, lam_act, lam_pr, lam_bm25,
                 lam_decay, minmax, use_decay, out):
    """Reference for ranking.fused_scores."""
    s = np.asarray(sim, np.float64)
    ok = np.isfinite(s)
    if minmax and ok.any():
        lo, hi = s[ok].min(), s[ok].max()
        s = (s - lo) / (hi - lo) if hi > lo else np.zeros_like(s)
    top = max(float(np.max(bm25, initial=0.0)), 0.0)
    b = bm25 / top if top > 0 else np.zeros_like(bm25)
    d = np.asarray(decay, np.float64) if use_decay else np.ones(len(s))
    imp = np.minimum(np.asarray(importance, np.float64), 10.0) / 10.0
    score = (lam_sim * s + lam_act * np.asarray(act, np.float64)
             + lam_pr * np.asarray(pr, np.float64) + lam_bm25 * b + lam_decay * d * imp)
    out[:] = np.where(ok, score, -np.inf)


def _edge_weights(indptr, indices, weights, edge_type, timestamps_ms, rho):
    src = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    w = weights.astype(np.float64)
    dt = np.abs((timestamps_ms[indices] - timestamps_ms[src]).astype(np.float64)) / MS_PER_HOUR
    w = np.where(edge_type == TEMPORAL, w * np.exp(-rho * dt), w)
    return src, w


def spread_activation(indptr, indices, weights, edge_type, timestamps_ms, anchors, anchor_sims,
                      alpha, S, delta, rho, beta, M, gamma, theta, T,
                      use_fan, use_inhibition, use_sigmoid, frontier_only):
    """Reference for activation.spread_activation (same positional arguments)."""
    n = len(timestamps_ms)
    src, w = _edge_weights(indptr, indices, weights, edge_type, timestamps_ms, rho)
    dst = indices.astype(np.int64)
    deg = np.diff(indptr).astype(np.float64)
    fan = deg[src] if use_fan else np.ones(len(src))
    a = np.zeros(n)
    if len(anchors):
        a[anchors] = -np.inf
        np.maximum.at(a, anchors, alpha * anchor_sims.astype(np.float64))
    active = np.ones(n, bool) if not frontier_only else np.zeros(n, bool)
    active[anchors] = True
    beta = beta if use_inhibition else 0.0
    pred = np.full(n, -1, np.int32)
    for _ in range(T):
        push = (a[src] != 0) & active[src]
        c = S * w * a[src] / fan
        push &= c != 0
        u = (1 - delta) * a + np.bincount(dst[push], weights=c[push], minlength=n)
        active[dst[push]] = True
        # predecessor: largest positive contribution, ties by lower source
        pos = push & (c > 0)
        if pos.any():
            order = np.lexsort((src[pos], -c[pos], dst[pos]))
            d_sorted = dst[pos][order]
            first = np.r_[True, d_sorted[1:] != d_sorted[:-1]]
            pred[d_sorted[first]] = src[pos][order][first]
        top = np.sort(u[active])[::-1][:max(M, 0)]
        inh = np.clip(top[None, :] - u[:, None], 0, None).sum(axis=1)
        uh = np.maximum(0.0, u - beta * inh)
        new = 1.0 / (1.0 + np.exp(-gamma * (uh - theta))) if use_sigmoid else uh
        a = np.where(active, new, 0.0)
    return a.astype(np.float32), pred


def pagerank_csr(indptr, indices, weights, damping, tol, max_iter):
    """Reference for pagerank.pagerank_csr."""
    n = len(indptr) - 1
    if n <= 0:
        return np.zeros(0, np.float32), 0
    src = np.repeat(np.arange(n), np.diff(indptr))
    w = weights.astype(np.float64)
    out_w = np.bincount(src, weights=w, minlength=n)
    dangling = out_w <= 0
    r = np.full(n, 1.0 / n)
    it = 0
    while it < max_iter:
        it += 1
        base = (1 - damping) / n + damping * r[dangling].sum() / n
        f = np.where(dangling, 0.0, damping * r / np.where(dangling, 1.0, out_w))
        nxt = np.bincount(indices, weights=f[src] * w, minlength=n) + base
        err = np.abs(nxt - r).sum()
        r = nxt
        if err < tol:
            break
    return r.astype(np.float32), it


# ---------------------------------------------------------------- seed 001 (synaptic mode)

def dtw_pair_scores(indptr, times, taus, src, dst):
    """Reference for dtw.pair_scores: eqs. 1-5 with the whole W and L matrices."""
    out = np.empty(len(src))
    for k, (a, b) in enumerate(zip(src, dst)):
        ta, tb = times[indptr[a]:indptr[a + 1]], times[indptr[b]:indptr[b + 1]]
        if not len(ta) or not len(tb):
            out[k] = 0.5
            continue
        W = np.exp(-np.abs(ta[:, None] - tb[None, :]) / (0.5 * (taus[a] + taus[b])))
        L = np.zeros_like(W)
        L[:, 0] = np.cumsum(W[:, 0])
        L[0, :] = np.cumsum(W[0, :])
        for i in range(1, len(ta)):
            for j in range(1, len(tb)):
                L[i, j] = W[i, j] + max(L[i - 1, j], L[i, j - 1], L[i - 1, j - 1])
        out[k] = 1 / (1 + np.exp(-L[-1, -1]))
    return out


def lif_node_taus(indptr, times, tau_init):
    """Reference for lif.node_taus: tau_init + sum of tanh(interval / 2) (eq. 18)."""
    return np.array([tau_init + np.tanh(0.5 * np.maximum(np.diff(times[lo:hi]), 0)).sum()
                     for lo, hi in zip(indptr[:-1], indptr[1:])])


def lif_membrane(indptr, times, nodes, stim, now, tau_init, tau_scale, v_th, v_rest, i_rest,
                 spike_weight, dynamic=True):
    """Reference for lif.membrane, written as an event list per node: (time, strength) for
    each stored spike, then (now, stim) when stimulated now."""
    out_v, out_f = np.zeros(len(nodes)), np.zeros(len(nodes), bool)
    for k, x in enumerate(nodes):
        events = [(t, spike_weight, False) for t in times[indptr[x]:indptr[x + 1]]]
        if stim[k] != 0:
            events.append((now, stim[k], True))
        tau, v, i = tau_init, 0.0, 0.0
        t_state = events[0][0] if events else now
        prev = None
        for t, w, current in events:
            if prev is not None and dynamic:
                tau += np.tanh(0.5 * max(t - prev, 0.0))
            prev = t
            T = tau_scale * tau
            g = max(t - t_state, 0.0)
            v, i = (v + g * i / T) * np.exp(-g / T), i * np.exp(-g / T)
            i += w / T
            t_state = max(t, t_state)
            rv = (v + i / T) * np.exp(-1 / T)  # one time unit after the input
            if current:
                out_v[k], out_f[k] = rv, rv >= v_th
            elif rv >= v_th:
                v, i, t_state = v_rest, i_rest, t_state + 1.0
        if stim[k] == 0:
            T = tau_scale * tau
            g = max(now - t_state, 0.0)
            out_v[k] = (v + g * i / T) * np.exp(-g / T)
            out_f[k] = out_v[k] >= v_th
    return out_v, out_f
