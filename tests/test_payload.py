"""payload.log (docs/FORMAT.md section 6): layout, append, read, torn tails, corruption."""
import json
import os
import stat

import pytest
from hypothesis import given, settings, HealthCheck, strategies as st

from store_format import payload as P
from store_format.crc32c import crc32c
from store_format.errors import (BadMagic, ChecksumMismatch, InvalidRecord, StoreIOError,
                                 Truncated)


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "payload.log"
    P.create_payload_log(path)
    with P.PayloadWriter(path, 16) as w:
        ptrs = w.append([(1, {"text": "alpha"}), (2, {"text": "béta", "speaker": "Ann"}),
                         (3, {"text": "gamma", "chunk": [0, 5]})])
        end = w.length
    return path, ptrs, end


def test_byte_exact():
    # Hand-derived: "SYNPAYLD", version 1, reserved 0, CRC32C of bytes 0..12.
    head = bytes.fromhex("53594e5041594c44" "0100" "0000")
    assert P.pack_file_header() == head + crc32c(head).to_bytes(4, "little")
    # {"text":"hé"}: 14 bytes of UTF-8 (é = c3 a9), record id 7.
    body = bytes.fromhex("7b2274657874223a2268c3a9227d")
    entry = bytes.fromhex("0e000000" "0700000000000000") + body
    assert P.pack_entry(7, {"text": "hé"}) == entry + crc32c(entry).to_bytes(4, "little")


def test_append_and_read(log):
    path, ptrs, end = log
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ptrs[0] == (16, 16 + len(b'{"text":"alpha"}'))
    assert ptrs[1][0] == sum(ptrs[0]) and ptrs[2][0] == sum(ptrs[1]) and end == sum(ptrs[2])
    assert P.read_entry(path, *ptrs[1], 2, end) == {"text": "béta", "speaker": "Ann"}
    with P.PayloadReader(path, end) as r:
        assert r.read(*ptrs[2], 3) == {"text": "gamma", "chunk": [0, 5]}
        assert [(e.offset, e.length, e.record_id) for e in r.entries()] == \
            [(o, n, i + 1) for i, (o, n) in enumerate(ptrs)]
    assert P.verify_payload(path, end) == 3
    assert P.verify_payload(path, 16) == 0


def test_write_rejects_bad_bodies(log):
    path, _, end = log
    with P.PayloadWriter(path, end) as w:
        for bad in ({"x": 1}, {"text": 3}, ["text"], {"text": "a", "v": float("nan")}):
            with pytest.raises(ValueError):
                w.append([(4, bad)])
        with pytest.raises(ValueError):
            w.append([(0, {"text": "zero id"})])
    assert os.path.getsize(path) == end


def test_torn_tail_truncated_on_append(log):
    path, ptrs, end = log
    with P.PayloadWriter(path, end) as w:  # uncommitted append
        w.append([(4, {"text": "lost"})])
    with open(path, "ab") as f:
        f.write(b"\x07\x00\x00")  # torn partial entry
    assert P.verify_payload(path, end) == 3
    with P.PayloadWriter(path, end) as w:
        [(off, n)] = w.append([(4, {"text": "kept"})])
        new_end = w.length
    assert off == end and os.path.getsize(path) == new_end == end + n
    assert P.read_entry(path, off, n, 4, new_end) == {"text": "kept"}
    for i, (o, length) in enumerate(ptrs):
        P.read_entry(path, o, length, i + 1, new_end)
    assert P.verify_payload(path, new_end) == 4


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


@pytest.mark.parametrize("delta", [5, 12, 14, -1])  # record id, body start, body, CRC
def test_flip_entry_byte(log, delta):
    path, ptrs, end = log
    off, n = ptrs[1]
    flip(path, off + delta if delta >= 0 else off + n + delta)
    with pytest.raises(ChecksumMismatch) as e:
        P.read_entry(path, off, n, 2, end)
    assert e.value.path == str(path) and e.value.offset == off
    with pytest.raises(ChecksumMismatch) as e:
        P.verify_payload(path, end)
    assert e.value.offset == off
    assert P.read_entry(path, *ptrs[0], 1, end) == {"text": "alpha"}  # others intact


def test_flip_length_field(log):
    path, ptrs, end = log
    off, n = ptrs[1]
    flip(path, off)
    with pytest.raises(InvalidRecord) as e:
        P.read_entry(path, off, n, 2, end)
    assert e.value.offset == off
    with pytest.raises((ChecksumMismatch, Truncated)) as e:
        P.verify_payload(path, end)
    assert e.value.offset == off


def test_flip_last_length_runs_past_committed(log):
    path, ptrs, end = log
    off, n = ptrs[2]
    with open(path, "r+b") as f:
        f.seek(off)
        f.write((n + 100).to_bytes(4, "little"))
    with pytest.raises(Truncated) as e:
        P.verify_payload(path, end)
    assert e.value.offset == off


def test_flip_file_header(log):
    path, _, end = log
    flip(path, 9)
    with pytest.raises(ChecksumMismatch) as e:
        P.verify_payload(path, end)
    assert e.value.offset == 0 and e.value.path == str(path)
    flip(path, 9)
    flip(path, 2)
    with pytest.raises(BadMagic):
        P.PayloadWriter(path, end)


def test_record_id_mismatch(log):
    path, ptrs, end = log
    with pytest.raises(InvalidRecord, match="record 2, not 3") as e:
        P.read_entry(path, *ptrs[1], 3, end)
    assert e.value.offset == ptrs[1][0] + 4


def _raw_entry(record_id, body: bytes) -> bytes:
    head = len(body).to_bytes(4, "little") + record_id.to_bytes(8, "little") + body
    return head + crc32c(head).to_bytes(4, "little")


@pytest.mark.parametrize("body", [b"not json", b"[1,2]", b'{"text":1}', b'{"t":"x"}',
                                  b'{"text":"\xff"}', b"\xef\xbb\xbf{\"text\":\"x\"}"])
def test_bad_body_with_valid_crc(log, body):
    path, _, end = log
    entry = _raw_entry(4, body)
    with open(path, "ab") as f:
        f.write(entry)
    with pytest.raises(InvalidRecord) as e:
        P.read_entry(path, end, len(entry), 4, end + len(entry))
    assert e.value.offset == end + 12
    with pytest.raises(InvalidRecord) as e:
        P.verify_payload(path, end + len(entry))
    assert e.value.offset == end + 12


def test_pointer_bounds(log):
    path, ptrs, end = log
    off, n = ptrs[2]
    for o, length in ((off, n + 1), (end, 16), (0, 16), (off, 3), (2**63, 16)):
        with pytest.raises(InvalidRecord):
            P.read_entry(path, o, length, 3, end)
    with pytest.raises(InvalidRecord):  # committed prefix is shorter than the entry
        P.read_entry(path, off, n, 3, end - 1)
    with pytest.raises(Truncated):
        P.verify_payload(path, end - 1)
    with pytest.raises(Truncated):
        P.PayloadReader(path, end + 1)
    with pytest.raises(InvalidRecord):
        P.PayloadReader(path, 10)


def test_symlink_refused(log, tmp_path):
    path, _, end = log
    link = tmp_path / "link.log"
    link.symlink_to(path)
    with pytest.raises(StoreIOError):
        P.PayloadReader(link, end)
    with pytest.raises(StoreIOError):
        P.create_payload_log(link, overwrite=True)


bodies = st.fixed_dictionaries(
    {"text": st.text(max_size=200)},
    optional={"speaker": st.text(max_size=20), "chunk": st.lists(st.integers(0, 10**6),
                                                                   min_size=2, max_size=2),
              "md5": st.text("0123456789abcdef", min_size=32, max_size=32)})


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(bodies, min_size=1, max_size=5))
def test_roundtrip(tmp_path, items):
    path = tmp_path / "p.log"
    P.create_payload_log(path, overwrite=True)
    with P.PayloadWriter(path, 16) as w:
        ptrs = w.append([(i + 1, b) for i, b in enumerate(items)])
        end = w.length
    for i, ((o, n), b) in enumerate(zip(ptrs, items)):
        assert P.read_entry(path, o, n, i + 1, end) == b
        assert n == 16 + len(json.dumps(b, separators=(",", ":"), ensure_ascii=False).encode())
    assert P.verify_payload(path, end) == len(items)
