"""Record headers V1 (32 B), V2 (48 B) and V3 (64 B), docs/FORMAT.md section 4.

The structured dtypes below are the byte layout: explicit little-endian fields at explicit
offsets, with padding and reserved bytes as `u1` sub-array fields so that readers can check
they are zero. `Header` is the in-memory form holding the fields of every version.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .errors import InvalidRecord, UnsupportedVersion

HEADER_BYTES = {1: 32, 2: 48, 3: 64}
DEFAULT_VERSION = 3
MAX_TIMESTAMP_MS = 2**53
UNASSIGNED_CENTROID = 0xFFFF
# Range checks are done on float32 values, as stored (float32(0.05) > 0.05 in float64).
IMPORTANCE_MIN = np.float32(0.05)
IMPORTANCE_MAX = np.float32(10.0)
STORAGE_STRENGTH_MAX = np.float32(5.0)
RESERVED_FLAG_BITS = 0xC0

# (name, format, offset): the seed's table, one row per field, in offset order.
_V1_FIELDS = [
    ("timestamp_ms", "<i8", 0),
    ("synaptic_tags", "<u8", 8),
    ("exact_norm", "<f4", 16),
    ("importance", "<f4", 20),
    ("recall_count", "<u4", 24),
    ("centroid_id", "<u2", 28),
    ("valence", "i1", 30),
    ("flags", "u1", 31),
]
_V2_FIELDS = _V1_FIELDS + [
    ("arousal", "u1", 32),
    ("padding", ("u1", (3,)), 33),
    ("storage_strength", "<f4", 36),
    ("reserved_1", ("u1", (8,)), 40),
]
_V3_FIELDS = _V2_FIELDS + [("reserved_2", ("u1", (16,)), 48)]
_FIELDS = {1: _V1_FIELDS, 2: _V2_FIELDS, 3: _V3_FIELDS}
FIELD_OFFSETS = {name: off for name, _, off in _V3_FIELDS}
ZERO_FIELDS = ("padding", "reserved_1", "reserved_2")


def _make_dtype(fields: list, itemsize: int) -> np.dtype:
    return np.dtype({
        "names": [f[0] for f in fields],
        "formats": [f[1] for f in fields],
        "offsets": [f[2] for f in fields],
        "itemsize": itemsize,
    })


HEADER_DTYPES = {v: _make_dtype(_FIELDS[v], HEADER_BYTES[v]) for v in (1, 2, 3)}
V1_DTYPE, V2_DTYPE, V3_DTYPE = HEADER_DTYPES[1], HEADER_DTYPES[2], HEADER_DTYPES[3]


def header_fields(version: int) -> list[tuple]:
    """The (name, format, offset) rows of one header version, in offset order."""
    return list(_FIELDS[check_version(version)])


def check_version(version: int) -> int:
    if version not in HEADER_BYTES:
        raise UnsupportedVersion(f"header version {version!r} is not 1, 2 or 3")
    return version


@dataclass
class Header:
    """All fields of all header versions; V2+ fields have the seed's safe defaults."""

    timestamp_ms: int = 0
    synaptic_tags: int = 0
    exact_norm: float = 0.0
    importance: float = 1.0
    recall_count: int = 0
    centroid_id: int = UNASSIGNED_CENTROID
    valence: int = 0
    flags: int = 0
    arousal: int = 0
    storage_strength: float = 1.0

    def replace(self, **changes) -> "Header":
        return dataclasses.replace(self, **changes)


_INT_RANGES = {
    "timestamp_ms": (-(2**63), 2**63 - 1),
    "synaptic_tags": (0, 2**64 - 1),
    "recall_count": (0, 2**32 - 1),
    "centroid_id": (0, 0xFFFF),
    "valence": (-128, 127),
    "flags": (0, 0xFF),
    "arousal": (0, 0xFF),
}


_FLOAT_FIELDS = ("exact_norm", "importance", "storage_strength")


def headers_to_array(headers: list[Header], version: int) -> np.ndarray:
    """Pack `Header` objects into a structured array of HEADER_DTYPES[version], shape (n,).

    Raises ValueError when an integer field does not fit its type (numpy would wrap it).
    Range rules of section 4 are not checked here; see `header_faults`.
    """
    arr = np.zeros(len(headers), dtype=HEADER_DTYPES[check_version(version)])
    names = arr.dtype.names
    for name, (lo, hi) in _INT_RANGES.items():
        if name not in names:
            continue
        values = [int(getattr(h, name)) for h in headers]
        if any(not lo <= x <= hi for x in values):
            raise ValueError(f"{name} out of range {lo}..{hi}")
        arr[name] = values
    for name in _FLOAT_FIELDS:
        if name in names:
            arr[name] = [float(getattr(h, name)) for h in headers]
    return arr


def array_to_headers(arr: np.ndarray) -> list[Header]:
    """Inverse of `headers_to_array`; fields the version lacks get their safe defaults."""
    names = arr.dtype.names
    out = []
    for row in arr:
        kw = {}
        for f in dataclasses.fields(Header):
            if f.name in names:
                value = row[f.name]
                kw[f.name] = float(value) if f.name in _FLOAT_FIELDS else int(value)
        out.append(Header(**kw))
    return out


def pack_header(h: Header, version: int = DEFAULT_VERSION) -> bytes:
    """The `HEADER_BYTES[version]` bytes of one header (reserved and padding bytes zero)."""
    return headers_to_array([h], version).tobytes()


def unpack_header(buf: bytes | bytearray | memoryview, version: int) -> Header:
    """Decode one header; a V1/V2 header reads as arousal 0 / storage_strength 1.0 where absent.

    No validation: call `validate_header` on bytes read from disk.
    """
    size = HEADER_BYTES[check_version(version)]
    if len(buf) < size:
        raise ValueError(f"V{version} header needs {size} bytes, got {len(buf)}")
    arr = np.frombuffer(bytes(buf[:size]), dtype=HEADER_DTYPES[version], count=1)
    return array_to_headers(arr)[0]


def header_faults(arr: np.ndarray, version: int) -> np.ndarray:
    """Section 4 "Validation on read" for a structured array of headers, vectorised.

    Parameters
    ----------
    arr : structured ndarray, shape (n,)
        Any array holding the fields of `version` (a header dtype or a record view).
    version : int

    Returns
    -------
    int16 ndarray, shape (n,)
        Offset within the header of the first invalid field of each record, -1 if valid.
    """
    n = arr.shape[0]
    fault = np.full(n, -1, dtype=np.int16)

    def mark(bad: np.ndarray, field: str) -> None:
        np.copyto(fault, FIELD_OFFSETS[field], where=(fault < 0) & bad)

    # In ascending field offset, so the first marked field is the first bad byte range.
    ts = arr["timestamp_ms"]
    mark((ts < 0) | (ts > MAX_TIMESTAMP_MS), "timestamp_ms")
    norm = arr["exact_norm"]
    mark(~np.isfinite(norm) | (norm < 0), "exact_norm")
    imp = arr["importance"]
    mark(~np.isfinite(imp) | (imp < IMPORTANCE_MIN) | (imp > IMPORTANCE_MAX), "importance")
    mark((arr["flags"] & RESERVED_FLAG_BITS) != 0, "flags")
    if version >= 2:
        mark(arr["padding"].any(axis=1), "padding")
        ss = arr["storage_strength"]
        mark(~np.isfinite(ss) | (ss < 0) | (ss > STORAGE_STRENGTH_MAX), "storage_strength")
        mark(arr["reserved_1"].any(axis=1), "reserved_1")
    if version >= 3:
        mark(arr["reserved_2"].any(axis=1), "reserved_2")
    return fault


_FIELD_AT = {off: name for name, off in FIELD_OFFSETS.items()}


def field_name_at(offset: int) -> str:
    return _FIELD_AT.get(int(offset), f"byte {offset}")


def validate_header(buf: bytes | bytearray | memoryview | Header, version: int,
                    path: str | None = None, offset: int = 0) -> Header:
    """Validate one header (its bytes, or a `Header` about to be written) and return it.

    Raises
    ------
    InvalidRecord
        With `offset` + the offset of the first invalid field.
    """
    check_version(version)
    if isinstance(buf, Header):
        h = buf
        arr = headers_to_array([h], version)
    else:
        size = HEADER_BYTES[version]
        if len(buf) < size:
            raise ValueError(f"V{version} header needs {size} bytes, got {len(buf)}")
        arr = np.frombuffer(bytes(buf[:size]), dtype=HEADER_DTYPES[version], count=1)
        h = array_to_headers(arr)[0]
    fault = int(header_faults(arr, version)[0])
    if fault >= 0:
        raise InvalidRecord(f"invalid header field {field_name_at(fault)}",
                            path=path, offset=offset + fault)
    return h


def convert_headers(array: np.ndarray, from_v: int, to_v: int) -> np.ndarray:
    """Convert headers between versions (migration, section 9).

    Parameters
    ----------
    array : structured ndarray, shape (n,)
        Holds at least the fields of `from_v` (a header dtype or a record view).
    from_v, to_v : int

    Returns
    -------
    ndarray of HEADER_DTYPES[to_v], shape (n,)
        Upgrades fill arousal 0 and storage_strength 1.0; downgrades drop what the target
        does not hold (V3->V2: reserved_2; ->V1: arousal, storage_strength, reserved_1).
        Padding and reserved bytes of the result are zero.
    """
    check_version(from_v)
    check_version(to_v)
    out = np.zeros(array.shape[0], dtype=HEADER_DTYPES[to_v])
    for name, _, _ in _FIELDS[min(from_v, to_v)]:
        if name not in ZERO_FIELDS:
            out[name] = array[name]
    if to_v >= 2 and from_v == 1:
        out["storage_strength"] = 1.0
    return out

