"""`dormancy-G.dat` (docs/FORMAT.md section 16): the dormancy state of semantic nodes.

Seed 000 section 3.1: a node whose activation stays below epsilon for W consolidation windows
is archived out of the active graph. Per node this file holds how many windows in a row it was
observed below epsilon, the recall_count it had when last observed (a recall since then counts
as activity) and whether it is archived. Written whole for each commit that changes it, under a
new name (G = the generation of the committing manifest), and named by the manifest; so the
state a reader sees is always the one of the windows that manifest commits.
"""
from __future__ import annotations

import os

import numpy as np

from . import fileheader, fileio
from .crc32c import crc32c_rows
from .errors import ChecksumMismatch, InvalidRecord, Truncated

NAME = "dormancy.dat"
MAGIC = b"SYNDORMA"
WHAT = "dormancy file"
HEADER_SIZE = fileheader.SIZE
ENTRY_DTYPE = np.dtype([("record_id", "<u8"), ("recall_seen", "<u4"), ("low_windows", "<u2"),
                        ("archived", "u1"), ("reserved", "u1"), ("crc", "<u4")])
ENTRY_SIZE = ENTRY_DTYPE.itemsize
assert ENTRY_SIZE == 20


def make_entries(record_ids, recall_seen, low_windows, archived) -> np.ndarray:
    """Entries sorted by record id, each CRC'd."""
    order = np.argsort(np.asarray(record_ids, np.uint64), kind="stable")
    e = np.zeros(len(order), ENTRY_DTYPE)
    if len(e):
        e["record_id"] = np.asarray(record_ids, np.uint64)[order]
        e["recall_seen"] = np.minimum(np.asarray(recall_seen, np.int64)[order], 2**32 - 1)
        e["low_windows"] = np.minimum(np.asarray(low_windows, np.int64)[order], 2**16 - 1)
        e["archived"] = np.asarray(archived, bool)[order]
        e["crc"] = crc32c_rows(e.view(np.uint8).reshape(len(e), ENTRY_SIZE)[:, :16])
    return e


def write(path, entries: np.ndarray) -> None:
    """A new dormancy file holding exactly `entries` (temp file, fsync, rename, dir fsync)."""
    fileio.atomic_replace(path, fileheader.pack(MAGIC) + entries.tobytes())


def read(path, entries: int) -> np.ndarray:
    """The `entries` entries, every one checked; typed errors name path and offset."""
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
        bad_crc = crc32c_rows(np.ascontiguousarray(rows[:, :16])) != e["crc"]
        ids = e["record_id"]
        unordered = np.zeros(len(e), bool)
        unordered[1:] = ids[1:] <= ids[:-1]
        bad = (bad_crc | (ids == 0) | unordered | (e["archived"] > 1) | (e["reserved"] != 0))
        if bad.any():
            i = int(np.argmax(bad))
            cls = ChecksumMismatch if bad_crc[i] else InvalidRecord
            raise cls(f"dormancy entry {i} is damaged or out of order", path,
                      HEADER_SIZE + ENTRY_SIZE * i)
    return e


def archived_ids(store_dir, ref: dict | None) -> np.ndarray:
    """Record ids (u64, increasing) the committed dormancy state `ref` archives."""
    if ref is None:
        return np.zeros(0, np.uint64)
    e = read(os.path.join(store_dir, ref["file"]), ref["entries"])
    return e["record_id"][e["archived"] == 1].copy()
