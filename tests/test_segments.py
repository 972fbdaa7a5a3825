"""Segment files (docs/FORMAT.md section 3): layout, append, torn tails, verify, corruption."""
import os
import stat

import numpy as np
import pytest

from store_format import segments as S
from store_format.crc32c import crc32c
from store_format.errors import (BadMagic, ChecksumMismatch, InvalidRecord, StoreIOError,
                                 Truncated, UnsupportedVersion)
from store_format.headers import Header, pack_header

DIM = 16
PAYLOAD_BYTES = 10_000


def make_records(ids, version=3, dim=DIM, seed=0, **header_kw):
    rng = np.random.default_rng(seed)
    n = len(ids)
    vecs = rng.integers(-127, 128, size=(n, dim)).astype(np.int8)
    hs = [Header(timestamp_ms=1_700_000_000_000 + i, exact_norm=1.0 + i, **header_kw)
          for i in range(n)]
    offs = [16 + 100 * i for i in range(n)]
    return S.pack_records(hs, vecs, ids, offs, [50] * n, version)


@pytest.fixture
def seg(tmp_path):
    """A V3 segment with 5 committed records, ids 10..14."""
    path = tmp_path / "seg-000001.dat"
    S.create_segment(path, 3, DIM, 1, created_ms=1_700_000_000_000)
    with S.SegmentWriter(path, 0) as w:
        assert w.append(make_records([10, 11, 12, 13, 14])) == 5
    return path


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def test_file_header_byte_exact():
    # Hand-derived: magic "SYNAPSEG", version 1, header v3, int8 encoding, dim 384 = 0x0180,
    # header bytes 64 = 0x40, stride 64+384+24 = 472 = 0x1D8, segment 1, created
    # 1700000000000 = 0x18BCFE56800, 28 reserved zero bytes, then CRC32C of bytes 0..60.
    body = bytes.fromhex("53594e4150534547" "0100" "03" "01" "8001" "4000" "d8010000"
                         "01000000" "0068e5cf8b010000") + bytes(28)
    expected = body + crc32c(body).to_bytes(4, "little")
    h = S.SegmentHeader(3, 384, 1, 1_700_000_000_000)
    assert S.pack_segment_header(h) == expected
    assert S.unpack_segment_header(expected) == h
    assert S.record_stride(1, 384) == 440 and S.record_stride(2, 384) == 456
    assert h.stride == 472 and h.record_offset(2) == 64 + 2 * 472


def test_record_layout_byte_exact():
    hd = Header(timestamp_ms=5, importance=1.0)
    vec = np.array([1, -1, 127, -127], dtype=np.int8)
    rec = S.pack_record(hd, vec, record_id=5, payload_offset=16, payload_length=40, version=1)
    # header (32) + vector 01 ff 7f 81 + id 5 (u64) + offset 16 (u64) + length 40 (u32) + CRC
    body = (pack_header(hd, 1) + bytes.fromhex("01ff7f81") + bytes.fromhex("0500000000000000")
            + bytes.fromhex("1000000000000000") + bytes.fromhex("28000000"))
    assert rec == body + crc32c(body).to_bytes(4, "little")
    assert len(rec) == S.record_stride(1, 4) == 60


def test_file_mode_and_reader_views(seg):
    assert stat.S_IMODE(os.stat(seg).st_mode) == 0o600
    r = S.SegmentReader(seg, 5, expected_dim=DIM, expected_number=1)
    assert r.ids.tolist() == [10, 11, 12, 13, 14]
    assert r.raw.shape == (5, S.record_stride(3, DIM)) and r.raw.dtype == np.uint8
    assert r.vectors.shape == (5, DIM) and r.vectors.dtype == np.int8
    assert (r.vectors == make_records([10, 11, 12, 13, 14])[:, 64:64 + DIM].view(np.int8)).all()
    assert r.payload_offsets.tolist() == [16, 116, 216, 316, 416]
    assert r.payload_lengths.tolist() == [50] * 5
    assert r.headers["exact_norm"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert r.header_at(2).exact_norm == 3.0 and r.header_at(2).arousal == 0
    assert not r.raw.flags.writeable
    info = S.verify_segment(seg, 5, payload_bytes=PAYLOAD_BYTES)
    assert (info.records, info.first_id, info.last_id) == (5, 10, 14)
    assert S.verify_segment(seg, 3).last_id == 12  # committed prefix only
    assert S.verify_segment(seg, 0, prev_id=7).last_id == 7


@pytest.mark.parametrize("version", [1, 2, 3])
def test_versions_roundtrip(tmp_path, version):
    path = tmp_path / "seg-000002.dat"
    S.create_segment(path, version, 7, 2)
    recs = make_records([1, 2, 3], version=version, dim=7, arousal=9, storage_strength=2.0)
    with S.SegmentWriter(path, 0) as w:
        w.append(recs)
    r = S.SegmentReader(path, 3)
    assert r.raw.tobytes() == recs.tobytes()
    expect_arousal = 0 if version == 1 else 9
    assert r.header_at(1).arousal == expect_arousal
    S.verify_segment(path, 3, payload_bytes=PAYLOAD_BYTES)


def test_torn_tail_truncated_on_append(seg):
    stride = S.record_stride(3, DIM)
    before = S.SegmentReader(seg, 5).raw.tobytes()
    # An uncommitted append (2 records) plus half a record of garbage: the manifest says 5.
    with S.SegmentWriter(seg, 5) as w:
        w.append(make_records([15, 16], seed=1))
    with open(seg, "ab") as f:
        f.write(b"\xAB" * (stride // 2))
    assert S.SegmentReader(seg, 5).n == 5  # readers ignore the tail
    S.verify_segment(seg, 5, payload_bytes=PAYLOAD_BYTES)
    with S.SegmentWriter(seg, 5) as w:
        assert w.last_id == 14
        assert w.append(make_records([15], seed=2)) == 6
    assert os.path.getsize(seg) == 64 + 6 * stride
    r = S.SegmentReader(seg, 6)
    assert r.raw[:5].tobytes() == before
    assert r.raw[5].tobytes() == make_records([15], seed=2)[0].tobytes()
    S.verify_segment(seg, 6, payload_bytes=PAYLOAD_BYTES)


def test_writer_refuses_bad_batches(seg):
    with S.SegmentWriter(seg, 5) as w:
        with pytest.raises(ValueError):
            w.append(make_records([14]))  # not past the last committed id
        with pytest.raises(ValueError):
            w.append(make_records([20, 20]))
        bad = make_records([20])
        bad[0, 3] ^= 1  # CRC now wrong
        with pytest.raises(ValueError):
            w.append(bad)
        with pytest.raises(ValueError):
            w.append(make_records([20], importance=50.0))
        with pytest.raises(ValueError):
            w.append(make_records([20], version=2))  # wrong stride
    assert os.path.getsize(seg) == 64 + 5 * S.record_stride(3, DIM)


def test_rewrite_record(seg):
    r = S.SegmentReader(seg, 5)
    h = r.header_at(1).replace(flags=0b10001, recall_count=3)
    new = S.pack_record(h, r.vectors[1], 11, 999, 60, 3)
    with S.SegmentWriter(seg, 5) as w:
        w.rewrite(1, new)
        w.sync()
        with pytest.raises(ValueError):
            w.rewrite(5, new)
        with pytest.raises(ValueError):
            w.rewrite(1, new[:-1] + bytes([new[-1] ^ 1]))
    r2 = S.SegmentReader(seg, 5)
    assert r2.header_at(1) == h and r2.payload_offsets[1] == 999
    S.verify_segment(seg, 5, payload_bytes=PAYLOAD_BYTES)


# --- corruption ------------------------------------------------------------------------------

def rec_off(i, version=3, dim=DIM):
    return 64 + i * S.record_stride(version, dim)


def test_flip_file_header(seg):
    flip(seg, 12)
    with pytest.raises(ChecksumMismatch) as e:
        S.verify_segment(seg, 5)
    assert e.value.path == str(seg) and e.value.offset == 0


def test_flip_magic(seg):
    flip(seg, 0)
    with pytest.raises(BadMagic) as e:
        S.SegmentReader(seg, 5)
    assert e.value.path == str(seg) and e.value.offset == 0


def _rewrite_file_header(path, **changes):
    raw = bytearray(open(path, "rb").read(64))
    for off, value in changes.items():
        raw[int(off[1:])] = value
    raw[60:64] = crc32c(bytes(raw[:60])).to_bytes(4, "little")
    with open(path, "r+b") as f:
        f.write(raw)


@pytest.mark.parametrize("changes,cls,offset", [
    ({"o8": 2}, UnsupportedVersion, 8),      # format version
    ({"o10": 4}, UnsupportedVersion, 10),    # header version
    ({"o11": 2}, UnsupportedVersion, 11),    # vector encoding
    ({"o14": 48}, InvalidRecord, 14),        # header bytes
    ({"o16": 0}, InvalidRecord, 16),         # stride
    ({"o20": 2}, InvalidRecord, 20),         # segment number vs file name
    ({"o40": 1}, InvalidRecord, 32),         # reserved
])
def test_file_header_fields(seg, changes, cls, offset):
    _rewrite_file_header(seg, **changes)
    with pytest.raises(cls) as e:
        S.verify_segment(seg, 5)
    assert e.value.offset == offset and e.value.path == str(seg)


@pytest.mark.parametrize("where", [5, 31, 64 + 3, 64 + DIM + 2, 64 + DIM + 9, 64 + DIM + 17,
                                   64 + DIM + 22])
def test_flip_record_byte(seg, where):
    # header (5, 31), vector, trailer id, payload offset, payload length, CRC: record 2 is bad.
    flip(seg, rec_off(2) + where)
    with pytest.raises(ChecksumMismatch) as e:
        S.verify_segment(seg, 5, payload_bytes=PAYLOAD_BYTES)
    assert e.value.path == str(seg) and e.value.offset == rec_off(2)
    # Records before it are fine; the committed prefix of 2 verifies.
    S.verify_segment(seg, 2, payload_bytes=PAYLOAD_BYTES)


def _replace_record(path, i, record):
    with open(path, "r+b") as f:
        f.seek(rec_off(i))
        f.write(record)


def test_invalid_header_with_valid_crc(seg):
    bad = make_records([13], importance=float("nan"))[0].tobytes()
    _replace_record(seg, 3, bad)
    with pytest.raises(InvalidRecord) as e:
        S.verify_segment(seg, 5)
    assert e.value.offset == rec_off(3) + 20


def test_reserved_flag_bit_with_valid_crc(seg):
    _replace_record(seg, 4, make_records([14], flags=0x80)[0].tobytes())
    with pytest.raises(InvalidRecord) as e:
        S.verify_segment(seg, 5)
    assert e.value.offset == rec_off(4) + 31


def test_ids_not_increasing(seg):
    _replace_record(seg, 2, make_records([11])[0].tobytes())
    with pytest.raises(InvalidRecord) as e:
        S.verify_segment(seg, 5)
    assert e.value.offset == rec_off(2) + 64 + DIM
    with pytest.raises(InvalidRecord) as e:
        S.verify_segment(seg, 5, prev_id=10)  # across segments: first id must exceed prev
    assert e.value.offset == rec_off(0) + 64 + DIM


def test_zero_id(seg):
    _replace_record(seg, 0, make_records([0])[0].tobytes())
    with pytest.raises(InvalidRecord, match="id is 0") as e:
        S.verify_segment(seg, 5)
    assert e.value.offset == rec_off(0) + 64 + DIM


def test_payload_pointer_outside(seg):
    # record 4 points at 416 + 50 = 466 bytes
    S.verify_segment(seg, 5, payload_bytes=466)
    with pytest.raises(InvalidRecord) as e:
        S.verify_segment(seg, 5, payload_bytes=465)
    assert e.value.offset == rec_off(4) + 64 + DIM + 8
    huge = S.pack_record(Header(), np.zeros(DIM, np.int8), 15, 2**64 - 1, 50, 3)
    with S.SegmentWriter(seg, 5) as w:
        w.append(np.frombuffer(huge, np.uint8)[None, :])
    with pytest.raises(InvalidRecord) as e:
        S.verify_segment(seg, 6, payload_bytes=PAYLOAD_BYTES)
    assert e.value.offset == rec_off(5) + 64 + DIM + 8


def test_first_bad_record_wins(seg):
    _replace_record(seg, 4, make_records([14], flags=0x80)[0].tobytes())
    flip(seg, rec_off(1) + 70)
    with pytest.raises(ChecksumMismatch) as e:
        S.verify_segment(seg, 5)
    assert e.value.offset == rec_off(1)


def test_committed_counts_checked(seg):
    with pytest.raises(Truncated) as e:
        S.SegmentReader(seg, 6)
    assert e.value.offset == os.path.getsize(seg)
    for bad in (-1, S.MAX_RECORDS + 1, 2.0):
        with pytest.raises(InvalidRecord):
            S.SegmentReader(seg, bad)
    with open(seg, "r+b") as f:
        f.truncate(30)
    with pytest.raises(Truncated):
        S.SegmentReader(seg, 0)


def test_symlink_refused(seg, tmp_path):
    link = tmp_path / "seg-000009.dat"
    link.symlink_to(seg)
    with pytest.raises(StoreIOError):
        S.SegmentReader(link, 5)
    with pytest.raises(StoreIOError):
        S.SegmentWriter(link, 5)
    with pytest.raises(StoreIOError):
        S.create_segment(link, 3, DIM, 9, overwrite=True)
    with pytest.raises(StoreIOError):
        S.create_segment(seg, 3, DIM, 1)  # exists


def test_expected_dim(seg):
    with pytest.raises(InvalidRecord) as e:
        S.verify_segment(seg, 5, expected_dim=384)
    assert e.value.offset == 12
