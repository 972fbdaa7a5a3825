"""Issue 10's evaluation in one command: LoCoMo recall on fresh and on consolidated stores, the
gate, the noise protocol, then docs/RESULTS.md.  Prints one JSON object.

    python bench/quality/evaluate.py [--data ../shared/data] [--verify]

Steps (each a benchmark of its own, run as a subprocess; each JSON also kept in bench/out/):
  1. tune/locomo_build.py --consolidate   ingest + consolidate every conversation with the default
                                          local model (cached in bench/out/locomo_stores: a
                                          rerun on the same data costs nothing);
  2. quality/locomo_recall.py [--verify]  fresh stores: every mode, ablation and baseline, gate;
  3. quality/locomo_recall.py --stores cons  the same over the consolidated stores;
  4. quality/locomo_noise.py              seed 003's clean-vs-noisy protocol;
  5. report.py results                    docs/RESULTS.md from those files.
Deterministic: fixed seeds, cached extraction, one query vector per question.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out"


def step(name: str, args: list[str], out: Path | None) -> dict | None:
    t = time.perf_counter()
    print(f"[{name}] {' '.join(args)}", file=sys.stderr, flush=True)
    p = subprocess.run([sys.executable, str(ROOT / "bench" / args[0]), *args[1:]],
                       stdout=subprocess.PIPE, text=True)
    if p.returncode:
        raise SystemExit(f"{name}: {args[0]} exited {p.returncode}")
    print(f"[{name}] {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    if out is None:
        return None
    out.write_text(p.stdout)
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="LoCoMo-format data (default: each benchmark's, "
                                   "../shared/data)")
    ap.add_argument("--verify", action="store_true", help="also run recall --verify's stage "
                                                          "(one model call per query)")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    data = ["--data", a.data] if a.data else []
    t = time.perf_counter()
    result = {
        "benchmark": "evaluate",
        "build": step("build", ["tune/locomo_build.py", "--consolidate", *data],
                      OUT / "locomo_build.json"),
        "recall": step("recall", ["quality/locomo_recall.py", *data, *(["--verify"] if a.verify else [])],
                       OUT / "locomo_recall.json"),
        "recall_consolidated": step("recall cons", ["quality/locomo_recall.py", "--stores", "cons", *data],
                                    OUT / "locomo_recall_cons.json"),
        "noise": step("noise", ["quality/locomo_noise.py", *data], OUT / "locomo_noise.json"),
    }
    step("results", ["report.py", "results", "--noise", str(OUT / "locomo_noise.json")], None)
    result["total_s"] = round(time.perf_counter() - t, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
