"""Synaptic-tag Bloom filter (docs/FORMAT.md section 4.2).

Seed 004 discrepancy (measured here, see test_fpr_*): the seed's FPR table (5 tags 0.03%,
10 tags 0.2%, 20 tags 2.3%, 50 tags 12%) is NOT reachable by k=3, M=64 with a single-tag
query. Measured single-tag-query rates for this exact scheme are about 1.3% / 5.8% / 23% / 75%,
matching the Bloom formula (1 - e^(-3n/64))^3 = 0.91% / 5.2% / 22.5% / 74% (slightly above it at
small n because 1 tag in 64 sets a single bit and 1 in 64 sets two: M = 64 divides 2^64, so
bit_i depends only on h mod 64 and (h >> 32) mod 64). The seed's numbers correspond to a filter
of about M = 180..220 bits. Nor do they match a multi-tag query consistently: a 2-tag query
gives ~0.022% / 0.34% / 5.7% / 56%, a 3-tag query ~0.0001% / 0.021% / 1.3% / 43% (5 tags with a
2-tag query is the only row close to the seed).
"""
import hashlib
import math
import random

import numpy as np
import pytest
from hypothesis import given, strategies as st

from store_format.tags import (contains, contains_many, encode_tags, normalize_tag,
                               overlap_ratio, overlap_ratios, popcount64, tag_bit_positions,
                               tag_bits, tag_hash)


def test_known_answer():
    # "  Project:APOLLO " normalises to "project:apollo".
    digest = hashlib.blake2b(b"project:apollo", digest_size=8).digest()
    assert digest.hex() == "9503fa9f1df4de3d"
    h = 0x3DDEF41D9FFA0395  # the digest read little-endian
    assert tag_hash("  Project:APOLLO ") == h == int.from_bytes(digest, "little")
    # By hand: h1 mod 64 = 0x95 & 63 = 21; h2 = swap(h) = 0x9FFA03953DDEF41D, h2 mod 64 =
    # 0x1D & 63 = 29. M = 64 divides 2^64, so bit_i = (21 + 29 i) mod 64 = 21, 50, 15.
    assert tag_bit_positions("  Project:APOLLO ") == (21, 50, 15)
    assert tag_bits("project:apollo") == (1 << 21) | (1 << 50) | (1 << 15)


def test_normalisation():
    # NFC: "e" + combining acute == precomposed; casefold: German sharp s -> "ss".
    assert normalize_tag("Cafe\u0301") == normalize_tag("caf\u00e9") == "caf\u00e9"
    assert normalize_tag("  STRASSE\t") == normalize_tag("stra\u00dfe") == "strasse"
    assert tag_bits("Cafe\u0301") == tag_bits(" CAF\u00c9 ")
    with pytest.raises(ValueError):
        tag_bits("   ")
    assert encode_tags(["", "  "]) == 0


tag_text = st.text(min_size=1, max_size=20).filter(lambda t: normalize_tag(t) != "")


@given(st.lists(tag_text, max_size=30))
def test_encode_contains_every_tag(tags):
    rec = encode_tags(tags)
    assert 0 <= rec < 2**64
    assert rec == encode_tags(reversed(tags))
    for t in tags:
        assert contains(rec, tag_bits(t))
        assert overlap_ratio(rec, tag_bits(t)) == 1.0
    assert contains(rec, encode_tags(tags[: len(tags) // 2]))


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_contains_and_overlap(rec, query):
    assert contains(rec, query) == ((rec & query) == query)
    r = overlap_ratio(rec, query)
    assert 0.0 <= r <= 1.0
    assert r == (0.0 if query == 0 else bin(rec & query).count("1") / bin(query).count("1"))
    assert (r == 1.0) == (query != 0 and contains(rec, query))
    arr = np.array([rec, query, 0], dtype=np.uint64)
    assert contains_many(arr, query).tolist() == [contains(int(x), query) for x in arr]
    np.testing.assert_allclose(overlap_ratios(arr, query),
                               [overlap_ratio(int(x), query) for x in arr], rtol=1e-6)
    assert popcount64(arr).tolist() == [bin(int(x)).count("1") for x in arr]


def test_tag_bits_count():
    for t in ("a", "speaker:alice", "session:42"):
        assert 1 <= bin(tag_bits(t)).count("1") <= 3


# --- false-positive rate ---------------------------------------------------------------------

N_QUERIES = 200_000
N_RECORDS = 2_000


def _bloom(n: int) -> float:
    return (1 - math.exp(-3 * n / 64)) ** 3


def _measure(tags_per_record: int, query_tags: int = 1) -> float:
    rng = random.Random(1234 + tags_per_record)
    word = lambda: "%016x" % rng.getrandbits(64)  # random tags; never in a record
    records = np.array([encode_tags(word() for _ in range(tags_per_record))
                        for _ in range(N_RECORDS)], dtype=np.uint64)
    queries = np.array([encode_tags(word() for _ in range(query_tags))
                        for _ in range(N_QUERIES)], dtype=np.uint64)
    rec = records[np.arange(N_QUERIES) % N_RECORDS]
    return float(((rec & queries) == queries).mean())


SEED_TABLE = {5: 0.0003, 10: 0.002, 20: 0.023}


@pytest.mark.parametrize("n", [5, 10, 20])
def test_fpr_single_tag_query(n):
    measured = _measure(n)
    theory = _bloom(n)
    print(f"tags/record={n}: measured FPR {measured:.4%}, Bloom formula {theory:.4%}, "
          f"seed 004 {SEED_TABLE[n]:.2%}")
    # Within 2x of the Bloom formula for this exact scheme ...
    assert theory / 2 <= measured <= theory * 2
    # ... and NOT within 2x of the seed's table: the seed's numbers are unreachable with
    # k=3, M=64 (see the module docstring). This assertion records the discrepancy.
    assert measured > 2 * SEED_TABLE[n]


def test_fpr_multi_tag_query_does_not_explain_seed_table():
    # 2-tag queries: 5 tags/record comes close to the seed's 0.03% ...
    assert SEED_TABLE[5] / 2 <= _measure(5, 2) <= SEED_TABLE[5] * 2
    # ... but 20 tags/record does not reach 2.3% (2-tag: ~5.7%, above 2x) and a 3-tag query
    # is far below the seed's 0.03% at 5 tags.
    assert _measure(20, 2) > 2 * SEED_TABLE[20]
    assert _measure(5, 3) < SEED_TABLE[5] / 2
