"""BM25 index vs rank-bm25: score agreement and query latency, printed as one JSON object.

    python bench/speed/bm25_bench.py --data ../shared/data [--synthetic 100000] [--ref-queries 30]

LoCoMo dev: every turn of the 5 conversations as one corpus, every question as a query. Then a
synthetic corpus of `--synthetic` documents (LoCoMo turns sampled with replacement, seed 0).
Latency is per query, tokenization included on both sides; the first query of our index (numba
cache load or compile) is reported apart from the percentiles.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rank_bm25 import BM25Okapi  # noqa: E402

from synapse_cli.models.bm25 import BM25Index  # noqa: E402
from synapse_cli.models.tokenize import tokenize  # noqa: E402


def load_locomo(data: Path) -> tuple[list[str], list[str]]:
    texts, questions = [], []
    for conv in json.loads((data / "locomo" / "locomo_dev.json").read_text()):
        c = conv["conversation"]
        sessions = [k for k in c if k.startswith("session_") and not k.endswith("date_time")]
        for k in sorted(sessions, key=lambda k: int(k.split("_")[1])):
            texts.extend(turn["text"] for turn in c[k])
        questions.extend(q["question"] for q in conv["qa"])
    return texts, questions


def _ms(samples: list[float]) -> dict:
    a = np.array(samples) * 1e3
    return {"p50_ms": round(float(np.percentile(a, 50)), 4), "p90_ms": round(float(np.percentile(a, 90)), 4),
            "n": len(samples)}


def run(texts: list[str], questions: list[str], ref_queries: int | None) -> dict:
    """Build both indexes on `texts`, compare scores and time queries."""
    out: dict = {"docs": len(texts)}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        index = BM25Index.open(tmp, None)
        batch = 10_000
        for i in range(0, len(texts), batch):
            committed = index.add(range(i + 1, i + 1 + len(texts[i:i + batch])), texts[i:i + batch])
        out["ours_add_s"] = round(time.perf_counter() - t, 3)
        out["files_bytes"] = committed["log_bytes"] + committed["vocab_bytes"]
        t = time.perf_counter()
        index = BM25Index.open(tmp, committed)
        out["ours_open_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        index.scores(questions[0])  # builds the CSR, loads the kernel
        out["ours_first_query_s"] = round(time.perf_counter() - t, 3)

        t = time.perf_counter()
        ref = BM25Okapi([tokenize(x) for x in texts])
        out["rank_bm25_build_s"] = round(time.perf_counter() - t, 3)

        ours, theirs, worst = [], [], 0.0
        for j, q in enumerate(questions):
            t = time.perf_counter()
            _, s = index.scores(q)
            ours.append(time.perf_counter() - t)
            if ref_queries is None or j < ref_queries:
                t = time.perf_counter()
                r = ref.get_scores(tokenize(q))
                theirs.append(time.perf_counter() - t)
                worst = max(worst, float(np.abs(s - r).max()))
        top = []
        for q in questions:
            t = time.perf_counter()
            index.top_k(q, 10)
            top.append(time.perf_counter() - t)
    out["max_abs_diff"] = worst
    out["queries_compared"] = len(theirs)
    out["ours_scores"] = _ms(ours)
    out["ours_top10"] = _ms(top)
    out["rank_bm25_get_scores"] = _ms(theirs)
    out["speedup_p50"] = round(out["rank_bm25_get_scores"]["p50_ms"] / out["ours_scores"]["p50_ms"], 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the shared data directory")
    ap.add_argument("--synthetic", type=int, default=100_000, help="documents in the large corpus")
    ap.add_argument("--ref-queries", type=int, default=30,
                    help="questions scored by rank-bm25 on the large corpus (it is slow there)")
    args = ap.parse_args()
    texts, questions = load_locomo(args.data)
    result = {"locomo_dev": run(texts, questions, None)}
    rng = random.Random(0)
    synthetic = [rng.choice(texts) for _ in range(args.synthetic)]
    qs = rng.sample(questions, 200)
    result[f"synthetic_{args.synthetic}"] = run(synthetic, qs, args.ref_queries)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
