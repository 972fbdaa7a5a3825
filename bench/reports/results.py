"""Write docs/RESULTS.md from the JSON the benchmarks printed; no number in it is typed by hand.

    python bench/report.py results [--recall bench/out/locomo_recall.json]
                               [--tune bench/out/locomo_tune.json] [--out docs/RESULTS.md]

Inputs: the output of bench/quality/locomo_recall.py (every mode and ablation in one run, the gate
calibration) and, when present, of bench/quality/agent_use.py (fresh, --consolidate and
--shared tagged / untagged),
bench/quality/consolidation_recall.py (default and a bigger model) and bench/tune/locomo_tune.py
(the sweep behind the recall defaults).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CATS = ["all_1_4", "1_multi-hop", "2_temporal", "3_open-domain", "4_single-hop"]
HEAD = ["all 1-4", "multi-hop", "temporal", "open-domain", "single-hop"]



def _portable(path: str) -> str:
    """A data path as the benchmarks take it (relative to the repository), never this machine's."""
    parts = Path(path).parts
    return str(Path("..", *parts[parts.index("shared"):])) if "shared" in parts else Path(path).name

def fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"
    return "–" if x is None else str(x)


def table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return out + [""]


def targets_section(r: dict, noise: dict | None) -> list[str]:
    """Issue 10's targets, each against the numbers of the runs below."""
    m = r["modes"]
    s, h = m["synapse"]["as_configured"]["recall@10"], m["hybrid"]["as_configured"]["recall@10"]
    rows = [["recall@10 over 1-4 at least hybrid + 8", f"{fmt(s['all_1_4'])} vs {fmt(h['all_1_4'])}",
             round(s["all_1_4"] - h["all_1_4"] - 8, 2)],
            ["multi-hop at least hybrid + 8", f"{fmt(s['1_multi-hop'])} vs {fmt(h['1_multi-hop'])}",
             round(s["1_multi-hop"] - h["1_multi-hop"] - 8, 2)],
            ["no category below hybrid", "lowest margin " + min(
                (f"{fmt(round(s[c] - h[c], 2))} ({c})" for c in CATS[1:]), key=lambda x: float(
                    x.split()[0])), round(min(s[c] - h[c] for c in CATS[1:]), 2)]]
    g = r["gate"]
    best = g["calibrated"]
    rows.append(["gate rejects >= 50% of category 5 at <= 5% false refusals",
                 f"activation threshold alone, best tau: "
                 f"{best['rejection_rate_cat5']}% at {best['false_refusal_rate_1_4']}%",
                 round(best["rejection_rate_cat5"] - 50, 2)])
    if "attribution" in g:
        c, lo = g["attribution"]["configured"], g["attribution"]["calibrated_loco"]
        cf = g["attribution"].get("calibrated_loco_conformal")
        rows.append(["  the default gate (with the attribution check)",
                     f"{c['rejected_cat5']}% at {c['false_refusal_1_4']}%; leave-one-"
                     f"conversation-out {lo['rejected_cat5']}% at {lo['false_refusal_1_4']}%"
                     + (f" (conformal {cf['rejected_cat5']}% at {cf['false_refusal_1_4']}%)"
                        if cf else ""),
                     round(c["rejected_cat5"] - 50, 2)])
    v = g.get("verify")
    if v and v.get("calibrated_loco"):
        lo = v["calibrated_loco"]
        rows.append(["  with recall --verify (threshold calibrated on the other conversations)",
                     f"{lo['rejected_cat5']}% at {lo['false_refusal_1_4']}%",
                     round(lo["rejected_cat5"] - 50, 2)])
    if noise:
        for cond, t in noise["target_synapse_goal_drop_at_most_half_of_vector"].items():
            rows.append([f"noise drop (synapse + goal) <= half of vector's, {cond}",
                         f"{fmt(t['synapse_with_goal_drop'])} vs {fmt(t['vector_drop'])}",
                         round(t["vector_drop"] / 2 - t["synapse_with_goal_drop"], 2)])
    p50, hp50 = m["synapse"]["latency_ms_p50"], m["hybrid"]["latency_ms_p50"]
    rows.append(["recall p50 latency within 3x of hybrid", f"{fmt(p50)} vs {fmt(hp50)} ms",
                 round(3 * hp50 - p50, 2)])
    L = ["## Targets of issue 10 (from the runs below)", ""]
    L += table(["target", "measured", "margin (negative = missed by)"], rows)
    return L


def recall_section(r: dict) -> list[str]:
    t = r["timing"]
    modes = r["modes"]
    L = ["## LoCoMo evidence recall (bench/quality/locomo_recall.py)", ""]
    L += [f"Command: `{r.get('command', 'python bench/quality/locomo_recall.py')}` — run "
          f"{r.get('date_utc', '(date not recorded)')} UTC on {t.get('cpus')} shared CPUs, "
          f"load average {t['loadavg_1m_at_start_and_end'][0]} at start and "
          f"{t['loadavg_1m_at_start_and_end'][1]} at the end, {t['total_s']} s in all.", ""]
    L += [f"Data: `{_portable(r['data'])}`, conversations {', '.join(r['conversations'])}; questions "
          f"scored per category {r['questions_scored']}; skipped {r['skipped']}.", ""]
    L += [f"Metric: {r['metric']}.", ""]
    for key, what in r["setup"].items():
        if key != "recall_config_default":
            L.append(f"- {key}: {what}")
    L += ["", "The `synapse` row is the default pipeline (RecallConfig defaults, gate on); "
          "`no-X` switches one component off; `vector`, `bm25` and `hybrid` (reciprocal-rank "
          "fusion of the two) are the baselines. A query the gate rejects scores 0.", ""]
    first = ["synapse", "vector", "bm25", "hybrid"]
    order = first + sorted(m for m in modes if m not in first)
    for k in (5, 10, 30):
        L += [f"### recall@{k}", ""]
        rows = []
        for m in order:
            e = modes[m]["as_configured"][f"recall@{k}"]
            rows.append([m] + [e[c] for c in CATS]
                        + [modes[m]["as_configured"]["rejected_1_4"]])
            if m == "synapse":
                e = modes[m]["ungated"][f"recall@{k}"]
                rows.append(["synapse, gate off"] + [e[c] for c in CATS]
                            + [modes[m]["ungated"]["rejected_1_4"]])
        L += table(["mode"] + HEAD + ["rejected 1-4 %"], rows)
    s, h = modes["synapse"]["as_configured"]["recall@10"], modes["hybrid"]["as_configured"][
        "recall@10"]
    L += ["### Against the targets (recall@10, same run)", ""]
    L += table(["", *HEAD], [
        ["synapse", *[s[c] for c in CATS]], ["hybrid", *[h[c] for c in CATS]],
        ["synapse − hybrid", *[round(s[c] - h[c], 2) for c in CATS]]])
    L += ["Targets: all 1-4 and multi-hop at least 8 points above hybrid, no category below it.",
          ""]
    L += ["### Cost", ""]
    L += table(["mode", "latency p50 ms", "latency p90 ms", "tokens of top 10"],
               [[m, modes[m]["latency_ms_p50"], modes[m]["latency_ms_p90"],
                 modes[m]["as_configured"]["avg_tokens_top10_1_4"]] for m in order])
    g = r["gate"]
    L += ["## Gate calibration (category 5 = unanswerable)", ""]
    L += [f"Confidence: {g['confidence']}. Default tau {g['default_tau']}: rejects "
          f"{g['default_rejection_rate_cat5']}% of category 5 and "
          f"{g['default_false_refusal_rate_1_4']}% of the answerable questions "
          f"({g['n_cat5']} and {g['n_answerable']} questions).", ""]
    rows = []
    for name, c in (("synapse top activation", g["calibrated"]),
                    ("top-1 dense cosine (for comparison)",
                     g["for_comparison_top1_dense_similarity"]["calibrated"])):
        rows.append([name, c["tau"], c["rejection_rate_cat5"], c["false_refusal_rate_1_4"],
                     c["auc_answerable_above_cat5"],
                     " / ".join(fmt(v) for v in c["quantiles_answerable"].values()),
                     " / ".join(fmt(v) for v in c["quantiles_cat5"].values())])
    L += table(["confidence", "calibrated tau", "cat-5 rejected %", "1-4 refused %", "AUC",
                "answerable q5/25/50/75", "cat-5 q5/25/50/75"], rows)
    L += [f"Rule: {g['calibrated']['rule']}. {g['calibrated']['note']}.", ""]
    if "attribution" in g:
        L += attribution_section(g["attribution"])
    if "verify" in g:
        L += verify_section(g["verify"])
    return L


def attribution_section(a: dict) -> list[str]:
    c, lo = a["configured"], a["calibrated_loco"]
    L = ["### The gate's attribution check (engine/recall/attribution.py)", ""]
    L += [f"Rule: {a['rule']}. It gives a verdict on {a['share_with_a_verdict']['cat5']}% of "
          f"category 5 and {a['share_with_a_verdict']['1_4']}% of categories 1-4 (one speaker "
          "of the top memories named, some statement matching). "
          f"Configured tau {c['tau']}: {c['rejected_cat5']}% of category 5 refused, "
          f"{c['false_refusal_1_4']}% of 1-4, recall@10 over 1-4 {c['recall@10_1_4']}. "
          f"In-sample best tau {a['calibrated_in_sample']['tau']}; leave-one-conversation-out "
          f"(taus {', '.join(f'{k} {v}' for k, v in lo['taus'].items())}): "
          f"{lo['rejected_cat5']}% refused of category 5, {lo['false_refusal_1_4']}% of 1-4."]
    cf = a.get("calibrated_loco_conformal")
    if cf:  # (k + 1) / (n + 1) <= 5% on the training conversations
        L[-1] += (f" With the split-conformal count on the training conversations (taus "
                  f"{', '.join(f'{k} {v}' for k, v in cf['taus'].items())}): "
                  f"{cf['rejected_cat5']}% and {cf['false_refusal_1_4']}%.")
    L += [""]
    L += table(["tau", "cat-5 refused %", "1-4 refused %", "recall@10 over 1-4"],
               [[x["tau"], x["rejected_cat5"], x["false_refusal_1_4"], x["recall@10_1_4"]]
                for x in a["curve"]])
    return L


def verify_section(v: dict) -> list[str]:
    L = ["## Second rejection stage: `recall --verify` (same run, `--verify`)", ""]
    L += [f"What: {v['what']}; the model reads the top {v['memories_shown']} memories "
          f"('speaker: text') and the query. {v['checked']} queries checked (every query the "
          f"gate let through); added latency per query p50 {fmt(v['latency_ms_p50'])} ms, "
          f"p90 {fmt(v['latency_ms_p90'])} ms (packaged SmolLM2-135M, 2 threads, shared "
          "machine).", ""]
    cal, lo = v["calibrated_in_sample"], v.get("calibrated_loco")
    rows = [["gate only (no --verify)", "–", *[v["gate_only"][c] for c in
             ("rejected_cat5", "false_refusal_1_4", "recall@10_all_1_4")]],
            ["gate + verify, configured threshold", v["configured_threshold"],
             *[v["at_configured_threshold"][c] for c in
               ("rejected_cat5", "false_refusal_1_4", "recall@10_all_1_4")]],
            ["gate + verify, calibrated in-sample", round(cal["tau"], 3),
             *[cal[c] for c in ("rejected_cat5", "false_refusal_1_4", "recall@10_all_1_4")]]]
    if lo:
        taus = list(lo["tau_per_held_out_conversation"].values())
        rows.append(["gate + verify, calibrated on the other 4 conversations",
                     " / ".join(fmt(round(t, 3)) for t in taus),
                     *[lo[c] for c in ("rejected_cat5", "false_refusal_1_4",
                                       "recall@10_all_1_4")]])
    L += table(["setting", "threshold", "cat-5 rejected %", "1-4 refused %",
                "recall@10 all 1-4"], rows)
    # separation among the queries the model scored (the gate's rejections left out)
    a = np.array([q[3] for q in v["per_question"] if q[3] is not None and q[1] != 5])
    f = np.array([q[3] for q in v["per_question"] if q[3] is not None and q[1] == 5])
    auc = float(np.mean((a[:, None] > f[None, :]) + 0.5 * (a[:, None] == f[None, :])))
    quart = lambda x: " / ".join(fmt(round(float(np.quantile(x, q)), 3))  # noqa: E731
                                 for q in (0.05, 0.25, 0.5, 0.75))
    L += [f"Score separation over the {len(a) + len(f)} queries the model scored: AUC "
          f"(answerable above category 5) {auc:.3f}; log-odds quantiles q5/25/50/75 answerable "
          f"{quart(a)}, category 5 {quart(f)}. Calibration rule: {cal['rule']}.", ""]
    return L


def cons_section(r: dict) -> list[str]:
    """The same benchmark over the consolidated stores: what consolidation does to recall."""
    modes = r["modes"]
    L = ["## Consolidated stores (bench/quality/locomo_recall.py --stores cons)", ""]
    L += [f"Command: `{r['command']}` — run {r['date_utc']} UTC, load average "
          f"{r['timing']['loadavg_1m_at_start_and_end'][0]} at start. Store: "
          f"{r['setup']['store']}. `synapse` = engine defaults (semantic nodes carry activation "
          "but take no result slot); `semantic-results` = they may be returned (the default "
          "before); `episodic-only` = they neither anchor nor are returned, activation still "
          "flows through them. recall@10:", ""]
    first = ["synapse", "semantic-results", "no-semantic-results", "episodic-only", "vector",
             "bm25", "hybrid"]
    order = [m for m in first if m in modes] + sorted(m for m in modes if m not in first)
    convs = list(modes["synapse"]["as_configured"].get(
        "recall@10_all_1_4_per_conversation", {}))
    rows = []
    for m in order:
        e = modes[m]["as_configured"]
        per = e.get("recall@10_all_1_4_per_conversation", {})
        rows.append([m, *[e["recall@10"][c] for c in CATS], *[per.get(c) for c in convs]])
    L += table(["mode", *HEAD, *convs], rows)
    return L


AGENT = ["current_first", "top3", "top10", "never_rejected", "false_refusals", "as_of_top1"]
AGENT_HEAD = ["current first", "gold in top 3", "gold in top 10", "never-answered rejected",
              "false refusals", "as-of top 1"]
HALVES = {"tune": "tuned on", "tune2": "tuned on (written 2026-11-27, tuned on from then)",
          "tune3": "tuned on (written 2026-11-29, tuned on from then)",
          "tune4": "tuned on (written 2026-11-29, second set, tuned on from then)",
          "heldout": "held out", "fresh": "fresh (written after the tuning, never looked at)"}


SHARED = {"tagged": "one store for all, tagged per user", "untagged": "one store for all, no tags"}


def agent_section(a: dict, cons: dict | None, shared: list[dict]) -> list[str]:
    """Issue 17's agent-use suite: every half, every mode of one run; the consolidated stores'
    synapse rows from a second run, and every mode of the --shared runs, when given."""
    L = ["## Agent use (bench/quality/agent_use.py)", "",
         f"Command: `{a['command']}`, {a['seconds']} s. Conversations written for this project "
         "(bench/quality/agent_use/README.md); the tuned halves are what the settings were chosen "
         "on. Targets: " + ", ".join(f"{k} {v}" for k, v in a["targets"].items()) + ".", ""]

    def rows_of(run: dict, suffix: str, modes=None) -> list[list]:
        return [[f"{HALVES.get(half, half)}", mode + suffix,
                 *[r[k]["share"] if r[k]["n"] else None for k in AGENT]]
                for half, ms in run["results"].items() for mode, r in ms.items()
                if modes is None or mode in modes]

    rows = rows_of(a, "")
    if cons is not None:
        rows += rows_of(cons, ", consolidated", ("synapse",))
    def shared_label(run: dict) -> str:
        return SHARED[run["shared"]] + (", consolidated" if run.get("consolidated") else "")

    for run in shared:
        rows += rows_of(run, f", {shared_label(run)}")
    L += table(["half", "mode", *AGENT_HEAD], rows)
    if cons is not None:
        L += [f"Consolidated: `{cons['command']}`.", ""]
    for run in shared:
        L += [f"{shared_label(run).capitalize()}: `{run['command']}`, {run['seconds']} s "
              "(every conversation in one store; \"now\" one day after the last turn of all).",
              ""]
        if other := run.get("other_users_questions_rejected"):
            L += [f"{shared_label(run).capitalize()}, every other conversation's questions "
                  "asked under each conversation's tag (none of its memories answers them), "
                  "share refused: " + ", ".join(f"{HALVES.get(h, h)} {v['share']} (n {v['n']})"
                                                for h, v in other.items()) + ".", ""]
    return L


def consolidation_section(c: dict, bigger: dict | None) -> list[str]:
    """Issue 18: fresh against consolidated stores in one run, the ablations, both halves, and
    the consolidated row with a bigger extraction model."""
    L = ["## Consolidation (bench/quality/consolidation_recall.py)", "",
         f"Model `{Path(c['model']).name}`, {c['questions']} questions of "
         f"{', '.join(c['conversations'])}; {c['metric']}. Every row after `consolidated` "
         "changes one thing on the consolidated stores (the script's docstring says what).", ""]
    L += table(["row", *HEAD], [[k, *[v[x] for x in CATS]] for k, v in c["rows"].items()])
    L += ["Consolidated minus fresh: " + ", ".join(
        f"{h} {c['consolidated_minus_fresh'][x]:+.2f}" for h, x in zip(HEAD, CATS)) + ".", ""]
    rows = []
    for half, r in c["by_half"].items():
        for row in ("fresh", "consolidated"):
            rows.append([half, row, *[r[row][x] for x in CATS]])
    L += table(["conversations", "row", *HEAD], rows)
    def speed(run: dict) -> list[str]:
        built = run["consolidation"].values()
        if seeded := {b["cache_from"] for b in built if b.get("cache_from")}:
            return [f"Consolidation speed: not measured here (the extraction cache of "
                    f"{', '.join(sorted(seeded))} was reused); bench/speed/extract_bench.py "
                    f"measures the model.", ""]
        tps = [b["turns_per_s"] for b in built if b.get("turns_per_s")]
        return [f"Consolidation speed (when the stores were built, 2 shared cores): "
                f"{min(tps)}-{max(tps)} turns/s.", ""] if tps else []

    L += speed(c)
    if bigger is not None:
        L += [f"With `{Path(bigger['model']).name}` (tag {bigger['tag']}):", ""]
        L += table(["row", *HEAD], [[k, *[v[x] for x in CATS]] for k, v in bigger["rows"].items()])
        L += speed(bigger)
    return L


def noise_section(n: dict) -> list[str]:
    p = n["protocol"]
    where = "their own session" if "of their own" in p["schedule"] else "the turns' session"
    L = [f"## Noise robustness: goal threshold {p['goal_threshold']}, distractors in {where} "
         "(bench/quality/locomo_noise.py, seed 003's clean-vs-noisy protocol)", ""]
    L += [f"Command: `{n['command']}` — run {n['date_utc']} UTC, load average "
          f"{n['timing']['loadavg_1m_at_start_and_end'][0]} at start, {n['timing']['total_s']} s. "
          f"Conversations {', '.join(n['conversations'])}; questions {n['questions_scored']}.",
          ""]
    L += [f"- schedule: {p['schedule']}"]
    L += [f"- source `{k}`: {v}" for k, v in p["sources"].items()]
    L += [f"- goal gating (`ingest --goal`, threshold {p['goal_threshold']}): \"{p['goal']}\"",
          f"- consolidation: {p['consolidation']}", f"- metric: {p['metric']}",
          f"- recall: {p['recall']}", ""]
    L += ["What ingest kept (turns and distractors, summed over the conversations):", ""]
    L += table(["store", "turns stored", "turns gated", "distractors stored",
                "distractors gated", "distractors deduplicated"],
               [[k, c.get("turn_stored", 0), c.get("turn_gated", 0), c.get("distractor_stored", 0),
                 c.get("distractor_gated", 0), c.get("distractor_duplicate", 0)]
                for k, c in n["ingest"].items()])
    conds = list(next(iter(n["modes"].values()))["no_goal"])
    rows = []
    for mode, by_goal in n["modes"].items():
        for g in ("no_goal", "goal"):
            c = by_goal[g]
            rows.append([mode, "yes" if g == "goal" else "no",
                         *[c[x]["recall@10_all_1_4"] for x in conds],
                         *[n["noise_drop"][mode][g][x] for x in conds[1:]],
                         *[c[x]["distractors_in_top10_per_query"] for x in conds[1:]]])
    L += ["Recall@10 over categories 1-4, noise drop (clean − noisy, same gating) and "
          "distractors among the top 10 per query:", ""]
    L += table(["mode", "goal", *conds, *[f"drop {x}" for x in conds[1:]],
                *[f"distractors@10 {x}" for x in conds[1:]]], rows)
    L += ["Target: noise drop of the default pipeline with gating at most half that of "
          "`vector` (no gating):", ""]
    L += table(["noise", "synapse + goal drop", "vector drop", "met"],
               [[k, t["synapse_with_goal_drop"], t["vector_drop"], "yes" if t["met"] else "no"]
                for k, t in n["target_synapse_goal_drop_at_most_half_of_vector"].items()])
    return L


def tune_section(tu: dict) -> list[str]:
    L = [f"## Sweep: `{tu.get('command', 'python bench/tune/locomo_tune.py')}`", ""]
    L += [f"Command: `{tu.get('command', 'python bench/tune/locomo_tune.py')}` — run "
          f"{tu.get('date_utc', '(date not recorded)')} UTC, load average "
          f"{tu['loadavg_1m_at_start_and_end'][0]} at start, {tu['total_s']} s. Structural "
          f"choices left out of the search: {', '.join(tu['excluded_choices']) or 'none'}.", ""]
    L += ["Signals per question computed once with the engine's own functions; activation "
          "with the engine kernel; the gate is off (it only rejects queries with no anchor). "
          "In-sample = best configuration on all 5 conversations. LOCO (within a stage) = "
          "the stage's best configuration picked on 4 conversations and scored on the 5th; "
          "nested LOCO = the whole staged selection rerun on 4 conversations and scored on "
          "the 5th, held-out questions pooled. Stores: `plain` = ingest only, `cons` = "
          "ingest then consolidate with the packaged SmolLM2-135M extractor.", ""]
    for v in tu["stages"]:
        L += [f"### Store variant `{v['variant']}` ({v['questions']} questions)", ""]
        nodes = v["nodes"]
        L += ["Records / episodes / edges per conversation: " + "; ".join(
            f"{k} {n['records']}/{n['episodic']}/{n['edges']}" for k, n in nodes.items()), ""]
        rows = [[f"baseline {k}", *[b["recall@10"][c] for c in CATS]]
                for k, b in v["baselines_all_records"].items()]
        L += ["Engine defaults and each deviation from the seed reverted alone (recall@10):",
              ""]
        rows += [[d["config"], *[d["recall@10"][c] for c in CATS]]
                 for d in v.get("defaults_ablation", [])]
        L += table(["configuration", *HEAD], rows)
        rows = []
        for s in v["stages"]:
            b, lo = s["best_in_sample"]["recall@10"], s["loco"]["recall@10"]
            rows.append([s["stage"], s["n_configs"], *[b[c] for c in CATS], lo["all_1_4"],
                         lo["1_multi-hop"]])
        L += ["Staged selection (recall@10 of each stage's in-sample best; LOCO within the "
              "stage):", ""]
        L += table(["stage", "configs", *[f"in-sample {h}" for h in HEAD], "LOCO all 1-4",
                    "LOCO multi-hop"], rows)
        pc = next((s["per_choice"] for s in v["stages"] if "per_choice" in s), [])
        if pc:
            L += ["Stage 2, one structural choice at a time on top of the stage-1 winner, each at "
                  "its best activation weight (recall@10, in-sample):", ""]
            L += table(["change", "lambda_act", *HEAD],
                       [[json.dumps(d["change"]), d["lambda_act"], *[d[c] for c in CATS]]
                        for d in pc])
        n = v["nested_loco"]["recall@10"]
        L += ["Nested leave-one-conversation-out of the whole selection (recall@10): "
              + ", ".join(f"{h} {fmt(n[c])}" for h, c in zip(HEAD, CATS)) + ".", ""]
        L += ["Selected configuration (in-sample): `" + json.dumps(v["best"]) + "`", ""]
        L += ["Structural choices that helped in stage 2: `"
              + json.dumps(v["helpful_structure_stage2"]) + "`", ""]
        rows = [[json.dumps(a["config_change"]), *[a[c] for c in CATS]]
                for a in v["ablation_of_best_in_sample"]]
        L += ["The selected configuration with one choice reverted (recall@10, in-sample):", ""]
        L += table(["change", *HEAD], rows)
    return L


def probe_section(pr: dict) -> list[str]:
    L = ["## Probe: the speaker as metadata (bench/probes/locomo_speaker_probe.py, not the engine)", ""]
    L += [f"Command: `{pr['command']}` — run {pr['date_utc']} UTC, load average "
          f"{pr['loadavg_1m_at_start_and_end'][0]} at start. {pr['questions_naming_a_speaker_pct']}% "
          "of the questions name a speaker. Dense signal = cosine to the stored 'speaker: text' "
          "(prefixed) or to the text alone (bare), plus `bonus` when the record's speaker is "
          "the one the question names; the same signal feeds vector, hybrid and synapse "
          "(engine defaults). recall@10:", ""]
    rows = []
    for r in pr["rows"]:
        rows.append([r["embedding"], r["speaker_bonus"],
                     *[r["synapse"][c] for c in CATS], r["hybrid"]["all_1_4"],
                     r["hybrid"]["1_multi-hop"], r["vector"]["all_1_4"]])
    L += table(["embedding", "bonus", *[f"synapse {h}" for h in HEAD], "hybrid all 1-4",
                "hybrid multi-hop", "vector all 1-4"], rows)
    return L


def _shown(arg: str) -> str:
    """A path inside the checkout as a relative path: nothing machine-specific in the page."""
    try:
        return str(Path(arg).resolve().relative_to(ROOT))
    except (ValueError, OSError):
        return arg


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recall", default=str(ROOT / "bench" / "out" / "locomo_recall.json"))
    p.add_argument("--tune", nargs="*", default=[str(ROOT / "bench" / "out" / "locomo_tune.json")])
    p.add_argument("--out", default=str(ROOT / "docs" / "RESULTS.md"))
    p.add_argument("--probe", default=str(ROOT / "bench" / "out" / "locomo_speaker_probe.json"))
    p.add_argument("--cons", default=str(ROOT / "bench" / "out" / "locomo_recall_cons.json"))
    p.add_argument("--agent", default=str(ROOT / "bench" / "out" / "agent_use.json"))
    p.add_argument("--agent-cons", default=str(ROOT / "bench" / "out" / "agent_use_cons.json"))
    p.add_argument("--agent-shared", nargs="*",
                   default=[str(ROOT / "bench" / "out" / f"agent_use_shared_{t}.json")
                            for t in ("tagged", "untagged", "tagged_cons")])
    p.add_argument("--consolidation",
                   default=str(ROOT / "bench" / "out" / "consolidation_recall.json"))
    p.add_argument("--consolidation-bigger",
                   default=str(ROOT / "bench" / "out" / "consolidation_recall_qwen.json"))
    p.add_argument("--noise", nargs="*",
                   default=[str(ROOT / "bench" / "out" / "locomo_noise.json")])
    args = p.parse_args()
    L = ["# Results", "",
         "Generated by `python bench/report.py results " + " ".join(map(_shown, sys.argv[1:]))
         + "` from the "
         "JSON the benchmarks printed; do not edit by hand, rerun the commands below and "
         "regenerate.", ""]
    rec = json.loads(Path(args.recall).read_text())
    noise0 = args.noise[0] if args.noise and Path(args.noise[0]).exists() else None
    L += targets_section(rec, json.loads(Path(noise0).read_text()) if noise0 else None)
    L += recall_section(rec)
    def load(path: str) -> dict | None:
        return json.loads(Path(path).read_text()) if Path(path).exists() else None

    shared = [(f, load(f)) for f in args.agent_shared if Path(f).exists()]
    for f, run in shared:
        if run.get("shared") not in SHARED:
            raise SystemExit(f"--agent-shared {f}: not the output of agent_use.py --shared")
    if Path(args.agent).exists():
        L += agent_section(load(args.agent), load(args.agent_cons), [r for _, r in shared])
    if Path(args.consolidation).exists():
        L += consolidation_section(load(args.consolidation), load(args.consolidation_bigger))
    if Path(args.cons).exists():
        L += cons_section(json.loads(Path(args.cons).read_text()))
    for n in args.noise:
        if Path(n).exists():
            L += noise_section(json.loads(Path(n).read_text()))
    for t in args.tune:
        if Path(t).exists():
            L += tune_section(json.loads(Path(t).read_text()))
    if Path(args.probe).exists():
        L += probe_section(json.loads(Path(args.probe).read_text()))
    Path(args.out).write_text("\n".join(L).rstrip() + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
