"""Text beyond ASCII English (tokenizer version 2, docs/FORMAT.md 11; version 3 joins "n't"): accents fold, scripts
without spaces are searched by character bigrams, emoji are tokens; scores stay rank-bm25's
over the same tokens; an index written by version 1 keeps its own tokenizer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from synapse_cli.models.bm25 import BM25Index
from synapse_cli.models.tokenize import fold, tokenize

CORPUS = [
    "We flew to Zürich for the conference.",
    "我的柯基犬叫豆豆，它三岁了。",
    "Weekend plans 🔥🔥🔥",
    "The Straße outside is closed; São Paulo office reopens Monday.",
    "東京の学校に行きました",
    "서울에서 만나요",
    "Москва, йогурт и чай",
    "Zurich is cold in winter",
]


@pytest.mark.parametrize("text, tokens", [
    ("Zürich", ["zurich"]), ("ZURICH", ["zurich"]), ("São Paulo", ["sao", "paulo"]),
    ("Straße", ["strasse"]), ("Ελλάδα", ["ελλαδα"]),
    ("йогурт", ["йогурт"]),                      # Cyrillic keeps й (not и)
    ("がっこう", ["がっ", "っこ", "こう"]),          # kana keep their voicing marks
    ("柯基", ["柯基"]), ("犬", ["犬"]), ("iPhone手机", ["iphone", "手机"]),
    ("🔥🔥", ["🔥", "🔥"]), ("👍🏽", ["👍"]),        # a skin tone is not a token of its own
    ("x²", ["x2"]), ("ﬁle", ["file"]),           # compatibility forms
])
def test_version_2_tokens(text, tokens):
    assert tokenize(text) == tokens


@pytest.mark.parametrize("text, v2, v3", [
    ("I won't", ["i", "won", "t"], ["i", "wont"]),
    ("DON’T", ["don", "t"], ["dont"]),               # the typographic apostrophe too
    ("isn‘t isn`t", ["isn", "t", "isn", "t"], ["isnt", "isnt"]),  # and its look-alikes
    ("isnʼt", ["isnʼt"], ["isnt"]),                  # U+02BC is a letter: one token in v2
    ("isn't it", ["isn", "t", "it"], ["isnt", "it"]),
    ("Dana's it's", ["dana", "s", "it", "s"], ["dana", "s", "it", "s"]),  # only n't joins
])
def test_version_3_joins_a_negation_to_its_word(text, v2, v3):
    assert tokenize(text, 2) == v2 and tokenize(text) == v3


def test_the_topic_check_does_not_know_won_from_wont(tmp_path):
    """A store that only ever says "I won't" knows nothing about who won a match; its version 2
    index (kept by an existing store) still takes "won" from "won't"."""
    from synapse_cli.engine.recall.topic import unknown_topic

    texts = ["I won't paste secrets into the chat", "tests are green"]
    new = BM25Index.open(tmp_path)
    new.add([1, 2], texts)
    assert unknown_topic("Who won the 2026 Six Nations?", new) == ["won"]
    (tmp_path / "v2").mkdir()
    old = BM25Index.open(tmp_path / "v2")
    old.version = 2
    old.add([1, 2], texts)
    assert unknown_topic("Who won the 2026 Six Nations?", old) is None
    # a joined negation is a stopword, not a topic every chat store knows
    (tmp_path / "chat").mkdir()
    chat = BM25Index.open(tmp_path / "chat")
    chat.add([1], ["Dana: I didn't sleep well"])
    assert unknown_topic("Why didn't Dana give a blood sample?", chat) == ["give", "blood",
                                                                          "sample"]


def test_version_1_is_unchanged():
    assert tokenize("Zürich 柯基犬 🔥", 1) == ["zürich", "柯基犬"]
    assert fold("Zürich") == fold("ZURICH") == "zurich"


def build(tmp_path: Path, version: int | None = None) -> BM25Index:
    index = BM25Index.open(tmp_path)
    if version is not None:
        index.version = version  # before the first append: the files are written with it
    index.add(range(1, len(CORPUS) + 1), CORPUS)
    return BM25Index.open(tmp_path, index.committed)


@pytest.mark.parametrize("query, expected_first", [
    ("Zurich conference", 1), ("zürich winter", 8), ("柯基", 2), ("豆豆", 2), ("🔥", 3),
    ("strasse", 4), ("Sao Paulo", 4), ("学校", 5), ("서울", 6), ("йогурт", 7),
])
def test_queries_find_their_record_and_scores_equal_rank_bm25(tmp_path, query, expected_first):
    index = build(tmp_path)
    assert index.version == 3
    ids, scores = index.scores(query)
    reference = BM25Okapi([tokenize(t) for t in CORPUS]).get_scores(tokenize(query))
    np.testing.assert_allclose(scores, reference, rtol=0, atol=1e-12)
    top, _ = index.top_k(query, 3)
    assert int(top[0]) == expected_first


def test_an_index_written_by_version_1_keeps_its_tokenizer(tmp_path):
    (tmp_path / "v2").mkdir()
    assert sorted(build(tmp_path / "v2").top_k("Zurich", 2)[0].tolist()) == [1, 8]
    index = build(tmp_path, version=1)
    assert index.version == 1 and (tmp_path / "bm25.vocab").read_bytes()[8] == 1
    assert index.top_k("Zürich", 1)[0].tolist() == [1]
    assert index.top_k("Zurich", 1)[0].tolist() == [8]  # v1 does not fold: not record 1
    assert index.top_k("柯基", 1)[0].tolist() == []      # v1 has no bigrams
    index.add([9], ["Zürich again"])                     # appends stay version 1
    again = BM25Index.open(tmp_path, index.committed)
    assert again.version == 1 and again.top_k("zürich again", 1)[0].tolist() == [9]


def test_doc_lengths_count_words_not_emoji(tmp_path):
    index = build(tmp_path)
    rec, words = index.doc_lengths()
    assert words[2] == 2  # "Weekend plans 🔥🔥🔥": BM25 length 5, two words
    assert index._arrays()[1][2] == 5


def test_recall_bm25_and_synapse_on_a_real_store(tmp_path):
    """Through the CLI: ingest, then the accented, CJK and emoji queries of issue 22."""
    env = dict(os.environ, SYNAPSE_HOME=str(tmp_path / "s"), HF_HUB_OFFLINE="1")
    syn = str(Path(sys.executable).with_name("synapse"))
    lines = "\n".join(json.dumps({"text": t, "speaker": "u"}) for t in CORPUS[:7])
    subprocess.run([syn, "ingest", "-"], input=lines.encode(), env=env, check=True,
                   capture_output=True)

    def top(query, mode):
        out = subprocess.run([syn, "recall", query, "--mode", mode, "--k", "3"],
                             env=env, check=True, capture_output=True)
        return [r["text"] for r in json.loads(out.stdout)["results"]]
    assert top("Zurich", "bm25")[0] == CORPUS[0]
    assert top("柯基", "bm25")[0] == CORPUS[1]
    assert top("🔥", "bm25")[0] == CORPUS[2]
    assert top("Sao Paulo office", "synapse")[0] == CORPUS[3]


def test_the_topic_check_reads_a_version_1_store_with_its_own_tokenizer(tmp_path):
    from synapse_cli.engine.recall.topic import unknown_topic

    old = build(tmp_path, version=1)  # its vocabulary has "straße", not "strasse"
    assert unknown_topic("Which straße?", old) is None
    (tmp_path / "v2").mkdir()
    assert unknown_topic("Which strasse?", build(tmp_path / "v2")) is None
    assert unknown_topic("What is the capital of Peru?", old) == ["capital"]


def test_a_version_2_store_still_answers_a_question_with_a_negation(tmp_path, monkeypatch):
    """The attribution check compares the query's words (the store's tokenizer) with the words
    each memory states: both must come from the store's tokenizer, or on a store made before
    version 3 Ana's own "I won't go skydiving" states neither "won" nor "t", and Bob's "I won"
    takes the question from her (refused, margin 1.0)."""
    from synapse_cli import api
    from synapse_cli.models import bm25
    from synapse_cli.models.fake import FakeEmbedder

    monkeypatch.setattr(bm25, "FORMAT_VERSION", 2)  # a store created before version 3
    store, emb = tmp_path / "s", FakeEmbedder(384)
    filler = ["the weather is nice today", "lunch is at noon", "the train was late again",
              "my cat sleeps all day", "we need more coffee filters", "the meeting moved"]
    api.ingest([{"text": "I won't go skydiving", "speaker": "Ana", "session": "s"},
                {"text": "I won the skydiving raffle", "speaker": "Bob", "session": "s"}]
               + [{"text": t, "speaker": "Cara", "session": "s"} for t in filler],
               store=store, embedder=emb)
    monkeypatch.undo()
    assert (store / "bm25.vocab").read_bytes()[8] == 2
    assert api.inspect(store)["bm25_tokenizer"] == 2  # how a user learns it
    out = api.recall("What won't Ana do?", store=store, embedder=emb, touch=False)
    assert not out["rejected"] and out["results"][0]["text"] == "I won't go skydiving"
