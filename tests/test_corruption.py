"""Damage to every file kind and region (FORMAT.md sections 2, 3, 6, 7, 10), seen through the CLI.

For each case one byte is flipped (or a field rewritten with its CRC made valid again, or the
file swapped for a foreign one) in a copy of a small store that has every file kind, graph.csr
included. Then:

* `synapse inspect verify` exits 1, and its JSON (stdout) and its message (stderr) name the
  damaged file and the byte offset FORMAT.md says a reader reports;
* for the cases of the main matrix, `synapse inspect`, `synapse inspect record ID` and
  `synapse migrate --header v2 --yes` run too. A command that reads the damaged bytes must exit
  non-zero with one short message and no traceback; a command that never reads them may
  succeed (e.g. `inspect` does not read payload entries, `migrate` does not read payload
  entries or the graph), but never with a traceback or a signal, and a migration that succeeds
  must leave the damage for `verify` to find, not hide it.
"""
from __future__ import annotations

import json
import shutil
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from conftest import (DIM, add_edges, assert_clean_failure, build_store, fold_graph, run_cli,
                      start_cli)
from store_format import graph_files as gf
from store_format import manifest as mf
from store_format.crc32c import crc32c
from synapse_cli.engine.store import StoreWriter

SEG = "seg-000001.dat"
STRIDE = 64 + DIM + 24  # V3
R1 = 64  # record 1 (index 0)
TRAILER = R1 + 64 + DIM  # record 1's trailer: record_id, payload_offset, payload_length, CRC
N_RECORDS = 40


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b""))


@dataclass
class Layout:
    """Offsets in the base store, from its own files."""

    manifest_len: int
    entry1_len: int  # payload entry of record 1, at offset 16
    folded: int  # edges.log entries folded into graph.csr
    log_entries: int
    csr_nodes: int
    csr_edges: int
    csr_len: int
    csr_half_weight: int = 0  # index of a csr edge whose weight is 0.5
    extra: dict = field(default_factory=dict)

    @property
    def csr_weights(self) -> int:
        return 64 + 8 * self.csr_nodes + 8 * (self.csr_nodes + 1) + 4 * self.csr_edges

    @property
    def csr_types(self) -> int:
        return self.csr_weights + 4 * self.csr_edges


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """40 records (V3), edges folded into graph.csr, then more edges in the log after it."""
    path = tmp_path_factory.mktemp("corruption") / "base"
    b = build_store(path, N_RECORDS, seed=21)
    fold_graph(path)
    with StoreWriter.open(path) as w:
        add_edges(w, b.edges, [1, 2, 3], [10, 20, 30], gf.ASSOCIATION, 0.25)
        w.commit()
    m = mf.read_manifest(path)
    seg = (path / SEG).read_bytes()
    entry1_len = struct.unpack_from("<I", seg, TRAILER + 16)[0]
    assert struct.unpack_from("<Q", seg, TRAILER + 8)[0] == 16  # record 1's entry comes first
    csr = (path / "graph.csr").read_bytes()
    n, e, folded = struct.unpack_from("<QQQ", csr, 16)
    lay = Layout(len((path / "MANIFEST").read_bytes()), entry1_len, folded, m.graph.log_entries,
                 n, e, len(csr))
    weights = np.frombuffer(csr, "<f4", e, lay.csr_weights)
    lay.csr_half_weight = int(np.argmax(weights == np.float32(0.5)))  # the RELATION edges
    assert weights[lay.csr_half_weight] == np.float32(0.5)
    assert 2 <= folded < m.graph.log_entries
    r = run_cli(["inspect", "verify"], path)
    assert r.returncode == 0, r.stdout + r.stderr
    return path, lay


# --- mutations ---------------------------------------------------------------------------------


def flip(offset):
    """XOR one byte with 0xFF; `offset` may be a function of the layout (and may be < 0)."""
    def mutate(data: bytearray, lay: Layout) -> bytes:
        at = offset(lay) if callable(offset) else offset
        data[at] ^= 0xFF
        return bytes(data)
    return mutate


def replace_with(make):
    return lambda data, lay: make(len(data))


def random_bytes(n: int) -> bytes:
    return np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()


def fix_crc(start, end, crc_at):
    """Recompute a CRC32C over data[start:end] stored at crc_at (after another mutation)."""
    def apply(data: bytearray):
        data[crc_at:crc_at + 4] = struct.pack("<I", crc32c(bytes(data[start:end])))
    return apply


def set_field(offset, fmt, value, *crcs):
    """Write a field, then make the CRCs that cover it valid again."""
    def mutate(data: bytearray, lay: Layout) -> bytes:
        at = offset(lay) if callable(offset) else offset
        struct.pack_into(fmt, data, at, value)
        for c in crcs:
            c(data, lay)
        return bytes(data)
    return mutate


def record1_crc(data, lay):
    fix_crc(R1, R1 + STRIDE - 4, R1 + STRIDE - 4)(data)


def seg_header_crc(data, lay):
    fix_crc(0, 60, 60)(data)


def entry1_crc(data, lay):
    fix_crc(16, 16 + lay.entry1_len - 4, 16 + lay.entry1_len - 4)(data)


def edge_entry_crc(k):
    def apply(data, lay):
        at = 16 + 32 * k(lay)
        fix_crc(at, at + 28, at + 28)(data)
    return apply


def folded_entry(lay):
    return 1


def tail_entry(lay):
    return lay.folded + 1


def _entry1_body(data: bytearray, lay: Layout) -> bytes:
    """Make record 1's payload body invalid JSON, same length, CRC valid."""
    assert data[16 + 12] == ord("{")
    data[16 + 12] = ord("x")
    entry1_crc(data, lay)
    return bytes(data)


# --- cases -------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    file: str
    mutate: object
    offset: object  # expected offset (int or function of the layout)
    kind: str | None  # expected error class, None: not pinned down by the format
    fails: str  # commands that read the damaged bytes and must fail: i=inspect r=record m=migrate
    record: int = 1
    matrix: bool = True  # also run inspect / record / migrate (else verify only)
    report_file: str | None = None  # the file verify names, when not the damaged one


ALL = "irm"
CASES = [
    # MANIFEST: magic, version, body length, body, CRC, foreign files
    Case("manifest-magic", "MANIFEST", flip(0), 0, "BadMagic", ALL),
    Case("manifest-version", "MANIFEST", flip(8), 8, "UnsupportedVersion", ALL, matrix=False),
    Case("manifest-body-length", "MANIFEST", flip(15), 12, "InvalidRecord", ALL, matrix=False),
    Case("manifest-body", "MANIFEST", flip(16 + 10), 0, "ChecksumMismatch", ALL),
    Case("manifest-crc", "MANIFEST", flip(-1), 0, "ChecksumMismatch", ALL),
    Case("manifest-random-bytes", "MANIFEST", replace_with(lambda n: b"\x00" + random_bytes(300)),
         0, "BadMagic", ALL),
    Case("manifest-png", "MANIFEST", replace_with(lambda n: tiny_png()), 0, "BadMagic", ALL),
    # segment: file header (magic, a field, CRC, a field with its CRC fixed), record 1's header
    # field, vector and trailer, a later record, fields failing validation under a valid CRC
    Case("segment-magic", SEG, flip(0), 0, "BadMagic", ALL, matrix=False),
    Case("segment-header-field", SEG, flip(12), 0, "ChecksumMismatch", ALL),
    Case("segment-header-crc", SEG, flip(61), 0, "ChecksumMismatch", ALL),
    Case("segment-header-stride-valid-crc", SEG, set_field(16, "<I", STRIDE + 1, seg_header_crc),
         16, "InvalidRecord", ALL, matrix=False),
    Case("record-header-field", SEG, flip(R1 + 20), R1, "ChecksumMismatch", ALL),
    Case("record-vector", SEG, flip(R1 + 64 + 7), R1, "ChecksumMismatch", ALL),
    Case("record-trailer", SEG, flip(TRAILER + 2), R1, "ChecksumMismatch", ALL),
    Case("record-crc", SEG, flip(R1 + STRIDE - 1), R1, "ChecksumMismatch", ALL, matrix=False),
    Case("record-10-vector", SEG, flip(R1 + 9 * STRIDE + 64 + 100), R1 + 9 * STRIDE,
         "ChecksumMismatch", ALL, record=10, matrix=False),
    Case("record-flags-valid-crc", SEG, set_field(R1 + 31, "<B", 0x40 | 0x02, record1_crc),
         R1 + 31, "InvalidRecord", ALL, matrix=False),
    Case("record-id-0-valid-crc", SEG, set_field(TRAILER, "<Q", 0, record1_crc), TRAILER,
         "InvalidRecord", ALL, matrix=False),
    Case("record-pointer-valid-crc", SEG, set_field(TRAILER + 8, "<Q", 10**9, record1_crc),
         TRAILER + 8, "InvalidRecord", ALL, matrix=False),
    Case("segment-random-bytes", SEG, replace_with(lambda n: b"\x00" + random_bytes(n - 1)), 0,
         "BadMagic", ALL),
    # A PNG is shorter than the committed records: the manifest check reports the length.
    Case("segment-png", SEG, replace_with(lambda n: tiny_png()), len(tiny_png()), "Truncated",
         ALL),
    # payload.log: file header, record 1's entry (length, record id, body, CRC)
    Case("payload-magic", "payload.log", flip(0), 0, "BadMagic", ALL),
    Case("payload-header-crc", "payload.log", flip(13), 0, "ChecksumMismatch", ALL,
         matrix=False),
    Case("payload-entry-length", "payload.log", flip(16), 16, None, "r"),
    Case("payload-entry-record-id", "payload.log", flip(16 + 4), 16, "ChecksumMismatch", "r",
         matrix=False),
    Case("payload-entry-body", "payload.log", flip(16 + 12 + 3), 16, "ChecksumMismatch", "r"),
    Case("payload-entry-crc", "payload.log", flip(lambda lay: 16 + lay.entry1_len - 1), 16,
         "ChecksumMismatch", "r"),
    Case("payload-entry-other-record-valid-crc", "payload.log",
         set_field(16 + 4, "<Q", 2, entry1_crc), 16 + 4, "InvalidRecord", "r", matrix=False),
    Case("payload-entry-body-not-json-valid-crc", "payload.log", _entry1_body, 16 + 12,
         "InvalidRecord", "r", matrix=False),
    # edges.log: file header, an entry folded into graph.csr (only verify reads it again), an
    # entry of the live tail, a field failing validation under a valid CRC
    Case("edges-magic", "edges.log", flip(0), 0, "BadMagic", "ir"),
    Case("edges-header-crc", "edges.log", flip(12), 0, "ChecksumMismatch", "ir", matrix=False),
    Case("edges-folded-entry", "edges.log", flip(lambda lay: 16 + 32 * folded_entry(lay) + 3),
         lambda lay: 16 + 32 * folded_entry(lay), "ChecksumMismatch", ""),
    Case("edges-tail-entry", "edges.log", flip(lambda lay: 16 + 32 * tail_entry(lay) + 9),
         lambda lay: 16 + 32 * tail_entry(lay), "ChecksumMismatch", "ir"),
    Case("edges-type-valid-crc", "edges.log",
         set_field(lambda lay: 16 + 32 * tail_entry(lay) + 20, "<B", 9,
                   edge_entry_crc(tail_entry)),
         lambda lay: 16 + 32 * tail_entry(lay), "InvalidRecord", "ir", matrix=False),
    # graph.csr: header, body (a weight still in range: only the CRC sees it), CRC, a field
    # failing validation
    Case("csr-magic", "graph.csr", flip(0), 0, "BadMagic", "ir"),
    Case("csr-header-count", "graph.csr", flip(16), 0, "ChecksumMismatch", "ir", matrix=False),
    Case("csr-weight", "graph.csr",
         set_field(lambda lay: lay.csr_weights + 4 * lay.csr_half_weight, "<f",
                   np.float32(0.5) + np.float32(2**-24)),
         64, "ChecksumMismatch", "ir"),
    Case("csr-crc", "graph.csr", flip(lambda lay: lay.csr_len - 1), 64, "ChecksumMismatch", "ir",
         matrix=False),
    Case("csr-type", "graph.csr", set_field(lambda lay: lay.csr_types + 2, "<B", 9),
         lambda lay: lay.csr_types + 2, "InvalidRecord", "ir", matrix=False),
]


def _run_many(argvs, path) -> list:
    procs = [start_cli(a, path) for a in argvs]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        p.stdout, p.stderr = stdout, stderr
        out.append(p)
    return out


def _assert_verify_names(r, file: str, offset: int, kind: str | None) -> None:
    desc = f"rc={r.returncode} stdout={r.stdout!r} stderr={r.stderr!r}"
    assert r.returncode == 1, desc
    assert "Traceback" not in r.stderr, desc
    assert r.stdout.count("\n") == 1, desc
    report = json.loads(r.stdout)
    assert report["ok"] is False and report["problems"], desc
    first = report["problems"][0]
    assert (first["file"], first["offset"]) == (file, offset), desc
    if kind is not None:
        assert first["kind"] == kind, desc
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(report["problems"]), desc
    assert lines[0].startswith(f"synapse: error: {file} at offset {offset}: "), desc


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_damage_is_reported_where_it_is(tmp_path, base, case):
    src, lay = base
    path = tmp_path / "store"
    shutil.copytree(src, path)
    target = path / case.file
    damaged = case.mutate(bytearray(target.read_bytes()), lay)
    assert damaged != target.read_bytes()
    target.write_bytes(damaged)
    offset = case.offset(lay) if callable(case.offset) else case.offset
    file = case.report_file or case.file

    if not case.matrix:
        _assert_verify_names(run_cli(["inspect", "verify"], path), file, offset, case.kind)
        return

    argvs = [["inspect", "verify"], ["inspect"], ["inspect", "record", case.record]]
    migrate = ["migrate", "--header", "v2", "--yes"]
    if "m" in case.fails:  # the migration must refuse, so it can run alongside the readers
        verify_r, inspect_r, record_r, migrate_r = _run_many(argvs + [migrate], path)
    else:  # it may succeed and rename files: not while the readers run
        verify_r, inspect_r, record_r = _run_many(argvs, path)
        migrate_r = run_cli(migrate, path)
    _assert_verify_names(verify_r, file, offset, case.kind)
    for flag, r in (("i", inspect_r), ("r", record_r), ("m", migrate_r)):
        desc = f"{r.args} rc={r.returncode} stderr={r.stderr!r}"
        assert r.returncode >= 0 and "Traceback" not in r.stderr, desc
        if flag in case.fails:
            lines = assert_clean_failure(r)
            if r.returncode == 65:  # a corrupt store: the message names the file
                assert Path(file).name in lines[0], desc
        elif r.returncode != 0:
            assert_clean_failure(r)
    if migrate_r.returncode == 0:
        # The migration did not read the damaged bytes; it must not have hidden them either.
        _assert_verify_names(run_cli(["inspect", "verify"], path), file, offset, case.kind)


def test_a_damaged_id_at_a_segment_end_is_blamed_on_its_record(tmp_path):
    # the last record of a segment with its id overwritten: the first record of the next
    # segment (intact) was named as out of order (a review's reproduction)
    from synapse_cli.engine.store import Store
    from store_format.errors import ChecksumMismatch

    path = tmp_path / "s"
    build_store(path, 600, max_segment_records=300)
    with Store.open(path) as s:
        seg = s.segments[0]
        at, file = seg.header.record_offset(299) + seg.header.stride - 24 + 4, seg.path
    with open(file, "r+b") as f:
        f.seek(at)
        f.write(b"\xff" * 4)
    with Store.open(path) as s, pytest.raises(ChecksumMismatch, match="row 299") as info:
        s.ids
    assert info.value.path.endswith("seg-000001.dat")


def test_a_file_that_vanishes_while_verify_reads_it_is_a_problem_not_a_crash(tmp_path,
                                                                           monkeypatch):
    """Under a concurrent `prune --compact`, `inspect verify` exited 74 ("seg-000002.dat: No
    such file or directory", tests/test_torture.py): compaction deletes the files of the
    generation verify had read. Such a file is a problem of the report, so verify's retry
    (which starts again when the manifest moved on) applies."""
    from synapse_cli.engine.maintenance import verify as vf

    path = build_store(tmp_path / "st", 20).path
    calls = []

    class Vanished:
        def __init__(self, file, *a, **k):
            calls.append(file)
            raise FileNotFoundError(2, "No such file or directory", str(file))

    monkeypatch.setattr(vf, "PayloadReader", Vanished)
    report = vf.verify(path).as_dict()
    assert not report["ok"] and calls
    assert [p["kind"] for p in report["problems"]] == ["FileNotFoundError"]
    assert report["problems"][0]["file"] == Path(calls[0]).name
    monkeypatch.undo()
    assert vf.verify(path).ok
