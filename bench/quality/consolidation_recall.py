"""Does consolidation earn its place? LoCoMo dev recall@10, fresh and consolidated, in one run.

    python bench/quality/consolidation_recall.py [--data ../shared/data] [--limit-conv N]
        [--model other.gguf] [--tag NAME] [--cons-from DIR] [--rows A,B] [--set KEY=VALUE]

Per development conversation: every turn is ingested into a fresh temporary store (exactly as
bench/quality/locomo_recall.py does); that store is recalled from as it is (`fresh`), then a copy of it
is consolidated with the real extractor (packaged SmolLM2-135M, or `--model`) and recalled from
again, with the ablations below. The consolidated copy is kept under
bench/out/consolidation_stores/<tag>/<sample_id>/ (gitignored; tag = model file name + the
extractor's prompt version unless --tag) and reused by a rerun, so the ablations cost no new
consolidation. `--cons-from DIR` recalls from stores built elsewhere
(DIR/<sample_id>/cons/store, e.g. bench/out/locomo_stores from bench/tune/locomo_build.py) instead.

Every row uses the default RecallConfig (synapse mode, gated, k = 30) and one query vector per
question. Rows on the consolidated stores (the engine's arrays built with one change each):
  consolidated            as `recall` sees the store;
  no-node-anchors         RecallConfig.node_anchors 0: semantic nodes seed no activation (they
                          still carry it);
  with-idf                semantic-node edges scaled by the node's IDF (graphview.SEMANTIC_IDF);
  with-fan-compensation   episodes' temporal edges rescaled (graphview.KEEP_TEMPORAL_FAN);
  idf-and-fan             both: the default from issue 18's first round until 2026-11-27;
  no-dormancy             archived (dormant) nodes back in the graph;
  no-semantic-edges       every edge touching a semantic node dropped (what is left of
                          consolidation: the consolidated flags, the nodes as records);
  abstraction-x0.5 / x1.5 / x2   ABSTRACTION edges at that multiple of their weight;
  with-hubs / hubs-0.05   RecallConfig.hub_share 1.0 (speaker nodes carry activation) / 0.05;
  pagerank-0.2            RecallConfig.lambda_pr 0.2 (the seed's PageRank weight; default 0).
Metric: evidence recall@10 in percent over categories 1-4 (question-weighted) and per category,
as bench/quality/locomo_recall.py computes it; a rejected query scores 0. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "quality"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from locomo_recall import (CATS, answerable, dia_ids_by_record, parse_settings,  # noqa: E402
                           turns_by_md5, turns_of)
from store_format import graph_files as gf  # noqa: E402
from synapse_cli.engine import graphview  # noqa: E402
from synapse_cli.engine.ingest import IngestConfig, ingest  # noqa: E402
from synapse_cli.engine.recall import RecallConfig, recall  # noqa: E402
from synapse_cli.engine.store import Store, StoreWriter  # noqa: E402

OUT = ROOT / "bench" / "out" / "consolidation_stores"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


SWITCHES = {"with-idf": ("SEMANTIC_IDF", True),
            "with-fan-compensation": ("KEEP_TEMPORAL_FAN", True)}


def arrays_variant(store: Store, name: str):
    """The engine's recall arrays for `store` with the change row `name` makes."""
    if name == "idf-and-fan":  # both read-time reweightings, the default before 2026-11-27
        saved = graphview.SEMANTIC_IDF, graphview.KEEP_TEMPORAL_FAN
        graphview.SEMANTIC_IDF = graphview.KEEP_TEMPORAL_FAN = True
        try:
            return graphview.build(store)
        finally:
            graphview.SEMANTIC_IDF, graphview.KEEP_TEMPORAL_FAN = saved
    if name in SWITCHES:
        attr, value = SWITCHES[name]
        saved = getattr(graphview, attr)
        setattr(graphview, attr, value)
        try:
            return graphview.build(store)
        finally:
            setattr(graphview, attr, saved)
    if name == "no-dormancy":
        from store_format import dormancy as dm

        saved = dm.archived_ids
        dm.archived_ids = lambda *a, **k: np.zeros(0, np.uint64)
        try:
            return graphview.build(store)
        finally:
            dm.archived_ids = saved
    a = graphview.build(store)
    if name == "no-semantic-edges":
        keep = ~a.semantic()
        a.indptr, a.indices, a.weights, a.types = graphview.subgraph(
            (a.indptr, a.indices, a.weights, a.types), keep)
    elif name.startswith("abstraction-x"):
        factor = float(name.removeprefix("abstraction-x"))
        a.weights = np.where(a.types == gf.ABSTRACTION, a.weights * factor,
                             a.weights).astype(np.float32)
    return a


CONS_ROWS = {"consolidated": {}, "no-node-anchors": {"node_anchors": 0}, "with-idf": {},
             "with-fan-compensation": {}, "idf-and-fan": {},
             "no-dormancy": {}, "no-semantic-edges": {}, "abstraction-x0.5": {},
             "abstraction-x1.5": {}, "abstraction-x2": {},
             "with-hubs": {"hub_share": 1.0}, "hubs-0.05": {"hub_share": 0.05},
             "pagerank-0.2": {"lambda_pr": 0.2}}


# The conversations the consolidation changes of issue 18 were chosen on; the others are its
# held-out twin (`by_half` in the output).
TUNED_ON = ("conv-26", "conv-30")


def score(store, arrays, qas, qvecs, dia_of_id, cfg, now_ms, embed, sid) -> list[dict]:
    out = []
    for (qa, cat, gold), qv in zip(qas, qvecs):
        r = recall(store, qa["question"], qv, cfg, arrays, now_ms=now_ms, embed=embed)
        got = [dia_of_id.get(x["id"], []) for x in r["results"][:10]]
        hit = set().union(*got) & set(gold) if got else set()
        out.append({"cat": cat, "r10": len(hit) / len(gold), "conv": sid})
    return out


def summary(recs: list[dict]) -> dict:
    d = {"all_1_4": round(100 * float(np.mean([r["r10"] for r in recs])), 2)}
    for c, name in CATS.items():
        d[f"{c}_{name}"] = round(100 * float(np.mean([r["r10"] for r in recs if r["cat"] == c])), 2)
    return d


def consolidated_copy(src: Path, dst: Path, args, embedder) -> dict:
    """`src` (an ingested store) copied to `dst` and consolidated, unless done before."""
    if (dst.parent / "ok").exists():
        return json.loads((dst.parent / "ok").read_text())
    from synapse_cli.engine.consolidate import CACHE_NAME, ConsolidateConfig, consolidate
    from synapse_cli.models.extractor import LlamaExtractor

    if not dst.exists():  # else an interrupted run: consolidation resumes where it stopped
        shutil.rmtree(dst.parent, ignore_errors=True)
        dst.parent.mkdir(parents=True)
        shutil.copytree(src, dst)
        if args.cache_from:  # the extraction cache of stores built before: same windows, hits
            cache = OUT / args.cache_from / dst.parent.name / "store" / CACHE_NAME
            if cache.exists():
                shutil.copyfile(cache, dst / CACHE_NAME)
    # with a cache from earlier stores the model is mostly not run: no speed of the model
    seeded = bool(args.cache_from) and (dst / CACHE_NAME).exists()
    t = time.perf_counter()
    with StoreWriter.open(dst) as w:
        x = LlamaExtractor(args.model, threads=args.threads, embedder=embedder)
        cfg = ConsolidateConfig(**parse_settings(args.consolidate_set, ConsolidateConfig))
        res = consolidate(w, x, embedder, cfg)
    rep = res.as_dict() | {"wall_s": round(time.perf_counter() - t, 1),
                           "turns_per_s": round(res.episodes / (time.perf_counter() - t), 2),
                           "cache_from": args.cache_from if seeded else None}
    (dst.parent / "ok").write_text(json.dumps(rep))
    return rep


def run(args) -> dict:
    from synapse_cli.models.embedder import get_embedder
    from synapse_cli.models.extractor import PROMPT_VERSION, default_model_path

    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    if args.limit_conv:
        data = data[: args.limit_conv]
    embedder = get_embedder()
    model = Path(args.model) if args.model else default_model_path()
    tag = args.tag or f"{model.name}-{PROMPT_VERSION}"
    base = RecallConfig(**{"k": 30, **parse_settings(args.set)})
    per: dict[str, list[dict]] = defaultdict(list)
    builds, skipped = {}, Counter()
    load0 = os.getloadavg()[0]
    for conv in data:
        sid = conv["sample_id"]
        items = turns_of(conv, sid)
        known = {it.dia_id for it in items}
        alias = turns_by_md5(items)
        qas = answerable(conv, known, skipped)
        qvecs = embedder.encode([qa["question"] for qa, _, _ in qas])
        now_ms = max(it.timestamp_ms for it in items)
        with tempfile.TemporaryDirectory(prefix="synapse-consrec-") as tmp:
            path = Path(tmp) / "store"
            with StoreWriter.open(path, create=True) as w:
                ingest(w, items, embedder, IngestConfig())
            store = Store.open(path)
            arrays = graphview.build(store)
            per["fresh"] += score(store, arrays, qas, qvecs,
                                  dia_ids_by_record(store, arrays.ids, alias), base, now_ms,
                                  embedder.encode, sid)
            store.close()
            if args.cons_from:
                cpath = Path(args.cons_from) / sid / "cons" / "store"
                builds[sid] = json.loads((cpath.parent / "ok").read_text())
            else:
                cpath = OUT / tag / sid / "store"
                builds[sid] = consolidated_copy(path, cpath, args, embedder)
            log(sid, "consolidated", builds[sid])
        store = Store.open(cpath)
        for row, over in CONS_ROWS.items():
            if args.rows and row not in args.rows:
                continue
            arrays = arrays_variant(store, row)
            per[row] += score(store, arrays, qas, qvecs,
                              dia_ids_by_record(store, arrays.ids, alias),
                              dataclasses.replace(base, **over), now_ms, embedder.encode, sid)
        store.close()
        log(sid, {k: summary(v)["all_1_4"] for k, v in per.items()})
    rows = {k: summary(v) for k, v in per.items()}
    by_half = {half: {k: summary([r for r in v if (r["conv"] in TUNED_ON) == tuned])
                      for k, v in per.items()}
               for half, tuned in (("tuned on " + ", ".join(TUNED_ON), True),
                                   ("not tuned on", False))
               if any((r["conv"] in TUNED_ON) == tuned for r in per["fresh"])}
    fresh = rows["fresh"]
    return {"benchmark": "consolidation_recall", "model": str(model), "tag": tag,
            "cons_from": args.cons_from, "settings": args.set,
            "consolidate_settings": args.consolidate_set,
            "conversations": [c["sample_id"] for c in data],
            "questions": len(per["fresh"]), "metric": "evidence recall@10 (%), gated, cats 1-4",
            "rows": rows, "by_half": by_half,
            "consolidated_minus_fresh": {k: round(rows["consolidated"][k] - fresh[k], 2)
                                         for k in fresh},
            "consolidation": builds, "skipped": dict(skipped),
            "loadavg_1m_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--limit-conv", type=int, default=0)
    p.add_argument("--model", default=None, help="GGUF for extraction (default: packaged)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tag", default=None, help="name of the consolidated stores' folder")
    p.add_argument("--cache-from", default=None,
                   help="tag of earlier stores whose extraction cache to start from")
    p.add_argument("--rows", type=lambda x: x.split(","), default=None,
                   help="only these consolidated rows (comma-separated; default all)")
    p.add_argument("--cons-from", default=None,
                   help="recall from DIR/<sample_id>/cons/store instead of consolidating")
    p.add_argument("--consolidate-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a ConsolidateConfig field when the stores are built (repeatable; give "
                        "them a --tag of their own)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a RecallConfig field for every row, fresh included (repeatable)")
    print(json.dumps(run(p.parse_args()), indent=1))


if __name__ == "__main__":
    main()
