"""Noise robustness on LoCoMo (seed 003's clean-vs-noisy protocol).  Prints one JSON object.

    python bench/quality/locomo_noise.py [--data ../shared/data] [--source hotpot,conv] [--every 5]
                                 [--m 5] [--seed 0] [--goal-threshold 0.1] [--limit-conv N]
                                 [--session same|own]

Per development conversation and per condition, a fresh store is built with the engine's
`ingest()` (default IngestConfig apart from the goal), then every question is recalled in each
mode (`synapse` with its gate, `vector`, `bm25`, `hybrid`), as bench/quality/locomo_recall.py does:

  clean            the conversation's turns only;
  noisy-<source>   the same write stream with distractors injected on a fixed schedule: after
                   every `--every`-th turn, `--m` distractor memories.  Each is written with the
                   same write policy as the turn before it (its speaker, session and session
                   time), so it competes with real turns at retrieval as seed 003 requires;
                   `hotpot`: the first two sentences of a HotpotQA corpus passage (titles in a
                   fixed shuffled order, `--seed`); `conv`: the turns, in order, of the next
                   development conversation (its own speakers replaced by this conversation's);
(`--session own`: a distractor goes to a session of its own, "<session>:noise", so it is off
the turns' temporal chain: a probe of how much of a mode's drop comes from the broken chain),
and each of them again with goal gating on (`IngestConfig.goal`, GOAL below: ingest drops an
item whose cosine to the goal is below `goal_threshold`, default 0.1).

Noise drop of a mode = recall@10 (categories 1-4) clean - noisy, within the same gating
setting; the issue's target compares the default pipeline with gating against `vector`.
Stores are not consolidated: consolidating a noisy stream (2x the turns) with the local model
costs ~4 turns/s, about an hour for the five conversations per condition on this machine.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "quality"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from locomo_recall import (CATS, dia_ids_by_record, gold_of, turns_by_md5,  # noqa: E402
                           turns_of)
from synapse_cli.engine import graphview  # noqa: E402
from synapse_cli.engine.ingest import IngestConfig, ingest  # noqa: E402
from synapse_cli.engine.inputs import Item  # noqa: E402
from synapse_cli.engine.recall import RecallConfig, recall  # noqa: E402
from synapse_cli.engine.store import Store, StoreWriter  # noqa: E402

# What a user of a personal-assistant agent would tell it to keep, written before looking at any
# question: the domain of the conversations (two friends talking about their lives), no names
# (the speaker prefix "Name: " is embedded with every item, real or distractor, so a name in the
# goal would not separate them) and no topic taken from the questions.
GOAL = ("Remember what my friends and I talk about: our lives, family, work, hobbies, "
        "feelings, plans and the things we do.")
# name -> RecallConfig fields; "no-graph" shows what distractors cost the graph: interleaved in
# a session, they sit in the temporal chain the activation runs along
MODES = {"synapse": {}, "vector": {"mode": "vector"}, "bm25": {"mode": "bm25"},
         "hybrid": {"mode": "hybrid"}, "no-graph": {"graph": False}}
K = 10


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class CachedEmbedder:
    """Each distinct text is embedded once across all the stores built here."""

    def __init__(self, inner):
        self.inner, self.dim, self.name = inner, inner.dim, inner.name
        self.memo: dict[str, np.ndarray] = {}

    def encode(self, texts):
        miss = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if miss:
            for t, v in zip(miss, self.inner.encode(miss)):
                self.memo[t] = v
        return np.stack([self.memo[t] for t in texts]) if texts else np.zeros((0, self.dim),
                                                                               np.float32)


def hotpot_pool(data_dir: Path, seed: int, sid: str) -> list[str]:
    corpus = json.loads((data_dir / "hotpotqa" / "hotpotqa_dev100_corpus.json").read_text())
    titles = sorted(corpus)
    random.Random(seed * 1_000_003 + zlib.crc32(sid.encode())).shuffle(titles)
    out = []
    for t in titles:
        text = " ".join(s.strip() for s in corpus[t][:2]).strip()
        if text:
            out.append(text)
    return out


def conv_pool(data: list[dict], index: int) -> list[str]:
    other = data[(index + 1) % len(data)]
    return [it.text for it in turns_of(other, other["sample_id"])]


def noisy_stream(items: list[Item], pool: list[str], every: int, m: int,
                 own_session: bool = False) -> tuple[list[Item], int]:
    """The turns with `m` distractors after every `every`-th turn (pool used in order, wrapping);
    a distractor copies the speaker, session and time of the turn before it (with
    `own_session`, its session is that session + ':noise')."""
    out, used = [], 0
    for j, it in enumerate(items):
        out.append(it)
        if (j + 1) % every == 0:
            for _ in range(m):
                text = pool[used % len(pool)]
                used += 1
                out.append(Item(text=text, where=f"noise:{used}", timestamp_ms=it.timestamp_ms,
                                speaker=it.speaker, session=f"{it.session}:noise"
                                if own_session else it.session))
    return out, used


def evaluate(path: Path, items: list[Item], qas, qvecs, now_ms: int) -> dict:
    """recall@10 per mode and per question over one store."""
    alias = turns_by_md5(items)
    store = Store.open(path)
    try:
        arrays = graphview.build(store)
        dia_of_id = dia_ids_by_record(store, arrays.ids, alias)
        out = {}
        for mode, fields in MODES.items():
            cfg = RecallConfig(k=K, **fields)
            per_q = []
            for (qa, cat, gold), qv in zip(qas, qvecs):
                r = recall(store, qa["question"], qv, cfg, arrays, now_ms=now_ms)
                got = [dia_of_id[x["id"]] for x in r["results"]]
                noise_in_top = sum(1 for g in got if not g)
                rec = {"cat": cat, "rejected": r["rejected"], "noise@10": noise_in_top}
                if gold is not None:
                    hit = set().union(*got) & set(gold) if got else set()
                    rec["r@10"] = len(hit) / len(gold)
                per_q.append(rec)
            out[mode] = per_q
        return out
    finally:
        store.close()


def summarize(per_q: list[dict]) -> dict:
    ans = [r for r in per_q if r["cat"] != 5]
    block = {"recall@10_all_1_4": round(100 * float(np.mean([r["r@10"] for r in ans])), 2)}
    for c, name in CATS.items():
        block[f"recall@10_{c}_{name}"] = round(
            100 * float(np.mean([r["r@10"] for r in ans if r["cat"] == c])), 2)
    block["rejected_1_4"] = round(100 * float(np.mean([r["rejected"] for r in ans])), 2)
    block["rejected_cat5"] = round(100 * float(np.mean(
        [r["rejected"] for r in per_q if r["cat"] == 5])), 2)
    block["distractors_in_top10_per_query"] = round(float(np.mean(
        [r["noise@10"] for r in per_q])), 2)
    return block


def run(args) -> dict:
    from synapse_cli.models.embedder import get_embedder

    data_dir = Path(args.data)
    data = json.loads((data_dir / "locomo" / "locomo_dev.json").read_text())
    sources = [s for s in args.source.split(",") if s]
    for s in sources:
        if s not in ("hotpot", "conv"):
            raise SystemExit(f"--source {s!r}: expected hotpot or conv")
    embedder = CachedEmbedder(get_embedder())
    conditions = ["clean"] + [f"noisy-{s}" for s in sources]
    per_q: dict[tuple, list] = defaultdict(list)       # (condition, goal?, mode) -> records
    ingest_counts: dict[tuple, Counter] = defaultdict(Counter)
    skipped: Counter = Counter()
    convs = data[: args.limit_conv] if args.limit_conv else data
    for index, conv in enumerate(convs):
        sid = conv["sample_id"]
        items = turns_of(conv, sid)
        known = {it.dia_id for it in items}
        qas = []
        for qa in conv["qa"]:
            cat = int(qa["category"])
            if cat == 5:
                qas.append((qa, cat, None))
                continue
            gold = gold_of(qa, known, skipped) if qa.get("evidence") else []
            if gold:
                qas.append((qa, cat, gold))
            else:
                skipped["question_without_valid_evidence"] += 1
        qvecs = embedder.inner.encode([qa["question"] for qa, _, _ in qas])
        now_ms = max(it.timestamp_ms for it in items)
        streams = {"clean": (items, 0)}
        for s in sources:
            pool = hotpot_pool(data_dir, args.seed, sid) if s == "hotpot" else conv_pool(data, index)
            streams[f"noisy-{s}"] = noisy_stream(items, pool, args.every, args.m,
                                                 args.session == "own")
        for cond, (stream, n_noise) in streams.items():
            for goal in (False, True):
                cfg = IngestConfig(goal=GOAL if goal else None, goal_threshold=args.goal_threshold)
                with tempfile.TemporaryDirectory(prefix="synapse-noise-") as tmp:
                    path = Path(tmp) / "store"
                    t = time.perf_counter()
                    with StoreWriter.open(path, create=True, embedder=embedder.name,
                                          dim=embedder.dim) as w:
                        res = ingest(w, stream, embedder, cfg)
                    c = ingest_counts[(cond, goal)]
                    for o in res.outcomes:
                        kind = "distractor" if o.where.startswith("noise:") else "turn"
                        c[f"{kind}_{o.status}"] += 1
                    t_ingest = time.perf_counter() - t
                    res_q = evaluate(path, stream, qas, qvecs, now_ms)
                for mode, recs in res_q.items():
                    per_q[(cond, goal, mode)].extend(recs)
                log(f"{sid} {cond} goal={goal}: {len(stream)} items ({n_noise} distractors) "
                    f"ingested in {t_ingest:.1f}s, {dict(res.counts())}")

    results = {}
    for (cond, goal, mode), recs in per_q.items():
        results.setdefault(mode, {}).setdefault("goal" if goal else "no_goal", {})[cond] = \
            summarize(recs)
    drops = {}
    for mode, by_goal in results.items():
        for g, by_cond in by_goal.items():
            clean = by_cond["clean"]["recall@10_all_1_4"]
            for cond in conditions[1:]:
                drops.setdefault(mode, {}).setdefault(g, {})[cond] = round(
                    clean - by_cond[cond]["recall@10_all_1_4"], 2)
    target = {}
    for cond in conditions[1:]:
        syn, vec = drops["synapse"]["goal"][cond], drops["vector"]["no_goal"][cond]
        target[cond] = {"synapse_with_goal_drop": syn, "vector_drop": vec,
                        "met": bool(syn <= vec / 2)}
    counts = Counter(r["cat"] for r in per_q[("clean", False, "synapse")])
    return {
        "benchmark": "locomo_noise",
        "data": str(data_dir / "locomo" / "locomo_dev.json"),
        "conversations": [c["sample_id"] for c in convs],
        "questions_scored": {str(k): counts[k] for k in sorted(counts)},
        "skipped": dict(skipped),
        "protocol": {
            "schedule": f"after every {args.every}th turn, {args.m} distractors (same speaker "
                        "and time as that turn; " + ("same session" if args.session == "same"
                                                     else "a session of their own") + ")",
            "sources": {"hotpot": "first two sentences of a HotpotQA corpus passage, titles in "
                                  f"a shuffled order (seed {args.seed}, per conversation)",
                        "conv": "turns of the next development conversation, in order"},
            "goal": GOAL,
            "goal_threshold": args.goal_threshold,
            "consolidation": "none (ingest only)",
            "metric": "evidence recall@10 over categories 1-4 (question-weighted); a rejected "
                      "query scores 0; noise drop = clean - noisy in the same gating setting",
            "recall": "RecallConfig defaults with k=10 (synapse gated), one query vector per "
                      "question for every mode and store; now = the last session's time",
        },
        "ingest": {f"{cond}{' +goal' if goal else ''}": dict(c)
                   for (cond, goal), c in ingest_counts.items()},
        "modes": results,
        "noise_drop": drops,
        "target_synapse_goal_drop_at_most_half_of_vector": target,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--source", default="hotpot,conv", help="comma-separated: hotpot, conv")
    p.add_argument("--every", type=int, default=5, help="inject after every N-th turn")
    p.add_argument("--m", type=int, default=5, help="distractors per injection")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--goal-threshold", type=float, default=IngestConfig().goal_threshold,
                   help="cosine to the goal an item needs (default: ingest's)")
    p.add_argument("--session", choices=("same", "own"), default="same",
                   help="distractors in the session of the turn before them, or in their own")
    p.add_argument("--limit-conv", type=int, default=0, help="only the first N conversations")
    args = p.parse_args()
    if args.every < 1 or args.m < 0:
        p.error("--every must be >= 1 and --m >= 0")
    load0 = round(os.getloadavg()[0], 2)
    t = time.perf_counter()
    out = run(args)
    out["timing"] = {"total_s": round(time.perf_counter() - t, 1), "cpus": os.cpu_count(),
                     "loadavg_1m_at_start_and_end": [load0, round(os.getloadavg()[0], 2)]}
    out["command"] = "python bench/quality/locomo_noise.py " + " ".join(sys.argv[1:])
    out["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
