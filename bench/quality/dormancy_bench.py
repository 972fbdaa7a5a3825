"""Dormancy (seed 000 node garbage collection) on the LoCoMo dev conversations.

    python bench/quality/dormancy_bench.py [--data ../shared/data] [--convs 5] [--windows 10]
                                   [--epsilon 0.01]

Per conversation: a copy of the plain store bench/tune/locomo_build.py built (every turn ingested),
plus the extraction cache of its consolidated store when there is one (the real model's results
for the same windows: a cache hit costs no model call; a miss runs the packaged SmolLM2), is
consolidated with the engine (`api.run_consolidate`, real MiniLM embedder, real extractor) with
dormancy on. Reports per conversation: windows, nodes, how many were archived / woken and are
archived at the end, the time spent observing dormancy (DormancyState.observe) against the whole
consolidation, PageRank from the cache vs computed, and evidence recall@10 (categories 1-4,
default `synapse` mode, gate off) of the same store with the archived nodes skipped (dormancy)
and with the dormancy state ignored (baseline), in the same run. Prints one JSON object and
writes it to bench/out/dormancy_bench.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "quality"))
sys.path.insert(0, str(ROOT / "bench" / "tune"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from locomo_build import OUT as STORES, log  # noqa: E402  (the stores locomo_build.py built)


def evidence_recall(store, arrays, conv, sid, embedder, k: int = 10) -> tuple[float, int]:
    from locomo_recall import dia_ids_by_record, gold_of, turns_by_md5, turns_of
    from synapse_cli.engine.recall import RecallConfig, recall

    items = turns_of(conv, sid)
    known = {it.dia_id for it in items}
    dia = dia_ids_by_record(store, arrays.ids, turns_by_md5(items))
    now_ms = max(it.timestamp_ms for it in items)
    qas = []
    for qa in conv["qa"]:
        if int(qa["category"]) == 5 or not qa.get("evidence"):
            continue
        gold = gold_of(qa, known, Counter())
        if gold:
            qas.append((qa["question"], set(gold)))
    vecs = embedder.encode([q for q, _ in qas])
    cfg = RecallConfig(gate=False)
    total = 0.0
    for (q, gold), v in zip(qas, vecs):
        r = recall(store, q, v, cfg, arrays, now_ms=now_ms)
        got = set().union(*[set(dia[x["id"]]) for x in r["results"][:k]]) if r["results"] else set()
        total += len(got & gold) / len(gold)
    return total / max(len(qas), 1), len(qas)


def run(args) -> dict:
    from synapse_cli import api
    from synapse_cli.engine import graphview, pagerank_cache
    from synapse_cli.engine.consolidate import dormancy
    from synapse_cli.engine.store import Store
    from synapse_cli.models.embedder import get_embedder
    from store_format import flags as fl

    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())[: args.convs]
    embedder = get_embedder()
    observe_s = [0.0]
    orig = dormancy.DormancyState.observe

    def timed_observe(self, *a, **kw):
        t = time.perf_counter()
        try:
            return orig(self, *a, **kw)
        finally:
            observe_s[0] += time.perf_counter() - t

    dormancy.DormancyState.observe = timed_observe
    out = {"benchmark": "dormancy", "windows_W": args.windows, "epsilon": args.epsilon,
           "conversations": {}}
    for conv in data:
        sid = conv["sample_id"]
        plain = STORES / sid / "plain" / "store"
        if not (plain.parent / "ok").exists():
            raise SystemExit(f"{plain}: not built; run bench/tune/locomo_build.py")
        with tempfile.TemporaryDirectory(prefix="synapse-dormancy-") as tmp:
            path = Path(tmp) / "store"
            shutil.copytree(plain, path)
            cons = STORES / sid / "cons" / "store"
            for name in ("extract.cache", "extract.models"):
                if (cons / name).exists():
                    shutil.copy2(cons / name, path / name)
            observe_s[0] = 0.0
            t = time.perf_counter()
            res = api.run_consolidate(path, embedder=embedder, dormancy_windows=args.windows,
                                      dormancy_epsilon=args.epsilon)
            cons_s = time.perf_counter() - t
            rep = {"consolidate": res.as_dict(), "consolidate_s": round(cons_s, 1),
                   "observe_s": round(observe_s[0], 2)}
            with Store.open(path) as s:
                arrays = graphview.build(s)
                sem = (fl.memory_type_code(arrays.flags) == fl.MemoryType.SEMANTIC) \
                    & ~fl.is_tombstone(arrays.flags)
                rep["semantic_nodes"] = int(sem.sum())
                rep["archived_at_end"] = int(arrays.dormant.sum())
                t = time.perf_counter()
                cached = pagerank_cache.load(s, arrays)
                rep["pagerank_cache_load_ms"] = round((time.perf_counter() - t) * 1000, 2)
                t = time.perf_counter()
                pagerank_cache.compute(arrays)
                rep["pagerank_compute_ms"] = round((time.perf_counter() - t) * 1000, 2)
                rep["pagerank_cache_fresh"] = cached is not None
                r_dorm, n = evidence_recall(s, arrays, conv, sid, embedder)
                s.manifest = dataclasses.replace(s.manifest, dormancy=None)  # ignore the state
                base = graphview.build(s)
                r_base, _ = evidence_recall(s, base, conv, sid, embedder)
            rep["questions"] = n
            rep["recall@10_dormancy"] = round(100 * r_dorm, 1)
            rep["recall@10_no_dormancy"] = round(100 * r_base, 1)
            out["conversations"][sid] = rep
            log(sid, json.dumps(rep))
    convs = out["conversations"].values()
    q = sum(c["questions"] for c in convs)
    out["total"] = {
        "semantic_nodes": sum(c["semantic_nodes"] for c in convs),
        "archived_at_end": sum(c["archived_at_end"] for c in convs),
        "windows": sum(c["consolidate"]["windows"] for c in convs),
        "consolidate_s": round(sum(c["consolidate_s"] for c in convs), 1),
        "observe_s": round(sum(c["observe_s"] for c in convs), 2),
        "questions": q,
        "recall@10_dormancy": round(sum(c["recall@10_dormancy"] * c["questions"]
                                        for c in convs) / max(q, 1), 1),
        "recall@10_no_dormancy": round(sum(c["recall@10_no_dormancy"] * c["questions"]
                                           for c in convs) / max(q, 1), 1),
    }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--convs", type=int, default=5)
    p.add_argument("--windows", type=int, default=10)
    p.add_argument("--epsilon", type=float, default=0.01)
    args = p.parse_args()
    out = run(args)
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "dormancy_bench.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
