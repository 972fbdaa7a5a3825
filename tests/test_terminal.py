"""What a person at a terminal gets (issue 21), run through the installed `synapse` with stdout on
a pseudo-terminal: ingest's progress bar and summary, recall's readable list; in a pipe or with
--json, the JSON as before. Also: --json and -q on every command, help without `<bool>`,
hard wraps or seed jargon, bare `synapse`, two hints, and tab completion of option values."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess

import pytest
import typer

from conftest import ROOT, SYNAPSE, cli_env, read_pty, run_cli

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
DEMO = "fixtures/demo.ndjson"  # 12 lines; the README's walk-through
QUERY = "Where did Caroline go hiking last summer?"


def on_terminal(args, store, *, stderr_too: bool = True, cols: int = 100) -> tuple[int, str, str]:
    """(exit code, what the terminal showed, stderr when it was a pipe) of `synapse ARGS` run
    from the repository with stdout (and stderr, unless stderr_too is False) on a pty."""
    master, slave = pty.openpty()
    env = cli_env(store, TERM="xterm-256color", COLUMNS=str(cols), LINES="50")
    p = subprocess.Popen([str(SYNAPSE), *args], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=slave,
                         stderr=slave if stderr_too else subprocess.PIPE, env=env)
    os.close(slave)
    shown = read_pty(master, 120)
    err = p.stderr.read().decode() if p.stderr else ""
    p.wait(timeout=120)
    return p.returncode, ANSI.sub("", shown.decode(errors="replace")), err


def in_pipe(args, store) -> subprocess.CompletedProcess:
    return subprocess.run([str(SYNAPSE), *args], cwd=ROOT, env=cli_env(store),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    """The README's 12-line conversation, ingested with the real MiniLM (not consolidated)."""
    store = tmp_path_factory.mktemp("demo") / "store"
    r = in_pipe(["ingest", DEMO], store)
    assert r.returncode == 0, r.stderr
    return store


# --- ingest ------------------------------------------------------------------------------------


def test_ingest_on_a_terminal_shows_a_progress_bar_and_a_summary(tmp_path):
    rc, screen, _ = on_terminal(["ingest", DEMO], tmp_path / "s")
    assert rc == 0, screen
    assert "12/12" in screen  # the bar (rich, transient) counted the embedded items
    assert "12 items: 12 stored (ids 1-12), 0 already stored, 0 off-goal, 0 invalid" in screen
    assert f"store: {tmp_path / 's'}" in screen
    assert '"status"' not in screen  # no NDJSON for a person
    rc, screen, _ = on_terminal(["ingest", DEMO], tmp_path / "s")
    assert "12 items: 0 stored, 12 already stored" in screen


def test_ingest_in_a_pipe_and_with_json_prints_the_ndjson_as_before(tmp_path):
    r = in_pipe(["ingest", DEMO], tmp_path / "a")
    assert (r.returncode, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert len(lines) == 12
    # the README's first line, byte for byte (ids and utility are deterministic here)
    assert lines[0] == '{"id":1,"status":"stored","where":"fixtures/demo.ndjson:1","utility":0.5}'
    for n, line in enumerate(lines, 1):
        obj = json.loads(line)
        assert list(obj) == ["id", "status", "where", "utility"] and obj["id"] == n
    # --json on a terminal: the same bytes on stdout; the bar goes to stderr only
    rc, screen, err = on_terminal(["ingest", "--json", DEMO], tmp_path / "b", stderr_too=False)
    assert rc == 0 and screen.replace("\r\n", "\n") == r.stdout


# --- recall ------------------------------------------------------------------------------------


def test_recall_on_a_terminal_is_a_readable_list(demo_store):
    rc, screen, _ = on_terminal(["recall", QUERY, "--k", "3", "--no-touch"], demo_store)
    assert rc == 0, screen
    assert '"results"' not in screen and QUERY in screen
    rows = [line for line in screen.splitlines() if re.match(r"\s*[123] ", line)]
    assert len(rows) == 3, screen
    first = rows[0]
    assert "2026-06-02 18:05" in first and "Caroline" in first and "Dolomites" in first
    assert "path" not in screen
    rc, screen, _ = on_terminal(["recall", QUERY, "--k", "3", "--explain", "--no-touch"],
                                demo_store, cols=160)
    assert rc == 0 and "path" in screen
    first = next(line for line in screen.splitlines() if re.match(r"\s*1 ", line))
    assert re.search(r"Dolomites.*\s\d+( > \d+)*\s*$", first), screen  # ids of the path


def test_recall_on_a_terminal_says_no_record(demo_store):
    rc, screen, _ = on_terminal(["recall", "What is the capital of Peru?", "--no-touch"],
                                demo_store)
    assert rc == 0 and "no record" in screen and '"rejected"' not in screen


def _without_timing(line: str) -> dict:
    obj = json.loads(line)
    obj.pop("elapsed_ms")
    return obj


def test_recall_in_a_pipe_and_with_json_prints_the_json_as_before(demo_store):
    r = in_pipe(["recall", QUERY, "--k", "3", "--no-touch"], demo_store)
    assert (r.returncode, r.stderr) == (0, "")
    [line] = r.stdout.splitlines()
    obj = json.loads(line)
    assert list(obj)[:5] == ["query", "mode", "rejected", "confidence", "results"]
    assert list(obj["results"][0]) == ["id", "text", "score", "signals", "timestamp", "type",
                                       "speaker", "session"]
    rc, screen, err = on_terminal(["recall", QUERY, "--k", "3", "--no-touch", "--json"],
                                  demo_store, stderr_too=False)
    assert rc == 0 and err == ""
    assert _without_timing(screen.strip()) == _without_timing(line)


# --- flags on every command ---------------------------------------------------------------------


def _commands():
    from synapse_cli.commands.main import app

    def walk(cmd, path):
        subs = getattr(cmd, "commands", {})
        if path:
            yield path, cmd
        for name, sub in sorted(subs.items()):
            yield from walk(sub, path + [name])
    return list(walk(typer.main.get_command(app), []))


def test_every_command_takes_json_and_quiet():
    checked = 0
    for path, cmd in _commands():
        names = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {"--json", "--quiet", "-q"} <= names, (path, sorted(names))
        checked += 1
    assert checked >= 11  # ingest ... completion, inspect and its two subcommands


def test_json_and_quiet_work_where_the_issue_found_them_refused(demo_store, tmp_path):
    r = in_pipe(["ingest", "--json", "-q", DEMO], tmp_path / "s")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 12 and r.stderr == ""
    r = run_cli(["completion", "bash", "--json"])
    assert r.returncode == 0 and json.loads(r.stdout)["shell"] == "bash"
    assert "_SYNAPSE_COMPLETE" in json.loads(r.stdout)["script"]
    # -q after the command silences consolidate's note like -q before it (README: Cron)
    store = tmp_path / "c"
    assert in_pipe(["ingest", DEMO], store).returncode == 0
    loud = in_pipe(["consolidate", "--max-seconds", "0"], store)
    assert loud.returncode == 75 and "left for the next run" in loud.stderr
    for args in (["consolidate", "--max-seconds", "0", "-q"],
                 ["-q", "consolidate", "--max-seconds", "0"]):
        r = in_pipe(args, store)
        assert (r.returncode, r.stderr) == (75, ""), args
    # the flags' values still reach the command: --json prints consolidate's summary
    r = in_pipe(["consolidate", "--json", "-q"], store)
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)["left_windows"] == 0


# --- help --------------------------------------------------------------------------------------


def _help(path, cols=100) -> str:
    r = run_cli([*path, "--help"], env={"COLUMNS": str(cols)})
    assert r.returncode == 0, (path, r.stderr)
    return r.stdout


def test_help_shows_no_bool_metavar_no_seed_jargon():
    for path in [[]] + [p for p, _ in _commands()]:
        text = _help(path)
        assert "<bool>" not in text, path
        assert not re.search(r"seed|Table \d|Zeigarnik|ablation", text, re.I), (path, text)
    # the sources are in the manual instead
    page = (ROOT / "man" / "synapse-recall.1").read_text()
    assert "seed 000's Table 3" in page and "seed 002" in page and "seed 001" in page


def test_help_paragraphs_are_wrapped_by_the_terminal_not_the_source():
    for path, cmd in _commands():
        for para in (cmd.help or "").split("\n\n"):
            for line in para.splitlines()[1:]:
                assert line.startswith("Example:"), (path, para)
    wide = _help(["consolidate"], cols=250)
    assert ("Each window is committed on its own, so the command can be killed at any moment "
            "and run again: finished windows are not redone and nothing is duplicated.") in wide
    narrow = _help(["mark"], cols=60)
    assert "record's flags" in " ".join(narrow.split())


def test_bare_synapse_prints_help_without_an_empty_error():
    r = run_cli([])
    assert r.returncode in (0, 2)
    assert "Usage: synapse" in r.stdout + r.stderr and "ingest" in r.stdout + r.stderr
    assert "error" not in r.stderr


# --- hints -------------------------------------------------------------------------------------


def test_mode_hint_lists_every_mode(demo_store):
    r = run_cli(["recall", "x", "--mode", "fancy"], demo_store)
    assert r.returncode in (2, 78)
    hint = r.stderr.splitlines()[-1]
    assert hint.startswith("hint: ")
    for mode in ("synapse", "ecphory", "synaptic", "vector", "bm25", "hybrid"):
        assert mode in hint, (mode, hint)
    assert "seed" not in hint


def test_missing_record_hint_points_to_where_ids_are(demo_store):
    r = run_cli(["inspect", "record", "9999"], demo_store)
    assert r.returncode == 65
    assert "inspect --json` shows the ids" not in r.stderr
    assert "ingest and recall" in r.stderr.splitlines()[-1]


# --- tab completion ----------------------------------------------------------------------------


def complete(words: str) -> list[str]:
    """What bash completion offers for the command line `words` (cursor at its end), through
    the protocol of the script `synapse completion bash` installs."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    r = subprocess.run([str(SYNAPSE)], env=cli_env(_SYNAPSE_COMPLETE="complete_bash",
                                                    COMP_WORDS=words, COMP_CWORD=str(cword)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.parametrize("words, expected", [
    ("synapse recall q --mode ", ["synapse", "vector", "bm25", "hybrid", "ecphory", "synaptic"]),
    ("synapse recall q --mode syn", ["synapse", "synaptic"]),
    ("synapse ingest --format ", ["json", "text", "doc"]),
    ("synapse migrate --header ", ["v1", "v2", "v3"]),
    ("synapse prune --match ", ["any", "all"]),
    ("synapse completion ", ["bash", "zsh", "fish"]),
    ("synapse recall q --type ", ["episodic", "semantic", "working", "procedural"]),
    ("synapse recall q --cues ", ["rules", "model"]),
])
def test_completion_offers_values(words, expected):
    assert complete(words) == expected


def test_completed_memory_types_are_the_engines():
    from synapse_cli.commands.recall_cmd import MEMORY_TYPES
    from synapse_cli.engine.recall import TYPE_BITS

    assert set(MEMORY_TYPES) == set(TYPE_BITS)


def test_prune_dry_runs_of_compact_purge_and_restore_on_a_terminal(demo_store):
    """They printed a traceback (KeyError 'selected') on a terminal; in a pipe they were fine."""
    for args, says in ((["prune", "--compact", "--dry-run"], "would remove 0 records"),
                       (["prune", "--purge", "--dry-run"], "would remove 0 records"),
                       (["prune", "--restore", "1", "--dry-run"],
                        "would restore 0; 1 not in the trash")):
        code, shown, _ = on_terminal(args, demo_store)
        assert code == 0 and says in shown and "Traceback" not in shown, shown


def test_stored_control_characters_cannot_drive_the_terminal(tmp_path):
    # a memory with ESC sequences (clear screen, colours) reached the terminal raw through
    # recall's and list's tables; "[/]" in a memory is text, not rich markup
    store = tmp_path / "store"
    line = tmp_path / "odd.ndjson"
    line.write_text('{"text": "control chars \\u001b[2J\\u001b[31mred [/] \\u0007", '
                    '"speaker": "Ana\\u001b[2J"}\n')
    assert in_pipe(["ingest", str(line)], store).returncode == 0
    for args in (["recall", "control chars red", "--no-touch"], ["list"]):
        master, slave = pty.openpty()
        p = subprocess.Popen([str(SYNAPSE), *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                             stdout=slave, stderr=slave,
                             env=cli_env(store, TERM="xterm-256color", COLUMNS="120"))
        os.close(slave)
        raw = read_pty(master, 120)
        assert p.wait(timeout=120) == 0, raw
        assert b"\x1b[2J" not in raw and b"\x07" not in raw and b"\x1b[31m" not in raw, raw
        assert b"\\x1b[2J" in raw and b"[/]" in raw, raw
