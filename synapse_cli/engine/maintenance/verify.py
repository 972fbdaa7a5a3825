"""`inspect verify`: walk every checksum and invariant of a store (docs/FORMAT.md section 10).

Each file is checked independently so one damaged file does not hide damage in another; the
report lists every problem with its file and byte offset.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from store_format import graph_files as gf
from store_format import dormancy, ingest_index, spikes
from store_format import manifest as mf
from store_format import segments as sg
from store_format.errors import StoreError, StoreNotFound, UnsafeStore
from store_format.payload import PayloadReader


@dataclass
class Problem:
    file: str
    offset: int | None
    kind: str
    message: str

    def as_dict(self) -> dict:
        return {"file": self.file, "offset": self.offset, "kind": self.kind, "message": self.message}


@dataclass
class Report:
    store: str
    checked: dict = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"store": self.store, "ok": self.ok, "checked": self.checked,
                "problems": [p.as_dict() for p in self.problems]}


def _problem(exc: StoreError, fallback: str) -> Problem:
    name = Path(exc.path).name if exc.path else fallback
    return Problem(name, exc.offset, type(exc).__name__, exc.message)


def verify(store_dir, retries: int = 3) -> Report:
    """Check the manifest, every segment record, payload entry and pointer, the graph, the
    BM25 files and the ingest index.

    verify takes no lock. When it finds a problem and another writer committed meanwhile (a
    record rewritten in place now points at a payload entry committed after the manifest we
    read, or a compaction deleted a file), it starts again, up to `retries` times."""
    for _ in range(retries):
        report = _checked(store_dir)
        if report.ok or "manifest_generation" not in report.checked:
            return report
        try:
            now = mf.read_manifest(Path(store_dir), check_files=False).generation
        except StoreError:
            return report
        if now == report.checked["manifest_generation"] and not _maybe_mid_rewrite(report):
            return report
        time.sleep(0.05)
    return _checked(store_dir)


def _checked(store_dir) -> Report:
    """_verify, with a store file that vanished while it was read reported as a problem (not
    an OSError, exit 74): only a compaction that committed after the manifest was read deletes
    one, and verify's retry then sees the newer generation."""
    report = Report(str(Path(store_dir)))
    try:
        return _verify(store_dir, report)
    except FileNotFoundError as exc:
        report.problems.append(Problem(Path(exc.filename or "?").name, None,
                                       "FileNotFoundError", "the file vanished while read"))
        return report


def _maybe_mid_rewrite(report: Report) -> bool:
    """A record CRC mismatch may be a record caught while a writer rewrites it in place
    (reconsolidation, flags, EMA) -- a pwrite is not atomic for a concurrent mmap reader. Real
    damage persists across the retries and is reported then."""
    return any(p.kind == "ChecksumMismatch" and p.file.startswith("seg-") for p in report.problems)


def _verify(store_dir, report: Report) -> Report:
    store = Path(store_dir)
    try:
        m = mf.read_manifest(store, check_files=False)
        mf.check_entries(store)
    except (StoreNotFound, UnsafeStore):
        raise  # not damage: no store here (exit 66), or one we refuse to touch (exit 77)
    except StoreError as exc:
        report.problems.append(_problem(exc, mf.MANIFEST_NAME))
        return report  # nothing else can be located without a manifest
    report.checked["manifest_generation"] = m.generation
    missing = mf.store_file_problems(store, m)
    if missing:  # every named file that is missing or short, not only the first
        if any(isinstance(exc, UnsafeStore) for exc in missing):
            raise next(exc for exc in missing if isinstance(exc, UnsafeStore))
        report.problems += [_problem(exc, mf.MANIFEST_NAME) for exc in missing]
        return report

    # One pass over the payload: every entry validated (verify_payload's walk), and the `md5`
    # each body keeps ("" for none) kept for the ingest index check. A record may have older
    # entries (rewritten bodies); all keep the same `md5`, since its text never changes.
    md5: dict[int, str] | None = {}
    try:
        n = 0
        with PayloadReader(store / m.payload.file, m.payload.bytes) as payload:
            for e in payload.entries():
                n += 1
                md5[e.record_id] = e.body.get("md5", "")
        report.checked["payload_entries"] = n
    except StoreError as exc:
        report.problems.append(_problem(exc, m.payload.file))
        md5 = None
    payload_ok = md5 is not None

    # A damaged segment hides its record ids: then the edge-endpoint check below would blame
    # the (healthy) edge log, so it only runs when every segment verified.
    prev_id, records, ids, segments_ok = 0, 0, [], True
    for s in m.segments:
        path = mf.segment_path(store, m, s.file)  # mid migration: maybe its converted copy
        try:
            info = sg.verify_segment(path, s.records, payload_bytes=m.payload.bytes,
                                     prev_id=prev_id, expected_dim=m.dim,
                                     expected_number=sg.segment_number(s.file))
        except StoreError as exc:
            report.problems.append(_problem(exc, s.file))
            segments_ok = False
            continue
        prev_id = info.last_id
        records += info.records
        ids.append(np.array(sg.SegmentReader(path, s.records).ids))
        if info.header.header_version != m.header_version and not m.migration:
            report.problems.append(Problem(s.file, 10, "InvalidRecord",
                                           f"header version {info.header.header_version}, "
                                           f"manifest says {m.header_version}"))
        if payload_ok:  # else the payload problem is already reported, once
            try:
                _check_payload_owners(store, m, s, report)
            except StoreError as exc:
                report.problems.append(_problem(exc, s.file))
    if m.migration:  # an interrupted migration: can the next writer roll it forward?
        from store_format.migration import pending_problem

        stuck = pending_problem(store, m)
        if stuck is not None:
            p = _problem(stuck, mf.MANIFEST_NAME)
            report.problems.append(Problem(p.file, p.offset, p.kind, p.message + " (the next "
                                           "writer undoes the interrupted migration and "
                                           "keeps the originals)"))
    report.checked["segments"] = len(m.segments)
    report.checked["records"] = records
    if prev_id >= m.next_record_id:
        report.problems.append(Problem(mf.MANIFEST_NAME, None, "InvalidRecord",
                                       f"next_record_id {m.next_record_id} is not above the "
                                       f"last record id {prev_id}"))

    log_problem = None
    try:
        # Every committed entry, also those already folded into graph.csr (which the live
        # graph below never reads again).
        gf.EdgeLog(store / m.graph.log).read(m.graph.log_entries)
    except StoreError as exc:
        log_problem = _problem(exc, m.graph.log)
        report.problems.append(log_problem)
    try:
        g = gf.live_graph(store, *m.graph)
        report.checked["edges"] = g.n_edges
        known = np.concatenate(ids) if ids else np.zeros(0, np.uint64)
        missing = np.setdiff1d(g.node_ids, known) if segments_ok else ()
        if len(missing):
            report.problems.append(Problem(m.graph.log, None, "InvalidRecord",
                                           f"{len(missing)} edge endpoints are not records "
                                           f"(first: {int(missing[0])})"))
    except StoreError as exc:
        problem = _problem(exc, m.graph.log)
        if log_problem is None or problem.file != log_problem.file:  # not the same one twice
            report.problems.append(problem)
    _check_indexes(store, m, report, md5)
    return report


def _check_ingest_md5(store: Path, m: mf.Manifest, entries: np.ndarray,
                      md5: dict[int, str]) -> None:
    """Each index entry's MD5 must be that of its record's text (the `md5` an ingested record
    keeps in its body): CRCs alone do not catch an index copied from another store."""
    for i, (digest, rid) in enumerate(zip(entries["md5"], entries["record_id"].tolist())):
        stored = md5.get(rid)  # None: no such record; "": a body that keeps no MD5
        if stored is None or (stored and stored != bytes(digest).hex()):
            raise ingest_index.mismatch(store / m.ingest["file"], i, rid, missing=stored is None)


def _check_indexes(store: Path, m: mf.Manifest, report: Report,
                   md5: dict[int, str] | None) -> None:
    """The BM25 files (FORMAT.md 11.3), the ingest index (12), the spike log (15) and the
    dormancy state (16)."""
    if m.bm25 is not None:
        from ...models import bm25

        c = m.bm25
        try:
            terms = bm25.read_vocab(store / c["vocab"], c["vocab_bytes"])
            blocks = bm25.read_log(store / c["log"], c["log_bytes"], len(terms))
            report.checked["bm25_documents"] = sum(len(b[0]) for b in blocks)
        except StoreError as exc:
            report.problems.append(_problem(exc, c["log"]))
    if m.ingest is not None:
        try:
            entries = ingest_index.read(store / m.ingest["file"], m.ingest["entries"])
            report.checked["ingest_entries"] = len(entries)
            if md5 is not None:  # else the payload's damage is reported already
                _check_ingest_md5(store, m, entries, md5)
        except StoreError as exc:
            report.problems.append(_problem(exc, m.ingest["file"]))
    if m.spikes is not None:
        try:
            report.checked["spike_entries"] = len(
                spikes.read(store / m.spikes["file"], m.spikes["entries"]))
        except StoreError as exc:
            report.problems.append(_problem(exc, m.spikes["file"]))
    if m.dormancy is not None:
        try:
            report.checked["dormancy_entries"] = len(
                dormancy.read(store / m.dormancy["file"], m.dormancy["entries"]))
        except StoreError as exc:
            report.problems.append(_problem(exc, m.dormancy["file"]))


def _check_payload_owners(store: Path, m: mf.Manifest, s: mf.Segment, report: Report) -> None:
    """Every record's payload pointer must reach an entry that names the same record."""
    r = sg.SegmentReader(mf.segment_path(store, m, s.file), s.records)
    with PayloadReader(store / m.payload.file, m.payload.bytes) as payload:
        for i in range(r.n):
            payload.read(int(r.payload_offsets[i]), int(r.payload_lengths[i]), int(r.ids[i]))
