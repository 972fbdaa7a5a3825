"""The graph on disk: `graph.csr` snapshots and the append-only `edges.log` (FORMAT.md section 7).

Arrays read here go straight into numba kernels that do no bounds checks, so every count, offset
and index is validated before an array is returned: a corrupt file raises a typed error naming
the file and byte offset, never yields an out-of-range index.
"""
from __future__ import annotations

import functools
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import fileheader, fileio
from .crc32c import _POLY, crc32c, crc32c_rows
from .errors import (
    BadMagic,
    ChecksumMismatch,
    InvalidRecord,
    StoreIOError,
    Truncated,
    UnsafeStore,
    UnsupportedVersion,
)

TEMPORAL, ABSTRACTION, ASSOCIATION, RELATION = 0, 1, 2, 3
MAX_TYPE = RELATION
UPSERT, REMOVE = 1, 2
FORMAT_VERSION = 1

# --- edges.log ---------------------------------------------------------------------------------

LOG_MAGIC = b"SYNEDGES"
LOG_HEADER_SIZE = 16
ENTRY_SIZE = 32
ENTRY_DTYPE = np.dtype([
    ("src", "<u8"), ("dst", "<u8"), ("weight", "<f4"), ("type", "u1"), ("op", "u1"),
    ("reserved", "u1", (6,)), ("crc", "<u4"),
])
assert ENTRY_DTYPE.itemsize == ENTRY_SIZE


def make_entries(src, dst, etype, weight=1.0, op=UPSERT) -> np.ndarray:
    """Build edge-log entries (ENTRY_DTYPE, CRCs filled in) from broadcastable columns.

    Raises ValueError for anything a reader would reject (id 0, unknown type or op, weight not
    a finite value in [0, 1]).
    """
    src, dst, etype, weight, op = np.broadcast_arrays(
        np.asarray(src, np.uint64), np.asarray(dst, np.uint64), np.asarray(etype),
        np.asarray(weight, np.float32), np.asarray(op))
    e = np.zeros(src.size, ENTRY_DTYPE)
    e["src"], e["dst"], e["weight"] = src.ravel(), dst.ravel(), weight.ravel()
    if np.any((etype < 0) | (etype > MAX_TYPE)) or np.any((op != UPSERT) & (op != REMOVE)):
        raise ValueError("edge type must be 0..3 and op 1 (upsert) or 2 (remove)")
    e["type"], e["op"] = etype.ravel(), op.ravel()
    e["crc"] = crcs = _entry_crcs(e)
    bad = _entry_problems(e, crcs)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"edge {i} is invalid: {_entry_problem(e[i], crcs[i])}")
    return e


def _entry_crcs(e: np.ndarray) -> np.ndarray:
    return crc32c_rows(e.view(np.uint8).reshape(-1, ENTRY_SIZE)[:, :28])


def _entry_problems(e: np.ndarray, crcs: np.ndarray) -> np.ndarray:
    """Boolean mask of entries that fail any check of FORMAT.md section 7.2."""
    w = e["weight"]
    ok = ((crcs == e["crc"]) & (e["type"] <= MAX_TYPE) & ((e["op"] == UPSERT) | (e["op"] == REMOVE))
          & np.isfinite(w) & (w >= 0) & (w <= 1) & ~e["reserved"].any(axis=1)
          & (e["src"] != 0) & (e["dst"] != 0))
    return ~ok


def _entry_problem(entry, crc: int) -> str:
    if crc != entry["crc"]:
        return f"CRC32C is {int(crc):#010x}, stored {int(entry['crc']):#010x}"
    if entry["type"] > MAX_TYPE:
        return f"unknown edge type {entry['type']}"
    if entry["op"] not in (UPSERT, REMOVE):
        return f"unknown op {entry['op']}"
    if not (np.isfinite(entry["weight"]) and 0 <= entry["weight"] <= 1):
        return f"weight {entry['weight']} is not a finite value in [0, 1]"
    if entry["reserved"].any():
        return "reserved bytes are not zero"
    return "src or dst record id is 0"


def _file_header(magic: bytes) -> bytes:
    return fileheader.pack(magic, FORMAT_VERSION)


def _check_file_header(head: bytes, magic: bytes, path: str) -> None:
    fileheader.check(head, magic, path, "edge log", FORMAT_VERSION)


class EdgeLog:
    """`edges.log`: a 16-byte header, then 32-byte entries; the manifest holds the committed count."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def create(cls, path: str | os.PathLike) -> EdgeLog:
        """Write an empty log (header only), atomically; replaces any file not yet committed."""
        fileio.atomic_replace(path, _file_header(LOG_MAGIC))
        return cls(path)

    def append(self, committed: int, entries: np.ndarray) -> int:
        """Append `entries` after the first `committed` entries and fsync.

        A torn or uncommitted tail past `committed` is truncated first. Returns the new committed
        count, which the caller records in the manifest to commit the append.
        """
        if committed < 0:
            raise ValueError(f"committed count {committed} is negative")
        entries = np.ascontiguousarray(entries, dtype=ENTRY_DTYPE)
        bad = _entry_problems(entries, _entry_crcs(entries))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"entry {i} is invalid (build entries with make_entries)")
        path = str(self.path)
        end = LOG_HEADER_SIZE + ENTRY_SIZE * committed
        fd = fileio.open_for_append(path)
        try:
            size = os.fstat(fd).st_size
            _check_file_header(os.pread(fd, LOG_HEADER_SIZE, 0), LOG_MAGIC, path)
            if size < end:
                raise Truncated(f"file is {size} bytes, {committed} committed entries need {end}",
                                path, size)
            if size > end:
                fileio.truncate(fd, end, path)
            if len(entries):
                fileio.pwrite_all(fd, entries.tobytes(), end, path)
            fileio.fsync_fd(fd, path)
        finally:
            os.close(fd)
        return committed + len(entries)

    def read(self, committed: int, start: int = 0) -> np.ndarray:
        """Entries `start .. committed` (ENTRY_DTYPE, read-only), each verified.

        Raises
        ------
        Truncated
            The file is shorter than `committed` entries.
        ChecksumMismatch, InvalidRecord
            At the offset of the first bad entry.
        """
        path = str(self.path)
        if not 0 <= start <= committed:
            raise ValueError(f"start {start} outside 0 .. {committed}")
        end = LOG_HEADER_SIZE + ENTRY_SIZE * committed  # Python ints: no overflow on hostile counts
        fd = _open_regular(path)
        try:
            size = os.fstat(fd).st_size
            _check_file_header(os.pread(fd, LOG_HEADER_SIZE, 0), LOG_MAGIC, path)
            if size < end:
                raise Truncated(f"file is {size} bytes, {committed} committed entries need {end}",
                                path, size)
            first = LOG_HEADER_SIZE + ENTRY_SIZE * start
            data = _pread_exact(fd, end - first, first, path)
        finally:
            os.close(fd)
        entries = np.frombuffer(data, ENTRY_DTYPE)
        crcs = _entry_crcs(entries)
        bad = _entry_problems(entries, crcs)
        if bad.any():
            i = int(np.argmax(bad))
            cls = ChecksumMismatch if crcs[i] != entries["crc"][i] else InvalidRecord
            raise cls(f"edge-log entry {start + i}: {_entry_problem(entries[i], crcs[i])}",
                      path, first + ENTRY_SIZE * i)
        return entries


def _open_regular(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeStore("symlink inside the store; refusing to follow it", path) from None
        raise StoreIOError(exc.strerror or str(exc), path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeStore("not a regular file", path)
    return fd


def _pread_exact(fd: int, n: int, offset: int, path: str) -> bytearray:
    buf = bytearray(n)
    view, done = memoryview(buf), 0
    try:
        while done < n:
            got = os.preadv(fd, [view[done:]], offset + done)
            if got == 0:
                raise Truncated("file shrank while being read", path, offset + done)
            done += got
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), path) from None
    return buf


# --- graph.csr ---------------------------------------------------------------------------------

CSR_MAGIC = b"SYNGRAPH"
CSR_HEADER = struct.Struct("<8sHHIQQQ20sI")  # ... n_nodes, n_edges, folded, reserved, CRC
CSR_HEADER_SIZE = 64
assert CSR_HEADER.size == CSR_HEADER_SIZE
MAX_NODES = 2**32  # indices are u32


@dataclass(frozen=True)
class CSRGraph:
    """A graph in CSR form; row i holds the out-edges of record `node_ids[i]`.

    node_ids u64 (strictly increasing), indptr u64 (n_nodes + 1), indices u32 (positions in
    node_ids), weights f32, types u8.
    """

    node_ids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    types: np.ndarray

    @property
    def n_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def n_edges(self) -> int:
        return len(self.indices)

    @classmethod
    def empty(cls) -> CSRGraph:
        return cls(np.zeros(0, np.uint64), np.zeros(1, np.uint64), np.zeros(0, np.uint32),
                   np.zeros(0, np.float32), np.zeros(0, np.uint8))


def _layout(n_nodes: int, n_edges: int) -> dict[str, int]:
    """Byte offset of each region, and the total file length (Python ints: cannot overflow)."""
    off = {"node_ids": CSR_HEADER_SIZE}
    off["indptr"] = off["node_ids"] + 8 * n_nodes
    off["indices"] = off["indptr"] + 8 * (n_nodes + 1)
    off["weights"] = off["indices"] + 4 * n_edges
    off["types"] = off["weights"] + 4 * n_edges
    off["padding"] = off["types"] + n_edges
    off["crc"] = off["padding"] + (-n_edges) % 8
    off["end"] = off["crc"] + 4
    return off


def _first(mask: np.ndarray) -> int | None:
    return int(np.argmax(mask)) if mask.any() else None


def _validate(g: CSRGraph, off: dict[str, int], path: str) -> None:
    """Check every invariant a kernel relies on; InvalidRecord at the first offending element."""
    n, e = g.n_nodes, g.n_edges

    def fail(region: str, index: int, itemsize: int, msg: str) -> InvalidRecord:
        return InvalidRecord(f"{region}[{index}]: {msg}", path, off[region] + itemsize * index)

    if n and g.node_ids[0] == 0:
        raise fail("node_ids", 0, 8, "record id 0 is never a node")
    if (i := _first(g.node_ids[1:] <= g.node_ids[:-1])) is not None:
        raise fail("node_ids", i + 1, 8, "node ids are not strictly increasing")
    if g.indptr[0] != 0:
        raise fail("indptr", 0, 8, f"is {int(g.indptr[0])}, must be 0")
    if (i := _first(g.indptr[1:] < g.indptr[:-1])) is not None:
        raise fail("indptr", i + 1, 8, "indptr decreases")
    if g.indptr[n] != e:
        raise fail("indptr", n, 8, f"is {int(g.indptr[n])}, must equal n_edges {e}")
    if (i := _first(g.indices >= n)) is not None:
        raise fail("indices", i, 4, f"{int(g.indices[i])} is not below n_nodes {n}")
    w = g.weights
    if (i := _first(~(np.isfinite(w) & (w >= 0) & (w <= 1)))) is not None:
        raise fail("weights", i, 4, f"{w[i]} is not a finite value in [0, 1]")
    if (i := _first(g.types > MAX_TYPE)) is not None:
        raise fail("types", i, 1, f"unknown edge type {int(g.types[i])}")


@dataclass(frozen=True)
class CSRSnapshot:
    """`graph.csr`: a graph plus how many edges.log entries are folded into it."""

    graph: CSRGraph
    folded_entries: int

    def write(self, path: str | os.PathLike) -> None:
        """Write the snapshot atomically (temp file, fsync, rename, directory fsync)."""
        g = _as_typed(self.graph)
        off = _layout(g.n_nodes, g.n_edges)
        if g.n_nodes >= MAX_NODES:
            raise ValueError(f"{g.n_nodes} nodes do not fit u32 indices")
        try:
            _validate(g, off, str(path))  # never write a file a reader would reject
        except InvalidRecord as exc:
            raise ValueError(str(exc)) from None
        head = CSR_HEADER.pack(CSR_MAGIC, FORMAT_VERSION, 0, 0, g.n_nodes, g.n_edges,
                               self.folded_entries, bytes(20), 0)[:60]
        head += struct.pack("<I", crc32c(head))
        body = b"".join([g.node_ids.tobytes(), g.indptr.tobytes(), g.indices.tobytes(),
                         g.weights.tobytes(), g.types.tobytes(), bytes(off["crc"] - off["padding"])])
        crc = _crc32c_large(np.frombuffer(body, np.uint8))
        fileio.atomic_replace(path, head + body + struct.pack("<I", crc))

    @classmethod
    def read(cls, path: str | os.PathLike) -> CSRSnapshot:
        """Map and fully validate a snapshot; the arrays are read-only views of the mapping.

        Raises
        ------
        BadMagic, UnsupportedVersion, ChecksumMismatch, Truncated, InvalidRecord
            Naming `path` and the byte offset of the first inconsistency.
        """
        path = str(path)
        fd = _open_regular(path)
        try:
            size = os.fstat(fd).st_size
            if size < CSR_HEADER_SIZE:
                raise Truncated(f"file is {size} bytes, shorter than its 64-byte header", path, size)
            try:
                mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            except OSError as exc:
                raise StoreIOError(f"mmap failed: {exc.strerror}", path) from None
        finally:
            os.close(fd)
        magic, version, r1, r2, n, e, folded, r3, stored = CSR_HEADER.unpack_from(mm, 0)
        if magic != CSR_MAGIC:
            raise BadMagic(f"magic is {magic!r}, expected {CSR_MAGIC!r}", path, 0)
        if version != FORMAT_VERSION:
            raise UnsupportedVersion(f"format version {version}, this code reads {FORMAT_VERSION}",
                                     path, 8)
        if crc32c(mm[:60]) != stored:
            raise ChecksumMismatch("header CRC32C does not match", path, 0)
        for value, at in ((r1, 10), (r2, 12), (r3 != bytes(20), 40)):
            if value:
                raise InvalidRecord("reserved header field is not zero", path, at)
        # The counts are hostile until the file length confirms them: check before any array.
        off = _layout(n, e)
        if size < off["end"]:
            raise Truncated(f"file is {size} bytes, n_nodes={n} and n_edges={e} imply "
                            f"{off['end']}", path, size)
        if size > off["end"]:
            raise InvalidRecord(f"file is {size} bytes, n_nodes={n} and n_edges={e} imply "
                                f"{off['end']}", path, off["end"])
        if n >= MAX_NODES:
            raise InvalidRecord(f"n_nodes {n} does not fit u32 indices", path, 16)

        def arr(region: str, dtype, count: int) -> np.ndarray:
            return np.frombuffer(mm, dtype, count, off[region])

        g = CSRGraph(arr("node_ids", "<u8", n), arr("indptr", "<u8", n + 1),
                     arr("indices", "<u4", e), arr("weights", "<f4", e), arr("types", "u1", e))
        _validate(g, off, path)
        if any(mm[off["padding"]:off["crc"]]):
            raise InvalidRecord("padding is not zero", path, off["padding"])
        body = np.frombuffer(mm, np.uint8, off["crc"] - CSR_HEADER_SIZE, CSR_HEADER_SIZE)
        stored = struct.unpack_from("<I", mm, off["crc"])[0]
        if _crc32c_large(body) != stored:
            raise ChecksumMismatch(f"CRC32C over bytes 64..{off['crc']} does not match", path,
                                   CSR_HEADER_SIZE)
        return cls(g, folded)


def _as_typed(g: CSRGraph) -> CSRGraph:
    return CSRGraph(*(np.ascontiguousarray(a, dt) for a, dt in zip(
        (g.node_ids, g.indptr, g.indices, g.weights, g.types), ("<u8", "<u8", "<u4", "<f4", "u1"))))


# --- fast CRC32C of large buffers --------------------------------------------------------------
# crc32c() loops over bytes in Python (~10 MB/s). For a snapshot body we compute per-chunk CRCs
# with the vectorised crc32c_rows and chain them with the zlib crc32_combine identity:
#   crc(A + B) = crc(A) * x^(8 len B) mod P  xor  crc(B)        (reflected bit order)

def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC32C polynomial, reflected representation (a != 0)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


@functools.lru_cache(maxsize=8)
def _x8n(n: int) -> int:
    """x^(8 n) mod P: the operator that shifts a CRC past n zero bytes."""
    result, square, k = 1 << 31, 1 << 30, 8 * n  # x^0, x^1
    while k:
        if k & 1:
            result = _multmodp(square, result)
        square = _multmodp(square, square)
        k >>= 1
    return result


def _crc32c_large(buf: np.ndarray, chunk: int = 2048) -> int:
    """crc32c(buf.tobytes()) for a 1-D uint8 array, in O(len / chunk) Python steps."""
    k = len(buf) // chunk
    if k < 8:
        return crc32c(buf.tobytes())
    head = len(buf) - k * chunk
    crc = crc32c(buf[:head].tobytes())
    # Fortran order makes each column contiguous: crc32c_rows walks columns.
    rows = np.asfortranarray(buf[head:].reshape(k, chunk))
    op = _x8n(chunk)
    for r in crc32c_rows(rows).tolist():
        crc = _multmodp(op, crc) ^ r
    return crc


# --- folding -----------------------------------------------------------------------------------


def fold(snapshot: CSRSnapshot | CSRGraph | None, entries: np.ndarray) -> CSRGraph:
    """Apply edge-log `entries` in order on top of `snapshot` (None: an empty graph).

    An entry replaces any earlier edge with the same (src, dst, type); a remove deletes it.
    The result's nodes are the endpoints of the remaining edges, rows sorted by node id and
    each row by (dst, type).
    """
    g = snapshot.graph if isinstance(snapshot, CSRSnapshot) else snapshot
    g = CSRGraph.empty() if g is None else g
    counts = np.diff(g.indptr.astype(np.int64))
    src = np.concatenate([np.repeat(g.node_ids, counts), entries["src"]]).astype(np.uint64)
    dst = np.concatenate([g.node_ids[g.indices.astype(np.intp)], entries["dst"]]).astype(np.uint64)
    typ = np.concatenate([g.types, entries["type"]]).astype(np.uint8)
    wgt = np.concatenate([g.weights, entries["weight"]]).astype(np.float32)
    live = np.concatenate([np.ones(g.n_edges, bool), entries["op"] == UPSERT])
    # Sequence: snapshot edges first (all 0), then log entries 1..m in order; the last wins.
    seq = np.concatenate([np.zeros(g.n_edges, np.int64), np.arange(1, len(entries) + 1)])
    order = np.lexsort((seq, typ, dst, src))
    src, dst, typ, wgt, live = src[order], dst[order], typ[order], wgt[order], live[order]
    last = np.ones(len(src), bool)  # last entry of each (src, dst, type) run
    last[:-1] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1]) | (typ[1:] != typ[:-1])
    keep = last & live
    src, dst, typ, wgt = src[keep], dst[keep], typ[keep], wgt[keep]

    node_ids = np.union1d(src, dst).astype(np.uint64)
    if len(node_ids) >= MAX_NODES:
        raise ValueError(f"{len(node_ids)} nodes do not fit u32 indices")
    indptr = np.empty(len(node_ids) + 1, np.uint64)
    indptr[:-1] = np.searchsorted(src, node_ids, side="left")
    indptr[-1] = len(src)
    indices = np.searchsorted(node_ids, dst).astype(np.uint32)
    return CSRGraph(node_ids, indptr, indices, wgt, typ)


def live_graph(store_dir: str | os.PathLike, csr: str | None, log: str, log_entries: int) -> CSRGraph:
    """The graph a reader sees: the snapshot plus the committed log entries it has not folded.

    Call as ``live_graph(store, *manifest.graph)``.
    """
    store = Path(store_dir)
    snap = CSRSnapshot.read(store / csr) if csr is not None else None
    start = snap.folded_entries if snap is not None else 0
    if start > log_entries:
        raise InvalidRecord(f"snapshot folds {start} log entries but only {log_entries} are "
                            "committed", str(store / csr), 32)
    tail = EdgeLog(store / log).read(log_entries, start)
    if snap is not None and len(tail) == 0:
        return snap.graph
    return fold(snap, tail)
