"""Features of every candidate of the gold windows, for designing the model's selection offline:
rank, salience, tagger-only, name-like, the judge's yes/no margin and type log-probabilities
(bench/probes/judge.py), the margins of filler words (calibration), and the gold label and type.
One JSON line per window to --out. Tune split by default (rule 4: design on tune only).

    python bench/probes/extract_judge_probe.py --model qwen.gguf --out q.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quality"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract_quality import GOLDS, norm, window_turns  # noqa: E402

from synapse_cli.models.extractor import LlamaExtractor, candidate_spans, window_text  # noqa: E402
from judge import LogitJudge, SpanScorer  # noqa: E402
from synapse_cli.models.salience import is_name_like, salience  # noqa: E402

FILLERS = ["stuff", "today", "thing", "time"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path,
                    default=Path(__file__).resolve().parents[3] / "shared" / "data")
    ap.add_argument("--split", default="tune")
    ap.add_argument("--model", default=None)
    ap.add_argument("--pool", type=int, default=12)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    x = LlamaExtractor(args.model)
    x.load()
    from synapse_cli.models.embedder import get_embedder
    emb = get_embedder()
    judge = LogitJudge(x.llm)
    scorer = SpanScorer(x.llm)
    gold = json.loads(GOLDS[args.split].read_text("utf-8"))
    t0 = time.perf_counter()
    with args.out.open("w") as f:
        for gw, turns in zip(gold["windows"], window_turns(args.data, gold)):
            text = window_text(turns)
            tagged: set = set()
            pool = candidate_spans(text, limit=args.pool, tagged=tagged)
            sal = salience(pool, turns, emb)
            keys = {}
            for g in gw["entities"]:
                for k in [g["name"], *g.get("aliases", [])]:
                    keys[norm(k)] = g["type"]
            m = judge.margins(text, pool + FILLERS)
            types = judge.type_logprobs(text, pool)
            cond, prior = scorer.pmi(text, pool)
            cands = [{"span": c, "rank": i, "sal": s, "tagged": c in tagged,
                      "name": is_name_like(c), "margin": m[i], "types": types[i], "cond": cond[i], "prior": prior[i],
                      "gold": norm(c) in keys, "gold_type": keys.get(norm(c))}
                     for i, (c, s) in enumerate(zip(pool, sal))]
            f.write(json.dumps({"sample_id": gw["sample_id"], "dia_ids": gw["dia_ids"],
                                "n_gold": len(gw["entities"]), "cands": cands,
                                "fillers": m[len(pool):]}) + "\n")
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 1),
                      "tokens": judge.tokens_evaluated}))


if __name__ == "__main__":
    main()
