"""Embedding benchmark: torch-free numpy MiniLM vs sentence-transformers.

    .venv/bin/python bench/speed/embed_bench.py [--data ../shared/data] [--cold-runs 7]

Prints ONE JSON object on stdout (progress goes to stderr):

* equality   -- cosine between MiniLMEmbedder and SentenceTransformerEmbedder over ALL LoCoMo
                development turns (min, mean, p0.1 = 0.1th percentile).
* throughput -- texts/s of each on all turns. Each embedder runs in its own fresh subprocess
                (so torch's and OpenBLAS' thread pools never compete inside one process), after
                a 64-text warm-up; the embeddings are handed back for the equality check.
* cold_start -- wall time of a fresh ``python -c`` "import + load + embed one query", measured
                by the parent from spawn to exit, median/p90 over --cold-runs runs per path
                (runs of the paths interleaved), plus the child's own import/load/embed split.
                Paths: numpy MiniLM with safetensors.numpy weights (default), the same with
                memory-mapped weights (SYNAPSE_EMBED_WEIGHTS=mmap), sentence-transformers.
* int8       -- FORMAT.md section 5 quantisation of the MiniLM turn embeddings (via
                store_format.vectors when present, else the formula inline): |cos_q - cos_f32| over
                random turn-turn pairs and over LoCoMo question-turn pairs, and the cosine
                between v and its dequantised q.

The default --data is ../shared/data relative to the repository root; a given --data is
taken as is (relative to the current directory). The data is read, never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[embed_bench] {msg}", file=sys.stderr, flush=True)


def load_locomo(data_dir: Path) -> tuple[list[str], list[str]]:
    path = data_dir / "locomo" / "locomo_dev.json"
    with open(path, encoding="utf-8") as fh:
        samples = json.load(fh)
    turns: list[str] = []
    questions: list[str] = []
    for sample in samples:
        conv = sample["conversation"]
        sessions = sorted(
            (k for k, v in conv.items() if k.startswith("session_") and isinstance(v, list)),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in sessions:
            turns.extend(str(t["text"]) for t in conv[key])
        questions.extend(str(q["question"]) for q in sample.get("qa", []))
    return turns, questions


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


_KIND_CLASS = {"minilm": "MiniLMEmbedder", "st": "SentenceTransformerEmbedder"}

_THROUGHPUT_CHILD = r"""
import json, sys, time
import numpy as np
from synapse_cli.models.embedder import {cls}
texts = json.load(open(sys.argv[1], encoding="utf-8"))
t0 = time.perf_counter(); emb = {cls}(); t_load = time.perf_counter() - t0
emb.encode(texts[:64])
t0 = time.perf_counter(); out = emb.encode(texts); dt = time.perf_counter() - t0
np.save(sys.argv[2], out)
print(json.dumps({{"seconds": dt, "load_seconds": t_load, "texts": len(texts),
                  "config": {{k: getattr(emb, k) for k in ("workers", "max_tokens_per_batch", "max_batch", "batch_size")
                              if hasattr(emb, k)}}}}))
"""

_COLD_CHILD = r"""
import time
t0 = time.perf_counter()
from synapse_cli.models.embedder import {cls}
t1 = time.perf_counter()
emb = {cls}()
t2 = time.perf_counter()
v = emb.encode(["What did Caroline research after the support group?"])
t3 = time.perf_counter()
assert v.shape == (1, emb.dim)
import json
print(json.dumps({{"import": t1 - t0, "load": t2 - t1, "embed": t3 - t2}}))
"""


def run_throughput(kind: str, texts_file: str, out_file: str) -> dict:
    code = _THROUGHPUT_CHILD.format(cls=_KIND_CLASS[kind])
    res = subprocess.run(
        [sys.executable, "-c", code, texts_file, out_file],
        capture_output=True, text=True, env=_child_env(), cwd=REPO, timeout=1800,
    )
    if res.returncode != 0:
        raise RuntimeError(f"throughput child ({kind}) failed:\n{res.stderr}")
    info = json.loads(res.stdout.strip().splitlines()[-1])
    info["texts_per_s"] = info["texts"] / info["seconds"]
    return info


def run_cold(kind: str, extra_env: dict[str, str] | None = None) -> tuple[float, dict]:
    code = _COLD_CHILD.format(cls=_KIND_CLASS[kind])
    env = _child_env()
    env.update(extra_env or {})
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"cold child ({kind}) failed:\n{res.stderr}")
    return wall, json.loads(res.stdout.strip().splitlines()[-1])


def pct(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summarise_cold(walls: list[float], parts: list[dict]) -> dict:
    return {
        "median_s": round(statistics.median(walls), 4),
        "p90_s": round(pct(walls, 90), 4),
        "min_s": round(min(walls), 4),
        "max_s": round(max(walls), 4),
        "runs": len(walls),
        "child_median_s": {k: round(statistics.median(p[k] for p in parts), 4) for k in ("import", "load", "embed")},
    }


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    return np.einsum("ij,ij->i", a64, b64) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))


def quantizer():
    """(quantize_batch, source): store_format.vectors when present, else FORMAT.md s5 inline."""
    try:
        from store_format.vectors import quantize_batch

        return quantize_batch, "store_format.vectors.quantize_batch"
    except ImportError:

        def quantize_batch(vectors: np.ndarray):
            v64 = np.asarray(vectors, dtype=np.float32).astype(np.float64)
            peak = np.abs(v64).max(axis=1, initial=0.0)
            safe = np.where(peak > 0, peak, 1.0)[:, None]
            q = np.clip(np.rint((127.0 * v64) / safe), -127, 127).astype(np.int8)
            return q, np.sqrt(np.einsum("ij,ij->i", v64, v64)).astype(np.float32)

        return quantize_batch, "inline (FORMAT.md section 5)"


def int8_errors(turn_emb: np.ndarray, query_emb: np.ndarray, pairs: int, seed: int) -> dict:
    quantize_batch, source = quantizer()
    q, _ = quantize_batch(turn_emb)
    qf = q.astype(np.float64)
    qn = np.linalg.norm(qf, axis=1)
    deq = qf / np.where(qn > 0, qn, 1.0)[:, None]  # dequantised unit vectors: cos_q(u) = deq . u
    rng = np.random.default_rng(seed)
    n = len(turn_emb)
    f = turn_emb.astype(np.float64)

    # turn-turn: stored turn j (int8) scored against unit query = turn i (float32)
    i = rng.integers(0, n, size=pairs)
    j = rng.integers(0, n, size=pairs)
    keep = i != j
    i, j = i[keep], j[keep]
    cos_f = np.einsum("ij,ij->i", f[i], f[j])
    cos_q = np.einsum("ij,ij->i", f[i], deq[j])
    err_tt = np.abs(cos_q - cos_f)

    # question-turn: every LoCoMo question against random stored turns
    qi = rng.integers(0, len(query_emb), size=pairs)
    tj = rng.integers(0, n, size=pairs)
    u = query_emb.astype(np.float64)
    err_qt = np.abs(np.einsum("ij,ij->i", u[qi], deq[tj]) - np.einsum("ij,ij->i", u[qi], f[tj]))

    self_cos = np.einsum("ij,ij->i", f, deq) / np.linalg.norm(f, axis=1)
    return {
        "quantize": source,
        "turn_turn_pairs": int(len(err_tt)),
        "turn_turn_abs_err": {"mean": float(err_tt.mean()), "max": float(err_tt.max()), "p99": pct(err_tt, 99)},
        "query_turn_pairs": int(len(err_qt)),
        "query_turn_abs_err": {"mean": float(err_qt.mean()), "max": float(err_qt.max()), "p99": pct(err_qt, 99)},
        "cos_v_dequantized": {"min": float(self_cos.min()), "mean": float(self_cos.mean())},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="data root (default: ../shared/data from the repo root)")
    ap.add_argument("--cold-runs", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=100_000, help="random pairs for the int8 error")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    data_dir = args.data if args.data is not None else (REPO / ".." / "shared" / "data").resolve()

    turns, questions = load_locomo(data_dir)
    log(f"{len(turns)} turns, {len(questions)} questions from {data_dir}")

    with tempfile.TemporaryDirectory(prefix="embed_bench_") as tmp:
        texts_file = os.path.join(tmp, "turns.json")
        with open(texts_file, "w", encoding="utf-8") as fh:
            json.dump(turns, fh)
        thr = {}
        emb = {}
        for kind in ("minilm", "st"):
            out_file = os.path.join(tmp, f"{kind}.npy")
            log(f"throughput: {kind}")
            thr[kind] = run_throughput(kind, texts_file, out_file)
            emb[kind] = np.load(out_file)
            log(f"  {thr[kind]['texts_per_s']:.1f} texts/s")

    cos = cosines(emb["minilm"], emb["st"])
    equality = {
        "texts": int(len(cos)),
        "min": float(cos.min()),
        "mean": float(cos.mean()),
        "p0.1": pct(cos, 0.1),
        "below_0.9999": int((cos < 0.9999).sum()),
        "max_abs_component_diff": float(np.abs(emb["minilm"] - emb["st"]).max()),
    }

    variants = {
        "minilm_numpy": ("minilm", {"SYNAPSE_EMBED_WEIGHTS": "safetensors"}),
        "minilm_numpy_mmap_weights": ("minilm", {"SYNAPSE_EMBED_WEIGHTS": "mmap"}),
        "sentence_transformers": ("st", {}),
    }
    cold: dict[str, tuple[list, list]] = {v: ([], []) for v in variants}
    for r in range(args.cold_runs):
        for name, (kind, extra) in variants.items():
            wall, parts = run_cold(kind, extra)
            cold[name][0].append(wall)
            cold[name][1].append(parts)
        log(f"cold run {r + 1}/{args.cold_runs}: " + " ".join(f"{k} {v[0][-1]:.3f}s" for k, v in cold.items()))

    # questions embedded in-process by the numpy path (no torch here)
    from synapse_cli.models.embedder import MiniLMEmbedder

    query_emb = MiniLMEmbedder().encode(questions)
    int8 = int8_errors(emb["minilm"], query_emb, args.pairs, args.seed)

    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover
        load = None
    result = {
        "data": str(data_dir / "locomo" / "locomo_dev.json"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_at_end": load},
        "equality": equality,
        "throughput_texts_per_s": {
            "minilm_numpy": round(thr["minilm"]["texts_per_s"], 1),
            "sentence_transformers": round(thr["st"]["texts_per_s"], 1),
            "ratio": round(thr["minilm"]["texts_per_s"] / thr["st"]["texts_per_s"], 2),
            "texts": thr["minilm"]["texts"],
            "minilm_config": thr["minilm"]["config"],
            "st_config": thr["st"]["config"],
        },
        "cold_start": {
            "what": "fresh `python -c`: import + load + embed one query, wall from spawn to exit",
            "note": "minilm_numpy reads weights with safetensors.numpy.load_file (default); "
            "_mmap_weights memory-maps the same file (SYNAPSE_EMBED_WEIGHTS=mmap); for "
            "sentence_transformers 'load' includes importing torch + sentence_transformers",
            **{name: summarise_cold(*cold[name]) for name in variants},
        },
        "int8": int8,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
