"""Seed 004 scoring rules, checked against hand-computed values from the seed's tables."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from synapse_cli.engine import scoring as sc
from synapse_cli.engine.scoring import (
    DAY_MS,
    DECAY_TABLE,
    FLAG_PINNED,
    FLAG_RESOLVED,
    HOUR_MS,
    WEEK_MS,
    adjust_for_reconsolidation,
    arousal_from_valence,
    arousal_modifier,
    decay,
    decay_bucket,
    effective_decay,
    effective_decay_array,
    tag_contains,
    tag_overlap_ratio,
)

R = FLAG_RESOLVED


def test_flag_bits_match_format():
    assert (sc.FLAG_TOMBSTONE, sc.FLAG_CONSOLIDATED, FLAG_PINNED, FLAG_RESOLVED) == (1, 8, 16, 32)
    assert sc.TYPE_SHIFT == 1 and sc.TYPE_MASK == 0b110


def test_decay_table():
    assert DECAY_TABLE.tolist() == pytest.approx([1.0, .95, .85, .70, .50, .30, .15, .05, .01])
    assert decay(8) == decay(20) == pytest.approx(0.01)


@pytest.mark.parametrize("age, bucket", [
    (-5, 0), (0, 0), (HOUR_MS - 1, 0), (HOUR_MS, 1), (6 * HOUR_MS - 1, 1), (6 * HOUR_MS, 2),
    (DAY_MS - 1, 2), (DAY_MS, 3), (3 * DAY_MS, 4), (7 * DAY_MS - 1, 4), (WEEK_MS, 5),
    (2 * WEEK_MS, 6), (4 * WEEK_MS - 1, 6), (4 * WEEK_MS, 7), (90 * DAY_MS - 1, 7),
    (90 * DAY_MS, 8), (10 * 365 * DAY_MS, 8),
])
def test_decay_bucket_boundaries(age, bucket):
    assert decay_bucket(age) == bucket


def test_decay_bucket_array():
    ages = np.array([0, HOUR_MS, 2 * DAY_MS, 100 * DAY_MS])
    assert decay_bucket(ages).tolist() == [0, 1, 3, 8]


def test_reconsolidation():
    assert adjust_for_reconsolidation(8, 12) == 4  # 12 recalls: 4 buckets younger
    assert adjust_for_reconsolidation(5, 2) == 5
    assert adjust_for_reconsolidation(5, 3) == 4
    assert adjust_for_reconsolidation(2, 100) == 0


@pytest.mark.parametrize("arousal, mod", [
    (0, 1.0), (63, 1.0), (64, 1.15), (127, 1.15), (128, 1.35), (191, 1.35), (192, 1.65),
    (200, 1.65), (255, 1.65),
])
def test_arousal_modifier(arousal, mod):
    assert arousal_modifier(arousal) == pytest.approx(mod)


@pytest.mark.parametrize("valence, arousal", [
    (0, 0), (100, 200), (-100, 200), (127, 254), (-128, 255), (200, 112), (255, 2), (-1, 2),
])
def test_arousal_from_valence(valence, arousal):
    assert arousal_from_valence(valence) == arousal


def test_effective_decay_hand_values():
    # 10 days old, resolved, no recalls, calm: bucket 5 -> 0.30
    assert effective_decay(10 * DAY_MS, 0, 0, R) == pytest.approx(0.30)
    # 100 days old, 12 recalls: bucket 8 -> 4 -> 0.50; arousal 200 -> x1.65 = 0.825
    assert effective_decay(100 * DAY_MS, 12, 0, R) == pytest.approx(0.50)
    assert effective_decay(100 * DAY_MS, 12, 200, R) == pytest.approx(0.825)
    # 2 days, arousal 128: 0.70 * 1.35 = 0.945; 2 hours, arousal 200: min(1, 0.95*1.65) = 1
    assert effective_decay(2 * DAY_MS, 0, 128, R) == pytest.approx(0.945)
    assert effective_decay(2 * HOUR_MS, 0, 200, R) == 1.0
    # 3 weeks, arousal 64: 0.15 * 1.15 = 0.1725
    assert effective_decay(21 * DAY_MS, 0, 64, R) == pytest.approx(0.1725)


def test_pinned_is_exempt():
    assert effective_decay(400 * DAY_MS, 0, 0, R | FLAG_PINNED) == 1.0
    assert effective_decay(400 * DAY_MS, 0, 0, FLAG_PINNED) == 1.0


def test_unresolved_clamped_to_bucket_0():
    assert effective_decay(400 * DAY_MS, 0, 0, 0) == 1.0  # resolved bit clear
    assert effective_decay(400 * DAY_MS, 0, 0, R) == pytest.approx(0.01)


@settings(max_examples=300, deadline=None)
@given(age=st.integers(-10**9, 2 * 10**11), recall=st.integers(0, 2**32 - 1),
       arousal=st.integers(0, 255), flags=st.integers(0, 63))
def test_effective_decay_array_matches_scalar(age, recall, arousal, flags):
    vec = effective_decay_array([age], [recall], [arousal], [flags])
    assert vec.dtype == np.float32
    assert vec[0] == np.float32(effective_decay(age, recall, arousal, flags))
    assert 0.0 < vec[0] <= 1.0


def test_tag_overlap_ratio():
    assert tag_overlap_ratio(0b10111, 0) == 0.0
    assert tag_overlap_ratio(0b00111, 0b11111) == pytest.approx(0.6)  # 3 of 5 query bits
    assert tag_overlap_ratio(0xFFFF_FFFF_FFFF_FFFF, 1 << 63) == 1.0
    rec = np.array([0b111, 0b001, 0], np.uint64)
    np.testing.assert_allclose(tag_overlap_ratio(rec, 0b011), [1.0, 0.5, 0.0])
    np.testing.assert_array_equal(tag_overlap_ratio(rec, 0), [0, 0, 0])


def test_tag_contains():
    assert tag_contains(0b111, 0b101) and not tag_contains(0b011, 0b101) and tag_contains(0, 0)
    assert tag_contains(np.array([7, 1], np.uint64), 3).tolist() == [True, False]
