"""Latency of every recall mode on a clustered store with engrams, and of `--mode synaptic` when
the stimulus reaches many records.  Prints one JSON object.

    python bench/speed/synaptic_speed.py [--records 100000] [--cluster 50] [--queries 20]

bench/speed/recall_speed.py times every mode on random unit vectors, where almost nothing passes
cos_th (0.26) and the stimulus stops at the first layer. Real memories come in topics. This
store has the same size but clustered vectors: `--cluster` records around each random centre
(cosine ~0.5 to it, ~0.25 to each other), random timestamps over two years, timestamp spikes only.
A query is a centre, so about `--cluster` records receive stimulus and all of them pass
stim_th: the original propagation (eqs. 10-13) makes one scan of the store per parent, the
centroid variant (appendix D) one per layer. So that `ecphory` searches real engrams and the
default mode has a graph to spread over, each cluster is also a document: its records carry
`source` "doc C", and a semantic node "doc C [TYPE] document" (vector: the centre) is linked to
them by ABSTRACTION edges both ways (weight 1), and to the first record of the next cluster
(weight 0.8), as consolidation links a document and a chunk that names it (engine/consolidate/doclinks.py).
Warm recall with the query vector given (embedding excluded), every mode on the same queries;
median and p90 in ms, and for synaptic the mean number of records stimulated.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from synapse_cli.engine import graphview  # noqa: E402
from synapse_cli.engine.memory import NewMemory  # noqa: E402
from synapse_cli.engine.recall import RecallConfig, recall  # noqa: E402
from synapse_cli.engine.store import Store, StoreWriter  # noqa: E402
from synapse_cli.engine.recall import SynapticConfig  # noqa: E402

DIM = 384
NOW = int(time.time() * 1000)
TWO_YEARS_MS = 2 * 365 * 24 * 3600 * 1000


def build(path: Path, n: int, cluster: int, rng) -> np.ndarray:
    from store_format import flags as fl
    from store_format import graph_files as gf

    centres = rng.standard_normal((n // cluster + 1, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    doc = np.arange(n) // cluster
    v = centres[doc] + rng.standard_normal((n, DIM)).astype(np.float32) / np.sqrt(DIM) * 1.7
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    ts = rng.integers(NOW - TWO_YEARS_MS, NOW, n)
    with StoreWriter.open(path, create=True) as w:
        ids = []
        for a in range(0, n, 50_000):
            ids += w.append([NewMemory(text=f"m{i}", vector=v[i], timestamp_ms=int(ts[i]),
                                       meta={"source": f"doc {doc[i]}"})
                             for i in range(a, min(n, a + 50_000))])
        n_docs = int(doc.max()) + 1
        nodes = np.asarray(w.append([NewMemory(
            text=f"doc {c} [TYPE] document [DESC] m{c * cluster}", vector=centres[c],
            timestamp_ms=NOW - TWO_YEARS_MS, memory_type=fl.MemoryType.SEMANTIC, resolved=True,
            meta={"name": f"doc {c}", "etype": "document"}) for c in range(n_docs)]), np.uint64)
        ids = np.asarray(ids, np.uint64)
        first = ids[::cluster][1:]                       # names the previous cluster's document
        src = np.concatenate([ids, nodes[doc], first, nodes[:len(first)]])
        dst = np.concatenate([nodes[doc], ids, nodes[:len(first)], first])
        wgt = np.concatenate([np.ones(2 * n), np.full(2 * len(first), 0.8)]).astype(np.float32)
        w.add_edges(src, dst, np.full(len(src), gf.ABSTRACTION, np.uint8), wgt)
        w.commit()
    return centres


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--cluster", type=int, default=50)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "synaptic_speed.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    out = {"benchmark": "synaptic_speed", "records": args.records, "cluster": args.cluster,
           "queries": args.queries, "loadavg_1m_at_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="synaptic-speed-") as tmp:
        path = Path(tmp) / "store"
        t0 = time.perf_counter()
        centres = build(path, args.records, args.cluster, rng)
        out["build_s"] = round(time.perf_counter() - t0, 1)
        queries = centres[rng.choice(len(centres) - 1, args.queries, replace=False)]
        cfgs = {m: RecallConfig(mode=m, k=30) for m in ("vector", "synapse", "ecphory")}
        for variant in ("original", "centroid"):
            cfgs[f"synaptic_{variant}"] = RecallConfig(
                mode="synaptic", k=30, synaptic=SynapticConfig(propagation=variant))
        with Store.open(path) as store:
            arrays = graphview.build(store)
            for cfg in cfgs.values():  # first query: compile or cache load, snapshot caches
                recall(store, "warm-up", queries[0], cfg, arrays, now_ms=NOW)
            modes = {}
            for name, cfg in cfgs.items():
                lat, stim = [], []
                for q in queries:
                    a = time.perf_counter()
                    res = recall(store, "q", q, cfg, arrays, now_ms=NOW, embed=lambda t: [q])
                    lat.append((time.perf_counter() - a) * 1000)
                    stim.append(res.get("stimulated", 0))
                    assert "fallback" not in res, res["fallback"]  # ecphory found engrams
                modes[name] = {"p50_ms": round(statistics.median(lat), 2),
                               "p90_ms": round(float(np.percentile(lat, 90)), 2)}
                if name.startswith("synaptic"):
                    modes[name]["mean_stimulated"] = round(statistics.mean(stim), 1)
            out["warm_recall_embedding_excluded"] = modes
    out["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
