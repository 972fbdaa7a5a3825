"""Big-document ingest: chunks/s and peak memory of `synapse ingest --format doc`, against
sentence-transformers encoding the same chunks in the same run.  Prints one JSON object;
progress on stderr.

    nice python bench/speed/ingest_doc_speed.py --data ../shared/data [--real-mb 1] [--big-mb 6 48]

The document is real prose: LoCoMo turns and HotpotQA paragraphs, joined (about 2 MB); a
bigger document repeats it with a numbered line before each copy, so no chunk repeats.

1. `synapse ingest --format doc` of a --real-mb document into a new store (a child process:
   wall time, peak RSS), then, in their own child processes, the same chunks encoded by the
   sentence-transformers all-MiniLM-L6-v2 (the reference pipeline, batch 32) and by synapse's
   numpy MiniLM alone. The first is the user's number; the other two say what the model costs.
2. The --big-mb documents through the command's own reading, checking and batching code
   (commands/ingest_cmd.py) and `api.Ingester`, with a stand-in embedder (a hash of the text):
   everything but the model, at the size that once took 2.3 GB, to show the peak memory does
   not grow with the file.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PY = sys.executable
SYNAPSE = str(Path(PY).with_name("synapse"))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def prose(data: Path) -> str:
    parts = []
    for conv in json.loads((data / "locomo" / "locomo_dev.json").read_text()):
        for key, turns in conv["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                parts += [f"{t['speaker']}: {t['text']}" for t in turns]
    corpus = json.loads((data / "hotpotqa" / "hotpotqa_dev100_corpus.json").read_text())
    parts += [f"{title}. {''.join(sents)}" for title, sents in corpus.items()]
    return "\n".join(parts)


def document(text: str, mb: float, path: Path) -> Path:
    size, copy = int(mb * 1_000_000), 0
    with path.open("w", encoding="utf-8") as f:
        while f.tell() < size:
            copy += 1
            f.write(f"Copy {copy}.\n{text[:size - f.tell()]}\n")
    return path


def child(args: list[str], env: dict | None = None) -> dict:
    """Run a child process; its wall seconds, its own peak RSS (MB, from wait4) and stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err,
                                env=dict(os.environ, HF_HUB_OFFLINE="1", **(env or {})))
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode:
            raise SystemExit(f"{args[:3]} failed: {err.read().decode()[-2000:]}")
        return {"seconds": seconds, "stdout": out.read().decode(),
                "rss_mb": round(usage.ru_maxrss / 1024, 1)}  # Linux: kB


ENCODE = """
import sys, json, time
from synapse_cli.models.embedder import get_embedder
chunks = [l for l in open(sys.argv[2], encoding="utf-8").read().split("\\x1e") if l]
e = get_embedder(sys.argv[1])
t = time.perf_counter(); e.encode(chunks); print(json.dumps({"encode_s": time.perf_counter() - t}))
"""

PIPELINE = """
import sys, json, time, hashlib
import numpy as np
sys.argv = sys.argv[1:]
from synapse_cli import api
from synapse_cli.commands import ingest_cmd
class HashEmbedder:
    name, dim = "all-MiniLM-L6-v2", 384
    def encode(self, texts):
        out = np.empty((len(texts), 384), np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(384)
        return out / np.linalg.norm(out, axis=1, keepdims=True)
doc, store = sys.argv[0], sys.argv[1]
t = time.perf_counter()
sources = ingest_cmd._open_inputs([doc])
total = ingest_cmd._check_all(sources, "doc", False)
stored = 0
with api.Ingester(store, embedder=HashEmbedder()) as ing:
    for group in ingest_cmd._batches(ingest_cmd._parse(sources, "doc"), 256):
        stored += ing.add(group).counts()["stored"]
print(json.dumps({"chunks": total, "stored": stored, "seconds": time.perf_counter() - t}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--real-mb", type=float, default=1.0)
    ap.add_argument("--big-mb", type=float, nargs="*", default=[6.0, 48.0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "ingest_doc_speed.json")
    a = ap.parse_args()
    from synapse_cli.engine.inputs import chunk_document

    text = prose(a.data)
    report: dict = {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="synapse-docbench-") as tmp:
        tmp = Path(tmp)
        doc = document(text, a.real_mb, tmp / "doc.txt")
        body = doc.read_text(encoding="utf-8")
        chunks = [body[x:y] for x, y in chunk_document(body) if body[x:y].strip()]
        (tmp / "chunks").write_text("\x1e".join(chunks), encoding="utf-8")
        log(f"{a.real_mb} MB document: {len(chunks)} chunks")
        rows = {}
        log("sentence-transformers encode ...")
        r = child([PY, "-c", ENCODE, "st", str(tmp / "chunks")])
        rows["sentence_transformers_encode"] = {
            "chunks_per_s": round(len(chunks) / json.loads(r["stdout"])["encode_s"], 2),
            "process_s": round(r["seconds"], 1)}
        log("synapse numpy MiniLM encode ...")
        r = child([PY, "-c", ENCODE, "minilm", str(tmp / "chunks")])
        rows["synapse_minilm_encode"] = {
            "chunks_per_s": round(len(chunks) / json.loads(r["stdout"])["encode_s"], 2),
            "process_s": round(r["seconds"], 1)}
        log("synapse ingest --format doc ...")
        r = child([SYNAPSE, "--store", str(tmp / "st"), "ingest", "--format", "doc", str(doc)])
        stored = sum(json.loads(x)["status"] == "stored" for x in r["stdout"].splitlines())
        rows["synapse_ingest_doc"] = {"chunks": stored, "seconds": round(r["seconds"], 1),
                                      "chunks_per_s": round(stored / r["seconds"], 2),
                                      "peak_rss_mb": r["rss_mb"]}
        rows["ingest_vs_st_encode"] = round(rows["synapse_ingest_doc"]["chunks_per_s"]
                                            / rows["sentence_transformers_encode"]["chunks_per_s"], 3)
        report["real_model"] = {"document_mb": a.real_mb, "chunks": len(chunks),
                                "model": "all-MiniLM-L6-v2 (packaged)", **rows}
        big = []
        for mb in sorted(a.big_mb):
            path = document(text, mb, tmp / f"big-{mb}.txt")
            log(f"{mb} MB through the command's batching with a stand-in embedder ...")
            r = child([PY, "-c", PIPELINE, str(path), str(tmp / f"big-{mb}")],
                      env={"PYTHONPATH": str(ROOT)})
            out = json.loads(r["stdout"])
            big.append({"document_mb": mb, "chunks": out["chunks"], "stored": out["stored"],
                        "seconds": round(out["seconds"], 1),
                        "chunks_per_s": round(out["chunks"] / out["seconds"], 1),
                        "peak_rss_mb": r["rss_mb"]})
            path.unlink()
        report["without_model"] = big
    report["loadavg_end"] = os.getloadavg()[0]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
