"""Record headers V1/V2/V3 (docs/FORMAT.md section 4) and flags (section 4.1)."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from store_format import flags as F
from store_format.errors import InvalidRecord, UnsupportedVersion
from store_format.headers import (HEADER_BYTES, HEADER_DTYPES, Header, convert_headers,
                                  header_faults, headers_to_array, pack_header, unpack_header,
                                  validate_header)

# Hand-derived from the spec table (not from the code):
#   timestamp_ms 1700000000000 = 0x0000018B_CFE56800 -> 00 68 e5 cf 8b 01 00 00
#   synaptic_tags 0x0102030405060708                  -> 08 07 06 05 04 03 02 01
#   exact_norm 2.5f = 0x40200000                      -> 00 00 20 40
#   importance 1.0f = 0x3F800000                      -> 00 00 80 3f
#   recall_count 7                                    -> 07 00 00 00
#   centroid_id 0x1234                                -> 34 12
#   valence -2                                        -> fe
#   flags SEMANTIC(2)<<1 | pinned(1<<4) = 0x14        -> 14
#   arousal 200                                       -> c8, padding 00 00 00
#   storage_strength 0.5f = 0x3F000000                -> 00 00 00 3f, reserved_1 8 x 00
#   V3: reserved_2 16 x 00
V1_HEX = "0068e5cf8b010000" "0807060504030201" "00002040" "0000803f" "07000000" "3412" "fe" "14"
V2_HEX = V1_HEX + "c8" "000000" "0000003f" + "00" * 8
V3_HEX = V2_HEX + "00" * 16

SAMPLE = Header(timestamp_ms=1700000000000, synaptic_tags=0x0102030405060708, exact_norm=2.5,
                importance=1.0, recall_count=7, centroid_id=0x1234, valence=-2,
                flags=F.make_flags(memory_type=F.MemoryType.SEMANTIC, pinned=True),
                arousal=200, storage_strength=0.5)


def test_dtype_sizes():
    assert HEADER_BYTES == {1: 32, 2: 48, 3: 64}
    for v, size in HEADER_BYTES.items():
        assert HEADER_DTYPES[v].itemsize == size
    assert HEADER_DTYPES[3].fields["storage_strength"][1] == 36
    assert HEADER_DTYPES[3].fields["reserved_2"][1] == 48


@pytest.mark.parametrize("version,hexstr", [(1, V1_HEX), (2, V2_HEX), (3, V3_HEX)])
def test_pack_byte_exact(version, hexstr):
    expected = bytes.fromhex(hexstr)
    assert len(expected) == HEADER_BYTES[version]
    assert pack_header(SAMPLE, version) == expected


def test_unpack_byte_exact_and_v1_safe_defaults():
    assert unpack_header(bytes.fromhex(V3_HEX), 3) == SAMPLE
    assert unpack_header(bytes.fromhex(V2_HEX), 2) == SAMPLE
    v1 = unpack_header(bytes.fromhex(V1_HEX), 1)
    assert v1 == SAMPLE.replace(arousal=0, storage_strength=1.0)


def test_defaults():
    h = Header()
    assert (h.arousal, h.storage_strength, h.importance, h.centroid_id) == (0, 1.0, 1.0, 0xFFFF)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
headers = st.builds(
    Header,
    timestamp_ms=st.integers(-(2**63), 2**63 - 1),
    synaptic_tags=st.integers(0, 2**64 - 1),
    exact_norm=st.floats(width=32),
    importance=finite32,
    recall_count=st.integers(0, 2**32 - 1),
    centroid_id=st.integers(0, 0xFFFF),
    valence=st.integers(-128, 127),
    flags=st.integers(0, 255),
    arousal=st.integers(0, 255),
    storage_strength=finite32,
)


def _same(a: Header, b: Header) -> bool:
    # NaN never equals itself; compare float fields bitwise-ish.
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, float) and math.isnan(x):
            if not math.isnan(y):
                return False
        elif x != y:
            return False
    return True


@given(headers)
def test_roundtrip_all_versions(h):
    assert _same(unpack_header(pack_header(h, 3), 3), h)
    assert _same(unpack_header(pack_header(h, 2), 2), h)
    assert _same(unpack_header(pack_header(h, 1), 1), h.replace(arousal=0, storage_strength=1.0))


@given(st.lists(headers, max_size=8))
def test_convert_up_and_down(hs):
    v1 = headers_to_array(hs, 1)
    v3 = convert_headers(v1, 1, 3)
    assert v3.dtype == HEADER_DTYPES[3]
    assert (v3["arousal"] == 0).all() and (v3["storage_strength"] == 1.0).all()
    assert v3.tobytes() == b"".join(pack_header(h.replace(arousal=0, storage_strength=1.0), 3)
                                     for h in hs)
    full = headers_to_array(hs, 3)
    # V3 -> V2 drops only reserved_2; V3/V2 -> V1 drops arousal and storage_strength.
    assert convert_headers(full, 3, 2).tobytes() == headers_to_array(hs, 2).tobytes()
    assert convert_headers(full, 3, 1).tobytes() == v1.tobytes()
    assert convert_headers(headers_to_array(hs, 2), 2, 1).tobytes() == v1.tobytes()
    assert convert_headers(headers_to_array(hs, 2), 2, 3).tobytes() == full.tobytes()


def test_downgrade_drops_reserved_bytes():
    raw = bytearray(pack_header(SAMPLE, 3))
    raw[50] = 0xAA  # reserved_2
    arr = np.frombuffer(bytes(raw), dtype=HEADER_DTYPES[3])
    assert convert_headers(arr, 3, 2).tobytes() == bytes.fromhex(V2_HEX)
    assert convert_headers(arr, 3, 1).tobytes() == bytes.fromhex(V1_HEX)


def test_validate_ok():
    for v in (1, 2, 3):
        assert validate_header(pack_header(SAMPLE, v), v) == unpack_header(pack_header(SAMPLE, v), v)


@pytest.mark.parametrize("field,value,offset", [
    ("timestamp_ms", -1, 0),
    ("timestamp_ms", 2**53 + 1, 0),
    ("exact_norm", -0.5, 16),
    ("exact_norm", float("nan"), 16),
    ("exact_norm", float("inf"), 16),
    ("importance", 0.04, 20),
    ("importance", 10.5, 20),
    ("importance", float("nan"), 20),
    ("flags", 0x40, 31),
    ("flags", 0x80, 31),
    ("storage_strength", 5.5, 36),
    ("storage_strength", -0.1, 36),
    ("storage_strength", float("inf"), 36),
])
def test_validate_rejects_field(field, value, offset):
    bad = SAMPLE.replace(**{field: value})
    for v in (1, 2, 3):
        if field == "storage_strength" and v == 1:
            continue
        with pytest.raises(InvalidRecord) as e:
            validate_header(pack_header(bad, v), v, path="seg", offset=1000)
        assert e.value.offset == 1000 + offset and e.value.path == "seg"


def test_validate_bounds_inclusive():
    for h in (SAMPLE.replace(timestamp_ms=0), SAMPLE.replace(timestamp_ms=2**53),
              SAMPLE.replace(importance=0.05), SAMPLE.replace(importance=10.0),
              SAMPLE.replace(storage_strength=0.0), SAMPLE.replace(storage_strength=5.0),
              SAMPLE.replace(exact_norm=0.0)):
        validate_header(pack_header(h, 3), 3)


@pytest.mark.parametrize("version,pos", [(2, 33), (2, 35), (2, 40), (2, 47), (3, 48), (3, 63)])
def test_validate_rejects_nonzero_padding(version, pos):
    raw = bytearray(pack_header(SAMPLE, version))
    raw[pos] = 1
    with pytest.raises(InvalidRecord) as e:
        validate_header(bytes(raw), version)
    expected = {33: 33, 35: 33, 40: 40, 47: 40, 48: 48, 63: 48}[pos]
    assert e.value.offset == expected


def test_header_faults_vectorised_first_field():
    arr = headers_to_array([SAMPLE, SAMPLE.replace(importance=20.0, flags=0xFF), SAMPLE], 3)
    assert header_faults(arr, 3).tolist() == [-1, 20, -1]


def test_bad_version():
    with pytest.raises(UnsupportedVersion):
        pack_header(SAMPLE, 4)


# --- flags -----------------------------------------------------------------------------------

def test_flag_bits():
    assert F.TOMBSTONE == 1 and F.CONSOLIDATED == 8 and F.PINNED == 16 and F.RESOLVED == 32
    assert F.make_flags(memory_type=F.MemoryType.PROCEDURAL) == 0b110
    assert F.make_flags(tombstone=True, resolved=True) == 0b100001
    assert F.memory_type(0b100) == F.MemoryType.SEMANTIC
    assert not F.reserved_ok(0x40) and F.reserved_ok(0x3F)


@given(st.booleans(), st.sampled_from(list(F.MemoryType)), st.booleans(), st.booleans(),
       st.booleans())
def test_flags_roundtrip(tomb, mtype, cons, pinned, resolved):
    f = F.make_flags(tombstone=tomb, memory_type=mtype, consolidated=cons, pinned=pinned,
                     resolved=resolved)
    assert 0 <= f < 64 and F.reserved_ok(f)
    assert F.decode_flags(f) == {"tombstone": tomb, "memory_type": mtype, "consolidated": cons,
                                 "pinned": pinned, "resolved": resolved}
    for other in F.MemoryType:
        g = F.with_memory_type(f, other)
        assert F.memory_type(g) == other and (g & ~F.MEMORY_TYPE_MASK) == (f & ~F.MEMORY_TYPE_MASK)
    assert F.set_flag(F.set_flag(f, F.PINNED, True), F.PINNED, False) == f & ~F.PINNED
    # vectorised use on a flags column
    arr = np.array([f, f ^ F.TOMBSTONE], dtype=np.uint8)
    assert F.is_tombstone(arr).tolist() == [tomb, not tomb]
    assert F.memory_type_code(arr).tolist() == [int(mtype)] * 2
