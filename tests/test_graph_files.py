"""graph.csr snapshots, edges.log and folding (docs/FORMAT.md section 7)."""
from __future__ import annotations

import struct
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from store_format import errors
from store_format.crc32c import crc32c
from store_format.graph_files import (
    ABSTRACTION, ASSOCIATION, ENTRY_DTYPE, RELATION, REMOVE, TEMPORAL, UPSERT, CSRGraph,
    CSRSnapshot, EdgeLog, fold, live_graph, make_entries,
)

# --- byte-exact files, assembled by hand from the section 7 tables ------------------------------
# CRCs were computed with an independent bit-at-a-time CRC32C, not with the code under test.

# Nodes 5 and 9; 5 -> 9 ASSOCIATION weight 0.5, 9 -> 5 TEMPORAL weight 1.0; 3 log entries folded.
CSR_SMALL = bytes.fromhex(
    "53594e4752415048" "0100" "0000" "00000000"      # magic, version, reserved, reserved
    "0200000000000000" "0200000000000000"            # n_nodes 2, n_edges 2
    "0300000000000000" + "00" * 20 + "960572be"       # folded 3, reserved, header CRC
    "0500000000000000" "0900000000000000"            # 64: node_ids
    "0000000000000000" "0100000000000000" "0200000000000000"  # 80: indptr
    "01000000" "00000000"                            # 104: indices
    "0000003f" "0000803f"                            # 112: weights 0.5, 1.0
    "0200" "000000000000"                            # 120: types, 122: padding to 128
    "f2736cd9"                                       # 128: CRC of bytes 64..128
)
LOG_HEADER = bytes.fromhex("53594e4544474553" "0100" "0000" "2db24d02")
ENTRY_5_9 = bytes.fromhex(
    "0500000000000000" "0900000000000000" "0000003f" "02" "01" "000000000000" "a1ef9644")


def small_graph() -> CSRGraph:
    return CSRGraph(np.array([5, 9], np.uint64), np.array([0, 1, 2], np.uint64),
                    np.array([1, 0], np.uint32), np.array([0.5, 1.0], np.float32),
                    np.array([ASSOCIATION, TEMPORAL], np.uint8))


def assert_graph_equal(a: CSRGraph, b: CSRGraph) -> None:
    for name in ("node_ids", "indptr", "indices", "weights", "types"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


def test_small_snapshot_is_byte_exact(tmp_path):
    assert len(CSR_SMALL) == 132
    p = tmp_path / "graph.csr"
    CSRSnapshot(small_graph(), 3).write(p)
    assert p.read_bytes() == CSR_SMALL
    snap = CSRSnapshot.read(p)
    assert snap.folded_entries == 3
    assert_graph_equal(snap.graph, small_graph())


def test_small_edge_log_is_byte_exact(tmp_path):
    p = tmp_path / "edges.log"
    log = EdgeLog.create(p)
    assert p.read_bytes() == LOG_HEADER
    assert log.append(0, make_entries(5, 9, ASSOCIATION, 0.5)) == 1
    assert p.read_bytes() == LOG_HEADER + ENTRY_5_9
    e = log.read(1)
    assert (int(e["src"][0]), int(e["dst"][0]), float(e["weight"][0]), e["type"][0], e["op"][0]) \
        == (5, 9, 0.5, ASSOCIATION, UPSERT)


def test_empty_snapshot(tmp_path):
    p = tmp_path / "graph.csr"
    CSRSnapshot(CSRGraph.empty(), 0).write(p)
    assert p.stat().st_size == 64 + 8 + 4
    snap = CSRSnapshot.read(p)
    assert snap.graph.n_nodes == 0 and snap.graph.n_edges == 0


# --- corruption of graph.csr ---------------------------------------------------------------------

@pytest.mark.parametrize("offset, xor, kind, at", [
    (0, 0x01, errors.BadMagic, 0),
    (8, 0x02, errors.UnsupportedVersion, 8),
    (16, 0x01, errors.ChecksumMismatch, 0),            # n_nodes: header CRC
    (30, 0x40, errors.ChecksumMismatch, 0),            # n_edges: header CRC
    (61, 0x01, errors.ChecksumMismatch, 0),            # header CRC itself
    (64, 0x05, errors.InvalidRecord, 64),              # node_ids[0] = 0
    (64, 0x80, errors.InvalidRecord, 72),              # node_ids[0] = 133 > node_ids[1]
    (79, 0x01, errors.ChecksumMismatch, 64),           # node_ids[1] larger: still increasing
    (80, 0x01, errors.InvalidRecord, 80),              # indptr[0] = 1
    (88, 0x02, errors.InvalidRecord, 96),              # indptr[1] = 3 > indptr[2]
    (96, 0x01, errors.InvalidRecord, 96),              # indptr[2] = 3 != n_edges
    (104, 0x02, errors.InvalidRecord, 104),            # indices[0] = 3 >= n_nodes
    (111, 0x80, errors.InvalidRecord, 108),            # indices[1] huge
    (115, 0x40, errors.InvalidRecord, 112),            # weights[0] = 1.7e38
    (119, 0x80, errors.InvalidRecord, 116),            # weights[1] = -1.0
    (112, 0x01, errors.ChecksumMismatch, 64),          # weights[0] still in [0, 1]
    (120, 0x04, errors.InvalidRecord, 120),            # types[0] = 6
    (121, 0x01, errors.ChecksumMismatch, 64),          # types[1] = 1, a valid type
    (125, 0x01, errors.InvalidRecord, 122),            # padding
    (128, 0x01, errors.ChecksumMismatch, 64),          # body CRC
    (131, 0x80, errors.ChecksumMismatch, 64),
])
def test_flipped_snapshot_byte(tmp_path, offset, xor, kind, at):
    data = bytearray(CSR_SMALL)
    data[offset] ^= xor
    p = tmp_path / "graph.csr"
    p.write_bytes(bytes(data))
    with pytest.raises(kind) as exc:
        CSRSnapshot.read(p)
    assert (type(exc.value), exc.value.path, exc.value.offset) == (kind, str(p), at)


def with_header(n_nodes: int, n_edges: int, body: bytes = b"") -> bytes:
    head = b"SYNGRAPH" + struct.pack("<HHIQQQ", 1, 0, 0, n_nodes, n_edges, 0) + bytes(20)
    return head + struct.pack("<I", crc32c(head)) + body


@pytest.mark.parametrize("n_nodes, n_edges", [
    (2, 2**62), (2**62, 2), (2**64 - 1, 2**64 - 1), (2**61, 0), (0, 2**63),
])
def test_hostile_counts_do_not_allocate(tmp_path, n_nodes, n_edges):
    p = tmp_path / "graph.csr"
    p.write_bytes(with_header(n_nodes, n_edges, CSR_SMALL[64:]))
    tracemalloc.start()
    try:
        with pytest.raises(errors.Truncated) as exc:
            CSRSnapshot.read(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert (exc.value.path, exc.value.offset) == (str(p), len(CSR_SMALL))


def test_file_length_must_be_exact(tmp_path):
    p = tmp_path / "graph.csr"
    p.write_bytes(CSR_SMALL + bytes(8))
    with pytest.raises(errors.InvalidRecord) as exc:
        CSRSnapshot.read(p)
    assert exc.value.offset == len(CSR_SMALL)
    p.write_bytes(CSR_SMALL[:-1])
    with pytest.raises(errors.Truncated):
        CSRSnapshot.read(p)
    p.write_bytes(CSR_SMALL[:40])
    with pytest.raises(errors.Truncated):
        CSRSnapshot.read(p)


def test_consistent_counts_with_inconsistent_indptr(tmp_path):
    # n_edges = 0 but indptr claims one edge: the length check passes, indptr does not.
    body = struct.pack("<QQQ", 5, 0, 1) + bytes(4)
    p = tmp_path / "graph.csr"
    p.write_bytes(with_header(1, 0, body))
    with pytest.raises(errors.InvalidRecord) as exc:
        CSRSnapshot.read(p)
    assert exc.value.offset == 64 + 8 + 8


def test_write_refuses_invalid_graph(tmp_path):
    g = small_graph()
    bad = CSRGraph(g.node_ids, g.indptr, np.array([1, 2], np.uint32), g.weights, g.types)
    with pytest.raises(ValueError):
        CSRSnapshot(bad, 0).write(tmp_path / "graph.csr")
    assert not (tmp_path / "graph.csr").exists()


# --- edges.log -------------------------------------------------------------------------------------

def entry_bytes(src=5, dst=9, weight=0.5, etype=2, op=1, reserved=bytes(6)) -> bytes:
    raw = struct.pack("<QQfBB", src, dst, weight, etype, op) + reserved
    return raw + struct.pack("<I", crc32c(raw))


@pytest.mark.parametrize("bad, kind", [
    (entry_bytes()[:-1] + b"\x00", errors.ChecksumMismatch),   # stored CRC wrong
    (bytes([ENTRY_5_9[0] ^ 1]) + ENTRY_5_9[1:], errors.ChecksumMismatch),  # src flipped
    (entry_bytes(etype=4), errors.InvalidRecord),
    (entry_bytes(op=0), errors.InvalidRecord),
    (entry_bytes(op=3), errors.InvalidRecord),
    (entry_bytes(weight=float("nan")), errors.InvalidRecord),
    (entry_bytes(weight=float("inf")), errors.InvalidRecord),
    (entry_bytes(weight=2.0), errors.InvalidRecord),
    (entry_bytes(reserved=b"\x00\x00\x01\x00\x00\x00"), errors.InvalidRecord),
    (entry_bytes(src=0), errors.InvalidRecord),
    (entry_bytes(dst=0), errors.InvalidRecord),
])
def test_bad_log_entry(tmp_path, bad, kind):
    assert entry_bytes() == ENTRY_5_9
    p = tmp_path / "edges.log"
    p.write_bytes(LOG_HEADER + ENTRY_5_9 + bad + ENTRY_5_9)
    with pytest.raises(kind) as exc:
        EdgeLog(p).read(3)
    assert (type(exc.value), exc.value.path, exc.value.offset) == (kind, str(p), 16 + 32)
    assert len(EdgeLog(p).read(1)) == 1  # the committed prefix before it is still readable


@pytest.mark.parametrize("offset, resign, kind, at", [
    (0, False, errors.BadMagic, 0), (8, False, errors.ChecksumMismatch, 0),
    (8, True, errors.UnsupportedVersion, 8), (10, False, errors.ChecksumMismatch, 0),
    (10, True, errors.InvalidRecord, 10), (12, False, errors.ChecksumMismatch, 0),
])
def test_bad_log_header(tmp_path, offset, resign, kind, at):
    """A changed version or reserved field is damage unless the header CRC was re-signed."""
    data = bytearray(LOG_HEADER + ENTRY_5_9)
    data[offset] ^= 1
    if resign:
        data[12:16] = crc32c(bytes(data[:12])).to_bytes(4, "little")
    p = tmp_path / "edges.log"
    p.write_bytes(bytes(data))
    with pytest.raises(kind) as exc:
        EdgeLog(p).read(1)
    assert (exc.value.path, exc.value.offset) == (str(p), at)
    with pytest.raises(kind):
        EdgeLog(p).append(1, make_entries(1, 2, TEMPORAL))


def test_torn_tail_truncated_before_append(tmp_path):
    p = tmp_path / "edges.log"
    log = EdgeLog.create(p)
    first = make_entries([1, 2, 3], [2, 3, 4], [TEMPORAL, ABSTRACTION, RELATION], [1.0, 0.25, 0.75])
    n = log.append(0, first)
    with open(p, "ab") as f:  # a crash mid-append: 1.5 uncommitted entries
        f.write(make_entries(7, 8, TEMPORAL).tobytes() + b"\xee" * 16)
    assert np.array_equal(log.read(n), first)  # readers ignore the tail
    n = log.append(n, make_entries(9, 10, ASSOCIATION, 0.5))
    assert n == 4 and p.stat().st_size == 16 + 4 * 32
    got = log.read(n)
    assert np.array_equal(got[:3], first)
    assert (int(got["src"][3]), int(got["dst"][3])) == (9, 10)
    assert np.array_equal(log.read(n, start=2), got[2:])


def test_committed_past_end_of_file(tmp_path):
    p = tmp_path / "edges.log"
    log = EdgeLog.create(p)
    log.append(0, make_entries(1, 2, TEMPORAL))
    for committed in (2, 2**62, (2**64 - 17) // 32):
        tracemalloc.start()
        try:
            with pytest.raises(errors.Truncated) as exc:
                log.read(committed)
            assert tracemalloc.get_traced_memory()[1] < 1 << 20
        finally:
            tracemalloc.stop()
        assert (exc.value.path, exc.value.offset) == (str(p), 48)
    with pytest.raises(errors.Truncated):
        log.append(2, make_entries(1, 2, TEMPORAL))
    assert p.stat().st_size == 48  # nothing written


def test_make_entries_refuses_invalid():
    for kw in (dict(src=0), dict(etype=4), dict(weight=float("nan")), dict(weight=-0.5), dict(op=3)):
        args = dict(src=1, dst=2, etype=TEMPORAL, weight=1.0, op=UPSERT) | kw
        with pytest.raises(ValueError):
            make_entries(**args)


# --- folding ---------------------------------------------------------------------------------------

def as_dict(g: CSRGraph) -> dict[tuple[int, int, int], float]:
    out = {}
    for i in range(g.n_nodes):
        for j in range(int(g.indptr[i]), int(g.indptr[i + 1])):
            out[(int(g.node_ids[i]), int(g.node_ids[g.indices[j]]), int(g.types[j]))] = \
                float(g.weights[j])
    return out


def reference_fold(base: dict, entries: np.ndarray) -> dict:
    out = dict(base)
    for e in entries:
        key = (int(e["src"]), int(e["dst"]), int(e["type"]))
        if e["op"] == UPSERT:
            out[key] = float(e["weight"])
        else:
            out.pop(key, None)
    return out


def assert_canonical(g: CSRGraph) -> None:
    """Rows by node id, each row by (dst, type), nodes exactly the endpoints of edges."""
    assert np.all(np.diff(g.node_ids.astype(np.float64)) > 0)
    endpoints = {k[0] for k in as_dict(g)} | {k[1] for k in as_dict(g)}
    assert set(g.node_ids.tolist()) == endpoints
    for i in range(g.n_nodes):
        lo, hi = int(g.indptr[i]), int(g.indptr[i + 1])
        keys = list(zip(g.node_ids[g.indices[lo:hi]].tolist(), g.types[lo:hi].tolist()))
        assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_fold_semantics():
    e = make_entries(
        src=[1, 1, 2, 1, 3, 3, 4, 1],
        dst=[2, 2, 3, 2, 4, 4, 5, 2],
        etype=[TEMPORAL, TEMPORAL, RELATION, ASSOCIATION, TEMPORAL, TEMPORAL, TEMPORAL, TEMPORAL],
        weight=[1.0, 0.5, 0.3, 0.9, 1.0, 0.0, 1.0, 0.0],
        op=[UPSERT, UPSERT, UPSERT, UPSERT, UPSERT, REMOVE, REMOVE, REMOVE])
    g = fold(None, e)
    # 1->2 TEMPORAL: upserted twice then removed; 1->2 ASSOCIATION is a different key and stays;
    # 3->4 removed after its upsert; removing the never-present 4->5 is a no-op.
    assert as_dict(g) == {(1, 2, ASSOCIATION): pytest.approx(0.9), (2, 3, RELATION): pytest.approx(0.3)}
    assert g.node_ids.tolist() == [1, 2, 3]
    # Order matters: remove then upsert leaves the edge, with the last weight.
    g2 = fold(g, make_entries([2, 2], [3, 3], RELATION, [0.0, 0.7], [REMOVE, UPSERT]))
    assert as_dict(g2)[(2, 3, RELATION)] == pytest.approx(0.7)
    g3 = fold(g, make_entries([2, 2], [3, 3], RELATION, [0.7, 0.0], [UPSERT, REMOVE]))
    assert (2, 3, RELATION) not in as_dict(g3)
    assert_canonical(g2)
    assert_canonical(g3)


def test_fold_nothing():
    g = fold(None, np.zeros(0, ENTRY_DTYPE))
    assert g.n_nodes == 0 and g.n_edges == 0 and g.indptr.tolist() == [0]


edge_lists = st.lists(
    st.tuples(st.integers(1, 12), st.integers(1, 12), st.integers(0, 3),
              st.floats(0, 1, width=32), st.sampled_from([UPSERT, UPSERT, REMOVE])),
    max_size=60)


def to_entries(rows) -> np.ndarray:
    if not rows:
        return np.zeros(0, ENTRY_DTYPE)
    s, d, t, w, o = zip(*rows)
    return make_entries(s, d, t, w, o)


@given(edge_lists, edge_lists)
@settings(max_examples=150, deadline=None)
def test_fold_matches_reference(first, second):
    e1, e2 = to_entries(first), to_entries(second)
    g1 = fold(None, e1)
    assert as_dict(g1) == reference_fold({}, e1)
    g2 = fold(g1, e2)
    assert as_dict(g2) == reference_fold(reference_fold({}, e1), e2)
    assert_canonical(g2)
    # Folding in one go or in two steps gives the same graph.
    assert_graph_equal(g2, fold(None, np.concatenate([e1, e2])))


@given(edge_lists, st.integers(0, 2**64 - 1))
@settings(max_examples=100, deadline=None)
def test_snapshot_round_trip(tmp_path_factory, rows, folded):
    g = fold(None, to_entries(rows))
    p = tmp_path_factory.mktemp("csr") / "graph.csr"
    CSRSnapshot(g, folded).write(p)
    snap = CSRSnapshot.read(p)
    assert snap.folded_entries == folded
    assert_graph_equal(snap.graph, g)


def test_live_graph(tmp_path):
    log = EdgeLog.create(tmp_path / "edges.log")
    e = make_entries([1, 2, 3, 1], [2, 3, 1, 2], TEMPORAL, 1.0, [UPSERT, UPSERT, UPSERT, REMOVE])
    n = log.append(0, e[:2])
    assert as_dict(live_graph(tmp_path, None, "edges.log", n)) == {(1, 2, 0): 1.0, (2, 3, 0): 1.0}
    CSRSnapshot(fold(None, log.read(n)), n).write(tmp_path / "graph.csr")
    n = log.append(n, e[2:])
    live = live_graph(tmp_path, "graph.csr", "edges.log", n)
    assert as_dict(live) == {(2, 3, 0): 1.0, (3, 1, 0): 1.0}
    # An uncommitted tail is invisible; a snapshot folding more than is committed is corrupt.
    assert as_dict(live_graph(tmp_path, "graph.csr", "edges.log", 2)) == \
        {(1, 2, 0): 1.0, (2, 3, 0): 1.0}
    with pytest.raises(errors.InvalidRecord):
        live_graph(tmp_path, "graph.csr", "edges.log", 1)


def test_million_edges_fold_write_read(tmp_path):
    rng = np.random.default_rng(7)
    m = 1_000_000
    e = make_entries(rng.integers(1, 200_000, m), rng.integers(1, 200_000, m),
                     rng.integers(0, 4, m), rng.random(m, dtype=np.float32),
                     np.where(rng.random(m) < 0.9, UPSERT, REMOVE))
    t0 = time.perf_counter()
    g = fold(None, e)
    CSRSnapshot(g, m).write(tmp_path / "graph.csr")
    snap = CSRSnapshot.read(tmp_path / "graph.csr")
    elapsed = time.perf_counter() - t0
    assert snap.graph.n_edges == g.n_edges > 800_000
    assert elapsed < 10, elapsed
