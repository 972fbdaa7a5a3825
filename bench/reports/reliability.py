"""Run the reliability suite and write docs/RELIABILITY.md from what it reports (issue 9).

Every number in the page comes from a run made by this script; nothing is typed by hand.

    python bench/report.py reliability                      # defaults: ~6-8 min on 2 cores
    python bench/report.py reliability --trials 500 --concurrency 120 --fuzz-seconds 600

Scenarios, in order:
- crash torture: `bench/reliability/torture.py --trials N` (SIGKILL at random moments);
- concurrency: `bench/reliability/torture.py --concurrency SECONDS` (4 writers, 4 readers, consolidation
  and compaction at once);
- hostile files: `bench/reliability/fuzz.py --target each --seconds S` (atheris, every reader and the
  open/verify/recall path) and `bench/reliability/fuzz.py --replay tests/fuzz_regressions`;
- disk full, hostile input, permissions: `pytest tests/test_diskfull.py tests/test_hostile.py
  tests/test_permissions.py --junitxml=...`, counted from the JUnit XML.

A scenario that cannot run (timeout, missing tool) gets a row that says so. The raw outputs go
to bench/out/reliability.json. The regression inputs and the bugs list come from
tests/fuzz_regressions/ and `git log` (commit subjects quoted, nothing added).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
REGRESSIONS = ROOT / "tests" / "fuzz_regressions"
PYTEST_FILES = ["tests/test_diskfull.py", "tests/test_hostile.py", "tests/test_permissions.py"]
# Commits of the reliability work (issue 9), recognised by their subject prefix.
RELIABILITY_PREFIXES = ("torture:", "fuzz:", "disk full:", "hostile input:", "permissions:")
LOSS = re.compile(r"acknowledged record|record \d+: text|is missing|trashed|was pruned")

WHAT = {
    "crash": "SIGKILL at a random moment of ingest / consolidate / recall / prune --compact / "
             "migrate; after each: verify passes, every acknowledged record present with its exact "
             "text, no duplicate episode / node / edge, recall answers",
    "concurrency": "4 writers + 4 readers + consolidation + compaction at once; same checks, no "
                   "reader error, lock waits below --lock-timeout",
    "fuzz": "coverage-guided (atheris) bytes into every store_format reader and open+verify+"
            "recall over a real store with one file replaced: only typed StoreError allowed; "
            "and into the input side (NDJSON, text and document input through payload and "
            "output, query lines, tags, times, config.toml and SYNAPSE_* variables): only "
            "InputError / UserError / ConfigError allowed",
    "replay": "saved fuzz findings replayed in-process: only typed StoreError allowed",
    "filters": "random stores (tags from a pool of 43, types, times, semantic nodes, graph), "
               "random tag / type / time filters, every recall mode: no result, and no record "
               "on an --explain path of a tag or time filter, outside the filter",
    "test_ingest_on_a_full_disk": "ENOSPC during ingest: exit 74, one line, store byte-for-byte "
                                  "unchanged, same command works with space again",
    "test_consolidate_on_a_full_disk": "ENOSPC during consolidate (SmolLM2): exit 74, one line, "
                                       "store byte-for-byte unchanged, works with space again",
    "test_prune_compact_on_a_full_disk": "ENOSPC during prune --compact: exit 74, one line, store "
                                         "byte-for-byte unchanged, works with space again",
    "test_migrate_on_a_full_disk": "ENOSPC during migrate: exit 74, one line, store "
                                   "byte-for-byte unchanged, no .migrating/.tmp left",
    "hostile": "NaN/Infinity, invalid UTF-8, lone surrogates, deep nesting, NUL, 50 MB lines, "
               "control characters, injection text through SmolLM2, no write outside the store",
    "permissions": "0600 files in a 0700 directory under umask 0; another user's store/file and "
                   "planted symlinks refused with exit 77, nothing changed",
}


def run(argv: list[str], timeout: float) -> dict:
    """Run a command; returns rc, stdout, stderr, seconds (rc None: timed out / not startable)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, e.stdout or "", f"timed out after {timeout:.0f} s"
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
    except OSError as e:
        rc, out, err = None, "", f"could not start: {e}"
    return {"argv": argv, "rc": rc, "stdout": out, "stderr": err,
            "seconds": round(time.monotonic() - t0, 1)}


def rel(argv: list[str]) -> str:
    """The command as a user would type it from the repository root."""
    return shlex.join(["python" if a == PY else os.path.relpath(a, ROOT)
                       if a.startswith(str(ROOT)) else a for a in argv])


def parse_json(text: str) -> dict | None:
    try:
        return json.loads(text[text.index("{"):])
    except ValueError:
        return None


def not_run(name: str, what: str, r: dict, why: str) -> dict:
    return {"scenario": name, "what": what, "runs": "not run", "kills": "–",
            "failures": f"could not run: {why}", "lost": "not established",
            "seconds": r.get("seconds"), "command": rel(r["argv"]) if r.get("argv") else "",
            "details": [r.get("stderr", "")[-1500:]]}


def lost_cell(problems: list[str]) -> str:
    hits = [p for p in problems if LOSS.search(p)]
    return f"**yes** ({len(hits)} records)" if hits else "no"


# --- scenarios -------------------------------------------------------------------------------


def crash(a, work: Path) -> dict:
    argv = [PY, str(ROOT / "bench/reliability/torture.py"), "--trials", str(a.trials), "--seed", str(a.seed)]
    r = run(argv, a.trials * 30 + 120)
    o = parse_json(r["stdout"])
    if o is None:
        return not_run("crash (kill -9)", WHAT["crash"], r, r["stderr"].strip()[-200:] or "no JSON")
    problems = [p for f in o["failures"] for p in f["problems"]]
    ops = ", ".join(f"{k} {v}" for k, v in sorted(o["ops"].items()))
    killed = ", ".join(f"{k} {v}" for k, v in sorted(o["killed"].items()) if v)
    return {"scenario": "crash (kill -9)", "what": WHAT["crash"],
            "runs": f"{o['trials']} trials ({ops}); {o['acknowledged_records']} records acknowledged",
            "kills": f"{o['kills_total']} ({killed})",
            "failures": str(len(o["failures"])) + (" (torture stops at the first)"
                                                  if o["failures"] else ""),
            "lost": lost_cell(problems), "seconds": r["seconds"], "command": rel(argv),
            "details": [json.dumps(f) for f in o["failures"]], "raw": o}


def concurrency(a, work: Path) -> dict:
    argv = [PY, str(ROOT / "bench/reliability/torture.py"), "--concurrency", str(a.concurrency),
            "--seed", str(a.seed)]
    r = run(argv, a.concurrency * 4 + 300)
    o = parse_json(r["stdout"])
    if o is None:
        return not_run("concurrency", WHAT["concurrency"], r,
                       r["stderr"].strip()[-200:] or "no JSON")
    cmds = ", ".join(f"{k} {v}" for k, v in sorted(o["commands"].items()))
    n = len(o["problems"]) + len(o["reader_errors"])
    return {"scenario": "concurrency", "what": WHAT["concurrency"],
            "runs": f"{o['seconds']} s, {sum(o['commands'].values())} commands ({cmds}); "
                    f"{o['lock_acquisitions']} lock acquisitions, longest wait "
                    f"{o['max_lock_wait_s']} s (timeout {o['lock_timeout_s']:.0f} s)",
            "kills": "0 (none intended)", "failures": str(n), "lost": lost_cell(o["problems"]),
            "seconds": r["seconds"], "command": rel(argv),
            "details": o["problems"] + o["reader_errors"], "raw": o}


def fuzz(a, work: Path) -> dict:
    argv = [PY, str(ROOT / "bench/reliability/fuzz.py"), "--target", "each", "--seconds",
            str(a.fuzz_seconds), "--work", str(work / "fuzz")]
    r = run(argv, 12 * (a.fuzz_seconds + 180) + 300)
    o = parse_json(r["stdout"])
    if o is None:
        return not_run("hostile files: fuzz", WHAT["fuzz"], r,
                       r["stderr"].strip()[-200:] or "no JSON")
    res = o["results"]
    execs = sum(x.get("execs", 0) for x in res)
    found = [f for x in res for f in x["findings"]]
    bad_rc = [x["target"] for x in res if x["rc"] and not x["findings"]]
    cell = str(len(found)) + (f" ({', '.join(found)})" if found else "")
    if bad_rc:
        cell += f"; fuzzer exited non-zero without a finding: {', '.join(bad_rc)}"
    argv[argv.index("--work") : argv.index("--work") + 2] = []  # a temp dir: not part of it
    return {"scenario": "hostile files: fuzz", "what": WHAT["fuzz"],
            "runs": f"{execs:,} executions over {len(res)} targets "
                    f"({a.fuzz_seconds:g} s each)",
            "kills": "–", "failures": cell, "lost": "n/a (readers only, nothing is written)",
            "seconds": r["seconds"], "command": rel(argv),
            "details": [x["log_tail"][-1500:] for x in res if x["log_tail"]], "raw": o,
            "per_target": res}


def replay(a, work: Path) -> dict:
    argv = [PY, str(ROOT / "bench/reliability/fuzz.py"), "--replay", str(REGRESSIONS)]
    r = run(argv + ["--work", str(work / "replay")], 600)
    o = parse_json(r["stdout"])
    if o is None:
        return not_run("hostile files: saved findings", WHAT["replay"], r,
                       r["stderr"].strip()[-200:] or "no JSON")
    return {"scenario": "hostile files: saved findings", "what": WHAT["replay"],
            "runs": f"{o['replayed']} inputs (tests/fuzz_regressions/)", "kills": "–",
            "failures": str(len(o["failures"])), "lost": "n/a (readers only)",
            "seconds": r["seconds"], "command": rel(argv),
            "details": [f"{k}: {v}" for k, v in o["failures"].items()], "raw": o}


def filters(a, work: Path) -> dict:
    argv = [PY, str(ROOT / "bench/reliability/filter_leaks.py"), "--stores", "20", "--queries", "40"]
    r = run(argv, 3600)
    o = parse_json(r["stdout"])
    if o is None:
        return not_run("filter exactness", WHAT["filters"], r,
                       r["stderr"].strip()[-200:] or "no JSON")
    return {"scenario": "filter exactness", "what": WHAT["filters"],
            "runs": f"{o['stores']} stores, {o['queries']:,} filtered queries over "
                    f"{len(o['modes'])} modes",
            "kills": "–", "failures": str(o["leaks"]), "lost": "n/a (readers only)",
            "seconds": r["seconds"], "command": rel(argv), "details": o["examples"], "raw": o}


def enospc_levels() -> dict[str, int]:
    """How many free-space levels each disk-full test tries (the `frees` it passes)."""
    tree = ast.parse((ROOT / "tests/test_diskfull.py").read_text())
    default = None
    out = {}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "expect_disk_full":
            default = len(ast.literal_eval(fn.args.defaults[-1]))
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "expect_disk_full"):
                    kw = {k.arg: k.value for k in node.keywords}
                    out[fn.name] = (len(ast.literal_eval(kw["frees"])) if "frees" in kw
                                    else default)
    return out


def pytest_rows(a, work: Path) -> list[dict]:
    xml = work / "junit.xml"
    argv = [PY, "-m", "pytest", "-q", *PYTEST_FILES, "-o", "junit_logging=system-out",
            f"--junitxml={xml}"]
    r = run(argv, 1800)
    shown = rel(argv[:-1] + ["--junitxml=reliability-junit.xml"])
    if not xml.exists():
        return [not_run(name, WHAT[key], r, r["stderr"].strip()[-200:] or "no JUnit XML")
                for name, key in (("disk full", "test_ingest_on_a_full_disk"),
                                  ("hostile input", "hostile"), ("permissions", "permissions"))]
    cases = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        bad = [c for c in tc if c.tag in ("failure", "error")]
        skipped = [c for c in tc if c.tag == "skipped"]
        out = (tc.findtext("system-out") or "")
        cases.append({"file": tc.get("classname", "").split(".")[-1], "name": tc.get("name"),
                      "seconds": float(tc.get("time", 0)), "failed": bool(bad),
                      "skipped": bool(skipped),
                      "message": (bad or skipped)[0].get("message", "")[:400]
                      if (bad or skipped) else "", "stdout": out})
    rows = []
    levels = enospc_levels()
    for c in (c for c in cases if c["file"] == "test_diskfull"):
        how = "tmpfs" if "via tmpfs" in c["stdout"] else (
            "write injection" if "via write injection" in c["stdout"] else "?")
        cmd = c["name"].removeprefix("test_").removesuffix("_on_a_full_disk").replace(
            "prune_compact", "prune --compact")
        n = levels.get(c["name"])
        rows.append(case_row(f"disk full: {cmd}", WHAT.get(c["name"], c["name"]), [c],
                             f"{n} ENOSPC runs ({how}) + 1 with space" if n else "1 test",
                             "byte-for-byte check", shown))
    for file, name, key in (("test_hostile", "hostile input", "hostile"),
                            ("test_permissions", "permissions", "permissions")):
        cs = [c for c in cases if c["file"] == file]
        rows.append(case_row(name, WHAT[key], cs, f"{len(cs)} tests", "nothing-changed check",
                             shown))
    for row in rows:
        row["pytest_seconds"] = r["seconds"]
    return rows


def case_row(name: str, what: str, cs: list[dict], runs: str, check: str, command: str) -> dict:
    if not cs:
        return {"scenario": name, "what": what, "runs": "not run", "kills": "–",
                "failures": "could not run: no test collected", "lost": "not established",
                "seconds": None, "command": command, "details": []}
    failed = [c for c in cs if c["failed"]]
    skipped = [c for c in cs if c["skipped"]]
    fails = str(len(failed)) + (f" ({len(skipped)} skipped)" if skipped else "")
    lost = ("not established (test failed)" if failed else
            f"no ({check} passed)" if not skipped else "not established (skipped)")
    return {"scenario": name, "what": what, "runs": runs, "kills": "–", "failures": fails,
            "lost": lost, "seconds": round(sum(c["seconds"] for c in cs), 1),
            "command": command,
            "details": [f"{c['name']}: {c['message']}" for c in failed + skipped]}


# --- git-derived sections --------------------------------------------------------------------


def git(*args) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout


def regression_section(replayed: dict | None) -> list[str]:
    files = sorted(x for x in git("ls-files", "tests/fuzz_regressions").split() if x)
    L = ["## Crashing inputs kept as regressions", "",
         "Each file in `tests/fuzz_regressions/` is an input the fuzzer found; "
         "`tests/test_fuzz.py::test_saved_findings_replay` replays every one in CI "
         "(`python bench/reliability/fuzz.py --replay tests/fuzz_regressions`). The first word of the file "
         "name is the fuzz target, the rest names the finding. What it found is quoted from the "
         "commit that added it; \"fixed in\" is quoted from that commit too.", ""]
    fails = (replayed or {}).get("failures", {})
    for f in files:
        name = Path(f).name
        target, slug = name.split("-")[0], name.rsplit("-", 1)[0].split("-", 1)[1]
        added = git("log", "--diff-filter=A", "--format=%h%x00%ad%x00%s", "--date=short",
                    "--", f).strip().splitlines()
        h, date, subj = added[-1].split("\0") if added else ("?", "?", "")
        clause = match_clause(subj, slug)
        L.append(f"- `{name}` ({(ROOT / f).stat().st_size:,} bytes; target `{target}`): "
                 f"added in {h} ({date}).")
        L.append(f"  - Found (commit {h}): \"{clause}\"" if clause else
                 f"  - The adding commit does not say what it found.")
        fixed = re.search(r"fixed in ([0-9a-f]{7,40})", clause or "")
        if fixed:
            s = git("log", "-1", "--format=%s", fixed.group(1)).strip()
            fix = re.search(r"Fixes found: (.*)", s)
            L.append(f"  - Fixed in {fixed.group(1)}: \"{s.split(':')[0]}: … "
                     f"{shorten_fix(fix.group(1) if fix else s, slug)}\"")
        else:
            L.append("  - No product fix named: the commit calls it a harness misuse, not a bug "
                     "of synapse." if clause and "harness" in clause else
                     "  - No fixing commit named in the log.")
        status = ("still fails: " + fails[name]) if name in fails else (
            "replays clean now (only typed StoreError)" if replayed else "not replayed in this run")
        L.append(f"  - Regression test: `tests/test_fuzz.py::test_saved_findings_replay`; {status}.")
    return L + [""]


def match_clause(subject: str, slug: str) -> str | None:
    """The clause of the subject's 'Findings kept:' list that shares most words with `slug`."""
    m = re.search(r"Findings kept: (.*)", subject)
    if not m:
        return None
    words = set(re.split(r"[-_]", slug.lower()))
    clauses = [c.strip() for c in m.group(1).split(";")]
    norm = lambda c: set(re.findall(r"[a-z]+", c.lower().replace("edge-log", "edgelog")))  # noqa: E731
    best = max(clauses, key=lambda c: len(words & norm(c)))
    return best if words & norm(best) else None


def shorten_fix(fixes: str, slug: str) -> str:
    """The part of a 'Fixes found' list about this finding (split on ';'), best word overlap."""
    words = set(re.split(r"[-_]", slug.lower()))
    parts = [p.strip() for p in fixes.split(";")]
    return max(parts, key=lambda p: len(words & set(re.findall(r"[a-z]+", p.lower()))))


def bugs_section() -> list[str]:
    L = ["## Bugs found by the suite", "",
         "Subjects of the reliability commits (`git log`, subject prefixes "
         + ", ".join(f"`{p}`" for p in RELIABILITY_PREFIXES)
         + "), quoted as written; each names what was broken and how it was fixed.", ""]
    for line in git("log", "--reverse", "--format=%h%x00%ad%x00%s", "--date=short").splitlines():
        h, date, subj = line.split("\0")
        if subj.startswith(RELIABILITY_PREFIXES):
            L.append(f"- {h} ({date}): \"{subj}\"")
    return L + [""]


# --- the page --------------------------------------------------------------------------------


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{os.cpu_count()} CPUs ({cpu}){mem}, {platform.system()} {platform.release()} "
            f"{platform.machine()}, Python {platform.python_version()}")


def cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def write_page(out: Path, rows: list[dict], meta: dict, replayed: dict | None) -> None:
    L = ["# Reliability", "",
         f"Generated by `{meta['command']}` (bench/report.py reliability); do not edit by hand, "
         "rerun it. Every number below is from that run; the regression and bug sections are "
         "taken from `tests/fuzz_regressions/` and `git log`.", "",
         f"- Date: {meta['date']} UTC, {meta['total_s']} s in all",
         f"- Machine: {meta['machine']}",
         f"- Load average (1/5/15 min): {meta['load_start']} at start, {meta['load_end']} at the "
         "end (a shared machine: other jobs may have run at the same time)",
         f"- Commit: {meta['commit']}", "",
         "What each guarantee means, and where it is stated: README, section Reliability.", "",
         "| scenario | what is checked | trials / executions run | kills | failures found "
         "| anything lost | time s |",
         "|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append("| " + " | ".join(cell(r[k]) if r.get(k) is not None else "–" for k in
                                    ("scenario", "what", "runs", "kills", "failures", "lost",
                                     "seconds")) + " |")
    L += ["", "\"anything lost\": for crash and concurrency, whether an acknowledged record went "
          "missing, was trashed or came back with other text (the checks listed); for disk full "
          "and permissions, whether the store changed (the tests compare it byte for byte / by "
          "digest). Readers-only scenarios cannot lose anything.", "",
          "### Commands", ""]
    seen = []
    for r in rows:
        if r["command"] and r["command"] not in seen:
            seen.append(r["command"])
            L.append(f"- `{r['command']}`")
    L.append("")
    fz = next((r for r in rows if r.get("per_target")), None)
    if fz:
        L += ["### Fuzz targets", "", "| target | executions | seconds | peak RSS MB | exit | findings |",
              "|---|---|---|---|---|---|"]
        for x in fz["per_target"]:
            L.append(f"| {x['target']} | {x.get('execs', '?'):,} | {x['seconds']} | "
                     f"{x.get('peak_rss_mb', '?')} | {x['rc']} | "
                     f"{', '.join(x['findings']) or 'none'} |")
        L += ["", "A finding is copied to `tests/fuzz_regressions/` by bench/reliability/fuzz.py.", ""]
    det = [(r["scenario"], d) for r in rows for d in r.get("details", []) if d]
    if det:
        L += ["### Failure details", ""]
        L += [f"- {s}: `{cell(d)[:1500]}`" for s, d in det]
        L.append("")
    L += regression_section(replayed)
    L += bugs_section()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L))


def loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=60, help="crash-torture trials (60)")
    ap.add_argument("--concurrency", type=float, default=30, metavar="SECONDS",
                    help="concurrency run length (30)")
    ap.add_argument("--fuzz-seconds", type=float, default=15, help="fuzz time per target (15)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["crash", "concurrency", "fuzz", "replay", "filters", "pytest"],
                    help="leave scenarios out (their rows say so)")
    ap.add_argument("--out", default=str(ROOT / "docs/RELIABILITY.md"))
    ap.add_argument("--json", default=str(ROOT / "bench/out/reliability.json"))
    a = ap.parse_args()
    cmd = "python bench/report.py reliability" + ("" if len(sys.argv) == 1 else " " + shlex.join(
        sys.argv[1:]))
    t0, load0 = time.monotonic(), loadavg()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    work = Path(tempfile.mkdtemp(prefix="synapse-reliability-"))
    rows, replayed = [], None
    steps = [("crash", crash), ("concurrency", concurrency), ("fuzz", fuzz), ("replay", replay),
             ("filters", filters), ("pytest", pytest_rows)]
    for key, fn in steps:
        print(f"[{time.monotonic() - t0:6.0f} s] {key} ...", file=sys.stderr, flush=True)
        if key in a.skip:
            names = {"crash": ["crash (kill -9)"], "concurrency": ["concurrency"],
                     "fuzz": ["hostile files: fuzz"], "replay": ["hostile files: saved findings"],
                     "filters": ["filter exactness"],
                     "pytest": ["disk full", "hostile input", "permissions"]}[key]
            rows += [{"scenario": n, "what": "", "runs": "not run", "kills": "–",
                      "failures": "not run (--skip)", "lost": "not established",
                      "seconds": None, "command": "", "details": []} for n in names]
            continue
        try:
            got = fn(a, work)
        except Exception as exc:  # noqa: BLE001 - the row says the scenario could not run
            got = {"scenario": key, "what": "", "runs": "not run", "kills": "–",
                   "failures": f"could not run: {type(exc).__name__}: {exc}"[:300],
                   "lost": "not established", "seconds": None, "command": "", "details": []}
        got = got if isinstance(got, list) else [got]
        if key == "replay":
            replayed = got[0].get("raw")
        rows += got
        for g in got:
            print(f"    {g['scenario']}: {g['runs']}; failures {g['failures']}; lost {g['lost']}",
                  file=sys.stderr, flush=True)
    meta = {"command": cmd, "date": date, "total_s": round(time.monotonic() - t0, 1),
            "machine": machine(), "load_start": load0, "load_end": loadavg(),
            "commit": git("log", "-1", "--format=%h %s").strip()[:100]}
    write_page(Path(a.out), rows, meta, replayed)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    print(f"wrote {a.out} and {a.json}", file=sys.stderr)
    bad = any(r["failures"] not in ("0",) for r in rows)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
