"""CLI conventions, run through the installed `synapse` script: --version, an Example in every
--help, usage errors exit 2, a missing store 66, NO_COLOR, one NDJSON line off a terminal,
symlinks refused with 77, store directory 0700 and files 0600."""
from __future__ import annotations

import json
import os
import pty
import re
import shutil
import stat
import subprocess

import pytest

from conftest import (SYNAPSE, assert_clean_failure, build_store, cli_env, dir_digest, fold_graph,
                      read_pty, run_cli, start_cli)
from synapse_cli import __version__

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _finish(procs) -> list:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def command_paths() -> list[list[str]]:
    """Every command and group of the app, found from the app itself (new commands included)."""
    import typer

    from synapse_cli.commands.main import app

    def walk(cmd, path):
        yield path
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, path + [name])

    return list(walk(typer.main.get_command(app), []))


def test_version():
    r = run_cli(["--version"])
    assert (r.returncode, r.stdout, r.stderr) == (0, f"synapse {__version__}\n", "")


def test_every_help_shows_an_example():
    paths = command_paths()
    assert ["inspect", "verify"] in paths and ["migrate"] in paths
    results = _finish([start_cli(p + ["--help"]) for p in paths])
    for path, r in zip(paths, results):
        assert r.returncode == 0, (path, r.stderr)
        assert "Example" in r.stdout, (path, r.stdout)
        assert "Usage: synapse" in r.stdout
        assert not ANSI.search(r.stdout + r.stderr)  # off a terminal: plain text
    assert run_cli(["inspect", "-h"]).stdout == results[paths.index(["inspect"])].stdout


USAGE_ERRORS = [
    ["--bogus"],
    ["no-such-command"],
    ["inspect", "record"],
    ["inspect", "record", "abc"],
    ["inspect", "no-such-subcommand"],
    ["inspect", "verify", "--bogus"],
    ["migrate"],
    ["migrate", "--header", "v9"],
    ["--lock-timeout", "soon", "inspect"],
    ["prune", "--query", " ", "--dry-run"],
    # bytes that are not UTF-8 (Python holds them as lone surrogates) in a text argument
    ["recall", "hik\udcffing"], ["list", "--tag", "a\udcff"], ["ingest", "--goal", "x\udcff"],
]


def test_usage_errors_exit_2(small_store):
    results = _finish([start_cli(a, small_store.path) for a in USAGE_ERRORS])
    for args, r in zip(USAGE_ERRORS, results):
        desc = (args, r.returncode, r.stderr)
        assert r.stdout == "", desc
        assert_clean_failure(r, 2)  # one `synapse: error:` line and a hint, as every error


def test_a_usage_hint_names_the_command_whose_option_it_is(small_store):
    # `synapse recall "-k"` said "Option '-k' requires an argument" and pointed to
    # `synapse --help` (a hostile pass): click blames the group for it
    for args, where in ((["recall", "-k"], "synapse recall"), (["--bogus"], "synapse"),
                        (["inspect", "verify", "--bogus"], "synapse inspect verify")):
        lines = assert_clean_failure(run_cli(args, small_store.path), 2)
        assert lines[1] == f"hint: `{where} --help` shows the usage", (args, lines)


def test_a_file_name_that_is_not_utf8_is_ingested_and_acknowledged(tmp_path):
    name = tmp_path / "f\udcff.ndjson"  # the byte 0xff in the name
    name.write_text('{"text": "odd name"}\n')
    r = run_cli(["ingest", name], tmp_path / "st")
    assert r.returncode == 0, r.stderr
    ack = json.loads(r.stdout)
    assert ack["status"] == "stored" and ack["where"] == f"{name}:1"


def test_unknown_store_exits_66(tmp_path):
    missing = tmp_path / "missing"
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    commands = [["inspect"], ["inspect", "record", "1"], ["inspect", "verify"],
                ["migrate", "--header", "v2", "--yes"]]
    procs = [start_cli(c, missing) for c in commands]
    procs += [start_cli(c, empty) for c in (["inspect"], ["migrate", "--header", "v3"])]
    procs.append(start_cli(["--store", str(missing), "inspect"]))
    for r in _finish(procs):
        lines = assert_clean_failure(r, 66)
        assert len(lines) == 1 or "`synapse ingest` creates a store" in lines[1], r.stderr
    assert not missing.exists()  # nothing was created
    assert os.listdir(empty) == []  # not even a LOCK file


def test_a_store_that_cannot_be_created_is_named_without_errno_noise(tmp_path):
    # "[Errno 20] Not a directory: '...'" (a hostile pass): the path, then what the OS said
    (tmp_path / "file").write_text("")
    where = tmp_path / "file" / "store"
    r = subprocess.run([str(SYNAPSE), "--store", str(where), "ingest"], input='{"text": "x"}\n',
                       capture_output=True, text=True, timeout=120, env=cli_env())
    assert assert_clean_failure(r, 74)[0] == f"synapse: error: {where}: Not a directory"


@pytest.mark.parametrize("args", [["inspect", "record", "999"], ["mark", "999", "--pin"],
                                  ["prune", "--id", "999", "--yes"],
                                  ["prune", "--restore", "999", "--yes"]])
def test_a_record_not_in_the_store_is_one_error_with_one_code(small_store, args):
    before = (small_store.path / "MANIFEST").read_bytes()
    lines = assert_clean_failure(run_cli(args, small_store.path), 65)
    assert "no record with id 999" in lines[0]
    assert (small_store.path / "MANIFEST").read_bytes() == before


def test_stdout_off_a_terminal_is_one_json_line(small_store):
    argvs = [["inspect"], ["inspect", "--json"], ["inspect", "record", "1"], ["inspect", "verify"],
             ["migrate", "--header", "v1", "--dry-run"]]
    results = _finish([start_cli(a, small_store.path) for a in argvs])
    for args, r in zip(argvs, results):
        assert r.returncode == 0, (args, r.stderr)
        assert r.stderr == "", (args, r.stderr)
        assert r.stdout.endswith("\n") and r.stdout.count("\n") == 1, (args, r.stdout)
        json.loads(r.stdout)
    summary = json.loads(results[0].stdout)
    assert summary["records"]["total"] == 60 and summary["header_version"] == 3
    assert summary["edges"]["total"] == len(small_store.edges)
    record = json.loads(results[2].stdout)
    assert record["id"] == 1 and record["payload"] == small_store.mems[0].body()
    assert json.loads(results[3].stdout)["ok"] is True


def _run_on_pty(args, env) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal (so rich thinks a person is watching)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([str(SYNAPSE), *args], stdin=subprocess.DEVNULL, stdout=slave,
                         stderr=slave, env=env, close_fds=True)
    os.close(slave)
    shown = read_pty(master, 60)
    p.wait(timeout=60)
    return p.returncode, shown.decode(errors="replace")


def _color_codes(text: str) -> list[str]:
    """SGR sequences that set a colour (30-37, 38, 40-47, 48, 90-97, 100-107)."""
    found = []
    for params in SGR.findall(text):
        for p in params.split(";"):
            if p and (int(p) in (38, 48) or 30 <= int(p) <= 37 or 40 <= int(p) <= 47
                      or 90 <= int(p) <= 97 or 100 <= int(p) <= 107):
                found.append(params)
                break
    return found


def test_no_color_is_respected(small_store, tmp_path):
    """NO_COLOR (no-color.org) suppresses ANSI colour on a terminal. As a control, the same
    commands on a terminal without NO_COLOR do use colour (else the test would prove nothing).
    Off a terminal there are no escape sequences at all."""
    store = small_store.path
    argvs = [["--help"], ["inspect"], ["inspect", "record", "1"], ["inspect", "record", "999"],
             ["migrate", "--header", "v1", "--dry-run"]]
    base = cli_env(store, TERM="xterm-256color", COLUMNS="100")
    colored = 0
    for args in argvs:
        rc, out = _run_on_pty(args, dict(base, NO_COLOR="1"))
        assert rc in (0, 2, 65), (args, rc, out)
        assert "Traceback" not in out
        assert _color_codes(out) == [], (args, _color_codes(out))
        rc2, out2 = _run_on_pty(args, base)
        assert rc2 == rc
        colored += bool(_color_codes(out2))
    assert colored >= 2  # the control: help and record output are coloured by default

    for r in _finish([start_cli(a, store, env={"NO_COLOR": "1"}) for a in argvs]):
        assert not ANSI.search(r.stdout + r.stderr), (r.args, r.stdout[:200], r.stderr[:200])


def _plant(kind: str, path, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    if kind == "planted-link":
        os.symlink("/etc/passwd", path / "evil")
    elif kind == "dangling-link":
        os.symlink(tmp_path / "nowhere", path / "notes.txt")
    else:  # one of the store's own files moved out and replaced by a link to it
        name = {"manifest": "MANIFEST", "segment": "seg-000001.dat", "lock": "LOCK",
                "payload": "payload.log"}[kind]
        shutil.move(path / name, outside / name)
        os.symlink(outside / name, path / name)


@pytest.mark.parametrize("kind", ["planted-link", "dangling-link", "manifest", "segment", "lock",
                                  "payload"])
def test_symlink_inside_the_store_is_refused_with_77(tmp_path, small_store, kind):
    path = small_store.path
    _plant(kind, path, tmp_path)
    before = dir_digest(path)
    outside_before = dir_digest(tmp_path / "outside")
    argvs = [["inspect"], ["inspect", "record", "1"], ["inspect", "verify"],
             ["migrate", "--header", "v2", "--yes"]]
    for r in _finish([start_cli(a, path) for a in argvs]):
        lines = assert_clean_failure(r, 77)
        assert len(lines) == 1 and "symlink" in lines[0], r.stderr
    assert dir_digest(path) == before
    assert dir_digest(tmp_path / "outside") == outside_before


@pytest.mark.parametrize("name", ["payload-9.log", "seg-000005.dat"])
def test_a_directory_under_a_store_file_name_is_refused_with_77(small_store, name):
    """It made every writer fail with a bare "Is a directory" (exit 74) while verify said the
    store was healthy (hostile-user pass); a directory of another name is none of the store's
    business."""
    path = small_store.path
    (path / "notes").mkdir(exist_ok=True)
    assert run_cli(["inspect", "verify"], path).returncode == 0
    (path / name).mkdir()
    before = dir_digest(path)
    argvs = [["inspect", "verify"], ["recall", "anything"], ["mark", "1", "--pin"],
             ["prune", "--id", "1", "--yes"]]
    for r in _finish([start_cli(a, path) for a in argvs]):
        lines = assert_clean_failure(r, 77)
        assert name in lines[0] and "move it out of the store directory" in lines[0], r.stderr
    assert dir_digest(path) == before


def test_store_directory_0700_and_files_0600(tmp_path):
    old = os.umask(0)  # the modes must not depend on a restrictive umask
    try:
        path = tmp_path / "a" / "b" / "store"
        build_store(path, 30)
        fold_graph(path)  # graph.csr (written by temp file + rename)
        r = run_cli(["migrate", "--header", "v1", "--yes"], path)  # .bak and new segments
        assert r.returncode == 0, r.stderr
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    names = sorted(os.listdir(path))
    assert {"MANIFEST", "LOCK", "seg-000001.dat", "seg-000001.dat.bak", "payload.log",
            "edges.log", "graph.csr"} <= set(names)
    for name in names:
        st = os.lstat(path / name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, name


def test_recall_on_a_terminal_shows_each_memorys_id(tmp_path):
    """A person reading the table can go on to `mark ID` or `prune --id ID`."""
    store = tmp_path / "s"
    r = subprocess.run([str(SYNAPSE), "ingest"], input='{"text": "the kiln is in the garage"}\n'
                       '{"text": "standup is at 9:30"}\n', capture_output=True, text=True,
                       env=cli_env(store, HF_HUB_OFFLINE="1"), timeout=120)
    assert r.returncode == 0, r.stderr
    rc, shown = _run_on_pty(["recall", "where is the kiln?", "--k", "1"],
                            cli_env(store, HF_HUB_OFFLINE="1", NO_COLOR="1", COLUMNS="100"))
    assert rc == 0, shown
    shown = ANSI.sub("", shown)  # bold and dim stay with NO_COLOR
    header = next(line for line in shown.splitlines() if "when (UTC)" in line)
    assert header.split()[:2] == ["#", "id"]
    row = next(line for line in shown.splitlines() if "kiln is in the garage" in line)
    assert row.split()[:2] == ["1", "1"]
