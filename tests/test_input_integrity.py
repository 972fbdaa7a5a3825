"""Input that used to crash a command, be silently altered or be refused for no reason (the
hostile-user report of the isolation issue): each case is one clear answer now."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SYNAPSE, assert_clean_failure, cli_env, run_cli
from synapse_cli.engine.inputs import MAX_META_DEPTH
from synapse_cli.engine.memory import NewMemory
from synapse_cli.engine.store import StoreWriter


def ingest(store, data: bytes, *args):
    p = subprocess.run([str(SYNAPSE), "ingest", *args], input=data, capture_output=True,
                       env=cli_env(store, HF_HUB_OFFLINE="1"), timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(errors="replace"),
                                       p.stderr.decode(errors="replace"))


def nested(depth: int) -> bytes:
    return (b'{"text": "deep", "meta": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}\n")


@pytest.mark.parametrize("depth", [MAX_META_DEPTH + 1, 300, 990, 1023, 1024, 5000])
def test_too_deep_meta_is_one_clear_error(tmp_path, depth):
    r = ingest(tmp_path / "st", nested(depth))
    lines = assert_clean_failure(r, 65)
    assert "-:1" in lines[0] and ("32 levels" in lines[0] or "depth" in lines[0]), lines
    assert not (tmp_path / "st" / "MANIFEST").exists()


def test_meta_at_the_limit_is_stored_and_shown(tmp_path):
    r = ingest(tmp_path / "st", nested(MAX_META_DEPTH))
    assert r.returncode == 0, r.stderr
    rid = json.loads(r.stdout)["id"]
    for extra in ([], ["--json"]):
        shown = run_cli(["inspect", "record", rid, *extra], tmp_path / "st")
        assert shown.returncode == 0 and '"a"' in shown.stdout, shown.stderr


def test_deep_record_from_an_older_version_is_still_readable(tmp_path):
    """Records 254-989 levels deep were accepted before the limit; inspect must show them."""
    meta = value = {}
    for _ in range(600):
        value["a"] = {}
        value = value["a"]
    with StoreWriter.open(tmp_path / "st", create=True) as w:
        rid = w.append([NewMemory(text="old deep", vector=np.ones(384, np.float32),
                                  timestamp_ms=1_700_000_000_000, meta={"meta": meta})])[0]
        w.commit()
    for extra in ([], ["--json"]):
        shown = run_cli(["inspect", "record", rid, *extra], tmp_path / "st")
        assert shown.returncode == 0 and "old deep" in shown.stdout, shown.stderr[-500:]


def test_duplicate_keys_are_refused_naming_key_and_line(tmp_path):
    data = (b'{"text": "fine"}\n'
            b'{"text": "first", "text": "second", "speaker": "A", "speaker": "B"}\n')
    lines = assert_clean_failure(ingest(tmp_path / "st", data), 65)
    assert "-:2" in lines[0] and "'text'" in lines[0]
    nested_dup = b'{"text": "x", "meta": {"k": 1, "k": 2}}\n'
    lines = assert_clean_failure(ingest(tmp_path / "st", nested_dup), 65)
    assert "'k'" in lines[0]


def test_ndjson_with_a_byte_order_mark_is_read(tmp_path):
    r = ingest(tmp_path / "st", b'\xef\xbb\xbf{"text": "with a BOM"}\n{"text": "second"}\n')
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["status"] for x in r.stdout.splitlines()] == ["stored", "stored"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("integrity") / "st"
    rows = [{"text": f"Tomás moved to Berlin in week {i}", "speaker": "Tomás",
             "timestamp": f"2026-10-{i + 1:02d}T10:00:00Z"} for i in range(5)]
    r = ingest(path, "".join(json.dumps(x) + "\n" for x in rows).encode())
    assert r.returncode == 0, r.stderr
    return path


def test_a_window_that_ends_before_it_starts_is_a_usage_error(store):
    r = run_cli(["recall", "Where does Tomás live?", "--since", "2026-10-10",
                 "--until", "2026-10-01"], store)
    assert "window" in assert_clean_failure(r, 2)[0]


def test_a_bare_date_ends_a_window_at_the_end_of_that_day(store):
    """--until / --as-of 2026-10-02 keep what was said on October 2 (rows at 10:00 UTC)."""
    r = run_cli(["list", "--since", "2026-10-02", "--until", "2026-10-02", "--json"], store)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["time"][:10] for x in r.stdout.splitlines()] == ["2026-10-02"]
    r = run_cli(["recall", "Where does Tomás live?", "--as-of", "2026-10-02", "--no-gate"], store)
    assert r.returncode == 0, r.stderr
    texts = {x["text"] for x in json.loads(r.stdout)["results"]}
    assert "Tomás moved to Berlin in week 1" in texts
    r = run_cli(["recall", "x", "--as-of", "2026-10-01", "--since", "2026-10-10"], store)
    assert "--since is later than --as-of" in assert_clean_failure(r, 2)[0]


def test_one_bad_query_line_does_not_sink_the_batch(store):
    """A NUL in a line (JSON-escaped or raw) ended the whole batch with exit 65 and no error
    line; a lone surrogate was "invalid JSON" without why; a duplicate key was answered."""
    lines = (b'{"query": "Where does Tomas live?"}\n{"query": 5}\n\xff\xfe\nWhere is Berlin?\n'
             b'{"query": "a\\u0000b"}\nraw\x00nul\n{"query": "\\ud800"}\n'
             b'{"query": "x", "query": "y"}\nBerlin?\n')
    p = subprocess.run([str(SYNAPSE), "recall", "--no-touch"], input=lines, capture_output=True,
                       env=cli_env(store, HF_HUB_OFFLINE="1"), timeout=300)
    assert p.returncode == 65, p.stderr
    out = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(out) == 9
    assert out[0]["query"] == "Where does Tomas live?" and out[3]["query"] == "Where is Berlin?"
    assert out[8]["query"] == "Berlin?"
    assert out[1]["where"] == "-:2" and "query" in out[1]["error"]
    assert out[2]["where"] == "-:3" and "UTF-8" in out[2]["error"]
    assert [o["where"] for o in out[4:8]] == ["-:5", "-:6", "-:7", "-:8"]
    assert "NUL" in out[4]["error"] and "NUL" in out[5]["error"]
    assert "surrogate" in out[6]["error"] and "twice" in out[7]["error"]
    assert b"Traceback" not in p.stderr


def _can_mount_read_only(tmp) -> bool:
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {tmp} {tmp} && "
                            f"mount -o remount,bind,ro {tmp}"], capture_output=True)
    return probe.returncode == 0


def test_dry_runs_work_on_a_read_only_store(tmp_path):
    """The store on a read-only file system (a bind mount in a private mount namespace):
    dry runs take no writer lock; a writer says what is wrong and what to do."""
    store = tmp_path / "st"
    r = ingest(store, b'{"text": "a"}\n{"text": "b"}\n')
    assert r.returncode == 0, r.stderr
    if not _can_mount_read_only(tmp_path):
        pytest.skip("needs unshare -m and mount (root) to make a read-only file system")

    def read_only(args):
        cmd = " ".join(f"'{a}'" for a in [SYNAPSE, *args])
        return subprocess.run(["unshare", "-m", "sh", "-c",
                               f"mount --bind {store} {store} && "
                               f"mount -o remount,bind,ro {store} && exec {cmd}"],
                              capture_output=True, text=True, timeout=300,
                              env=cli_env(store, HF_HUB_OFFLINE="1"))

    for args in (["prune", "--id", "1", "--dry-run"], ["migrate", "--header", "v2", "--dry-run"]):
        r = read_only(args)
        assert r.returncode == 0, (args, r.stderr)
        assert json.loads(r.stdout)["dry_run"] is True
    lines = assert_clean_failure(read_only(["prune", "--id", "1", "--yes"]), 74)
    assert len(lines) == 2 and "read-only" in lines[1], lines


def test_as_of_hides_later_memories_and_touches_nothing(store):
    r = run_cli(["recall", "Where does Tomás live?", "--as-of", "2026-10-02T12:00:00Z",
                 "--no-gate"], store)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["results"] and "touched" not in out
    assert {x["text"] for x in out["results"]} == {"Tomás moved to Berlin in week 0",
                                                   "Tomás moved to Berlin in week 1"}
    r = run_cli(["recall", "x", "--as-of", "2026-10-02", "--until", "2026-10-03"], store)
    assert_clean_failure(r, 2)


@pytest.mark.parametrize("value", [b'{"a": 1}', b"[1]", b"3"])
def test_a_type_that_is_not_a_string_is_one_clear_error(tmp_path, value):
    """Found by the input fuzzer (tests/fuzz_regressions/all-crash-f8e1bc24a3e0.bin): an
    object as `type` was a TypeError, exit 70."""
    lines = assert_clean_failure(ingest(tmp_path / "st", b'{"text": "a", "type": ' + value + b"}\n"), 65)
    assert "`type`" in lines[0]


@pytest.mark.parametrize("fmt", ["json", "text", "doc"])
def test_utf16_input_is_named(tmp_path, fmt):
    """UTF-16 (what Windows tools write) was "invalid UTF-8" or, as a document, "contains a
    NUL character" at byte 3, never naming the encoding (helper)."""
    f = tmp_path / "in.txt"
    f.write_bytes('{"text": "hi"}\n'.encode("utf-16"))
    r = run_cli(["ingest", "--format", fmt, f], tmp_path / "st")
    assert "UTF-16" in assert_clean_failure(r, 65)[0]


def test_a_line_too_long_is_skipped_as_it_is_read(tmp_path):
    """A 200 MB line was read whole before its error (1 GB of memory): iter_lines drops a line
    over MAX_LINE_BYTES as it reads it, the lines around it intact (helper)."""
    import io

    from synapse_cli.engine.inputs import LongLine, iter_lines

    long = b"x" * 5000
    data = b"a\n" + long + b"\r\nb\n" + long + b"\nc"
    got = list(iter_lines(io.BytesIO(data), block=1000, max_line=3000))
    assert [type(x) is LongLine for x in got] == [False, True, False, True, False]
    assert [bytes(x) for x in got if type(x) is not LongLine] == [b"a", b"b", b"c"]
    f = tmp_path / "in.ndjson"
    f.write_bytes(b'{"text": "one"}\n{"text": "' + b"y" * (5 << 20) + b'"}\n{"text": "two"}\n')
    r = run_cli(["ingest", f], tmp_path / "st")
    assert f"{f}:2" in assert_clean_failure(r, 65)[0] and "longer than" in r.stderr
    r = run_cli(["ingest", "--skip-invalid", f], tmp_path / "st")
    assert [json.loads(x)["status"] for x in r.stdout.splitlines()] == ["stored", "invalid",
                                                                        "stored"]


@given(st.lists(st.tuples(st.binary(max_size=30).filter(lambda b: b"\n" not in b
                                                         and b"\r" not in b),
                          st.sampled_from([b"\n", b"\r\n", b"\r"])), max_size=12),
       st.binary(max_size=16).filter(lambda b: b"\n" not in b and b"\r" not in b),
       st.sampled_from([1, 2, 3, 7, 64]), st.sampled_from([3, 10, 10**9]))
@settings(max_examples=300, deadline=None)
def test_iter_lines_splits_as_splitlines_and_marks_long_lines(lines, tail, block, max_line):
    import io

    from synapse_cli.engine.inputs import LongLine, iter_lines

    data = b"".join(a + b for a, b in lines) + tail
    got = list(iter_lines(io.BytesIO(data), block=block, max_line=max_line))
    want = data.splitlines()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (type(g) is LongLine) == (len(w) > max_line)
        assert type(g) is LongLine or g == w
