"""Filters are exact in every recall mode: no result outside the tags, time window or types the
caller asked for, at a scale where the header's 64-bit Bloom filter certainly collides; and a
tag or time filter is a wall that activation and --explain paths do not cross."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "reliability"))
import filter_leaks  # noqa: E402
from filter_leaks import DAY, EMB, T0
from store_format.tags import contains, encode_tags
from synapse_cli import api
from synapse_cli.engine import graphview
from synapse_cli.engine.recall import MODES, RecallConfig, recall
from synapse_cli.engine.store import Store

USERS = 400


@pytest.fixture(scope="module")
def pins(tmp_path_factory):
    """The hostile-user report's store: one PIN per user, every record tagged user:U."""
    path = tmp_path_factory.mktemp("pins") / "st"
    api.ingest([{"text": f"My bank PIN is {1000 + u} pet number {u}", "speaker": f"user{u}",
                 "tags": [f"user:{u}"], "timestamp": T0 + u * 60_000} for u in range(USERS)],
               store=str(path), embedder=EMB)
    return path


def test_bloom_collides_at_this_scale(pins):
    """The test below is not vacuous: the headers alone would leak."""
    with Store.open(pins) as s:
        bloom = np.concatenate([np.asarray(x.headers["synaptic_tags"], np.uint64)
                                for x in s.segments])
    leaks = sum(int(np.count_nonzero((bloom & np.uint64(encode_tags([f"user:{u}"])))
                                     == np.uint64(encode_tags([f"user:{u}"])))) - 1
                for u in range(USERS))
    assert leaks > 10


@pytest.mark.parametrize("mode", MODES)
def test_tag_filter_returns_only_that_users_records(pins, mode):
    query = "what is my bank PIN?"
    vec = EMB.encode([query])[0]
    foreign = []
    with Store.open(pins) as s:
        arrays = graphview.build(s)
        for u in range(0, USERS, 2 if mode in ("synaptic", "ecphory") else 1):
            for tag in (f"user:{u}", f"speaker:user{u}"):
                cfg = RecallConfig(mode=mode, k=30, tags=(tag,), gate=False, explain=True)
                out = recall(s, query, vec, cfg, arrays, embed=EMB.encode)
                foreign += [r["text"] for r in out["results"]
                            if not r["text"].endswith(f" pet number {u}")]
                assert len(out["results"]) <= 1
    assert foreign == []


def test_speaker_focus_bonus_is_exact(pins):
    from synapse_cli.engine.recall import speaker_mask

    with Store.open(pins) as s:
        arrays = graphview.build(s)
        for u in range(0, USERS, 7):
            assert int(speaker_mask(s, arrays, f"user{u}").sum()) == 1


# --- the property: random stores, random filters, every mode -------------------------------
# (bench/reliability/filter_leaks.py builds the stores and checks a result; it runs the same at scale)


@pytest.fixture(scope="module")
def random_stores(tmp_path_factory):
    out = []
    for seed in range(3):
        path = tmp_path_factory.mktemp(f"random{seed}") / "st"
        out.append((path, filter_leaks.random_store(path, seed)))
    return out


filters = st.fixed_dictionaries({
    "tags": st.lists(st.sampled_from(filter_leaks.TAGS + ["speaker:sp1", "session:s2"]),
                     max_size=2, unique=True),
    "types": st.lists(st.sampled_from(filter_leaks.TYPES), max_size=2, unique=True),
    "days": st.lists(st.integers(0, 60), min_size=2, max_size=2).map(sorted),
    "window": st.sampled_from(["none", "since", "until", "both"]),
})


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(store_no=st.integers(0, 2), f=filters, mode=st.sampled_from(MODES),
       words=st.lists(st.sampled_from(filter_leaks.WORDS), min_size=1, max_size=4))
def test_no_result_or_path_outside_the_filter(random_stores, store_no, f, mode, words):
    path, truth = random_stores[store_no]
    since = T0 + f["days"][0] * DAY if f["window"] in ("since", "both") else None
    until = T0 + f["days"][1] * DAY if f["window"] in ("until", "both") else None
    cfg = RecallConfig(mode=mode, k=20, gate=False, explain=True, tags=tuple(f["tags"]),
                       types=tuple(f["types"]), since_ms=since, until_ms=until)
    with Store.open(path) as s:
        assert filter_leaks.violations(s, truth, " ".join(words), cfg) == []


def test_a_bare_string_or_backwards_window_is_refused(pins):
    from synapse_cli.engine.config import ConfigError

    with Store.open(pins) as s:
        for cfg in (RecallConfig(tags="user:3"), RecallConfig(types="episodic"),
                    RecallConfig(since_ms=T0 + DAY, until_ms=T0)):
            with pytest.raises(ConfigError):
                recall(s, "pin", EMB.encode(["pin"])[0], cfg)


@pytest.mark.parametrize("mode", MODES)
def test_filters_given_as_iterators_are_applied(pins, mode):
    """An iterator of tags was read by the filter check and the recall then had no tag filter:
    every user's PIN came back (api.recall, Recaller.recall and the engine's recall alike); an
    iterator of types returned "no record"."""
    query = "what is my bank PIN?"
    kw = dict(store=str(pins), embedder=EMB, touch=False, gate=False, mode=mode, k=30)
    for tags in (iter(["user:7"]), (t for t in ["user:7"]), map(str, ["user:7"])):
        out = api.recall(query, tags=tags, types=iter(["episodic"]), **kw)
        assert [r["text"] for r in out["results"]] == ["My bank PIN is 1007 pet number 7"]
    with api.Recaller(str(pins), embedder=EMB) as r:
        out = r.recall(query, tags=iter(["user:7"]), touch=False, gate=False, mode=mode)
    assert [r["text"] for r in out["results"]] == ["My bank PIN is 1007 pet number 7"]
    with Store.open(pins) as s:
        cfg = RecallConfig(mode=mode, k=30, tags=iter(["user:7"]), gate=False)
        out = recall(s, query, EMB.encode([query])[0], cfg, embed=EMB.encode)
    assert [r["text"] for r in out["results"]] == ["My bank PIN is 1007 pet number 7"]


def test_prune_and_recall_agree_on_a_tag(pins):
    from synapse_cli.engine.maintenance.prune import PrunePolicy, select

    with Store.open(pins) as s:
        for u in (3, 170, 57):
            sel = select(s, PrunePolicy(tags=(f"user:{u}",)))
            assert len(sel.policies["tag"]) == 1
            body = s.body(sel.policies["tag"][0])
            assert body["text"].endswith(f" pet number {u}") and contains(
                int(encode_tags(body["tags"])), encode_tags([f"user:{u}"]))


def test_a_node_a_later_episode_enriched_is_outside_an_earlier_window(tmp_path):
    """A semantic node holds what every episode naming it said: "Berlin marathon", made in June
    and linked in September to "Maya finished in 3:52", tells an --as-of June recall the
    result. It is inside a time window only when every record it links is."""
    from store_format import flags as fl
    from store_format import graph_files as gf
    from synapse_cli.engine.memory import NewMemory
    from synapse_cli.engine.store import StoreWriter

    path = tmp_path / "st"
    api.ingest([{"text": "Maya is training for the Berlin marathon", "timestamp": T0},
                {"text": "Maya finished the Berlin marathon in 3:52", "timestamp": T0 + 90 * DAY}],
               store=str(path), embedder=EMB)
    text = "Berlin marathon [TYPE] event [DESC] Maya finished in 3:52"
    with StoreWriter.open(path) as w:
        (node,) = w.append([NewMemory(text=text, vector=EMB.encode([text])[0], timestamp_ms=T0,
                                      memory_type=fl.MemoryType.SEMANTIC, meta={"name": text})])
        w.add_edges(np.full(2, node), np.array([1, 2]), gf.ABSTRACTION, 0.8)
        w.add_edges(np.array([1, 2]), np.full(2, node), gf.ABSTRACTION, 0.8)
        w.commit()
    with Store.open(path) as s:
        def ids(mode, until):
            cfg = RecallConfig(mode=mode, k=5, gate=False, types=("semantic",), until_ms=until)
            out = recall(s, "Berlin marathon", EMB.encode(["Berlin marathon"])[0], cfg,
                         graphview.build(s), embed=EMB.encode)
            return [r["id"] for r in out["results"]]

        for mode in MODES:
            assert node not in ids(mode, T0 + 10 * DAY), mode
        assert node in ids("vector", T0 + 100 * DAY)  # the whole story inside the window


def test_bm25_statistics_under_a_tag_are_the_users(tmp_path):
    """A tagged recall in a shared store ranks as the user's own store would: the BM25
    statistics are those of the user's records, so another user's memories move no score
    (with the whole store's statistics they moved every IDF: agent-use top-10 0.961 -> 0.922 on
    the tune half with every conversation in one store). A type filter keeps the statistics."""
    a = [{"text": "My dentist appointment is on Tuesday at 3pm", "tags": ["user:a"]},
         {"text": "I like green tea in the morning", "tags": ["user:a"]},
         {"text": "The dentist will call me back about the appointment", "tags": ["user:a"]}]
    b = [{"text": "The dentist said to floss more", "tags": ["user:b"]},
         {"text": "Our team standup moved to 9:30", "tags": ["user:b"]},
         {"text": "Dentist dentist dentist, again the dentist", "tags": ["user:b"]}]
    shared, own = str(tmp_path / "shared"), str(tmp_path / "own")
    api.ingest(a + b, store=shared, embedder=EMB)
    api.ingest(a, store=own, embedder=EMB)

    def ranked(store, mode, **kw):
        out = api.recall("dentist appointment", store=store, embedder=EMB, mode=mode,
                         gate=False, touch=False, **kw)
        return [(r["id"], r["signals"]["bm25"]) for r in out["results"]]

    for mode in ("synapse", "bm25", "hybrid"):
        mine = ranked(shared, mode, tags=["user:a"])
        assert mine == ranked(own, mode), mode
        assert mine and mine[0][1] > 0, mode
    # a type filter chooses what is returned, not the corpus the statistics count
    typed = ranked(shared, "bm25", types=["episodic"])
    assert dict(typed)[1] == dict(ranked(shared, "bm25"))[1]
    assert dict(typed)[1] != dict(ranked(shared, "bm25", tags=["user:a"]))[1]


def test_one_recaller_serving_users_in_turn_ranks_as_a_fresh_one(tmp_path):
    """The BM25 statistics follow the scope of each recall (signals._bm25_index keeps one live
    set per snapshot): a server answering users, times and the whole store in turn must rank
    each exactly as a recall that starts from nothing, also after new memories arrive."""
    items = [{"text": t, "tags": [f"user:{u}"], "timestamp": T0 + i * DAY}
             for i, (u, t) in enumerate([
                 ("a", "dentist appointment tuesday"), ("a", "green tea morning"),
                 ("a", "dentist call back appointment"), ("b", "dentist floss"),
                 ("b", "standup moved"), ("b", "dentist dentist again"),
                 ("b", "dry cleaning friday"), ("a", "bike repair shop")])]
    store = str(tmp_path / "s")
    api.ingest(items, store=store, embedder=EMB)
    turns = [dict(tags=["user:a"]), dict(tags=["USER:B "]), dict(tags=["user:a"], mode="bm25"),
             dict(), dict(until_ms=T0 + 3 * DAY), dict(tags=["user:a"], until_ms=T0 + 3 * DAY),
             dict(tags=["user:b"], mode="hybrid"), dict(tags=["user:a"])]

    def ranked(r, **kw):
        out = r.recall("dentist appointment", touch=False, gate=False, **kw)
        return [(x["id"], x["signals"]["bm25"]) for x in out["results"]]

    with api.Recaller(store, embedder=EMB) as server:
        for round_ in range(2):
            for kw in turns:
                with api.Recaller(store, embedder=EMB) as fresh:
                    assert ranked(server, **kw) == ranked(fresh, **kw), (round_, kw)
            api.ingest([{"text": "dentist moved my appointment to friday",
                         "tags": ["user:a"], "timestamp": T0 + 9 * DAY}],
                       store=store, embedder=EMB)


def test_two_users_under_one_session_name_are_two_chains(tmp_path):
    """Ana's and Bob's turns interleaved under one session name: ingest linked each to the
    previous turn of the session whoever it was, so Ana's records were joined only through
    Bob's, her tag filter cut every link, and her confidence fell from 0.98 to 0.24 (found by
    a hostile-user helper). Each user's records now form their own chain, also after
    compaction rebuilds the ingest index and a later ingest continues it."""
    def turn(i, who, text):
        return {"text": text, "speaker": who, "session": "2026-06-02",
                "timestamp": T0 + i * 1800_000, "tags": [f"user:{who}"]}

    ana = [(0, "I'm vegetarian, no fish either."), (2, "We moved the team offsite to Sintra."),
           (4, "Book a restaurant with good salads for the offsite dinner."),
           (5, "Standup is at 9:30 every weekday.")]
    bob = [(1, "My cat sleeps all day."), (3, "Lunch was ramen again."),
           (6, "The printer on floor 2 is broken.")]
    mine = [turn(i, "ana", t) for i, t in ana]
    both = sorted(mine + [turn(i, "bob", t) for i, t in bob], key=lambda x: x["timestamp"])
    shared, own = str(tmp_path / "shared"), str(tmp_path / "own")
    api.ingest(both, store=shared, embedder=EMB)
    api.ingest(mine, store=own, embedder=EMB)

    def answer(store, q):
        out = api.recall(q, store=store, embedder=EMB, tags=["user:ana"], touch=False)
        return (out["rejected"], out["confidence"],
                [(r["text"], r["score"]) for r in out["results"]])

    for q in ("What should I eat?", "Where is the team offsite?", "dinner plans"):
        assert answer(shared, q) == answer(own, q), q
    api.prune(store=shared, ids=[2], compact=True)  # a Bob record: the index is rebuilt
    api.ingest([turn(7, "ana", "The offsite dinner is at 8pm.")], store=shared, embedder=EMB)
    api.ingest([turn(7, "ana", "The offsite dinner is at 8pm.")], store=own, embedder=EMB)
    q = "When is the offsite dinner?"
    assert answer(shared, q) == answer(own, q)


def test_a_labelled_turn_stays_in_its_conversation(tmp_path):
    """A label is not a user: a turn tagged `plan` among untagged turns (the demo's own
    fixture), or `user:ana` + `plan` among Ana's turns, is linked to the turn before it, while
    Bob's turns under the same session name stay a chain of their own."""
    def turn(i, tags):
        return {"text": f"turn {i} about the offsite", "session": "s1",
                "timestamp": T0 + i * 60_000, "tags": tags}

    store = str(tmp_path / "s")
    api.ingest([turn(0, []), turn(1, ["plan"]), turn(2, []),
                turn(3, ["user:ana"]), turn(4, ["user:bob"]), turn(5, ["user:ana", "plan"]),
                turn(6, ["user:bob"])], store=store, embedder=EMB)
    api.ingest([turn(7, ["user:ana", "Plan"])], store=store, embedder=EMB)  # a later call
    with Store.open(store) as s:
        g = s.graph()
        src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64))).tolist()
        edges = set(zip(src, g.node_ids[g.indices.astype(np.intp)].tolist()))
    links = {tuple(sorted(e)) for e in edges}
    assert edges == {(b, a) for a, b in edges}  # both ways
    # 3 follows 1 (the untagged chain), 2 (plan) hangs on 1; Ana's first turn (4) and Bob's
    # (5) each follow the untagged 3, and then only their own: 6 (ana + plan) hangs on Ana's
    # 4, on the untagged 3 and on the `plan` 2 (never on Bob's 5): under Ana's tag, or the
    # label's, it keeps a link whatever else was said in between; Bob's 7 follows his 5; 8
    # continues 6 (same tags, Plan = plan)
    assert links == {(1, 3), (1, 2), (3, 4), (3, 5), (2, 6), (3, 6), (4, 6), (5, 7), (6, 8)}


def test_the_gates_vocabulary_is_what_the_recall_may_see(tmp_path):
    """An identifier first mentioned after --as-of, or only by a trashed record, is unknown to
    the topic check, as in a store that never held it: the gate's answer must not tell that a
    later or forgotten memory mentions it (found by a helper: the vocabulary counted both)."""
    items = [{"text": "INC-412 root cause was a full disk on the replica.", "timestamp": T0},
             {"text": "The on-call rotation starts Monday.", "timestamp": T0 + 3600_000},
             {"text": "INC-415 root cause was an expired TLS certificate.",
              "timestamp": T0 + 19 * DAY}]
    full, early = str(tmp_path / "full"), str(tmp_path / "early")
    api.ingest(items, store=full, embedder=EMB)
    api.ingest(items[:2], store=early, embedder=EMB)

    def ask(store, **kw):
        out = api.recall("What was the root cause of INC-415?", store=store, embedder=EMB,
                         touch=False, **kw)
        return out["rejected"], out.get("topic")

    assert ask(early)[0]
    assert ask(full, until_ms=T0 + 9 * DAY) == ask(early)
    api.prune(store=full, ids=[3])
    assert ask(full) == ask(early)


def test_a_tagged_gate_and_similarity_never_depend_on_another_users_records(tmp_path):
    """The identifier check used the whole store's words (user:a learned that "777" is in
    someone's memories: INC-777 and INC-778 were refused differently), the speaker check the
    whole store's speakers (a name user:b speaks under changed user:a's similarity), and
    signals.pagerank showed what other users add (found by a helper)."""
    # one session: temporal edges, so PageRank is not 0 for want of a graph
    a = [{"text": "The outage INC-412 was caused by a bad database migration.",
          "speaker": "Ann", "tags": ["user:a"], "timestamp": T0, "session": "s1"},
         {"text": "We fixed the login bug on Monday.", "speaker": "Ann", "tags": ["user:a"],
          "timestamp": T0 + 60_000, "session": "s1"}]
    # three of b's: a chain of its own (two users' records under one session name are two
    # chains) whose middle record outranks a's in PageRank, which the last check needs
    b = [{"text": t, "speaker": "Mal", "tags": ["user:b"], "timestamp": T0 + (2 + i) * 60_000,
          "session": "s1"}
         for i, t in enumerate(["Ticket INC-777 is about the secret merger with Globex.",
                                "The merger call is on Friday.",
                                "Globex wants the numbers by noon."])]
    both, alone = str(tmp_path / "both"), str(tmp_path / "alone")
    api.ingest(a + b, store=both, embedder=EMB)
    api.ingest(a, store=alone, embedder=EMB)

    def ask(store, query, **kw):
        return api.recall(query, store=store, embedder=EMB, touch=False, tags=["user:a"], **kw)

    refused = [ask(both, f"What was the root cause of INC-{n}?")["topic"] for n in (777, 778)]
    assert refused == [{"unknown": ["inc", "777"]}, {"unknown": ["inc", "778"]}]
    for query in ("Did Mal fix the login bug?", "Did Ann fix the login bug?"):
        got = [[(r["id"], r["signals"]["semantic"], r["signals"]["pagerank"])
                for r in ask(s, query, gate=False)["results"]] for s in (both, alone)]
        assert got[0] == got[1] and all(pr == 0 for _, _, pr in got[0])
    # what PageRank would say here differs between the stores: the test above is not vacuous
    assert [r["signals"]["pagerank"] for r in ask(both, "login bug", gate=False, lambda_pr=0.1)
            ["results"]] != [r["signals"]["pagerank"] for r in
                             ask(alone, "login bug", gate=False, lambda_pr=0.1)["results"]]


def test_an_items_utility_never_depends_on_another_users_records(tmp_path):
    """Ingest's surprise (part of the utility remember and ingest report) was measured against
    every user's recent records: Alice learned whether Bob had said a sentence (helper)."""
    alice = [{"text": t, "speaker": "Alice", "tags": ["user:alice"], "timestamp": T0 + i}
             for i, t in enumerate(["I live in Lisbon.", "My cat is Zephyrine."])]
    bob = [{"text": "I owe Krzesimir 4000 euros from the poker game.", "speaker": "Bob",
            "tags": ["user:bob"], "timestamp": T0 + 10}]
    probe = [{"text": "I owe Krzesimir 4000 euros from the poker game.", "speaker": "Alice",
              "tags": ["user:alice"], "timestamp": T0 + 20}]
    got = []
    for name, others in (("both", bob), ("alone", [])):
        store = str(tmp_path / name)
        api.ingest(alice + others, store=store, embedder=EMB)
        got.append(api.ingest(probe, store=store, embedder=EMB)[0]["utility"])
    assert got[0] == got[1]
