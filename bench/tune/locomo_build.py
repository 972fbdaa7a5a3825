"""Build (once) and cache the LoCoMo dev stores that bench/tune/locomo_tune.py sweeps over.

    python bench/tune/locomo_build.py [--data ../shared/data] [--consolidate] [--threads 2]

Per conversation, under bench/out/locomo_stores/<sample_id>/ (gitignored):
  plain/  every turn ingested through the engine API (one `ingest()`, default IngestConfig),
          exactly as bench/quality/locomo_recall.py does it;
  cons/   a copy of plain/ consolidated with the real extractor (engine `consolidate()` via
          `synapse_cli.api.run_consolidate`, packaged SmolLM2-135M), only with --consolidate.
A store that is already there is reused, so a rerun is instant (unless it was built from another
data file: each conversation's folder records the SHA-256 of the file it came from); consolidation
is the slow part (~6 turns/s). Prints one JSON object with what was built and how long it took.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "quality"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUT = ROOT / "bench" / "out" / "locomo_stores"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def build(args) -> dict:
    from locomo_recall import turns_of
    from synapse_cli.engine.ingest import IngestConfig, ingest
    from synapse_cli.engine.store import StoreWriter
    from synapse_cli.models.embedder import get_embedder

    raw = (Path(args.data) / "locomo" / "locomo_dev.json").read_bytes()
    data, digest = json.loads(raw), hashlib.sha256(raw).hexdigest()
    embedder = get_embedder()
    report = {}
    for conv in data:
        sid = conv["sample_id"]
        base = OUT / sid
        stamp = base / "data.sha256"
        if base.exists() and (not stamp.exists() or stamp.read_text() != digest):
            shutil.rmtree(base)  # built from other data
        base.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
        plain = base / "plain"
        rep = report.setdefault(sid, {})
        if not (plain / "ok").exists():
            shutil.rmtree(plain, ignore_errors=True)
            plain.mkdir(parents=True)
            items = turns_of(conv, sid)
            t = time.perf_counter()
            with StoreWriter.open(plain / "store", create=True, embedder=embedder.name,
                                  dim=embedder.dim) as w:
                res = ingest(w, items, embedder, IngestConfig())
            rep["ingest_s"] = round(time.perf_counter() - t, 1)
            rep["ingest"] = res.counts()
            (plain / "ok").write_text("1")
            log(sid, "ingested", rep)
        if args.consolidate:
            cons = base / "cons"
            if not (cons / "ok").exists():
                from synapse_cli.api import run_consolidate

                shutil.rmtree(cons, ignore_errors=True)
                shutil.copytree(plain, cons)
                (cons / "ok").unlink()
                t = time.perf_counter()
                res = run_consolidate(cons / "store", threads=args.threads, embedder=embedder)
                rep["consolidate_s"] = round(time.perf_counter() - t, 1)
                rep["consolidate"] = res.as_dict()
                (cons / "ok").write_text(json.dumps(rep["consolidate"]))
                log(sid, "consolidated", rep["consolidate"])
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--consolidate", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    t = time.perf_counter()
    load0 = round(os.getloadavg()[0], 2)
    out = {"benchmark": "locomo_build", "stores": build(args),
           "total_s": round(time.perf_counter() - t, 1),
           "loadavg_1m_at_start_and_end": [load0, round(os.getloadavg()[0], 2)]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
