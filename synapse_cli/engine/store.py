"""The Store: a thin owner of one store directory's files (docs/FORMAT.md).

`Store.open(path)` is a read-only snapshot of what the manifest commits; it takes no lock.
`StoreWriter.open(path)` takes the writer lock, recovers from a crash, and stages appends that
become visible only on `commit()` (one manifest replacement). Algorithms live elsewhere.
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np

from store_format import graph_files as gf
from store_format import manifest as mf
from store_format import migration, segments as sg, spikes
from store_format.errors import (ChecksumMismatch, CorruptStore, InvalidRecord, StoreError,
                                 NotAStoreDirectory, StoreIOError, StoreNotFound)
from store_format.fileio import DIR_MODE, file_sizes, fsync_dir
from store_format.headers import Header, array_to_headers
from store_format.lock import WriterLock
from store_format.payload import PayloadReader, PayloadWriter, create_payload_log
from store_format.vectors import quantize_batch

from .memory import NewMemory

DEFAULT_DIM = 384
DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


class Store:
    """Read-only view of the committed state of a store."""

    def __init__(self, path: Path, manifest: mf.Manifest):
        self.path = Path(path)
        self.manifest = manifest
        self.segments: list[sg.SegmentReader] = []
        for seg in manifest.segments:
            number = sg.segment_number(seg.file)
            self.segments.append(sg.SegmentReader(mf.segment_path(self.path, manifest, seg.file),
                                                  seg.records,
                                                  expected_dim=manifest.dim,
                                                  expected_number=number))
        self.payload = PayloadReader(self.path / manifest.payload.file, manifest.payload.bytes)
        self._ids: np.ndarray | None = None
        self._starts: np.ndarray | None = None
        self._graph: gf.CSRGraph | None = None
        self.cut: list[tuple[str, str]] = []  # what a rescue open left out (Store.open)

    @classmethod
    def open(cls, path: os.PathLike | str, derived: bool = True) -> "Store":
        """Map what the manifest commits. A compaction or migration that commits between our
        reading the manifest and opening its files deletes files it named (FORMAT.md 14.2):
        then the manifest is read again and the open retried (up to READ_RETRIES times).
        `derived=False`: only the records' files are read, as far as they go (a file cut short
        keeps its whole records; `cut` names what was lost, manifest.rescue_view), and a
        MANIFEST whose CRC alone is wrong is read (`export --skip-damaged`, FORMAT.md 17)."""
        path = Path(path)
        for attempt in range(READ_RETRIES + 1):
            m = mf.read_manifest(path, check_files=False, check_crc=derived)
            try:
                cut = []
                if derived:
                    mf.check_store_files(path, m, derived)
                else:  # a rescue reads what the files still hold
                    view, cut = mf.rescue_view(path, m)
                    if cut and attempt < READ_RETRIES and manifest_changed(path, m):
                        continue  # a compaction replaced the files since: not damage
                    m = view
                store = cls(path, m)
                store.cut = cut
                return store
            except (CorruptStore, StoreIOError) as exc:
                if attempt == READ_RETRIES or not worth_retrying(path, m, exc):
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.payload.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- records -----------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return sum(s.n for s in self.segments)

    @property
    def ids(self) -> np.ndarray:
        """All committed record ids, u64, increasing (tombstoned ones included)."""
        if self._ids is None:
            parts = [np.asarray(s.ids) for s in self.segments]
            ids = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
            self._starts = np.cumsum([0] + [s.n for s in self.segments])
            # Read without the record CRCs (the header scan): a damaged id must be a typed
            # error here, not a record that `locate` cannot find later (FORMAT.md s. 10).
            bad = ids == 0
            bad[1:] |= ids[1:] <= ids[:-1]
            if bad.any():
                pos = int(np.argmax(bad))
                seg = int(np.searchsorted(self._starts, pos, side="right")) - 1
                r = self.segments[seg]
                row = pos - int(self._starts[seg])
                # a damaged id (up to 2^64) makes the intact record after it look out of order:
                # the CRCs of both, checked first, name the damaged one
                if row == 0 and seg > 0:  # the one before is the previous segment's last
                    p = self.segments[seg - 1]
                    p.check(p.n - 1, p.n, prev_id=int(p.ids[p.n - 2]) if p.n > 1 else 0)
                start = max(row - 1, 0)
                r.check(start, row + 1, prev_id=int(r.ids[start - 1]) if start else 0)
                raise InvalidRecord(f"record {row}: id {int(ids[pos])} is 0 or not greater than "
                                    f"the previous id", path=str(r.path),
                                    offset=r.header.record_offset(row) + r.header.stride - 24)
            self._ids = ids
        return self._ids

    def locate(self, record_id: int) -> tuple[int, int]:
        """(segment index, row) of a record id; KeyError when the store has no such record."""
        ids = self.ids
        if not 0 < int(record_id) < 2**64:  # ids are u64 >= 1 (FORMAT.md 3)
            raise KeyError(record_id)
        pos = int(np.searchsorted(ids, np.uint64(record_id)))
        if pos >= len(ids) or int(ids[pos]) != int(record_id):
            raise KeyError(record_id)
        seg = int(np.searchsorted(self._starts, pos, side="right")) - 1
        return seg, pos - int(self._starts[seg])

    def locate_checked(self, record_id: int) -> tuple[int, int]:
        """`locate`, then validate that record (CRC, header fields, id, payload pointer
        bounds): a record that fails is never returned (FORMAT.md section 10)."""
        seg, row = self.locate(record_id)
        pos = int(self._starts[seg]) + row
        prev = int(self._ids[pos - 1]) if pos else 0
        self.segments[seg].check(row, row + 1, prev_id=prev,
                                 payload_bytes=self.manifest.payload.bytes)
        return seg, row

    def header(self, record_id: int) -> Header:
        seg, row = self.locate_checked(record_id)
        return self.segments[seg].header_at(row)

    def vector(self, record_id: int) -> np.ndarray:
        seg, row = self.locate_checked(record_id)
        return np.array(self.segments[seg].vectors[row])

    def body(self, record_id: int) -> dict:
        seg, row = self.locate_checked(record_id)
        s = self.segments[seg]
        return self.payload.read(int(s.payload_offsets[row]), int(s.payload_lengths[row]),
                                 int(record_id))

    def bodies(self, record_ids) -> list[dict]:
        """`body` of many records, their records validated in one pass per segment (recall
        returns up to k of them per query). KeyError for an id the store does not have."""
        ids = self.ids
        want = np.asarray(record_ids, np.uint64)
        pos = np.searchsorted(ids, want)
        if len(want) and (pos.max() >= len(ids) or not np.array_equal(ids[pos], want)):
            bad = want[(pos >= len(ids)) | (ids[np.minimum(pos, len(ids) - 1)] != want)]
            raise KeyError(int(bad[0]))
        seg = np.searchsorted(self._starts, pos, side="right") - 1
        prev = np.where(pos > 0, ids[np.maximum(pos - 1, 0)], 0)
        for k in np.unique(seg).tolist():
            mine = np.nonzero(seg == k)[0]
            order = mine[np.argsort(pos[mine])]
            self.segments[k].check_rows(pos[order] - int(self._starts[k]), prev[order],
                                        payload_bytes=self.manifest.payload.bytes)
        out = []
        for p, k, rid in zip(pos.tolist(), seg.tolist(), want.tolist()):
            s, row = self.segments[k], p - int(self._starts[k])
            out.append(self.payload.read(int(s.payload_offsets[row]),
                                         int(s.payload_lengths[row]), rid))
        return out

    def headers(self) -> list[np.ndarray]:
        """Per segment: the structured header view of its committed records (header version
        of that segment)."""
        return [s.headers for s in self.segments]

    def spike_entries(self) -> np.ndarray:
        """The committed spike log entries (FORMAT.md 15), checked; empty when there is none."""
        if self.manifest.spikes is None:
            return np.zeros(0, spikes.ENTRY_DTYPE)
        return spikes.read(self.path / self.manifest.spikes["file"],
                           self.manifest.spikes["entries"])

    # --- graph -------------------------------------------------------------------------------

    def graph(self) -> gf.CSRGraph:
        """The live graph: CSR snapshot plus the committed edge-log tail."""
        if self._graph is None:
            self._graph = gf.live_graph(self.path, *self.manifest.graph)
        return self._graph


class StoreWriter(Store):
    """The single writer. Use as a context manager; nothing is visible until `commit()`."""

    def __init__(self, path: Path, manifest: mf.Manifest, lock: WriterLock):
        super().__init__(path, manifest)
        self.lock = lock
        self._seg_writer: sg.SegmentWriter | None = None
        self._payload_writer: PayloadWriter | None = None
        self._edge_entries: list[np.ndarray] = []
        self._spike_entries: list[np.ndarray] = []
        self._after_commit: list[tuple] = []  # in-place rewrites applied after the next commit
        self._pending = dataclasses.replace(manifest)
        # (generation, sizes of its files): where a failed transaction began
        self._sizes_at_commit = (manifest.generation, _file_sizes(path, manifest))

    @classmethod
    def open(cls, path: os.PathLike | str, lock_timeout: float = 30.0, create: bool = False,
             dim: int = DEFAULT_DIM, embedder: str = DEFAULT_EMBEDDER,
             header_version: int = 3) -> "StoreWriter":
        from .arguments import seconds

        seconds(lock_timeout, "lock_timeout")  # the API passes it through unchecked
        path = Path(path)
        if os.path.lexists(path) and not path.is_dir():  # a file, a dangling or looping link
            raise NotAStoreDirectory("not a directory, so not a store", str(path))
        if not path.exists():
            if not create:
                raise StoreNotFound("no store here", str(path))
            path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        if not os.path.lexists(path / mf.MANIFEST_NAME):
            # Checked before the lock too, so that pointing a writer at some other directory
            # does not leave a LOCK file behind in it.
            if not create:
                raise StoreNotFound("no MANIFEST: not a synapse store", str(path))
            check_creatable(path)
        mf.check_owner(path)  # before LOCK is created or anything is recovered in it
        lock = WriterLock(path, lock_timeout).acquire()
        try:
            mf.check_entries(path)  # recovery below must not silently unlink a planted symlink
            if not (path / mf.MANIFEST_NAME).exists():
                if not create:
                    raise StoreNotFound("no MANIFEST: not a synapse store", str(path))
                _initialise(path, dim, embedder, header_version)
            manifest = migration.recover(path, mf.read_manifest(path, check_files=False))
            _remove_uncommitted_files(path, manifest)
            return cls(path, mf.read_manifest(path), lock)
        except BaseException:
            lock.release()
            raise

    def __exit__(self, exc_type, *exc):
        try:
            if exc_type is not None:  # a failed transaction (disk full...): drop its bytes now
                self.close_writers()
                try:
                    on_disk = mf.read_manifest(self.path, check_files=False)
                    _remove_uncommitted_files(self.path, on_disk)
                    # Only if no commit happened since the sizes were taken: a compaction or a
                    # migration commits its own manifest, and its files are not to be cut.
                    if on_disk.generation == self._sizes_at_commit[0] and not on_disk.migration:
                        _truncate_to(self.path, self._sizes_at_commit[1])
                except (OSError, StoreError):
                    pass
        finally:
            self.close()

    def close(self) -> None:
        """Release files and the lock; anything not committed is dropped (truncated later)."""
        for w in (self._seg_writer, self._payload_writer):
            if w is not None:
                w.close()
        super().close()
        self.lock.release()

    # --- staging -----------------------------------------------------------------------------

    def append(self, memories: list[NewMemory]) -> list[int]:
        """Append memories (payload first, then records); return their new record ids."""
        if not memories:
            return []
        m = self._pending
        vectors = np.stack([np.asarray(x.vector, dtype=np.float32) for x in memories])
        if vectors.shape[1] != m.dim:
            raise ValueError(f"vectors have dim {vectors.shape[1]}, the store {m.dim}")
        q, norms = quantize_batch(vectors)
        first = m.next_record_id
        ids = list(range(first, first + len(memories)))
        pointers = self._payloads().append(
            [(rid, mem.body()) for rid, mem in zip(ids, memories)])
        headers = [mem.header(norm) for mem, norm in zip(memories, norms)]
        done = 0
        while done < len(memories):
            w = self._segment_with_room()
            take = min(w.room, len(memories) - done)
            sl = slice(done, done + take)
            records = sg.pack_records(headers[sl], q[sl], ids[sl],
                                      [p[0] for p in pointers[sl]], [p[1] for p in pointers[sl]],
                                      w.header.header_version)
            count = w.append(records)
            m = self._pending  # _segment_with_room may have added a segment
            segs = list(m.segments)
            segs[-1] = mf.Segment(segs[-1].file, count)
            m = dataclasses.replace(m, segments=segs)
            done += take
            self._pending = m
        self._pending = dataclasses.replace(
            m, next_record_id=first + len(memories),
            payload=mf.PayloadRef(m.payload.file, self._payloads().length))
        return ids

    def add_edges(self, src, dst, etype, weight=1.0, op=gf.UPSERT) -> None:
        """Stage edges (record ids) for the edge log; written at commit."""
        entries = gf.make_entries(src, dst, etype, weight, op)
        if len(entries):
            self._edge_entries.append(entries)

    def rewrite(self, record_id: int, header: Header | None = None,
                vector: np.ndarray | None = None, body: dict | None = None,
                _pointer: tuple[int, int] | None = None) -> None:
        """Replace a committed record's header, vector (float32, requantised) or payload.

        The record is rewritten in place with one pwrite (CRC included) and is visible to
        readers at once; a new payload entry is appended and committed with the transaction.
        """
        seg, row = self.locate_checked(record_id)  # never re-sign a damaged record
        reader = self.segments[seg]
        old = reader.records[row]
        version = reader.header.header_version
        h = header if header is not None else reader.header_at(row)
        q = np.array(old["vector"], dtype=np.int8)
        if vector is not None:
            qv, norms = quantize_batch(np.asarray(vector, np.float32)[None, :])
            q, h = qv[0], h.replace(exact_norm=float(norms[0]))
        off, length = int(old["payload_offset"]), int(old["payload_length"])
        if _pointer is not None:  # an entry appended (and committed) by rewrite_after_commit
            off, length = _pointer
        elif body is not None:
            (off, length), = self._payloads().append([(int(record_id), body)])
            self._pending = dataclasses.replace(
                self._pending, payload=mf.PayloadRef(self._pending.payload.file,
                                                     self._payloads().length))
        data = sg.pack_record(h, q, int(record_id), off, length, version)
        path = self.path / self.manifest.segments[seg].file
        fd = _open_for_rewrite(path)
        try:
            sg.rewrite_record(fd, row, data, str(path))
            os.fsync(fd)
        finally:
            os.close(fd)

    def add_spikes(self, record_ids, time_ms: int, kind: int = spikes.RECALL) -> None:
        """Stage one spike per record for the spike log (FORMAT.md 15); written at commit."""
        entries = spikes.make_entries(record_ids, time_ms, kind)
        if len(entries):
            self._spike_entries.append(entries)

    def touch(self, record_ids, time_ms: int | None = None) -> None:
        """Reconsolidation (seed 004): recall_count + 1 on each record, one fsync per segment,
        and a recall spike staged for each (committed by the next `commit()`)."""
        by_segment: dict[int, list[int]] = {}
        found = []
        for rid in record_ids:
            try:
                seg, row = self.locate_checked(int(rid))  # never re-sign a damaged record
            except KeyError:
                continue  # compacted away since the recall read it: nothing to count
            by_segment.setdefault(seg, []).append(row)
            found.append(int(rid))
        self.add_spikes(found, int(time.time() * 1000) if time_ms is None else time_ms)
        for seg, rows in by_segment.items():
            reader = self.segments[seg]
            version = reader.header.header_version
            path = self.path / self.manifest.segments[seg].file
            fd = _open_for_rewrite(path)
            try:
                for row in rows:
                    rec = reader.records[row]
                    h = reader.header_at(row)
                    h = h.replace(recall_count=min(h.recall_count + 1, 2**32 - 1))
                    data = sg.pack_record(h, np.array(rec["vector"]), int(rec["record_id"]),
                                          int(rec["payload_offset"]), int(rec["payload_length"]),
                                          version)
                    sg.rewrite_record(fd, row, data, str(path))
                os.fsync(fd)
            finally:
                os.close(fd)

    def set_flags(self, flags_by_id: dict[int, int]) -> int:
        """Rewrite the flag byte of committed records in place (tombstone, pin, resolve...),
        one fsync per segment touched; visible to readers at once, no manifest change
        (FORMAT.md 14.1). Every record is checked before any is rewritten. Returns how many
        records changed."""
        by_segment: dict[int, list[tuple[int, int]]] = {}
        for rid, new in flags_by_id.items():
            seg, row = self.locate(int(rid))
            by_segment.setdefault(seg, []).append((row, int(new) & 0xFF))
        payload_bytes = self.manifest.payload.bytes
        for seg, rows in by_segment.items():  # never re-sign a damaged record
            if len(rows) > 64:
                first = int(self._starts[seg])
                prev = int(self._ids[first - 1]) if first else 0
                self.segments[seg].check(prev_id=prev, payload_bytes=payload_bytes)
            else:
                for row, _ in rows:
                    self.locate_checked(int(self.segments[seg].ids[row]))
        changed = 0
        for seg, rows in sorted(by_segment.items()):
            reader = self.segments[seg]
            idx = np.array([r for r, f in rows if int(reader.raw[r, 31]) != f], np.int64)
            if not len(idx):
                continue
            new = np.array([f for r, f in rows if int(reader.raw[r, 31]) != f], np.uint8)
            raw = np.array(reader.raw[idx])  # flags: header byte 31 in every layout (FORMAT.md 4)
            raw[:, 31] = new
            raw[:, -4:] = sg._crc_rows(raw).astype("<u4").view(np.uint8).reshape(-1, 4)
            path = self.path / self.manifest.segments[seg].file
            fd = _open_for_rewrite(path)
            try:
                for row, data in zip(idx.tolist(), raw):
                    sg.rewrite_record(fd, row, data.tobytes(), str(path))
                os.fsync(fd)
            finally:
                os.close(fd)
            changed += len(idx)
        return changed

    def close_writers(self) -> None:
        """Close the open segment and payload writers (before the files are replaced)."""
        for w in (self._seg_writer, self._payload_writer):
            if w is not None:
                w.close()
        self._seg_writer = self._payload_writer = None

    def stage(self, **fields) -> None:
        """Set manifest fields (e.g. `bm25`, `ingest` committed lengths) for the next commit."""
        self._pending = dataclasses.replace(self._pending, **fields)

    def commit(self) -> mf.Manifest:
        """Append staged edges, fsync everything, replace the manifest. Returns it."""
        m = self._pending
        if self._edge_entries:
            entries = np.concatenate(self._edge_entries)
            log = gf.EdgeLog(self.path / m.graph.log)
            n = log.append(m.graph.log_entries, entries)
            m = dataclasses.replace(m, graph=mf.GraphRef(m.graph.csr, m.graph.log, n))
            self._edge_entries = []
        if self._spike_entries:
            m = self._write_spikes(m, np.concatenate(self._spike_entries))
            self._spike_entries = []
        m = m.next_generation()
        mf.write_manifest(self.path, m)
        self._sizes_at_commit = (m.generation, _file_sizes(self.path, m))
        dropped = mf.named_files(self.manifest) - mf.named_files(m)  # e.g. a rewritten spike log
        self.manifest = self._pending = m
        for name in dropped:
            (self.path / name).unlink(missing_ok=True)
        deferred, self._after_commit = self._after_commit, []
        for rid, header, vector, pointer in deferred:
            self.rewrite(rid, header=header, vector=vector, _pointer=pointer)
        return m

    def rewrite_after_commit(self, record_id: int, header: Header | None = None,
                             vector: np.ndarray | None = None, body: dict | None = None) -> None:
        """`rewrite`, made crash-safe with the transaction: a new payload entry is appended now
        (committed by the next `commit()`), and the record is rewritten in place only after that
        commit replaced the manifest, so a record never points past the committed payload."""
        pointer = None
        if body is not None:
            pointer, = self._payloads().append([(int(record_id), body)])
            self._pending = dataclasses.replace(
                self._pending, payload=mf.PayloadRef(self._pending.payload.file,
                                                     self._payloads().length))
        self.locate(record_id)  # KeyError now rather than after the commit
        self._after_commit.append((int(record_id), header, vector, pointer))

    def refresh(self) -> None:
        """Re-map the committed state (records appended by earlier commits become readable and
        rewritable through this writer)."""
        self.payload.close()
        Store.__init__(self, self.path, self.manifest)

    # --- helpers -----------------------------------------------------------------------------

    def _write_spikes(self, m: mf.Manifest, entries: np.ndarray) -> mf.Manifest:
        """Append to the spike log; when most of it is spikes no reader uses any more, write
        the ones it keeps to a new file instead, named with the coming generation (the old one
        is deleted once it is no longer named, like a compacted file)."""
        ref = m.spikes or {"file": mf.SPIKES_NAME, "entries": 0}
        path = self.path / ref["file"]
        if m.spikes is None:
            spikes.create(path)
        n = spikes.append(path, ref["entries"], entries)
        ref = {"file": ref["file"], "entries": n}
        if n > 4096:
            kept = spikes.latest(spikes.read(path, n))
            if spikes.needs_rewrite(n, len(kept)):
                name = mf.generation_name(mf.SPIKES_NAME, m.generation + 1)
                spikes.write(self.path / name, kept)
                ref = {"file": name, "entries": len(kept)}
        return dataclasses.replace(m, spikes=ref)

    def _payloads(self) -> PayloadWriter:
        if self._payload_writer is None:
            self._payload_writer = PayloadWriter(self.path / self.manifest.payload.file,
                                                 self.manifest.payload.bytes)
        return self._payload_writer

    def _segment_with_room(self) -> sg.SegmentWriter:
        m = self._pending
        if self._seg_writer is not None and self._seg_writer.room > 0:
            return self._seg_writer
        if self._seg_writer is None and m.segments:
            last = m.segments[-1]
            w = sg.SegmentWriter(self.path / last.file, last.records, expected_dim=m.dim)
            if w.room > 0:
                self._seg_writer = w
                return w
            w.close()
        if self._seg_writer is not None:
            self._seg_writer.close()
        # Numbers need not be consecutive after a compaction (FORMAT.md 14.2): continue past
        # the last one.
        number = sg.segment_number(m.segments[-1].file) + 1 if m.segments else 1
        name = sg.segment_file_name(number)
        sg.create_segment(self.path / name, m.header_version, m.dim, number, overwrite=True)
        self._pending = dataclasses.replace(m, segments=list(m.segments) + [mf.Segment(name, 0)])
        self._seg_writer = sg.SegmentWriter(self.path / name, 0, expected_dim=m.dim)
        return self._seg_writer


# How often a reader re-reads the manifest and starts again when a writer changed the store
# under it (each retry needs a new commit, or a record caught mid-rewrite).
READ_RETRIES = 3


def manifest_changed(path, m: mf.Manifest) -> bool:
    """Whether the store's manifest is no longer `m` (another writer committed since)."""
    try:
        now = mf.read_manifest(path, check_files=False)
    except StoreError:
        return False
    return (now.store_id, now.generation) != (m.store_id, m.generation)


def worth_retrying(path, m: mf.Manifest, exc: StoreError) -> bool:
    """A reader's error that a concurrent writer explains: a commit since we read the manifest
    (a compaction deleted a file it named, or a record was rewritten in place to point at a
    payload entry committed after it), or a record CRC read during its in-place rewrite
    (FORMAT.md s. 3: one pwrite; a reader may see it half done)."""
    if manifest_changed(path, m):
        return True
    if isinstance(exc, ChecksumMismatch):
        time.sleep(0.02)
        return True
    return False


def read_retrying(path, fn, derived: bool = True):
    """`fn(store)` on a fresh read-only snapshot, started again (up to READ_RETRIES times) when
    a concurrent writer explains the error (see `worth_retrying`); `derived` as in Store.open."""
    for attempt in range(READ_RETRIES + 1):
        store = Store.open(path, derived)
        try:
            return fn(store)
        except (CorruptStore, StoreIOError) as exc:
            if attempt == READ_RETRIES or not worth_retrying(path, store.manifest, exc):
                raise
        finally:
            store.close()
    raise AssertionError("unreachable")


def _open_for_rewrite(path: Path) -> int:
    """A segment opened to rewrite records in place (flags, recall counts): the OS's refusal
    as a StoreIOError naming the file, not a raw "[Errno 13]"."""
    try:
        return os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError as exc:
        err = StoreIOError(f"cannot rewrite records in place: {exc.strerror or exc}", str(path))
        err.hint = "the store's files must be writable by this user (see `ls -l` of the store)"
        raise err from None


def check_creatable(path: Path) -> None:
    """A new store is made only in a new or empty directory, or one holding what an interrupted
    creation leaves (mf.creation_leftover): `--store .` or SYNAPSE_HOME=$HOME must not turn a
    directory of the user's into a store, change its mode or have its *.tmp files removed, and
    a store whose MANIFEST was lost must not be created over (its records are still in its
    files: mf.lost_manifest raises)."""
    try:
        entries = sorted((e.name, e.stat(follow_symlinks=False).st_size)
                         for e in os.scandir(path))
    except OSError as exc:
        raise StoreIOError(exc.strerror or str(exc), str(path)) from None
    mf.lost_manifest(path, entries, "not creating a new store over them")
    left = [(n, size) for n, size in entries if not mf.creation_leftover(n, size)]
    if left:
        raise NotAStoreDirectory(
            f"not a synapse store, and not empty (it holds {len(left)} file(s), {left[0][0]!r} "
            "first); a new store is made only in a new or empty directory", str(path))


def _initialise(path: Path, dim: int, embedder: str, header_version: int) -> None:
    """Create the files of an empty store; the manifest, written last, makes it a store."""
    os.chmod(path, DIR_MODE)
    m = mf.Manifest.new(dim=dim, embedder=embedder, header_version=header_version)
    create_payload_log(path / m.payload.file, overwrite=True)
    gf.EdgeLog.create(path / m.graph.log)
    mf.write_manifest(path, m)


def _remove_uncommitted_files(path: Path, m: mf.Manifest) -> None:
    """Data files the manifest does not name are garbage (FORMAT.md 14.2 recovery): segments
    of a transaction that never committed, the new files of an interrupted compaction or the
    old ones of a finished one; and temp files."""
    named = mf.named_files(m)
    removed = False
    for entry in os.scandir(path):
        name = entry.name
        if (mf.is_data_file(name) and name not in named) or name.endswith(".tmp"):
            os.unlink(entry.path)
            removed = True
    if removed:
        fsync_dir(path)


def _file_sizes(path: Path, m: mf.Manifest) -> dict[str, int]:
    """Sizes of the files manifest `m` names, as they are now."""
    named = mf.named_files(m)
    return {name: size for name, size in file_sizes(path).items() if name in named}


def _truncate_to(path: Path, sizes: dict[str, int]) -> None:
    """Cut what a failed transaction appended to each file back to its size at the last commit
    (or at open), so that a full disk gets its space back now, not at the next write. Only
    bytes written since then go: nothing committed, whatever the manifest's lengths say."""
    for name, size in sizes.items():
        p = path / name
        if p.exists() and p.stat().st_size > size:
            os.truncate(p, size)


__all__ = ["Store", "StoreWriter", "NewMemory", "InvalidRecord", "array_to_headers"]
