"""The README's walk-through and Python example run as shown.

Each `$ command` of the walk-through's ```sh blocks runs in a fresh store (SYNAPSE_HOME), from the
repository root, with the venv's `synapse` first on PATH; its output must have the shape the
README shows: as many lines, JSON objects with the same keys (recursively) and value kinds,
other lines with as many fields. Values (ids, scores, extracted names) may differ.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, cli_env

README = (ROOT / "README.md").read_text()
SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


def section(start: str, end: str) -> str:
    i = README.index(start)
    return README[i:README.index(end, i)]


def walkthrough() -> list[tuple[str, list[str]]]:
    """(command, shown output lines) in order."""
    steps: list[tuple[str, list[str]]] = []
    text = section("## A five-minute walk-through", "<!-- walkthrough:end -->")
    for block in SH_BLOCK.findall(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                assert steps, f"output before any command: {line!r}"
                steps[-1][1].append(line)
    return steps


def shape(value):
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return ["list", shape(value[0]) if value else None]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def same_list_shape(a, b) -> bool:
    """Shapes equal, an empty list matching a list of anything."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_list_shape(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return a[1] is None or b[1] is None or same_list_shape(a[1], b[1])
    return a == b


def line_shape(line: str):
    try:
        return ("json", shape(json.loads(line)))
    except ValueError:
        return ("fields", len(line.split()))


def test_walkthrough_is_parsed():
    steps = walkthrough()
    commands = " ".join(c for c, _ in steps)
    for word in ("ingest", "consolidate", "recall", "inspect", "prune"):
        assert f"synapse {word}" in commands, word
    assert sum(len(out) for _, out in steps) >= 15


@pytest.mark.skipif(shutil.which("jq") is None, reason="the walk-through pipes through jq")
def test_walkthrough_runs_as_shown(tmp_path):
    env = cli_env(tmp_path / "store")
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    for command, shown in walkthrough():
        if command.startswith(("export ", ". ", "source ")):
            continue  # the test sets the environment itself
        r = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (command, r.stderr)
        assert r.stderr == "", (command, r.stderr)  # off a terminal: silent on success
        got = r.stdout.splitlines()
        assert len(got) == len(shown), (command, got, shown)
        for g, s in zip(got, shown):
            (gk, gs), (sk, ss) = line_shape(g), line_shape(s)
            assert gk == sk, (command, g, s)
            if gk == "json":
                assert same_list_shape(gs, ss), (command, g, s)
            else:
                assert gs == ss, (command, g, s)


# Runs the README's ```python blocks in order in one interpreter, as a reader pasting them into
# one session would (a later block may use what an earlier one defined); says which block failed.
BLOCK_RUNNER = """
import json, sys, traceback
blocks = json.loads(sys.argv[1])
namespace = {"__name__": "__main__"}
for n, (line, code) in enumerate(blocks, 1):
    print(f"--- block {n}", flush=True)
    try:
        exec(compile(code, f"README.md block {n} (line {line})", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        sys.exit(f"README.md python block {n}, at line {line}, failed")
"""


def python_blocks() -> list[tuple[int, str]]:
    """(line, code) of every ```python block of the README."""
    return [(README.count("\n", 0, m.start()) + 2, m.group(1))
            for m in re.finditer(r"```python\n(.*?)```", README, re.S)]


def test_every_python_block_of_the_readme_runs(tmp_path):
    blocks = python_blocks()
    assert len(blocks) >= 2  # the API example and the Recaller
    r = subprocess.run([sys.executable, "-c", BLOCK_RUNNER, json.dumps(blocks)], cwd=tmp_path,
                       env=cli_env(tmp_path / "default-store"), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    outputs = r.stdout.split("--- block ")[1:]
    assert len(outputs) == len(blocks)
    # the API example prints up to k=3 results, one "score type text" line each
    n = next(i for i, (_, code) in enumerate(blocks) if "api.recall(" in code)
    lines = outputs[n].splitlines()[1:]
    assert 1 <= len(lines) <= 3, outputs[n]
    for line in lines:
        score, kind, text = line.split(maxsplit=2)
        float(score)
        assert kind in ("episodic", "semantic") and text
    assert (tmp_path / "memory-demo" / "MANIFEST").exists()
    # the Recaller example answers each of its questions from that store
    n = next(i for i, (_, code) in enumerate(blocks) if "Recaller(" in code)
    answers = outputs[n].splitlines()[1:]
    assert len(answers) == 2 and all(" -> ['" in a for a in answers), outputs[n]
