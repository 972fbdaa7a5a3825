"""Segment files `seg-NNNNNN.dat`, docs/FORMAT.md section 3.

A 64-byte file header, then fixed-stride records: header (section 4) + int8 vector + 24-byte
trailer (record_id, payload_offset, payload_length, CRC32C of bytes 0 .. stride-4).

Readers map only the committed prefix (the record count the manifest names) and only after the
file header, the stride and the file length have been checked, so no count or offset read from
disk reaches an array constructor unvalidated. `verify_segment` checks every record.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import headers as hdr
from .crc32c import crc32c, crc32c_rows
from .errors import (BadMagic, ChecksumMismatch, InvalidRecord, StoreIOError, Truncated,
                     UnsupportedVersion)
from .fileio import FILE_MODE, fsync_dir, fsync_fd, pwrite_all, truncate

MAGIC = b"SYNAPSEG"
FORMAT_VERSION = 1
VECTOR_INT8 = 1
FILE_HEADER_BYTES = 64
TRAILER_BYTES = 24
MAX_RECORDS = 262_144
MAX_DIM = 4096
MIN_PAYLOAD_ENTRY = 16  # payload.log entry overhead: length, record id, CRC
PAYLOAD_FILE_HEADER = 16
_CRC_BLOCK_ROWS = 2048  # rows per crc32c_rows call: keeps the column-wise pass in cache
_CRC_SCALAR_ROWS = 16  # up to this many rows, the byte loop per row is faster
_NAME_RE = re.compile(r"^seg-(\d{6})\.dat$")


def segment_number(name: str) -> int:
    """NNNNNN of a manifest-validated `seg-NNNNNN.dat` name."""
    m = _NAME_RE.match(name)
    if m is None:
        raise ValueError(f"not a segment file name: {name!r}")
    return int(m.group(1))


def segment_file_name(number: int) -> str:
    return f"seg-{number:06d}.dat"


def record_stride(version: int, dim: int) -> int:
    """Bytes per record: header bytes + dim + 24."""
    return hdr.HEADER_BYTES[hdr.check_version(version)] + int(dim) + TRAILER_BYTES


def record_dtype(version: int, dim: int) -> np.dtype:
    """Structured dtype of one whole record (itemsize = stride): header fields, `vector`
    (int8, (dim,)), `record_id`, `payload_offset`, `payload_length`, `crc`."""
    hb = hdr.HEADER_BYTES[hdr.check_version(version)]
    fields = hdr.header_fields(version) + [
        ("vector", ("i1", (dim,)), hb),
        ("record_id", "<u8", hb + dim),
        ("payload_offset", "<u8", hb + dim + 8),
        ("payload_length", "<u4", hb + dim + 16),
        ("crc", "<u4", hb + dim + 20),
    ]
    return np.dtype({"names": [f[0] for f in fields], "formats": [f[1] for f in fields],
                     "offsets": [f[2] for f in fields], "itemsize": record_stride(version, dim)})


# ---------------------------------------------------------------------------------------------
# File header


@dataclass(frozen=True)
class SegmentHeader:
    header_version: int
    dim: int
    segment_number: int
    created_ms: int = 0

    @property
    def header_bytes(self) -> int:
        return hdr.HEADER_BYTES[self.header_version]

    @property
    def stride(self) -> int:
        return record_stride(self.header_version, self.dim)

    def record_offset(self, index: int) -> int:
        return FILE_HEADER_BYTES + index * self.stride


_FH = np.dtype({
    "names": ["magic", "format_version", "header_version", "vector_encoding", "dim",
              "header_bytes", "stride", "segment_number", "created_ms", "reserved", "crc"],
    "formats": ["S8", "<u2", "u1", "u1", "<u2", "<u2", "<u4", "<u4", "<u8", ("u1", (28,)), "<u4"],
    "offsets": [0, 8, 10, 11, 12, 14, 16, 20, 24, 32, 60],
    "itemsize": FILE_HEADER_BYTES,
})


def pack_segment_header(h: SegmentHeader) -> bytes:
    """The 64 bytes of a segment file header, CRC included."""
    hdr.check_version(h.header_version)
    if not 1 <= h.dim <= MAX_DIM or not 0 <= h.segment_number < 2**32 or h.created_ms < 0:
        raise ValueError(f"bad segment header values {h}")
    a = np.zeros(1, dtype=_FH)
    a["magic"] = MAGIC
    a["format_version"] = FORMAT_VERSION
    a["header_version"] = h.header_version
    a["vector_encoding"] = VECTOR_INT8
    a["dim"] = h.dim
    a["header_bytes"] = h.header_bytes
    a["stride"] = h.stride
    a["segment_number"] = h.segment_number
    a["created_ms"] = h.created_ms
    raw = bytearray(a.tobytes())
    raw[60:64] = crc32c(raw[:60]).to_bytes(4, "little")
    return bytes(raw)


def unpack_segment_header(buf: bytes, path: str | None = None,
                          expected_number: int | None = None) -> SegmentHeader:
    """Decode and validate a segment file header (section 3, section 10 first bullet).

    Checked in this order: length, magic, CRC (reported at offset 0), format version,
    header version, vector encoding, dim, header bytes, stride, reserved bytes, and the segment
    number against `expected_number` (if given) or the `seg-NNNNNN.dat` file name (if it is one).
    """
    if len(buf) < FILE_HEADER_BYTES:
        raise Truncated(f"segment file header needs {FILE_HEADER_BYTES} bytes, file has "
                        f"{len(buf)}", path=path, offset=len(buf))
    buf = bytes(buf[:FILE_HEADER_BYTES])
    if buf[:8] != MAGIC:
        raise BadMagic("not a synapse segment file (bad magic)", path=path, offset=0)
    stored = int.from_bytes(buf[60:64], "little")
    if crc32c(buf[:60]) != stored:
        raise ChecksumMismatch("segment file header CRC mismatch", path=path, offset=0)
    a = np.frombuffer(buf, dtype=_FH, count=1)[0]
    if int(a["format_version"]) != FORMAT_VERSION:
        raise UnsupportedVersion(f"segment format version {int(a['format_version'])}",
                                 path=path, offset=8)
    version = int(a["header_version"])
    if version not in hdr.HEADER_BYTES:
        raise UnsupportedVersion(f"header version {version}", path=path, offset=10)
    if int(a["vector_encoding"]) != VECTOR_INT8:
        raise UnsupportedVersion(f"vector encoding {int(a['vector_encoding'])}",
                                 path=path, offset=11)
    dim = int(a["dim"])
    if not 1 <= dim <= MAX_DIM:
        raise InvalidRecord(f"dim {dim} not in 1..{MAX_DIM}", path=path, offset=12)
    if int(a["header_bytes"]) != hdr.HEADER_BYTES[version]:
        raise InvalidRecord(f"header bytes {int(a['header_bytes'])} do not match header "
                            f"version {version}", path=path, offset=14)
    if int(a["stride"]) != record_stride(version, dim):
        raise InvalidRecord(f"stride {int(a['stride'])} does not match header version "
                            f"{version} and dim {dim}", path=path, offset=16)
    if a["reserved"].any():
        raise InvalidRecord("reserved bytes are not zero", path=path, offset=32)
    number = int(a["segment_number"])
    if expected_number is None and path is not None:
        m = _NAME_RE.match(Path(path).name)
        expected_number = int(m.group(1)) if m else None
    if expected_number is not None and number != expected_number:
        raise InvalidRecord(f"segment number {number} does not match {expected_number}",
                            path=path, offset=20)
    return SegmentHeader(version, dim, number, int(a["created_ms"]))


# ---------------------------------------------------------------------------------------------
# Records


def pack_records(headers, vectors: np.ndarray, record_ids, payload_offsets, payload_lengths,
                 version: int) -> np.ndarray:
    """Build records with their CRCs.

    Parameters
    ----------
    headers : list[Header] or structured ndarray with the fields of `version`, length n
    vectors : int8 ndarray, shape (n, dim)
    record_ids, payload_offsets : u64 array-likes, shape (n,)
    payload_lengths : u32 array-like, shape (n,)
    version : int

    Returns
    -------
    uint8 ndarray, shape (n, stride)
    """
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.dtype != np.int8:
        raise ValueError("vectors must be a 2-D int8 array")
    n, dim = vectors.shape
    if not isinstance(headers, np.ndarray):
        headers = hdr.headers_to_array(list(headers), version)
    if headers.shape != (n,):
        raise ValueError("headers and vectors differ in length")
    rec = np.zeros(n, dtype=record_dtype(version, dim))
    for name, _, _ in hdr.header_fields(version):
        if name not in hdr.ZERO_FIELDS:
            rec[name] = headers[name]
    rec["vector"] = vectors
    rec["record_id"] = np.asarray(record_ids, dtype=np.uint64)
    rec["payload_offset"] = np.asarray(payload_offsets, dtype=np.uint64)
    rec["payload_length"] = np.asarray(payload_lengths, dtype=np.uint32)
    raw = rec.view(np.uint8).reshape(n, rec.dtype.itemsize)
    rec["crc"] = _crc_rows(raw)
    return raw


def pack_record(header: hdr.Header, vector: np.ndarray, record_id: int, payload_offset: int,
                payload_length: int, version: int) -> bytes:
    """One record's bytes (for `rewrite_record`)."""
    vec = np.asarray(vector, dtype=np.int8)[None, :]
    return pack_records([header], vec, [record_id], [payload_offset], [payload_length],
                        version)[0].tobytes()


def _crc_rows(raw: np.ndarray) -> np.ndarray:
    """CRC32C of bytes 0 .. stride-4 of each row of uint8 (n, stride)."""
    out = np.empty(raw.shape[0], dtype=np.uint32)
    body = raw.shape[1] - 4
    if raw.shape[0] <= _CRC_SCALAR_ROWS:  # the column-wise pass costs ~2 ms even for one row
        for i in range(raw.shape[0]):
            out[i] = crc32c(raw[i, :body].tobytes())
        return out
    for start in range(0, raw.shape[0], _CRC_BLOCK_ROWS):
        block = np.ascontiguousarray(raw[start:start + _CRC_BLOCK_ROWS, :body])
        out[start:start + block.shape[0]] = crc32c_rows(block)
    return out


def _stored_crc(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw[:, -4:]).view("<u4")[:, 0]


def intact_rows_past(path, committed_records: int, stride: int) -> tuple[int, int]:
    """(rows the file holds past `committed_records`, how many of them pass their CRC): what a
    rescue from a damaged MANIFEST that counts fewer records than were written may have lost."""
    path = Path(path)
    extra = (path.stat().st_size - FILE_HEADER_BYTES) // stride - committed_records
    if extra <= 0:
        return 0, 0
    with open(path, "rb") as f:
        f.seek(FILE_HEADER_BYTES + committed_records * stride)
        raw = np.frombuffer(f.read(extra * stride), np.uint8).reshape(extra, stride)
    return extra, int((_crc_rows(raw) == _stored_crc(raw)).sum())


def is_segment_name(name: str) -> bool:
    return _NAME_RE.match(name) is not None


def _first_fault(raw: np.ndarray, version: int, dim: int, prev_id,
                 payload_bytes: int | None) -> tuple[int, int, type, str] | None:
    """First bad record of uint8 (n, stride): (index, offset in record, error class, message).

    `prev_id` is the id before the first row (the rows are consecutive records), or an array
    with the id before each row (rows picked from anywhere in a segment).
    Within a record the CRC is checked first (a record that fails it is reported at its own
    offset), then header fields, then the id, then the payload pointer.
    """
    n = raw.shape[0]
    if n == 0:
        return None
    rec = raw.view(record_dtype(version, dim)).reshape(n)
    hb = hdr.HEADER_BYTES[version]
    crc_bad = _crc_rows(raw) != _stored_crc(raw)
    header_fault = hdr.header_faults(rec, version)
    ids = rec["record_id"]
    if np.ndim(prev_id):
        prev = np.asarray(prev_id, np.uint64)
    else:
        prev = np.empty(n, dtype=np.uint64)
        prev[0] = prev_id
        prev[1:] = ids[:-1]
    id_bad = ids <= prev  # also catches 0, since prev >= 0
    if payload_bytes is None:
        ptr_bad = np.zeros(n, dtype=bool)
    else:
        total = np.uint64(payload_bytes)
        offs = rec["payload_offset"]
        lens = rec["payload_length"].astype(np.uint64)
        room = np.where(offs > total, np.uint64(0), total - np.minimum(offs, total))
        ptr_bad = ((offs < PAYLOAD_FILE_HEADER) | (offs > total)
                   | (lens < MIN_PAYLOAD_ENTRY) | (lens > room))
    any_bad = crc_bad | (header_fault >= 0) | id_bad | ptr_bad
    if not any_bad.any():
        return None
    i = int(np.argmax(any_bad))
    if crc_bad[i]:
        return i, 0, ChecksumMismatch, "record CRC mismatch"
    if header_fault[i] >= 0:
        f = int(header_fault[i])
        return i, f, InvalidRecord, f"invalid header field {hdr.field_name_at(f)}"
    if id_bad[i]:
        what = "record id is 0" if ids[i] == 0 else \
            f"record id {int(ids[i])} not greater than previous id {int(prev[i])}"
        return i, hb + dim, InvalidRecord, what
    return i, hb + dim + 8, InvalidRecord, (
        f"payload pointer ({int(rec['payload_offset'][i])}, {int(rec['payload_length'][i])}) "
        f"outside the committed payload log of {payload_bytes} bytes")


def _check_count(count: int, path) -> int:
    if not isinstance(count, (int, np.integer)) or not 0 <= int(count) <= MAX_RECORDS:
        raise InvalidRecord(f"committed record count {count!r} not in 0..{MAX_RECORDS}",
                            path=str(path))
    return int(count)


def _read_exact(fd: int, size: int, offset: int, path) -> bytes:
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), path=str(path), offset=offset) from exc


def _open_checked(path, committed_records: int, expected_dim: int | None,
                  expected_number: int | None, writable: bool) -> tuple[int, SegmentHeader, int]:
    """Open, validate the file header and that the file holds the committed records."""
    committed = _check_count(committed_records, path)
    try:
        fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), path=str(path)) from exc
    try:
        h = unpack_segment_header(_read_exact(fd, FILE_HEADER_BYTES, 0, path), str(path),
                                  expected_number)
        if expected_dim is not None and h.dim != expected_dim:
            raise InvalidRecord(f"dim {h.dim} differs from the store's {expected_dim}",
                                path=str(path), offset=12)
        size = os.fstat(fd).st_size
        need = h.record_offset(committed)
        if size < need:
            raise Truncated(f"file has {size} bytes, {committed} committed records need "
                            f"{need}", path=str(path), offset=size)
        return fd, h, size
    except BaseException:
        os.close(fd)
        raise


# ---------------------------------------------------------------------------------------------
# Writing


def create_segment(path, header_version: int, dim: int, segment_number: int,
                   created_ms: int | None = None, overwrite: bool = False) -> SegmentHeader:
    """Create an empty segment (mode 0600, never through a symlink), fsync it and its directory.

    `overwrite=True` replaces an existing file: only for one that no manifest names (a leftover
    of an uncommitted transaction).
    """
    if created_ms is None:
        created_ms = int(time.time() * 1000)
    h = SegmentHeader(header_version, dim, segment_number, created_ms)
    data = pack_segment_header(h)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), path=str(path)) from exc
    try:
        pwrite_all(fd, data, 0, path)
        fsync_fd(fd, path)
    finally:
        os.close(fd)
    fsync_dir(Path(path).parent)
    return h


def rewrite_record(fd: int, index: int, record_bytes: bytes, path="<segment>") -> None:
    """Overwrite record `index` in place with one pwrite of the whole record (CRC included).

    The caller fsyncs before committing. `record_bytes` must carry a correct CRC.
    """
    stride = len(record_bytes)
    if index < 0 or stride <= TRAILER_BYTES:
        raise ValueError("bad record index or length")
    if crc32c(record_bytes[:-4]) != int.from_bytes(record_bytes[-4:], "little"):
        raise ValueError("record bytes carry a wrong CRC")
    pwrite_all(fd, bytes(record_bytes), FILE_HEADER_BYTES + index * stride, path)


class SegmentWriter:
    """Appends to one segment whose committed prefix holds `committed_records` records.

    Opening checks the file header and that the file is at least as long as the committed
    prefix; `append` truncates any tail past the committed prefix before writing.
    """

    def __init__(self, path, committed_records: int, expected_dim: int | None = None):
        self.path = str(path)
        self.fd, self.header, _ = _open_checked(path, committed_records, expected_dim, None,
                                                writable=True)
        self.count = int(committed_records)
        self.last_id = 0
        if self.count:
            off = self.header.record_offset(self.count) - TRAILER_BYTES
            self.last_id = int.from_bytes(_read_exact(self.fd, 8, off, path), "little")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def room(self) -> int:
        """Records this segment can still take."""
        return MAX_RECORDS - self.count

    def append(self, records: np.ndarray) -> int:
        """Append records (uint8 (n, stride), from `pack_records`), fsync; return the new count.

        Records are checked first (CRC, header validation, ids increasing past the last one)
        so that nothing invalid is written; ValueError for a caller bug.
        """
        h = self.header
        records = np.ascontiguousarray(records, dtype=np.uint8)
        if records.ndim != 2 or records.shape[1] != h.stride:
            raise ValueError(f"records must have shape (n, {h.stride})")
        n = records.shape[0]
        if n > self.room:
            raise ValueError(f"segment has room for {self.room} records, got {n}")
        fault = _first_fault(records, h.header_version, h.dim, self.last_id, None)
        if fault is not None:
            i, off, _, msg = fault
            raise ValueError(f"record {i} of the batch (byte {off}): {msg}")
        start = h.record_offset(self.count)
        truncate(self.fd, start, self.path)  # drop a torn or uncommitted tail
        if n:
            pwrite_all(self.fd, records.tobytes(), start, self.path)
        fsync_fd(self.fd, self.path)
        self.count += n
        if n:
            self.last_id = int(records[-1, -TRAILER_BYTES:-16].view("<u8")[0])
        return self.count

    def rewrite(self, index: int, record_bytes: bytes) -> None:
        """Rewrite record `index` (< count) in place; the caller fsyncs via `sync`."""
        if not 0 <= index < self.count or len(record_bytes) != self.header.stride:
            raise ValueError("record index or length out of range")
        rewrite_record(self.fd, index, record_bytes, self.path)

    def sync(self) -> None:
        fsync_fd(self.fd, self.path)


# ---------------------------------------------------------------------------------------------
# Reading


class SegmentReader:
    """Read-only map of the committed prefix of one segment.

    Attributes (all views of the map, no copies; n = committed records)
    ----------
    header : SegmentHeader
    records : structured ndarray (n,) of `record_dtype`
    raw : uint8 ndarray (n, stride)
    headers : structured view (n,) with the header fields
    vectors : int8 ndarray (n, dim)
    ids : uint64 (n,); payload_offsets : uint64 (n,); payload_lengths : uint32 (n,)
    """

    def __init__(self, path, committed_records: int, expected_dim: int | None = None,
                 expected_number: int | None = None):
        self.path = str(path)
        fd, self.header, _ = _open_checked(path, committed_records, expected_dim,
                                           expected_number, writable=False)
        self.n = int(committed_records)
        h = self.header
        dtype = record_dtype(h.header_version, h.dim)
        try:
            if self.n:
                with os.fdopen(os.dup(fd), "rb") as f:
                    # a plain ndarray view of the map: np.memmap's subclass hooks cost more
                    # than the work on each small slice recall takes of it
                    self.records = np.memmap(f, dtype=dtype, mode="r", offset=FILE_HEADER_BYTES,
                                             shape=(self.n,)).view(np.ndarray)
            else:
                self.records = np.zeros(0, dtype=dtype)
        except OSError as exc:
            raise StoreIOError(exc.strerror or str(exc), path=self.path) from exc
        finally:
            os.close(fd)
        names = [f[0] for f in hdr.header_fields(h.header_version)]
        self.headers = self.records[names]
        self.raw = self.records.view(np.uint8).reshape(self.n, h.stride)
        self.vectors = self.records["vector"]
        self.ids = self.records["record_id"]
        self.payload_offsets = self.records["payload_offset"]
        self.payload_lengths = self.records["payload_length"]

    def record_bytes(self, index: int) -> bytes:
        return self.raw[index].tobytes()

    def header_at(self, index: int) -> hdr.Header:
        return hdr.array_to_headers(self.headers[index:index + 1])[0]

    def check_rows(self, rows: np.ndarray, prev_ids: np.ndarray,
                   payload_bytes: int | None = None) -> None:
        """`check` for arbitrary rows (ascending), `prev_ids` the id before each of them."""
        h = self.header
        fault = _first_fault(self.raw[rows], h.header_version, h.dim, prev_ids, payload_bytes)
        if fault is not None:
            i, off, cls, msg = fault
            row = int(rows[i])
            raise cls(f"row {row} of the segment: {msg}", path=self.path,
                      offset=h.record_offset(row) + off)

    def check(self, start: int = 0, stop: int | None = None, prev_id: int = 0,
              payload_bytes: int | None = None) -> None:
        """Validate records `start .. stop` (CRC, header fields, ids above `prev_id`, payload
        pointer bounds when `payload_bytes` is given); raise the typed error of the first bad
        one at its byte offset (section 3 "Error offsets")."""
        stop = self.n if stop is None else stop
        h = self.header
        fault = _first_fault(self.raw[start:stop], h.header_version, h.dim, prev_id,
                             payload_bytes)
        if fault is not None:
            i, off, cls, msg = fault
            raise cls(f"row {start + i} of the segment: {msg}", path=self.path,
                      offset=h.record_offset(start + i) + off)


@dataclass(frozen=True)
class SegmentInfo:
    header: SegmentHeader
    records: int
    first_id: int
    last_id: int


def verify_segment(path, committed_records: int, payload_bytes: int | None = None,
                   prev_id: int = 0, expected_dim: int | None = None,
                   expected_number: int | None = None) -> SegmentInfo:
    """Check a segment's committed prefix completely (sections 3, 4 and 10).

    Parameters
    ----------
    path : segment file
    committed_records : records the manifest names (0 .. 262,144)
    payload_bytes : committed length of payload.log; None skips the pointer check
    prev_id : last record id of the previous segment (ids must exceed it)
    expected_dim, expected_number : checked against the file header when given

    Returns
    -------
    SegmentInfo; `last_id` is `prev_id` for an empty segment.

    Raises
    ------
    BadMagic, UnsupportedVersion, ChecksumMismatch, Truncated, InvalidRecord
        Naming `path` and the byte offset of the first bad structure: the file header field,
        the start of a record whose CRC fails, or the bad field of a record whose CRC holds.
    """
    r = SegmentReader(path, committed_records, expected_dim, expected_number)
    h = r.header
    r.check(prev_id=prev_id, payload_bytes=payload_bytes)
    if r.n == 0:
        return SegmentInfo(h, 0, 0, prev_id)
    return SegmentInfo(h, r.n, int(r.ids[0]), int(r.ids[-1]))
