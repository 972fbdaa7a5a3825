"""Files of fixed-size entries after a 16-byte file header (fileheader.py), each entry ending in
the CRC32C of its other bytes: the ingest index (FORMAT.md 12), the spike log (15) and the
dormancy state (16). Reading checks the header, the committed length and every entry; the
caller adds the checks of its own fields.
"""
from __future__ import annotations

import os
from typing import Callable

import numpy as np

from . import fileheader, fileio
from .crc32c import crc32c_rows
from .errors import ChecksumMismatch, InvalidRecord, Truncated


def _rows(e: np.ndarray) -> np.ndarray:
    return e.view(np.uint8).reshape(len(e), e.dtype.itemsize)


def sign(e: np.ndarray) -> np.ndarray:
    """Set the last field (`crc`) of every entry to the CRC32C of the bytes before it."""
    if len(e):
        e["crc"] = crc32c_rows(_rows(e)[:, :-4])
    return e


def create(path, magic: bytes) -> None:
    fileio.atomic_replace(path, fileheader.pack(magic))


def write(path, magic: bytes, entries: np.ndarray) -> None:
    """A new file holding exactly `entries` (temp file, fsync, rename, directory fsync)."""
    fileio.atomic_replace(path, fileheader.pack(magic) + entries.tobytes())


def read(path, entries: int, dtype: np.dtype, magic: bytes, what: str,
         invalid: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """The first `entries` entries; `invalid(e)` marks entries whose fields are wrong. Typed
    errors name the file and the offset of the header or of the first bad entry."""
    path, size_e = str(path), dtype.itemsize
    fd = fileio.open_for_read(path)
    try:
        fileheader.check(os.pread(fd, fileheader.SIZE, 0), magic, path, what)
        size, end = os.fstat(fd).st_size, fileheader.SIZE + size_e * entries
        if size < end:
            raise Truncated(f"{size} bytes, {entries} committed entries need {end}", path, size)
        data = os.pread(fd, end - fileheader.SIZE, fileheader.SIZE) if entries else b""
    finally:
        os.close(fd)
    e = np.frombuffer(data, dtype)
    if len(e):
        bad_crc = crc32c_rows(np.ascontiguousarray(_rows(e)[:, :-4])) != e["crc"]
        bad = bad_crc | (invalid(e) if invalid is not None else False)
        if bad.any():
            i = int(np.argmax(bad))
            cls = ChecksumMismatch if bad_crc[i] else InvalidRecord
            raise cls(f"{what} entry {i} is damaged", path, fileheader.SIZE + size_e * i)
    return e


def append(path, committed: int, entries: np.ndarray) -> int:
    """Append after `committed` entries (a longer, uncommitted tail is cut first), fsync;
    returns the new count."""
    path, end = str(path), fileheader.SIZE + entries.dtype.itemsize * committed
    fd = fileio.open_for_append(path)
    try:
        if os.fstat(fd).st_size < end:
            raise Truncated(f"shorter than {committed} committed entries", path, end)
        fileio.truncate(fd, end, path)
        fileio.pwrite_all(fd, entries.tobytes(), end, path)
        fileio.fsync_fd(fd, path)
    finally:
        os.close(fd)
    return committed + len(entries)


def increasing(ids: np.ndarray) -> np.ndarray:
    """Mask of ids that are 0 or not greater than the one before (for `invalid`)."""
    bad = ids == 0
    bad[1:] |= ids[1:] <= ids[:-1]
    return bad
