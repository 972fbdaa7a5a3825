"""Crash and concurrency torture for a synapse store (issue 9).

Crash torture: random sequences of ingest, consolidate, recall, prune --compact and migrate,
each run as its own process and killed with SIGKILL at a random moment (or left to finish).
After every operation the store is checked:
- `inspect verify` passes (every CRC and invariant, BM25 files and ingest index included);
- every record whose ingest was acknowledged (an NDJSON line with status `stored`) is present,
  live, with its exact text, unless a later acknowledged `prune --id N --compact` removed it;
  a record whose prune was killed may be live or gone, never damaged;
- no two live episodes have the same normalised text, no two live semantic nodes the same
  name (a document's node included: a quarter of the ingested lines are chunks of four
  documents that name each other), no two edges the same (src, dst, type);
- recall works (a reader opens the store and answers a query).

Concurrency: 4 writers (ingest), 4 readers (recall --no-touch, inspect, inspect verify), a
consolidator and a compactor on one store for a fixed time; then the same checks, plus: no
reader exited with an error, and the writer lock waits (measured inside each writer) stayed
below --lock-timeout.

    python bench/reliability/torture.py --trials 500                # crash torture, long run
    python bench/reliability/torture.py --seconds 600 --real-model  # consolidate with SmolLM2 (CLI)
    python bench/reliability/torture.py --concurrency 120           # concurrency run

Prints one JSON object. tests/test_torture.py runs both at CI size.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SYNAPSE = Path(sys.executable).with_name("synapse")
NAMES = ["Caroline", "Melanie", "Maya", "Berlin", "Dolomites", "Pixel", "Blue Bottle", "Oslo",
         "Ana", "Tokyo"]
DOCS = ["Atlas Report", "Blue Ledger", "Cedar Notes", "Delta Plan"]   # document sources
WORDS = ["hiking", "coffee", "painting", "trip", "concert", "garden", "bicycle", "library",
         "résumé", "日本語", "naïve", "🧠"]
LOCK_TIMEOUT = 30.0

# The synapse CLI, with WriterLock.acquire instrumented: each acquisition appends the seconds
# it waited to $TORTURE_LOCKLOG (one number per line). Nothing else differs from `synapse`.
PROBE = r"""
import os, sys
from store_format import lock as L
_acquire = L.WriterLock.acquire
def acquire(self):
    try:
        return _acquire(self)
    finally:
        log = os.environ.get("TORTURE_LOCKLOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{self.waited_seconds:.4f}\n")
L.WriterLock.acquire = acquire
sys.argv[0] = "synapse"
from synapse_cli.commands.main import run
run(sys.argv[1:])
"""

# Consolidation with the deterministic fake extractor (no model), as `synapse consolidate`
# would run it: StoreWriter + engine.consolidate.consolidate, one commit per window.
CONSOLIDATE = r"""
import os, sys
sys.path.insert(0, {tests!r})
from fakes_extractor import FakeExtractor
from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
from synapse_cli.engine.store import StoreWriter
from synapse_cli.models.embedder import get_embedder
e = get_embedder()
with StoreWriter.open(sys.argv[1], lock_timeout={timeout}) as w:
    r = consolidate(w, FakeExtractor(), e, ConsolidateConfig(window=3))
print("done", r.windows, flush=True)
"""


def env_for(store, lock_log: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SYNAPSE_") and k not in ("XDG_DATA_HOME", "NO_COLOR")}
    env.update(HF_HUB_OFFLINE="1", SYNAPSE_HOME=str(store),
               XDG_CONFIG_HOME=str(TESTS / "no-such-config-dir"),
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    if lock_log:
        env["TORTURE_LOCKLOG"] = lock_log
    return env


def synapse_argv(*args) -> list[str]:
    return [sys.executable, "-c", PROBE, "--lock-timeout", str(LOCK_TIMEOUT), *map(str, args)]


def consolidate_argv(store, real_model: bool) -> list[str]:
    if real_model:
        return synapse_argv("consolidate")
    return [sys.executable, "-c", CONSOLIDATE.format(tests=str(TESTS), timeout=LOCK_TIMEOUT),
            str(store)]


# --- the model of what the store must hold -----------------------------------------------------


class Expect:
    """What the store must hold: acknowledged records and the fate of pruned ones."""

    def __init__(self):
        self.acked: dict[int, str] = {}   # id -> exact text, acknowledged as stored
        self.lines: dict[int, dict] = {}  # id -> the input line that stored it
        self.gone: set[int] = set()       # acknowledged prune --compact: must be absent
        self.maybe: set[int] = set()      # prune killed: live with its text, trashed or absent
        self.counter = 0

    def live_ids(self) -> list[int]:
        return sorted(set(self.acked) - self.gone - self.maybe)


def ingest_lines(exp: Expect, rnd: random.Random, n: int, tag: str) -> list[str]:
    """n new NDJSON lines (unique texts), plus sometimes an already-stored text (must come back
    `duplicate`)."""
    lines = []
    for _ in range(n):
        exp.counter += 1
        a, b = rnd.sample(NAMES, 2)
        text = (f"{a} and {b} talked about {rnd.choice(WORDS)} number {tag}-{exp.counter} "
                f"{rnd.random():.6f}")
        if rnd.random() < 0.25:  # a document chunk naming another document (doc nodes, links)
            title, other = rnd.sample(DOCS, 2)
            lines.append({"text": f"{text}, as the {other} says", "source": title,
                          "timestamp": 1_700_000_000_000 + exp.counter * 60_000})
            continue
        lines.append({"text": text, "speaker": rnd.choice(NAMES[:3]),
                      "session": f"s{rnd.randrange(4)}",
                      "timestamp": 1_700_000_000_000 + exp.counter * 60_000})
    live = exp.live_ids()
    if live and rnd.random() < 0.3:
        # the same line again (same text, speaker and time: a duplicate, FORMAT.md 12)
        lines.insert(rnd.randrange(len(lines) + 1), exp.lines[rnd.choice(live)])
    return [json.dumps(x, ensure_ascii=False) for x in lines]


def parse_ingest(stdout: bytes, lines: list[str], exp: Expect, problems: list) -> int:
    """Record acknowledged ids; return how many were acknowledged as stored."""
    stored = 0
    for raw in stdout.splitlines():
        try:
            o = json.loads(raw)
        except ValueError:
            continue  # a line cut by the kill
        n = int(o["where"].split(":")[1])
        line = json.loads(lines[n - 1])
        text = line["text"]
        if o["status"] == "stored":
            # Storing a known text again is right only when its record is pruned or being
            # pruned (the concurrency compactor may remove it between the pick and the ingest).
            if any(t == text and i not in exp.gone and i not in exp.maybe
                   for i, t in exp.acked.items()):
                problems.append(f"text stored twice (dedup failed): {text!r} as id {o['id']}")
            exp.acked[int(o["id"])] = text
            exp.lines[int(o["id"])] = line
            stored += 1
    return stored


# --- checks ------------------------------------------------------------------------------------


def check_store(store: Path, exp: Expect, recaller_query: str | None = "Caroline hiking",
                embedder=None) -> list[str]:
    """Every invariant of the module docstring; returns the problems found (empty: healthy)."""
    import numpy as np

    from store_format import flags as fl
    from synapse_cli.engine.inputs import normalize_text
    from synapse_cli.engine.recall import Recaller
    from synapse_cli.engine.store import Store
    from synapse_cli.engine.maintenance.verify import verify

    problems = []
    rep = verify(store)
    if not rep.ok:
        return [f"verify: {p}" for p in rep.as_dict()["problems"]]
    with Store.open(store) as s:
        ids = set(int(x) for x in s.ids)
        texts, names = Counter(), Counter()
        live = {}
        for rid in sorted(ids):
            h = s.header(rid)
            if fl.is_tombstone(h.flags):
                continue
            body = s.body(rid)
            live[rid] = body["text"]
            if fl.memory_type(h.flags) == fl.MemoryType.SEMANTIC:
                names[body.get("name", "").casefold()] += 1
            else:
                texts[normalize_text(body["text"])] += 1
        for rid, text in exp.acked.items():
            if rid in exp.gone:
                if rid in ids:
                    problems.append(f"record {rid} was pruned and compacted but is present")
            elif rid in exp.maybe:
                if rid in live and live[rid] != text:
                    problems.append(f"record {rid} (prune killed) has text {live[rid]!r}")
            elif rid not in live:
                problems.append(f"acknowledged record {rid} is "
                                f"{'trashed' if rid in ids else 'missing'}")
            elif live[rid] != text:
                problems.append(f"record {rid}: text {live[rid]!r}, acknowledged {text!r}")
        problems += [f"episode text stored {c} times: {t!r}" for t, c in texts.items() if c > 1]
        problems += [f"semantic node {n!r} exists {c} times" for n, c in names.items() if c > 1]
        g = s.graph()
        src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
        dst = g.node_ids[g.indices.astype(np.intp)]
        keys = list(zip(src.tolist(), dst.tolist(), np.asarray(g.types).tolist()))
        if len(set(keys)) != len(keys):
            problems.append(f"{len(keys) - len(set(keys))} duplicate edges")
    if recaller_query:
        with Recaller(store, embedder=embedder) as r:
            res = r.recall(recaller_query, touch=False)
            if not isinstance(res.get("results"), list):
                problems.append(f"recall returned {res!r:.200}")
            for item in res["results"]:
                if item["id"] not in live:
                    problems.append(f"recall returned record {item['id']}, not a live record")
    return problems


# --- crash torture -----------------------------------------------------------------------------

OPS = {"ingest": 5, "consolidate": 2, "recall": 1, "prune": 1, "migrate": 1}
FIRST_OPS = ["ingest", "consolidate", "ingest", "recall", "prune", "ingest", "migrate"]
KILL_WINDOW = {"ingest": 1.6, "consolidate": 4.0, "recall": 2.0, "prune": 1.8, "migrate": 1.8}
DURATION: dict[str, float] = {}


def run_op(op: str, store: Path, exp: Expect, rnd: random.Random, trial: int,
           kill_p: float, real_model: bool, lock_log: str) -> dict:
    """Start `op`, maybe SIGKILL it at a random moment, update `exp` from what it acknowledged."""
    lines, target, version = None, None, None
    stdin = b""
    if op == "ingest":
        lines = ingest_lines(exp, rnd, rnd.randint(1, 25), f"t{trial}")
        argv = synapse_argv("ingest")
        stdin = ("\n".join(lines) + "\n").encode()
    elif op == "consolidate":
        argv = consolidate_argv(store, real_model)
    elif op == "recall":
        argv = synapse_argv("recall", rnd.choice(["Caroline", "hiking trip", "who went to Oslo"]),
                            "--k", "5")  # touches: a writer too
    elif op == "prune":
        live = exp.live_ids()
        if not live:
            return run_op("ingest", store, exp, rnd, trial, kill_p, real_model, lock_log)
        target = rnd.choice(live)
        argv = synapse_argv("prune", "--id", target, "--compact", "--yes", "--json")
    else:
        from store_format import manifest as mf

        current = mf.read_manifest(store, check_files=False).header_version
        version = rnd.choice([v for v in (1, 2, 3) if v != current])
        argv = synapse_argv("migrate", "--header", f"v{version}", "--yes", "--json")
    p = subprocess.Popen(argv, env=env_for(store, lock_log), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Kill somewhere inside the op's run time (learnt from its last unkilled run).
    kill_at = rnd.uniform(0.05, 1.1 * DURATION.get(op, KILL_WINDOW[op]))
    t0 = time.monotonic()
    if rnd.random() < kill_p:
        timer = threading.Timer(kill_at, lambda: p.poll() is None and p.send_signal(signal.SIGKILL))
        timer.start()
    else:
        timer = None
    out, err = p.communicate(stdin, timeout=600)
    if timer is not None:
        timer.cancel()
    killed = p.returncode == -signal.SIGKILL
    if not killed:
        DURATION[op] = time.monotonic() - t0
    problems = []
    if not killed and p.returncode != 0:
        problems.append(f"{op} exited {p.returncode}: {err.decode(errors='replace')[-800:]}")
    if op == "ingest":
        n = parse_ingest(out, lines, exp, problems)
        if not killed and p.returncode == 0 and len(out.splitlines()) != len(lines):
            problems.append(f"ingest acknowledged {len(out.splitlines())} of {len(lines)} lines")
        if killed and n:
            pass  # killed after the commit and the output: acknowledged all the same
    elif op == "prune":
        if p.returncode == 0:
            exp.gone.add(target)
        else:
            exp.maybe.add(target)
    return {"op": op, "killed": killed, "rc": p.returncode, "problems": problems}


def torture(store: Path, trials: int | None = None, seconds: float | None = None,
            seed: int = 0, kill_p: float = 0.75, real_model: bool = False,
            embedder=None, keep_failed: Path | None = None, log=None) -> dict:
    """Run crash-torture trials on `store` (created by the first ingest); returns a summary."""
    rnd = random.Random(seed)
    exp = Expect()
    lock_log = str(store.parent / f"{store.name}.locklog")
    started = time.monotonic()
    done, kills, ops, failures = 0, Counter(), Counter(), []
    if embedder is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from synapse_cli.models.embedder import get_embedder

        embedder = get_embedder()
    while True:
        if trials is not None and done >= trials:
            break
        if seconds is not None and time.monotonic() - started >= seconds:
            break
        # every operation once early (on a loaded machine the time budget may allow few
        # trials), then drawn by weight
        op = FIRST_OPS[done] if done < len(FIRST_OPS) else \
            rnd.choices(list(OPS), weights=list(OPS.values()))[0]
        r = run_op(op, store, exp, rnd, done, 0.0 if done == 0 else kill_p, real_model, lock_log)
        ops[r["op"]] += 1
        kills[r["op"]] += r["killed"]
        problems = r["problems"]
        if not problems and (store / "MANIFEST").exists():
            try:
                problems = check_store(store, exp, embedder=embedder)
            except Exception as exc:  # noqa: BLE001 - a check that crashes is a failure
                problems = [f"check raised {type(exc).__name__}: {exc}"]
        done += 1
        if log:
            log(f"trial {done}: {r['op']} killed={r['killed']} rc={r['rc']} "
                f"problems={len(problems)}")
        if problems:
            failures.append({"trial": done, "op": r["op"], "killed": r["killed"],
                             "problems": problems[:10]})
            if keep_failed is not None:
                shutil.copytree(store, keep_failed / f"trial-{done}", dirs_exist_ok=True)
            break
    waits = _read_waits(lock_log)
    return {"trials": done, "seconds": round(time.monotonic() - started, 1),
            "ops": dict(ops), "killed": dict(kills), "kills_total": sum(kills.values()),
            "acknowledged_records": len(exp.acked), "pruned": len(exp.gone),
            "prune_killed": len(exp.maybe), "max_lock_wait_s": max(waits, default=0.0),
            "failures": failures}


def _read_waits(path: str) -> list[float]:
    try:
        return [float(x) for x in Path(path).read_text().split()]
    except (OSError, ValueError):
        return []


# --- concurrency ---------------------------------------------------------------------------------


def concurrency(store: Path, seconds: float = 20.0, writers: int = 4, readers: int = 4,
                real_model: bool = False, embedder=None, seed: int = 0) -> dict:
    """Writers, readers, a consolidator and a compactor on one store for `seconds`."""
    exp = Expect()
    lock_log = str(store.parent / f"{store.name}.locklog")
    lock = threading.Lock()
    problems: list[str] = []
    counts: Counter = Counter()
    reader_errors: list[str] = []
    stop = time.monotonic() + seconds
    env = env_for(store, lock_log)

    seed_lines = ingest_lines(exp, random.Random(seed), 10, "seed")
    p = subprocess.run(synapse_argv("ingest"), env=env, input=("\n".join(seed_lines) + "\n").encode(),
                       capture_output=True)
    parse_ingest(p.stdout, seed_lines, exp, problems)

    def writer(k: int) -> None:
        rnd = random.Random(seed * 100 + k)
        while time.monotonic() < stop:
            with lock:
                lines = ingest_lines(exp, rnd, rnd.randint(1, 5), f"w{k}")
            p = subprocess.run(synapse_argv("ingest"), env=env, capture_output=True,
                               input=("\n".join(lines) + "\n").encode())
            with lock:
                counts["ingest"] += 1
                if p.returncode != 0:
                    problems.append(f"writer {k} exited {p.returncode}: {p.stderr[-400:]!r}")
                parse_ingest(p.stdout, lines, exp, problems)

    def reader(k: int) -> None:
        rnd = random.Random(seed * 100 + 50 + k)
        cmds = [("recall", "--no-touch", "Caroline trip", "--k", "5"), ("inspect", "--json"),
                ("inspect", "verify", "--json")]
        while time.monotonic() < stop:
            cmd = cmds[k % 3] if rnd.random() < 0.5 else rnd.choice(cmds)
            p = subprocess.run(synapse_argv(*cmd), env=env, capture_output=True)
            with lock:
                counts[cmd[0] if cmd[:2] != ("inspect", "verify") else "verify"] += 1
                if p.returncode != 0:
                    reader_errors.append(f"{' '.join(cmd)} exited {p.returncode}: "
                                         f"{p.stderr.decode(errors='replace')[-400:]}")
                else:
                    try:
                        for line in p.stdout.splitlines():
                            json.loads(line)
                    except ValueError:
                        reader_errors.append(f"{' '.join(cmd)}: output is not NDJSON")

    def consolidator() -> None:
        while time.monotonic() < stop:
            p = subprocess.run(consolidate_argv(store, real_model), env=env, capture_output=True)
            with lock:
                counts["consolidate"] += 1
                if p.returncode != 0:
                    problems.append(f"consolidate exited {p.returncode}: {p.stderr[-400:]!r}")
            time.sleep(0.5)

    def compactor() -> None:
        rnd = random.Random(seed + 7)
        while time.monotonic() < stop:
            time.sleep(2.0)
            with lock:
                live = exp.live_ids()
                target = rnd.choice(live) if live else None
                if target is not None:
                    exp.maybe.add(target)  # a concurrent run: settled below from the exit code
            if target is None:
                continue
            p = subprocess.run(synapse_argv("prune", "--id", target, "--compact", "--yes",
                                            "--json"), env=env, capture_output=True)
            with lock:
                counts["prune_compact"] += 1
                if p.returncode == 0:
                    exp.maybe.discard(target)
                    exp.gone.add(target)
                else:
                    problems.append(f"prune exited {p.returncode}: {p.stderr[-400:]!r}")

    threads = ([threading.Thread(target=writer, args=(k,)) for k in range(writers)]
               + [threading.Thread(target=reader, args=(k,)) for k in range(readers)]
               + [threading.Thread(target=consolidator), threading.Thread(target=compactor)])
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    problems += check_store(store, exp, embedder=embedder)
    waits = _read_waits(lock_log)
    return {"seconds": round(elapsed, 1), "commands": dict(counts),
            "acknowledged_records": len(exp.acked), "pruned": len(exp.gone),
            "lock_acquisitions": len(waits), "max_lock_wait_s": round(max(waits, default=0.0), 3),
            "lock_timeout_s": LOCK_TIMEOUT, "reader_errors": reader_errors,
            "problems": problems}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kill-p", type=float, default=0.75)
    ap.add_argument("--real-model", action="store_true",
                    help="consolidate with `synapse consolidate` (SmolLM2) instead of the fake")
    ap.add_argument("--concurrency", type=float, metavar="SECONDS",
                    help="run the concurrency scenario for SECONDS instead")
    ap.add_argument("--dir", help="work directory (kept); default a temp dir (kept on failure)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(a.dir or tempfile.mkdtemp(prefix="synapse-torture-"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    if a.concurrency:
        out = concurrency(store, a.concurrency, real_model=a.real_model, seed=a.seed)
        ok = not out["problems"] and not out["reader_errors"]
    else:
        if a.trials is None and a.seconds is None:
            a.trials = 200
        out = torture(store, a.trials, a.seconds, a.seed, a.kill_p, a.real_model,
                      keep_failed=work / "failed",
                      log=(lambda m: print(m, file=sys.stderr)) if a.verbose else None)
        ok = not out["failures"]
    out["work_dir"] = str(work)
    print(json.dumps(out, indent=1))
    if ok and not a.dir:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
