"""Seed 004's decay rules as data: bucket bounds, decay table, arousal modifiers, flag bits,
and their plain-numpy form over arrays.

The lowest floor of the scoring: the numba header scan (header_scan.py) compiles these rules and
its reference (reference.py) calls `effective_decay_array`; engine/scoring.py adds the scalar
functions and re-exports these names. numpy only (no numba), so the engine imports it freely.
"""
from __future__ import annotations

import numpy as np

# Flag bits (FORMAT.md 4.1): tombstone bit 0, memory_type bits 1-2, consolidated bit 3,
# pinned bit 4, resolved bit 5.
from store_format.flags import (
    CONSOLIDATED as FLAG_CONSOLIDATED,
    PINNED as FLAG_PINNED,
    RESOLVED as FLAG_RESOLVED,
    TOMBSTONE as FLAG_TOMBSTONE,
    TYPE_MASK,
    TYPE_SHIFT,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
WEEK_MS = 7 * DAY_MS

# Bucket b covers ages in [BUCKET_BOUNDS_MS[b-1], BUCKET_BOUNDS_MS[b]) (bucket 0 from -inf,
# bucket 8 to +inf): 0-1h, 1-6h, 6-24h, 1-3d, 3-7d, 1-2w, 2-4w, 4w-90d, 90d+.
BUCKET_BOUNDS_MS = np.array(
    [HOUR_MS, 6 * HOUR_MS, DAY_MS, 3 * DAY_MS, WEEK_MS, 2 * WEEK_MS, 4 * WEEK_MS, 90 * DAY_MS],
    dtype=np.int64,
)
DECAY_TABLE = np.array([1.00, 0.95, 0.85, 0.70, 0.50, 0.30, 0.15, 0.05, 0.01], dtype=np.float32)
N_BUCKETS = len(DECAY_TABLE)

RECALLS_PER_BUCKET = 3
AROUSAL_THRESHOLDS = (64, 128, 192)
AROUSAL_MODIFIERS = np.array([1.0, 1.15, 1.35, 1.65], dtype=np.float32)


def effective_decay_array(age_ms, recall_count, arousal, flags) -> np.ndarray:
    """`engine.scoring.effective_decay` over equal-length arrays; returns float32[n]."""
    age_ms = np.asarray(age_ms, dtype=np.int64)
    recall = np.asarray(recall_count, dtype=np.int64)
    arousal = np.asarray(arousal, dtype=np.int64) & 0xFF
    flags = np.asarray(flags, dtype=np.int64)
    bucket = np.searchsorted(BUCKET_BOUNDS_MS, age_ms, side="right").astype(np.int64)
    bucket = np.maximum(0, bucket - recall // RECALLS_PER_BUCKET)
    bucket = np.where((flags & FLAG_RESOLVED) == 0, 0, bucket)
    mod = AROUSAL_MODIFIERS[np.searchsorted(np.array(AROUSAL_THRESHOLDS), arousal, side="right")]
    out = np.minimum(np.float32(1.0), DECAY_TABLE[np.minimum(bucket, N_BUCKETS - 1)] * mod)
    return np.where((flags & FLAG_PINNED) != 0, np.float32(1.0), out).astype(np.float32)
