"""Name bridges (engine/recall/bridges.py): the names the best memories mention find the
memories that share no word with the question, on a small real store (FakeEmbedder: texts that
share words are close)."""
from __future__ import annotations

import pytest

from synapse_cli.engine import graphview
from synapse_cli.engine.recall import RecallConfig, recall
from synapse_cli.engine.recall.bridges import bridge_query, names_in
from synapse_cli.engine.store import Store
from synapse_cli.models.fake import FakeEmbedder

from conftest import ingest_chat

EMB = FakeEmbedder(384)
ANSWER = "I rang Fernbank straight after, they can take him from the 8th"
TURNS = [
    ("Ruth", "2026-05-10T09:00:00Z", "the social worker says Dad needs a care home, she "
                                     "suggested Fernbank"),
    ("Dev", "2026-05-10T09:05:00Z", "a care home for Dad, ok. is it near the bus?"),
    ("Callum", "2026-05-11T09:00:00Z", "Dad's care plan meeting moved to Friday"),
    ("Dev", "2026-05-12T09:00:00Z", "home from work, Dad asked about his care again"),
    ("Ruth", "2026-05-20T13:27:00Z", ANSWER),
    ("Callum", "2026-05-21T10:00:00Z", "the plumber is coming to fix the boiler tomorrow"),
    ("Dev", "2026-05-22T10:00:00Z", "the bus strike is over"),
]
QUERY = "Which care home is Dad going into?"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return ingest_chat(tmp_path_factory.mktemp("bridges") / "st", TURNS, EMB)


def test_names_inside_a_sentence_count_sentence_starts_days_and_months_do_not():
    assert names_in("I rang Fernbank's office. They said Monday 8th June, Aspen Lodge next") \
        == ["Fernbank", "Aspen", "Lodge"]
    assert names_in("Fernbank it is") == []          # a sentence's first word may be any word
    assert names_in(None) == []


def test_the_bridge_leaves_out_the_question_s_words_and_the_speakers():
    bodies = [{"text": "ask Ruth whether Fernbank or Aspen Lodge has a room for Dad"}]
    assert bridge_query(bodies, "Which home is Dad going into?",
                        lambda name: name == "Ruth") == "Fernbank Aspen Lodge"
    assert bridge_query([{"text": "ask Ruth"}], "Which home?", lambda name: name == "Ruth") \
        is None
    # a name the question uses in its possessive is the question's word too
    assert bridge_query(bodies, "Is Fernbank's room ready for Dad?",
                        lambda name: name == "Ruth") == "Aspen Lodge"


def _scores(path, **cfg) -> dict[str, float]:
    with Store.open(path) as s:
        out = recall(s, QUERY, EMB.encode([QUERY])[0],
                     RecallConfig(k=len(TURNS), gate=False, **cfg), graphview.build(s))
    return {r["text"]: r["score"] for r in out["results"]}


def test_a_name_the_best_memory_mentions_lifts_the_turn_that_answers(store):
    off, on = _scores(store, lambda_bridge=0.0), _scores(store, lambda_bridge=0.2)
    plumber = TURNS[5][2]
    assert min(off, key=off.get) == ANSWER  # it shares no word with the question
    assert on[ANSWER] - off[ANSWER] == pytest.approx(0.2, abs=1e-6)  # no memory holds the name more strongly
    assert on[plumber] == pytest.approx(off[plumber])  # names no bridge: unchanged
    strong = _scores(store, lambda_bridge=0.5)
    assert strong[ANSWER] > strong[plumber]


def test_under_a_tag_filter_only_that_user_s_memories_give_names(tmp_path):
    """Another user's memory that names "Zephyr" and matches the question best never makes
    this user's "Zephyr" turn a bridge: the names come from the filtered ranking only."""
    from synapse_cli import api

    zephyr = "the boiler man Zephyr fixed it"
    mine = ["a care home for Dad, maybe Fernbank", "Dad's care plan moved", "Dad's home care is "
            "at 9", zephyr]
    api.ingest([{"speaker": "Ana", "text": "which care home is Dad going into? ask Zephyr",
                 "timestamp": "2026-05-01T09:00:00Z", "tags": ["user:b"]}]
               + [{"speaker": "Kim", "text": text, "tags": ["user:a"],
                   "timestamp": f"2026-05-0{n}T09:00:00Z"} for n, text in enumerate(mine, 2)],
               store=str(tmp_path), embedder=EMB)
    off = _scores(tmp_path, lambda_bridge=0.0, tags=["user:a"])
    on = _scores(tmp_path, lambda_bridge=0.5, tags=["user:a"])
    assert set(on) == set(mine)
    assert on[zephyr] == pytest.approx(off[zephyr])
    everyone = _scores(tmp_path, lambda_bridge=0.5)  # unfiltered, Ana's "Zephyr" is a bridge
    assert everyone[zephyr] > _scores(tmp_path, lambda_bridge=0.0)[zephyr] + 0.1
