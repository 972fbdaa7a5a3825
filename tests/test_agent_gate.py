"""Issue 17's recall changes for agent use: the similarity of a query without the store's
speakers' names (engine/recall/speakers.py), statements addressed to their listener or naming
the person asked about in the attribution check, an update worded unlike what it replaces
(currency.change_bonus), and the topic check over the memories a question reaches
(topic.uncovered_topic). Unit tests on a small store, then the same behaviour with the real
MiniLM embedder."""
from __future__ import annotations

import numpy as np
import pytest

from synapse_cli import api
from synapse_cli.engine import graphview
from synapse_cli.engine.recall import RecallConfig, bm25_open, recall
from synapse_cli.engine.recall.attribution import addresses, credited, mentions_third_person
from synapse_cli.engine.recall.speakers import subject_names, without_speakers
from synapse_cli.engine.recall.topic import uncovered_topic
from synapse_cli.engine.store import Store
from synapse_cli.models.fake import FakeEmbedder

from conftest import ingest_chat

EMB = FakeEmbedder(384)
TURNS = [
    ("Dana", "2026-03-05T09:00:00Z", "oh and i'm vegetarian, so keep that in mind for restaurants"),
    ("assistant", "2026-03-05T09:01:00Z", "Noted, you're vegetarian."),
    ("Dana", "2026-03-06T09:00:00Z", "yep"),
    ("Dana", "2026-03-07T09:00:00Z", "lol"),
    ("Dana", "2026-03-08T09:00:00Z", "Biscuit the cat goes to Dr Mensah at Oakwood Vets"),
    ("Dana", "2026-03-09T09:00:00Z", "Biscuit turned four last week, the cat is getting old"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return ingest_chat(tmp_path_factory.mktemp("agent") / "st", TURNS, EMB)


def test_without_speakers_removes_only_the_stores_speakers(store):
    with Store.open(store) as s:
        a = graphview.build(s)
        assert without_speakers(s, a, "Is Dana still vegetarian?") == "Is still vegetarian?"
        assert without_speakers(s, a, "What did Dana's cat eat?") == "What did cat eat?"
        assert without_speakers(s, a, "How old is Biscuit?") is None   # not a speaker
        assert without_speakers(s, a, "Who is Dana?") is None          # nothing would be left
        assert subject_names(s, a, "Which vet does Dana take Biscuit to?") == {"biscuit"}


@pytest.mark.parametrize("text, yes", [
    ("you're on the Explorer plan now", True), ("Your new address is saved.", True),
    ("I moved your box to Friday", False), ("I'm on the Explorer plan", False),
    ("the plan changed", False), (None, False)])
def test_addresses(text, yes):
    assert addresses(text) is yes


def test_an_addressed_statement_counts_for_the_person_asked_about():
    speakers = ["Marco", "Priya"]
    texts = ["you're on the Explorer plan now", "thanks!"]
    assert credited("Priya", speakers, texts) == ["Marco", "Priya"]
    assert credited("Priya", speakers, texts, addressed=True) == ["Priya", "Priya"]
    # a statement about the speaker herself stays hers
    assert credited("Priya", ["Marco"], ["I'm on the Explorer plan now"], addressed=True) == [
        "Marco"]


def test_uncovered_topic_looks_at_the_memories_reached(store):
    with Store.open(store) as s:
        index = bm25_open(s, graphview.build(s).cache)
        texts = [t for _, _, t in TURNS]
        assert uncovered_topic("What breed of cat is Biscuit?", index, texts[4:]) is None  # cat
        assert uncovered_topic("What breed is Biscuit?", index, texts) == ["breed"]
        # a form of the word counts ("restaurant" for "restaurants")
        assert uncovered_topic("Which restaurant does Dana like?", index, texts[:1]) is None
        assert uncovered_topic("Who is Dana?", index, texts) is None  # no topic word
        # and so does a word of its family ("vegetarianism" for "vegetarian")
        assert uncovered_topic("Is Dana into vegetarianism?", index, texts[:1]) is None
        assert uncovered_topic("Is Dana into vegetarianism?", index, texts[2:]) == [
            "vegetarianism"]
        # a word close in meaning to a memory counts too
        near = lambda words: np.ones((len(words), 2)) / np.sqrt(2)  # noqa: E731
        mems = lambda: np.array([[1.0, 0.0]])  # noqa: E731
        assert uncovered_topic("What breed is Biscuit?", index, texts, near, mems, 0.7) is None
        assert uncovered_topic("What breed is Biscuit?", index, texts, near, mems, 0.8) == [
            "breed"]


def _recall(path, query, emb, **cfg):
    with Store.open(path) as s:
        return recall(s, query, emb.encode([query])[0], RecallConfig(k=5, **cfg),
                      graphview.build(s), embed=emb.encode)


def test_recall_refuses_a_topic_the_memories_reached_do_not_cover(store):
    out = _recall(store, "What breed is Biscuit?", EMB)
    assert out["rejected"] and out["topic"] == {"unknown": ["breed"]}
    off = _recall(store, "What breed is Biscuit?", EMB, topic_cover=False, topic_check=False)
    assert not off["rejected"]
    assert not _recall(store, "How old is Biscuit the cat?", EMB)["rejected"]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from synapse_cli.models.embedder import get_embedder

    emb = get_embedder()
    return ingest_chat(tmp_path_factory.mktemp("agent-real") / "st", TURNS, emb), emb


def test_real_embedder_chatter_does_not_crowd_out_a_named_speakers_fact(real):
    path, emb = real
    q = "Is Dana still vegetarian?"
    chatter = ("yep", "lol")

    def ranks(**cfg):
        texts = [r["text"] for r in _recall(path, q, emb, gate=False, **cfg)["results"]]
        return min(texts.index(t) for t in chatter), max(texts.index(t[2]) for t in TURNS[0:2])

    plain_chatter, plain_fact = ranks(name_free_sim=0.0)
    assert plain_chatter < plain_fact  # "Dana: lol" beats a statement about diet by the name
    best_chatter, worst_fact = ranks()
    assert best_chatter > worst_fact   # both diet statements come before any chatter


def test_real_embedder_refuses_what_was_never_said(real):
    path, emb = real
    out = _recall(path, "What is Dana's blood type?", emb)
    assert out["rejected"] and "topic" in out
    assert not _recall(path, "Which vet does Biscuit go to?", emb)["rejected"]


@pytest.mark.parametrize("text, yes", [
    ("Tomás moved to Berlin last week.", True), ("I'll drive Tomás to the airport.", True),
    ("Tomás's flight lands at 6.", True),
    ("Hey Tomás! I moved to Berlin.", False), ("Thanks, Tomás.", False),
    ("Tomás, that's great news", False), ("so proud of you, Tomás!", False),
    ("Good morning Tomás", False), ("Hi Tomás, how are you?", False),
    ("Hey Tomás how are you", False),
])
def test_mentions_third_person(text, yes):
    assert mentions_third_person("Tomás", text) is yes


def test_a_name_typed_without_its_capital_is_still_a_mention():
    """Chat often types no capitals (tune3's "leaving drinks for gaz saturday" was no mention
    of Gaz, so "Where were Gaz's leaving drinks?" was refused); a name that is also an
    everyday word is only found capitalised."""
    assert mentions_third_person("Gaz", "legend. leaving drinks for gaz saturday, Lass O'Gowrie")
    assert mentions_third_person("Mei", "it's mei's birthday tomorrow")
    assert not mentions_third_person("Rob", "they rob you blind at that venue")
    assert mentions_third_person("Rob", "Rob booked the venue")
    assert not mentions_third_person("Gaz", "cheers gaz")  # still a vocative
    # a review's cases: names that are words, short names, a letter inside a contraction
    assert not mentions_third_person("Ash", "the ash tree in my garden came down")
    assert not mentions_third_person("Honey", "honey is great in tea")
    assert not mentions_third_person("Em", "tell em i said hi")
    assert not mentions_third_person("M", "i'm planting a cherry tree")
    assert mentions_third_person("Priya", "priya's moving in june")


def test_a_name_written_with_its_capital_never_asks_the_lexicon():
    """The tagger's lexicon costs ~0.15 s to load: a recall over memories that write the name
    as the speaker does must not pay it (it did, for every question naming a speaker)."""
    from synapse_cli.engine.recall import attribution as at

    at._lower_case_is_the_name.cache_clear()
    assert mentions_third_person("Caroline", "Caroline ran a charity race")
    assert not mentions_third_person("Caroline", "I ran a charity race")
    assert at._lower_case_is_the_name.cache_info().misses == 0
    assert mentions_third_person("Caroline", "caroline ran it")  # now it is asked
    assert at._lower_case_is_the_name.cache_info().misses == 1


def test_a_statement_about_the_person_asked_about_counts_for_them():
    speakers, texts = ["Priya", "Tomás"], ["Tomás moved to Berlin in October.",
                                           "Berlin is cold."]
    assert credited("Tomás", speakers, texts) == ["Priya", "Tomás"]
    assert credited("Tomás", speakers, texts, mentioned=True) == ["Tomás", "Tomás"]
    # a vocative is not about them: Priya's own move stays hers
    assert credited("Tomás", ["Priya"], ["Thanks, Tomás! I moved to Berlin."],
                    mentioned=True) == ["Priya"]


@pytest.mark.parametrize("text, yes", [
    ("done, switched to Three. unlimited data", True), ("pescatarian now i guess", True),
    ("BA instead, direct from Heathrow", True), ("review rescheduled to Tuesday", True),
    ("I'm vegetarian, keep that in mind", False), ("are you still on Vodafone now?", False),
])
def test_reports_change(text, yes):
    from synapse_cli.engine.recall.currency import reports_change

    assert reports_change(text) is yes


def test_real_embedder_an_update_worded_unlike_the_old_fact_comes_first(tmp_path):
    from synapse_cli.models.embedder import get_embedder

    emb = get_embedder()
    old = "oh and i'm vegetarian, so keep that in mind for restaurants"
    new = "eating fish again tbh, pescatarian now i guess"
    turns = [("Dana", "2026-03-05T09:00:00Z", old),
             ("Dana", "2026-03-09T09:00:00Z", "the vegetarian place on Kirkgate was lovely"),
             ("Dana", "2026-03-31T19:42:00Z", new)]
    ingest_chat(tmp_path / "st", turns, emb)

    def texts(**cfg):
        out = _recall(tmp_path / "st", "Is Dana still vegetarian?", emb, gate=False, **cfg)
        return [r["text"] for r in out["results"]]

    plain = texts(lambda_change=0.0)
    assert plain.index(new) > plain.index(old)  # shares no word with the question
    ranked = texts()
    assert ranked[0] == new


def test_recaller_embeds_the_query_and_its_name_free_form_in_one_call(store):
    calls = []

    class Counting:
        name, dim = EMB.name, EMB.dim

        def encode(self, texts):
            calls.append(list(texts))
            return EMB.encode(texts)

    with api.Recaller(store, embedder=Counting()) as r:
        out = r.recall("Is Dana still vegetarian?", k=5, touch=False)
    assert calls == [["Is Dana still vegetarian?", "Is still vegetarian?"]]
    alone = _recall(store, "Is Dana still vegetarian?", EMB)  # the two embedded one by one
    assert [x["id"] for x in out["results"]] == [x["id"] for x in alone["results"]]


def test_real_embedder_a_question_about_someone_outside_the_filter_is_refused(tmp_path):
    """Under Ana's tag, "What is Bob's bank PIN?" reached her own PIN and was answered with
    it: Bob is no speaker there, so the attribution check had nothing to compare. The gate
    now refuses a question about something of someone the visible memories never mention
    (topic.unknown_names); the same question over the whole store is not refused for it."""
    from synapse_cli.models.embedder import get_embedder

    emb = get_embedder()
    api.ingest([{"text": "Ana's bank PIN is 4417, don't tell anyone", "speaker": "Ana",
                 "timestamp": "2026-03-01T09:00:00Z", "tags": ["user:ana"]},
                {"text": "I moved to Lisbon last spring", "speaker": "Ana",
                 "timestamp": "2026-03-02T09:00:00Z", "tags": ["user:ana"]},
                {"text": "my bank PIN is 9021", "speaker": "Bob",
                 "timestamp": "2026-03-03T09:00:00Z", "tags": ["user:bob"]}],
               store=str(tmp_path / "st"), embedder=emb)
    q = "What is Bob's bank PIN?"
    out = _recall(tmp_path / "st", q, emb, tags=("user:ana",))
    assert out["rejected"] and out["topic"] == {"unknown": ["bob"]} and out["results"] == []
    assert not _recall(tmp_path / "st", "What is Ana's bank PIN?", emb,
                       tags=("user:ana",))["rejected"]
    whole = _recall(tmp_path / "st", q, emb)
    assert whole.get("topic") is None
    assert any("9021" in r["text"] for r in whole["results"])
