"""Fast LoCoMo sweep of recall fusion and activation choices, in-sample and leave-one-conversation-out.

    python bench/tune/locomo_tune.py [--data ../shared/data] [--stores plain|cons|both] [--quick]

Uses the stores cached by bench/tune/locomo_build.py (bench/out/locomo_stores/, gitignored). For each
conversation and store variant, every question is embedded once (cached) and the per-record
signals that do not depend on activation parameters are computed once with the engine's own
functions (`scan.scan_records`: cosine, decay, importance; `recall._bm25`; PageRank as
`compute_signals` does it); spreading activation is the engine kernel, run once per question
per activation-parameter set. Fusion weights and structural choices are then swept in numpy.

Metric as bench/quality/locomo_recall.py: evidence recall@k (gold dia_ids in the top k / gold), mean
over the answerable questions of categories 1-4, question-weighted; the gate is off here
(it rejects only queries with no anchor; see locomo_recall.py for the gated numbers).

Selection: every configuration of a stage is scored on every question; "in-sample" is the best
configuration on all 5 conversations, "LOCO" picks the best configuration on 4 conversations and
scores it on the 5th, for each of the 5 folds, and pools the held-out questions. A stage's
winner is carried to the next stage only through the in-sample choice; the LOCO number says how
much of its gain survives selection. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "quality"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

STORES = ROOT / "bench" / "out" / "locomo_stores"
CACHE = ROOT / "bench" / "out" / "locomo_tune_cache"
CATS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10, 30)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data
@dataclasses.dataclass
class Conv:
    sid: str
    variant: str
    n: int
    sim: np.ndarray        # [q, n] cosine (-1 where filtered)
    bm25: np.ndarray       # [q, n]
    decay: np.ndarray      # [q, n]
    imp: np.ndarray        # [n]
    pr: np.ndarray         # [n] PageRank normalised to max 1 (0 without graph)
    episodic: np.ndarray   # [n] bool
    session: np.ndarray    # [n] int (-1 for non-episodic)
    ts: np.ndarray         # [n] i64
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    etypes: np.ndarray
    gold: np.ndarray       # [q, n] number of gold dia_ids each record carries
    ngold: np.ndarray      # [q]
    cats: np.ndarray       # [q]
    vecs: np.ndarray       # [n, d] unit record vectors (for episode kNN edges)


def load_conv(conv: dict, variant: str, embedder) -> Conv:
    from locomo_recall import answerable, turns_of
    from collections import Counter, defaultdict

    from store_format import flags as fl
    from synapse_cli.engine import graphview
    from synapse_cli.engine.ingest import md5_of
    from synapse_cli.engine.recall import RecallConfig
    from synapse_cli.engine.recall.scan import scan_records as _scan
    from synapse_cli.engine.recall.signals import _bm25, _norm
    from synapse_cli.engine.store import Store
    from synapse_cli.kernels.pagerank import pagerank

    sid = conv["sample_id"]
    CACHE.mkdir(parents=True, exist_ok=True)
    items = turns_of(conv, sid)
    known = {it.dia_id for it in items}
    alias = defaultdict(list)
    for it in items:
        alias[md5_of(it.text)].append(it.dia_id)
    skipped: Counter = Counter()
    qas = [(qa["question"], cat, gold) for qa, cat, gold in answerable(conv, known, skipped)]
    qfile = CACHE / f"{sid}_qvecs.npy"
    if qfile.exists():
        qvecs = np.load(qfile)
    else:
        qvecs = np.asarray(embedder().encode([q for q, _, _ in qas]), np.float32)
        np.save(qfile, qvecs)
    store = Store.open(STORES / sid / variant / "store")
    arrays = graphview.build(store)
    n = arrays.n
    now_ms = max(it.timestamp_ms for it in items)
    sfile = CACHE / f"{sid}_{variant}_signals.npz"
    if sfile.exists():
        z = np.load(sfile)
        sim, bm, dec, imp = z["sim"], z["bm25"], z["decay"], z["imp"]
    else:
        cfg = RecallConfig()
        sim = np.zeros((len(qas), n), np.float32)
        bm = np.zeros((len(qas), n), np.float32)
        dec = np.zeros((len(qas), n), np.float32)
        for i, ((q, _, _), qv) in enumerate(zip(qas, qvecs)):
            s, d, im = _scan(store, qv, cfg, now_ms, arrays)
            passed = np.isfinite(s)
            sim[i] = np.where(passed, s, -1.0)
            dec[i] = d
            bm[i] = _bm25(store, q, arrays, passed, tags=())
        imp = np.asarray(im, np.float32)
        np.savez(sfile, sim=sim, bm25=bm, decay=dec, imp=imp)
    pr = np.zeros(n, np.float32)
    if len(arrays.indices):
        p, _ = pagerank(arrays.indptr, arrays.indices, arrays.weights, validate=False)
        pr = _norm(np.asarray(p, np.float64)).astype(np.float32)
    episodic = fl.memory_type_code(arrays.flags) == fl.MemoryType.EPISODIC
    gold = np.zeros((len(qas), n), np.int16)
    session = np.full(n, -1, np.int64)
    dia_of = {}
    for pos, rid in enumerate(arrays.ids.tolist()):
        body = store.body(rid)
        if episodic[pos] and body.get("md5"):
            dia_of[pos] = alias[bytes.fromhex(body["md5"])]
            session[pos] = int(str(body["session"]).rsplit("_", 1)[1])
    for qi, (_, _, g) in enumerate(qas):
        gs = set(g)
        for pos, dias in dia_of.items():
            c = len(gs.intersection(dias))
            if c:
                gold[qi, pos] = c
    vecs = np.concatenate([np.asarray(sg.vectors, np.float32) for sg in store.segments])
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    store.close()
    return Conv(sid, variant, n, sim, bm, dec, imp, pr, episodic, session,
                np.asarray(arrays.timestamps, np.int64), arrays.indptr, arrays.indices,
                arrays.weights, arrays.types, gold,
                np.array([len(g) for _, _, g in qas], np.float64),
                np.array([c for _, c, _ in qas], np.int64), vecs)


# ----------------------------------------------------------------------------- graph variants
def graph_of(c: Conv, cross_session: bool, semantic_edges: bool, knn: int = 0,
             hub_cap: int = 0):
    """CSR of the conversation, optionally without edges touching semantic nodes, with
    TEMPORAL edges joining the last turn of each session to the first turn of the next, and
    with ASSOCIATION edges (weight = cosine) from each episode to its `knn` most similar
    episodes of other sessions. `hub_cap` > 0: a semantic node with more than that many edges
    (a speaker, "LGBTQ") is left out of the graph: linked to everything, it tells nothing
    (the graph's analogue of a low idf)."""
    from store_format import graph_files as gf

    counts = np.diff(c.indptr)
    src = np.repeat(np.arange(c.n), counts)
    dst = c.indices.astype(np.int64)
    w = c.weights.astype(np.float32)
    t = c.etypes.astype(np.uint8)
    if not semantic_edges:
        keep = c.episodic[src] & c.episodic[dst]
        src, dst, w, t = src[keep], dst[keep], w[keep], t[keep]
    if hub_cap:
        hub = ~c.episodic & (counts > hub_cap)
        keep = ~hub[src] & ~hub[dst]
        src, dst, w, t = src[keep], dst[keep], w[keep], t[keep]
    if cross_session:
        sess = sorted(set(c.session[c.session >= 0].tolist()))
        add_s, add_d = [], []
        for a, b in zip(sess, sess[1:]):
            last = np.flatnonzero(c.session == a).max()
            first = np.flatnonzero(c.session == b).min()
            add_s += [last, first]
            add_d += [first, last]
        src = np.concatenate([src, add_s])
        dst = np.concatenate([dst, add_d])
        w = np.concatenate([w, np.ones(len(add_s), np.float32)])
        t = np.concatenate([t, np.full(len(add_s), gf.TEMPORAL, np.uint8)])
    if knn:
        ep = np.flatnonzero(c.episodic)
        S = c.vecs[ep] @ c.vecs[ep].T
        S[c.session[ep][:, None] == c.session[ep][None, :]] = -1
        nb = np.argsort(-S, axis=1, kind="stable")[:, :knn]
        a_s = np.repeat(ep, knn)
        a_d = ep[nb.ravel()]
        a_w = np.maximum(S[np.repeat(np.arange(len(ep)), knn), nb.ravel()], 0)
        src = np.concatenate([src, a_s, a_d])
        dst = np.concatenate([dst, a_d, a_s])
        w = np.concatenate([w, a_w, a_w]).astype(np.float32)
        t = np.concatenate([t, np.full(2 * len(a_s), gf.ASSOCIATION, np.uint8)])
        # an edge found from both ends is kept once
        key = (src.astype(np.int64) * (c.n + 1) + dst) * 4 + t
        _, first = np.unique(key, return_index=True)
        first.sort()
        src, dst, w, t = src[first], dst[first], w[first], t[first]
    order = np.argsort(src, kind="stable")
    src, dst, w, t = src[order], dst[order], w[order], t[order]
    indptr = np.zeros(c.n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=c.n), out=indptr[1:])
    return (indptr, np.ascontiguousarray(dst, np.int32), np.ascontiguousarray(w, np.float32),
            np.ascontiguousarray(t, np.uint8))


def pagerank_of(c: Conv, g) -> np.ndarray:
    from synapse_cli.engine.recall.signals import _norm
    from synapse_cli.kernels.pagerank import pagerank

    if not len(g[1]):
        return np.zeros(c.n, np.float32)
    p, _ = pagerank(g[0], g[1], g[2], validate=False)
    return _norm(np.asarray(p, np.float64)).astype(np.float32)


def top_idx(x: np.ndarray, valid: np.ndarray, k: int) -> np.ndarray:
    """Engine `_top`: the k best valid positions, score desc then lower position."""
    cand = np.nonzero(valid)[0]
    order = np.lexsort((cand, -x[cand]))
    return cand[order[:k]]


EXCLUDE: set = set()  # structural choices left out of the search (--exclude)

SEED_ACT = dict(anchors_k=10, anchor_min_sim=0.2, anchor_energy="sim", alpha=1.0, S=0.8,
                delta=0.5, rho=0.01, beta=0.15, M=7, gamma=5.0, theta=0.5, T=3, fan=True,
                sigmoid=True, cross_session=False, semantic_edges=True)


def activation(c: Conv, p: dict, cache: dict) -> np.ndarray:
    """[q, n] activation for the activation-parameter set p (engine kernel, frontier_only)."""
    from synapse_cli.kernels.activation import spread_activation

    key = (c.sid, c.variant, tuple(sorted(p.items())))
    if key in cache:
        return cache[key]
    gk = (c.sid, c.variant, "graph", p["cross_session"], p["semantic_edges"], p.get("knn", 0),
          p.get("hub_cap", 0))
    if gk not in cache:
        cache[gk] = graph_of(c, p["cross_session"], p["semantic_edges"], p.get("knn", 0),
                             p.get("hub_cap", 0))
    g = cache[gk]
    out = np.zeros((len(c.cats), c.n), np.float32)
    for qi in range(len(c.cats)):
        sim, bm = c.sim[qi].astype(np.float64), c.bm25[qi].astype(np.float64)
        passed = sim > -1
        dense = top_idx(sim, passed, p["anchors_k"])
        lex = top_idx(bm, passed & (bm > 0), p["anchors_k"])
        anchors = np.union1d(dense, lex)
        anchors = anchors[sim[anchors] >= p["anchor_min_sim"]]
        if p["anchor_energy"] == "sim":
            e = np.maximum(sim[anchors], 0)
        else:  # "fused": each anchor's energy = its own trigger scores, cosine + normalised BM25
            top = bm.max() if bm.max() > 0 else 1.0
            e = 0.5 * (np.maximum(sim[anchors], 0) + bm[anchors] / top)
        a, _ = spread_activation(g[0], g[1], g[2], g[3], c.ts, anchors.astype(np.int32),
                                 e.astype(np.float32), p["alpha"], p["S"], p["delta"], p["rho"],
                                 p["beta"], p["M"], p["gamma"], p["theta"], p["T"], p["fan"],
                                 p["beta"] > 0, p["sigmoid"], True)
        out[qi] = np.where(passed, a, 0)
    cache[key] = out
    return out


# ----------------------------------------------------------------------------- fusion
def ranks(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """1-based rank of each record by x (desc, ties by position); invalid -> inf."""
    xx = np.where(valid, x, -np.inf)
    order = np.argsort(-xx, axis=1, kind="stable")
    r = np.empty_like(order, dtype=np.float64)
    np.put_along_axis(r, order, np.arange(1, x.shape[1] + 1, dtype=np.float64)[None, :].repeat(
        x.shape[0], 0), axis=1)
    return np.where(valid, r, np.inf)


def score(c: Conv, act: np.ndarray, f: dict, pr: np.ndarray) -> np.ndarray:
    sim = c.sim.astype(np.float64)
    passed = sim > -1
    bmax = c.bm25.max(axis=1, keepdims=True)
    bm = np.where(bmax > 0, c.bm25 / np.where(bmax > 0, bmax, 1), 0)
    hdr = (c.decay * np.minimum(c.imp, 10.0) / 10.0)
    kind = f["fusion"]
    if kind == "linear":
        return (f["ls"] * sim + f["la"] * act + f["lp"] * pr[None, :] + f["lb"] * bm
                + f["ld"] * hdr)
    if kind == "rrf":
        k = f.get("rrf_k", 60)
        s = f["ls"] / (k + ranks(sim, passed)) + f["lb"] / (k + ranks(c.bm25, passed & (c.bm25 > 0)))
        s = s + f["la"] / (k + ranks(act, passed & (act > 0)))
        if f["lp"]:
            s = s + f["lp"] / (k + ranks(np.broadcast_to(pr, sim.shape), passed))
        return s
    if kind == "rrf+lin":  # hybrid RRF plus activation added linearly (scaled to the RRF range)
        k = f.get("rrf_k", 60)
        s = 1 / (k + ranks(sim, passed)) + 1 / (k + ranks(c.bm25, passed & (c.bm25 > 0)))
        return s + f["la"] / (k + 1) * act + f["lp"] / (k + 1) * pr[None, :]
    if kind == "minmax":  # each signal min-max normalised over the valid records of the query
        def mm(x, v):
            lo = np.where(v, x, np.inf).min(1, keepdims=True)
            hi = np.where(v, x, -np.inf).max(1, keepdims=True)
            return np.where(v & (hi > lo), (x - lo) / np.where(hi > lo, hi - lo, 1), 0)
        return (f["ls"] * mm(sim, passed) + f["lb"] * bm + f["la"] * act
                + f["lp"] * pr[None, :] + f["ld"] * hdr)
    raise ValueError(kind)


def evaluate(c: Conv, s: np.ndarray, episodic_only: bool, valid_extra=None,
             candidates: int = 0, session_cap: int = 0) -> np.ndarray:
    """[q, len(KS)] recall@k for score matrix s. `candidates` > 0: only records in the union of
    the dense and BM25 top-`candidates` may be returned (re-ranking). `session_cap` > 0: at most
    that many of the first results from one session (the rest follow in score order)."""
    valid = c.sim > -1
    if episodic_only:
        valid = valid & c.episodic[None, :]
    if valid_extra is not None:
        valid = valid & valid_extra
    if candidates:
        passed = c.sim > -1
        cand = (ranks(c.sim.astype(np.float64), passed) <= candidates) | (
            ranks(c.bm25.astype(np.float64), passed & (c.bm25 > 0)) <= candidates)
        valid = valid & cand
    s = np.where(valid, s, -np.inf)
    order = np.argsort(-s, axis=1, kind="stable")[:, :max(KS) * 4]
    if session_cap:
        for qi in range(order.shape[0]):
            row = order[qi]
            sess = c.session[row]
            first, rest, cnt = [], [], {}
            for pos, ss in zip(row.tolist(), sess.tolist()):
                if cnt.get(ss, 0) < session_cap:
                    cnt[ss] = cnt.get(ss, 0) + 1
                    first.append(pos)
                else:
                    rest.append(pos)
            order[qi] = first + rest
    order = order[:, :max(KS)]
    got = np.take_along_axis(c.gold, order, axis=1).astype(np.float64)
    got = np.where(np.take_along_axis(valid, order, axis=1), got, 0)
    cum = np.cumsum(got, axis=1)
    return np.stack([cum[:, k - 1] / c.ngold for k in KS], axis=1)


def hybrid_scores(c: Conv) -> tuple[np.ndarray, np.ndarray]:
    sim = c.sim.astype(np.float64)
    passed = sim > -1
    lexv = passed & (c.bm25 > 0)
    s = 1 / (61 + ranks(sim, passed) - 1) + 1 / (61 + ranks(c.bm25, lexv) - 1)
    return s, passed


# ----------------------------------------------------------------------------- selection
def summarise(r: np.ndarray, cats: np.ndarray) -> dict:
    """r: [q, len(KS)] -> {"r@k": {"all": .., "1_multi-hop": ..}}"""
    out = {}
    for j, k in enumerate(KS):
        d = {"all_1_4": round(100 * float(r[:, j].mean()), 2)}
        for cat, name in CATS.items():
            m = cats == cat
            d[f"{cat}_{name}"] = round(100 * float(r[m, j].mean()), 2) if m.any() else None
        out[f"recall@{k}"] = d
    return out


def loco(results: np.ndarray, conv_of_q: np.ndarray, metric_k: int = 1) -> tuple[np.ndarray, list]:
    """results: [configs, q, len(KS)]. Per fold pick the config with the best mean recall@10 on
    the other conversations; returns the pooled held-out [q, KS] and the picks per fold."""
    held = np.zeros(results.shape[1:])
    picks = []
    for f in np.unique(conv_of_q):
        tr = conv_of_q != f
        best = int(np.argmax(results[:, tr, metric_k].mean(axis=1)))
        held[~tr] = results[best, ~tr]
        picks.append(best)
    return held, picks


class Stage:
    def __init__(self, name, convs, actcache):
        self.name, self.convs, self.actcache = name, convs, actcache
        self.configs, self.rows = [], []

    def add(self, act_p: dict, fuse: dict, episodic_only: bool = True, pr_graph: bool = False,
            **post):
        key = json.dumps([act_p, fuse, episodic_only, pr_graph, post], sort_keys=True)
        if key in self.actcache:
            self.configs.append({"act": act_p, "fuse": fuse, "episodic_only": episodic_only,
                                 "post": post})
            self.rows.append(self.actcache[key])
            return
        rs = []
        for c in self.convs:
            act = activation(c, act_p, self.actcache)
            if pr_graph:
                gk = (c.sid, c.variant, "graph", act_p["cross_session"], act_p["semantic_edges"],
                      act_p.get("knn", 0), act_p.get("hub_cap", 0))
                pr = pagerank_of(c, self.actcache[gk])
            else:
                pr = c.pr
            rs.append(evaluate(c, score(c, act, fuse, pr), episodic_only, **post))
        self.configs.append({"act": act_p, "fuse": fuse, "episodic_only": episodic_only,
                             "post": post})
        self.rows.append(np.concatenate(rs))
        self.actcache[key] = self.rows[-1]

    def report(self, cats, conv_of_q, top=5, train=None) -> dict:
        R = np.stack(self.rows)
        train = np.ones(len(cats), bool) if train is None else train
        means = R[:, train, 1].mean(axis=1)
        best = int(np.argmax(means))
        held, picks = loco(R, conv_of_q)
        order = np.argsort(-means)[:top]
        return {
            "stage": self.name, "n_configs": len(self.configs),
            "best_in_sample": {"config": self.configs[best], **summarise(R[best], cats)},
            "loco": {**summarise(held, cats),
                     "picks_per_fold": [self.configs[p] for p in picks]
                     if len(set(picks)) > 1 else "same as in-sample for every fold"
                     if picks[0] == best else [self.configs[p] for p in picks]},
            "top_in_sample_r10": [[round(100 * float(means[i]), 2), self.configs[i]]
                                  for i in order],
            "_best": best, "_R": R,
        }


def select(convs, cats, conv_of_q, train, cache, quick, variant, rows=False):
    """The staged selection, choosing every winner on the `train` questions only."""
    t0 = time.perf_counter()
    verbose = train is None
    args = argparse.Namespace(quick=quick)
    seed_fuse = dict(fusion="linear", ls=0.5, la=0.3, lp=0.2, lb=0.3, ld=0.05)
    stages = []
    train = np.ones(len(cats), bool) if train is None else train

    def run(stage: Stage):
        rep = stage.report(cats, conv_of_q, train=train)
        stages.append(rep)
        if verbose:
            log(f"{variant} {stage.name}: {stage.configs and len(stage.configs)} configs; in-sample "
                f"{rep['best_in_sample']['recall@10']['all_1_4']} LOCO {rep['loco']['recall@10']['all_1_4']}"
                f"  ({time.perf_counter() - t0:.0f}s)")
        return stage.configs[rep["_best"]]

    # 0. the current defaults, as they are (returned semantic nodes included) and no-inhibition
    st = Stage("0 current defaults", convs, cache)
    st.add(SEED_ACT, seed_fuse, episodic_only=False)
    st.add({**SEED_ACT, "beta": 0.0}, seed_fuse, episodic_only=False)
    st.add(SEED_ACT, seed_fuse, episodic_only=True)
    run(st)
    # 1. fusion family x coarse weights, seed activation without inhibition
    act0 = {**SEED_ACT, "beta": 0.0}
    st = Stage("1 fusion family and weights (activation: seed, beta=0)", convs, cache)
    g = (0.0, 0.25, 0.5, 1.0) if not args.quick else (0.0, 0.5, 1.0)
    for ls, la, lp, lb in itertools.product((0.5, 1.0), g, (0.0, 0.1, 0.2), g):
        st.add(act0, dict(fusion="linear", ls=ls, la=la, lp=lp, lb=lb, ld=0.05))
    for la, lp in itertools.product((0.0, 0.25, 0.5, 1.0, 1.5), (0.0, 0.25)):
        for ls, lb in ((1, 1), (1, 0.7), (0.7, 1)):
            st.add(act0, dict(fusion="rrf", ls=ls, la=la, lp=lp, lb=lb))
    for la, lp in itertools.product((0.0, 0.25, 0.5, 1.0, 2.0), (0.0, 0.1)):
        st.add(act0, dict(fusion="rrf+lin", la=la, lp=lp))
    for ls, la, lb in itertools.product((0.5, 1.0), g, g):
        st.add(act0, dict(fusion="minmax", ls=ls, la=la, lp=0.0, lb=lb, ld=0.0))
    best1 = run(st)
    fuse = best1["fuse"]
    # 2. activation structure: inhibition, anchors, T, anchor energy, rho, cross-session,
    #    semantic edges (cons), sigmoid; with the stage-1 fusion and a few act weights
    st = Stage("2 activation structure (stage-1 fusion, act weight re-swept)", convs, cache)
    las = sorted({fuse["la"], fuse["la"] * 0.5, fuse["la"] * 1.5, fuse["la"] * 2})
    choices = [{}]
    for beta in (0.0, 0.15):
        choices.append({"beta": beta})
    for ak in (3, 5, 10, 20, 30):
        choices.append({"anchors_k": ak})
    for ams in (0.1, 0.2, 0.3):
        choices.append({"anchor_min_sim": ams})
    for T in (1, 2, 3, 5):
        choices.append({"T": T})
    choices.append({"anchor_energy": "fused"})
    for cs, rho in ((True, 0.01), (True, 0.001), (True, 0.0)):
        choices.append({"cross_session": cs, "rho": rho})
    choices.append({"semantic_edges": False})
    for knn in (2, 5, 10):
        choices.append({"knn": knn})
    if variant == "cons":
        for cap in (10, 20, 50):
            choices.append({"hub_cap": cap})
            choices.append({"hub_cap": cap, "sigmoid": False})
    choices.append({"sigmoid": False})
    choices.append({"fan": False})
    choices.append({"S": 1.0, "delta": 0.3})
    choices.append({"theta": 0.3})
    choices = [ch for ch in choices if not set(ch) & EXCLUDE]
    for ch in choices:
        for la in las:
            st.add({**best1["act"], **ch}, {**fuse, "la": la})
    best2 = run(st)
    # every structural choice of stage 2 at its best activation weight, for the report
    R2 = np.stack(st.rows)
    per_choice = []
    for ch in choices:
        idx = [i for i, c in enumerate(st.configs) if c["act"] == {**best1["act"], **ch}]
        i = max(idx, key=lambda i: R2[i, train, 1].mean())
        per_choice.append({"change": ch or "none (stage-1 winner)",
                           "lambda_act": st.configs[i]["fuse"]["la"],
                           **summarise(R2[i], cats)["recall@10"]})
    stages[-1]["per_choice"] = per_choice
    # 3. combine the structural choices that helped in stage 2, refine weights around them
    R = np.stack(st.rows)[:, train, 1].mean(axis=1)
    ref = R[[i for i, c in enumerate(st.configs) if c["act"] == best1["act"]]].max()
    helped = {}
    for i, c in enumerate(st.configs):
        diff = {k: v for k, v in c["act"].items() if best1["act"].get(k, 0) != v}
        if diff and R[i] > ref + 1e-9:
            key = tuple(sorted(diff.items()))
            helped[key] = max(helped.get(key, -1), R[i])
    helped_sorted = [dict(k) for k, _ in sorted(helped.items(), key=lambda x: -x[1])][:4]
    # 2b. post-processing: re-rank only the union of the dense and BM25 top-C; per-session cap
    st = Stage("2b candidate restriction / per-session cap", convs, cache)
    for cand, cap in itertools.product((0, 20, 50), (0, 2, 3, 5)):
        st.add(best2["act"], best2["fuse"], candidates=cand, session_cap=cap)
    post = run(st)["post"]
    st = Stage("3 combination of helpful structure + weight refinement", convs, cache)
    combos = [{}]
    for r in range(1, len(helped_sorted) + 1):
        for sub in itertools.combinations(helped_sorted, r):
            merged = {}
            ok = True
            for d in sub:
                for k, v in d.items():
                    if k in merged and merged[k] != v:
                        ok = False
                    merged[k] = v
            if ok and merged not in combos:
                combos.append(merged)
    f2 = best2["fuse"]
    keys = [k for k in ("ls", "la", "lp", "lb") if k in f2]
    for ch in combos:
        for mult in itertools.product(*[(0.75, 1.0, 1.25)] * 2):
            f = dict(f2)
            f["la"] = f2["la"] * mult[0]
            if "lb" in keys:
                f["lb"] = f2["lb"] * mult[1]
            elif mult[1] != 1.0:
                continue
            st.add({**best1["act"], **ch}, f, **post)
            if "ld" in f and mult == (1.0, 1.0):  # the header and PageRank terms, at the winner
                for lp, ld in itertools.product((0.0, 0.1, 0.2), (0.0, 0.05)):
                    st.add({**best1["act"], **ch}, {**f, "lp": lp, "ld": ld}, **post)
    best3 = run(st)
    st3 = st
    # 4. returned semantic nodes (cons only)
    if variant == "cons":
        st = Stage("4 semantic nodes returned vs excluded", convs, cache)
        st.add(best3["act"], best3["fuse"], episodic_only=True, **best3["post"])
        st.add(best3["act"], best3["fuse"], episodic_only=False, **best3["post"])
        run(st)
    stages[-1]["_helped"] = helped_sorted
    if rows:
        i = next(i for i, c in enumerate(st3.configs) if c == best3)
        return stages, best3, st3.rows[i]
    return stages, best3


SEED_FUSE = dict(fusion="linear", ls=0.5, la=0.3, lp=0.2, lb=0.3, ld=0.05)


def engine_defaults() -> tuple[dict, dict]:
    """The current RecallConfig defaults as (activation params, fusion) of this script."""
    from synapse_cli.engine.recall import RecallConfig

    cfg = RecallConfig()
    act = {**SEED_ACT, **{k: getattr(cfg, k) for k in SEED_ACT if hasattr(cfg, k)}}
    act["beta"] = cfg.beta if cfg.inhibition else 0.0
    fuse = dict(fusion=cfg.fusion, ls=cfg.lambda_sim, la=cfg.lambda_act, lp=cfg.lambda_pr,
                lb=cfg.lambda_bm25, ld=cfg.lambda_decay)
    return act, fuse


def defaults_ablation(convs, cats, cache, episodic_only: bool) -> list[dict]:
    """recall@k of the engine's defaults, of each deviation from the seed reverted alone, of
    the seed's fusion and weights, and of the seed altogether (gate off throughout)."""
    act, fuse = engine_defaults()
    st = Stage("defaults", convs, cache)
    labels = ["engine defaults"]
    st.add(act, fuse, episodic_only)
    names = {"ls": "lambda_sim", "la": "lambda_act", "lp": "lambda_pr", "lb": "lambda_bm25",
             "ld": "lambda_decay"}
    for k, v in act.items():
        if SEED_ACT[k] != v:
            labels.append(f"{k} = {SEED_ACT[k]} (seed)")
            st.add({**act, k: SEED_ACT[k]}, fuse, episodic_only)
    for k, v in fuse.items():
        if SEED_FUSE[k] != v:
            labels.append(f"{names.get(k, k)} = {SEED_FUSE[k]} (seed)")
            st.add(act, {**fuse, k: SEED_FUSE[k]}, episodic_only)
    labels.append("seed fusion and weights")
    st.add(act, SEED_FUSE, episodic_only)
    labels.append("seed defaults")
    st.add(SEED_ACT, SEED_FUSE, episodic_only)
    return [{"config": lab, **summarise(r, cats)} for lab, r in zip(labels, st.rows)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--stores", default="both", choices=("plain", "cons", "both"))
    p.add_argument("--quick", action="store_true", help="smaller grids")
    p.add_argument("--exclude", default="", help="comma-separated structural choices to leave "
                   "out, e.g. cross_session,knn,hub_cap (those the engine does not implement)")
    args = p.parse_args()
    EXCLUDE.update(x for x in args.exclude.split(",") if x)
    load0 = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    emb = {}

    def embedder():
        if "e" not in emb:
            from synapse_cli.models.embedder import get_embedder
            emb["e"] = get_embedder()
        return emb["e"]

    variants = ["plain", "cons"] if args.stores == "both" else [args.stores]
    variants = [v for v in variants
                if all((STORES / c["sample_id"] / v / "ok").exists() for c in data)]
    out = {"benchmark": "locomo_tune", "variants": variants, "stages": [],
           "command": "python bench/tune/locomo_tune.py " + " ".join(sys.argv[1:]),
           "excluded_choices": sorted(EXCLUDE),
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "cpus": os.cpu_count()}
    for variant in variants:
        convs = [load_conv(c, variant, embedder) for c in data]
        log(f"{variant}: signals loaded ({time.perf_counter() - t0:.1f}s)")
        cats = np.concatenate([c.cats for c in convs])
        conv_of_q = np.concatenate([np.full(len(c.cats), i) for i, c in enumerate(convs)])
        cache: dict = {}
        vo = {"variant": variant, "questions": int(len(cats)),
              "nodes": {c.sid: {"records": int(c.n), "episodic": int(c.episodic.sum()),
                                "edges": int(len(c.indices))} for c in convs}}
        # baselines
        base = {}
        for name, fn in (("vector", lambda c: (c.sim.astype(np.float64), c.sim > -1)),
                         ("bm25", lambda c: (c.bm25.astype(np.float64), c.bm25 > 0)),
                         ("hybrid", hybrid_scores)):
            rs = []
            for c in convs:
                s, v = fn(c)
                rs.append(evaluate(c, s, False, v))
            base[name] = summarise(np.concatenate(rs), cats)
        vo["baselines_all_records"] = base
        # the engine's defaults as they are (semantic nodes returned, as recall() does)
        vo["engine_defaults"] = dict(zip(("act", "fuse"), engine_defaults()))
        vo["defaults_ablation"] = defaults_ablation(convs, cats, cache, episodic_only=False)
        stages, best3 = select(convs, cats, conv_of_q, None, cache, args.quick, variant)
        vo["helpful_structure_stage2"] = stages[-1].pop("_helped")
        # nested leave-one-conversation-out: the whole staged selection (grids built from the
        # training folds' own results) rerun on 4 conversations, scored on the 5th
        held = np.zeros((len(cats), len(KS)))
        fold_picks = {}
        for f, c in enumerate(convs):
            tr = conv_of_q != f
            _, pick, r = select(convs, cats, conv_of_q, tr, cache, args.quick, variant,
                                rows=True)
            held[~tr] = r[~tr]
            fold_picks[c.sid] = pick
            log(f"{variant} nested fold {c.sid}: held-out r@10 "
                f"{100 * r[~tr, 1].mean():.2f}")
        vo["nested_loco"] = {**summarise(held, cats), "picks_per_fold": fold_picks}
        # LOCO of the whole selection across stages 1-3 (all configurations pooled)
        vo["best"] = best3
        vo["best_all"] = stages[-1]["best_in_sample"] if variant == "plain" else \
            stages[-2]["best_in_sample"]
        # each deviation of the final configuration from the seed, reverted alone (in-sample)
        abl = Stage("ablation", convs, cache)
        abl.add(best3["act"], best3["fuse"], **best3["post"])
        seed_like = {**SEED_ACT, "knn": 0}
        for k, v in best3["act"].items():
            if seed_like.get(k) != v:
                abl.add({**best3["act"], k: seed_like[k]}, best3["fuse"], **best3["post"])
        for k, v in best3["post"].items():
            if v:
                abl.add(best3["act"], best3["fuse"], **{**best3["post"], k: 0})
        abl.add(best3["act"], {"fusion": "linear", "ls": 0.5, "la": 0.3, "lp": 0.2, "lb": 0.3,
                               "ld": 0.05}, **best3["post"])
        for change in ({"fusion": "linear"}, {"lp": 0.1}, {"lp": 0.2}, {"ld": 0.05}):
            if any(best3["fuse"].get(k) != v for k, v in change.items()):
                abl.add(best3["act"], {**best3["fuse"], **change}, **best3["post"])
        R = np.stack(abl.rows)
        vo["ablation_of_best_in_sample"] = [
            {"config_change": "none" if i == 0 else
             ({k: v for k, v in c["act"].items() if best3["act"].get(k) != v}
              or {k: v for k, v in c["post"].items() if best3["post"].get(k) != v}
              or {"fuse": c["fuse"]}),
             **summarise(R[i], cats)["recall@10"]} for i, c in enumerate(abl.configs)]
        vo["stages"] = [{k: v for k, v in s.items() if not k.startswith("_")} for s in stages]
        out["stages"].append(vo)
    out["total_s"] = round(time.perf_counter() - t0, 1)
    out["loadavg_1m_at_start_and_end"] = [load0, round(os.getloadavg()[0], 2)]
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
