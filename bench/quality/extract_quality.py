"""Extraction quality on the hand-annotated LoCoMo windows of bench/quality/extract_gold*.json.

Runs the real extractor (`LlamaExtractor.extract`, the call `consolidate` makes on a cache miss;
no cache is involved) on every gold window and prints one JSON object: micro precision / recall /
F1 of entity names and of name+type, hallucinated names (not in the window text; must be 0),
seconds, turns per second, tokens generated, load average; for the tune split
(extract_gold.json, the windows the rules and thresholds were chosen on) and the held-out split
(extract_gold_heldout.json, annotated before any tuning) separately. Per-window details go to
bench/out/extract_quality.json. Annotation guideline and matching rule: bench/quality/README_extract.md.

    python bench/quality/extract_quality.py --data ../shared/data
    python bench/quality/extract_quality.py --data ../shared/data --no-salience    # the x2 candidate rule
    python bench/quality/extract_quality.py --data ../shared/data --sweep 0.25,0.3,0.35,0.4  # no model
    python bench/quality/extract_quality.py --data ../shared/data --model other.gguf --limit 10
    python bench/quality/extract_quality.py --data ../shared/data --no-model  # rules only (x6)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from synapse_cli.models.extractor import (CANDIDATE_POOL, LlamaExtractor,  # noqa: E402
                                          candidate_spans, window_text)
from synapse_cli.models.salience import is_name_like, salience  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOLDS = {"tune": ROOT / "bench" / "quality" / "extract_gold.json",
         "heldout": ROOT / "bench" / "quality" / "extract_gold_heldout.json"}
_LEAD = re.compile(r"^(?:a|an|the|my|your|his|her|our|their|this|that|these|those|some)\s+")


def norm(name: str) -> str:
    """Matching key: casefolded, whitespace collapsed, one leading article or possessive
    dropped, a plural -s of the last word dropped (words longer than 3 letters)."""
    s = " ".join(name.casefold().split())
    s = _LEAD.sub("", s)
    if len(s) > 3 and s.endswith("s") and not s.endswith("ss"):
        s = s[:-1]
    return s


def window_turns(data: Path, gold: dict) -> list[list[str]]:
    """The turns ("speaker: text") of every gold window, read from the LoCoMo file."""
    convs = {c["sample_id"]: c["conversation"]
             for c in json.loads((data / "locomo" / "locomo_dev.json").read_text("utf-8"))}
    out = []
    for w in gold["windows"]:
        conv = convs[w["sample_id"]]
        by_id = {t["dia_id"]: t for k, v in conv.items() if k.startswith("session_")
                 and isinstance(v, list) for t in v}
        out.append([f"{by_id[d]['speaker']}: {by_id[d]['text']}" for d in w["dia_ids"]])
    return out


def score_window(pred: list[dict], gold: list[dict]) -> dict:
    """Greedy one-to-one matching of predicted names to gold entities (name or alias)."""
    keys = [{norm(g["name"]), *(norm(a) for a in g.get("aliases", []))} for g in gold]
    used: set[int] = set()
    tp = tp_typed = 0
    matches = []
    for p in pred:
        k = norm(p["name"])
        hit = next((i for i, ks in enumerate(keys) if i not in used and k in ks), None)
        if hit is None:
            matches.append([p["name"], p["type"], None])
            continue
        used.add(hit)
        tp += 1
        tp_typed += p["type"] == gold[hit]["type"]
        matches.append([p["name"], p["type"], gold[hit]["name"], gold[hit]["type"]])
    missed = [g["name"] for i, g in enumerate(gold) if i not in used]
    return {"tp": tp, "tp_typed": tp_typed, "pred": len(pred), "gold": len(gold),
            "matches": matches, "missed": missed}


def prf(tp: int, npred: int, ngold: int) -> dict:
    p = tp / npred if npred else 0.0
    r = tp / ngold if ngold else 0.0
    return {"precision": round(p, 3), "recall": round(r, 3),
            "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0}


def auc(pos: list[float], neg: list[float]) -> float | None:
    """Probability that a gold candidate scores above a non-gold one (ties count half)."""
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return round(wins / (len(pos) * len(neg)), 3)


def pool_ceiling(rows: list) -> dict:
    """How many gold entities the candidate rules find at all: in the pool the filter chooses
    from, only among later candidates (up to 30), or never. Entities never found bound recall
    whatever selects among the candidates."""
    n = {"gold": 0, "in_pool": 0, "later_candidate": 0, "never_candidate": 0}
    never = []
    for gw, turns, pool, _ in rows:
        pool_keys = [norm(c) for c in pool]
        all_keys = [norm(c) for c in candidate_spans(window_text(turns), limit=30)]
        for g in gw["entities"]:
            ks = {norm(k) for k in [g["name"], *g.get("aliases", [])]}
            n["gold"] += 1
            where = ("in_pool" if ks & set(pool_keys) else
                     "later_candidate" if ks & set(all_keys) else "never_candidate")
            n[where] += 1
            if where == "never_candidate":
                never.append(g["name"])
    n["recall_ceiling_of_pool"] = round(n["in_pool"] / n["gold"], 3) if n["gold"] else 0.0
    return n | {"never_candidate_names": never}


def sweep(data: Path, golds: dict, thresholds: list[float]) -> dict:
    """Names only, without the model (which only types candidates unless --skip): precision and
    recall of the first 6 spans (no filter, the x2 selection) and of the salience filter at
    each threshold; and how well two signals separate gold from non-gold common-noun candidates
    of the pool (AUC): salience, and the rarity of the head word over every turn of the LoCoMo
    file (a word said in every conversation would be filler, if that separated anything)."""
    from synapse_cli.models.embedder import get_embedder

    emb = get_embedder()
    convs = json.loads((data / "locomo" / "locomo_dev.json").read_text("utf-8"))
    df: dict[str, int] = {}
    for c in convs:
        for k, v in c["conversation"].items():
            if k.startswith("session_") and isinstance(v, list):
                for t in v:
                    for w in set(re.findall(r"[a-z][a-z'-]*", t["text"].casefold())):
                        df[w] = df.get(w, 0) + 1
    out = {}
    for split, path in golds.items():
        gold = json.loads(path.read_text("utf-8"))
        rows = []
        for gw, turns in zip(gold["windows"], window_turns(data, gold)):
            pool = candidate_spans(window_text(turns), limit=CANDIDATE_POOL)
            rows.append((gw, turns, pool, salience(pool, turns, emb)))
        res = {}
        for t in [None, *thresholds]:
            tot = {"tp": 0, "pred": 0, "gold": 0}
            for gw, turns, pool, sal in rows:
                kept = candidate_spans(window_text(turns)) if t is None else \
                    [c for c, v in zip(pool, sal) if is_name_like(c) or v >= t]
                sc = score_window([{"name": c, "type": ""} for c in kept], gw["entities"])
                for k in tot:
                    tot[k] += sc[k]
            res["first 6, no salience" if t is None else f"salience >= {t}"] = \
                prf(tot["tp"], tot["pred"], tot["gold"])
        sig = {"salience": ([], []), "head_word_df": ([], [])}
        for gw, turns, pool, sal in rows:
            keys = {norm(k) for g in gw["entities"] for k in [g["name"], *g.get("aliases", [])]}
            for c, v in zip(pool, sal):
                if is_name_like(c):
                    continue  # the filter leaves names alone
                i = 0 if norm(c) in keys else 1
                sig["salience"][i].append(v)
                sig["head_word_df"][i].append(-df.get(c.split()[-1].casefold(), 0))
        res["auc_common_nouns"] = {k: auc(*v) for k, v in sig.items()}
        res["pool_ceiling"] = pool_ceiling(rows)
        out[split] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--split", choices=["tune", "heldout", "all"], default="all")
    ap.add_argument("--gold", type=Path, default=None, help="another gold file (one split)")
    ap.add_argument("--model", default=os.environ.get("SYNAPSE_MODEL"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", action="store_true",
                    help="let the model drop candidates (answer \"none\"); default: it only types")
    ap.add_argument("--no-salience", action="store_true",
                    help="no salience filter: the first 6 candidate spans (the x2 selection)")
    ap.add_argument("--no-model", action="store_true",
                    help="the model's naming scores do not move the selection (rules only)")
    ap.add_argument("--limit", type=int, default=None, help="first N windows of each split only")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "extract_quality.json")
    ap.add_argument("--sweep", default=None,
                    help="comma-separated salience thresholds: names only, no model")
    args = ap.parse_args()

    golds = {"custom": args.gold} if args.gold else \
        {k: v for k, v in GOLDS.items() if args.split in (k, "all")}
    if args.sweep:
        print(json.dumps(sweep(args.data, golds, [float(t) for t in args.sweep.split(",")]),
                         indent=1))
        return
    t = time.perf_counter()
    x = LlamaExtractor(args.model, threads=args.threads, use_salience=not args.no_salience,
                       use_model=not args.no_model, **({"skip": True} if args.skip else {}))
    x.load()
    if x.use_salience:
        x.extract(["A: I bought a hoodie."])  # loads the embedder outside the timed windows
    load_s = time.perf_counter() - t
    report = {"model": str(x.model_path), "prompt_version": x.cache_id.split("\n")[1],
              "model_trust": x.trust, "model_weight": x.model_weight,
              "salience": x.use_salience, "threads": args.threads, "skip": args.skip,
              "load_seconds": round(load_s, 3), "splits": {}}
    details = []
    for split, path in golds.items():
        gold = json.loads(path.read_text("utf-8"))
        wins, gws = window_turns(args.data, gold), gold["windows"]
        if args.limit:
            wins, gws = wins[:args.limit], gws[:args.limit]
        report["splits"][split] = run_split(x, split, gws, wins, args.threads, details)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(details, ensure_ascii=False, indent=1) + "\n", "utf-8")
    report["details"] = str(args.out)
    print(json.dumps(report, ensure_ascii=False, indent=1))


def run_split(x, split: str, gws: list, wins: list, threads: int, details: list) -> dict:
    """Extract every window of one split; scores, timing and token counts."""
    load0 = os.getloadavg()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    tot = {"tp": 0, "tp_typed": 0, "pred": 0, "gold": 0}
    halluc, seconds, tokens, prompt_tokens = 0, 0.0, 0, 0
    naming0 = x._scorer.tokens_evaluated if getattr(x, "_scorer", None) else 0
    for gw, turns in zip(gws, wins):
        t = time.perf_counter()
        r = x.extract(turns)
        dt = time.perf_counter() - t
        seconds += dt
        usage = getattr(x, "last_usage", {})  # token counts of the model call (none: 0)
        tokens += usage.get("completion_tokens", 0)
        prompt_tokens += usage.get("prompt_tokens", 0)
        text = window_text(turns)
        bad = [e["name"] for e in r["entities"] if e["name"] not in text]
        halluc += len(bad)
        s = score_window(r["entities"], gw["entities"])
        for k in tot:
            tot[k] += s[k]
        details.append({"split": split, "sample_id": gw["sample_id"], "dia_ids": gw["dia_ids"],
                        "seconds": round(dt, 3), "hallucinated": bad, **s,
                        "relations": r["relations"]})
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    turns = sum(len(w) for w in wins)
    return {
        "windows": len(wins), "turns": turns,
        "gold_entities": tot["gold"], "predicted_entities": tot["pred"],
        "names": prf(tot["tp"], tot["pred"], tot["gold"]),
        "names_and_types": prf(tot["tp_typed"], tot["pred"], tot["gold"]),
        "hallucinated_names": halluc,
        "extract_seconds": round(seconds, 3),
        "turns_per_second": round(turns / seconds, 2) if seconds else None,
        "cpu_seconds": round(cpu, 3),
        "turns_per_cpu_second_per_thread": round(turns * threads / cpu, 2) if cpu else None,
        "completion_tokens": tokens, "completion_tokens_per_window": round(tokens / len(wins), 1),
        "prompt_tokens": prompt_tokens,
        # tokens the model's naming scores pushed through it (calibration excluded)
        "naming_tokens": (x._scorer.tokens_evaluated - naming0)
        if getattr(x, "_scorer", None) else 0,
        "loadavg_before": [round(v, 2) for v in load0],
        "loadavg_after": [round(v, 2) for v in os.getloadavg()],
    }


if __name__ == "__main__":
    main()
