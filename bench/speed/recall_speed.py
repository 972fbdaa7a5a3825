"""Recall speed on synthetic stores.  Prints one JSON object; progress on stderr.

    python bench/speed/recall_speed.py [--records 10000,100000[,1000000]] [--queries 60]
                                 [--bm25-max 1000000] [--keep DIR]

Per size: a synthetic store (random unit vectors, quantised by the store; random timestamps over
two years; random temporal chains of 2-60 records linked both ways as ingest links a session;
BM25 over short texts drawn from a Zipf-distributed 5,000-word vocabulary) is built through
`StoreWriter.append` in batches of 100k, `BM25Index.add` and one commit.  Then, in this process:

* header scan throughput (GB/s over the raw record bytes of every segment) against a numpy copy
  of the same bytes, interleaved in the same run (page cache warm; median of repeats);
* per-snapshot costs paid by the first query of a Recaller: graphview.build, BM25 index open,
  PageRank (all cached per Recaller afterwards);
* warm recall p50/p90 per mode with the query vector given (embedding excluded), and through
  `Recaller.recall(touch=False)` (embedding included), plus a stage breakdown of synapse mode.

Also: numba kernel compile time (fresh cache) vs loading the same kernels from the cache, each in
a fresh process; and on the smallest store, cold `synapse recall` in a fresh process (median of
7, wall time) against `python -c pass` and `synapse --version` measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

DIM = 384
BATCH = 100_000
VOCAB = 5_000
NOW = int(time.time() * 1000)
TWO_YEARS_MS = 2 * 365 * 24 * 3600 * 1000


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def pct(xs, q):
    return round(float(np.percentile(xs, q)), 3)


def vocabulary(rng):
    words = np.array([f"w{i:04d}" for i in range(VOCAB)])
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    return words, p / p.sum()


def texts(rng, words, p, n, lo=6, hi=16):
    lens = rng.integers(lo, hi, n)
    flat = rng.choice(len(words), int(lens.sum()), p=p)
    out, pos = [], 0
    for L in lens.tolist():
        out.append(" ".join(words[flat[pos:pos + L]]))
        pos += L
    return out


def build(path: Path, n: int, seed: int, with_bm25: bool) -> dict:
    from store_format import graph_files as gf
    from synapse_cli.engine.memory import NewMemory
    from synapse_cli.engine.store import StoreWriter
    from synapse_cli.models.bm25 import BM25Index

    rng = np.random.default_rng(seed)
    words, p = vocabulary(rng)
    ts_all = rng.integers(NOW - TWO_YEARS_MS, NOW, n)
    t = {"append_s": 0.0, "bm25_s": 0.0, "edges_s": 0.0}
    t0 = time.perf_counter()
    with StoreWriter.open(path, create=True) as w:
        bm25 = BM25Index.open(w.path, None, append_only=True) if with_bm25 else None
        committed = None
        all_ids = []
        for start in range(0, n, BATCH):
            m = min(BATCH, n - start)
            v = rng.standard_normal((m, DIM)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            txt = texts(rng, words, p, m)
            a = time.perf_counter()
            mems = [NewMemory(text=txt[i], vector=v[i], timestamp_ms=int(ts_all[start + i]))
                    for i in range(m)]
            ids = w.append(mems)
            t["append_s"] += time.perf_counter() - a
            all_ids.extend(ids)
            if bm25 is not None:
                a = time.perf_counter()
                committed = bm25.add(ids, txt)
                t["bm25_s"] += time.perf_counter() - a
            log(f"  built {start + m}/{n}")
        a = time.perf_counter()
        ids = np.asarray(all_ids, np.uint64)
        # random temporal chains: permute, cut into chains of 2-60, order each by time
        perm = rng.permutation(n)
        cuts = np.cumsum(rng.integers(2, 61, n // 2 + 1))
        cuts = cuts[cuts < n]
        chain = np.zeros(n, np.int64)
        chain[cuts] = 1
        chain = np.cumsum(chain)
        order = np.lexsort((ts_all[perm], chain))
        seq, ch = perm[order], chain[order]
        link = ch[1:] == ch[:-1]
        src, dst = ids[seq[:-1][link]], ids[seq[1:][link]]
        w.add_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), gf.TEMPORAL, 1.0)
        t["edges_s"] = time.perf_counter() - a
        if committed is not None:
            w.stage(bm25=committed)
        a = time.perf_counter()
        w.commit()
        t["commit_s"] = time.perf_counter() - a
    t["total_s"] = time.perf_counter() - t0
    t["edges"] = int(2 * link.sum())
    t["chains"] = int(chain.max() + 1)
    t["disk_mb"] = round(sum(f.stat().st_size for f in path.iterdir()) / 1e6, 1)
    t["records_per_s"] = round(n / t["total_s"])
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in t.items()}


def scan_vs_copy(store, repeats: int) -> dict:
    """GB/s of the header scan over every segment's raw bytes against np.copy of the same bytes,
    interleaved. `scan` is the scan as a warm recall runs it (per-snapshot 1/||q|| cached,
    output arrays reused); `scan_first` is a snapshot's first query (norms computed: a second
    pass over each vector, fresh output arrays)."""
    from synapse_cli.kernels.header_scan import scan

    q = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
    q /= np.linalg.norm(q)
    hv = store.segments[0].header.header_version
    raws = [s.raw for s in store.segments if s.n]
    nbytes = sum(r.nbytes for r in raws)
    norms = [np.empty(len(r), np.float32) for r in raws]
    outs = [tuple(np.empty(len(r), np.float32) for _ in range(3)) for r in raws]
    for r, nv in zip(raws, norms):  # page cache warm, kernels loaded, norms filled
        np.copy(r)
        scan(r, hv, DIM, q, NOW, inv_norm=nv)
    ts = {"scan": [], "scan_first": [], "copy": []}
    for _ in range(repeats):
        a = time.perf_counter()
        for r, nv, o in zip(raws, norms, outs):
            scan(r, hv, DIM, q, NOW, inv_norm=nv, inv_norm_ready=True, out=o)
        ts["scan"].append(time.perf_counter() - a)
        a = time.perf_counter()
        for r in raws:
            scan(r, hv, DIM, q, NOW)
        ts["scan_first"].append(time.perf_counter() - a)
        a = time.perf_counter()
        for r in raws:
            np.copy(r)
        ts["copy"].append(time.perf_counter() - a)
    med = {k: statistics.median(v) for k, v in ts.items()}
    out = {"bytes": nbytes, "repeats": repeats}
    for k in ts:
        out[f"{k}_gbps_median"] = round(nbytes / med[k] / 1e9, 2)
        out[f"{k}_gbps_best"] = round(nbytes / min(ts[k]) / 1e9, 2)
    out["scan_over_copy_median"] = round(med["copy"] / med["scan"], 3)
    out["scan_first_over_copy_median"] = round(med["copy"] / med["scan_first"], 3)
    out["scan_ms_median"] = round(med["scan"] * 1000, 3)
    return out


class StageTimer:
    """Wrap the recall pipeline's functions to time each stage (synapse mode)."""

    def __init__(self, store):
        import synapse_cli.engine.recall.signals as R
        import synapse_cli.engine.recall.synapse as P
        import synapse_cli.kernels.activation as A

        self.t = {k: 0.0 for k in ("scan", "bm25", "activation", "rank", "bodies")}
        self._undo = []
        for mod, name, key in ((R, "scan_records", "scan"), (R, "_bm25", "bm25"),
                               (A, "activate", "activation"), (P, "rank", "rank")):
            self._wrap(mod, name, key)
        self._wrap(store, "bodies", "bodies")

    def _wrap(self, obj, name, key):
        orig = getattr(obj, name)

        def timed(*a, **kw):
            s = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                self.t[key] += time.perf_counter() - s

        setattr(obj, name, timed)
        self._undo.append((obj, name, orig, isinstance(obj, type(sys)) or False))

    def restore(self):
        for obj, name, orig, is_mod in self._undo:
            if is_mod:
                setattr(obj, name, orig)
            else:
                delattr(obj, name)  # instance attribute shadowing the method


def measure(path: Path, n: int, n_queries: int, embedder, mode_names) -> dict:
    import dataclasses

    from synapse_cli.engine import graphview
    from synapse_cli.engine.recall import RecallConfig, recall
    from synapse_cli.engine.recall import Recaller

    rng = np.random.default_rng(7)
    words, p = vocabulary(rng)
    queries = texts(rng, words, p, n_queries, 3, 7)
    qvecs = embedder.encode(queries)
    out = {}
    with Recaller(path, embedder=embedder) as rc:
        store = rc.store
        out["scan_vs_copy"] = scan_vs_copy(store, repeats=15 if n <= 100_000 else 7)
        first = {}
        a = time.perf_counter()
        arrays = graphview.build(store)
        first["graphview_build_ms"] = round((time.perf_counter() - a) * 1000, 1)
        if store.manifest.bm25 is not None:
            from synapse_cli.models.bm25 import BM25Index

            a = time.perf_counter()
            idx = BM25Index.open(store.path, store.manifest.bm25)
            idx.scores(queries[0])  # postings CSR and statistics are built on first use
            first["bm25_open_and_first_score_ms"] = round((time.perf_counter() - a) * 1000, 1)
            del idx
        if len(arrays.indices):
            from synapse_cli.kernels.pagerank import pagerank

            a = time.perf_counter()
            pagerank(arrays.indptr, arrays.indices, arrays.weights, validate=False)
            first["pagerank_ms"] = round((time.perf_counter() - a) * 1000, 1)
        a = time.perf_counter()
        recall(store, queries[0], qvecs[0], RecallConfig(), arrays)
        first["first_recall_ms_with_fresh_caches"] = round((time.perf_counter() - a) * 1000, 1)
        first["note"] = ("paid once per Recaller (per store snapshot); later queries reuse them "
                         "through RecallArrays.cache")
        out["per_snapshot_first_query"] = first

        modes = {}
        for mode in mode_names:
            cfg = RecallConfig(mode=mode)
            if mode in ("bm25", "hybrid") and store.manifest.bm25 is None:
                continue
            recall(store, queries[0], qvecs[0], cfg, arrays)  # warm
            lat = []
            for q, v in zip(queries, qvecs):
                a = time.perf_counter()
                recall(store, q, v, cfg, arrays)
                lat.append((time.perf_counter() - a) * 1000)
            rc._arrays = arrays
            rc.recall(queries[0], cfg, touch=False)
            lat_e = []
            for q in queries:
                a = time.perf_counter()
                rc.recall(q, cfg, touch=False)
                lat_e.append((time.perf_counter() - a) * 1000)
            modes[mode] = {"p50_ms_embedding_excluded": pct(lat, 50),
                           "p90_ms_embedding_excluded": pct(lat, 90),
                           "p50_ms_embedding_included": pct(lat_e, 50),
                           "p90_ms_embedding_included": pct(lat_e, 90)}
        out["warm_recall"] = modes
        # stage breakdown, synapse mode, k=30 (default)
        timer = StageTimer(store)
        try:
            a = time.perf_counter()
            for q, v in zip(queries, qvecs):
                recall(store, q, v, RecallConfig(), arrays)
            total = time.perf_counter() - a
        finally:
            timer.restore()
        st = {k: round(v / n_queries * 1000, 3) for k, v in timer.t.items()}
        st["other"] = round(total / n_queries * 1000 - sum(st.values()), 3)
        st["total"] = round(total / n_queries * 1000, 3)
        out["synapse_stage_ms_mean"] = st
        a = time.perf_counter()
        embedder.encode([queries[0]])
        out["query_embedding_ms_one"] = round((time.perf_counter() - a) * 1000, 2)
        cfg = dataclasses.replace(RecallConfig(), k=10)
        lat = []
        for q, v in zip(queries, qvecs):
            a = time.perf_counter()
            recall(store, q, v, cfg, arrays)
            lat.append((time.perf_counter() - a) * 1000)
        out["warm_recall"]["synapse_k10"] = {"p50_ms_embedding_excluded": pct(lat, 50),
                                             "p90_ms_embedding_excluded": pct(lat, 90)}
    return out


COMPILE_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
out = {}
t = time.perf_counter(); import numba; out["import_numba_s"] = time.perf_counter() - t
def run(name, fn):
    t = time.perf_counter(); fn(); out[name] = time.perf_counter() - t
def hs():
    from synapse_cli.kernels.header_scan import scan
    from synapse_cli.kernels.ranking import top_k
    r = np.zeros((4, 64 + 384 + 24), np.uint8); q = np.zeros(384, np.float32)
    sim = scan(r, 3, 384, q, 0)[0]; top_k(sim, 2, -np.inf)
def act():
    from synapse_cli.kernels.activation import activate
    indptr = np.array([0, 1, 2], np.int64); ind = np.array([1, 0], np.int32)
    activate(indptr, ind, np.ones(2, np.float32), np.zeros(2, np.uint8), np.zeros(2, np.int64),
             np.array([0], np.int32), np.ones(1, np.float32), alpha=1.0, S=0.8, delta=0.5,
             rho=0.01, beta=0.15, M=7, gamma=5.0, theta=0.5, T=3, use_fan=True,
             use_inhibition=True, frontier_only=True, validate=False)
def pr():
    from synapse_cli.kernels.pagerank import pagerank
    pagerank(np.array([0, 1, 2], np.int64), np.array([1, 0], np.int32), np.ones(2, np.float32),
             validate=False)
def bm():
    from synapse_cli.kernels import bm25 as k, crc
    crc.crc32c_fast(b"x" * 100)
    k.bm25_accumulate(np.array([0, 1], np.int64), np.array([0], np.int32),
                      np.array([1], np.uint32), np.array([0], np.int64), np.ones(1),
                      np.ones(1), np.ones(1, bool), 1.5, np.zeros(1))
    k.postings_csr(np.array([0], np.uint32), np.array([1], np.uint32), np.array([1], np.uint32), 1)
for name, fn in (("header_scan_s", hs), ("activation_s", act), ("pagerank_s", pr), ("bm25_s", bm)):
    try:
        run(name, fn)
    except Exception as exc:
        out[name] = "error: %s" % exc
print(json.dumps(out))
"""


def compile_times() -> dict:
    cache = tempfile.mkdtemp(prefix="synapse-numba-cache-")
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    res = {}
    try:
        for label in ("compile_fresh_cache", "load_from_cache", "load_from_cache_again"):
            a = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", COMPILE_CHILD, str(ROOT)], env=env,
                               capture_output=True, text=True)
            wall = time.perf_counter() - a
            if p.returncode:
                res[label] = {"error": p.stderr[-500:]}
                continue
            d = json.loads(p.stdout)
            d = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}
            d["process_wall_s"] = round(wall, 3)
            res[label] = d
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    res["note"] = ("each: import of the kernel module + first call on tiny inputs, in a fresh "
                   "process with NUMBA_CACHE_DIR pointing at a temp dir that starts empty")
    return res


def cold_cli(path: Path, runs: int = 7) -> dict:
    exe = Path(sys.executable).parent / "synapse"
    synapse = [str(exe)] if exe.exists() else [sys.executable, "-m", "synapse_cli.commands.main"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    cmds = {
        "python_c_pass": [sys.executable, "-c", "pass"],
        "synapse_version": synapse + ["--version"],
        "synapse_recall": synapse + ["--store", str(path), "recall", "w0003 w0100 w0042 w0777",
                                     "--k", "10"],
        "synapse_recall_no_touch": synapse + ["--store", str(path), "recall",
                                              "w0003 w0100 w0042 w0777", "--k", "10",
                                              "--no-touch"],
    }
    times = {k: [] for k in cmds}
    errors = {}
    for name, cmd in cmds.items():  # one untimed run each (page cache, numba cache exist)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode:
            errors[name] = (p.returncode, p.stderr[-400:])
    for _ in range(runs):  # interleaved, so load changes hit every command alike
        for name, cmd in cmds.items():
            a = time.perf_counter()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            times[name].append(time.perf_counter() - a)
            if p.returncode:
                errors[name] = (p.returncode, p.stderr[-400:])
            elif name.startswith("synapse_recall"):
                json.loads(p.stdout.splitlines()[0])
    out = {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3),
               "max_s": round(max(v), 3)} for k, v in times.items()}
    out["recall_minus_python_startup_s"] = round(
        out["synapse_recall"]["median_s"] - out["python_c_pass"]["median_s"], 3)
    out["recall_minus_version_s"] = round(
        out["synapse_recall"]["median_s"] - out["synapse_version"]["median_s"], 3)
    out["runs"] = runs
    out["store_records"] = None
    if errors:
        out["errors"] = errors
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="unused (synthetic data); accepted for uniformity with the other benches")
    ap.add_argument("--records", default="10000,100000")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--bm25-max", type=int, default=10**9,
                    help="skip BM25 postings for stores larger than this")
    ap.add_argument("--keep", default=None, help="build the stores here and keep them")
    ap.add_argument("--reuse", action="store_true",
                    help="with --keep: measure a store already built there instead of rebuilding")
    ap.add_argument("--modes", default=None,
                    help="comma-separated recall modes to time (default: every mode of recall.MODES)")
    ap.add_argument("--skip-compile", action="store_true", help="do not measure numba compile times")
    ap.add_argument("--skip-cold", action="store_true", help="do not measure cold CLI recall")
    args = ap.parse_args()
    sizes = [int(x) for x in args.records.split(",")]
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="synapse-speed-"))
    base.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(base).free / 1e9
    t_all = time.perf_counter()

    from synapse_cli.models.embedder import get_embedder

    result = {"benchmark": "recall_speed", "dim": DIM, "header_version": 3, "cpus": os.cpu_count(),
              "disk_free_gb_at_start": round(free_gb, 1),
              "omp_wait_policy": None, "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
              "sizes": {}}
    from synapse_cli.engine.recall import MODES

    modes = args.modes.split(",") if args.modes else list(MODES)
    if not args.skip_compile:
        log("kernel compile times ...")
        result["kernels"] = compile_times()
    a = time.perf_counter()
    embedder = get_embedder()
    embedder.encode(["warm up"])
    result["embedder_load_s"] = round(time.perf_counter() - a, 2)
    try:
        for n in sizes:
            path = base / f"store-{n}"
            with_bm25 = n <= args.bm25_max
            if args.reuse and args.keep and (path / "MANIFEST").exists():
                entry = {"build": "reused", "bm25": with_bm25}
            else:
                if path.exists():
                    shutil.rmtree(path)
                log(f"building {n} records (bm25={with_bm25}) ...")
                entry = {"build": build(path, n, seed=n, with_bm25=with_bm25), "bm25": with_bm25}
                log(f"  {entry['build']}")
            log(f"measuring {n} ...")
            entry.update(measure(path, n, args.queries, embedder, modes))
            entry["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
            result["sizes"][str(n)] = entry
            log(json.dumps(entry["warm_recall"]))
        if not args.skip_cold:
            small = base / f"store-{min(sizes)}"
            log(f"cold CLI on {small} ...")
            result["cold_cli"] = cold_cli(small)
            result["cold_cli"]["store_records"] = min(sizes)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    result["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    result["total_s"] = round(time.perf_counter() - t_all, 1)
    result["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
