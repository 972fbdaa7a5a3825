"""Write the docs/ pages of measured numbers; no number in them is typed by hand.

    python bench/report.py results [...]      docs/RESULTS.md from the LoCoMo JSON (bench/out/)
    python bench/report.py speed [...]        docs/SPEED.md from the speed benchmarks' JSON
    python bench/report.py reliability [...]  runs the reliability suite, writes docs/RELIABILITY.md

`python bench/report.py NAME --help` lists each one's options. The generators are the modules
of bench/reports/ (results.py, speed.py, reliability.py); this is their one entry point.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "reports"))

REPORTS = ("results", "speed", "reliability")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in REPORTS:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    # each generator parses sys.argv and names its command in the page it writes
    sys.argv = [f"{sys.argv[0]} {argv[0]}", *argv[1:]]
    importlib.import_module(argv[0]).main()


if __name__ == "__main__":
    main()
