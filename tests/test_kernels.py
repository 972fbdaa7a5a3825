"""numba kernels against their numpy references (synapse_cli/kernels/reference.py)."""
import math
import time

import numpy as np
import pytest

from synapse_cli.engine.scoring import DAY_MS, FLAG_PINNED, FLAG_RESOLVED, FLAG_TOMBSTONE, HOUR_MS
from synapse_cli.kernels import reference as ref

_t0 = time.perf_counter()
from synapse_cli.kernels import activation, header_scan, pagerank, ranking  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - _t0  # compile, or load from numba's cache

NOW = 1_700_000_000_000
HB = {1: 32, 2: 48, 3: 64}


def test_report_compile_time():
    print(f"\nkernel import (compile or cache load): {IMPORT_SECONDS:.2f} s")


# ---------------------------------------------------------------- header scan

def make_records(rng, n, version, dim):
    """Random records (header + int8 vector + 24 B trailer) as uint8[n, stride]."""
    hb = HB[version]
    rec = np.zeros((n, hb + dim + 24), np.uint8)

    def put(off, values, dtype):
        rec[:, off:off + np.dtype(dtype).itemsize] = (
            np.asarray(values, dtype).reshape(n, 1).view(np.uint8))

    age = (np.exp(rng.uniform(0, np.log(400 * DAY_MS), n))).astype(np.int64)
    age[rng.random(n) < 0.05] *= -1  # some timestamps in the future
    put(0, NOW - age, "<i8")
    put(8, rng.integers(0, 2**63, n, dtype=np.uint64) & rng.integers(0, 2**63, n, dtype=np.uint64),
        "<u8")
    put(16, rng.uniform(0, 3, n), "<f4")
    put(20, rng.uniform(0.05, 10, n), "<f4")
    put(24, rng.integers(0, 40, n), "<u4")
    put(28, np.full(n, 0xFFFF), "<u2")
    put(30, rng.integers(-128, 128, n), "<i1")
    flags = rng.integers(0, 4, n) << 1
    flags |= np.where(rng.random(n) < 0.1, FLAG_TOMBSTONE, 0)
    flags |= np.where(rng.random(n) < 0.1, FLAG_PINNED, 0)
    flags |= np.where(rng.random(n) < 0.7, FLAG_RESOLVED, 0)
    rec[:, 31] = flags
    if version >= 2:
        rec[:, 32] = rng.integers(0, 256, n)
        put(36, np.ones(n), "<f4")
    vec = rng.integers(-127, 128, (n, dim)).astype(np.int8)
    vec[rng.random(n) < 0.05] = 0
    rec[:, hb:hb + dim] = vec.view(np.uint8)
    rec[:, hb + dim:] = rng.integers(0, 256, (n, 24))
    return rec


def run_scan(fn, rec, version, dim, q, inv_norm=None, inv_norm_ready=False, **kw):
    n = rec.shape[0]
    outs = [np.full(n, 7.0, np.float32) for _ in range(3)]
    args = dict(now_ms=NOW, type_mask=0b1111, t_min=0, t_max=2**62, tag_query=0)
    args.update(kw)
    inv_norm = np.full(n, 7.0, np.float32) if inv_norm is None else inv_norm
    cnt = fn(rec, version, dim, q, args["now_ms"], args["type_mask"], args["t_min"],
             args["t_max"], np.uint64(args["tag_query"]), *outs, inv_norm, inv_norm_ready)
    return (cnt, *outs)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("dim", [1, 7, 64, 384])
def test_scan_scores_matches_reference(version, dim):
    rng = np.random.default_rng(version * 1000 + dim)
    rec = make_records(rng, 700, version, dim)
    q = rng.normal(size=dim).astype(np.float32)
    q /= np.linalg.norm(q)
    tq = int(rec[3, 8:16].view("<u8")[0]) & 0x0F0F_0F0F_0F0F_0F0F
    cases = [
        {},
        {"type_mask": 0b0110},
        {"t_min": NOW - 30 * DAY_MS, "t_max": NOW - HOUR_MS},
        {"tag_query": tq},
        {"tag_query": 1 << 63, "type_mask": 0b1001},
    ]
    for kw in cases:
        got = run_scan(header_scan.scan_scores, rec, version, dim, q, **kw)
        want = run_scan(ref.scan_scores, rec, version, dim, q, **kw)
        assert got[0] == want[0]
        np.testing.assert_array_equal(np.isneginf(got[1]), np.isneginf(want[1]))
        live = ~np.isneginf(want[1])
        np.testing.assert_allclose(got[1][live], want[1][live], rtol=2e-5, atol=2e-6)
        np.testing.assert_array_equal(got[2], want[2])  # decay: bit-exact float32
        np.testing.assert_array_equal(got[3], want[3])
        # the norms a filtered first query computed serve an unfiltered second one
        norms = np.zeros(len(rec), np.float32)
        run_scan(header_scan.scan_scores, rec, version, dim, q, inv_norm=norms, **kw)
        again = run_scan(header_scan.scan_scores, rec, version, dim, q, inv_norm=norms,
                         inv_norm_ready=True)
        np.testing.assert_array_equal(again[1], run_scan(header_scan.scan_scores, rec, version,
                                                         dim, q)[1])
    # sanity of the live set in the unfiltered case
    cnt, sim, dec, _ = run_scan(header_scan.scan_scores, rec, version, dim, q)
    assert cnt == int(((rec[:, 31] & FLAG_TOMBSTONE) == 0).sum())
    assert np.all(dec[np.isfinite(sim)] > 0) and np.all(np.abs(sim[np.isfinite(sim)]) <= 1.0001)


def test_scan_scores_hand_record():
    rng = np.random.default_rng(1)
    rec = make_records(rng, 1, 2, 4)
    rec[0, 0:8] = np.array([NOW - 100 * DAY_MS], "<i8").view(np.uint8)
    rec[0, 24:28] = np.array([12], "<u4").view(np.uint8)
    rec[0, 31] = FLAG_RESOLVED | (1 << 1)
    rec[0, 32] = 200
    rec[0, 48:52] = np.array([3, 0, -4, 0], np.int8).view(np.uint8)
    q = np.array([0.6, 0.0, -0.8, 0.0], np.float32)
    cnt, sim, dec, _ = run_scan(header_scan.scan_scores, rec, 2, 4, q)
    assert cnt == 1
    assert sim[0] == pytest.approx((1.8 + 3.2) / 5.0, rel=1e-6)
    assert dec[0] == pytest.approx(0.5 * 1.65)  # bucket 8, 12 recalls -> 4, arousal 200
    sim2, dec2, imp2, cnt2 = header_scan.scan(rec, 2, 4, q, NOW, tag_query=0)  # wrapper
    assert (cnt2, sim2[0], dec2[0]) == (1, sim[0], dec[0])
    rec[0, 31] |= FLAG_TOMBSTONE
    cnt, sim, dec, _ = run_scan(header_scan.scan_scores, rec, 2, 4, q)
    assert cnt == 0 and sim[0] == -np.inf and dec[0] == 0


def test_scan_scores_readonly_and_checks():
    rng = np.random.default_rng(2)
    rec = make_records(rng, 50, 3, 16)
    q = np.ones(16, np.float32) / 4
    want = run_scan(ref.scan_scores, rec, 3, 16, q)
    rec.setflags(write=False)
    got = run_scan(header_scan.scan_scores, rec, 3, 16, q)
    np.testing.assert_array_equal(got[2], want[2])
    with pytest.raises(ValueError):
        run_scan(header_scan.scan_scores, rec, 3, 41, np.ones(41, np.float32))  # dim too big
    with pytest.raises(ValueError):
        run_scan(header_scan.scan_scores, rec, 3, 16, np.ones(15, np.float32))  # query length
    with pytest.raises(ValueError):
        run_scan(header_scan.scan_scores, rec, 4, 16, q)
    with pytest.raises(TypeError):
        run_scan(header_scan.scan_scores, rec[:, ::2], 3, 16, q)  # not contiguous


@pytest.mark.parametrize("version", [1, 2, 3])
def test_scan_scores_on_store_format_records(version):
    """Records packed by store_format (headers, int8 vectors, tags) read back by the kernel."""
    from store_format import flags as fl, headers, tags, vectors
    from synapse_cli.engine.scoring import effective_decay

    rng = np.random.default_rng(7)
    n, dim = 40, 24
    q8, norms = vectors.quantize_batch(rng.normal(size=(n, dim)).astype(np.float32))
    hs = [headers.Header(timestamp_ms=NOW - int(rng.integers(0, 200 * DAY_MS)),
                         synaptic_tags=tags.encode_tags([f"speaker:{i % 3}", "x"]),
                         exact_norm=float(norms[i]), importance=float(rng.uniform(0.05, 10)),
                         recall_count=int(rng.integers(0, 20)),
                         flags=fl.make_flags(memory_type=i % 4, pinned=i % 5 == 0,
                                             resolved=i % 3 != 0, tombstone=i % 7 == 0),
                         arousal=int(rng.integers(0, 256)))
          for i in range(n)]
    rec = np.zeros((n, HB[version] + dim + 24), np.uint8)
    rec[:, :HB[version]] = headers.headers_to_array(hs, version).view(np.uint8).reshape(n, -1)
    rec[:, HB[version]:HB[version] + dim] = q8.view(np.uint8)
    u = rng.normal(size=dim).astype(np.float32)
    u /= np.linalg.norm(u)
    tq = tags.encode_tags(["speaker:1"])
    cnt, sim, dec, imp = run_scan(header_scan.scan_scores, rec, version, dim, u, tag_query=tq,
                                  type_mask=0b0111)
    keep = np.array([not fl.is_tombstone(h.flags) and fl.memory_type(h.flags) != 3
                     and tags.contains(h.synaptic_tags, tq) for h in hs])
    assert cnt == keep.sum() > 0
    np.testing.assert_array_equal(np.isfinite(sim), keep)
    np.testing.assert_allclose(sim[keep], vectors.dequantize_cosine(q8, u)[keep], atol=2e-6)
    for i in np.flatnonzero(keep):
        h = hs[i]
        ar = h.arousal if version >= 2 else 0
        assert dec[i] == np.float32(effective_decay(NOW - h.timestamp_ms, h.recall_count, ar,
                                                    h.flags))
        assert imp[i] == np.float32(h.importance)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 10, 1000])
def test_top_k_matches_reference(n, dtype):
    rng = np.random.default_rng(n)
    s = np.round(rng.normal(size=n), 1).astype(dtype)  # many ties
    s[rng.random(n) < 0.1] = -np.inf
    s[rng.random(n) < 0.05] = np.nan
    s[rng.random(n) < 0.02] = np.inf
    for floor in (-np.inf, 0.0):
        for k in (0, 1, 5, n // 2, n, n + 3):
            got = ranking.top_k(s, k, floor)
            np.testing.assert_array_equal(got, ref.top_k(s, k, floor))
    assert ranking.top_k(np.array([1, 2, 2, 0], dtype), 3, -np.inf).tolist() == [1, 2, 0]
    assert ranking.top_k(np.array([1, 2, 2, 0], dtype), 9, 0.0).tolist() == [1, 2, 0]


@pytest.mark.parametrize("minmax", [True, False])
@pytest.mark.parametrize("use_decay", [True, False])
def test_fused_scores_match_reference(minmax, use_decay):
    rng = np.random.default_rng(int(minmax) * 2 + int(use_decay))
    n = 2000
    f32 = lambda x: np.ascontiguousarray(x, np.float32)  # noqa: E731
    sim = f32(rng.uniform(-0.3, 0.9, n))
    sim[rng.random(n) < 0.2] = -np.inf  # filtered out by the scan
    act, pr, dec = f32(rng.random(n)), f32(rng.random(n)), f32(rng.random(n))
    imp = f32(rng.uniform(0, 15, n))
    bm25 = np.where(rng.random(n) < 0.3, rng.uniform(0, 12, n), 0.0)
    args = (sim, act, pr, bm25, dec, imp, 0.5, 0.4, 0.1, 0.3, 0.05, minmax, use_decay)
    got, want = np.empty(n), np.empty(n)
    ranking.fused_scores(*args, got)
    ref.fused_scores(*args, want)
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-12)


# ---------------------------------------------------------------- graphs

def random_csr(rng, n, avg_deg):
    """Random CSR graph with isolated nodes, self loops, duplicates and zero weights."""
    if n == 0:
        return (np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32),
                np.zeros(0, np.uint8), np.zeros(0, np.int64))
    deg = rng.poisson(avg_deg, n)
    deg[rng.random(n) < 0.2] = 0  # isolated sources
    indptr = np.r_[0, np.cumsum(deg)].astype(np.int64)
    m = int(indptr[-1])
    src = np.repeat(np.arange(n), deg)
    indices = rng.integers(0, max(1, n - n // 10), m).astype(np.int32)  # last 10% get no in-edges
    loops = rng.random(m) < 0.05
    indices[loops] = src[loops]
    weights = rng.uniform(0, 1, m).astype(np.float32)
    weights[rng.random(m) < 0.1] = 0.0
    etype = rng.integers(0, 4, m).astype(np.uint8)
    weights[etype == 0] = np.where(weights[etype == 0] > 0, 1.0, 0.0)  # temporal edges store 1.0
    ts = NOW - rng.integers(0, 10 * DAY_MS, n)
    return indptr, indices, weights, etype, ts


PARAMS = dict(alpha=1.0, S=0.8, delta=0.5, rho=0.01, beta=0.15, M=7, gamma=5.0, theta=0.5, T=3)
SWITCHES = [  # use_fan, use_inhibition, use_sigmoid, frontier_only
    (True, True, True, False), (True, True, True, True), (False, True, True, True),
    (True, False, True, False), (True, True, False, True), (False, False, False, False),
]


def run_act(fn, g, anchors, sims, switches, **over):
    p = dict(PARAMS, **over)
    return fn(*g, anchors, sims, p["alpha"], p["S"], p["delta"], p["rho"], p["beta"], p["M"],
              p["gamma"], p["theta"], p["T"], *switches)


@pytest.mark.parametrize("n", [0, 1, 6, 60, 400])
def test_activation_matches_reference(n):
    rng = np.random.default_rng(100 + n)
    g = random_csr(rng, n, 3.0)
    k = min(n, 5)
    anchors = rng.choice(n, k, replace=False).astype(np.int32) if n else np.zeros(0, np.int32)
    if k > 1:
        anchors = np.r_[anchors, anchors[:1]].astype(np.int32)  # a duplicate anchor
    sims = rng.uniform(-0.2, 1.0, len(anchors)).astype(np.float32)
    for sw in SWITCHES:
        for over in ({}, {"T": 1, "M": 2}, {"T": 5, "beta": 0.5, "rho": 0.2}, {"M": 0, "T": 0}):
            act, pred = run_act(activation.spread_activation, g, anchors, sims, sw, **over)
            ra, rp = run_act(ref.spread_activation, g, anchors, sims, sw, **over)
            assert act.dtype == np.float32 and pred.dtype == np.int32 and act.shape == (n,)
            np.testing.assert_allclose(act, ra, rtol=1e-5, atol=1e-6, err_msg=f"{sw} {over}")
            np.testing.assert_array_equal(pred, rp, err_msg=f"{sw} {over}")


def test_activation_hand_values():
    # 0 -> 1 (abstraction, w=1), 1 -> 2 (temporal, 24 h apart), node 3 isolated
    indptr = np.array([0, 1, 2, 2, 2], np.int64)
    indices = np.array([1, 2], np.int32)
    weights = np.array([1.0, 1.0], np.float32)
    etype = np.array([1, 0], np.uint8)
    ts = np.array([0, 0, 24 * HOUR_MS, 0], np.int64)
    g = (indptr, indices, weights, etype, ts)
    anchors, sims = np.array([0], np.int32), np.array([1.0], np.float32)
    sig = lambda x: 1 / (1 + math.exp(-5 * (x - 0.5)))  # noqa: E731
    act, pred = activation.activate(*g, anchors, sims, T=1, frontier_only=True)
    # u0 = 0.5, u1 = 0.8; inhibition of 0 by 1: 0.15 * 0.3
    assert act[0] == pytest.approx(sig(0.5 - 0.15 * 0.3), rel=1e-6)
    assert act[1] == pytest.approx(sig(0.8), rel=1e-6)
    assert act[2] == 0 and act[3] == 0 and pred.tolist() == [-1, 0, -1, -1]
    act, pred = activation.activate(*g, anchors, sims, T=2, frontier_only=True,
                                    use_inhibition=False)
    a0, a1 = sig(0.5), sig(0.8)
    assert act[2] == pytest.approx(sig(0.8 * math.exp(-0.01 * 24) * a1), rel=1e-6)
    assert act[1] == pytest.approx(sig(0.5 * a1 + 0.8 * a0), rel=1e-6)
    assert pred.tolist() == [-1, 0, 1, -1]
    act, _ = activation.activate(*g, anchors, sims, T=1)  # literal: every node fires
    assert act[3] == pytest.approx(sig(0.0), rel=1e-6)


def test_activation_validates():
    g = random_csr(np.random.default_rng(3), 10, 2.0)
    bad = (g[0], np.full_like(g[1], 10), *g[2:])
    with pytest.raises(ValueError):
        activation.activate(*bad, np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError):
        activation.activate(*g, np.array([10]), np.array([1.0]))
    ro = [x.copy() for x in g]
    for x in ro:
        x.setflags(write=False)
    act, _ = activation.activate(*ro, np.array([0]), np.array([1.0]))
    np.testing.assert_array_equal(act, activation.activate(*g, np.array([0]), np.array([1.0]))[0])


@pytest.mark.parametrize("n", [0, 1, 6, 60, 400])
def test_pagerank_matches_reference(n):
    rng = np.random.default_rng(200 + n)
    indptr, indices, weights, _, _ = random_csr(rng, n, 3.0)
    for d, tol, it in ((0.85, 1e-6, 100), (0.5, 1e-9, 100), (0.99, 1e-12, 7)):
        r, iters = pagerank.pagerank(indptr, indices, weights, damping=d, tol=tol, max_iter=it)
        rr, riters = ref.pagerank_csr(indptr, indices, weights, d, tol, it)
        assert r.shape == (n,) and r.dtype == np.float32
        np.testing.assert_allclose(r, rr, rtol=1e-5, atol=1e-7)
        assert iters == riters
        if n:
            assert r.sum() == pytest.approx(1.0, abs=1e-5)


def test_pagerank_hand_values():
    # 2-cycle -> 0.5 each; no edges -> uniform; star into 0 with dangling 0
    r, _ = pagerank.pagerank(np.array([0, 1, 2]), np.array([1, 0]), np.array([1.0, 1.0]))
    np.testing.assert_allclose(r, [0.5, 0.5], atol=1e-6)
    r, it = pagerank.pagerank(np.zeros(4, np.int64), np.zeros(0), np.zeros(0))
    np.testing.assert_allclose(r, [1 / 3] * 3, atol=1e-7)
    assert it == 1
    # 1 -> 0, 2 -> 0; node 0 dangling.  Stationary: r1 = r2 = x, r0 = y,
    # y = 0.05 + 0.85 (2x + y/3),  x = 0.05 + 0.85 y/3  (weights are normalised per source)
    r, _ = pagerank.pagerank(np.array([0, 0, 1, 2]), np.array([0, 0]), np.array([1.0, 0.5]))
    y, x = np.linalg.solve([[1 - 0.85 / 3, -1.7], [-0.85 / 3, 1.0]], [0.05, 0.05])
    np.testing.assert_allclose(r, [y, x, x], atol=1e-5)
    with pytest.raises(ValueError):
        pagerank.pagerank(np.array([0, 1]), np.array([0]), np.array([-1.0]))


def test_compiled_crc32c_equals_the_python_loop():
    """kernels.crc hands store_format compiled CRCs (accelerate); both must agree exactly."""
    from store_format import crc32c as py
    from synapse_cli.kernels import crc

    rng = np.random.default_rng(5)
    rows = rng.integers(0, 256, (40, 472), dtype=np.uint8)
    assert py._fast_one is crc.crc32c_fast  # installed by importing any kernel module
    fast = [py.crc32c(r.tobytes()) for r in rows], py.crc32c_rows(rows[:, ::2])
    saved = py._fast_one, py._fast_rows
    py.accelerate(None, None)
    try:
        slow = [py.crc32c(r.tobytes()) for r in rows], py.crc32c_rows(rows[:, ::2])
        assert py.crc32c(b"123456789") == 0xE3069283
    finally:
        py.accelerate(*saved)
    assert fast[0] == slow[0]
    np.testing.assert_array_equal(fast[1], slow[1])
    assert py.crc32c(b"123456789" * 3) == py.crc32c(b"123456789" * 2, py.crc32c(b"123456789"))
    buf = np.frombuffer(b"xx123456789yy", dtype=np.uint8)
    assert crc.crc32c_span(buf, 2, 11, crc.TABLE) == 0xE3069283
