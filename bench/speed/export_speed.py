"""Export and import throughput (records/s), against plain ingest of the same texts in the same
run.  Prints one JSON object; progress on stderr.

    nice python bench/speed/export_speed.py [--export-records 100000] [--import-records 10000]
                                      [--keep DIR]

1. A synthetic store of --export-records records (bench/speed/recall_speed.py `build`: random unit
   vectors, random timestamps, temporal chains, BM25 over Zipf-distributed words) is exported
   (`api.export` to a file: reading every header and payload body, JSON lines).
2. The first --import-records records of that export (header counts adjusted, edges among them
   kept) are imported into a new store with the real all-MiniLM-L6-v2 (`api.import_store`), and
   the same texts are ingested into another new store (`api.ingest`: one transaction, as
   `synapse ingest` does). Both are dominated by embedding; the numbers say how much import adds.
3. The whole --export-records export is imported with a stand-in embedder (a hash of the text,
   no model) to measure everything import does besides embedding (checking, appending, BM25,
   ingest index, edges, one commit) at full size.

Embedding 100k texts with MiniLM takes ~15 min on 2 idle cores (117 texts/s, DESIGN.md), so the
real-model import and its ingest baseline run at 10k by default.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "speed"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class HashEmbedder:
    """Deterministic unit vectors from the text's hash: no model, so import's own cost shows."""

    name, dim = "all-MiniLM-L6-v2", 384

    def encode(self, texts):
        out = np.empty((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def head_of(export: Path, n: int, out: Path) -> int:
    """The first n records of `export` with the edges among them, as a valid export."""
    lines = export.read_bytes().splitlines()
    header = json.loads(lines[0])
    recs = lines[1:1 + n]
    ids = {json.loads(x)["id"] for x in recs}
    edges = [x for x in lines[1 + header["counts"]["records"]:]
             if json.loads(x)["src"] in ids and json.loads(x)["dst"] in ids]
    header["counts"] = {"records": len(recs), "nodes": 0, "edges": len(edges)}
    out.write_bytes(b"\n".join([json.dumps(header).encode()] + recs + edges) + b"\n")
    return len(recs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--export-records", type=int, default=100_000)
    ap.add_argument("--import-records", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep the stores")
    args = ap.parse_args()

    from recall_speed import build
    from synapse_cli import api
    from synapse_cli.models.embedder import get_embedder

    work = args.keep or Path(tempfile.mkdtemp(prefix="export_speed_"))
    work.mkdir(parents=True, exist_ok=True)
    res = {"cpus": os.cpu_count(), "export_records": args.export_records,
           "import_records": args.import_records}
    try:
        src = work / "src"
        shutil.rmtree(src, ignore_errors=True)
        log(f"building {args.export_records} records")
        t = time.perf_counter()
        build(src, args.export_records, 0, True)
        res["build_s"] = round(time.perf_counter() - t, 2)

        exp = work / "src.jsonl"
        t = time.perf_counter()
        counts = api.export(exp, store=src)
        s = time.perf_counter() - t
        res["export"] = {"seconds": round(s, 2), "records_per_s": round(counts["records"] / s),
                         "edges": counts["edges"], "bytes": exp.stat().st_size}
        log("export", res["export"])

        # real model: import vs ingest of the same texts, interleaved in this process
        e = get_embedder()
        e.encode(["warm up"])
        small = work / "small.jsonl"
        n = head_of(exp, args.import_records, small)
        items = [{"text": r["text"], "timestamp": r["timestamp_ms"]}
                 for r in map(json.loads, small.read_bytes().splitlines()[1:1 + n])]
        for d in ("imported", "ingested"):
            shutil.rmtree(work / d, ignore_errors=True)
        t = time.perf_counter()
        r = api.import_store(small, store=work / "imported", embedder=e)
        s = time.perf_counter() - t
        res["import_minilm"] = {"records": n, "seconds": round(s, 2),
                                "records_per_s": round(n / s, 1),
                                "embed_s": r["embed_seconds"]}
        log("import", res["import_minilm"])
        t = time.perf_counter()
        api.ingest(items, store=work / "ingested", embedder=e)
        s = time.perf_counter() - t
        res["ingest_minilm_baseline"] = {"records": n, "seconds": round(s, 2),
                                         "records_per_s": round(n / s, 1)}
        log("ingest", res["ingest_minilm_baseline"])
        res["import_over_ingest_time"] = round(res["import_minilm"]["seconds"] / s, 3)

        # full size, embedding excluded
        shutil.rmtree(work / "hashed", ignore_errors=True)
        t = time.perf_counter()
        r = api.import_store(exp, store=work / "hashed", embedder=HashEmbedder())
        s = time.perf_counter() - t
        res["import_without_model"] = {"records": r["records"], "edges": r["edges"],
                                       "seconds": round(s, 2),
                                       "records_per_s": round(r["records"] / s),
                                       "hash_embed_s": r["embed_seconds"]}
        log("import without model", res["import_without_model"])
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
