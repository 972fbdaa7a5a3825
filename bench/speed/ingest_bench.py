"""Ingest speed: batch throughput against sentence-transformers, and a fresh process's start.

    .venv/bin/python bench/speed/ingest_bench.py [--data ../shared/data]

Prints one JSON object:
- batch: the five LoCoMo dev conversations ingested through the engine (embedding, BM25,
  edges, fsync, commit) into a new store in turns/s, and sentence-transformers' own batch
  encoding of the same texts ("speaker: text", what ingest embeds) in texts/s, in interleaved
  rounds of the same run (ratio = synapse / sentence-transformers, per round and median);
- cold: a 10,000-record store (the LoCoMo turns plus synthetic variants), then 7 fresh
  `synapse ingest` processes of one item and 7 fresh `synapse recall --no-touch` processes
  (median wall time), next to `python -c pass` and `synapse --version` in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from synapse_cli.engine.ingest import IngestConfig, ingest, retrieval_text  # noqa: E402
from synapse_cli.engine.inputs import Item  # noqa: E402
from synapse_cli.engine.store import StoreWriter  # noqa: E402
from synapse_cli.models.embedder import get_embedder  # noqa: E402

SYNAPSE = str(Path(sys.executable).with_name("synapse"))


def locomo_items(data: Path) -> list[Item]:
    convs = json.loads((data / "locomo" / "locomo_dev.json").read_text())
    items = []
    for conv in convs:
        c = conv["conversation"]
        for key in sorted((k for k in c if k.startswith("session_") and k.count("_") == 1),
                          key=lambda k: int(k.split("_")[1])):
            for turn in c[key] or []:
                items.append(Item(text=turn["text"], where=turn["dia_id"], speaker=turn["speaker"],
                                  session=f"{conv['sample_id']}:{key}", dia_id=turn["dia_id"]))
    return items


def timed(cmd: list[str], stdin: bytes = b"", env=None) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, input=stdin, capture_output=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stderr.decode()}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved batch rounds")
    args = ap.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    items = locomo_items(Path(args.data))
    texts = [retrieval_text(it) for it in items]  # what ingest embeds: the same input for both
    out: dict = {"benchmark": "ingest", "turns": len(items), "cpus": os.cpu_count()}

    embedder = get_embedder()
    from synapse_cli.models.embedder import SentenceTransformerEmbedder

    st = SentenceTransformerEmbedder()
    st.encode(texts[:32])  # warm up (model load is not part of the throughput)
    embedder.encode(texts[:32])
    with tempfile.TemporaryDirectory() as tmp:
        # Interleaved rounds, so that the other jobs on a shared machine weigh on both alike.
        rounds = []
        for k in range(args.rounds):
            t = time.perf_counter()
            st.encode(texts)
            st_s = time.perf_counter() - t
            store = Path(tmp) / f"st{k}"
            t = time.perf_counter()
            with StoreWriter.open(store, create=True) as w:
                r = ingest(w, items, embedder, IngestConfig())
            batch_s = time.perf_counter() - t
            rounds.append({"synapse_ingest_turns_per_s": round(len(items) / batch_s, 1),
                           "sentence_transformers_texts_per_s": round(len(texts) / st_s, 1),
                           "ratio": round(st_s / batch_s, 3),
                           "loadavg_1m": round(os.getloadavg()[0], 2)})
            print(f"round {k}: {rounds[-1]}", file=sys.stderr)
        out["batch"] = {"rounds": rounds, "stored": r.counts()["stored"],
                        "ratio_median": round(statistics.median(x["ratio"] for x in rounds), 3)}

        # Grow to 10,000 records with variants of the turns (new MD5s, same text statistics).
        need = 10_000 - r.counts()["stored"]
        extra = [Item(text=f"{it.text} (variant {k})", where="x", speaker=it.speaker,
                      session=f"variant-{k % 50}") for k, it in zip(range(need), items * 4)]
        with StoreWriter.open(store) as w:
            ingest(w, extra, embedder, IngestConfig())

        env = dict(os.environ)
        base = {"python_c_pass": [timed([sys.executable, "-c", "pass"]) for _ in range(args.runs)],
                "synapse_version": [timed([SYNAPSE, "--version"]) for _ in range(args.runs)]}
        ing = [timed([SYNAPSE, "--store", str(store), "ingest"],
                     json.dumps({"text": f"fresh item {k} at {time.time()}", "session": "cold"}).encode(),
                     env) for k in range(args.runs)]
        rec = [timed([SYNAPSE, "--store", str(store), "recall", "what did Caroline say about "
                      "her adoption plans?", "--no-touch"], env=env) for _ in range(args.runs)]
        out["cold"] = {"store_records": 10_000 + args.runs,
                       "ingest_one_item_median_s": round(statistics.median(ing), 3),
                       "ingest_one_item_max_s": round(max(ing), 3),
                       "recall_median_s": round(statistics.median(rec), 3),
                       "recall_max_s": round(max(rec), 3),
                       **{f"{k}_median_s": round(statistics.median(v), 3) for k, v in base.items()},
                       "runs": args.runs}
    out["loadavg"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
