"""How far past plain cosine can any simple signal take SMRCs?  Prints one JSON object.

    python bench/probes/smrcs_probe.py [--data ../shared/data]

Issue 6 asks `--mode synaptic` for 10 points of R-precision above dense retrieval on SMRCs
(bench/quality/smrcs_recall.py). This probe asks whether the data holds that much signal for a MiniLM
ranker at all: it ranks the 10 past turns of every trigger (the same gold matching as
smrcs_recall.py, no store, no spike trains) by the trigger's cosine plus one extra signal each,
over a small grid of weights, and reports each row's R-precision. The grid is chosen on the
data itself, so every number is an in-sample upper bound for that signal:
- `context_previous`: the query is the trigger plus w x the turn before it (what the
  conversation was just about);
- `context_present`: plus w x the mean of every earlier present turn;
- `neighbours`: a past turn also gets w/2 x the cosine of each adjacent past turn (a topic
  spans consecutive turns; the temporal association of seed 001 links them);
- `one_hop`: plus w x the mean cosine-weighted similarity to the other past turns (one layer of
  stimulus propagation without thresholds);
- `novelty`: minus w x the best cosine of the past turn to any earlier present turn (a trigger
  brings up what the conversation has not touched yet);
- `same_speaker`: plus w when the past turn was said by the trigger's speaker (the user; 172
  of the 228 gold memories are user turns).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "quality"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from smrcs_recall import match_gold  # noqa: E402

WEIGHTS = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)


def triggers(data: list, embedder) -> list[tuple]:
    """(vectors [20, dim], trigger index, gold past indices, roles) per trigger."""
    out = []
    counts = {"exact": 0, "containment": 0, "unmatched": 0}
    for sec in data:
        turns = [(r, t) for part in ("past", "present") for d in sec[part] for r, t in d.items()]
        vecs = embedder.encode([t for _, t in turns]).astype(np.float64)
        past = [t for _, t in turns[:10]]
        for rc in sec["recalls"]:
            gold = match_gold(past, rc["related_memories"], counts)
            idx = [k for k in range(10, 20) if turns[k][1] == rc["trigger"]]
            if idx and gold:
                out.append((vecs, idx[0], gold, [r for r, _ in turns]))
    return out


def r_precision(rows: list[tuple], score) -> float:
    hits = []
    for vecs, k, gold, roles in rows:
        order = np.argsort(-score(vecs, k, roles), kind="stable")
        hits.append(len(set(order[:len(gold)].tolist()) & set(gold)) / len(gold))
    return round(100 * float(np.mean(hits)), 2)


def signals(w: float) -> dict:
    def cos(v, k):
        return v[:10] @ v[k]

    def neighbours(v, k, r):
        s = cos(v, k)
        out = s.copy()
        out[1:] += w / 2 * s[:-1]
        out[:-1] += w / 2 * s[1:]
        return out

    def one_hop(v, k, r):
        s = cos(v, k)
        sim = v[:10] @ v[:10].T
        np.fill_diagonal(sim, 0)
        return s + w * (sim @ np.maximum(s, 0)) / 9

    def novelty(v, k, r):
        s = cos(v, k)
        return s - w * (v[10:k] @ v[:10].T).max(0) if k > 10 else s

    return {
        "context_previous": lambda v, k, r: v[:10] @ (v[k] + w * v[k - 1]),
        "context_present": lambda v, k, r: v[:10] @ (v[k] + (w * v[10:k].mean(0) if k > 10
                                                              else 0)),
        "neighbours": neighbours, "one_hop": one_hop, "novelty": novelty,
        "same_speaker": lambda v, k, r: cos(v, k) + w * np.array([r[i] == r[k]
                                                                  for i in range(10)]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args()
    from synapse_cli.models.embedder import get_embedder

    data = json.loads((Path(args.data) / "smrcs" / "smrcs_en_dev.json").read_text())
    rows = triggers(data, get_embedder())
    out = {"command": " ".join(["python", "bench/probes/smrcs_probe.py"] + sys.argv[1:]),
           "triggers": len(rows), "cosine": r_precision(rows, lambda v, k, r: v[:10] @ v[k])}
    grid: dict = {}
    for w in WEIGHTS:
        for name, fn in signals(w).items():
            grid.setdefault(name, {})[str(w)] = r_precision(rows, fn)
    out["with_signal"] = grid
    out["best"] = {name: max(row.values()) for name, row in grid.items()}
    out["target"] = round(out["cosine"] + 10, 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
