"""CRC32C (Castagnoli) as numba kernels, equal to `store_format.crc32c`.

store_format stays stdlib + numpy, so its CRC is a byte loop in Python (a few MB/s) — fine for a
manifest, slow for the records recall validates before returning them. Importing this module
(every kernel module does) hands store_format these compiled versions (`accelerate`), so any
process that already paid for numba checks records and logs at compiled speed.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from store_format import crc32c as _py

TABLE = _py._TABLE_NP.copy()


@njit(cache=True)
def crc32c_span(buf, start, end, table, crc=0):
    """CRC32C of ``buf[start:end]`` (uint8 array), continuing ``crc``."""
    c = np.uint32(crc) ^ np.uint32(0xFFFFFFFF)
    for i in range(start, end):
        c = table[(c ^ buf[i]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    return c ^ np.uint32(0xFFFFFFFF)


@njit(cache=True)
def _rows(rows, table, out):
    for r in range(rows.shape[0]):
        c = np.uint32(0xFFFFFFFF)
        for j in range(rows.shape[1]):
            c = table[(c ^ rows[r, j]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
        out[r] = c ^ np.uint32(0xFFFFFFFF)


def crc32c_fast(data, crc: int = 0) -> int:
    """CRC32C of a bytes-like object."""
    buf = np.frombuffer(data, dtype=np.uint8)
    return int(crc32c_span(buf, 0, buf.shape[0], TABLE, crc))


def crc32c_rows_fast(rows: np.ndarray) -> np.ndarray:
    """CRC32C of each row of a 2-D uint8 array (any strides)."""
    if rows.ndim != 2 or rows.dtype != np.uint8:
        raise ValueError("crc32c_rows expects a 2-D uint8 array")
    out = np.empty(rows.shape[0], np.uint32)
    _rows(rows, TABLE, out)
    return out


_py.accelerate(crc32c_fast, crc32c_rows_fast)
