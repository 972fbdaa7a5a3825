"""`recall --mode synaptic` (seed 001): the DTW and LIF kernels against their numpy references,
the equations on hand-worked cases, layered propagation over a store built with chosen vectors
(original and centroid variants, the stimulus path), stimulus spikes on touch, the settings,
and the command line with the real embedder."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from conftest import assert_clean_failure, run_cli
from store_format import spikes as sp
from synapse_cli.engine import config as cf
from synapse_cli.engine import graphview
from synapse_cli.engine.memory import NewMemory
from synapse_cli.engine.recall import MODES, RecallConfig, recall
from synapse_cli.engine.recall import Recaller
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.recall.synaptic import SynapticConfig, propagate
from synapse_cli.kernels import dtw, lif
from synapse_cli.kernels import reference as ref

NOW = 1_700_000_000_000
MIN = 60_000


def random_trains(rng, n, max_len=17):
    lens = rng.integers(0, max_len + 1, n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=indptr[1:])
    times = np.concatenate([np.sort(rng.uniform(-500, 0, k)) for k in lens]) if n else \
        np.zeros(0)
    return indptr, np.asarray(times, np.float64)


# ---------------------------------------------------------------- kernels vs references

@pytest.mark.parametrize("seed", range(5))
def test_dtw_matches_reference(seed):
    rng = np.random.default_rng(seed)
    n = 40
    indptr, times = random_trains(rng, n)
    taus = rng.uniform(1, 200, n)
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    got = dtw.pair_scores(indptr, times, taus, src, dst, np.empty(300))
    np.testing.assert_allclose(got, ref.dtw_pair_scores(indptr, times, taus, src, dst),
                               rtol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_lif_matches_reference(seed):
    rng = np.random.default_rng(seed)
    n = 60
    indptr, times = random_trains(rng, n)
    np.testing.assert_allclose(lif.node_taus(indptr, times, 43.07, np.empty(n)),
                               ref.lif_node_taus(indptr, times, 43.07), rtol=1e-12)
    nodes = rng.permutation(n)[:45].astype(np.int64)
    stim = np.where(rng.random(45) < 0.3, 0.0, rng.uniform(0, 50, 45))
    # a low threshold and a large spike weight so that past firings and resets happen
    args = (0.0, rng.uniform(1, 50), rng.uniform(0.5, 3), 0.002, 2.9, -7.13, rng.uniform(0, 3))
    v, f = np.empty(45), np.empty(45, bool)
    for dynamic in (True, False):
        lif.membrane(indptr, times, nodes, stim, *args, dynamic, v, f)
        rv, rf = ref.lif_membrane(indptr, times, nodes, stim, *args, dynamic)
        np.testing.assert_allclose(v, rv, rtol=1e-9, atol=1e-15)
        assert (f == rf).all() and f.any() and not f.all()


# ---------------------------------------------------------------- the equations by hand

def test_dtw_hand_case():
    # A = (0, 1), B = (0,), tau_bar = 1: W = [[1], [e^-1]], L(2,1) = 1 + e^-1 (eq. 2).
    indptr = np.array([0, 2, 3], np.int64)
    times = np.array([0.0, 1.0, 0.0])
    out = dtw.pair_scores(indptr, times, np.ones(2), np.array([0]), np.array([1]), np.empty(1))
    assert out[0] == pytest.approx(1 / (1 + math.exp(-(1 + math.exp(-1)))))
    # the max over the three predecessors (eq. 4): A = B = (0, 10) with tau 1 -> L = 1 + 1
    indptr = np.array([0, 2, 4], np.int64)
    times = np.array([0.0, 10.0, 0.0, 10.0])
    out = dtw.pair_scores(indptr, times, np.ones(2), np.array([0]), np.array([1]), np.empty(1))
    assert out[0] == pytest.approx(1 / (1 + math.exp(-(2 + math.exp(-10)))))


def test_lif_single_stimulus_and_dynamic_tau():
    # one stored spike at -5, a stimulus of 2 now, no input from the stored spike:
    # tau = tau_init + tanh(5 / 2) (eq. 18); I = 2 / T, read one unit later.
    indptr, times = np.array([0, 1], np.int64), np.array([-5.0])
    v, f = np.empty(1), np.empty(1, bool)
    for dynamic, tau in ((True, 10.0 + math.tanh(2.5)), (False, 10.0)):
        lif.membrane(indptr, times, np.array([0]), np.array([2.0]), 0.0, 10.0, 2.0, 1.0, 0.0,
                     0.0, 0.0, dynamic, v, f)
        T = 2.0 * tau
        assert v[0] == pytest.approx((2.0 / T) / T * math.exp(-1 / T)) and not f[0]
    # threshold below it: fires
    lif.membrane(indptr, times, np.array([0]), np.array([2.0]), 0.0, 10.0, 2.0, v[0] / 2, 0.0,
                 0.0, 0.0, True, v, f)
    assert f[0]


# ---------------------------------------------------------------- propagation over a store

def unit(v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v)


def basis(dim, *pairs):
    v = np.zeros(dim, np.float32)
    for i, x in pairs:
        v[i] = x
    return unit(v)


@pytest.fixture
def chain(tmp_path):
    """Records with chosen vectors: A close to the query, B close to A but not to the query,
    C close to B only, D unrelated. The query is e0."""
    dim = 8
    vecs = {"A": basis(dim, (0, 1.0), (1, 0.6)), "B": basis(dim, (1, 1.0), (2, 0.5)),
            "C": basis(dim, (2, 1.0)), "D": basis(dim, (5, 1.0))}
    path = tmp_path / "st"
    with StoreWriter.open(path, create=True, dim=dim, embedder="fake-embedder") as w:
        ids = w.append([NewMemory(text=k, vector=v, timestamp_ms=NOW - 10 * MIN)
                        for k, v in vecs.items()])
        w.commit()
    return path, dict(zip(vecs, ids)), basis(dim, (0, 1.0))


@pytest.mark.parametrize("variant", ["original", "centroid"])
def test_layers_parents_and_path(chain, variant):
    path, ids, q = chain
    sc = SynapticConfig(cos_th=0.3, stim_th=0.01, propagation=variant)
    cfg = RecallConfig(mode="synaptic", explain=True, synaptic=sc)
    with Store.open(path) as store:
        out = recall(store, "q", q, cfg, now_ms=NOW)
    by_text = {r["text"]: r for r in out["results"]}
    assert set(by_text) == {"A", "B", "C"}  # D gets no stimulus: not a result
    assert [by_text[t]["signals"]["layer"] for t in "ABC"] == [1, 2, 3]
    assert [s["id"] for s in by_text["C"]["path"]] == [ids["A"], ids["B"], ids["C"]]
    # eq. 8: the stimulus is the product of P along the path; each step < its parent's
    sa, sb, scc = (by_text[t]["signals"]["stimulus"] for t in "ABC")
    assert 0 < scc < sb < sa < 1
    p_ab = sb / sa
    cos_ab = float(by_text["A"]["signals"]["semantic"])  # sanity: cos(q, A) from the scan
    assert cos_ab == pytest.approx(1 / math.sqrt(1.36), abs=0.02)
    assert p_ab == pytest.approx(sc.p_scale * by_text["B"]["signals"]["temporal"]
                                 * (0.6 / math.sqrt(1.36) / math.sqrt(1.25)), rel=0.03)
    assert out["results"][0]["text"] == "A"  # ranked by membrane potential
    assert out["stimulated"] == 3 and len(out["stimulated_ids"]) == 3


def test_stim_th_stops_propagation_and_cos_th_rejects(chain):
    path, ids, q = chain
    with Store.open(path) as store:
        arrays = graphview.build(store)
        cfg = RecallConfig(mode="synaptic")
        sim = np.array([0.86, 0.0, 0.0, 0.0])  # only A above cos_th
        high = propagate(store, arrays, sim, cfg, SynapticConfig(cos_th=0.3, stim_th=1.0), NOW)
        assert high.layer.tolist() == [1, 0, 0, 0]  # eq. 9: A cannot pass the stimulus on
        out = recall(store, "q", basis(8, (7, 1.0)), cfg, arrays, now_ms=NOW)
        assert out["rejected"] and out["results"] == [] and out["stimulated"] == 0


def test_recent_spikes_raise_the_temporal_score(chain):
    path, ids, q = chain
    sc = SynapticConfig(cos_th=0.3, stim_th=0.01)
    cfg = RecallConfig(mode="synaptic", synaptic=sc)
    with Store.open(path) as store:
        before = recall(store, "q", q, cfg, now_ms=NOW)["results"][0]["signals"]["temporal"]
    with StoreWriter.open(path) as w:
        w.add_spikes([ids["A"]], NOW - MIN, sp.STIMULUS)
        w.commit()
    with Store.open(path) as store:
        after = recall(store, "q", q, cfg, now_ms=NOW)["results"][0]
    assert after["text"] == "A" and after["signals"]["temporal"] > before


def test_touch_appends_stimulus_spikes_to_every_node_reached(chain):
    path, ids, q = chain

    class OneVector:
        name, dim = "fake-embedder", 8

        def encode(self, texts):
            return np.stack([q] * len(texts))

    with Recaller(path, embedder=OneVector()) as r:
        cfg = RecallConfig(mode="synaptic", k=1, synaptic=SynapticConfig(cos_th=0.3,
                                                                         stim_th=0.01))
        out = r.recall("q", cfg, now_ms=NOW)
    assert "stimulated_ids" not in out and out["touched"] is True
    with Store.open(path) as store:
        e = store.spike_entries()
    kinds = {int(i): int(k) for i, k in zip(e["record_id"], e["kind"])}
    assert kinds == {ids["A"]: sp.RECALL, ids["B"]: sp.STIMULUS, ids["C"]: sp.STIMULUS}
    assert set(e["time_ms"].tolist()) == {NOW}


def test_synthetic_store_without_extra_spikes(small_store):
    """What bench/speed/recall_speed.py runs: records whose only spike is the timestamp."""
    assert "synaptic" in MODES
    with Store.open(small_store.path) as store:
        arrays = graphview.build(store)
        i = next(i for i, m in enumerate(small_store.mems) if i > 4 and not m.tombstone)
        q = unit(small_store.mems[i].vector)
        for variant in ("original", "centroid"):
            cfg = RecallConfig(mode="synaptic", synaptic=SynapticConfig(propagation=variant))
            out = recall(store, "q", q, cfg, arrays, now_ms=NOW)
            assert not out["rejected"] and out["results"][0]["id"] == small_store.ids[i]
            v = [r["signals"]["membrane_potential"] for r in out["results"]]
            assert v == sorted(v, reverse=True)


# ---------------------------------------------------------------- settings and CLI

def test_settings_defaults_are_the_engines():
    s = cf.resolve({}, environ={})
    assert SynapticConfig.from_settings(s) == SynapticConfig()
    s = cf.resolve({"synaptic.propagation": "centroid"}, environ={"SYNAPSE_COS_TH": "0.4"})
    sc = SynapticConfig.from_settings(s)
    assert sc.propagation == "centroid" and sc.cos_th == 0.4
    with pytest.raises(cf.ConfigError):
        cf.resolve({"synaptic.propagation": "sideways"}, environ={})


def test_cli_synaptic_with_the_real_embedder(tmp_path):
    store = tmp_path / "st"
    lines = ["I started running every morning in the park",
             "The marathon is in October and I am training for it",
             "My sister adopted a grey cat last spring"]
    src = tmp_path / "in.ndjson"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))
    with open(src) as f:
        r = run_cli(["ingest", "-"], store, stdin=f, timeout=300)
    assert r.returncode == 0, r.stderr
    r = run_cli(["recall", "how is the marathon training going?", "--mode", "synaptic",
                 "--explain", "-k", "2"], store, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["mode"] == "synaptic" and not out["rejected"]
    top = out["results"][0]
    assert "marathon" in top["text"]
    assert {"semantic", "stimulus", "temporal", "membrane_potential", "fired",
            "layer"} <= set(top["signals"])
    assert top["path"][-1]["id"] == top["id"] and "stimulated_ids" not in out
    r = run_cli(["recall", "x", "--mode", "synaptic", "--propagation", "sideways"], store)
    assert_clean_failure(r, 2)


def test_ablations_of_table_3(chain):
    path, ids, q = chain
    with StoreWriter.open(path) as w:  # spikes make tau and T differ from their fixed values
        w.add_spikes([ids["A"]], NOW - 2 * MIN, sp.STIMULUS)
        w.add_spikes([ids["A"]], NOW - MIN, sp.STIMULUS)
        w.commit()
    base = SynapticConfig(cos_th=0.3, stim_th=0.01)
    with Store.open(path) as store:
        arrays = graphview.build(store)

        def top(**kw):
            cfg = RecallConfig(mode="synaptic", synaptic=dataclasses.replace(base, **kw))
            return recall(store, "q", q, cfg, arrays, now_ms=NOW)["results"][0]["signals"]

        full, no_t, fixed = top(), top(temporal=False), top(dynamic_tau=False)
    assert no_t["temporal"] == 1.0 and 0.5 < full["temporal"] < 1.0
    assert no_t["stimulus"] > full["stimulus"]
    # a fixed tau (tau_init) is smaller than A's grown one: a larger potential, same stimulus
    assert fixed["membrane_potential"] > full["membrane_potential"]
