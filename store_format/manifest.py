"""MANIFEST: the commit point of a store (docs/FORMAT.md section 2).

The manifest names every file of the store and the committed length of each append-only file.
Replacing it (temp file, fsync, rename, directory fsync) is the single atomic step of a commit, so
everything here is validated strictly: a reader trusts nothing past what a valid manifest names.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from . import fileio
from .crc32c import crc32c
from .errors import (
    BadMagic,
    ChecksumMismatch,
    CorruptStore,
    InvalidRecord,
    NotAStoreDirectory,
    StoreError,
    StoreIOError,
    StoreNotFound,
    Truncated,
    UnsafeStore,
    UnsupportedVersion,
)

MAGIC = b"SYNMANIF"
FORMAT_VERSION = 1
MANIFEST_NAME = "MANIFEST"
HEADER = struct.Struct("<8sHHI")  # magic, format version, reserved, body length
HEADER_SIZE = HEADER.size  # 16
MAX_BODY = 16 * 1024 * 1024
MAX_U64 = 2**64 - 1

PAYLOAD_NAME = "payload.log"
CSR_NAME = "graph.csr"
EDGE_LOG_NAME = "edges.log"
BM25_LOG_NAME = "bm25.log"
BM25_VOCAB_NAME = "bm25.vocab"
INGEST_NAME = "ingest.idx"
SPIKES_NAME = "spikes.log"
DORMANCY_NAME = "dormancy.dat"
SEGMENT_RE = re.compile(r"seg-(\d{6})\.dat")


def generation_name(base: str, generation: int) -> str:
    """`payload.log` -> `payload-G.log`: the name compaction gives a rewritten file (s. 14)."""
    stem, dot, ext = base.partition(".")
    return f"{stem}-{int(generation)}{dot}{ext}"


def _gen_re(base: str) -> re.Pattern:
    """`base` or `base` with a compaction generation before the extension (FORMAT.md s. 2)."""
    stem, _, ext = base.partition(".")
    return re.compile(rf"{re.escape(stem)}(?:-[1-9]\d{{0,19}})?\.{re.escape(ext)}")


PAYLOAD_RE, CSR_RE, EDGE_LOG_RE = _gen_re(PAYLOAD_NAME), _gen_re(CSR_NAME), _gen_re(EDGE_LOG_NAME)
BM25_LOG_RE, BM25_VOCAB_RE, INGEST_RE = (_gen_re(BM25_LOG_NAME), _gen_re(BM25_VOCAB_NAME),
                                         _gen_re(INGEST_NAME))
SPIKES_RE = _gen_re(SPIKES_NAME)
DORMANCY_RE = _gen_re(DORMANCY_NAME)
# Every data file a manifest can name; a writer deletes the ones its manifest does not (s. 14.2).
DATA_FILE_RES = (SEGMENT_RE, PAYLOAD_RE, CSR_RE, EDGE_LOG_RE, BM25_LOG_RE, BM25_VOCAB_RE,
                 INGEST_RE, SPIKES_RE, DORMANCY_RE)


def named_files(m: "Manifest") -> set[str]:
    """The files manifest `m` names (segments, payload, graph, BM25, ingest index, spikes)."""
    names = {s.file for s in m.segments} | {m.payload.file, m.graph.log}
    if m.graph.csr is not None:
        names.add(m.graph.csr)
    if m.bm25 is not None:
        names |= {m.bm25["log"], m.bm25["vocab"]}
    if m.ingest is not None:
        names.add(m.ingest["file"])
    if m.spikes is not None:
        names.add(m.spikes["file"])
    if m.dormancy is not None:
        names.add(m.dormancy["file"])
    return names


def is_data_file(name: str) -> bool:
    return any(r.fullmatch(name) for r in DATA_FILE_RES)


STORE_ID_RE = re.compile(r"[0-9a-f]{32}")
HEADER_BYTES = {1: 32, 2: 48, 3: 64}  # record header size per header version (section 4)
SEGMENT_FILE_HEADER = 64
RECORD_TRAILER = 24
MAX_SEGMENT_RECORDS = 262_144
PAYLOAD_FILE_HEADER = 16
EDGE_LOG_HEADER = 16
EDGE_ENTRY_SIZE = 32


def creation_leftover(name: str, size: int) -> bool:
    """What a store creation killed before its MANIFEST leaves (section 1, Creation): the LOCK,
    MANIFEST.tmp, the payload and edge logs or their .tmp holding at most their file headers."""
    from .lock import LOCK_NAME

    headers = {PAYLOAD_NAME: PAYLOAD_FILE_HEADER, EDGE_LOG_NAME: EDGE_LOG_HEADER}
    headers |= {f"{n}.tmp": size for n, size in headers.items()}  # fileio.atomic_replace
    return name == LOCK_NAME or name.startswith(MANIFEST_NAME) or size <= headers.get(name, -1)


def lost_manifest(store_dir, entries: list[tuple[str, int]], doing: str) -> None:
    """Raise CorruptStore when `entries` ((name, size) of a directory without a MANIFEST) hold
    a store's data files beyond creation leftovers: a store that lost its MANIFEST, never an
    empty place ("no store here") or a new one."""
    data = sorted(n for n, size in entries if is_data_file(n) and not creation_leftover(n, size))
    if data:
        err = CorruptStore(f"no MANIFEST, but the data files of a store are here ({data[0]}"
                           f"{f' and {len(data) - 1} more' if len(data) > 1 else ''}): "
                           f"{doing}", str(Path(store_dir) / MANIFEST_NAME))
        err.hint = "the MANIFEST names what they hold: restore it from a backup of the store"
        raise err


class Segment(NamedTuple):
    file: str
    records: int


class PayloadRef(NamedTuple):
    file: str
    bytes: int  # committed length of payload.log, its 16-byte file header included


class GraphRef(NamedTuple):
    csr: str | None
    log: str
    log_entries: int  # committed number of 32-byte entries in edges.log


@dataclass
class Manifest:
    """The decoded body of a MANIFEST (field meanings: FORMAT.md section 2)."""

    store_id: str
    generation: int
    header_version: int
    dim: int
    embedder: str
    next_record_id: int
    segments: list[Segment] = field(default_factory=list)
    payload: PayloadRef = PayloadRef(PAYLOAD_NAME, PAYLOAD_FILE_HEADER)
    graph: GraphRef = GraphRef(None, EDGE_LOG_NAME, 0)
    migration: dict | None = None
    bm25: dict | None = None  # {"log", "log_bytes", "vocab", "vocab_bytes"} (section 11)
    ingest: dict | None = None  # {"file": "ingest.idx", "entries": n} (section 12)
    spikes: dict | None = None  # {"file": "spikes.log", "entries": n} (section 15)
    dormancy: dict | None = None  # {"file", "entries", "windows", "last_window"} (s. 16)

    @classmethod
    def new(cls, dim: int, embedder: str, header_version: int = 3) -> Manifest:
        """Manifest of an empty store: generation 0, no segments, empty logs (headers only)."""
        return cls(
            store_id=uuid.uuid4().hex,
            generation=0,
            header_version=header_version,
            dim=dim,
            embedder=embedder,
            next_record_id=1,
        )

    def next_generation(self) -> Manifest:
        """A copy with `generation` incremented, as every commit must write."""
        return dataclasses.replace(self, generation=self.generation + 1)


# --- encoding ----------------------------------------------------------------------------------


def _to_body(m: Manifest) -> dict[str, Any]:
    # Keys in the order FORMAT.md lists them; the writer's output is canonical (byte-exact tests).
    body: dict[str, Any] = {
        "store_id": m.store_id,
        "generation": m.generation,
        "header_version": m.header_version,
        "dim": m.dim,
        "embedder": m.embedder,
        "next_record_id": m.next_record_id,
        "segments": [{"file": s[0], "records": s[1]} for s in m.segments],
        "payload": {"file": m.payload[0], "bytes": m.payload[1]},
        "graph": {"csr": m.graph[0], "log": m.graph[1], "log_entries": m.graph[2]},
    }
    if m.bm25 is not None:
        body["bm25"] = m.bm25
    if m.ingest is not None:
        body["ingest"] = m.ingest
    if m.spikes is not None:
        body["spikes"] = m.spikes
    if m.dormancy is not None:
        body["dormancy"] = m.dormancy
    if m.migration is not None:
        body["migration"] = m.migration
    return body


def encode_manifest(m: Manifest) -> bytes:
    """Serialise `m` to the MANIFEST bytes; raises ValueError if `m` would not decode."""
    body = _to_body(m)
    try:
        _from_body(body, "<manifest being encoded>")  # never write what a reader would reject
    except CorruptStore as exc:
        raise ValueError(exc.message) from None
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    if len(data) > MAX_BODY:
        raise ValueError(f"manifest body is {len(data)} bytes, over the {MAX_BODY} limit")
    head = HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(data)) + data
    return head + struct.pack("<I", crc32c(head))


# --- decoding ----------------------------------------------------------------------------------


def decode_manifest(data: bytes, path: str | os.PathLike = MANIFEST_NAME,
                    check_crc: bool = True) -> Manifest:
    """Parse and fully validate MANIFEST bytes. `check_crc=False` (a rescue export only): a
    CRC mismatch is let through when everything else validates, since a flipped bit in the
    CRC or in a field's digits must not lock the user out of every intact record.

    Raises
    ------
    BadMagic, UnsupportedVersion, Truncated, ChecksumMismatch, InvalidRecord
        naming `path` and the byte offset of the offending field.
    """
    path = str(path)
    if len(data) < HEADER_SIZE + 4:
        raise Truncated(f"file is {len(data)} bytes, a manifest needs at least 21", path, len(data))
    magic, version, reserved, n = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise BadMagic(f"magic is {magic!r}, expected {MAGIC!r}: not a synapse manifest", path, 0)
    if version != FORMAT_VERSION:
        raise UnsupportedVersion(f"format version {version}, this code reads {FORMAT_VERSION}", path, 8)
    if not 1 <= n <= MAX_BODY:
        raise InvalidRecord(f"body length {n} outside 1 .. {MAX_BODY}", path, 12)
    end = HEADER_SIZE + n
    if len(data) < end + 4:
        raise Truncated(f"file is {len(data)} bytes, body length {n} needs {end + 4}", path, len(data))
    if len(data) > end + 4:
        raise InvalidRecord(f"{len(data) - end - 4} bytes after the CRC", path, end + 4)
    stored, computed = struct.unpack_from("<I", data, end)[0], crc32c(data[:end])
    if stored != computed and check_crc:
        raise ChecksumMismatch(
            f"CRC32C over bytes 0..{end} is {computed:#010x}, stored {stored:#010x}", path, 0)
    if reserved != 0:
        raise InvalidRecord(f"reserved field is {reserved}, must be 0", path, 10)
    raw = data[HEADER_SIZE:end]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(f"body is not UTF-8: {exc.reason}", path, HEADER_SIZE + exc.start) from None
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        at = HEADER_SIZE + len(text[: exc.pos].encode())
        raise InvalidRecord(f"body is not valid JSON: {exc.msg}", path, at) from None
    except (ValueError, RecursionError) as exc:
        raise InvalidRecord(f"body is not valid JSON: {exc}", path, HEADER_SIZE) from None
    return _from_body(obj, path)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


class _Checker:
    """Field checks that raise InvalidRecord at the body offset (JSON has no byte positions)."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, msg: str) -> InvalidRecord:
        return InvalidRecord(msg, self.path, HEADER_SIZE)

    def obj(self, value: Any, where: str, keys: set[str], optional: set[str] = frozenset()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be a JSON object")
        missing = keys - value.keys()
        if missing:
            raise self.fail(f"{where} lacks key(s) {sorted(missing)}")
        unknown = value.keys() - keys - optional
        if unknown:
            raise self.fail(f"{where} has unknown key(s) {sorted(unknown)}")
        return value

    def integer(self, value: Any, where: str, lo: int, hi: int) -> int:
        # bool is a subclass of int in Python; JSON true/false is not a number.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{where} must be an integer, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise self.fail(f"{where} = {value} outside {lo} .. {hi}")
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where} must be a non-empty string")
        return value

    def name(self, value: Any, where: str, expected: re.Pattern | str) -> str:
        """A file name inside the store: a plain name, never a path, matching `expected`."""
        value = self.string(value, where)
        if "/" in value or "\\" in value or ".." in value or "\0" in value:
            raise self.fail(f"{where} {value!r} is not a plain file name inside the store")
        ok = expected.fullmatch(value) if isinstance(expected, re.Pattern) else value == expected
        if not ok:
            want = expected.pattern if isinstance(expected, re.Pattern) else expected
            raise self.fail(f"{where} {value!r} does not match {want!r}")
        return value


def _from_body(obj: Any, path: str) -> Manifest:
    c = _Checker(path)
    top = {"store_id", "generation", "header_version", "dim", "embedder", "next_record_id",
           "segments", "payload", "graph"}
    obj = c.obj(obj, "manifest body", top, optional={"bm25", "migration", "ingest", "spikes",
                                                       "dormancy"})
    store_id = c.string(obj["store_id"], "store_id")
    if not STORE_ID_RE.fullmatch(store_id):
        raise c.fail(f"store_id {store_id!r} is not 32 lowercase hex digits")
    generation = c.integer(obj["generation"], "generation", 0, MAX_U64)
    header_version = c.integer(obj["header_version"], "header_version", 1, 3)
    dim = c.integer(obj["dim"], "dim", 1, 4096)
    embedder = c.string(obj["embedder"], "embedder")
    next_record_id = c.integer(obj["next_record_id"], "next_record_id", 1, MAX_U64)

    if not isinstance(obj["segments"], list):
        raise c.fail("segments must be a list")
    segments: list[Segment] = []
    last_number = 0
    for i, s in enumerate(obj["segments"]):
        s = c.obj(s, f"segments[{i}]", {"file", "records"})
        name = c.name(s["file"], f"segments[{i}].file", SEGMENT_RE)
        number = int(SEGMENT_RE.fullmatch(name).group(1))
        if number <= last_number:  # also rejects seg-000000.dat and duplicates
            raise c.fail(f"segments[{i}].file {name!r}: segment numbers must increase from 1")
        last_number = number
        records = c.integer(s["records"], f"segments[{i}].records", 0, MAX_SEGMENT_RECORDS)
        segments.append(Segment(name, records))
    # Record ids are unique, >= 1 and < next_record_id, so there are at most next_record_id - 1.
    total = sum(s.records for s in segments)
    if total > next_record_id - 1:
        raise c.fail(f"segments hold {total} records but next_record_id is {next_record_id}")

    p = c.obj(obj["payload"], "payload", {"file", "bytes"})
    payload = PayloadRef(c.name(p["file"], "payload.file", PAYLOAD_RE),
                         c.integer(p["bytes"], "payload.bytes", PAYLOAD_FILE_HEADER, MAX_U64))

    g = c.obj(obj["graph"], "graph", {"csr", "log", "log_entries"})
    csr = None if g["csr"] is None else c.name(g["csr"], "graph.csr", CSR_RE)
    max_entries = (MAX_U64 - EDGE_LOG_HEADER) // EDGE_ENTRY_SIZE  # the byte length must fit a u64
    graph = GraphRef(csr, c.name(g["log"], "graph.log", EDGE_LOG_RE),
                     c.integer(g["log_entries"], "graph.log_entries", 0, max_entries))

    bm25 = None
    if "bm25" in obj:
        b = c.obj(obj["bm25"], "bm25", {"log", "log_bytes", "vocab", "vocab_bytes"})
        bm25 = {"log": c.name(b["log"], "bm25.log", BM25_LOG_RE),
                "log_bytes": c.integer(b["log_bytes"], "bm25.log_bytes", 0, MAX_U64),
                "vocab": c.name(b["vocab"], "bm25.vocab", BM25_VOCAB_RE),
                "vocab_bytes": c.integer(b["vocab_bytes"], "bm25.vocab_bytes", 0, MAX_U64)}
        for key in ("log_bytes", "vocab_bytes"):
            if 0 < bm25[key] < 16:  # 0: not written yet; otherwise at least the file header
                raise c.fail(f"bm25.{key} = {bm25[key]} is neither 0 nor >= 16")

    ingest = None
    if "ingest" in obj:
        i = c.obj(obj["ingest"], "ingest", {"file", "entries"})
        ingest = {"file": c.name(i["file"], "ingest.file", INGEST_RE),
                  "entries": c.integer(i["entries"], "ingest.entries", 0, MAX_U64 // 64)}

    spikes = None
    if "spikes" in obj:
        sp = c.obj(obj["spikes"], "spikes", {"file", "entries"})
        spikes = {"file": c.name(sp["file"], "spikes.file", SPIKES_RE),
                  "entries": c.integer(sp["entries"], "spikes.entries", 0, MAX_U64 // 64)}

    dormancy = None
    if "dormancy" in obj:
        d = c.obj(obj["dormancy"], "dormancy", {"file", "entries", "windows", "last_window"})
        dormancy = {"file": c.name(d["file"], "dormancy.file", DORMANCY_RE),
                    "entries": c.integer(d["entries"], "dormancy.entries", 0, MAX_U64 // 64),
                    "windows": c.integer(d["windows"], "dormancy.windows", 0, MAX_U64),
                    "last_window": d["last_window"]}
        if not isinstance(d["last_window"], list) or len(d["last_window"]) > 1000:
            raise c.fail("dormancy.last_window must be a list of at most 1000 record ids")
        for i, rid in enumerate(d["last_window"]):
            c.integer(rid, f"dormancy.last_window[{i}]", 1, MAX_U64)

    migration = None
    if "migration" in obj:
        mig = c.obj(obj["migration"], "migration", {"to", "files"})
        c.integer(mig["to"], "migration.to", 1, 3)
        if not isinstance(mig["files"], list) or not mig["files"]:
            raise c.fail("migration.files must be a non-empty list")
        names = {s.file for s in segments}
        for i, f in enumerate(mig["files"]):
            c.name(f, f"migration.files[{i}]", SEGMENT_RE)
            if f not in names:
                raise c.fail(f"migration.files[{i}] {f!r} is not a segment of this manifest")
        if len(set(mig["files"])) != len(mig["files"]):
            raise c.fail("migration.files names a segment twice")
        migration = {"to": mig["to"], "files": list(mig["files"])}

    return Manifest(store_id, generation, header_version, dim, embedder, next_record_id,
                    segments, payload, graph, migration, bm25, ingest, spikes, dormancy)


# --- files -------------------------------------------------------------------------------------


def read_manifest(store_dir: str | os.PathLike, check_files: bool = True,
                  check_crc: bool = True) -> Manifest:
    """Read and validate `<store_dir>/MANIFEST`.

    Parameters
    ----------
    store_dir
        The store directory.
    check_files
        Also refuse a symlink anywhere in the store, a named file that is missing or not a
        regular file, and a committed length beyond the end of its file (FORMAT.md section 10).

    Raises
    ------
    StoreNotFound
        No store directory or no MANIFEST.
    UnsafeStore
        MANIFEST or another entry of the store is a symlink (or not a regular file).
    CorruptStore
        Any subclass, naming the file and byte offset.
    """
    store = Path(store_dir)
    path = store / MANIFEST_NAME
    if not store.is_dir():
        if store.exists() or store.is_symlink():
            raise NotAStoreDirectory("not a directory, so not a store", str(store))
        raise StoreNotFound("no store directory here", str(store))
    check_owner(store)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            entries = list(fileio.file_sizes(store).items())
        except OSError:
            entries = []
        lost_manifest(store, entries, "the store cannot be read without it")
        raise StoreNotFound("no MANIFEST: not a synapse store, or not initialised", str(path)) from None
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeStore("MANIFEST is a symlink; refusing to follow it", str(path)) from None
        raise StoreIOError(exc.strerror or str(exc), str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeStore("MANIFEST is not a regular file", str(path))
        _check_uid(st, path)
        data = _read_at_most(fd, HEADER_SIZE + MAX_BODY + 5, path)  # +1 to see trailing bytes
    finally:
        os.close(fd)
    m = decode_manifest(data, path, check_crc)
    if check_files:
        check_store_files(store, m)
    return m


def _read_at_most(fd: int, limit: int, path: Path) -> bytes:
    chunks, total = [], 0
    try:
        while total < limit:
            chunk = os.read(fd, min(1 << 20, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), str(path)) from None
    return b"".join(chunks)


def _check_uid(st: os.stat_result, path) -> None:
    if st.st_uid != os.geteuid():
        raise UnsafeStore(f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}); "
                          "refusing to use another user's store", str(path))


def check_owner(store_dir: str | os.PathLike) -> None:
    """Refuse a store directory that is a symlink or belongs to another user (FORMAT.md s. 1):
    its files could be swapped under us, and root must not write into a user's store."""
    try:
        st = os.lstat(store_dir)
    except FileNotFoundError:
        raise StoreNotFound("no store directory here", str(store_dir)) from None
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), str(store_dir)) from None
    _check_uid(st, store_dir)


def check_entries(store_dir: str | os.PathLike) -> None:
    """Refuse a symlink or another user's file anywhere in the store directory, and anything
    but a regular file under a name the store uses for its data (a directory `payload-9.log`
    made every writer fail on it with "Is a directory" while verify said the store was
    healthy)."""
    try:
        with os.scandir(store_dir) as it:
            for entry in it:
                if entry.is_symlink():
                    raise UnsafeStore("symlink inside the store; refusing to use it", entry.path)
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # a writer's temp file, renamed since the listing
                    continue
                _check_uid(st, entry.path)
                if not stat.S_ISREG(st.st_mode) and (
                        is_data_file(entry.name) or entry.name == "MANIFEST"):
                    raise UnsafeStore("not a regular file, under a name the store uses for its "
                                      "data; move it out of the store directory", entry.path)
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), str(store_dir)) from None


def _derived_files(m: Manifest) -> list[tuple[str, int]]:
    """(file, committed length) of what is derived from the records or logs beside them: the
    graph, the BM25 index, the ingest index, the spike log, the dormancy state."""
    out = [(m.graph.log, EDGE_LOG_HEADER + EDGE_ENTRY_SIZE * m.graph.log_entries)]
    if m.graph.csr is not None:
        out.append((m.graph.csr, 0))  # its length is checked when it is read (section 7.1)
    if m.bm25 is not None:  # a length of 0 means not written yet: the file may be absent
        out += [(m.bm25[f], m.bm25[n]) for f, n in (("log", "log_bytes"), ("vocab", "vocab_bytes"))
                if m.bm25[n] > 0]
    if m.ingest is not None:
        out.append((m.ingest["file"], 16 + 40 * m.ingest["entries"]))
    if m.spikes is not None:
        out.append((m.spikes["file"], 16 + 24 * m.spikes["entries"]))
    if m.dormancy is not None:
        out.append((m.dormancy["file"], 16 + 20 * m.dormancy["entries"]))
    return out


def check_store_files(store_dir: str | os.PathLike, m: Manifest, derived: bool = True) -> None:
    """Refuse symlinks and other users' files in the store, and named files that are missing
    or shorter than committed (the first one). `derived=False` checks only the records' own
    files (segments, payload): what a rescue export needs when an index, the graph or a log is
    lost."""
    check_entries(Path(store_dir))
    problems = store_file_problems(store_dir, m, derived)
    if problems:
        raise problems[0]


MIGRATING_SUFFIX = ".migrating"  # a migration's converted copy (migration.py, section 9)


def segment_path(store_dir: str | os.PathLike, m: Manifest, name: str) -> Path:
    """Where a reader finds segment `name`: its file, or, while a migration intent names it and
    the roll-forward has moved the original to `.bak` but not yet renamed the converted copy
    (a migration killed in between; the next writer finishes it), that copy."""
    path = Path(store_dir) / name
    if m.migration and name in m.migration["files"] and not os.path.lexists(path):
        copy = path.with_name(name + MIGRATING_SUFFIX)
        if os.path.lexists(copy):
            return copy
    return path


def store_file_problems(store_dir: str | os.PathLike, m: Manifest,
                        derived: bool = True) -> list[StoreError]:
    """The error of every named file that is missing, not a regular file or shorter than
    committed, in manifest order (`inspect verify` lists them all)."""
    store = Path(store_dir)
    stride = {v: HEADER_BYTES[v] + m.dim + RECORD_TRAILER for v in HEADER_BYTES}
    migrating = set(m.migration["files"]) if m.migration else set()
    needed: list[tuple[str, int]] = []
    for s in m.segments:
        # Mid roll-forward a listed segment may already be in the target layout.
        versions = {m.header_version} | ({m.migration["to"]} if s.file in migrating else set())
        needed.append((s.file, SEGMENT_FILE_HEADER + s.records * min(stride[v] for v in versions)))
    needed.append((m.payload.file, m.payload.bytes))
    if derived:
        needed += _derived_files(m)
    problems: list[StoreError] = []
    for name, committed in needed:
        p = segment_path(store, m, name)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            problems.append(CorruptStore("named by MANIFEST but missing", str(p), 0))
            continue
        except OSError as exc:
            problems.append(StoreIOError(exc.strerror or str(exc), str(p)))
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(UnsafeStore("named by MANIFEST but not a regular file", str(p)))
        elif st.st_size < committed:
            problems.append(Truncated(f"file is {st.st_size} bytes, MANIFEST commits "
                                      f"{committed}", str(p), st.st_size))
    return problems


def rescue_view(store_dir: str | os.PathLike, m: Manifest) -> tuple[Manifest, list[tuple]]:
    """For a rescue export (FORMAT.md 17): `m` cut to the records its segment and payload
    files still hold, and (what, problem) for each cut. A segment shorter than committed keeps
    its whole rows (a missing one, none); a short payload.log keeps its bytes (the records
    whose entries lie past them then fail their checks and are skipped one by one). Symlinks,
    foreign entries and files that are not regular are refused as check_store_files refuses
    them; so is a damaged store mid-migration, whose segments may be in either layout, and
    one whose payload.log is missing (every text is gone)."""
    store = Path(store_dir)
    check_entries(store)
    problems = store_file_problems(store, m, derived=False)
    if not problems:
        return m, []
    if m.migration or any(not isinstance(p, CorruptStore) for p in problems):
        raise problems[0]
    stride = HEADER_BYTES[m.header_version] + m.dim + RECORD_TRAILER
    segments, cut = [], []
    for s in m.segments:
        size = _size_or_none(segment_path(store, m, s.file))
        whole = 0 if size is None or size < SEGMENT_FILE_HEADER \
            else min(s.records, (size - SEGMENT_FILE_HEADER) // stride)
        if whole < s.records:
            cut.append((f"last {s.records - whole} of the {s.records} records of {s.file}",
                        "named by MANIFEST but missing" if size is None else
                        f"file is {size} bytes, MANIFEST commits "
                        f"{SEGMENT_FILE_HEADER + s.records * stride}"))
        if whole:
            segments.append(s._replace(records=whole))
    size = _size_or_none(store / m.payload.file)
    if size is None:
        raise CorruptStore("named by MANIFEST but missing: every record's text is gone",
                           str(store / m.payload.file), 0)
    if size < m.payload.bytes:
        cut.append((f"end of {m.payload.file}",
                    f"file is {size} bytes, MANIFEST commits {m.payload.bytes}"))
    payload = m.payload._replace(bytes=min(size, m.payload.bytes))
    return dataclasses.replace(m, segments=segments, payload=payload), cut


def _size_or_none(path: Path) -> int | None:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return None


def write_manifest(store_dir: str | os.PathLike, m: Manifest) -> None:
    """Commit `m`: write MANIFEST.tmp, fsync, rename over MANIFEST, fsync the directory."""
    fileio.atomic_replace(Path(store_dir) / MANIFEST_NAME, encode_manifest(m))
