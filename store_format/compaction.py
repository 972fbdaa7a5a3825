"""Compaction: rewrite a store without its tombstoned records (docs/FORMAT.md section 14.2).

New files are written under names no manifest has named (segments numbered past the largest in
use, `payload-G.log`, `edges-G.log`, `graph-G.csr`, `ingest-G.idx`, `spikes-G.log`, with G the generation of the
committing manifest), `fsync`ed, read back and verified; one manifest replacement commits them;
then the old files are deleted. A writer that opens the store deletes data files its manifest
does not name (`engine.store._remove_uncommitted_files`), so a crash at any point leaves the
records of exactly one manifest, with their ids.

Files this package does not know (the BM25 postings, `synapse_cli.models.bm25`) are rewritten by
`rewriters` the caller passes in. The caller holds the writer lock.
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import flags as fl
from . import dormancy as dm
from . import graph_files as gf
from . import ingest_index as ix
from . import manifest as mf
from . import segments as sg
from . import spikes as sp
from .errors import InvalidRecord, StoreError
from .fileio import FILE_MODE, fsync_dir, fsync_fd, pwrite_all
from .payload import PayloadReader, pack_entry, pack_file_header, verify_payload

# transform_body(record_id, body) -> a new body, or None to keep the entry's bytes as they are
BodyTransform = Callable[[int, dict], "dict | None"]
# rewriter(store_dir, manifest, kept_ids, generation) -> manifest fields to replace
Rewriter = Callable[[Path, mf.Manifest, np.ndarray, int], dict]


@dataclasses.dataclass
class CompactionResult:
    manifest: mf.Manifest          # the committed manifest
    kept: int                      # records in the compacted store
    removed_ids: np.ndarray        # u64, the tombstoned records that are gone
    rewritten_bodies: int          # payload bodies changed by `transform_body`
    deleted_files: list[str]       # old files removed after the commit


def _write_file(path: Path, chunks: Iterable[bytes]) -> int:
    """Write a new file (an orphan of an earlier crash is replaced), fsync; its length."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    pos = 0
    try:
        for chunk in chunks:
            if chunk:
                pwrite_all(fd, chunk, pos, path)
                pos += len(chunk)
        fsync_fd(fd, path)
    finally:
        os.close(fd)
    return pos


def _read_segments(store: Path, m: mf.Manifest) -> list[sg.SegmentReader]:
    """Verify every committed record (a rewrite re-signs what it copies), then map them."""
    readers, prev = [], 0
    for s in m.segments:
        number = sg.segment_number(s.file)
        prev = sg.verify_segment(store / s.file, s.records, payload_bytes=m.payload.bytes,
                                 prev_id=prev, expected_dim=m.dim,
                                 expected_number=number).last_id
        r = sg.SegmentReader(store / s.file, s.records, expected_dim=m.dim,
                             expected_number=number)
        if r.header.header_version != m.header_version:
            raise InvalidRecord(f"header version {r.header.header_version}, manifest says "
                                f"{m.header_version}", path=str(store / s.file), offset=10)
        readers.append(r)
    return readers


_MD5_HEX = re.compile(r"[0-9a-f]{32}")


def _index_fields(body: dict) -> bool:
    """The body of an ingested record, with fields an index entry can be made of (section 12);
    a body written by someone else that lacks them gets no entry rather than a crash."""
    md5, ses, src = body.get("md5"), body.get("session"), body.get("source")
    return (isinstance(md5, str) and _MD5_HEX.fullmatch(md5) is not None
            and all(v is None or isinstance(v, str) for v in (ses, src)))


def compact(store_dir, m: mf.Manifest, transform_body: BodyTransform | None = None,
            rewriters: Iterable[Rewriter] = (), spare=()) -> CompactionResult:
    """Rewrite the store without its tombstoned records (but those whose ids are in `spare`,
    which stay in the trash) and commit; see `_compact`.

    A compaction that fails (a full disk, a damaged record) deletes the new files it wrote, so
    the store is left exactly as it was (the next writer would delete them anyway, s. 14.2).
    """
    try:
        return _compact(store_dir, m, transform_body, rewriters, spare)
    except BaseException:
        _remove_unnamed(Path(store_dir))
        raise


def _remove_unnamed(store: Path) -> None:
    """Best effort: delete the data and temp files the manifest on disk does not name."""
    try:
        named = mf.named_files(mf.read_manifest(store, check_files=False))
        for entry in os.scandir(store):
            if (mf.is_data_file(entry.name) and entry.name not in named) \
                    or entry.name.endswith(".tmp"):
                os.unlink(entry.path)
        fsync_dir(store)
    except (OSError, StoreError):
        pass


def _compact(store_dir, m: mf.Manifest, transform_body: BodyTransform | None = None,
             rewriters: Iterable[Rewriter] = (), spare=()) -> CompactionResult:
    """Rewrite the store without its tombstoned records and commit; see the module docstring.

    Parameters
    ----------
    store_dir : the store directory (the caller holds its writer lock)
    m : the committed manifest (no `migration` key)
    transform_body : optional; may return a new payload body for a kept record (purge uses it
        to drop references to removed records)
    rewriters : callables that write further files for the kept ids and return the manifest
        fields naming them (already verified)
    spare : ids of tombstoned records kept as they are (another user's trash, under a scoped
        purge)
    """
    store = Path(store_dir)
    if m.migration:
        raise ValueError("a migration is being committed; recover it before compacting")
    gen = m.generation + 1
    readers = _read_segments(store, m)

    # Which records stay.
    kept_parts, removed_parts = [], []
    spared = np.asarray(sorted(spare), np.uint64)
    for r in readers:
        dead = fl.is_tombstone(np.asarray(r.headers["flags"]))
        if len(spared):
            dead &= ~np.isin(np.asarray(r.ids), spared)
        kept_parts.append(np.flatnonzero(~dead))
        removed_parts.append(np.asarray(r.ids)[dead])
    removed = (np.concatenate(removed_parts) if removed_parts else np.zeros(0, np.uint64))
    kept_ids = (np.concatenate([np.asarray(r.ids)[k] for r, k in zip(readers, kept_parts)])
                if readers else np.zeros(0, np.uint64)).astype(np.uint64)

    # 1. payload-G.log: the current entry of each kept record, in id order.
    payload_name = mf.generation_name(mf.PAYLOAD_NAME, gen)
    pointers: list[np.ndarray] = []  # per segment: (k, 2) u64 new (offset, length)
    rewritten = 0
    ingested: dict[int, tuple] = {}  # record id -> (md5 hex, session, source) from its body
    with PayloadReader(store / m.payload.file, m.payload.bytes) as old:
        chunks, pos = [pack_file_header()], len(pack_file_header())
        for r, rows in zip(readers, kept_parts):
            out = np.zeros((len(rows), 2), np.uint64)
            for j, row in enumerate(rows.tolist()):
                rid = int(r.ids[row])
                off, length = int(r.payload_offsets[row]), int(r.payload_lengths[row])
                body = old.read(off, length, rid)  # checks CRC, length and owner
                if _index_fields(body):  # an ingested record: its index entry
                    ingested[rid] = (body["md5"], body.get("session"), body.get("source"),
                                     body.get("tags") or (), body.get("speaker"))
                new = transform_body(rid, body) if transform_body is not None else None
                if new is not None and new != body:
                    blob = pack_entry(rid, new)
                    rewritten += 1
                else:
                    blob = bytes(old._map[off:off + length])
                chunks.append(blob)
                out[j] = (pos, len(blob))
                pos += len(blob)
            pointers.append(out)
        payload_bytes = _write_file(store / payload_name, chunks)
        del chunks

    # 2. segments, numbered past the largest in use, records with their new pointers.
    limit = sg.MAX_RECORDS
    number = max((sg.segment_number(s.file) for s in m.segments), default=0) + 1
    new_segments: list[mf.Segment] = []
    pending: list[np.ndarray] = []
    n_pending = 0

    def flush() -> None:
        nonlocal number, pending, n_pending
        if not n_pending:
            return
        name = sg.segment_file_name(number)
        sg.create_segment(store / name, m.header_version, m.dim, number,
                          created_ms=int(time.time() * 1000), overwrite=True)
        with sg.SegmentWriter(store / name, 0, expected_dim=m.dim) as w:
            count = w.append(np.concatenate(pending))
        new_segments.append(mf.Segment(name, count))
        number += 1
        pending, n_pending = [], 0

    for r, rows, ptr in zip(readers, kept_parts, pointers):
        for start in range(0, len(rows), 16_384):
            sel = rows[start:start + 16_384]
            raw = np.array(r.raw[sel])  # a copy: the old file stays untouched
            rec = raw.view(r.records.dtype).reshape(len(sel))
            rec["payload_offset"] = ptr[start:start + len(sel), 0]
            rec["payload_length"] = ptr[start:start + len(sel), 1].astype(np.uint32)
            rec["crc"] = sg._crc_rows(raw)
            while len(raw):
                take = min(len(raw), limit - n_pending)
                pending.append(raw[:take])
                n_pending += take
                raw = raw[take:]
                if n_pending == limit:
                    flush()
    flush()

    # 3. the graph: live edges between kept records, folded into graph-G.csr; empty edges-G.log.
    g = gf.live_graph(store, *m.graph)
    counts = np.diff(g.indptr.astype(np.int64))
    src = np.repeat(g.node_ids, counts)
    dst = g.node_ids[g.indices.astype(np.intp)]
    keep = np.isin(src, kept_ids) & np.isin(dst, kept_ids)
    e = np.zeros(int(keep.sum()), gf.ENTRY_DTYPE)
    e["src"], e["dst"] = src[keep], dst[keep]
    e["weight"], e["type"] = np.asarray(g.weights)[keep], np.asarray(g.types)[keep]
    e["op"] = gf.UPSERT
    graph = gf.fold(None, e)
    edges_name = mf.generation_name(mf.EDGE_LOG_NAME, gen)
    gf.EdgeLog.create(store / edges_name)
    csr_name = None
    if graph.n_edges:
        csr_name = mf.generation_name(mf.CSR_NAME, gen)
        gf.CSRSnapshot(graph, 0).write(store / csr_name)

    # 4. ingest-G.idx: rebuilt from the kept records' bodies (section 12), which is what the
    # old index held for a healthy store, and repairs one copied from another store.
    ingest = None
    if m.ingest is not None:
        rids = sorted(ingested)
        entries = ix.make_entries([bytes.fromhex(ingested[r][0]) for r in rids], rids,
                                  [ix.session_key(*ingested[r][1:]) for r in rids])
        ingest_name = mf.generation_name(mf.INGEST_NAME, gen)
        _write_file(store / ingest_name, [ix._file_header(), entries.tobytes()])
        ingest = {"file": ingest_name, "entries": len(entries)}

    # 5. spikes-G.log: the spikes readers use, of kept records (the log is bounded here too).
    spikes = None
    if m.spikes is not None:
        entries = sp.latest(sp.read(store / m.spikes["file"], m.spikes["entries"]),
                            keep=lambda rids: np.isin(rids, kept_ids))
        spikes_name = mf.generation_name(mf.SPIKES_NAME, gen)
        _write_file(store / spikes_name, [sp.fileheader.pack(sp.MAGIC), entries.tobytes()])
        spikes = {"file": spikes_name, "entries": len(entries)}

    # dormancy-G.dat: the dormancy state of kept records (section 16).
    dormancy = None
    if m.dormancy is not None:
        entries = dm.read(store / m.dormancy["file"], m.dormancy["entries"])
        entries = entries[np.isin(entries["record_id"], kept_ids)]
        dormancy_name = mf.generation_name(mf.DORMANCY_NAME, gen)
        _write_file(store / dormancy_name, [dm.fileheader.pack(dm.MAGIC), entries.tobytes()])
        dormancy = dict(m.dormancy, file=dormancy_name, entries=len(entries))

    updates: dict = {}
    for rewrite in rewriters:
        updates.update(rewrite(store, m, kept_ids, gen))
    fsync_dir(store)

    # 6. read everything back before committing.
    ids, prev = [], 0
    for s in new_segments:
        info = sg.verify_segment(store / s.file, s.records, payload_bytes=payload_bytes,
                                 prev_id=prev, expected_dim=m.dim,
                                 expected_number=sg.segment_number(s.file))
        prev = info.last_id
        ids.append(np.asarray(sg.SegmentReader(store / s.file, s.records).ids))
    got = np.concatenate(ids) if ids else np.zeros(0, np.uint64)
    if not np.array_equal(got, kept_ids):
        raise InvalidRecord(f"compacted segments hold {len(got)} records, expected "
                            f"{len(kept_ids)}", path=str(store))
    if verify_payload(store / payload_name, payload_bytes) != len(kept_ids):
        raise InvalidRecord("compacted payload log has the wrong number of entries",
                            path=str(store / payload_name))
    check = gf.live_graph(store, csr_name, edges_name, 0)
    if check.n_edges != graph.n_edges:
        raise InvalidRecord("compacted graph differs from the live graph", path=str(store))
    if ingest is not None:
        ix.read(store / ingest["file"], ingest["entries"])
    if spikes is not None:
        sp.read(store / spikes["file"], spikes["entries"])
    if dormancy is not None:
        dm.read(store / dormancy["file"], dormancy["entries"])

    new = dataclasses.replace(
        m, generation=gen, segments=new_segments,
        payload=mf.PayloadRef(payload_name, payload_bytes),
        graph=mf.GraphRef(csr_name, edges_name, 0), ingest=ingest, spikes=spikes,
        dormancy=dormancy, **updates)
    mf.write_manifest(store, new)  # the commit point

    deleted = sorted(mf.named_files(m) - mf.named_files(new))
    for name in deleted:
        try:
            os.unlink(store / name)
        except FileNotFoundError:
            pass
    fsync_dir(store)
    return CompactionResult(new, len(kept_ids), removed.astype(np.uint64), rewritten, deleted)


def scrub(store_dir) -> list[str]:
    """Purge's first and last step (FORMAT.md 14.3): delete the files that may hold copies of
    removed records: migration backups (`*.bak`), `*.migrating`, `*.tmp`, `extract.cache`.
    Returns the names deleted."""
    store = Path(store_dir)
    gone = []
    for entry in os.scandir(store):
        name = entry.name
        if (name.endswith((".bak", ".migrating", ".tmp")) or name == "extract.cache") \
                and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            gone.append(name)
    fsync_dir(store)
    return sorted(gone)
