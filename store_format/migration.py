"""Header-version migration (seed 004, docs/FORMAT.md section 9).

Every source record is verified first (a conversion recomputes CRCs, so it must never copy
a damaged record). Each segment is rewritten to `seg-NNNNNN.dat.migrating`, verified (record
count, every CRC), then a manifest carrying the roll-forward intent is committed, the
originals are renamed to `.bak` and the new files into place, and a final manifest commits the
new header version.
`recover` (run by every writer on open) finishes an interrupted roll-forward or, without an
intent, deletes orphaned `.migrating` files; so a crash leaves the old store or the new one.

The caller holds the writer lock.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from . import headers as hdr
from . import manifest as mf
from . import segments as sg
from .errors import CorruptStore, InvalidRecord, StoreError, StoreIOError
from .fileio import fsync_dir

SUFFIX = mf.MIGRATING_SUFFIX
BACKUP = ".bak"
_CHUNK = 16_384  # records converted per batch: bounds memory on large segments


@dataclasses.dataclass
class Plan:
    """What a migration would do (the `--dry-run` report)."""

    from_versions: list[int]
    to_version: int
    segments: int
    records: int
    lossy: bool
    loses: dict  # field -> number of records whose value would be lost
    bytes_before: int
    bytes_after: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def plan(store_dir, m: mf.Manifest, to_version: int) -> Plan:
    store = Path(store_dir)
    hdr.check_version(to_version)
    versions, records, loses = set(), 0, {"arousal": 0, "storage_strength": 0}
    before = after = 0
    for s in m.segments:
        r = sg.SegmentReader(mf.segment_path(store, m, s.file), s.records, expected_dim=m.dim)
        v = r.header.header_version
        versions.add(v)
        records += r.n
        before += sg.FILE_HEADER_BYTES + r.n * r.header.stride
        after += sg.FILE_HEADER_BYTES + r.n * sg.record_stride(to_version, m.dim)
        if v >= 2 and to_version == 1 and r.n:
            loses["arousal"] += int(np.count_nonzero(r.headers["arousal"]))
            loses["storage_strength"] += int(np.count_nonzero(r.headers["storage_strength"] != 1.0))
    # A downgrade drops the fields the target lacks; it loses something only where a record
    # holds a value there (v3's extra bytes are reserved, always zero: v3 -> v2 loses nothing).
    loses = {k: n for k, n in loses.items() if n}
    lossy = any(v > to_version for v in versions) and bool(loses)
    return Plan(sorted(versions), to_version, len(m.segments), records, lossy, loses,
                before, after)


def migrate(store_dir, m: mf.Manifest, to_version: int) -> mf.Manifest:
    """Rewrite every segment whose header version differs from `to_version`; return the
    committed manifest. Segments already in the target layout are left alone."""
    store = Path(store_dir)
    hdr.check_version(to_version)
    # Converting recomputes every record CRC, so a damaged source record would come out of
    # the copy looking healthy: check every source record before anything is written.
    prev_id = 0
    for s in m.segments:
        prev_id = sg.verify_segment(store / s.file, s.records, payload_bytes=m.payload.bytes,
                                    prev_id=prev_id, expected_dim=m.dim,
                                    expected_number=sg.segment_number(s.file)).last_id
    todo = []
    try:
        for s in m.segments:
            number = sg.segment_number(s.file)
            src = sg.SegmentReader(store / s.file, s.records, expected_dim=m.dim,
                                   expected_number=number)
            if src.header.header_version != to_version:
                _write_converted(store, s, src, number, to_version, m.dim)
                todo.append(s.file)
        intent = dataclasses.replace(m, migration={"to": to_version,
                                                   "files": todo}).next_generation()
        if todo:
            mf.write_manifest(store, intent)
    except BaseException:
        _drop_copies(store)  # a full disk: leave the store as it was
        raise
    try:
        if todo:
            _roll_forward(store, intent)
        final = dataclasses.replace(intent, header_version=to_version,
                                    migration=None).next_generation()
        mf.write_manifest(store, final)
    except (OSError, StoreError) as exc:
        # Past the intent the migration is committed (section 9): say so, not just "failed".
        raise StoreIOError(f"the migration to v{to_version} is committed but not finished "
                           f"({exc}); the next command that writes to the store finishes it",
                           str(store)) from exc
    return final


def recover(store_dir, m: mf.Manifest) -> mf.Manifest:
    """Finish an interrupted migration, or delete orphaned `.migrating` files. A migration
    whose copies do not all check out (a copy damaged or deleted after it was written) is
    rolled back instead, onto the originals, which stay intact until the final commit."""
    store = Path(store_dir)
    if m.migration:
        if pending_problem(store, m) is None:
            _roll_forward(store, m)
            m = dataclasses.replace(m, header_version=m.migration["to"], migration=None)
        else:
            _roll_back(store, m)
            m = dataclasses.replace(m, migration=None)
        m = m.next_generation()
        mf.write_manifest(store, m)
    for entry in os.scandir(store):
        if entry.name.endswith(SUFFIX):
            os.unlink(entry.path)
    fsync_dir(store)
    return m


def _drop_copies(store: Path) -> None:
    """Best effort, after a failure before the intent: delete the `.migrating` copies (unless
    the manifest on disk does hold an intent, which needs them to roll forward)."""
    try:
        if mf.read_manifest(store, check_files=False).migration:
            return
        for entry in os.scandir(store):
            if entry.name.endswith(SUFFIX):
                os.unlink(entry.path)
        fsync_dir(store)
    except (OSError, StoreError):
        pass


def _write_converted(store: Path, s: mf.Segment, src: sg.SegmentReader, number: int,
                     to_version: int, dim: int) -> None:
    tmp = store / (s.file + SUFFIX)
    sg.create_segment(tmp, to_version, dim, number, created_ms=src.header.created_ms,
                      overwrite=True)
    w = sg.SegmentWriter(tmp, 0, expected_dim=dim)
    try:
        for start in range(0, src.n, _CHUNK):
            rec = src.records[start:start + _CHUNK]
            headers = hdr.convert_headers(rec, src.header.header_version, to_version)
            w.append(sg.pack_records(headers, np.asarray(rec["vector"]), rec["record_id"],
                                     rec["payload_offset"], rec["payload_length"], to_version))
    finally:
        w.close()
    info = sg.verify_segment(tmp, src.n, expected_dim=dim, expected_number=number)
    if info.records != src.n or (src.n and info.last_id != int(src.ids[-1])):
        os.unlink(tmp)
        raise InvalidRecord(f"migrated copy holds {info.records} records, source {src.n}",
                            path=str(tmp))


def pending_problem(store_dir, m: mf.Manifest) -> StoreError | None:
    """Why the intent of `m` cannot be rolled forward, or None: each segment it names must be
    either its converted copy, complete (every record and CRC, the target version), or
    already in place in the target version."""
    store, to = Path(store_dir), m.migration["to"]
    for name in m.migration["files"]:
        tmp = store / (name + SUFFIX)
        path = tmp if os.path.lexists(tmp) else store / name
        try:
            info = _verified(path, name, m)
        except (OSError, StoreError) as exc:
            return exc if isinstance(exc, StoreError) else StoreIOError(str(exc), str(path))
        if info.header.header_version != to:
            return InvalidRecord(f"header version {info.header.header_version}, the migration "
                                 f"converts to {to}" if path == tmp else
                                 f"the migration's copy of {name} is missing", path=str(tmp))
    return None


def _roll_back(store: Path, m: mf.Manifest) -> None:
    """Undo a roll-forward whose copies do not check out: every original back in place
    (from `.bak` where the roll-forward moved it; only a `.bak` whose records all check out,
    never a stale one), every copy deleted. CorruptStore when an original is gone too: then
    neither version is whole."""
    old = m.header_version
    for name in m.migration["files"]:
        tmp, final, bak = store / (name + SUFFIX), store / name, store / (name + BACKUP)
        if not _holds(final, name, m, old) and _holds(bak, name, m, old):
            os.replace(bak, final)  # moved aside, or replaced by the copy
        if os.path.lexists(tmp):
            os.unlink(tmp)
        if not _holds(final, name, m, old):
            raise CorruptStore(f"a migration to v{m.migration['to']} can neither finish (a "
                               f"copy is damaged or missing) nor be undone (the v{old} "
                               "original is gone)", str(final))
    fsync_dir(store)


def _verified(path: Path, name: str, m: mf.Manifest) -> sg.SegmentInfo:
    """verify_segment of `path` as segment `name` of `m` (its record count, dim and number)."""
    records = next(s.records for s in m.segments if s.file == name)
    return sg.verify_segment(path, records, expected_dim=m.dim,
                             expected_number=sg.segment_number(name))


def _holds(path: Path, name: str, m: mf.Manifest, version: int) -> bool:
    """`path` holds segment `name` of `m` whole, in header `version`."""
    try:
        return _verified(path, name, m).header.header_version == version
    except (OSError, StoreError):
        return False


def _roll_forward(store: Path, m: mf.Manifest) -> None:
    """Idempotent: for each file of the intent, original -> .bak, .migrating -> original."""
    for name in m.migration["files"]:
        tmp, final, bak = store / (name + SUFFIX), store / name, store / (name + BACKUP)
        if tmp.exists():
            if final.exists():
                os.replace(final, bak)
            os.replace(tmp, final)
    fsync_dir(store)
