"""Consolidation keeps users apart (FORMAT.md 13.3): a window holds one set of tags, a node
carries its window's tags and only memories carrying them join it, and a tagged recall goes
through that user's nodes as in a store of their own."""
from __future__ import annotations

import os

import pytest

from store_format import flags as fl
from store_format.tags import contains, encode_tags
from synapse_cli import api
from synapse_cli.engine.consolidate.run import plan_windows
from synapse_cli.engine.store import Store

T0 = 1_767_225_600_000  # 2026-01-01

ANA = [(0, "My sister Maya lives in Lisbon and teaches piano."),
       (2, "Maya is running the Lisbon half marathon in March."),
       (4, "I booked a pottery class at Clay Studio for Saturday."),
       (6, "Maya finished the half marathon in 1:52."),
       (8, "Clay Studio moved the class to Sunday.")]
BOB = [(1, "My sister Maya is a nurse in Porto."),
       (3, "I fixed the bike at Clay Studio's neighbour, Spoke & Chain."),
       (5, "Maya hates running."),
       (7, "Porto was rainy all week.")]


@pytest.fixture(scope="module")
def emb():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from synapse_cli.models.embedder import get_embedder

    return get_embedder()


def turn(i: int, who: str, text: str, *extra: str) -> dict:
    return {"text": text, "speaker": who, "session": "2026-06-02",
            "timestamp": T0 + i * 1800_000, "tags": [f"user:{who}", *extra]}


def nodes(store) -> dict[int, tuple[dict, int]]:
    """Semantic node id -> (body, header Bloom filter)."""
    with Store.open(store) as s:
        out = {}
        for rid in s.ids.tolist():
            h = s.header(rid)
            if fl.memory_type(h.flags) == fl.MemoryType.SEMANTIC:
                out[rid] = (s.body(rid), h.synaptic_tags)
        return out


def test_two_users_under_one_session_get_windows_and_nodes_of_their_own(tmp_path, emb):
    store = str(tmp_path / "shared")
    items = sorted([turn(i, "ana", t) for i, t in ANA] + [turn(i, "bob", t) for i, t in BOB],
                   key=lambda x: x["timestamp"])
    api.ingest(items, store=store, embedder=emb)
    with Store.open(store) as s:
        owner = {rid: s.body(rid)["speaker"] for rid in s.ids.tolist()}
        windows = plan_windows(s, 5)
    assert all(len({owner[r] for r in w.ids}) == 1 for w in windows)
    api.consolidate(store=store, embedder=emb)
    made = nodes(store)
    mayas = {tuple(b.get("tags", ())): b for b, _ in made.values() if b["name"] == "Maya"}
    assert set(mayas) == {("user:ana",), ("user:bob",)}
    for b, bloom in made.values():
        tags = b.get("tags", [])
        assert tags, b["name"]  # every memory here is someone's
        assert contains(bloom, encode_tags(tags))
        assert {owner[r] for r in b["sources"]} == {tags[0].split(":")[1]}
    # Bob's Maya is a nurse in Porto; nothing of his reaches Ana's node, and the reverse
    assert "Porto" not in mayas[("user:ana",)]["text"]
    assert "Lisbon" not in mayas[("user:bob",)]["text"]


def test_a_labelled_turn_joins_its_users_node_and_a_node_keeps_its_tags(tmp_path, emb):
    """A label is not a user: Ana's `plan`-tagged turn joins her node of the same name (its
    tags are all the turn's). A node's tags never change, so an untagged memory naming it
    makes a node of its own (found by a hostile-user helper: when an untagged mention narrowed
    the node, whose node it narrowed depended on which users had one)."""
    store = str(tmp_path / "s")
    items = [turn(0, "ana", ANA[2][1]), turn(1, "ana", ANA[4][1], "plan"),
             {**turn(2, "ana", "Clay Studio is closed in August."), "tags": []}]
    api.ingest(items[:2], store=store, embedder=emb)
    with Store.open(store) as s:
        assert [len(w.ids) for w in plan_windows(s, 5)] == [1, 1]  # one tag set a window
    api.consolidate(store=store, embedder=emb)
    clay = [b for b, _ in nodes(store).values() if b["name"] == "Clay Studio"]
    assert len(clay) == 1 and clay[0]["tags"] == ["user:ana"] and len(clay[0]["sources"]) == 2
    api.ingest(items[2:], store=store, embedder=emb)
    api.consolidate(store=store, embedder=emb)
    clay = sorted((b.get("tags", []), len(b["sources"]), bloom)
                  for b, bloom in nodes(store).values() if b["name"] == "Clay Studio")
    assert clay == [([], 1, 0), (["user:ana"], 2, encode_tags(["user:ana"]))]


def test_a_tagged_recall_in_a_shared_consolidated_store_equals_the_users_own(tmp_path, emb):
    mine = [turn(i, "ana", t) for i, t in ANA]
    both = sorted(mine + [turn(i, "bob", t) for i, t in BOB], key=lambda x: x["timestamp"])
    shared, own = str(tmp_path / "shared"), str(tmp_path / "own")
    for store, items in ((shared, both), (own, mine)):
        api.ingest(items, store=store, embedder=emb)
        api.consolidate(store=store, embedder=emb)

    def answer(store, q, tags=("user:ana",)):
        out = api.recall(q, store=store, embedder=emb, tags=list(tags), touch=False,
                         now_ms=T0 + 86_400_000)
        return (out["rejected"], out["confidence"],
                [(r["text"], r["score"]) for r in out["results"]])

    for q in ("Where does Maya live?", "How did Maya's race go?", "When is the pottery class?"):
        got = answer(shared, q)
        assert got[2], q
        # as in her own store, where her tag leaves out nothing: her nodes carry it too
        assert got == answer(own, q) == answer(own, q, tags=()), q
    # the ecphory mode searches the user's nodes, not the chunks alone as before
    eco = api.recall("Maya", store=shared, embedder=emb, tags=["user:ana"], touch=False,
                     mode="ecphory")
    assert "fallback" not in eco
    assert any(r["type"] == "semantic" for r in eco["results"])
    assert not any("Porto" in (r["text"] or "") or "nurse" in (r["text"] or "")
                   for r in eco["results"])


def test_rebuild_gives_nodes_made_before_their_users_tags(tmp_path, emb, monkeypatch):
    """Nodes made before they carried tags (one "Maya" for Ana's sister and Bob's, untagged,
    from windows mixing both) are dropped and built again per user by `consolidate --rebuild`;
    a memory the user put in the trash stays there; a second rebuild reads every window from
    the extraction cache and makes the same graph."""
    from synapse_cli.engine.consolidate import run

    store = str(tmp_path / "s")
    items = sorted([turn(i, "ana", t) for i, t in ANA] + [turn(i, "bob", t) for i, t in BOB],
                   key=lambda x: x["timestamp"])
    api.ingest(items, store=store, embedder=emb)
    with monkeypatch.context() as m:  # consolidation as it was: tags played no part
        m.setattr(run, "_own_tags", lambda body: frozenset())
        api.consolidate(store=store, embedder=emb)
    old = nodes(store)
    assert all("tags" not in b for b, _ in old.values())
    assert len([b for b, _ in old.values() if b["name"] == "Maya"]) == 1
    bobs_last = max(i for i, x in enumerate(items, 1) if x["speaker"] == "bob")  # ids from 1
    api.prune(store=store, ids=[bobs_last])
    first = api.consolidate(store=store, embedder=emb, rebuild=True)
    assert first["nodes_dropped"] == len(old)
    made = nodes(store)
    assert not set(made) & set(old)
    mayas = sorted(tuple(b.get("tags", ())) for b, _ in made.values() if b["name"] == "Maya")
    assert mayas == [("user:ana",), ("user:bob",)]
    trashed = api.list_memories(store, trashed=True)["memories"]
    assert [m["id"] for m in trashed] == [bobs_last]  # restorable, not compacted away
    assert not any(bobs_last in b["sources"] for b, _ in made.values())
    again = api.consolidate(store=store, embedder=emb, rebuild=True)
    assert again["cache_hits"] == again["windows"] == first["windows"]
    assert sorted((b["name"], tuple(b.get("tags", ())), len(b["sources"]))
                  for b, _ in nodes(store).values()) == sorted(
        (b["name"], tuple(b.get("tags", ())), len(b["sources"])) for b, _ in made.values())
    # restored after the rebuild dropped its nodes, it is consolidated again (found by a
    # second review: it kept its consolidated flag and stayed out of the graph for good)
    api.restore(store=store, ids=[bobs_last])
    plain = api.consolidate(store=store, embedder=emb)
    assert plain["episodes"] == 1 and "nodes_dropped" not in plain  # a rebuild's key only
    assert any(bobs_last in b["sources"] for b, _ in nodes(store).values())


def test_a_scoped_purge_leaves_other_users_nodes_alone(tmp_path, emb):
    """Found by a hostile-user helper: Ana's scoped purge compacted away Bob's trashed node
    (counted hers, as nodes carried no tags), named it in her report, and stripped Bob's
    speaker node of its relation to his own "Maya" (same name as her purged one)."""
    store = str(tmp_path / "s")
    items = [dict(turn(0, "ana", ANA[0][1]), speaker="Ana"),
             dict(turn(1, "bob", BOB[0][1]), speaker="Bob"),
             dict(turn(2, "bob", "I fixed my bike at Spoke Garage."), speaker="Bob")]
    api.ingest(items, store=store, embedder=emb)
    api.consolidate(store=store, embedder=emb)

    def bobs(name):
        return next(i for i, (b, _) in nodes(store).items()
                    if b["name"] == name and b.get("tags") == ["user:bob"])

    garage = bobs("Spoke Garage")
    api.prune(store=store, ids=[garage], within=["user:bob"])
    relations = nodes(store)[bobs("Bob")][0]["relations"]
    assert ["Maya", "talks about"] in [r[:2] for r in relations]
    ana_before = {1} | {i for i, (b, _) in nodes(store).items() if b.get("tags") == ["user:ana"]}
    report = api.prune(store=store, ids=[1], within=["user:ana"], purge=True)
    assert report["removed_ids"] and set(report["removed_ids"]) <= ana_before
    assert not set(report["derived_nodes"]) - ana_before
    assert api.restore(store=store, ids=[garage])["restored"] == [garage]
    assert nodes(store)[bobs("Bob")][0]["relations"] == relations


def test_a_scoped_purge_run_again_after_a_failure_leaves_no_purged_text(tmp_path, emb,
                                                                       monkeypatch):
    """Found by a second review: Ana's purge trashed the untagged "Paris" node that quotes her
    purged turn (a tagged mention may join an untagged node), the compaction failed (a full
    disk), and the purge run again as its hint says compacted only her tagged records: the
    node stayed in the trash, restorable, with her text."""
    from store_format import compaction

    store = str(tmp_path / "s")
    secret = "In Paris I met my secret friend Jacques at the Ritz."
    items = [{**turn(0, "guide", "Paris is the capital of France."), "tags": []},
             turn(1, "ana", secret), turn(2, "bob", "Paris was rainy all week.")]
    api.ingest(items, store=store, embedder=emb)
    api.consolidate(store=store, embedder=emb)
    quoting = [i for i, (b, _) in nodes(store).items() if "Jacques" in b["text"]]
    assert quoting and any("tags" not in nodes(store)[i][0] for i in quoting)
    hers = sum(b.get("tags") == ["user:ana"] for b, _ in nodes(store).values())
    real = compaction.compact

    def full_disk(*a, **kw):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(compaction, "compact", full_disk)
    with pytest.raises(Exception) as failed:
        api.prune(store=store, ids=[2], within=["user:ana"], purge=True)
    assert f"; {hers} node(s) derived" in failed.value.hint  # hers only, not the untagged one
    monkeypatch.setattr(compaction, "compact", real)
    api.prune(store=store, ids=[2], within=["user:ana"], purge=True)
    with Store.open(store) as s:
        left = [s.body(r)["text"] for r in s.ids.tolist()]
    assert not any("Jacques" in t for t in left)
    assert any("rainy" in t for t in left)  # Bob's memory is untouched
