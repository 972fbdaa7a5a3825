"""Probe (not the engine): what if the speaker were matched as metadata instead of embedded?

    python bench/probes/locomo_speaker_probe.py [--data ../shared/data]

Ingest embeds "speaker: text". In LoCoMo nearly every question names a speaker, and MiniLM's
cosine between "What did Caroline research?" and any "Caroline: ..." turn is high, so the name
swamps the content (the turn that answers is dense rank 23 in conv-26). This probe, on the
cached plain stores of bench/tune/locomo_build.py, replaces the dense signal by
    cos(question, text alone) + w * [the record's speaker is named in the question]
for questions that name a speaker (others keep the stored cosine), and scores vector, hybrid
and synapse (engine defaults via bench/tune/locomo_tune.py, activation re-run on the new anchors)
with the "prefixed" (stored) and "bare" (text only) embeddings. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "quality"))
sys.path.insert(0, str(ROOT / "bench" / "tune"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

import locomo_tune as T  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    args = p.parse_args()
    from locomo_recall import gold_of, turns_of
    from synapse_cli.engine import graphview
    from synapse_cli.engine.store import Store
    from synapse_cli.models.embedder import get_embedder

    t0, load0 = time.perf_counter(), round(os.getloadavg()[0], 2)
    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    emb = get_embedder()
    convs = [T.load_conv(c, "plain", lambda: emb) for c in data]
    cats = np.concatenate([c.cats for c in convs])
    extra = []
    for conv, c in zip(data, convs):
        st = Store.open(T.STORES / c.sid / "plain" / "store")
        a = graphview.build(st)
        bodies = [st.body(r) for r in a.ids.tolist()]
        st.close()
        f = T.CACHE / f"{c.sid}_bare_vecs.npy"
        if not f.exists():
            np.save(f, np.asarray(emb.encode([b["text"] for b in bodies]), np.float32))
        V = np.load(f)
        V /= np.linalg.norm(V, axis=1, keepdims=True)
        Q = np.load(T.CACHE / f"{c.sid}_qvecs.npy")
        Q /= np.linalg.norm(Q, axis=1, keepdims=True)
        spk = np.array([b.get("speaker") or "" for b in bodies])
        known = {it.dia_id for it in turns_of(conv, c.sid)}
        qs = [qa["question"] for qa in conv["qa"] if int(qa["category"]) != 5
              and qa.get("evidence") and gold_of(qa, known, Counter())]
        names = sorted(set(spk) - {""})
        M = np.zeros((len(qs), c.n), np.float32)
        named = np.zeros(len(qs), bool)
        for i, q in enumerate(qs):
            hit = [n for n in names if re.search(rf"\b{re.escape(n.split()[0])}\b", q)]
            if hit:
                named[i] = True
                M[i] = np.isin(spk, hit)
        extra.append((M, named, (Q @ V.T).astype(np.float32)))
    act, fuse = T.engine_defaults()
    out = {"benchmark": "locomo_speaker_probe", "command": "python bench/probes/locomo_speaker_probe.py "
           + " ".join(sys.argv[1:]), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "questions_naming_a_speaker_pct": round(100 * float(np.mean(
               np.concatenate([e[1] for e in extra]))), 1),
           "engine_defaults": {"act": act, "fuse": fuse}, "rows": []}
    for base in ("prefixed", "bare"):
        for w in (0.0, 0.1, 0.2, 0.3, 0.5):
            cs = []
            for c, (M, named, sb) in zip(convs, extra):
                src = sb if base == "bare" else c.sim
                sim = np.where(named[:, None], src + w * M, c.sim).astype(np.float32)
                cs.append(dataclasses.replace(c, sim=sim, variant=f"probe-{base}-{w}"))
            row = {"embedding": base, "speaker_bonus": w}
            row["vector"] = T.summarise(np.concatenate(
                [T.evaluate(c, c.sim.astype(np.float64), False) for c in cs]), cats)["recall@10"]
            row["hybrid"] = T.summarise(np.concatenate(
                [T.evaluate(c, T.hybrid_scores(c)[0], False) for c in cs]), cats)["recall@10"]
            cache: dict = {}
            row["synapse"] = T.summarise(np.concatenate(
                [T.evaluate(c, T.score(c, T.activation(c, act, cache), fuse, c.pr), False)
                 for c in cs]), cats)["recall@10"]
            out["rows"].append(row)
            print(base, w, row["synapse"]["all_1_4"], row["synapse"]["1_multi-hop"],
                  row["hybrid"]["all_1_4"], file=sys.stderr, flush=True)
    out["total_s"] = round(time.perf_counter() - t0, 1)
    out["loadavg_1m_at_start_and_end"] = [load0, round(os.getloadavg()[0], 2)]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
