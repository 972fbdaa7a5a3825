"""What the name-free similarity (score.name_free_sim, engine/recall/speakers.py) costs a warm
recall: p50/p90 of `recall()` with the embedder's encode included, on the agent-use chats'
stores, for the questions that name a speaker, with the setting on and off, interleaved in one
run; `on-recaller` is `Recaller.recall` (what the CLI, the API and MCP call), which encodes the
query and its name-free form in one batch. Prints one JSON object.

    python bench/speed/name_free_cost.py [--repeats 5]
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
sys.path.insert(0, str(ROOT / "bench" / "quality"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

import agent_use  # noqa: E402
from synapse_cli.engine import graphview  # noqa: E402
from synapse_cli.engine.recall import RecallConfig, Recaller, recall  # noqa: E402
from synapse_cli.engine.recall.speakers import without_speakers  # noqa: E402
from synapse_cli.engine.store import Store  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from synapse_cli.models.embedder import get_embedder

    emb = get_embedder()
    emb.encode(["warm up"])
    times = {"on": [], "off": [], "on-recaller": []}
    n_q = 0
    for name in agent_use.HALVES["tune"]:
        questions = json.loads((agent_use.DATA / f"{name}.questions.json").read_text())
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "store"
            agent_use.build_store(path, name, emb, False)
            store = Store.open(path)
            arrays = graphview.build(store)
            asked = [q["question"] for q in questions
                     if without_speakers(store, arrays, q["question"]) is not None]
            n_q += len(asked)
            cfgs = {"on": RecallConfig(k=10), "off": RecallConfig(k=10, name_free_sim=0.0)}
            recaller = Recaller(path, embedder=emb)
            recaller.recall("warm up", touch=False)  # its snapshot, as `arrays` above
            for _ in range(args.repeats):
                for q in asked:
                    for label, cfg in cfgs.items():  # interleaved: same load for all
                        t = time.perf_counter()
                        recall(store, q, emb.encode([q])[0], cfg, arrays, embed=emb.encode)
                        times[label].append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    recaller.recall(q, RecallConfig(k=10), touch=False)
                    times["on-recaller"].append((time.perf_counter() - t) * 1000)
            recaller.close()
            store.close()
    out = {"benchmark": "name_free_cost", "questions_naming_a_speaker": n_q,
           "repeats": args.repeats, "loadavg_1m": round(os.getloadavg()[0], 2)}
    for label, ts in times.items():
        out[label] = {"p50_ms": round(statistics.median(ts), 2),
                      "p90_ms": round(float(np.percentile(ts, 90)), 2)}
    out["p50_ratio_on_over_off"] = round(out["on"]["p50_ms"] / out["off"]["p50_ms"], 2)
    out["p50_ratio_recaller_over_off"] = round(out["on-recaller"]["p50_ms"]
                                               / out["off"]["p50_ms"], 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
