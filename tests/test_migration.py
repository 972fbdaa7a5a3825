"""Header migration (FORMAT.md section 9, seed 004) through the CLI and under kill -9.

Multi-segment stores are built with a small per-process segment limit (conftest
`segment_limit`): the files are ordinary segments that every reader and the migrating child
process accept; only the 262,144-record limit of a full segment is not reached.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import time

import numpy as np
import pytest

from conftest import (DEFAULTS, V1_FIELDS, V2_FIELDS, assert_clean_failure, build_store,
                      dir_digest, expected_header, make_memories, read_state, run_cli,
                      spawn_python, stray_files)
from store_format import manifest as mf
from store_format import migration
from store_format import segments as sg
from store_format.lock import WriterLock
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.maintenance.verify import verify


def assert_same_store(orig, now, version: int, v2_fields_kept: bool) -> None:
    """`now` holds what `orig` held, as far as layout `version` can.

    V1 fields always equal; arousal and storage_strength equal while the store never passed
    through V1 since `orig` (else they read as the safe defaults 0 and 1.0)."""
    m = now.manifest
    assert m.header_version == version and m.migration is None
    assert now.file_versions == [version] * len(m.segments)  # wholly one layout
    assert [s.records for s in m.segments] == [s.records for s in orig.manifest.segments]
    assert np.array_equal(now.ids, orig.ids)
    for name in V1_FIELDS:
        assert np.array_equal(now.fields[name], orig.fields[name]), name
    for name in V2_FIELDS:
        want = orig.fields[name] if v2_fields_kept else np.full(len(orig.ids), DEFAULTS[name])
        assert np.array_equal(now.fields[name], want), name
    assert np.array_equal(now.vectors, orig.vectors)
    assert np.array_equal(now.payload_offsets, orig.payload_offsets)
    assert np.array_equal(now.payload_lengths, orig.payload_lengths)
    assert now.edges == orig.edges
    assert (m.payload, m.graph, m.next_record_id, m.store_id) == (
        orig.manifest.payload, orig.manifest.graph, orig.manifest.next_record_id,
        orig.manifest.store_id)


def migrate_cli(path, version: int, yes: bool) -> dict:
    r = run_cli(["migrate", "--header", f"v{version}"] + (["--yes"] if yes else []), path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # off a terminal a successful command says nothing on stderr
    assert r.stdout.count("\n") == 1
    report = json.loads(r.stdout)
    assert report["to_version"] == version and report["dry_run"] is False
    return report


def run_chain(path, steps, orig, keep_from_start: bool) -> None:
    payload = (path / "payload.log").read_bytes()
    edges = (path / "edges.log").read_bytes()
    kept = keep_from_start
    previous = orig.manifest.header_version
    for version, yes in steps:
        report = migrate_cli(path, version, yes)
        assert report["from_versions"] == [previous]
        kept = kept and version != 1
        now = read_state(path)
        assert_same_store(orig, now, version, kept)
        # Payloads and edges are not rewritten by a header migration.
        assert (path / "payload.log").read_bytes() == payload
        assert (path / "edges.log").read_bytes() == edges
        for s in now.manifest.segments:  # the previous layout is kept as .bak
            assert (path / (s.file + ".bak")).read_bytes()[10] == previous
        assert stray_files(path) == []
        r = run_cli(["inspect", "verify"], path)
        assert r.returncode == 0 and json.loads(r.stdout)["ok"], r.stdout + r.stderr
        with Store.open(path) as s:  # spot-check the reader path end to end
            for rid in (1, 2, 3, len(orig.ids)):
                assert s.body(rid)["key"] == f"memory-{rid - 1}"
        previous = version


def test_chain_v1_v3_v2_v1_v3_on_10000_records(tmp_path):
    path = tmp_path / "store"
    build_store(path, 10_000, header_version=1, seed=11)
    orig = read_state(path)
    assert orig.file_versions == [1] and len(orig.ids) == 10_000
    # Varied V1 fields really are varied (else equality would prove little).
    for name in ("recall_count", "valence", "flags", "synaptic_tags", "importance",
                 "centroid_id", "timestamp_ms"):
        assert len(np.unique(orig.fields[name])) > 50, name
    run_chain(path, [(3, False), (2, True), (1, True), (3, False)], orig, keep_from_start=True)


def test_chain_keeps_arousal_and_storage_strength_until_v1(tmp_path):
    path = tmp_path / "store"
    build_store(path, 3000, header_version=3, seed=12, max_segment_records=1000)
    orig = read_state(path)
    assert len(orig.manifest.segments) == 3
    assert len(np.unique(orig.fields["arousal"])) > 200
    assert len(np.unique(orig.fields["storage_strength"])) > 1000

    r = run_cli(["migrate", "--header", "v1", "--dry-run"], path)
    plan = json.loads(r.stdout)
    assert plan["lossy"] and plan["loses"] == {
        "arousal": int(np.count_nonzero(orig.fields["arousal"])),
        "storage_strength": int(np.count_nonzero(orig.fields["storage_strength"] != 1.0))}
    # V3 -> V2 -> V3 keeps them; -> V1 drops them; -> V2 reads the defaults 0 / 1.0.
    run_chain(path, [(2, True), (3, False), (1, True), (2, False)], orig, keep_from_start=True)

    # A writer after the chain appends in the migrated layout, after the migrated records.
    more = make_memories(10, seed=77, prefix="after-migration")
    with StoreWriter.open(path) as w:
        new_ids = w.append(more)
        w.commit()
    assert new_ids == list(range(3001, 3011))
    with Store.open(path) as s:
        assert [seg.header.header_version for seg in s.segments] == [2, 2, 2]
        for rid, mem in zip(new_ids, more):
            h = s.header(rid)
            assert (h.arousal, h.storage_strength) == (
                expected_header(mem, 2)["arousal"], expected_header(mem, 2)["storage_strength"])
            assert s.body(rid) == mem.body()
    assert verify(path).ok


def test_dry_run_and_downgrade_without_yes_change_nothing(tmp_path):
    path = tmp_path / "store"
    build_store(path, 500, header_version=3)
    before = dir_digest(path)
    target = 1

    r = run_cli(["migrate", "--header", f"v{target}", "--dry-run"], path)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["dry_run"] and plan["lossy"] and plan["records"] == 500 and plan["loses"]
    assert plan["from_versions"] == [3] and plan["to_version"] == target
    assert dir_digest(path) == before

    r = run_cli(["migrate", "--header", f"v{target}"], path)  # stdin is not a terminal
    lines = assert_clean_failure(r, 2)
    assert "--yes" in " ".join(lines)
    assert r.stdout == ""
    assert dir_digest(path) == before

    r = run_cli(["migrate", "--header", "v3", "--dry-run"], path)  # a no-op plan
    assert r.returncode == 0 and not json.loads(r.stdout)["lossy"]
    assert dir_digest(path) == before


def test_v3_to_v2_loses_nothing_and_needs_no_yes(tmp_path):
    # v3 only adds reserved bytes, always zero: the dry run said it loses nothing, the
    # migration still asked for --yes ("loses reserved bytes")
    path = tmp_path / "store"
    build_store(path, 200, header_version=3)
    r = run_cli(["migrate", "--header", "v2", "--dry-run"], path)
    plan = json.loads(r.stdout)
    assert not plan["lossy"] and plan["loses"] == {}
    r = run_cli(["migrate", "--header", "v2"], path)  # stdin is not a terminal
    assert r.returncode == 0, r.stderr
    assert mf.read_manifest(path).header_version == 2 and verify(path).ok


# --- crashes -------------------------------------------------------------------------------------


def assert_recovered(path, orig, old: int, new: int) -> int:
    """After a crash and a writer open: wholly `old` or wholly `new`; returns which."""
    StoreWriter.open(path, lock_timeout=10).close()  # recovery (roll forward or clean up)
    now = read_state(path)
    version = now.manifest.header_version
    assert version in (old, new)
    assert_same_store(orig, now, version, v2_fields_kept=1 not in (old, version))
    assert stray_files(path) == []  # no *.migrating, no *.tmp
    report = verify(path)
    assert report.ok, report.as_dict()
    return version


STAGES = ["converted", "intent", "some-renamed", "all-renamed", "committed"]


def _interrupted(path, stage: str, damage=None) -> list[str]:
    """Leave a v3 -> v1 migration of the store at `path` as a crash at `stage` would (the
    steps of section 9); `damage(files)`, called under the lock at the end, may spoil it.
    Returns the segment files."""
    m = mf.read_manifest(path)
    files = [s.file for s in m.segments]
    with WriterLock(path, 10):
        for s in m.segments:
            n = int(s.file[4:10])
            migration._write_converted(path, s, sg.SegmentReader(path / s.file, s.records),
                                       n, 1, m.dim)
        if stage != "converted":
            intent = dataclasses.replace(m, migration={"to": 1, "files": files}).next_generation()
            mf.write_manifest(path, intent)
            renamed = {"intent": 0, "some-renamed": 1}.get(stage, len(files))
            for f in files[:renamed]:
                os.replace(path / f, path / (f + ".bak"))
                os.replace(path / (f + ".migrating"), path / f)
            if stage == "some-renamed":  # the next file is half-way: original moved aside only
                os.replace(path / files[1], path / (files[1] + ".bak"))
            if stage == "committed":
                mf.write_manifest(path, dataclasses.replace(intent, header_version=1,
                                                            migration=None).next_generation())
        if damage is not None:
            damage(files)
    return files


@pytest.mark.parametrize("stage", STAGES)
def test_crash_at_each_step_of_the_protocol(tmp_path, stage):
    """The on-disk states a crash can leave, produced step by step as section 9 lists them."""
    path = tmp_path / "store"
    build_store(path, 900, header_version=3, seed=3, max_segment_records=300)
    orig = read_state(path)
    _interrupted(path, stage)
    # readers need no writer to come first: in "some-renamed" a segment is only under its
    # .bak and .migrating names, and every read command failed with "missing" until one did
    before = read_state(path)
    assert np.array_equal(before.ids, orig.ids) and verify(path).ok
    assert migration.plan(path, mf.read_manifest(path), 1).records == 900  # migrate --dry-run
    got = assert_recovered(path, orig, 3, 1)
    assert got == (3 if stage == "converted" else 1)


@pytest.mark.parametrize("stage", ["intent", "some-renamed"])
@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_an_interrupted_migration_with_a_bad_copy_is_undone(tmp_path, stage, damage):
    """A copy damaged or deleted after it was written (a disk error, a tmp cleaner): the next
    writer used to install it over the intact original, or commit the new version over a
    segment still in the old one. verify names it; the writer undoes the migration."""
    path = tmp_path / "store"
    build_store(path, 900, header_version=3, seed=3, max_segment_records=300)
    orig = read_state(path)

    def spoil(files):
        copy = path / (files[2] + ".migrating")  # not renamed yet in either stage
        if damage == "truncated":
            os.truncate(copy, copy.stat().st_size // 2)
        else:
            copy.unlink()
    _interrupted(path, stage, spoil)
    report = verify(path)
    assert not report.ok and "undoes the interrupted migration" in json.dumps(report.as_dict())
    assert assert_recovered(path, orig, 3, 1) == 3


def test_a_rollback_never_takes_a_bak_whose_records_do_not_check_out(tmp_path):
    """Rolling back, a `.bak` of the right header version was taken whatever it held (a stale
    or truncated one would have become the segment): neither version is whole, so the writer
    refuses, naming the file, and leaves every file as it is."""
    from store_format.errors import CorruptStore

    path = tmp_path / "store"
    build_store(path, 900, header_version=3, seed=3, max_segment_records=300)

    def spoil(files):
        for name in (files[1] + ".bak", files[2] + ".migrating"):  # half of each
            os.truncate(path / name, (path / name).stat().st_size // 2)
    files = _interrupted(path, "some-renamed", spoil)
    with pytest.raises(CorruptStore, match="neither finish"):
        StoreWriter.open(path, lock_timeout=10)
    assert not (path / files[1]).exists() and (path / (files[1] + ".bak")).exists()


MIGRATOR = """
import sys
from synapse_cli.commands import main
import store_format.migration, synapse_cli.engine.store, synapse_cli.engine.maintenance.verify  # noqa
print("ready", flush=True)
sys.stdin.readline()
main.run(["--store", sys.argv[1], "migrate", "--header", sys.argv[2], "--yes"])
"""


def _migrate_in_child(path, target: int, kill_after: float | None) -> tuple[float, int]:
    """Run the migration in a child whose imports are done; SIGKILL it `kill_after` seconds
    after it starts (None: let it finish). Returns (seconds it ran, returncode)."""
    child = spawn_python(MIGRATOR, path, f"v{target}")
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    t0 = time.monotonic()
    child.stdin.write("go\n")
    child.stdin.flush()
    if kill_after is not None:
        try:
            child.wait(timeout=kill_after)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: still running
            child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    return time.monotonic() - t0, child.returncode


def test_kill_9_during_migration(tmp_path):
    """20 migrations killed at random moments over the whole time they take (measured first),
    on single- and multi-segment stores, up- and downgrades; after each, a writer open leaves
    the old layout or the new one, never a mix, with every field intact."""
    rng = random.Random(20240604)
    kinds = {  # name -> (segment limit, source version, target version)
        "single-v3-to-v1": (None, 3, 1),
        "multi-v3-to-v1": (1000, 3, 1),
        "single-v1-to-v3": (None, 1, 3),
        "multi-v2-to-v3": (1000, 2, 3),
    }
    pristine, origs, durations = {}, {}, {}
    for name, (limit, src, dst) in kinds.items():
        p = tmp_path / f"pristine-{name}"
        build_store(p, 3000, header_version=src, seed=len(name), max_segment_records=limit)
        pristine[name], origs[name] = p, read_state(p)
        probe = tmp_path / f"probe-{name}"
        shutil.copytree(p, probe)
        durations[name], rc = _migrate_in_child(probe, dst, None)
        assert rc == 0
        assert read_state(probe).manifest.header_version == dst

    outcomes = []
    trials = 20
    for trial in range(trials):
        name = list(kinds)[trial % len(kinds)]
        limit, src, dst = kinds[name]
        path = tmp_path / f"trial-{trial}"
        shutil.copytree(pristine[name], path)
        # Stratified over [0, 1.1 x duration]: every phase gets hit, early and late included.
        lo, hi = trial / trials, (trial + 1) / trials
        delay = rng.uniform(lo, hi) * 1.1 * durations[name]
        _, rc = _migrate_in_child(path, dst, delay)
        pre = sorted(os.listdir(path))
        mid = any(n.endswith(".migrating") for n in pre) or \
            mf.read_manifest(path, check_files=False).migration is not None
        got = assert_recovered(path, origs[name], src, dst)
        outcomes.append((name, round(delay, 3), rc, mid, got))
        shutil.rmtree(path)

    print("\nkill -9 trials (kind, delay s, returncode, left mid-migration state, version):")
    for o in outcomes:
        print("  ", o)
    print("durations:", {k: round(v, 3) for k, v in durations.items()})
    killed = [o for o in outcomes if o[2] == -signal.SIGKILL]
    assert len(killed) >= trials // 2
    assert any(o[4] == kinds[o[0]][1] for o in killed)  # some ended wholly old ...
    assert any(o[4] == kinds[o[0]][2] for o in outcomes)  # ... and some wholly new


def test_a_failure_after_the_intent_says_committed_and_the_next_writer_finishes(tmp_path,
                                                                                 monkeypatch):
    """Past the roll-forward intent the migration is committed (FORMAT.md 9): the error says
    so rather than "failed", and the next writer finishes it with every record intact."""
    path = tmp_path / "store"
    build_store(path, 300, header_version=3, seed=5)
    orig = read_state(path)
    real_replace = os.replace

    def refuse_renames_into_place(src, dst):
        if str(src).endswith(".migrating"):
            raise PermissionError(1, "Operation not permitted", str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(migration.os, "replace", refuse_renames_into_place)
    with pytest.raises(Exception) as info:
        with StoreWriter.open(path) as w:
            migration.migrate(w.path, w.manifest, 2)
    assert "committed but not finished" in str(info.value)
    monkeypatch.setattr(migration.os, "replace", real_replace)
    with StoreWriter.open(path):
        pass  # any writer rolls forward
    after = read_state(path)
    assert after.file_versions == [2] and list(after.ids) == list(orig.ids)
    assert verify(path).ok
