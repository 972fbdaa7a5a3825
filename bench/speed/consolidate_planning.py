"""What a slice of `synapse consolidate` waits for before its first window on a large store:
planning (consolidate/run.py plan_windows, every unconsolidated episode's body read and
checked). A sliced run (api.run_consolidate) plans again in every slice and makes its slices
last SLICE_SETUP_RATIO times as long, so on a 100k-episode first run planning decides how long
an agent's `ingest` waits for the writer lock. Baseline in the same run: the same bodies read
one record at a time (`Store.body`, what planning did before it read one batch per segment).
Synthetic store (deterministic fake vectors: only reading is timed). Prints one JSON object.

With `--run-seconds N`, also a sliced consolidation of that store for N seconds, the model
replaced by an instant extractor (one entity per window, behind the Extractor Protocol): how
long each slice held the writer lock and planned, against the unsliced run, which holds it
for the whole work (all slices' lengths together).

    python bench/speed/consolidate_planning.py --episodes 60000
    python bench/speed/consolidate_planning.py --episodes 120000 --run-seconds 40
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import synapse_cli.kernels.crc  # noqa: E402,F401  (compiled CRC32C, as in every real run)
from synapse_cli.engine.consolidate.run import plan_windows  # noqa: E402
from synapse_cli.engine.ingest import IngestConfig, ingest  # noqa: E402
from synapse_cli.engine.inputs import item_from_object  # noqa: E402
from synapse_cli.engine.store import Store, StoreWriter  # noqa: E402
from synapse_cli.models.fake import FakeEmbedder  # noqa: E402

WORDS = "coffee berlin lisbon meeting design review budget standup dentist flat".split()


def build(path: Path, n: int) -> None:
    rnd = random.Random(1)
    with StoreWriter.open(path, create=True) as w:
        for start in range(0, n, 5000):
            items = [item_from_object({"text": f"turn {i} " + " ".join(rnd.choices(WORDS, k=8)),
                                       "speaker": rnd.choice(["ana", "bob"]),
                                       "session": f"s{i // 40}",
                                       "timestamp": 1_700_000_000_000 + i * 60_000}, f"x:{i}")
                     for i in range(start, min(n, start + 5000))]
            ingest(w, items, FakeEmbedder(), IngestConfig())


class InstantExtractor:
    """The Extractor Protocol without a model: the slices' own costs are what is timed."""
    cache_id = "instant-bench"

    def extract(self, texts):
        return {"entities": [{"name": "garden", "type": "concept", "description": "garden"}],
                "relations": []}


def sliced_run(path: Path, seconds: float) -> dict:
    """Each slice's planning and length (seconds) over a run of `seconds`."""
    import synapse_cli.engine.consolidate as consolidation
    from synapse_cli import api

    slices, whole = [], consolidation.consolidate

    def timed(*args, **kwargs):
        t = time.perf_counter()
        part = whole(*args, **kwargs)
        slices.append((part.setup_seconds, time.perf_counter() - t))
        return part
    with Store.open(path) as s:  # the fake vectors go by the name ingest recorded
        embedder = FakeEmbedder(name=s.manifest.embedder)
    consolidation.consolidate = timed
    try:
        res = api.run_consolidate(path, max_seconds=seconds, extractor=InstantExtractor(),
                                  embedder=embedder)
    finally:
        consolidation.consolidate = whole
    return {"run_seconds": seconds, "windows": res.windows, "slices": len(slices),
            "planning_s": [round(p, 2) for p, _ in slices],
            "slice_s": [round(x, 2) for _, x in slices],
            # unsliced, the lock is held for the whole work: every slice's length together
            "ratio_unsliced_over_longest_slice": round(sum(x for _, x in slices)
                                                       / max(x for _, x in slices), 2)}


def best_of(runs: int, fn) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=60000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--run-seconds", type=float, default=0.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="synapse-plan-") as tmp:
        path = Path(tmp) / "store"
        build(path, args.episodes)
        store = Store.open(path)
        ids = store.ids.tolist()
        windows = len(plan_windows(store, 5))
        one_by_one = best_of(args.runs, lambda: [store.body(i) for i in ids])
        planning = best_of(args.runs, lambda: plan_windows(store, 5))
        store.close()
        sliced = sliced_run(path, args.run_seconds) if args.run_seconds > 0 else None
    print(json.dumps({"benchmark": "consolidate_planning", "episodes": args.episodes,
                      "windows": windows, "runs": args.runs,
                      "baseline_bodies_one_by_one_s": round(one_by_one, 3),
                      "plan_windows_s": round(planning, 3),
                      "ratio_baseline_over_planning": round(one_by_one / planning, 2),
                      **({"sliced_run": sliced} if sliced else {})}))


if __name__ == "__main__":
    main()
