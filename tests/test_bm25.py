"""BM25 index: equal scores to rank-bm25, persistence, crash tails, corruption, kernels."""
from __future__ import annotations

import json
import os
import random
import struct
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from rank_bm25 import BM25Okapi

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # allow plain `pytest` before the package is installed
    sys.path.insert(0, str(REPO))

from store_format.crc32c import crc32c  # noqa: E402
from store_format.errors import CorruptStore, InvalidRecord, Truncated, UnsafeStore  # noqa: E402
from synapse_cli.kernels.bm25 import bm25_accumulate, postings_csr  # noqa: E402
from synapse_cli.kernels.bm25_reference import bm25_scores_reference, postings_csr_reference  # noqa: E402
from synapse_cli.models.bm25 import BM25Index  # noqa: E402
from synapse_cli.models.tokenize import tokenize  # noqa: E402
from conftest import SHARED_DATA, needs_shared_data  # noqa: E402

TOL = 1e-5

CORPUS = [
    "The cat sat on the mat.",
    "The dog chased the cat around the garden!",
    "",  # an empty document still counts in N and avgdl
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    "Melanie painted a sunrise; the the the cat watched.",
    "Ünïcode wörds: Straße, café, naïve — and the CAT.",
    "dog dog dog",
]
QUERIES = ["the cat", "cat cat dog", "straße café", "unknown words only", "", "THE", "group support 2023"]


def _reference(texts, query):
    return BM25Okapi([tokenize(t) for t in texts]).get_scores(tokenize(query))


def _build(tmp_path, texts, batches=1, first_id=1):
    tmp_path.mkdir(parents=True, exist_ok=True)  # the store directory exists before any add
    index = BM25Index.open(tmp_path, None)
    ids = list(range(first_id, first_id + len(texts)))
    cuts = np.linspace(0, len(texts), batches + 1).astype(int)
    committed = index.committed
    for a, b in zip(cuts[:-1], cuts[1:]):
        committed = index.add(ids[a:b], texts[a:b])
    return index, committed


def _locomo():
    path = SHARED_DATA / "locomo" / "locomo_dev.json"
    texts, questions = [], []
    for conv in json.loads(path.read_text()):
        c = conv["conversation"]
        sessions = [k for k in c if k.startswith("session_") and not k.endswith("date_time")]
        for k in sorted(sessions, key=lambda k: int(k.split("_")[1])):
            texts.extend(turn["text"] for turn in c[k])
        questions.extend(q["question"] for q in conv["qa"])
    return texts, questions


# --------------------------------------------------------------------------- equality


def test_tokenizer_rule():
    assert tokenize("Héllo, WORLD! it's 3:56pm") == ["hello", "world", "it", "s", "3", "56pm"]
    assert tokenize("Héllo, WORLD! it's 3:56pm", 1) == ["héllo", "world", "it", "s", "3", "56pm"]
    assert tokenize("cafe\u0301", 1) == tokenize("café", 1)  # NFC
    assert tokenize("") == []


def test_handmade_corpus_equals_rank_bm25(tmp_path):
    index, _ = _build(tmp_path, CORPUS)
    for q in QUERIES:
        ids, s = index.scores(q)
        assert ids.tolist() == list(range(1, len(CORPUS) + 1))
        np.testing.assert_allclose(s, _reference(CORPUS, q), rtol=0, atol=1e-12)
    # "the" is in more than half the documents: its idf is floored to epsilon * average idf
    assert index.scores("the")[1].max() > 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from("a b c d e f g h".split()), max_size=8), min_size=1, max_size=12),
       st.lists(st.sampled_from("a b c d x".split()), max_size=4))
def test_random_corpora_equal_rank_bm25(tmp_path_factory, docs, query):
    if not any(docs):
        docs[0] = ["a"]  # rank-bm25 divides by zero on a corpus without any word
    texts, q = [" ".join(d) for d in docs], " ".join(query)
    index, _ = _build(tmp_path_factory.mktemp("h"), texts, batches=min(3, len(texts)))
    np.testing.assert_allclose(index.scores(q)[1], _reference(texts, q), rtol=0, atol=1e-12)


@needs_shared_data(("locomo", "locomo_dev.json"))
def test_locomo_dev_sample_equals_rank_bm25(tmp_path):
    texts, questions = _locomo()
    index, committed = _build(tmp_path, texts)
    index = BM25Index.open(tmp_path, committed)
    ref = BM25Okapi([tokenize(t) for t in texts])
    worst = 0.0
    for q in random.Random(0).sample(questions, 200):
        ids, s = index.scores(q)
        worst = max(worst, float(np.abs(s - ref.get_scores(tokenize(q))).max()))
    assert len(ids) == len(texts)
    assert worst <= TOL


def test_live_mask_equals_rank_bm25_on_live_docs(tmp_path):
    index, _ = _build(tmp_path, CORPUS)
    live = [1, 2, 4, 5, 7]
    index.set_live(live)
    texts = [CORPUS[i - 1] for i in live]
    for q in QUERIES:
        ids, s = index.scores(q)
        assert ids.tolist() == live
        np.testing.assert_allclose(s, _reference(texts, q), rtol=0, atol=1e-12)
    index.add([8], ["a new cat"])  # added documents are live
    assert index.scores("cat")[0].tolist() == live + [8]
    index.set_live(None)
    assert len(index) == len(CORPUS) + 1


def test_top_k(tmp_path):
    index, _ = _build(tmp_path, CORPUS)
    ids, s = index.scores("the cat dog")
    top_ids, top_s = index.top_k("the cat dog", 3)
    order = sorted(range(len(ids)), key=lambda i: (-s[i], ids[i]))[:3]
    assert top_ids.tolist() == [int(ids[i]) for i in order]
    assert (np.diff(top_s) <= 0).all()
    assert len(index.top_k("nothing matches", 5)[0]) == 0
    assert len(index.top_k("cat", 100)[0]) == int((index.scores("cat")[1] > 0).sum())


def test_containing_is_the_records_with_every_word(tmp_path):
    index, _ = _build(tmp_path, CORPUS, batches=2)
    for q in ("the cat", "cat dog", "THE", "straße"):
        words = set(tokenize(q))
        want = [i + 1 for i, t in enumerate(CORPUS) if words <= set(tokenize(t))]
        assert index.containing(q).tolist() == want, q
    assert len(index.containing("unknownword cat")) == 0 and len(index.containing("")) == 0


def test_word_scores_sum_to_the_scores(tmp_path):
    """Per-word shares for chosen records (the attribution check's input) add up to scores()."""
    index, _ = _build(tmp_path, CORPUS)
    index.set_live([1, 2, 3, 5, 6, 7])
    ids, full = index.scores("the cat the dog unknownword", live_only=False)
    pick = np.array([7, 4, 1, 99, 2], np.uint64)  # 4 is dead, 99 unknown: both score 0
    words, per_word = index.word_scores("the cat the dog unknownword", pick)
    assert words == ["cat", "dog", "the", "unknownword"] and per_word.shape == (4, 5)
    want = [full[ids.tolist().index(i)] if i in (1, 2, 7) else 0.0 for i in pick.tolist()]
    np.testing.assert_allclose(per_word.sum(axis=0), want, rtol=1e-12, atol=1e-12)
    assert (per_word[3] == 0).all()  # a word outside the vocabulary adds nothing


# --------------------------------------------------------------------------- persistence


def test_incremental_batches_and_reopen_equal_one_batch(tmp_path):
    texts = CORPUS * 5
    one, _ = _build(tmp_path / "one", texts, batches=1)
    many, committed = _build(tmp_path / "many", texts, batches=4)
    reopened = BM25Index.open(tmp_path / "many", committed)
    for q in QUERIES:
        expected = one.scores(q)[1]
        assert np.array_equal(many.scores(q)[1], expected)
        assert np.array_equal(reopened.scores(q)[1], expected)
    # queries between adds see the documents added so far
    (tmp_path / "mid").mkdir()
    index = BM25Index.open(tmp_path / "mid", None)
    for i, t in enumerate(texts, start=1):
        index.add([i], [t])
        np.testing.assert_allclose(index.scores("cat dog")[1], _reference(texts[:i], "cat dog"), atol=1e-12)


def test_add_rejects_non_increasing_ids(tmp_path):
    index, committed = _build(tmp_path, CORPUS[:2])
    with pytest.raises(ValueError):
        index.add([2], ["again"])
    with pytest.raises(ValueError):
        index.add([5, 4], ["x", "y"])
    assert index.committed == committed


def test_torn_tail_ignored_then_truncated(tmp_path):
    index, committed = _build(tmp_path, CORPUS)
    for name in ("bm25.log", "bm25.vocab"):
        with open(tmp_path / name, "ab") as f:
            f.write(b"\x07torn tail of an interrupted append")
    reopened = BM25Index.open(tmp_path, committed)
    assert np.array_equal(reopened.scores("the cat")[1], index.scores("the cat")[1])
    committed = reopened.add([100], ["zebra cat"])
    assert os.path.getsize(tmp_path / "bm25.log") == committed["log_bytes"]
    assert os.path.getsize(tmp_path / "bm25.vocab") == committed["vocab_bytes"]
    final = BM25Index.open(tmp_path, committed)
    texts = CORPUS + ["zebra cat"]
    np.testing.assert_allclose(final.scores("zebra cat")[1], _reference(texts, "zebra cat"), atol=1e-12)


def test_failed_append_leaves_index_usable(tmp_path, monkeypatch):
    import synapse_cli.models.bm25 as mod
    index, committed = _build(tmp_path, CORPUS[:3])
    real, calls = mod._append, []

    def failing(path, *args):  # the vocabulary lands, then the log append fails
        calls.append(path.name)
        if path.name == "bm25.log":
            raise OSError("simulated crash")
        return real(path, *args)

    monkeypatch.setattr(mod, "_append", failing)
    with pytest.raises(OSError):
        index.add([10], ["brand new words"])
    monkeypatch.setattr(mod, "_append", real)
    assert calls == ["bm25.vocab", "bm25.log"] and index.committed == committed
    committed = index.add([10], ["brand new words"])  # same terms get the same ids again
    texts = CORPUS[:3] + ["brand new words"]
    reopened = BM25Index.open(tmp_path, committed)
    np.testing.assert_allclose(reopened.scores("new words")[1], _reference(texts, "new words"), atol=1e-12)
    assert len(index.top_k("new", 0)[0]) == 0 and len(index.top_k("new", -1)[0]) == 0


def test_every_flipped_byte_is_a_typed_error(tmp_path):
    _, committed = _build(tmp_path, CORPUS[:4], batches=2)
    for name in ("bm25.log", "bm25.vocab"):
        path = tmp_path / name
        good = path.read_bytes()
        try:
            for pos in range(len(good)):
                bad = bytearray(good)
                bad[pos] ^= 0x10
                path.write_bytes(bytes(bad))
                with pytest.raises(CorruptStore) as err:
                    BM25Index.open(tmp_path, committed)
                assert err.value.path == str(path) and err.value.offset is not None
                assert 0 <= err.value.offset <= pos, (name, pos, err.value)
        finally:
            path.write_bytes(good)


def test_committed_length_beyond_file_and_missing_file(tmp_path):
    _, committed = _build(tmp_path, CORPUS)
    with pytest.raises(Truncated):
        BM25Index.open(tmp_path, dict(committed, log_bytes=committed["log_bytes"] + 8))
    with pytest.raises(CorruptStore):  # a committed length cutting a block
        BM25Index.open(tmp_path, dict(committed, log_bytes=committed["log_bytes"] - 8))
    os.unlink(tmp_path / "bm25.vocab")
    with pytest.raises(Truncated):
        BM25Index.open(tmp_path, committed)


def test_unsafe_names_and_symlinks_refused(tmp_path):
    _, committed = _build(tmp_path / "s", CORPUS)
    with pytest.raises(UnsafeStore):
        BM25Index.open(tmp_path / "s", dict(committed, log="../bm25.log"))
    os.rename(tmp_path / "s" / "bm25.log", tmp_path / "real.log")
    os.symlink(tmp_path / "real.log", tmp_path / "s" / "bm25.log")
    with pytest.raises(UnsafeStore):
        BM25Index.open(tmp_path / "s", committed)


def _hostile_block(counts):
    head = struct.pack("<III", *counts)
    return head + struct.pack("<I", crc32c(head)) + b"\0" * 64


@pytest.mark.parametrize("name, counts", [
    ("bm25.log", (65_536, 0xFFFFFFFF, 1)),
    ("bm25.log", (0xFFFFFFFF, 5, 1)),
    ("bm25.vocab", (0xFFFFFFF, 0xFFFFFFFF, 0)),
])
def test_hostile_counts_do_not_allocate(tmp_path, name, counts):
    _, committed = _build(tmp_path, CORPUS[:2])
    path = tmp_path / name
    key = "log_bytes" if name == "bm25.log" else "vocab_bytes"
    data = path.read_bytes()[:committed[key]] + _hostile_block(counts)
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises((Truncated, InvalidRecord)) as err:
            BM25Index.open(tmp_path, dict(committed, **{key: len(data)}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.offset == committed[key]
    assert peak < 4 << 20


# --------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("seed", range(5))
def test_kernel_matches_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    n_docs, n_terms = int(rng.integers(1, 300)), int(rng.integers(1, 50))
    counts = rng.integers(0, n_docs + 1, n_terms)
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    doc_idx = np.concatenate([np.sort(rng.choice(n_docs, c, replace=False)) for c in counts]).astype(np.int32)
    tf = rng.integers(1, 6, len(doc_idx)).astype(np.float64)
    q_terms = np.unique(rng.integers(0, n_terms, int(rng.integers(1, 8)))).astype(np.int64)
    q_weights = rng.normal(1.0, 1.0, len(q_terms))
    doc_norm = 1.5 * (0.25 + 0.75 * rng.uniform(0, 3, n_docs))
    live = rng.random(n_docs) < 0.8
    out = np.zeros(n_docs)
    bm25_accumulate(indptr, doc_idx, tf, q_terms, q_weights, doc_norm, live, 1.5, out)
    expected = bm25_scores_reference(indptr, doc_idx, tf, q_terms, q_weights, doc_norm, live, 1.5)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert (out[~live] == 0).all()


@pytest.mark.parametrize("seed", range(3))
def test_postings_csr_matches_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    n_docs, n_vocab = int(rng.integers(1, 200)), int(rng.integers(1, 80))
    nt = rng.integers(0, min(n_vocab, 12) + 1, n_docs).astype(np.uint32)
    term = np.concatenate([np.sort(rng.choice(n_vocab, n, replace=False)) for n in nt]).astype(np.uint32)
    tf = rng.integers(1, 9, len(term)).astype(np.uint32)
    got = postings_csr(term, tf, nt, n_vocab)
    for a, b in zip(got, postings_csr_reference(term, tf, nt, n_vocab)):
        assert np.array_equal(a, b)
