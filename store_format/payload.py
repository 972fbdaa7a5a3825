"""payload.log: text and metadata per record, docs/FORMAT.md section 6.

A 16-byte file header, then entries `[N u32][record_id u64][N bytes UTF-8 JSON][CRC32C]`.
A record's trailer points at its current entry with (offset, length = 16 + N).
Only the committed prefix (the manifest's `payload.bytes`) is ever read; a writer truncates the
tail past it before appending.
"""
from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from . import fileheader
from .crc32c import crc32c
from .errors import ChecksumMismatch, InvalidRecord, StoreIOError, Truncated
from .fileio import FILE_MODE, fsync_dir, fsync_fd, pwrite_all, truncate

MAGIC = b"SYNPAYLD"
FORMAT_VERSION = 1
FILE_HEADER_BYTES = 16
ENTRY_OVERHEAD = 16  # length + record id + CRC
MAX_BODY = 16 * 1024 * 1024
FILE_NAME = "payload.log"


def pack_file_header() -> bytes:
    return fileheader.pack(MAGIC, FORMAT_VERSION)


def check_file_header(buf: bytes, path: str | None = None) -> None:
    fileheader.check(bytes(buf[:FILE_HEADER_BYTES]), MAGIC, path, "payload log", FORMAT_VERSION)


def encode_body(body: dict) -> bytes:
    """Compact UTF-8 JSON (stdlib json, ensure_ascii=False, no NaN) of a dict with str `text`."""
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise ValueError("payload body must be a dict with a string 'text'")
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")
    if len(data) > MAX_BODY:
        raise ValueError(f"payload body of {len(data)} bytes exceeds {MAX_BODY}")
    return data


def pack_entry(record_id: int, body: dict) -> bytes:
    """One entry's bytes, CRC included."""
    if not 1 <= record_id < 2**64:
        raise ValueError(f"record id {record_id} not in 1 .. 2^64-1")
    data = encode_body(body)
    head = len(data).to_bytes(4, "little") + record_id.to_bytes(8, "little") + data
    return head + crc32c(head).to_bytes(4, "little")


def _check_committed(committed_bytes: int, size: int, path: str) -> int:
    if not isinstance(committed_bytes, int) or committed_bytes < FILE_HEADER_BYTES:
        raise InvalidRecord(f"committed payload length {committed_bytes!r} is below "
                            f"{FILE_HEADER_BYTES}", path=path)
    if size < committed_bytes:
        raise Truncated(f"file has {size} bytes, {committed_bytes} are committed",
                        path=path, offset=size)
    return committed_bytes


def _open(path, writable: bool) -> int:
    try:
        return os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), path=str(path)) from exc


def _decode_body(data: bytes, path: str, offset: int) -> dict:
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRecord(f"payload body is not UTF-8 JSON ({exc})", path=path,
                            offset=offset) from None
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise InvalidRecord("payload body is not a JSON object with a string 'text'",
                            path=path, offset=offset)
    return body


def _parse_at(buf, pos: int, committed: int, path: str) -> tuple[int, int, dict]:
    """Parse the entry at `pos` of the committed prefix `buf`: (record_id, length, body)."""
    if pos + 4 > committed:
        raise Truncated("entry length field runs past the committed length", path=path,
                        offset=pos)
    n = int.from_bytes(buf[pos:pos + 4], "little")
    if n > MAX_BODY:
        raise InvalidRecord(f"entry body length {n} exceeds {MAX_BODY}", path=path, offset=pos)
    end = pos + ENTRY_OVERHEAD + n
    if end > committed:
        raise Truncated(f"entry of {n + ENTRY_OVERHEAD} bytes runs past the committed length "
                        f"{committed}", path=path, offset=pos)
    if crc32c(buf[pos:end - 4]) != int.from_bytes(buf[end - 4:end], "little"):
        raise ChecksumMismatch("payload entry CRC mismatch", path=path, offset=pos)
    record_id = int.from_bytes(buf[pos + 4:pos + 12], "little")
    body = _decode_body(bytes(buf[pos + 12:end - 4]), path, pos + 12)
    return record_id, n + ENTRY_OVERHEAD, body


def _check_pointer(offset: int, length: int, committed: int, path: str) -> None:
    if (offset < FILE_HEADER_BYTES or length < ENTRY_OVERHEAD
            or offset > committed or length > committed - offset):
        raise InvalidRecord(f"payload pointer ({offset}, {length}) lies outside the committed "
                            f"payload log of {committed} bytes", path=path, offset=offset)


def _check_entry(buf, offset: int, length: int, record_id: int, committed: int,
                 path: str) -> dict:
    _check_pointer(offset, length, committed, path)
    n = int.from_bytes(buf[offset:offset + 4], "little")
    if n + ENTRY_OVERHEAD != length:
        raise InvalidRecord(f"entry length {n + ENTRY_OVERHEAD} differs from the record's "
                            f"pointer length {length}", path=path, offset=offset)
    found, _, body = _parse_at(buf, offset, offset + length, path)
    if found != record_id:
        raise InvalidRecord(f"entry belongs to record {found}, not {record_id}", path=path,
                            offset=offset + 4)
    return body


def create_payload_log(path, overwrite: bool = False) -> None:
    """Create an empty payload log (header only), mode 0600, no symlink; fsync file and dir."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), path=str(path)) from exc
    try:
        pwrite_all(fd, pack_file_header(), 0, path)
        fsync_fd(fd, path)
    finally:
        os.close(fd)
    fsync_dir(Path(path).parent)


def read_entry(path, offset: int, length: int, record_id: int, committed_bytes: int) -> dict:
    """Read and fully validate the entry a record points to; returns its body.

    Raises InvalidRecord (pointer out of bounds, length or record id mismatch, bad body),
    ChecksumMismatch, Truncated, each naming `path` and the entry's offset.
    """
    path = str(path)
    fd = _open(path, writable=False)
    try:
        committed = _check_committed(committed_bytes, os.fstat(fd).st_size, path)
        _check_pointer(offset, length, committed, path)
        data = os.pread(fd, length, offset)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), path=path, offset=offset) from exc
    finally:
        os.close(fd)
    # Parse the entry as a buffer of its own, shifted back to file offsets for messages.
    return _check_entry(_Shifted(data, offset), offset, length, record_id, committed, path)


class _Shifted:
    """Bytes `data` addressed as if they started at file offset `base`."""

    def __init__(self, data: bytes, base: int):
        self.data, self.base = data, base

    def __getitem__(self, s: slice) -> bytes:
        return self.data[s.start - self.base:s.stop - self.base]


@dataclass(frozen=True)
class PayloadEntry:
    offset: int
    length: int
    record_id: int
    body: dict


class PayloadReader:
    """Read-only map of the committed prefix of payload.log (file header checked on open)."""

    def __init__(self, path, committed_bytes: int):
        self.path = str(path)
        fd = _open(path, writable=False)
        try:
            self.committed = _check_committed(committed_bytes, os.fstat(fd).st_size, self.path)
            self._map = mmap.mmap(fd, self.committed, prot=mmap.PROT_READ)
        except OSError as exc:
            raise StoreIOError(exc.strerror or str(exc), path=self.path) from exc
        finally:
            os.close(fd)
        check_file_header(self._map[:FILE_HEADER_BYTES], self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._map.close()

    def read(self, offset: int, length: int, record_id: int) -> dict:
        """Body of the entry at (offset, length), which must belong to `record_id`."""
        return _check_entry(self._map, offset, length, record_id, self.committed, self.path)

    def entries(self) -> Iterator[PayloadEntry]:
        """Every entry of the committed prefix, in file order, each validated."""
        pos = FILE_HEADER_BYTES
        while pos < self.committed:
            record_id, length, body = _parse_at(self._map, pos, self.committed, self.path)
            yield PayloadEntry(pos, length, record_id, body)
            pos += length


def verify_payload(path, committed_bytes: int) -> int:
    """Check the file header and every entry up to the committed length; return the count."""
    with PayloadReader(path, committed_bytes) as reader:
        return sum(1 for _ in reader.entries())


class PayloadWriter:
    """Appends entries after the committed prefix (`committed_bytes`, from the manifest)."""

    def __init__(self, path, committed_bytes: int):
        self.path = str(path)
        self.fd = _open(path, writable=True)
        try:
            check_file_header(os.pread(self.fd, FILE_HEADER_BYTES, 0), self.path)
            self.length = _check_committed(committed_bytes, os.fstat(self.fd).st_size,
                                           self.path)
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def append(self, entries: Iterable[tuple[int, dict]]) -> list[tuple[int, int]]:
        """Append (record_id, body) entries, fsync; return (offset, length) per entry.

        All entries are encoded (and checked) before anything is written; the tail past the
        committed length is truncated first. `self.length` becomes the new end of file, which
        the caller commits in the manifest.
        """
        blobs = [pack_entry(int(rid), body) for rid, body in entries]
        pointers, pos = [], self.length
        for blob in blobs:
            pointers.append((pos, len(blob)))
            pos += len(blob)
        truncate(self.fd, self.length, self.path)
        if blobs:
            pwrite_all(self.fd, b"".join(blobs), self.length, self.path)
        fsync_fd(self.fd, self.path)
        self.length = pos
        return pointers
