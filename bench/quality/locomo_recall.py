"""LoCoMo evidence recall of every recall mode and ablation, in one run.  Prints one JSON object.

    python bench/quality/locomo_recall.py [--data ../shared/data] [--tau-gate 0.12] [--limit-conv N]
                                  [--verify] [--stores fresh|plain|cons]

For each development conversation: every turn is ingested through the engine API into its own
fresh temporary store (one `ingest()` call, default IngestConfig), the store is reopened
read-only, and every question is embedded once; the same query vector is then handed to
`recall()` for each mode (no reconsolidation touch: `recall()` itself never touches).

Metric (shared/data/README.md): evidence recall@k = |gold dia_ids in top k| / |gold|, averaged
per category and over categories 1-4 (question-weighted), with the dataset's own category
numbers (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial).  A query the
gate rejects returns nothing and scores 0; `ungated` is the same mode with the gate switched
off.  Category 5 is scored as the gate's rejection rate together with the false-refusal rate
on categories 1-4, then tau is calibrated on this data (the default in code is not changed).

`--stores cons` recalls from the consolidated stores bench/tune/locomo_build.py --consolidate built
(bench/out/locomo_stores/<sample_id>/cons/store, opened read-only) instead of ingesting afresh;
`plain` from its ingest-only copies.

With --verify, every query the gate lets through in `synapse` mode is also scored by the second
rejection stage (engine/recall/answer_check.py: the local model's log P(yes) - log P(no) that the top
memories explicitly mention what the query asks); reported at the configured threshold, at the
threshold calibrated in-sample and calibrated leave-one-conversation-out, with its latency.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from synapse_cli.engine import graphview  # noqa: E402
from synapse_cli.engine.ingest import IngestConfig, ingest, md5_of  # noqa: E402
from synapse_cli.engine.inputs import Item  # noqa: E402
from synapse_cli.engine.recall import RecallConfig, recall  # noqa: E402
from synapse_cli.engine.store import Store, StoreWriter  # noqa: E402

KS = (5, 10, 30)
CATS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DIA = re.compile(r"D\d+:\d+")
ABLATIONS = ("inhibition", "fan", "decay", "gate", "graph", "activation", "attribution")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parse_settings(pairs: list[str], cls=RecallConfig) -> dict:
    """`--set KEY=VALUE` pairs -> fields of dataclass `cls`, each value parsed by its field's
    type."""
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    out = {}
    for kv in pairs:
        key, _, value = kv.partition("=")
        if key not in types:
            raise SystemExit(f"--set: {cls.__name__} has no field {key!r}")
        out[key] = {"float": float, "int": int, "str": str}.get(str(types[key]),
                                                                json.loads)(value)
    return out


def modes(tau: float, settings: dict | None = None) -> dict[str, RecallConfig]:
    base = RecallConfig(k=max(KS), tau_gate=tau, **(settings or {}))
    out = {"synapse": base}
    for m in ("vector", "bm25", "hybrid"):
        out[m] = dataclasses.replace(base, mode=m)
    for switch in ABLATIONS:
        out[f"no-{switch}"] = dataclasses.replace(base, **{switch: False})
    out["no-speaker"] = dataclasses.replace(base, lambda_speaker=0.0)  # no speaker focus
    out["exact-words"] = dataclasses.replace(base, variant_weight=0.0)  # no BM25 conflation
    out["with-hubs"] = dataclasses.replace(base, hub_share=1.0)  # hub nodes carry activation
    # current facts first (engine/recall/currency.py) and the gate's topic check (engine/recall/topic.py)
    out["no-chatter"] = dataclasses.replace(base, lambda_chatter=0.0)
    out["no-superseded"] = dataclasses.replace(base, lambda_superseded=0.0)
    out["no-topic"] = dataclasses.replace(base, topic_check=False)
    out["no-restatements"] = dataclasses.replace(base, restatements=False)
    out["no-newest-first"] = dataclasses.replace(base, newest_first=False)
    # the attribution check scored by BM25 at its earlier margin; the topic check with a
    # stricter word-to-memory cosine (more synonyms refused)
    out["bm25-attribution"] = dataclasses.replace(base, attribution_content="bm25",
                                                  tau_attribution=0.25)
    out["topic-sim-0.3"] = dataclasses.replace(base, topic_sim=0.3)
    # consolidation's semantic nodes in the result slots or not (the default's opposite; no
    # difference on a store without them)
    flip = not base.semantic_results
    out["semantic-results" if flip else "no-semantic-results"] = dataclasses.replace(
        base, semantic_results=flip)
    # semantic nodes neither anchor nor are returned (the scan filters them), but activation
    # still flows through them
    out["episodic-only"] = dataclasses.replace(base, types=("episodic",))
    return out


def gate_applies(cfg: RecallConfig) -> bool:
    return cfg.mode == "synapse" and cfg.gate


def parse_time(s: str) -> int:
    t = dt.datetime.strptime(s.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


def turns_of(conv: dict, sample_id: str):
    """(Item, dia_id) per turn in session order; text carries the image caption if any."""
    c = conv["conversation"]
    sessions = sorted(int(k.split("_")[1]) for k in c
                      if re.fullmatch(r"session_\d+", k) and c[k])
    items = []
    for s in sessions:
        ts = parse_time(c[f"session_{s}_date_time"])
        for turn in c[f"session_{s}"]:
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares {turn['blip_caption']}]"
            items.append(Item(text=text, where=f"{sample_id}:{turn['dia_id']}", timestamp_ms=ts,
                              speaker=turn["speaker"], session=f"{sample_id}:session_{s}",
                              dia_id=turn["dia_id"]))
    return items


def turns_by_md5(items) -> dict[bytes, list[str]]:
    """MD5 of the normalised text -> dia_ids of the turns with that text. Ingest stores
    identical texts once, so a returned record stands for every turn with its text."""
    alias: dict[bytes, list[str]] = defaultdict(list)
    for it in items:
        if it.dia_id:
            alias[md5_of(it.text)].append(it.dia_id)
    return alias


def dia_ids_by_record(store, ids, alias: dict[bytes, list[str]]) -> dict[int, list[str]]:
    """record id -> the dia_ids it stands for ([] for a semantic node or a distractor)."""
    out = {}
    for rid in ids.tolist():
        md5 = store.body(rid).get("md5")
        out[rid] = alias.get(bytes.fromhex(md5), []) if md5 else []
    return out


def gold_of(qa: dict, known: set, skipped: Counter) -> list[str]:
    """Clean gold dia_ids: split "D8:6; D9:17", drop malformed ("D", "D:11:26") and unknown ids."""
    gold = []
    for ev in qa.get("evidence") or []:
        parts = [p.strip() for p in str(ev).replace(",", ";").split(";") if p.strip()]
        if len(parts) > 1:
            skipped["evidence_split"] += 1
        for p in parts:
            if not DIA.fullmatch(p):
                skipped["evidence_malformed_dropped"] += 1
            elif p not in known:
                skipped["evidence_unknown_turn_dropped"] += 1
            elif p not in gold:
                gold.append(p)
    return gold


def answerable(conv: dict, known: set, skipped: Counter) -> list[tuple[dict, int, list[str]]]:
    """(qa, category, gold dia_ids) of the questions of categories 1-4 with usable evidence."""
    out = []
    for qa in conv["qa"]:
        cat = int(qa["category"])
        if cat == 5 or not qa.get("evidence"):
            continue
        gold = gold_of(qa, known, skipped)
        if gold:
            out.append((qa, cat, gold))
    return out


def calibrate(a: np.ndarray, f: np.ndarray, max_frr: float = 0.05) -> dict:
    """The tau (reject iff confidence < tau) that rejects the most category-5 questions (f)
    with at most `max_frr` of the answerable ones (a) refused; ties: the smallest tau."""
    cands = np.unique(np.concatenate([[0.0], a, f]))
    best = (0.0, 0.0, 0.0)
    for tau in cands:
        frr, rej = float(np.mean(a < tau)), float(np.mean(f < tau))
        if frr <= max_frr and rej > best[2]:
            best = (float(tau), frr, rej)
    lower = cands[cands < best[0]]
    auc = float(np.mean((a[:, None] > f[None, :]) + 0.5 * (a[:, None] == f[None, :])))
    return {
        "rule": f"max category-5 rejection with false refusal on 1-4 <= {100 * max_frr:g}%; "
                "reject iff confidence < tau",
        "tau": round(best[0], 6),
        "tau_midpoint_to_next_lower_confidence": round(
            float((lower.max() + best[0]) / 2) if len(lower) else best[0], 6),
        "rejection_rate_cat5": round(100 * best[2], 2),
        "false_refusal_rate_1_4": round(100 * best[1], 2),
        "auc_answerable_above_cat5": round(auc, 4),
        "quantiles_answerable": {q: round(float(np.quantile(a, q / 100)), 4) for q in (5, 25, 50, 75)},
        "quantiles_cat5": {q: round(float(np.quantile(f, q / 100)), 4) for q in (5, 25, 50, 75)},
        "note": "in-sample: calibrated on the same dev questions it is reported on; the default "
                "tau in code is unchanged",
    }


class TimedEmbedder:
    """Delegates to the real embedder and adds up the time spent in encode()."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0
        self.dim, self.name = inner.dim, inner.name

    def encode(self, texts):
        t = time.perf_counter()
        try:
            return self.inner.encode(texts)
        finally:
            self.seconds += time.perf_counter() - t


def refusal_rates(recs: list[dict], refused, recall_of, recall_key: str) -> dict:
    """Category-5 rejection and 1-4 false refusals in % for `refused(r)`, and recall@10 over
    1-4 with a refused question scoring 0 (`recall_of(r)` otherwise)."""
    ans = [r for r in recs if r["cat"] != 5]
    ref = {id(r): bool(refused(r)) for r in recs}
    return {"rejected_cat5": round(100 * float(np.mean([ref[id(r)] for r in recs
                                                        if r["cat"] == 5])), 2),
            "false_refusal_1_4": round(100 * float(np.mean([ref[id(r)] for r in ans])), 2),
            recall_key: round(100 * float(np.mean(
                [0.0 if ref[id(r)] else recall_of(r) for r in ans])), 2)}


def attribution_report(recs: list[dict], tau: float) -> dict:
    """The gate's attribution check (engine/recall/attribution.py): rejection of category 5, false
    refusals on 1-4 and recall@10 at the configured margin, along a curve of margins, and with
    the margin calibrated in-sample and leave-one-conversation-out (the largest rejection with
    <= 5% of 1-4 refused by the whole gate; reject iff margin > tau), as verify_report does
    for the second stage. A question the check gave no verdict has no margin."""
    def margin(r):
        return r["as_configured"].get("attribution_margin", -np.inf)

    def refused(r, t) -> bool:  # by the activation threshold, or by the check at margin t
        return (r["as_configured"]["rejected"] and margin(r) <= tau) or margin(r) > t

    def at(tau_of) -> dict:
        return refusal_rates(recs, lambda r: refused(r, tau_of(r)),
                             lambda r: r["ungated"]["r@10"], "recall@10_1_4")

    def fit(rs, conformal: bool = False) -> float:
        """The tau with the largest rejection at <= 5% false refusals on `rs`; `conformal`:
        counting one more refusal among one more question ((k + 1) / (n + 1) <= 5%), the
        split-conformal bound for a question the threshold has not seen."""
        best = (np.inf, -1.0)
        for t in sorted({margin(r) for r in rs if np.isfinite(margin(r))} | {tau}):
            ref = [refused(r, t) for r in rs if r["cat"] != 5]
            frr = (sum(ref) + 1) / (len(ref) + 1) if conformal else np.mean(ref)
            rej = np.mean([refused(r, t) for r in rs if r["cat"] == 5])
            if frr <= 0.05 and rej >= best[1]:  # ties: the larger tau (fewer refused)
                best = (t, rej)
        return float(best[0])

    best = fit(recs)
    convs = sorted({r["conv"] for r in recs})
    loco = {cv: fit([r for r in recs if r["conv"] != cv]) for cv in convs}
    conf = {cv: fit([r for r in recs if r["conv"] != cv], True) for cv in convs}
    return {
        "rule": "reject iff margin > tau (another speaker's best statement matches better)",
        # a question the activation threshold refused never reaches the check
        "share_with_a_verdict": {
            "cat5": round(100 * float(np.mean([np.isfinite(margin(r)) for r in recs
                                               if r["cat"] == 5])), 2),
            "1_4": round(100 * float(np.mean([np.isfinite(margin(r)) for r in recs
                                              if r["cat"] != 5])), 2)},
        "configured": {"tau": tau, **at(lambda r: tau)},
        "curve": [{"tau": t, **at(lambda r, t=t: t)}
                  for t in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 0.99)],
        "calibrated_in_sample": {"tau": round(best, 4), **at(lambda r: best)},
        "calibrated_loco": {"taus": {cv: round(t, 4) for cv, t in loco.items()},
                            **at(lambda r: loco[r["conv"]])},
        "calibrated_loco_conformal": {"taus": {cv: round(t, 4) for cv, t in conf.items()},
                                      **at(lambda r: conf[r["conv"]])},
    }


def verify_report(recs: list[dict], threshold: float, memories: int, lat: list[float]) -> dict:
    """What the second stage adds to the gate: cat-5 rejection, false refusals on 1-4 and
    recall@10 with both stages, at the configured threshold, calibrated in-sample and
    calibrated on the other conversations (leave-one-conversation-out)."""
    def score(r):  # a query the gate rejected stays rejected whatever the threshold
        return -np.inf if r["as_configured"]["rejected"] else r["verify_score"]

    def at(tau_of) -> dict:
        return refusal_rates(recs, lambda r: r["as_configured"]["rejected"] or score(r) < tau_of(r),
                             lambda r: r["as_configured"]["r@10"], "recall@10_all_1_4")

    def fit(rs) -> dict:
        """calibrate() on the log-odds; its 'tau 0 = reject nothing' means -inf here."""
        a = np.array([score(r) for r in rs if r["cat"] != 5])
        f = np.array([score(r) for r in rs if r["cat"] == 5])
        cal = calibrate(np.where(np.isfinite(a), a, -1e9), np.where(np.isfinite(f), f, -1e9))
        # the midpoint to the next lower score: the rounded tau itself may sit above a score
        cal["tau"] = (cal["tau_midpoint_to_next_lower_confidence"]
                      if cal["rejection_rate_cat5"] > 0 else -np.inf)
        if cal["tau"] < -1e8:  # between the gate's rejections (-1e9) and every model score
            cal["tau"] = -np.inf  # = no threshold: the gate's rejections only
        return cal

    cal = fit(recs)
    loco_tau = {}
    convs = sorted({r["conv"] for r in recs})
    for conv in convs if len(convs) > 1 else []:
        loco_tau[conv] = fit([r for r in recs if r["conv"] != conv])["tau"]
    return {
        "what": "second rejection stage (engine/recall/answer_check.py) after the gate, synapse mode: "
                "reject iff log P(yes) - log P(no) < threshold",
        "memories_shown": memories,
        "checked": int(sum(1 for r in recs if "verify_score" in r)),
        "latency_ms_p50": round(statistics.median(lat), 1) if lat else None,
        "latency_ms_p90": round(float(np.percentile(lat, 90)), 1) if lat else None,
        "gate_only": at(lambda r: -1e300),
        "configured_threshold": threshold,
        "at_configured_threshold": at(lambda r: threshold),
        "calibrated_in_sample": {**cal, **at(lambda r: cal["tau"])},
        "calibrated_loco": ({"tau_per_held_out_conversation": loco_tau,
                             **at(lambda r: loco_tau[r["conv"]])} if loco_tau else None),
        "per_question": [[r["conv"], r["cat"], r["as_configured"]["rejected"],
                          None if "verify_score" not in r else round(r["verify_score"], 4)]
                         for r in recs],
    }


def run(args) -> dict:
    from synapse_cli.models.embedder import get_embedder

    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    if args.limit_conv:
        data = data[: args.limit_conv]
    t = time.perf_counter()
    embedder = get_embedder()
    embedder.encode(["warm up"])
    model_load_s = time.perf_counter() - t
    cfgs = modes(args.tau_gate, parse_settings(args.set))
    if args.modes:
        wanted = [m.strip() for m in args.modes.split(",") if m.strip()]
        if bad := [m for m in wanted if m not in cfgs]:
            raise SystemExit(f"--modes: unknown {bad}; one of {list(cfgs)}")
        cfgs = {m: cfgs[m] for m in wanted}
    timed = TimedEmbedder(embedder)
    checker = vcfg_check = None
    verify_lat: list[float] = []
    if args.verify:
        from synapse_cli.api import model_path
        from synapse_cli.engine import config
        from synapse_cli.engine.recall import AnswerChecker, VerifyConfig

        s = config.resolve()
        vcfg_check = VerifyConfig(memories=s["verify.verify_memories"],
                                  threshold=s["verify.verify_threshold"])
        checker = AnswerChecker(model_path(s["extraction.model"]),
                                threads=s["extraction.threads"])

    skipped: Counter = Counter()
    # per mode: list of per-question records
    per_q: dict[str, list[dict]] = defaultdict(list)
    latency: dict[str, list[float]] = defaultdict(list)
    conf: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))  # (answerable, cat 5)
    ingest_s = embed_q_s = 0.0
    n_turns = n_stored = n_dupes = 0
    consistency_mismatch = 0

    for conv in data:
        sid = conv["sample_id"]
        items = turns_of(conv, sid)
        known = {it.dia_id for it in items}
        alias = turns_by_md5(items)
        with tempfile.TemporaryDirectory(prefix="synapse-locomo-") as tmp:
            path = Path(tmp) / "store"
            t = time.perf_counter()
            if args.stores == "fresh":
                with StoreWriter.open(path, create=True) as w:
                    res = ingest(w, items, timed, IngestConfig())
                c = res.counts()
            else:  # built once by bench/tune/locomo_build.py
                path = ROOT / "bench" / "out" / "locomo_stores" / sid / args.stores / "store"
                if not (path.parent / "ok").exists():
                    raise SystemExit(f"{path}: not built; run bench/tune/locomo_build.py"
                                     + (" --consolidate" if args.stores == "cons" else ""))
                c = {"stored": None, "duplicate": sum(len(v) - 1 for v in alias.values())}
            ingest_s += time.perf_counter() - t
            n_turns += len(items)
            n_stored += c["stored"] or 0
            n_dupes += c["duplicate"]
            log(f"{sid}: {len(items)} turns ingested in {time.perf_counter() - t:.1f}s {c}")
            now_ms = max(it.timestamp_ms for it in items)  # asked right after the last session

            store = Store.open(path)
            arrays = graphview.build(store)
            dia_of_id = dia_ids_by_record(store, arrays.ids, alias)

            qas = []
            for qa in conv["qa"]:
                cat = int(qa["category"])
                if cat == 5:
                    qas.append((qa, cat, None))
                    continue
                if not qa.get("evidence"):
                    skipped["question_without_evidence"] += 1
                    continue
                gold = gold_of(qa, known, skipped)
                if not gold:
                    skipped["question_without_valid_evidence"] += 1
                    continue
                qas.append((qa, cat, gold))
            t = time.perf_counter()
            qvecs = embedder.encode([qa["question"] for qa, _, _ in qas])
            embed_q_s += time.perf_counter() - t

            for (qa, cat, gold), qv in zip(qas, qvecs):
                for name, cfg in cfgs.items():
                    variants = [("as_configured", cfg)]
                    if gate_applies(cfg):
                        variants.append(("ungated", dataclasses.replace(cfg, gate=False)))
                    rec = {"cat": cat, "conv": sid}
                    for label, vcfg in variants:
                        t = time.perf_counter()
                        r = recall(store, qa["question"], qv, vcfg, arrays, now_ms=now_ms,
                                   embed=embedder.encode)  # the topic check's words
                        if label == "as_configured":
                            latency[name].append((time.perf_counter() - t) * 1000)
                        got = [dia_of_id[x["id"]] for x in r["results"]]
                        rec[label] = {"rejected": r["rejected"], "confidence": r["confidence"]}
                        if "attribution" in r:
                            rec[label]["attribution_margin"] = r["attribution"]["margin"]
                        if gold is not None:
                            g = set(gold)
                            for k in KS:
                                hit = set().union(*got[:k]) & g if got else set()
                                rec[label][f"r@{k}"] = len(hit) / len(g)
                        rec[label]["tokens@10"] = sum(len(x["text"].split())
                                                      for x in r["results"][:10])
                        if (checker is not None and name == "synapse"
                                and label == "as_configured" and not r["rejected"]):
                            t = time.perf_counter()
                            rec["verify_score"] = checker.score(
                                qa["question"], r["results"][: vcfg_check.memories])
                            verify_lat.append((time.perf_counter() - t) * 1000)
                    if len(variants) == 1:
                        rec["ungated"] = rec["as_configured"]
                    elif rec["ungated"]["confidence"] != rec["as_configured"]["confidence"]:
                        consistency_mismatch += 1
                    per_q[name].append(rec)
                    conf[name][cat == 5].append(rec["as_configured"]["confidence"])
            store.close()
            log(f"{sid}: {len(qas)} questions x {len(cfgs)} modes done")

    out_modes = {}
    for name, recs in per_q.items():
        entry = {}
        for label in ("as_configured", "ungated"):
            ans = [r for r in recs if r["cat"] != 5]
            block = {}
            for k in KS:
                block[f"recall@{k}"] = {
                    "all_1_4": round(100 * float(np.mean([r[label][f"r@{k}"] for r in ans])), 2),
                    **{f"{c}_{CATS[c]}": round(100 * float(np.mean(
                        [r[label][f"r@{k}"] for r in ans if r["cat"] == c])), 2) for c in CATS}}
            block["recall@10_all_1_4_per_conversation"] = {
                cv: round(100 * float(np.mean([r[label]["r@10"] for r in ans if r["conv"] == cv])), 2)
                for cv in dict.fromkeys(r["conv"] for r in ans)}
            block["rejected_1_4"] = round(100 * float(np.mean([r[label]["rejected"] for r in ans])), 2)
            block["rejected_cat5"] = round(100 * float(np.mean(
                [r[label]["rejected"] for r in recs if r["cat"] == 5])), 2)
            toks = [r[label]["tokens@10"] for r in ans]
            answered = [r[label]["tokens@10"] for r in ans if not r[label]["rejected"]]
            block["avg_tokens_top10_1_4"] = round(float(np.mean(toks)), 1)
            block["avg_tokens_top10_1_4_answered_only"] = (
                round(float(np.mean(answered)), 1) if answered else None)
            entry[label] = block
        entry["gate_applies"] = gate_applies(cfgs[name])
        entry["latency_ms_p50"] = round(statistics.median(latency[name]), 3)
        entry["latency_ms_p90"] = round(float(np.percentile(latency[name], 90)), 3)
        out_modes[name] = entry

    # --- gate: default tau and calibration on the synapse confidence (activation of the top hit)
    a, f = (np.array(x) for x in conf["synapse"])
    gate = {
        "confidence": "the best activation among the first 10 results (synapse mode), as "
                      "recall() reports it",
        "default_tau": args.tau_gate,
        "default_rejection_rate_cat5": round(100 * float(np.mean(f < args.tau_gate)), 2),
        "default_false_refusal_rate_1_4": round(100 * float(np.mean(a < args.tau_gate)), 2),
        "calibrated": calibrate(a, f),
        "n_answerable": len(a), "n_cat5": len(f),
    }
    if "vector" in conf:  # absent when --modes leaves it out
        va, vf = (np.array(x) for x in conf["vector"])
        gate["for_comparison_top1_dense_similarity"] = {
            "confidence": "cosine of the top dense hit (vector mode's confidence); not what the "
                          "gate uses, shown to tell whether any cheap signal separates category 5",
            "calibrated": calibrate(va, vf)}
    gate["attribution"] = attribution_report(per_q["synapse"], RecallConfig().tau_attribution)
    if checker is not None:
        gate["verify"] = verify_report(per_q["synapse"], vcfg_check.threshold,
                                       vcfg_check.memories, verify_lat)
    counts = Counter(r["cat"] for r in per_q["synapse"])
    return {
        "benchmark": "locomo_recall",
        "data": str(Path(args.data) / "locomo" / "locomo_dev.json"),
        "conversations": [c["sample_id"] for c in data],
        "questions_scored": {str(k): counts[k] for k in sorted(counts)},
        "skipped": dict(skipped),
        "metric": "evidence recall@k in percent = |gold dia_ids in top k| / |gold|, mean per "
                  "category and over categories 1-4 (question-weighted); rejected query scores 0",
        "setup": {
            "turn_text": "text + ' [shares {blip_caption}]' when the turn has an image caption "
                         "(as the LoCoMo baselines do); speaker as metadata, so ingest embeds "
                         "and indexes 'Speaker: text' (engine/ingest.py retrieval_text)",
            "store": ("one fresh temporary store per conversation; engine ingest() with "
                      "default IngestConfig; session = '{sample_id}:session_N'; timestamp = "
                      "session_N_date_time (UTC)") if args.stores == "fresh" else (
                f"bench/out/locomo_stores/<sample_id>/{args.stores}/store from "
                "bench/tune/locomo_build.py (the same ingest"
                + (", then consolidated with the packaged SmolLM2-135M extractor; a semantic "
                   "node returned credits no turn)" if args.stores == "cons" else ")")),
            "now_ms": "the conversation's last session time (questions asked right after it)",
            "dedup": f"{n_dupes} of {n_turns} turns deduplicated by ingest (same normalised "
                     "text); a returned record credits every dia_id with that text",
            "query": "embedded once per question (MiniLM, numpy embedder), same vector for every "
                     "mode; recall() called directly, no reconsolidation touch",
            "k": "recall(k=30); recall@5/@10 are prefixes of the same ranking",
            "tokens": "whitespace tokens of the texts of the top-10 returned memories",
            "recall_config_default": dataclasses.asdict(RecallConfig()),
        },
        "modes": out_modes,
        "gate": gate,
        "gate_confidence_mismatch_gated_vs_ungated": consistency_mismatch,
        "timing": {
            "model_load_s": round(model_load_s, 2),
            "ingest_s": round(ingest_s, 2),
            "turns": n_turns, "stored": n_stored,
            "ingest_turns_per_s": round(n_turns / ingest_s, 1) if n_stored else None,
            "ingest_embedding_s": round(timed.seconds, 2),
            "ingest_without_embedding_turns_per_s": round(
                n_turns / (ingest_s - timed.seconds), 1) if n_stored else None,
            "query_embed_s": round(embed_q_s, 2),
            "latency_note": "wall time of one recall() call (query vector given), ms; store "
                            "arrays built once per conversation",
        },
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--tau-gate", type=float, default=RecallConfig().tau_gate)
    p.add_argument("--limit-conv", type=int, default=0, help="only the first N conversations")
    p.add_argument("--stores", choices=("fresh", "plain", "cons"), default="fresh",
                   help="fresh: ingest each conversation now (default); plain/cons: the stores "
                        "bench/tune/locomo_build.py built (cons = consolidated)")
    p.add_argument("--verify", action="store_true",
                   help="also score the second rejection stage (the local model)")
    p.add_argument("--modes", default="", help="NAME[,NAME]: only these modes and ablations")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a RecallConfig field for every mode (repeatable), e.g. k=30")
    args = p.parse_args()
    load0 = round(os.getloadavg()[0], 2)
    t = time.perf_counter()
    out = run(args)
    out["timing"]["total_s"] = round(time.perf_counter() - t, 1)
    out["timing"]["loadavg_1m_at_start_and_end"] = [load0, round(os.getloadavg()[0], 2)]
    out["timing"]["cpus"] = os.cpu_count()
    out["command"] = "python bench/quality/locomo_recall.py " + " ".join(sys.argv[1:])
    out["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
