"""Extraction throughput: turns per second of the default extractor (SmolLM2-135M, 2 threads) on
windows of 5 turns; target >= 3 turns/s (<= 1.6 s per window). Prints one JSON object.

    python bench/speed/extract_bench.py                          # fixtures/demo.ndjson
    python bench/speed/extract_bench.py --data ../shared/data/locomo/locomo_dev.json --conv 0
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from synapse_cli.models.extractor import LlamaExtractor  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def load_turns(path: Path, conv: int) -> list[list[str]]:
    """Sessions (lists of "speaker: text") from NDJSON (`session` field) or LoCoMo JSON."""
    if path.suffix == ".ndjson":
        sessions: dict[str, list[str]] = {}
        for line in path.open(encoding="utf-8"):
            r = json.loads(line)
            sessions.setdefault(r.get("session", ""), []).append(
                f"{r['speaker']}: {r['text']}" if r.get("speaker") else r["text"])
        return list(sessions.values())
    c = json.loads(path.read_text("utf-8"))[conv]["conversation"]
    out, n = [], 1
    while f"session_{n}" in c:
        out.append([f"{t['speaker']}: {t['text']}" for t in c[f"session_{n}"]])
        n += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "fixtures" / "demo.ndjson")
    ap.add_argument("--conv", type=int, default=0, help="LoCoMo conversation index")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--max-windows", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=os.environ.get("SYNAPSE_MODEL"))
    ap.add_argument("--show", type=int, default=3, help="windows whose extraction to print")
    ap.add_argument("--no-salience", action="store_true", help="no salience filter (x2 selection)")
    args = ap.parse_args()

    windows = [s[i:i + args.window] for s in load_turns(args.data, args.conv)
               for i in range(0, len(s), args.window)]
    windows = windows[:args.max_windows] if args.max_windows else windows
    t = time.perf_counter()
    x = LlamaExtractor(args.model, threads=args.threads, use_salience=not args.no_salience)
    x.load()
    if x.use_salience:
        x.extract(["A: I bought a hoodie."])  # loads the embedder outside the timed windows
    load_s = time.perf_counter() - t
    per, samples, n_ent, n_rel = [], [], 0, 0
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    for k, win in enumerate(windows):
        t = time.perf_counter()
        r = x.extract(win)
        per.append(time.perf_counter() - t)
        n_ent += len(r["entities"])
        n_rel += len(r["relations"])
        if k < args.show:
            samples.append({"turns": win, "result": r})
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    turns = sum(len(w) for w in windows)
    total = sum(per)
    print(json.dumps({
        "data": str(args.data), "conv": args.conv, "model": str(x.model_path),
        "salience": x.use_salience,
        "threads": args.threads, "windows": len(windows), "turns": turns,
        "load_seconds": round(load_s, 3), "extract_seconds": round(total, 3),
        "seconds_per_window": round(total / max(1, len(windows)), 3),
        "seconds_per_window_p90": round(sorted(per)[int(0.9 * (len(per) - 1))], 3) if per else 0,
        "turns_per_second": round(turns / total, 2) if total else None,
        "entities_per_window": round(n_ent / max(1, len(windows)), 2),
        "relations_per_window": round(n_rel / max(1, len(windows)), 2),
        # Other processes on a shared machine inflate wall time; CPU seconds / threads is what
        # the same run costs on idle cores.
        "cpu_seconds": round(cpu, 3),
        "turns_per_cpu_second_per_thread": round(turns * args.threads / cpu, 2) if cpu else None,
        "loadavg_1m": os.getloadavg()[0],
        "samples": samples,
    }, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
