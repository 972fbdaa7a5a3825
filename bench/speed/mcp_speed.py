"""`synapse mcp` speed: warm recall over MCP against the CLI's cold start, remember throughput,
and the server's resident memory, on one 10k-record store in one run. Prints JSON.

    python bench/speed/mcp_speed.py [--records 10000] [--queries 100] [--out FILE]

The store is recall_speed.py's synthetic one (random vectors, Zipf texts, temporal chains).
The server is a real `synapse mcp` subprocess driven by the MCP SDK's client over stdio; each
recall is timed at the client (JSON-RPC round trip included) and touches what it returns, as
an agent's recall does. The CLI column is `synapse recall` in a fresh process (median).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "speed"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import anyio  # noqa: E402
import numpy as np  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

import recall_speed  # noqa: E402

SYNAPSE = str(Path(sys.executable).with_name("synapse"))


def pct(xs, q):
    return round(float(np.percentile(xs, q)), 2)


def rss_mb_of_child(name: str) -> float | None:
    """Resident memory of our child process whose command line contains `name`."""
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[1]) == me and name in cmd:
            for line in (stat.parent / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    return None


def queries(n: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    words, p = recall_speed.vocabulary(rng)
    return [" ".join(rng.choice(words, size=rng.integers(2, 6), p=p)) for _ in range(n)]


async def over_mcp(store: Path, qs: list[str], remember_n: int) -> dict:
    env = dict(os.environ, SYNAPSE_HOME=str(store))
    params = StdioServerParameters(command=SYNAPSE, args=["mcp"], env=env)
    async with Client(params, read_timeout_seconds=600) as c:
        t0 = time.perf_counter()
        await c.call_tool("recall", {"query": qs[0], "k": 10})
        first = (time.perf_counter() - t0) * 1000
        rss_models = rss_mb_of_child("mcp")
        times = []
        for q in qs[1:]:
            t0 = time.perf_counter()
            r = await c.call_tool("recall", {"query": q, "k": 10})
            times.append((time.perf_counter() - t0) * 1000)
            assert not r.is_error, r.content[0].text
        items = [{"text": f"benchmark memory {i}: the meeting moved to room {i % 40}",
                  "speaker": "bench"} for i in range(remember_n)]
        t0 = time.perf_counter()
        for it in items[: remember_n // 2]:  # one call per memory, as an agent after each turn
            await c.call_tool("remember", {"memories": [it]})
        single = (remember_n // 2) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        await c.call_tool("remember", {"memories": items[remember_n // 2:]})
        batch = (remember_n - remember_n // 2) / (time.perf_counter() - t0)
        return {"first_recall_ms": round(first, 1),
                "warm_recall_ms": {"p50": pct(times, 50), "p95": pct(times, 95),
                                   "n": len(times)},
                "remember_per_s": {"one_per_call": round(single, 1),
                                   "batch_of_%d" % (remember_n - remember_n // 2): round(batch, 1)},
                "server_rss_mb_after_models": rss_models,
                "server_rss_mb_end": rss_mb_of_child("mcp")}


def cold_cli(store: Path, qs: list[str], runs: int) -> dict:
    env = dict(os.environ, SYNAPSE_HOME=str(store))
    times = []
    for q in qs[:runs]:
        t0 = time.perf_counter()
        subprocess.run([SYNAPSE, "recall", q, "--k", "10"], env=env, check=True,
                       capture_output=True)
        times.append((time.perf_counter() - t0) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--remember", type=int, default=100)
    ap.add_argument("--cli-runs", type=int, default=7)
    ap.add_argument("--out")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="synapse-mcp-bench-") as tmp:
        store = Path(tmp) / "store"
        recall_speed.build(store, args.records, seed=1, with_bm25=True)
        qs = queries(args.queries + 1)
        cli = cold_cli(store, qs, args.cli_runs)
        mcp = anyio.run(over_mcp, store, qs, args.remember)
    warm = mcp["warm_recall_ms"]["p50"]
    out = {"records": args.records, "cpus": os.cpu_count(),
           "load_avg_1m": round(os.getloadavg()[0], 2), "mcp": mcp, "cli_cold_recall": cli,
           "cold_over_warm": round(cli["median_ms"] / warm, 1)}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
