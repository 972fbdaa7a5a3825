"""`ingest.idx` (docs/FORMAT.md section 12): MD5 and session key per ingested record.

Loaded whole with one vectorised CRC pass, so `ingest` can deduplicate and find the last record
of a session in a 10k-record store in milliseconds.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from . import fileheader, fileio
from .crc32c import crc32c_rows
from .errors import ChecksumMismatch, InvalidRecord, Truncated

NAME = "ingest.idx"
MAGIC = b"SYNINGST"
VERSION = 1
HEADER_SIZE = 16
ENTRY_DTYPE = np.dtype([("md5", "V16"), ("record_id", "<u8"), ("session", "<u8"),
                        ("reserved", "<u4"), ("crc", "<u4")])
assert ENTRY_DTYPE.itemsize == 40


def session_key(session: str | None, source: str | None) -> int:
    if session:
        key = "session:" + session
    elif source:
        key = "source:" + source
    else:
        return 0
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def _file_header() -> bytes:
    return fileheader.pack(MAGIC, VERSION)


def make_entries(md5s: list[bytes], record_ids, sessions) -> np.ndarray:
    e = np.zeros(len(md5s), ENTRY_DTYPE)
    if len(md5s):
        e["md5"] = np.frombuffer(b"".join(md5s), "V16")
        e["record_id"] = record_ids
        e["session"] = sessions
        e["crc"] = crc32c_rows(e.view(np.uint8).reshape(len(e), 40)[:, :36])
    return e


def create(path) -> None:
    fileio.atomic_replace(path, _file_header())


def read(path, entries: int) -> np.ndarray:
    """The first `entries` entries, every one checked; typed errors name path and offset."""
    path = str(path)
    fd = fileio.open_for_read(path)
    try:
        fileheader.check(os.pread(fd, HEADER_SIZE, 0), MAGIC, path, "ingest index", VERSION)
        size = os.fstat(fd).st_size
        end = HEADER_SIZE + 40 * entries
        if size < end:
            raise Truncated(f"{size} bytes, {entries} committed entries need {end}", path, size)
        data = os.pread(fd, end - HEADER_SIZE, HEADER_SIZE) if entries else b""
    finally:
        os.close(fd)
    e = np.frombuffer(data, ENTRY_DTYPE)
    if len(e):
        rows = e.view(np.uint8).reshape(len(e), 40)
        bad_crc = crc32c_rows(np.ascontiguousarray(rows[:, :36])) != e["crc"]
        ids = e["record_id"]
        bad = bad_crc | (ids == 0) | (e["reserved"] != 0)
        bad[1:] |= ids[1:] <= ids[:-1]
        if bad.any():
            i = int(np.argmax(bad))
            cls = ChecksumMismatch if bad_crc[i] else InvalidRecord
            raise cls(f"ingest index entry {i} is damaged", path, HEADER_SIZE + 40 * i)
    return e


def append(path, committed: int, entries: np.ndarray) -> int:
    """Append after `committed` entries (a longer tail is truncated first), fsync."""
    path = str(path)
    fd = fileio.open_for_append(path)
    try:
        end = HEADER_SIZE + 40 * committed
        if os.fstat(fd).st_size < end:
            raise Truncated(f"shorter than {committed} committed entries", path, end)
        fileio.truncate(fd, end, path)
        fileio.pwrite_all(fd, entries.tobytes(), end, path)
        fileio.fsync_fd(fd, path)
    finally:
        os.close(fd)
    return committed + len(entries)


def exists(store_dir) -> bool:
    return (Path(store_dir) / NAME).exists()
