"""Prune + compaction on a synthetic store.  Prints one JSON object; progress on stderr.

    python bench/speed/prune_bench.py [--records 100000] [--fraction 0.5] [--purge] [--keep DIR]

Builds a store like bench/speed/recall_speed.py (random unit vectors, texts over a Zipf vocabulary
with BM25 postings, temporal chains linked both ways) plus an ingest index, then in this
process: selects the older half with the `before` policy (`engine.maintenance.prune.select`), moves it to
the trash (in-place tombstones, `prune.trash`), and compacts (`prune.compact`, or purge with
--purge). Reports the time of each step, the bytes before/after and reclaimed, and checks that
the compacted store verifies and holds exactly the records that were kept, with their ids.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def _recall_speed():
    spec = importlib.util.spec_from_file_location("recall_speed",
                                                  ROOT / "bench" / "speed" / "recall_speed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--fraction", type=float, default=0.5, help="share of records pruned")
    ap.add_argument("--purge", action="store_true", help="purge instead of compact")
    ap.add_argument("--keep", metavar="DIR", help="build the store here and keep it")
    args = ap.parse_args()

    from store_format import ingest_index as ix
    from synapse_cli.engine.maintenance import prune as pr
    from synapse_cli.engine.store import Store, StoreWriter
    from synapse_cli.engine.maintenance.verify import verify

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="prune-bench-"))
    path = tmp / "store"
    shutil.rmtree(path, ignore_errors=True)
    out: dict = {"records": args.records, "fraction": args.fraction, "purge": args.purge}
    try:
        log(f"building {args.records} records in {path}")
        out["build"] = _recall_speed().build(path, args.records, seed=0, with_bm25=True)
        with StoreWriter.open(path) as w:  # the ingest index ingest would have written
            ids = np.asarray(w.ids, np.uint64)
            md5s = [int(i).to_bytes(16, "little") for i in ids.tolist()]
            ix.create(w.path / ix.NAME)
            n = ix.append(w.path / ix.NAME, 0, ix.make_entries(md5s, ids, ids % 97))
            w.stage(ingest={"file": ix.NAME, "entries": n})
            w.commit()
        with Store.open(path) as s:
            ts = np.concatenate([np.asarray(x.headers["timestamp_ms"]) for x in s.segments])
        cut = int(np.quantile(ts, args.fraction))

        with StoreWriter.open(path) as w:
            t0 = time.perf_counter()
            sel = pr.select(w, pr.PrunePolicy(before_ms=cut))
            out["select_s"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            trashed = pr.trash(w, sel.selected)
            out["trash_s"] = round(time.perf_counter() - t0, 3)
            out["trashed"] = len(trashed)
            kept = np.setdiff1d(np.asarray(w.ids, np.uint64), np.asarray(trashed, np.uint64))
            t0 = time.perf_counter()
            rep = pr.compact(w, purge=args.purge)
            out["compact_s"] = round(time.perf_counter() - t0, 3)
        for k in ("removed_records", "kept_records", "bytes_before", "bytes_after",
                  "bytes_reclaimed"):
            out[k] = rep[k]
        out["reclaimed_share"] = round(rep["bytes_reclaimed"] / rep["bytes_before"], 3)
        t0 = time.perf_counter()
        report = verify(path)
        out["verify_s"] = round(time.perf_counter() - t0, 3)
        with Store.open(path) as s:
            out["ids_kept_exactly"] = bool(np.array_equal(np.asarray(s.ids), kept))
        out["verify_ok"] = report.ok
        print(json.dumps(out))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
