"""SMRCs (seed 001's own benchmark): R-precision and ERC of `synaptic`, `vector` and `synapse`.

    python bench/quality/smrcs_recall.py [--data ../shared/data] [--limit N] [--timeline conversation]
                                 [--propagation centroid|original] [--set KEY=VALUE]
                                 [--embedder-dir DIR] [--out bench/out/smrcs_recall.json]

Data: smrcs/smrcs_en_dev.json (50 sections; shared/data/README.md). Each section is a past and a
present conversation of 10 turns. Gold memories are past-turn texts, matched by exact equality
with a past turn, else by containment (a gold text that is part of one turn, or a turn that is
part of the gold text); the number matched each way and the golds matching nothing are counted.

How time maps onto spike trains (`--timeline`). The seed ran SMRCs as one conversation in time:
every turn, past and present in order, became a memory node and, when it arrived, a query whose
stimulus spread through the nodes stored before it, appending a spike to every node it reached
(its turn number as the time); the recall of a trigger is the propagation of that trigger's
turn. This script does the same through the store: for each turn in order it runs a synaptic
recall at the turn's time (engine `recall()` with the query vector), appends one STIMULUS spike
at that time to each record the stimulus reached (`StoreWriter.add_spikes`, what a recall without
--no-touch does), then ingests the turn with that timestamp. Timestamps, `conversation`
(default): turns one minute apart (one seed time unit, `synaptic.time_unit_ms`), the present
conversation 30 days after the past one (the seed's generation guideline puts it 1-6 months
later). So the ingest spikes of the past turns are far from any present query, and what ties a
past turn in time to a present trigger are the spikes the earlier present turns left on it.
`turns`: the seed code's literal clock, turn k at k minutes (past 0-9, present 10-19).

Per trigger the 10 past turns are ranked: each mode's result list (k = 30) restricted to the
past turns' records; past turns a mode did not return are ranked after them, in turn order.
`vector` and `synapse` are computed on the same store, at the same moment, as `synaptic`.
- R-precision: |top-R ∩ gold| / R with R = |gold|.
- ERC (seed section 4.3): synaptic retrieves k = the past turns it returned with `fired`; the
  score is |retrieved ∩ gold| / |gold|; each baseline retrieves its top k. ERC-MG: a baseline
  retrieves at least |gold|. Reported with k from `fired` and, because the seed's Table 4
  values rarely make a node fire under eqs. 16-17 (see README), also with k = the past turns
  that received stimulus above stim_th (`erc_stim`).
Prints one JSON object, written to --out as well.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from store_format import spikes as sp  # noqa: E402
from synapse_cli.engine import graphview  # noqa: E402
from synapse_cli.engine.ingest import IngestConfig, ingest  # noqa: E402
from synapse_cli.engine.inputs import Item  # noqa: E402
from synapse_cli.engine.recall import RecallConfig, recall  # noqa: E402
from synapse_cli.engine.store import Store, StoreWriter  # noqa: E402
from synapse_cli.engine.recall import SynapticConfig  # noqa: E402

MODES = ("synaptic", "vector", "synapse")
MINUTE = 60_000
GAP_MS = 30 * 24 * 3600 * 1000
T0 = int(dt.datetime(2025, 1, 6, 9, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def turn_times(timeline: str) -> list[int]:
    if timeline == "turns":
        return [T0 + k * MINUTE for k in range(20)]
    return [T0 + k * MINUTE for k in range(10)] + [T0 + GAP_MS + k * MINUTE for k in range(10)]


def match_gold(past: list[str], gold: list[str], counts: dict) -> list[int]:
    out = []
    for g in gold:
        hits = [i for i, t in enumerate(past) if t == g]
        how = "exact"
        if not hits:
            hits = [i for i, t in enumerate(past) if g in t or t in g]
            how = "containment"
        if not hits:
            counts["unmatched"] += 1
            continue
        counts[how] += 1
        if hits[0] not in out:
            out.append(hits[0])
    return out


def ranked_past(result: dict, past_ids: list[int]) -> tuple[list[int], dict]:
    """Past-turn indices in the mode's order (unreturned ones after, in turn order), and the
    result entry per past index."""
    where = {rid: i for i, rid in enumerate(past_ids)}
    order, entry = [], {}
    for r in result["results"]:
        i = where.get(r["id"])
        if i is not None and i not in entry:
            order.append(i)
            entry[i] = r
    return order + [i for i in range(len(past_ids)) if i not in entry], entry


def run_section(sec: dict, embedder, timeline: str, cfgs: dict, counts: dict,
                modes: tuple[str, ...] = MODES) -> list[dict]:
    turns = [(role, text) for part in ("past", "present") for d in sec[part]
             for role, text in d.items()]
    past = [t for _, t in turns[:10]]
    times = turn_times(timeline)
    triggers = {}
    for rc in sec["recalls"]:
        gold = match_gold(past, rc["related_memories"], counts)
        idx = [k for k in range(10, 20) if turns[k][1] == rc["trigger"]]
        if not idx:
            counts["trigger_not_found"] += 1
            continue
        if not gold:
            counts["trigger_without_gold"] += 1
            continue
        triggers.setdefault(idx[0], []).append(gold)
    vecs = embedder.encode([t for _, t in turns])
    out = []
    with tempfile.TemporaryDirectory(prefix="smrcs-") as tmp:
        path = Path(tmp) / "store"
        past_ids: list[int] = []
        for k, (role, text) in enumerate(turns):
            now = times[k]
            if k > 0:
                store = Store.open(path)
                try:
                    arrays = graphview.build(store)
                    res = {m: recall(store, text, vecs[k], cfgs[m], arrays, now_ms=now)
                           for m in (modes if k in triggers else ("synaptic",))}
                finally:
                    store.close()
                with StoreWriter.open(path) as w:  # the stimulus leaves a spike (seed 3.1)
                    w.add_spikes(res["synaptic"]["stimulated_ids"], now, sp.STIMULUS)
                    w.commit()
                for gold in triggers.get(k, []):
                    row = {"section": sec.get("_index"), "turn": k, "gold": gold}
                    for m in modes:
                        order, entry = ranked_past(res[m], past_ids)
                        row[m] = order
                        if m == "synaptic":
                            row["fired"] = [i for i in order if i in entry
                                            and entry[i]["signals"]["fired"]]
                            row["stim"] = [i for i in order if i in entry
                                           and entry[i]["signals"]["stimulus"]
                                           > cfgs[m].synaptic.stim_th]
                    out.append(row)
            with StoreWriter.open(path, create=True, embedder=embedder.name,
                                  dim=embedder.dim) as w:
                r = ingest(w, [Item(text=text, where=f"turn {k}", timestamp_ms=now,
                                    speaker=role, session=f"{'past' if k < 10 else 'present'}")],
                           embedder, IngestConfig(), now_ms=now)
            if k < 10:
                o = r.outcomes[0]
                past_ids.append(int(o.id))
    return out


def score(rows: list[dict], modes: tuple[str, ...] = MODES) -> dict:
    res = {}
    for m in modes:
        rp, erc, erc_mg, erc_s, erc_s_mg = [], [], [], [], []
        for r in rows:
            gold = set(r["gold"])
            R = len(gold)
            rp.append(len(gold & set(r[m][:R])) / R)
            for k_set, acc, acc_mg in ((r["fired"], erc, erc_mg), (r["stim"], erc_s, erc_s_mg)):
                k = len(k_set)
                got = set(k_set) if m == "synaptic" else set(r[m][:k])
                acc.append(len(gold & got) / R)
                got_mg = got if m == "synaptic" else set(r[m][:max(k, R)])
                acc_mg.append(len(gold & got_mg) / R)
        res[m] = {"r_precision": round(100 * statistics.mean(rp), 2),
                  "erc": round(100 * statistics.mean(erc), 2),
                  "erc_mg": round(100 * statistics.mean(erc_mg), 2),
                  "erc_stim": round(100 * statistics.mean(erc_s), 2),
                  "erc_stim_mg": round(100 * statistics.mean(erc_s_mg), 2)}
    res["mean_fired_past_turns"] = round(statistics.mean(len(r["fired"]) for r in rows), 3)
    res["mean_stimulated_past_turns"] = round(statistics.mean(len(r["stim"]) for r in rows), 3)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--limit", type=int, default=None, help="first N sections only")
    ap.add_argument("--timeline", choices=("conversation", "turns"), default="conversation")
    ap.add_argument("--propagation", choices=("centroid", "original"), default="centroid")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a SynapticConfig field (e.g. spike_weight=0)")
    ap.add_argument("--embedder-dir", default=None, metavar="DIR",
                    help="a sentence-transformers model directory instead of the packaged MiniLM "
                         "(to ask whether a result depends on the embedder)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "smrcs_recall.json"))
    args = ap.parse_args()

    from synapse_cli.models.embedder import get_embedder

    data = json.loads((Path(args.data) / "smrcs" / "smrcs_en_dev.json").read_text())
    for i, sec in enumerate(data):
        sec["_index"] = i
    data = data[:args.limit] if args.limit else data
    overrides = {}
    for kv in args.set:
        key, value = kv.split("=", 1)
        field_type = type(getattr(SynapticConfig(), key))
        overrides[key] = value.lower() in ("1", "true") if field_type is bool else field_type(value)
    sc = SynapticConfig(propagation=args.propagation, **overrides)
    cfgs = {m: RecallConfig(mode=m, k=30, synaptic=sc) for m in MODES}
    embedder = get_embedder("st", args.embedder_dir) if args.embedder_dir else get_embedder()
    counts = {"exact": 0, "containment": 0, "unmatched": 0, "trigger_not_found": 0,
              "trigger_without_gold": 0}
    t0 = time.perf_counter()
    rows = []
    for sec in data:
        rows += run_section(sec, embedder, args.timeline, cfgs, counts)
        log(f"section {sec['_index']}: {len(rows)} triggers so far")
    out = {"command": " ".join(["python", "bench/quality/smrcs_recall.py"] + sys.argv[1:]),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "embedder": embedder.name, "sections": len(data), "triggers": len(rows),
           "timeline": args.timeline, "synaptic_config": dataclasses.asdict(sc),
           "gold_matching": counts, "scores": score(rows),
           "seconds": round(time.perf_counter() - t0, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
