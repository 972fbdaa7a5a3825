"""Write docs/SPEED.md from the JSON the speed benchmarks printed.

    python bench/speed/recall_speed.py --records 10000,100000,1000000 > bench/out/recall_speed.json
    python bench/speed/ingest_bench.py > bench/out/ingest_bench.json
    python bench/speed/kernel_bench.py > bench/out/kernel_bench.json
    python bench/speed/synaptic_speed.py      # writes bench/out/synaptic_speed.json
    python bench/report.py speed            # reads those four, writes docs/SPEED.md

Only what the JSON holds is printed; a missing file is said to be missing.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def recall_section(r: dict) -> list[str]:
    out = ["## Recall (`bench/speed/recall_speed.py`)", "",
           f"Synthetic stores (random unit vectors, temporal chains, Zipf BM25 texts), "
           f"{r['cpus']} CPUs, load average {r['loadavg_1m_at_start']} at the start and "
           f"{r['loadavg_1m_at_end']} at the end. Warm = store open, model loaded, "
           f"per-snapshot caches filled by a first query; p50 over the queries of the run. "
           f"These stores hold no semantic nodes, so `ecphory` answers by its direct chunk "
           f"search there; see the clustered store below for it with engrams.", "",
           "| records | mode | p50 ms, embedding excluded | p90 | p50 ms, embedding included |",
           "|---|---|---|---|---|"]
    for n, e in r["sizes"].items():
        for mode, w in e["warm_recall"].items():
            out.append(f"| {int(n):,} | {mode} | {w['p50_ms_embedding_excluded']} | "
                       f"{w['p90_ms_embedding_excluded']} | "
                       f"{w.get('p50_ms_embedding_included', '')} |")
    out += ["", "Stages of the default mode (mean ms per query):", "",
            "| records | " + " | ".join(next(iter(r["sizes"].values()))["synapse_stage_ms_mean"])
            + " |", "|---|" + "---|" * len(next(iter(r["sizes"].values()))["synapse_stage_ms_mean"])]
    for n, e in r["sizes"].items():
        out.append(f"| {int(n):,} | " + " | ".join(str(v) for v in e["synapse_stage_ms_mean"].values())
                   + " |")
    out += ["", "Header scan against a numpy copy of the same bytes (same run, median); warm = "
            "as recall runs it (norms cached per snapshot), first = a snapshot's first query "
            "(norms computed):", "",
            "| records | scan GB/s warm | scan GB/s first | copy GB/s | warm / copy | first / copy |",
            "|---|---|---|---|---|---|"]
    for n, e in r["sizes"].items():
        s = e["scan_vs_copy"]
        out.append(f"| {int(n):,} | {s['scan_gbps_median']} | {s.get('scan_first_gbps_median')} | "
                   f"{s['copy_gbps_median']} | {s['scan_over_copy_median']} | "
                   f"{s.get('scan_first_over_copy_median')} |")
    if "cold_cli" in r:
        c = r["cold_cli"]
        out += ["", f"Cold `synapse recall` in a fresh process on a {c['store_records']:,}-record "
                f"store: median {c['synapse_recall']['median_s']} s (no touch: "
                f"{c['synapse_recall_no_touch']['median_s']} s; `python -c pass` "
                f"{c['python_c_pass']['median_s']} s, `synapse --version` "
                f"{c['synapse_version']['median_s']} s, {c['runs']} runs)."]
    return out + [""]


def ingest_section(i: dict) -> list[str]:
    b = i["batch"]
    out = ["## Ingest (`bench/speed/ingest_bench.py`)", "",
           f"The {i['turns']} turns of the five LoCoMo dev conversations, ingested into a new store "
           "(embedding, BM25, edges, fsync, commit) and, in the same run, encoded by "
           "sentence-transformers itself; interleaved rounds.", "",
           "| round | synapse ingest turns/s | sentence-transformers texts/s | ratio | load |",
           "|---|---|---|---|---|"]
    for k, x in enumerate(b["rounds"]):
        out.append(f"| {k} | {x['synapse_ingest_turns_per_s']} | "
                   f"{x['sentence_transformers_texts_per_s']} | {x['ratio']} | {x['loadavg_1m']} |")
    c = i["cold"]
    out += ["", f"Median ratio {b['ratio_median']}. Fresh processes on a {c['store_records']:,}-record "
            f"store ({c['runs']} runs): ingest one item median {c['ingest_one_item_median_s']} s "
            f"(max {c['ingest_one_item_max_s']}), recall median {c['recall_median_s']} s "
            f"(max {c['recall_max_s']}); `python -c pass` {c['python_c_pass_median_s']} s, "
            f"`synapse --version` {c['synapse_version_median_s']} s.", ""]
    return out


def modes_section(m: dict) -> list[str]:
    out = ["## Recall modes on a clustered store with engrams (`bench/speed/synaptic_speed.py`)", "",
           f"{m['records']:,} records in clusters of {m['cluster']} (a document engram per "
           f"cluster, linked to its records), {m['queries']} queries (cluster centres), load "
           f"average {m['loadavg_1m_at_start']} at the start and {m['loadavg_1m_at_end']} at "
           "the end; warm, embedding excluded.", "",
           "| mode | p50 ms | p90 ms | records stimulated |", "|---|---|---|---|"]
    for mode, w in m["warm_recall_embedding_excluded"].items():
        out.append(f"| {mode} | {w['p50_ms']} | {w['p90_ms']} | "
                   f"{w.get('mean_stimulated', '')} |")
    return out + [""]


def kernel_section(k: dict) -> list[str]:
    h = k["header_scan"]
    return ["## Kernels (`bench/speed/kernel_bench.py`)", "",
            f"numba {k['numba']}, {k['threads']} threads. Header scan of {h['records']:,} "
            f"records: {h['scan_GBps']} GB/s against a numpy copy at {h['numpy_copy_GBps']} GB/s "
            f"(ratio {h['scan_over_copy_throughput']}; one thread: "
            f"{h['scan_1thread_over_copy_throughput']}); top-30: {h['top_k30_ms']} ms. "
            f"Activation on {k['graph']['nodes']:,} nodes / {k['graph']['edges']:,} edges: "
            f"{k['activation_ms']} ms; PageRank {k['pagerank_ms']} ms "
            f"({k['pagerank_iterations']} iterations). Compile from an empty cache, seconds per "
            f"module import: {k['compile_s_by_module_import']}; all kernels from the cache: "
            f"{k['cached_import_s_all_kernels']} s.", ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--md", default=str(ROOT / "docs" / "SPEED.md"))
    args = ap.parse_args()
    d = Path(args.out_dir)
    lines = ["# Speed", "", "Generated by `python bench/report.py speed` from the JSON of the "
             "benchmarks below, each run on this project's 2-core development VM; the load "
             "average says how busy it was. Reproduce with the commands in each heading.", ""]
    for name, section in (("recall_speed.json", recall_section),
                          ("ingest_bench.json", ingest_section),
                          ("synaptic_speed.json", modes_section),
                          ("kernel_bench.json", kernel_section)):
        data = load(d / name)
        lines += section(data) if data else [f"({name} missing: not run)", ""]
    Path(args.md).write_text("\n".join(lines))
    print(f"wrote {args.md}")


if __name__ == "__main__":
    main()
