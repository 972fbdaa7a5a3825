"""Synaptic tags: the 64-bit Bloom filter of docs/FORMAT.md section 4.2 (k = 3, M = 64).

Note: M = 64 divides 2^64, so bit_i = (h1 + i*h2) mod 64 depends only on the low 6 bits of h1
and of h2 (= bits 32..37 of h). When those bits of h2 are 0 (1 in 64 tags) a tag sets one bit,
when they are 32 (1 in 64) it sets two; this raises the false-positive rate a little above the
textbook (1 - e^(-kn/M))^k. tests/test_tags.py measures it.
"""
from __future__ import annotations

import hashlib
import unicodedata
from typing import Iterable

import numpy as np

K = 3
M = 64
_MASK64 = (1 << 64) - 1


def normalize_tag(tag: str) -> str:
    """NFC, then casefold, then strip surrounding whitespace (in that order, per the spec)."""
    return unicodedata.normalize("NFC", tag).casefold().strip()


def tag_hash(tag: str) -> int:
    """h: BLAKE2b(utf8(normalised tag), digest_size=8) read as u64 little-endian."""
    digest = hashlib.blake2b(normalize_tag(tag).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def tag_bit_positions(tag: str) -> tuple[int, ...]:
    """The K bit positions of one tag (may repeat, see the module note)."""
    if not normalize_tag(tag):
        raise ValueError("the empty string is not a tag")
    h1 = tag_hash(tag)
    h2 = ((h1 >> 32) | (h1 << 32)) & _MASK64  # swap halves
    return tuple(((h1 + i * h2) & _MASK64) % M for i in range(K))


def tag_bits(tag: str) -> int:
    """The u64 mask of one tag."""
    mask = 0
    for bit in tag_bit_positions(tag):
        mask |= 1 << bit
    return mask


def encode_tags(tags: Iterable[str]) -> int:
    """OR of the masks of `tags`; strings that normalise to "" are not tags and are skipped."""
    mask = 0
    for tag in tags:
        if normalize_tag(tag):
            mask |= tag_bits(tag)
    return mask


def contains(record: int, query: int) -> bool:
    """Containment: every query bit is set in the record's filter."""
    return (int(record) & int(query)) == int(query)


def overlap_ratio(record: int, query: int) -> float:
    """popcount(record & query) / popcount(query); 0.0 when query is 0."""
    query = int(query)
    if query == 0:
        return 0.0
    return bin(int(record) & query).count("1") / bin(query).count("1")


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount64(values: np.ndarray) -> np.ndarray:
    """Bit count of each element of a uint64 array; returns uint8 of the same shape."""
    v = np.ascontiguousarray(values, dtype=np.uint64)
    return _POP8[v.view(np.uint8).reshape(v.shape + (8,))].sum(axis=-1, dtype=np.uint8)


def contains_many(records: np.ndarray, query: int) -> np.ndarray:
    """`contains` over a uint64 array of record filters, shape (n,) -> bool (n,)."""
    q = np.uint64(query)
    return (np.asarray(records, dtype=np.uint64) & q) == q


def overlap_ratios(records: np.ndarray, query: int) -> np.ndarray:
    """`overlap_ratio` over a uint64 array, shape (n,) -> float32 (n,)."""
    records = np.asarray(records, dtype=np.uint64)
    if int(query) == 0:
        return np.zeros(records.shape, dtype=np.float32)
    hits = popcount64(records & np.uint64(query)).astype(np.float32)
    return hits / np.float32(bin(int(query)).count("1"))
