"""The Store and StoreWriter on real files (FORMAT.md sections 1, 2, 8): round trip of every
field, the commit rule (uncommitted appends invisible and truncated, torn tails repaired),
concurrent writers in separate processes, and the lock timeout through the CLI."""
from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import (DIM, add_edges, assert_clean_failure, build_store, committed_lengths,
                      expected_header, graph_dict, make_memories, quantize_ref, read_state,
                      run_cli, spawn_python)
from store_format import errors
from store_format import graph_files as gf
from store_format import manifest as mf
from store_format.headers import HEADER_BYTES
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.maintenance.verify import verify


def assert_records(path, mems, ids, version, live_edges=None):
    """Every record of `mems` reads back exactly (header fields, vector, payload)."""
    with Store.open(path) as s:
        for rid, mem in zip(ids, mems):
            h = s.header(rid)
            for name, want in expected_header(mem, version).items():
                assert getattr(h, name) == want, (rid, name, getattr(h, name), want)
            assert np.array_equal(s.vector(rid), quantize_ref(mem.vector)), rid
            assert s.body(rid) == mem.body(), rid
        if live_edges is not None:
            assert graph_dict(s) == live_edges


def prefix_bytes(path, lengths: dict) -> dict:
    return {name: (Path(path) / name).read_bytes()[:n] for name, n in lengths.items()}


@pytest.mark.parametrize("version", [1, 2, 3])
def test_round_trip_of_every_field(tmp_path, version):
    path = tmp_path / "store"
    b = build_store(path, 200, header_version=version, seed=version)
    assert b.ids == list(range(1, 201))

    m = mf.read_manifest(path)
    assert (m.header_version, m.dim, m.next_record_id, m.generation) == (version, DIM, 201, 1)
    assert m.segments == [mf.Segment("seg-000001.dat", 200)]
    seg = (path / "seg-000001.dat").read_bytes()
    assert seg[10] == version and len(seg) == 64 + 200 * (HEADER_BYTES[version] + DIM + 24)
    assert_records(path, b.mems, b.ids, version, b.edges)
    assert verify(path).ok

    # A second transaction: ids continue, and the committed bytes of the first are untouched.
    before = prefix_bytes(path, committed_lengths(path))
    more = make_memories(25, seed=99, prefix="second")
    with StoreWriter.open(path) as w:
        new_ids = w.append(more)
        add_edges(w, b.edges, new_ids[:-1], new_ids[1:], gf.TEMPORAL)
        add_edges(w, b.edges, b.ids[5], new_ids[0], gf.ABSTRACTION, 0.75)
        add_edges(w, b.edges, b.ids[2], b.ids[3], gf.TEMPORAL, 0.0, gf.REMOVE)
        w.commit()
    assert new_ids == list(range(201, 226))
    assert prefix_bytes(path, {k: len(v) for k, v in before.items()}) == before
    assert mf.read_manifest(path).generation == 2
    assert_records(path, b.mems + more, b.ids + new_ids, version, b.edges)
    assert verify(path).ok


def _assert_tail_gone_after_next_commit(path, old, mems_before, ids_before, version):
    """The next writer appends after the committed prefix (truncating any tail first), so
    afterwards every file is exactly its committed length and old records are intact."""
    more = make_memories(7, seed=1234, prefix="after")
    with StoreWriter.open(path) as w:
        new_ids = w.append(more)
        w.add_edges(new_ids[:-1], new_ids[1:], gf.TEMPORAL)
        w.commit()
    assert new_ids == list(range(old.manifest.next_record_id, old.manifest.next_record_id + 7))
    for name, n in committed_lengths(path).items():
        assert (path / name).stat().st_size == n, name
    assert_records(path, mems_before + more, ids_before + new_ids, version)
    assert verify(path).ok


def test_uncommitted_append_is_invisible_and_truncated(tmp_path):
    path = tmp_path / "store"
    b = build_store(path, 100)
    old = read_state(path)
    sizes = {n: (path / n).stat().st_size for n in committed_lengths(path)}

    w = StoreWriter.open(path)
    w.append(make_memories(50, seed=5, prefix="doomed"))
    w.add_edges([1, 2], [3, 4], gf.ASSOCIATION, 0.5)
    w.close()  # no commit

    grown = {n: (path / n).stat().st_size for n in sizes}
    assert grown["seg-000001.dat"] > sizes["seg-000001.dat"]
    assert grown["payload.log"] > sizes["payload.log"]
    now = read_state(path)
    assert now.manifest == old.manifest
    assert np.array_equal(now.ids, old.ids) and now.edges == old.edges == b.edges
    assert verify(path).ok
    _assert_tail_gone_after_next_commit(path, old, b.mems, b.ids, 3)
    with Store.open(path) as s:
        texts = [s.body(int(r))["text"] for r in s.ids]
    assert not any(t.startswith("doomed") for t in texts)


KILLED_WRITER = """
import sys
from conftest import make_memories
from synapse_cli.engine.store import StoreWriter
w = StoreWriter.open(sys.argv[1], create=True)
ids = w.append(make_memories(int(sys.argv[2]), seed=7, prefix="doomed"))
w.add_edges(ids[:-1], ids[1:], 0)
print(len(ids), flush=True)
sys.stdin.read()  # appended and fsynced, never committed: wait for SIGKILL
"""


@pytest.mark.parametrize("existing", [100, 0], ids=["store-with-records", "empty-store"])
def test_sigkill_after_append_before_commit(tmp_path, existing):
    path = tmp_path / "store"
    if existing:
        b = build_store(path, existing)
        mems, ids = b.mems, b.ids
    else:
        StoreWriter.open(path, create=True).close()
        mems, ids = [], []
    old = read_state(path)

    child = spawn_python(KILLED_WRITER, path, 300)
    assert child.stdout.readline().strip() == "300", child.stderr.read()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    # The dead writer's records reached the disk but not the manifest.
    assert (path / "seg-000001.dat").stat().st_size > committed_lengths(path).get(
        "seg-000001.dat", 0)

    now = read_state(path)
    assert now.manifest == old.manifest and np.array_equal(now.ids, old.ids)
    assert now.edges == old.edges
    assert verify(path).ok
    # The next writer takes the lock the dead one held (released by the kernel), drops an
    # uncommitted segment file or truncates the tail, and reuses the ids.
    _assert_tail_gone_after_next_commit(path, old, mems, ids, 3)


def _make_tail(path, kind: str, how: str) -> int:
    """Leave bytes past the committed length of one file; return the committed length."""
    committed = committed_lengths(path)
    name = {"segment": "seg-000001.dat", "payload": "payload.log", "edges": "edges.log"}[kind]
    n = committed[name]
    if how == "garbage":
        with open(path / name, "ab") as f:
            f.write(np.random.default_rng(0).integers(0, 256, 1013, dtype=np.uint8).tobytes())
        return n
    # "torn": an uncommitted append whose last bytes never reached the disk.
    if kind == "edges":
        entries = gf.make_entries([1, 2, 3], [4, 5, 6], gf.RELATION, 0.5)
        with open(path / name, "ab") as f:
            f.write(entries.tobytes())
    else:
        w = StoreWriter.open(path)
        w.append(make_memories(40, seed=3, prefix="torn"))
        w.close()
    size = (path / name).stat().st_size
    assert size > n
    os.truncate(path / name, n + (size - n) // 2 + 3)  # cut mid-record / mid-entry
    return n


@pytest.mark.parametrize("how", ["torn", "garbage"])
@pytest.mark.parametrize("kind", ["segment", "payload", "edges"])
def test_tail_past_committed_length_is_repaired(tmp_path, kind, how):
    path = tmp_path / "store"
    b = build_store(path, 80)
    old = read_state(path)
    _make_tail(path, kind, how)
    # Readers never look past the committed length; verify finds nothing wrong.
    assert read_state(path).manifest == old.manifest
    assert verify(path).ok
    assert_records(path, b.mems, b.ids, 3, b.edges)
    assert run_cli(["inspect", "verify"], path).returncode == 0
    _assert_tail_gone_after_next_commit(path, old, b.mems, b.ids, 3)


CONCURRENT_WRITER = """
import json, sys
from conftest import make_memories
from synapse_cli.engine.store import StoreWriter
path, tag, batches, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mems = make_memories(batches * per, seed=len(tag), prefix=tag)
print("ready", flush=True)
sys.stdin.readline()
out = []
for b in range(batches):
    with StoreWriter.open(path, lock_timeout=60) as w:  # one transaction per lock hold
        ids = w.append(mems[b * per:(b + 1) * per])
        w.add_edges(ids[:-1], ids[1:], 0)
        w.commit()
    out.append(ids)
print(json.dumps(out), flush=True)
"""


def test_two_processes_append_at_once(tmp_path):
    path = tmp_path / "store"
    StoreWriter.open(path, create=True).close()
    batches, per = 20, 10
    kids = {tag: spawn_python(CONCURRENT_WRITER, path, tag, batches, per)
            for tag in ("procA", "procBB")}
    for k in kids.values():
        assert k.stdout.readline().strip() == "ready", k.stderr.read()
    for k in kids.values():  # start both at once
        k.stdin.write("go\n")
        k.stdin.flush()
    got = {}
    for tag, k in kids.items():
        out, err = k.communicate(timeout=120)
        assert k.returncode == 0, err
        got[tag] = json.loads(out)

    total = 2 * batches * per
    with Store.open(path) as s:
        assert s.count == total and s.manifest.next_record_id == total + 1
        assert list(s.ids) == list(range(1, total + 1))  # unique and increasing
        texts = Counter(s.body(int(r))["key"] for r in s.ids)
        edges = graph_dict(s)
    want = {f"{tag}-{i}" for tag in kids for i in range(batches * per)}
    assert set(texts) == want and set(texts.values()) == {1}  # each exactly once
    for tag, batches_ids in got.items():
        flat = [i for ids in batches_ids for i in ids]
        assert flat == sorted(flat)  # a process's ids increase
        for ids in batches_ids:  # a transaction's records are contiguous
            assert ids == list(range(ids[0], ids[0] + per))
    assert len(edges) == 2 * batches * (per - 1)
    assert verify(path).ok
    assert run_cli(["inspect", "verify"], path).returncode == 0


HOLDER = """
import sys
from synapse_cli.engine.store import StoreWriter
with StoreWriter.open(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_second_writer_exits_75_while_lock_is_held(tmp_path, small_store):
    path = small_store.path
    holder = spawn_python(HOLDER, path)
    try:
        assert holder.stdout.readline().strip() == "locked", holder.stderr.read()
        before = {n: (path / n).read_bytes() for n in os.listdir(path)}

        t0 = time.monotonic()
        r = run_cli(["--lock-timeout", "0.5", "migrate", "--header", "v2", "--yes"], path)
        elapsed = time.monotonic() - t0
        lines = assert_clean_failure(r, 75)
        assert len(lines) == 1
        assert "lock" in lines[0] and f"pid {holder.pid}" in lines[0], lines
        assert 0.5 <= elapsed < 10

        r = run_cli(["migrate", "--header", "v1", "--yes"], path,
                    env={"SYNAPSE_LOCK_TIMEOUT": "0"})
        assert len(assert_clean_failure(r, 75)) == 1
        # Readers take no lock.
        assert run_cli(["inspect"], path).returncode == 0
        assert run_cli(["inspect", "verify"], path).returncode == 0
        assert {n: (path / n).read_bytes() for n in os.listdir(path)} == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    r = run_cli(["--lock-timeout", "5", "migrate", "--header", "v2", "--yes"], path)
    assert r.returncode == 0, r.stderr
    assert mf.read_manifest(path).header_version == 2


def test_reader_rejects_a_committed_file_cut_short(tmp_path, small_store):
    """Cutting into the committed prefix is damage, not a tail: readers and writers refuse."""
    path = small_store.path
    seg = path / "seg-000001.dat"
    size = seg.stat().st_size
    os.truncate(seg, size - 1)
    with pytest.raises(errors.Truncated) as exc:
        Store.open(path)
    assert exc.value.offset == size - 1 and exc.value.path.endswith("seg-000001.dat")
    with pytest.raises(errors.Truncated):
        StoreWriter.open(path)
