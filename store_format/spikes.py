"""`spikes.log` (docs/FORMAT.md section 15): the spike train of each record.

A record's first spike is its header timestamp; this log holds the later ones, one 24-byte entry
each (a recall that returned the record, or a stimulus that reached it in `--mode synaptic`).
Append-only under the commit rule; readers keep the last `MAX_PER_RECORD` spikes of a record,
and a writer rewrites the log to just those when it has grown past `needs_rewrite`, so the file
stays bounded by the number of records, not of recalls.
"""
from __future__ import annotations

import os

import numpy as np

from . import fileheader, fileio
from .crc32c import crc32c_rows
from .errors import ChecksumMismatch, InvalidRecord, Truncated

NAME = "spikes.log"
MAGIC = b"SYNSPIKE"
WHAT = "spike log"
HEADER_SIZE = fileheader.SIZE
ENTRY_DTYPE = np.dtype([("record_id", "<u8"), ("time_ms", "<i8"), ("kind", "u1"),
                        ("reserved", "u1"), ("reserved2", "<u2"), ("crc", "<u4")])
ENTRY_SIZE = ENTRY_DTYPE.itemsize
assert ENTRY_SIZE == 24
RECALL, STIMULUS = 1, 2      # entry kinds
MAX_PER_RECORD = 16          # extra spikes kept per record (the timestamp is always the first)


def make_entries(record_ids, time_ms: int, kind: int = RECALL) -> np.ndarray:
    e = np.zeros(len(record_ids), ENTRY_DTYPE)
    if len(e):
        e["record_id"] = np.asarray(record_ids, np.uint64)
        e["time_ms"] = time_ms
        e["kind"] = kind
        e["crc"] = crc32c_rows(e.view(np.uint8).reshape(len(e), ENTRY_SIZE)[:, :20])
    return e


def create(path) -> None:
    fileio.atomic_replace(path, fileheader.pack(MAGIC))


def read(path, entries: int) -> np.ndarray:
    """The first `entries` entries, every one checked; typed errors name path and offset."""
    path = str(path)
    fd = fileio.open_for_read(path)
    try:
        fileheader.check(os.pread(fd, HEADER_SIZE, 0), MAGIC, path, WHAT)
        size, end = os.fstat(fd).st_size, HEADER_SIZE + ENTRY_SIZE * entries
        if size < end:
            raise Truncated(f"{size} bytes, {entries} committed entries need {end}", path, size)
        data = os.pread(fd, end - HEADER_SIZE, HEADER_SIZE) if entries else b""
    finally:
        os.close(fd)
    e = np.frombuffer(data, ENTRY_DTYPE)
    if len(e):
        rows = e.view(np.uint8).reshape(len(e), ENTRY_SIZE)
        bad_crc = crc32c_rows(np.ascontiguousarray(rows[:, :20])) != e["crc"]
        bad = (bad_crc | (e["record_id"] == 0) | ~np.isin(e["kind"], (RECALL, STIMULUS))
               | (e["reserved"] != 0) | (e["reserved2"] != 0))
        if bad.any():
            i = int(np.argmax(bad))
            cls = ChecksumMismatch if bad_crc[i] else InvalidRecord
            raise cls(f"spike log entry {i} is damaged", path, HEADER_SIZE + ENTRY_SIZE * i)
    return e


def append(path, committed: int, entries: np.ndarray) -> int:
    """Append after `committed` entries (a longer, uncommitted tail is cut first), fsync."""
    path = str(path)
    fd = fileio.open_for_append(path)
    try:
        end = HEADER_SIZE + ENTRY_SIZE * committed
        if os.fstat(fd).st_size < end:
            raise Truncated(f"shorter than {committed} committed entries", path, end)
        fileio.truncate(fd, end, path)
        fileio.pwrite_all(fd, entries.tobytes(), end, path)
        fileio.fsync_fd(fd, path)
    finally:
        os.close(fd)
    return committed + len(entries)


def latest(entries: np.ndarray, keep=None) -> np.ndarray:
    """The entries a reader uses: per record the last MAX_PER_RECORD in log order, and only
    records for which `keep(ids)` (a boolean mask function) holds; in log order."""
    if not len(entries):
        return entries
    ids = entries["record_id"]
    # rank of each entry among the later entries of its record: 0 = the newest
    order = np.lexsort((-np.arange(len(ids)), ids))
    sorted_ids = ids[order]
    starts = np.r_[0, np.nonzero(sorted_ids[1:] != sorted_ids[:-1])[0] + 1]
    rank = np.arange(len(ids)) - np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
    mask = np.zeros(len(ids), bool)
    mask[order[rank < MAX_PER_RECORD]] = True
    if keep is not None:
        mask &= keep(ids)
    return entries[mask]


def needs_rewrite(n_entries: int, n_kept: int) -> bool:
    """Rewrite when at least three quarters of the log are spikes no reader would use."""
    return n_entries > 4 * n_kept + 4096


def write(path, entries: np.ndarray) -> None:
    """A new spike log holding exactly `entries` (temp file, fsync, rename, directory fsync)."""
    fileio.atomic_replace(path, fileheader.pack(MAGIC) + entries.tobytes())


def trains(entries: np.ndarray, ids: np.ndarray, timestamps: np.ndarray):
    """Spike trains by record position: (indptr int64[n+1], times_ms int64[m]).

    `ids` (u64, increasing) and `timestamps` are the records in position order; each train is
    the record's timestamp, then its logged spikes (the last MAX_PER_RECORD), ascending."""
    n = len(ids)
    e = latest(entries)
    pos = np.searchsorted(ids, e["record_id"]) if len(e) else np.zeros(0, np.int64)
    ok = pos < n
    ok[ok] = ids[pos[ok]] == e["record_id"][ok]
    pos, t = pos[ok], e["time_ms"][ok]
    all_pos = np.concatenate([np.arange(n), pos])
    all_t = np.concatenate([np.asarray(timestamps, np.int64), t])
    order = np.lexsort((all_t, all_pos))
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(all_pos, minlength=n), out=indptr[1:])
    return indptr, all_t[order]
