"""MANIFEST encoding, decoding and validation (docs/FORMAT.md section 2)."""
from __future__ import annotations

import json
import os
import stat
import struct

import pytest
from hypothesis import given, settings, strategies as st

from store_format import errors
from store_format.crc32c import crc32c
from store_format.manifest import (
    GraphRef, Manifest, PayloadRef, Segment, decode_manifest, encode_manifest, read_manifest,
    write_manifest,
)

SMALL_BODY = (
    b'{"store_id":"0123456789abcdef0123456789abcdef","generation":7,"header_version":3,"dim":4,'
    b'"embedder":"m","next_record_id":3,"segments":[{"file":"seg-000001.dat","records":2}],'
    b'"payload":{"file":"payload.log","bytes":100},'
    b'"graph":{"csr":null,"log":"edges.log","log_entries":0}}'
)
# Hand-assembled from the section 2 table: magic, version 1, reserved 0, N = 274 = 0x112, body,
# CRC32C computed with an independent bit-at-a-time implementation.
SMALL_BYTES = (bytes.fromhex("53594e4d414e4946" "0100" "0000" "12010000") + SMALL_BODY
               + bytes.fromhex("e7c3a1a0"))


def small_manifest() -> Manifest:
    return Manifest(
        store_id="0123456789abcdef0123456789abcdef", generation=7, header_version=3, dim=4,
        embedder="m", next_record_id=3, segments=[Segment("seg-000001.dat", 2)],
        payload=PayloadRef("payload.log", 100), graph=GraphRef(None, "edges.log", 0))


def with_body(body: dict | bytes) -> bytes:
    """A well-formed manifest (valid header and CRC) around an arbitrary body."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = b"SYNMANIF" + struct.pack("<HHI", 1, 0, len(raw)) + raw
    return head + struct.pack("<I", crc32c(head))


def test_small_manifest_is_byte_exact():
    assert len(SMALL_BODY) == 274
    assert encode_manifest(small_manifest()) == SMALL_BYTES
    assert decode_manifest(SMALL_BYTES) == small_manifest()


@st.composite
def manifests(draw):
    numbers = sorted(draw(st.sets(st.integers(1, 999_999), max_size=5)))
    segs = [Segment(f"seg-{n:06d}.dat", draw(st.integers(0, 262_144))) for n in numbers]
    total = sum(s.records for s in segs)
    migration = None
    if segs and draw(st.booleans()):
        migration = {"to": draw(st.integers(1, 3)),
                     "files": [s.file for s in segs if draw(st.booleans())] or [segs[0].file]}
    return Manifest(
        store_id=draw(st.text("0123456789abcdef", min_size=32, max_size=32)),
        generation=draw(st.integers(0, 2**64 - 1)),
        header_version=draw(st.integers(1, 3)),
        dim=draw(st.integers(1, 4096)),
        embedder=draw(st.text(min_size=1, max_size=40)),
        next_record_id=draw(st.integers(total + 1, 2**64 - 1)),
        segments=segs,
        payload=PayloadRef("payload.log", draw(st.integers(16, 2**64 - 1))),
        graph=GraphRef(draw(st.sampled_from([None, "graph.csr"])), "edges.log",
                       draw(st.integers(0, 2**50))),
        migration=migration,
        bm25=draw(st.none() | st.fixed_dictionaries({
            "log": st.just("bm25.log"), "log_bytes": st.just(0) | st.integers(16, 2**64 - 1),
            "vocab": st.just("bm25.vocab"), "vocab_bytes": st.just(0) | st.integers(16, 2**64 - 1)})),
    )


@given(manifests())
@settings(max_examples=200, deadline=None)
def test_round_trip(m):
    assert decode_manifest(encode_manifest(m)) == m


def test_new_manifest():
    m = Manifest.new(384, "all-MiniLM-L6-v2")
    assert (m.header_version, m.dim, m.generation, m.next_record_id) == (3, 384, 0, 1)
    assert len(m.store_id) == 32 and m.segments == [] and m.graph.csr is None
    assert m.next_generation().generation == 1 and m.generation == 0
    assert decode_manifest(encode_manifest(m)) == m


@pytest.mark.parametrize("offset, kind, at", [
    (0, errors.BadMagic, 0), (7, errors.BadMagic, 0),
    (8, errors.UnsupportedVersion, 8), (9, errors.UnsupportedVersion, 8),
    (10, errors.ChecksumMismatch, 0), (11, errors.ChecksumMismatch, 0),  # reserved: CRC catches it
    (15, errors.InvalidRecord, 12),  # body length 0x80000112 > 16 MiB
])
def test_flipped_header_byte(offset, kind, at):
    data = bytearray(SMALL_BYTES)
    data[offset] ^= 0x80
    with pytest.raises(kind) as exc:
        decode_manifest(bytes(data), "/s/MANIFEST")
    assert (type(exc.value), exc.value.path, exc.value.offset) == (kind, "/s/MANIFEST", at)


def test_reserved_nonzero_with_valid_crc():
    head = bytearray(SMALL_BYTES[:-4])
    head[10] = 1
    with pytest.raises(errors.InvalidRecord) as exc:
        decode_manifest(bytes(head) + struct.pack("<I", crc32c(head)), "M")
    assert exc.value.offset == 10


def test_body_length_mismatch():
    data = bytearray(SMALL_BYTES)
    data[12] += 1  # N one larger than the body: the file is one byte short
    with pytest.raises(errors.Truncated) as exc:
        decode_manifest(bytes(data), "M")
    assert exc.value.offset == len(SMALL_BYTES)
    data[12] -= 2  # N one smaller: one byte left over after the CRC
    with pytest.raises(errors.InvalidRecord) as exc:
        decode_manifest(bytes(data), "M")
    assert exc.value.offset == len(SMALL_BYTES) - 1


@pytest.mark.parametrize("offset", [16, 100, 16 + 273, len(SMALL_BYTES) - 4, len(SMALL_BYTES) - 1])
def test_flipped_body_or_crc_byte(offset):
    data = bytearray(SMALL_BYTES)
    data[offset] ^= 0x01
    with pytest.raises(errors.ChecksumMismatch) as exc:
        decode_manifest(bytes(data), "/s/MANIFEST")
    assert (exc.value.path, exc.value.offset) == ("/s/MANIFEST", 0)


def test_too_short_and_empty_body():
    with pytest.raises(errors.Truncated):
        decode_manifest(SMALL_BYTES[:19], "M")
    with pytest.raises(errors.InvalidRecord) as exc:
        decode_manifest(with_body(b""), "M")
    assert exc.value.offset == 12


def test_body_not_utf8_or_not_json():
    with pytest.raises(errors.InvalidRecord) as exc:
        decode_manifest(with_body(b'{"a": "\xff"}'), "M")
    assert exc.value.offset == 16 + 7
    with pytest.raises(errors.InvalidRecord) as exc:
        decode_manifest(with_body(b'{"a": 1,}'), "M")
    assert exc.value.offset == 16 + 8
    for raw in (b"[1]", b'{"a": NaN}', b'{"a": 1, "a": 2}', b"[" * 100_000):
        with pytest.raises(errors.InvalidRecord):
            decode_manifest(with_body(raw), "M")


def body() -> dict:
    return json.loads(SMALL_BODY)


def bad_bodies():
    cases = []

    def case(name, mutate):
        b = body()
        mutate(b)
        cases.append(pytest.param(b, id=name))

    case("missing key", lambda b: b.pop("dim"))
    case("unknown key", lambda b: b.update(extra=1))
    case("store_id not hex", lambda b: b.update(store_id="X" * 32))
    case("generation negative", lambda b: b.update(generation=-1))
    case("generation over u64", lambda b: b.update(generation=2**64))
    case("generation float", lambda b: b.update(generation=7.0))
    case("generation bool", lambda b: b.update(generation=True))
    case("header_version 4", lambda b: b.update(header_version=4))
    case("dim 0", lambda b: b.update(dim=0))
    case("embedder empty", lambda b: b.update(embedder=""))
    case("next_record_id 0", lambda b: b.update(next_record_id=0))
    case("more records than ids", lambda b: b.update(next_record_id=2))
    case("segments not list", lambda b: b.update(segments={}))
    case("segment ../x", lambda b: b["segments"][0].update(file="../x"))
    case("segment with slash", lambda b: b["segments"][0].update(file="sub/seg-000001.dat"))
    case("segment absolute", lambda b: b["segments"][0].update(file="/etc/passwd"))
    case("segment bad pattern", lambda b: b["segments"][0].update(file="seg-1.dat"))
    case("segment 0", lambda b: b["segments"][0].update(file="seg-000000.dat"))
    case("segments out of order", lambda b: b.update(
        segments=[{"file": "seg-000002.dat", "records": 1}, {"file": "seg-000001.dat", "records": 1}]))
    case("segment too many records", lambda b: b["segments"][0].update(records=262_145))
    case("payload ../x", lambda b: b["payload"].update(file="../x"))
    case("payload other name", lambda b: b["payload"].update(file="payload.dat"))
    case("payload bytes under header", lambda b: b["payload"].update(bytes=15))
    case("csr ../x", lambda b: b["graph"].update(csr="../x"))
    case("log ../x", lambda b: b["graph"].update(log="../edges.log"))
    case("log_entries string", lambda b: b["graph"].update(log_entries="0"))
    case("migration unknown file", lambda b: b.update(migration={"to": 2, "files": ["seg-000009.dat"]}))
    bm25 = {"log": "bm25.log", "log_bytes": 0, "vocab": "bm25.vocab", "vocab_bytes": 0}
    case("bm25 ../x", lambda b: b.update(bm25=dict(bm25, log="../bm25.log")))
    case("bm25 short length", lambda b: b.update(bm25=dict(bm25, vocab_bytes=15)))
    case("bm25 missing key", lambda b: b.update(bm25={"log": "bm25.log"}))
    case("migration bad to", lambda b: b.update(migration={"to": 5, "files": ["seg-000001.dat"]}))
    return cases


@pytest.mark.parametrize("b", bad_bodies())
def test_invalid_body_rejected(b):
    with pytest.raises(errors.InvalidRecord) as exc:
        decode_manifest(with_body(b), "/s/MANIFEST")
    assert (exc.value.path, exc.value.offset) == ("/s/MANIFEST", 16)


def test_encode_refuses_invalid():
    m = small_manifest()
    m.segments = [Segment("../x", 1)]
    with pytest.raises(ValueError):
        encode_manifest(m)


# --- files -------------------------------------------------------------------------------------


def make_store(tmp_path, m: Manifest | None = None):
    m = m or small_manifest()
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    (store / "seg-000001.dat").write_bytes(bytes(64 + 2 * (64 + 4 + 24)))
    (store / "payload.log").write_bytes(bytes(100))
    (store / "edges.log").write_bytes(bytes(16))
    write_manifest(store, m)
    return store, m


def test_write_and_read(tmp_path):
    store, m = make_store(tmp_path)
    assert read_manifest(store) == m
    assert (store / "MANIFEST").read_bytes() == SMALL_BYTES
    assert stat.S_IMODE(os.stat(store / "MANIFEST").st_mode) == 0o600
    assert not (store / "MANIFEST.tmp").exists()
    m2 = m.next_generation()
    write_manifest(store, m2)
    assert read_manifest(store).generation == 8


def test_missing_store_or_manifest(tmp_path):
    with pytest.raises(errors.StoreNotFound):
        read_manifest(tmp_path / "nope")
    with pytest.raises(errors.StoreNotFound):
        read_manifest(tmp_path)


def test_symlinked_manifest_refused(tmp_path):
    store, _ = make_store(tmp_path)
    real = tmp_path / "elsewhere"
    os.replace(store / "MANIFEST", real)
    os.symlink(real, store / "MANIFEST")
    with pytest.raises(errors.UnsafeStore) as exc:
        read_manifest(store)
    assert exc.value.path == str(store / "MANIFEST")


def test_manifest_naming_a_symlink_refused(tmp_path):
    store, _ = make_store(tmp_path)
    real = tmp_path / "payload-elsewhere"
    os.replace(store / "payload.log", real)
    os.symlink(real, store / "payload.log")
    with pytest.raises(errors.UnsafeStore) as exc:
        read_manifest(store)
    assert exc.value.path == str(store / "payload.log")


def test_manifest_naming_parent_refused_on_read(tmp_path):
    store, _ = make_store(tmp_path)
    b = body()
    b["payload"]["file"] = "../payload.log"
    (store / "MANIFEST").write_bytes(with_body(b))
    with pytest.raises(errors.InvalidRecord) as exc:
        read_manifest(store)
    assert (exc.value.path, exc.value.offset) == (str(store / "MANIFEST"), 16)


def test_named_file_missing_or_short(tmp_path):
    store, m = make_store(tmp_path)
    (store / "payload.log").write_bytes(bytes(99))
    with pytest.raises(errors.Truncated) as exc:
        read_manifest(store)
    assert (exc.value.path, exc.value.offset) == (str(store / "payload.log"), 99)
    assert read_manifest(store, check_files=False) == m
    (store / "payload.log").write_bytes(bytes(100))
    (store / "seg-000001.dat").write_bytes(bytes(64 + 2 * 92 - 1))
    with pytest.raises(errors.Truncated):
        read_manifest(store)
    (store / "seg-000001.dat").unlink()
    with pytest.raises(errors.CorruptStore) as exc:
        read_manifest(store)
    assert exc.value.path == str(store / "seg-000001.dat")


def test_oversized_manifest_file_not_read_whole(tmp_path):
    store, _ = make_store(tmp_path)
    with open(store / "MANIFEST", "ab") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: trailing bytes after the CRC
    with pytest.raises(errors.InvalidRecord):
        read_manifest(store)


def test_bm25_lengths_checked_against_files(tmp_path):
    m = small_manifest()
    m.bm25 = {"log": "bm25.log", "log_bytes": 0, "vocab": "bm25.vocab", "vocab_bytes": 0}
    store, _ = make_store(tmp_path, m)
    assert read_manifest(store) == m  # lengths 0: the files may be absent
    m.bm25 = dict(m.bm25, vocab_bytes=40)
    write_manifest(store, m)
    with pytest.raises(errors.CorruptStore) as exc:
        read_manifest(store)
    assert exc.value.path == str(store / "bm25.vocab")
    (store / "bm25.vocab").write_bytes(bytes(40))
    assert read_manifest(store).bm25["vocab_bytes"] == 40
