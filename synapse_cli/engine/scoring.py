"""Seed 004 scoring rules: bucketed decay, reconsolidation, arousal, pinned, Zeigarnik, tags.

Plain Python/numpy functions; the numba header scan (``synapse_cli.kernels.header_scan``)
implements the same rules and is tested against these.  All decay arithmetic is float32, as in
the seed (Java ``float``), so the kernel and these functions agree bit for bit.

Scalar functions accept Python ints; ``decay_bucket``, ``effective_decay_array`` and
``tag_overlap_ratio`` also accept numpy arrays.
"""
from __future__ import annotations

import numpy as np

# The rules as data, and their array form, live with the kernels that compile them.
from ..kernels.decay_rules import (  # noqa: F401 - re-exported
    AROUSAL_MODIFIERS,
    AROUSAL_THRESHOLDS,
    BUCKET_BOUNDS_MS,
    DAY_MS,
    DECAY_TABLE,
    FLAG_CONSOLIDATED,
    FLAG_PINNED,
    FLAG_RESOLVED,
    FLAG_TOMBSTONE,
    HOUR_MS,
    N_BUCKETS,
    RECALLS_PER_BUCKET,
    TYPE_MASK,
    TYPE_SHIFT,
    WEEK_MS,
    effective_decay_array,
)


def decay_bucket(age_ms):
    """Raw decay bucket 0..8 of an age in ms (negative ages, i.e. future timestamps, give 0)."""
    b = np.searchsorted(BUCKET_BOUNDS_MS, np.asarray(age_ms, dtype=np.int64), side="right")
    return int(b) if np.ndim(b) == 0 else b.astype(np.int32)


def decay(bucket: int) -> float:
    """DECAY_TABLE[min(bucket, 8)]."""
    return float(DECAY_TABLE[min(int(bucket), N_BUCKETS - 1)])


def adjust_for_reconsolidation(bucket: int, recall_count: int) -> int:
    """Every 3 recalls make the memory one bucket younger: max(0, bucket - recall_count // 3)."""
    return max(0, int(bucket) - int(recall_count) // RECALLS_PER_BUCKET)


def arousal_modifier(arousal: int) -> float:
    """Decay multiplier of an unsigned arousal byte: <64 1.0, <128 1.15, <192 1.35, else 1.65."""
    a = int(arousal) & 0xFF
    i = sum(1 for t in AROUSAL_THRESHOLDS if a >= t)
    return float(AROUSAL_MODIFIERS[i])


def arousal_from_valence(valence_byte: int) -> int:
    """Arousal derived at ingest when none is given: min(255, |valence| * 2).

    ``valence_byte`` is the signed valence (-128..127); a raw header byte 128..255 is read as
    two's complement.
    """
    v = int(valence_byte)
    if v > 127:
        v -= 256
    return min(255, abs(v) * 2)


def effective_decay(age_ms: int, recall_count: int, arousal: int, flags: int) -> float:
    """Decay factor in (0, 1] of one record (seed 004, CognitiveScorer phases 4 and 6).

    pinned -> 1.0 (exempt).  Otherwise bucket = decay_bucket(age) made younger by
    reconsolidation; unresolved (flag bit 5 clear) clamps it to 0 (Zeigarnik); the result is
    min(1, DECAY_TABLE[bucket] * arousal_modifier(arousal)), computed in float32.
    Note: by the seed's convention a record whose resolved bit is 0 never decays.
    """
    flags = int(flags)
    if flags & FLAG_PINNED:
        return 1.0
    bucket = adjust_for_reconsolidation(decay_bucket(age_ms), recall_count)
    if not flags & FLAG_RESOLVED:
        bucket = 0
    base = DECAY_TABLE[min(bucket, N_BUCKETS - 1)]
    mod = AROUSAL_MODIFIERS[sum(1 for t in AROUSAL_THRESHOLDS if (int(arousal) & 0xFF) >= t)]
    return float(min(np.float32(1.0), np.float32(base * mod)))


def _popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.int64)
    x = x.astype(np.uint64)  # pragma: no cover - numpy < 2
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1).reshape(x.shape)


def tag_overlap_ratio(record_tags, query_tags):
    """popcount(record & query) / popcount(query); 0 when query is 0 (FORMAT.md 4.2).

    Scalars give a float; a uint64 array of record tags gives float32[n].
    """
    if np.ndim(record_tags) == 0 and np.ndim(query_tags) == 0:
        q = int(query_tags) & 0xFFFF_FFFF_FFFF_FFFF
        if q == 0:
            return 0.0
        r = int(record_tags) & 0xFFFF_FFFF_FFFF_FFFF
        return (r & q).bit_count() / q.bit_count()
    rec = np.asarray(record_tags).astype(np.uint64)
    q = np.asarray(query_tags).astype(np.uint64)
    qbits = _popcount(q)
    hit = _popcount(rec & q)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(qbits == 0, 0.0, hit / np.maximum(qbits, 1))
    return ratio.astype(np.float32)


def tag_contains(record_tags, query_tags):
    """Bloom containment (record & query) == query; a zero query matches everything."""
    rec = np.asarray(record_tags).astype(np.uint64)
    q = np.asarray(query_tags).astype(np.uint64)
    res = (rec & q) == q
    return bool(res) if np.ndim(res) == 0 else res
