"""Speaker focus (RecallConfig.lambda_speaker): a query naming one person who speaks in its top
memories ranks that person's own memories higher; the attribution check still weighs the
unfocused ranking."""
from __future__ import annotations

import numpy as np
import pytest

from synapse_cli import api
from synapse_cli.engine import graphview
from synapse_cli.engine.recall import RecallConfig, recall, speaker_mask
from synapse_cli.engine.store import Store
from synapse_cli.models.fake import FakeEmbedder

# Bob talks about pottery more than Ann does; Ann's one pottery statement is the answer.
TURNS = [
    {"text": "pottery class pottery wheel pottery glaze, I love pottery", "speaker": "Bob"},
    {"text": "my pottery teacher says pottery takes patience", "speaker": "Bob"},
    {"text": "I made a bowl at my first pottery lesson", "speaker": "Ann"},
    {"text": "the weather was cold and grey all week", "speaker": "Ann"},
    {"text": "we watched a film about sailing", "speaker": "Bob"},
]
QUERY = "What did Ann make in pottery class?"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("focus") / "st"
    emb = FakeEmbedder(384)
    api.ingest([dict(t, session="s1") for t in TURNS], store=str(path), embedder=emb)
    return path, emb


def _texts(path, emb, bonus):
    with Store.open(path) as s:
        vec = emb.encode([QUERY])[0]
        out = recall(s, QUERY, vec, RecallConfig(gate=False, k=5, lambda_speaker=bonus))
    return [r["text"] for r in out["results"]]


def test_named_speakers_memory_moves_up(store):
    answer = TURNS[2]["text"]
    ranks = {b: _texts(*store, b).index(answer) for b in (0.0, 0.3, 2.0)}
    assert ranks[0.0] > 0                          # without focus, Bob's pottery talk leads
    assert ranks[2.0] == 0 and ranks[0.3] <= ranks[0.0]  # a bonus only ever lifts her memory
    assert sorted(_texts(*store, 0.0)) == sorted(_texts(*store, 2.0))  # reordered only


def test_no_named_speaker_changes_nothing(store):
    path, emb = store
    with Store.open(path) as s:
        vec = emb.encode(["pottery class"])[0]
        a = recall(s, "pottery class", vec, RecallConfig(gate=False, lambda_speaker=0.0))
        b = recall(s, "pottery class", vec, RecallConfig(gate=False, lambda_speaker=0.3))
    assert [r["id"] for r in a["results"]] == [r["id"] for r in b["results"]]
    assert [r["score"] for r in a["results"]] == [r["score"] for r in b["results"]]


def test_speaker_mask_follows_the_ingest_tags(store):
    path, _ = store
    with Store.open(path) as s:
        arrays = graphview.build(s)
        ann = speaker_mask(s, arrays, "Ann")
        speakers = [s.body(int(i))["speaker"] for i in arrays.ids]
    assert ann.tolist() == [sp == "Ann" for sp in speakers]
    assert isinstance(ann, np.ndarray) and ann.dtype == bool


def test_attribution_weighs_the_unfocused_ranking(store):
    """The verdict is the same with and without focus (the gate's calibration holds)."""
    path, emb = store
    with Store.open(path) as s:
        vec = emb.encode([QUERY])[0]
        a = recall(s, QUERY, vec, RecallConfig(lambda_speaker=0.0))
        b = recall(s, QUERY, vec, RecallConfig(lambda_speaker=0.3))
    assert "attribution" in a and a["attribution"] == b["attribution"]
    assert a["rejected"] == b["rejected"]
