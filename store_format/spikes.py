"""`spikes.log` (docs/FORMAT.md section 15): the spike train of each record.

A record's first spike is its header timestamp; this log holds the later ones, one 24-byte entry
each (a recall that returned the record, or a stimulus that reached it in `--mode synaptic`).
Append-only under the commit rule; readers keep the last `MAX_PER_RECORD` spikes of a record,
and a writer rewrites the log to just those when it has grown past `needs_rewrite`, so the file
stays bounded by the number of records, not of recalls.
"""
from __future__ import annotations

import numpy as np

from . import entrylog, fileheader

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
    return entrylog.sign(e)


def create(path) -> None:
    entrylog.create(path, MAGIC)


def _invalid(e: np.ndarray) -> np.ndarray:
    return ((e["record_id"] == 0) | ~np.isin(e["kind"], (RECALL, STIMULUS))
            | (e["reserved"] != 0) | (e["reserved2"] != 0))


def read(path, entries: int) -> np.ndarray:
    """The first `entries` entries, every one checked; typed errors name path and offset."""
    return entrylog.read(path, entries, ENTRY_DTYPE, MAGIC, WHAT, _invalid)


def append(path, committed: int, entries: np.ndarray) -> int:
    """Append after `committed` entries (a longer, uncommitted tail is cut first), fsync."""
    return entrylog.append(path, committed, entries)


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
    entrylog.write(path, MAGIC, entries)


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
