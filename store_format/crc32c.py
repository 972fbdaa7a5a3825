"""CRC32C (Castagnoli), stdlib + numpy only.

`crc32c(data)` is a table-driven byte loop, fine for manifests, file headers and single records;
`accelerate` lets a process that has numba loaded swap in compiled loops (synapse_cli.kernels.crc).
`crc32c_rows(rows)` computes one CRC per row of a 2-D uint8 array, vectorised over rows, which
is how `verify` checks every record of a segment without a Python loop per record.
"""
from __future__ import annotations

import numpy as np

_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _make_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()
_TABLE_NP = np.array(_TABLE, dtype=np.uint32)


# Compiled replacements installed by synapse_cli.kernels.crc (numba) when a process loads the
# kernels anyway; this package itself never imports numba.
_fast_one = None
_fast_rows = None


def accelerate(one, rows) -> None:
    """Route `crc32c` and `crc32c_rows` through compiled functions with the same results."""
    global _fast_one, _fast_rows
    _fast_one, _fast_rows = one, rows


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC32C of `data`; pass a previous result as `crc` to continue it over more bytes."""
    if _fast_one is not None and len(data) > 16:
        return _fast_one(data, crc)
    c = crc ^ 0xFFFFFFFF
    table = _TABLE
    for b in bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """CRC32C of each row of a 2-D uint8 array; returns uint32 of shape (n_rows,)."""
    if _fast_rows is not None:
        return _fast_rows(rows)
    if rows.ndim != 2 or rows.dtype != np.uint8:
        raise ValueError("crc32c_rows expects a 2-D uint8 array")
    c = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        c = _TABLE_NP[(c ^ rows[:, j]) & 0xFF] ^ (c >> np.uint32(8))
    return c ^ np.uint32(0xFFFFFFFF)
