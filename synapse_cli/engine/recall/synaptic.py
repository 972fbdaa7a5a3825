"""`recall --mode synaptic`: SynapticRAG (seed 001), temporal association + stimulus propagation
+ dynamic-tau leaky integrate-and-fire.

1. The query is node X_0 with stimulus S = 1 and a one-spike train at `now`.
2. Layer 1: every record whose cosine to the query exceeds cos_th. A child c of parent p receives
   S_c = S_p * P(p, c) (eq. 7), P = p_scale * T(p, c) * cos(p, c) (eq. 6, appendix C.1), with T
   the DTW temporal association of the two spike trains (eqs. 1-5, kernels/dtw.py).
3. Layer i+1 (eqs. 9-14): parents are the nodes of layer i with S > stim_th that did not fire;
   children are the records of no earlier layer with cosine > cos_th to a parent; a child
   reached by several parents takes the strongest, S_p * P(p, c) (eq. 12). Stops when a layer
   has no parent. `propagation = "original"` scans every record once per parent (O(n) per
   parent); `"centroid"` (appendix D, the default) scans once per layer with the normalised
   mean of the parents' vectors and then picks each candidate's parent by eq. 12 among all
   parents.
4. Every record's membrane potential is replayed from its spike train with the stimulus it got
   now as the last input (eqs. 16-18, kernels/lif.py); results are ranked by it and flagged
   `fired` when it reaches v_th. Recall says "no record" when no record reached layer 1.

Time: spikes are milliseconds; the seed counts dialogue turns. One `time_unit_ms` is one of the
seed's time units (t before t_scale), so tau_init = 43.07 units and the read-out one unit after
an input keep the seed's meaning at one turn per unit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import graphview
from ..store import Store
from .signals import result_row



@dataclass
class SynapticConfig:
    # Seed 001 Table 4 (SMRCs, optimised there with text-embedding-3-large). The text of
    # section 4.4 gives v_th = 0.099; the table, which the issue names, gives 0.01.
    cos_th: float = 0.26
    stim_th: float = 0.04
    v_th: float = 0.01
    tau_init: float = 43.07
    tau_scale: float = 2.70
    t_scale: float = 7.93
    p_scale: float = 0.46
    v_rest: float = 2.90
    i_rest: float = -7.13
    # One seed time unit (a dialogue turn) in milliseconds of spike time: about a minute per
    # conversational turn.
    time_unit_ms: int = 60_000
    # Input strength of a stored spike when a node's LIF state is replayed. The store keeps
    # spike times, not the strengths that arrived, so by default stored spikes shape tau
    # (eq. 18) and the temporal association (eqs. 1-5) but add no input: the potential is
    # the current stimulus integrated by the node's own tau. Giving them the seed's initial
    # s_i = 1 (section 3.1) lets every recent spike outweigh any current stimulus (SMRCs
    # R-precision 9 instead of 41 on the first 10 sections, bench/quality/smrcs_recall.py).
    spike_weight: float = 0.0
    # "centroid" (appendix D): one similarity scan per layer; "original" (eqs. 10-13): one per
    # parent, O(n) each. Same SMRCs R-precision within 0.5 point (44.4 / 44.9), but with 50
    # records stimulated in a 100k store 7.5 ms against 54 ms (bench/speed/synaptic_speed.py).
    propagation: str = "centroid"
    # Ablations of seed 001 Table 3 (Python API and bench only): T = 1 ("w/o temporal
    # integration"), tau fixed at tau_init ("w/o dynamic time constant").
    temporal: bool = True
    dynamic_tau: bool = True

    @classmethod
    def from_settings(cls, settings) -> "SynapticConfig":
        """From resolved settings (engine/config.py, section [synaptic])."""
        return cls(**{f: settings[f"synaptic.{f}"] for f in cls.__dataclass_fields__
                      if f"synaptic.{f}" in settings.values})


@dataclass
class Propagation:
    """What the stimulus did, per record position (n = number of records)."""
    stimulus: np.ndarray    # f64 [n], 0 where nothing arrived
    parent: np.ndarray      # i64 [n], position of the node that stimulated it; -1 = the query
    layer: np.ndarray       # i32 [n], 0 = never reached
    temporal: np.ndarray    # f64 [n], T(parent, node) on the edge that delivered the stimulus
    potential: np.ndarray   # f64 [n], membrane potential (0 for filtered records)
    fired: np.ndarray       # bool [n]


def _trains(arrays: graphview.RecallArrays, sc: SynapticConfig, now_ms: int):
    """Spike trains in scaled time units relative to now, with the query appended as node n;
    (indptr, times, taus) where taus are tau_scale * tau_X (eq. 18 after each train)."""
    from ...kernels.lif import node_taus

    indptr, t_ms = arrays.spike_trains()
    n = len(indptr) - 1
    key = ("synaptic_taus", sc.time_unit_ms, sc.t_scale, sc.tau_init)
    taus = arrays.cache.get(key)
    if not sc.dynamic_tau:
        taus = np.full(n, float(sc.tau_init))
    elif taus is None:  # intervals do not depend on now: once per snapshot
        rel = (t_ms - t_ms[indptr[:-1]].repeat(np.diff(indptr))) * (sc.t_scale / sc.time_unit_ms)
        taus = node_taus(indptr, rel.astype(np.float64), float(sc.tau_init), np.empty(n))
        arrays.cache[key] = taus
    times = np.empty(len(t_ms) + 1)
    times[:-1] = (t_ms - now_ms) * (sc.t_scale / sc.time_unit_ms)
    times[-1] = 0.0
    indptr_q = np.append(indptr, indptr[-1] + 1).astype(np.int64)
    taus_q = np.append(taus, sc.tau_init) * sc.tau_scale
    return indptr_q, times, taus_q


def propagate(store: Store, arrays: graphview.RecallArrays, sim: np.ndarray, cfg, sc:
              SynapticConfig, now_ms: int) -> Propagation:
    """Stimulus propagation (eqs. 6-15) and the LIF read-out (eqs. 16-18) for one query.
    `sim` is the query's cosine per record position, -inf where the scan filtered it out."""
    from ...kernels.dtw import pair_scores
    from ...kernels.lif import membrane
    from .scan import scan_records

    n = len(sim)
    passed = np.isfinite(sim)
    indptr, times, taus = _trains(arrays, sc, now_ms)
    stim = np.zeros(n)
    parent = np.full(n, -1, np.int64)
    layer = np.zeros(n, np.int32)
    temporal = np.zeros(n)
    fired = np.zeros(n, bool)

    def deliver(src: np.ndarray, dst: np.ndarray, cos: np.ndarray, s_src: np.ndarray):
        """Stimulus S_src * p_scale * T * cos per (src, dst) pair, and its T."""
        if sc.temporal:
            t = pair_scores(indptr, times, taus, src, dst, np.empty(len(dst)))
        else:
            t = np.ones(len(dst))
        return s_src * sc.p_scale * t * cos, t

    def lif(nodes: np.ndarray):
        v, f = np.empty(len(nodes)), np.empty(len(nodes), bool)
        membrane(indptr, times, nodes, stim[nodes], 0.0, float(sc.tau_init),
                 float(sc.tau_scale), float(sc.v_th), float(sc.v_rest), float(sc.i_rest),
                 float(sc.spike_weight), bool(sc.dynamic_tau), v, f)
        return v, f

    # layer 1: the query (node n, S = 1) stimulates every record above cos_th
    front = np.flatnonzero(passed & (sim > sc.cos_th)).astype(np.int64)
    s1, t1 = deliver(np.full(len(front), n, np.int64), front, sim[front].astype(np.float64),
                     1.0)
    stim[front], temporal[front], layer[front] = s1, t1, 1
    seen = np.zeros(n, bool)      # nodes of layers 0..i (eq. 10 excludes them)
    seen[front] = True
    depth = 1
    while len(front):
        _, f = lif(front)
        fired[front] = f
        parents = front[(stim[front] > sc.stim_th) & ~f]           # eq. 9
        if not len(parents):
            break
        best = np.zeros(n)
        best_parent = np.full(n, -1, np.int64)
        best_t = np.zeros(n)
        pvec = graphview.unit_vectors(store, parents)
        if sc.propagation == "centroid":                          # appendix D
            centroid = pvec.mean(axis=0)
            centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
            csim, _, _ = scan_records(store, centroid, cfg, now_ms, arrays)
            cand = np.flatnonzero(np.isfinite(csim) & ~seen & (csim > sc.cos_th))
            if len(cand):
                cand_vec = graphview.unit_vectors(store, cand)
                cos = (pvec @ cand_vec.T).astype(np.float64)  # [parents, cand]
                src = np.repeat(parents, len(cand))
                dst = np.tile(cand, len(parents))
                s, t = deliver(src, dst, cos.ravel(), np.repeat(stim[parents], len(cand)))
                s, t = s.reshape(len(parents), len(cand)), t.reshape(len(parents), len(cand))
                arg = s.argmax(axis=0)                              # eq. 12
                cols = np.arange(len(cand))
                best[cand], best_parent[cand] = s[arg, cols], parents[arg]
                best_t[cand] = t[arg, cols]
        else:
            for p, v in zip(parents.tolist(), pvec):                # eqs. 10-13
                psim, _, _ = scan_records(store, v, cfg, now_ms, arrays)
                cand = np.flatnonzero(np.isfinite(psim) & ~seen & (psim > sc.cos_th))
                if not len(cand):
                    continue
                s, t = deliver(np.full(len(cand), p, np.int64), cand,
                               psim[cand].astype(np.float64), stim[p])
                better = s > best[cand]
                c = cand[better]
                best[c], best_parent[c], best_t[c] = s[better], p, t[better]
        front = np.flatnonzero(best > 0).astype(np.int64)          # eq. 14
        depth += 1
        stim[front], parent[front], temporal[front] = best[front], best_parent[front], \
            best_t[front]
        layer[front] = depth
        seen[front] = True
    potential = np.zeros(n)
    live = np.flatnonzero(passed).astype(np.int64)
    if len(live):
        v, f = lif(live)
        potential[live], fired[live] = v, f
    return Propagation(stim, parent, layer, temporal, potential, fired)


def stimulus_path(pos: int, prop: Propagation, ids: np.ndarray) -> list[dict]:
    """query -> ... -> node: each step names the record, the stimulus it received and the
    temporal score of the edge that delivered it (eq. 15)."""
    path = []
    while pos >= 0 and prop.layer[pos] > 0 and len(path) <= len(ids):
        path.append({"id": int(ids[pos]), "stimulus": round(float(prop.stimulus[pos]), 6),
                     "temporal": round(float(prop.temporal[pos]), 6)})
        pos = int(prop.parent[pos])
    return path[::-1]


def recall(store: Store, query: str, query_vec: np.ndarray, cfg, arrays: graphview.RecallArrays,
           now_ms: int) -> dict:
    """The synaptic mode of recall.recall(): same JSON shape, ranked by membrane potential."""
    from .scan import scan_records, top as _top

    t0 = time.perf_counter()
    sc = getattr(cfg, "synaptic", None) or SynapticConfig()
    sim, dec, _ = scan_records(store, query_vec, cfg, now_ms, arrays)
    prop = propagate(store, arrays, sim, cfg, sc, now_ms)
    score = np.where(np.isfinite(sim), prop.potential, -np.inf)
    top = _top(score, cfg.k, 0.0)
    stimulated = np.flatnonzero(prop.layer > 0)
    rejected = len(stimulated) == 0 or len(top) == 0
    confidence = 0.0 if rejected else float(prop.potential[top[0]])
    results = []
    if not rejected:
        bodies = store.bodies(arrays.ids[top])
        for pos, body in zip(top.tolist(), bodies):
            r = result_row(arrays, pos, body, prop.potential[pos], {
                "semantic": round(float(sim[pos]), 6),
                "stimulus": round(float(prop.stimulus[pos]), 6),
                "temporal": round(float(prop.temporal[pos]), 6),
                "membrane_potential": round(float(prop.potential[pos]), 9),
                "fired": bool(prop.fired[pos]), "layer": int(prop.layer[pos]),
                "decay": round(float(dec[pos]), 6)}, digits=9)
            if cfg.explain:
                r["path"] = stimulus_path(pos, prop, arrays.ids)
            results.append(r)
    return {"query": query, "mode": "synaptic", "rejected": bool(rejected),
            "confidence": round(confidence, 9), "results": results,
            "stimulated": int(len(stimulated)),
            "fired": int((prop.fired & (prop.potential > 0)).sum()),
            "stimulated_ids": [int(i) for i in arrays.ids[stimulated]],
            "elapsed_ms": round((time.perf_counter() - t0) * 1000, 3)}
