"""Query-side conflation of word forms (models/conflate.py) and its use by BM25Index.scores."""
from __future__ import annotations

import numpy as np
import pytest

from synapse_cli.models.bm25 import BM25Index
from synapse_cli.models.conflate import family, stem, variants


@pytest.mark.parametrize("forms, common", [
    (["book", "books"], "book"),
    (["read", "reads", "reading"], "read"),
    (["run", "runs", "running"], "run"),
    (["study", "studies", "studied", "studying"], "study"),
    (["hike", "hikes", "hiked", "hiking"], "hike"),
    (["paint", "painted", "painting", "paintings"], "paint"),
    (["class", "classes"], "class"),
    (["plan", "plans", "planned", "planning"], "plan"),
])
def test_forms_share_a_stem(forms, common):
    assert {stem(f) for f in forms} == {common}


@pytest.mark.parametrize("word", ["is", "bus", "this", "bed", "sing", "2023", "café", "the"])
def test_short_words_and_non_forms_stay(word):
    assert stem(word) == word


def test_variants_come_from_the_vocabulary_only():
    vocab = {"book", "books", "reading", "read", "hiking", "hikes", "bus", "busing"}
    assert variants("books", vocab) == ["book"]
    assert sorted(variants("read", vocab)) == ["reading"]
    assert sorted(variants("hike", vocab)) == ["hikes", "hiking"]
    assert variants("bus", vocab) == []          # "busing" is not a form of "bus" here
    assert variants("novel", vocab) == []


def test_bm25_variant_weight(tmp_path):
    index = BM25Index.open(tmp_path, None)
    index.add([1, 2, 3], ["I finished a good book", "reading all weekend", "went hiking"])
    ids, exact = index.scores("books read")
    assert ids.tolist() == [1, 2, 3] and exact.tolist() == [0.0, 0.0, 0.0]  # exact words only
    _, full = index.scores("books read", variant_weight=1.0)
    _, half = index.scores("books read", variant_weight=0.5)
    assert full[0] > 0 and full[1] > 0 and full[2] == 0
    np.testing.assert_allclose(half, full / 2)
    # "book" as its own query word scores what "books" brings along at weight 1
    np.testing.assert_allclose(index.scores("book reading")[1], full)
    words, per_word = index.word_scores("books read", np.array([1, 2], np.uint64), 1.0)
    assert words == ["book", "books", "read", "reading"]
    np.testing.assert_allclose(per_word.sum(axis=0), full[:2])


def test_a_word_family_for_the_gate():
    """Words that share their first seven letters are one family ("available" and
    "availability", which no form rule joins); shorter words have none."""
    assert family("available") == family("availability") == "availab"
    assert stem("available") != stem("availability")
    assert family("student") != family("studios") and family("studio") is None
    assert family("cat") is None and family("covid19x") is None


def test_bm25_knows_a_word_by_its_family(tmp_path):
    index = BM25Index.open(tmp_path, None)
    index.add([1, 2], ["my availability is weds and sats", "staff meal at four"])
    assert index.knows("available") and index.knows("availability")
    assert index.knows("available", np.array([1], np.uint64))
    assert not index.knows("available", np.array([2], np.uint64))  # not within that record
    assert not index.knows("avail")  # too short to have a family
    index.add([3], ["the new availabilities"])  # the families follow what is appended
    assert index.knows("availabilities") and index.knows("availables")
