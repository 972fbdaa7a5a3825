"""Filter exactness over random stores: no recall result, and no record on an --explain path
of a tag or time filter, outside the filter the caller asked for (a semantic node is inside a
time window only when every record it links is). Prints one JSON object.

    python bench/reliability/filter_leaks.py [--stores 20] [--queries 60]

Each store: 80-160 episodes from api.ingest (FakeEmbedder: BM25 postings, temporal edges,
speaker/session tags) with 0-3 tags from a pool of 43 (user:0..39 among them), 12 semantic
nodes with abstraction edges to random episodes, random association edges. Each query: random
words, 0-2 tags, 0-2 types, an optional time window, in every recall mode.
tests/test_filters.py runs the same check under hypothesis.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from store_format import flags as fl  # noqa: E402
from store_format import graph_files as gf  # noqa: E402
from store_format.tags import normalize_tag  # noqa: E402
from synapse_cli import api  # noqa: E402
from synapse_cli.engine import graphview  # noqa: E402
from synapse_cli.engine.memory import NewMemory  # noqa: E402
from synapse_cli.engine.recall import MODES, RecallConfig, recall  # noqa: E402
from synapse_cli.engine.store import Store, StoreWriter  # noqa: E402
from synapse_cli.models.fake import FakeEmbedder  # noqa: E402

EMB = FakeEmbedder(384)
T0 = 1_767_225_600_000  # 2026-01-01
DAY = 86_400_000
WORDS = "pin bank dog berlin lisbon marathon pottery review standup budget coffee tea".split()
TAGS = [f"user:{u}" for u in range(40)] + ["team", "private", "Café"]
TYPES = ["episodic", "working", "procedural", "semantic"]


def random_store(path, seed: int) -> dict:
    """Build a random store at `path`; returns the truth per text: (normalised tags, timestamp,
    type name)."""
    rng = np.random.default_rng(seed)
    truth, items = {}, []
    for i in range(int(rng.integers(80, 160))):
        tags = [str(t) for t in rng.choice(TAGS, size=int(rng.integers(0, 4)), replace=False)]
        text = " ".join(rng.choice(WORDS, size=5)) + f" #{i}"
        speaker, session = f"sp{rng.integers(0, 6)}", f"s{rng.integers(0, 4)}"
        ts = T0 + int(rng.integers(0, 60)) * DAY + i
        kind = str(rng.choice(["episodic", "episodic", "working", "procedural"]))
        items.append({"text": text, "speaker": speaker, "session": session, "tags": tags,
                      "timestamp": ts, "type": kind})
        truth[text] = ({normalize_tag(t) for t in tags}
                       | {f"speaker:{speaker}", f"session:{session}"}, ts, kind)
    api.ingest(items, store=str(path), embedder=EMB)
    with StoreWriter.open(path) as w:
        nodes = []
        for j in range(12):
            tags = [str(t) for t in rng.choice(TAGS, size=int(rng.integers(0, 2)), replace=False)]
            text = " ".join(rng.choice(WORDS, size=2)) + f" node{j}"
            ts = T0 + int(rng.integers(0, 60)) * DAY
            nodes.append(NewMemory(text=text, vector=EMB.encode([text])[0], timestamp_ms=ts,
                                   memory_type=fl.MemoryType.SEMANTIC, tags=tags,
                                   meta={"name": text}))
            truth[text] = ({normalize_tag(t) for t in tags}, ts, "semantic")
        episodes = np.arange(1, len(items) + 1)
        for nid in w.append(nodes):
            linked = rng.choice(episodes, size=8, replace=False)
            w.add_edges(np.full(8, nid), linked, gf.ABSTRACTION, 0.8)
            w.add_edges(linked, np.full(8, nid), gf.ABSTRACTION, 0.8)
        k = len(episodes)
        w.add_edges(rng.choice(episodes, k), rng.choice(episodes, k), gf.ASSOCIATION,
                    rng.uniform(0.2, 1, k).astype(np.float32))
        w.commit()
    return truth


def violations(store: Store, truth: dict, query: str, cfg: RecallConfig) -> list[str]:
    """Run one query; every result outside the filter, and every record of its path or via
    routes outside a tag or time filter, as a message (empty: exact)."""
    want = {normalize_tag(t) for t in cfg.tags}

    def in_window(ts):
        return ((cfg.since_ms is None or ts >= cfg.since_ms)
                and (cfg.until_ms is None or ts <= cfg.until_ms))

    arrays = graphview.build(store)
    out = recall(store, query, EMB.encode([query])[0], cfg, arrays, embed=EMB.encode)

    def node_in_window(rid) -> bool:
        """A semantic node holds what every record it links said: all of them in the window."""
        p = int(np.searchsorted(arrays.ids, np.uint64(rid)))
        linked = arrays.indices[arrays.indptr[p]:arrays.indptr[p + 1]]
        return all(in_window(int(t)) for t in arrays.timestamps[linked])

    bad = []
    for r in out["results"]:
        tags, ts, kind = truth[r["text"]]
        if not (want <= tags and in_window(ts) and ts == r["timestamp"]
                and (not cfg.types or kind in cfg.types)
                and (kind != "semantic" or node_in_window(r["id"]))):
            bad.append(f"result {r['id']} {r['text']!r}")
        routes = [r.get("path", [])] + r.get("via", [])  # via: routes through semantic nodes
        for step in (step for route in routes for step in route):
            rid = step["id"] if isinstance(step, dict) else int(step)
            ptags, pts, pkind = truth[store.body(rid)["text"]]
            if not (want <= ptags and in_window(pts)
                    and (pkind != "semantic" or node_in_window(rid))):
                bad.append(f"path {rid} of result {r['id']}")
    return bad


def random_filter(rng, mode: str) -> RecallConfig:
    tags = [str(t) for t in rng.choice(TAGS + ["speaker:sp1", "session:s2"],
                                       size=int(rng.integers(0, 3)), replace=False)]
    types = [str(t) for t in rng.choice(TYPES, size=int(rng.integers(0, 3)), replace=False)]
    days = sorted(int(d) for d in rng.integers(0, 60, 2))
    since = T0 + days[0] * DAY if rng.random() < 0.5 else None
    until = T0 + days[1] * DAY if rng.random() < 0.5 else None
    return RecallConfig(mode=mode, k=20, gate=False, explain=True, tags=tuple(tags),
                        types=tuple(types), since_ms=since, until_ms=until)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=int, default=20)
    ap.add_argument("--queries", type=int, default=60, help="per store and mode")
    a = ap.parse_args()
    t0 = time.time()
    rng = np.random.default_rng(2026)
    queries = results = 0
    leaks: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(a.stores):
            truth = random_store(Path(tmp) / f"s{seed}", 1000 + seed)
            with Store.open(Path(tmp) / f"s{seed}") as s:
                for mode in MODES:
                    for _ in range(a.queries):
                        cfg = random_filter(rng, mode)
                        q = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 4))))
                        leaks += violations(s, truth, q, cfg)
                        queries += 1
    print(json.dumps({"stores": a.stores, "modes": list(MODES), "queries": queries,
                      "leaks": len(leaks), "examples": leaks[:5],
                      "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
