"""The spike log (FORMAT.md section 15): written by recall touches, bounded, checked by readers
and `inspect verify`, carried through compaction without the spikes of removed records."""
from __future__ import annotations

import dataclasses

import pytest

from store_format import compaction
from store_format import flags as fl
from store_format import manifest as mf
from store_format import spikes as sp
from store_format.errors import ChecksumMismatch, InvalidRecord
from synapse_cli.engine import graphview
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.maintenance.verify import verify

from conftest import build_store

T = 1_800_000_000_000


def spike(path, ids, t):
    with StoreWriter.open(path) as w:
        w.add_spikes(ids, t)
        w.commit()


def test_trains_start_with_the_timestamp_and_keep_the_newest(tmp_path):
    b = build_store(tmp_path / "st", 5)
    a, c = b.ids[0], b.ids[2]
    for i in range(sp.MAX_PER_RECORD + 3):  # three more than a reader keeps
        spike(b.path, [a], T + i)
    spike(b.path, [c], T - 5)
    with Store.open(b.path) as s:
        arrays = graphview.build(s)
        indptr, times = arrays.spike_trains()
        ts = arrays.timestamps
    train_a = times[indptr[0]:indptr[1]].tolist()
    assert train_a == [int(ts[0])] + [T + i for i in range(3, sp.MAX_PER_RECORD + 3)]
    assert times[indptr[2]:indptr[3]].tolist() == sorted([int(ts[2]), T - 5])
    assert [int(indptr[i + 1] - indptr[i]) for i in (1, 3, 4)] == [1, 1, 1]


def test_touch_stages_a_recall_spike_per_found_record(tmp_path):
    b = build_store(tmp_path / "st", 4)
    with StoreWriter.open(b.path) as w:
        w.touch([b.ids[1], 10**9], time_ms=T)  # an id compacted away gets no spike
        w.commit()
    with Store.open(b.path) as s:
        e = s.spike_entries()
        assert e["record_id"].tolist() == [b.ids[1]] and e["time_ms"].tolist() == [T]
        assert e["kind"].tolist() == [sp.RECALL]
        assert s.header(b.ids[1]).recall_count == b.mems[1].recall_count + 1


def test_log_is_rewritten_when_mostly_unused(tmp_path):
    b = build_store(tmp_path / "st", 3)
    batch = [b.ids[0]] * 3000
    spike(b.path, batch, T)
    spike(b.path, batch, T + 1)  # 6000 entries > 4 * 16 + 4096: rewritten to the 16 it keeps
    with Store.open(b.path) as s:
        m = s.manifest
        assert m.spikes["entries"] == sp.MAX_PER_RECORD
        assert m.spikes["file"] == mf.generation_name(mf.SPIKES_NAME, m.generation)
    assert not (b.path / mf.SPIKES_NAME).exists()  # the old log is deleted after the commit
    assert verify(b.path).ok


def test_damaged_entry_is_named_by_file_and_offset(tmp_path):
    b = build_store(tmp_path / "st", 3)
    spike(b.path, b.ids, T)
    path = b.path / mf.SPIKES_NAME
    data = bytearray(path.read_bytes())
    data[16 + 24 + 9] ^= 0xFF  # the time of entry 1
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch) as err:
        sp.read(path, 3)
    assert err.value.offset == 16 + 24 and str(path) in str(err.value)
    report = verify(b.path)
    assert not report.ok and report.problems[0].file == mf.SPIKES_NAME


def test_kind_is_checked(tmp_path):
    path = tmp_path / mf.SPIKES_NAME
    e = sp.make_entries([1, 2], T, kind=3)  # correctly signed, but no such kind
    sp.write(path, e)
    with pytest.raises(InvalidRecord) as err:
        sp.read(path, 2)
    assert err.value.offset == 16


def test_uncommitted_tail_is_cut_before_the_next_append(tmp_path):
    path = tmp_path / mf.SPIKES_NAME
    sp.create(path)
    n = sp.append(path, 0, sp.make_entries([1], T))
    with open(path, "ab") as f:
        f.write(b"torn tail")
    n = sp.append(path, n, sp.make_entries([2], T + 1))
    assert sp.read(path, n)["record_id"].tolist() == [1, 2]
    assert path.stat().st_size == 16 + 2 * 24


def test_compaction_keeps_spikes_of_kept_records_only(tmp_path):
    b = build_store(tmp_path / "st", 6)
    spike(b.path, b.ids, T)
    gone = b.ids[2]
    with StoreWriter.open(b.path) as w:
        w.set_flags({gone: fl.set_flag(int(w.header(gone).flags), fl.TOMBSTONE)})
        res = compaction.compact(w.path, w.manifest)
    with Store.open(b.path) as s:
        kept = s.ids.tolist()
        assert gone not in kept and s.spike_entries()["record_id"].tolist() == kept
    assert res.manifest.spikes["entries"] == len(kept) == res.kept
    assert verify(b.path).ok


def test_manifest_rejects_a_foreign_spike_file_name(tmp_path):
    b = build_store(tmp_path / "st", 2)
    spike(b.path, b.ids, T)
    m = dataclasses.replace(mf.read_manifest(b.path), spikes={"file": "spikes.bin", "entries": 2})
    with pytest.raises(ValueError, match="spikes.file"):  # the encoder checks like a reader
        mf.encode_manifest(m)
