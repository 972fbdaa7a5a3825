"""Document engrams and links (engine/consolidate/doclinks.py): names matched in text, the nodes and edges
consolidation makes for a corpus, idempotence, and ecphory's hop along the links."""
from __future__ import annotations

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf
from synapse_cli.engine.consolidate import run as consolidate_mod
from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
from synapse_cli.engine.consolidate.doclinks import DocumentNames, base_name
from synapse_cli.engine.ingest import IngestConfig, ingest
from synapse_cli.engine.inputs import Item
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.maintenance.verify import verify
from synapse_cli.models.fake import FakeEmbedder

from fakes_extractor import FakeExtractor
from test_ecphory import DOCS, ask, build


def test_names_are_matched_as_normalised_words():
    names = DocumentNames(["Young, New South Wales", "Bethel University (Minnesota)", "Gallu",
                           "Frozen (2013 film)", "Frozen (band)", "ox", "iPhone", "Sulli",
                           "Her (film)", "1984 (novel)", "Yahoo!", "Washington, D.C.", "Paris"])
    assert base_name("Bethel University (Minnesota)") == "Bethel University"
    assert base_name("notes/Gallu.txt") == "Gallu" == base_name("Gallu.md")
    assert base_name("AC/DC") == "AC/DC" and base_name("Washington, D.C.") == "Washington, D.C."
    text = ('She was born in Young, New South Wales, and studied at "Bethel University\'s". The '
            "Gallu's cousin saw Frozen. Gallup polls; frozen peas; an ox; the iPhone. Her "
            "mother, in 1984, used Yahoo!, then moved to Washington, D.C., for a Paris-based job.")
    assert names.mentioned(text) == ["Young, New South Wales", "Bethel University (Minnesota)",
                                     "Gallu", "Frozen (2013 film)", "Frozen (band)", "Yahoo!",
                                     "Washington, D.C.", "Paris"]
    assert names.mentioned("Young, New\nSouth  Wales - Sulli") == ["Young, New South Wales",
                                                                    "Sulli"]
    assert names.mentioned("New South Wales") == [] and names.mentioned("Gallup") == []
    # "ox" (short), "iPhone" (lower case), "Her" and "1984" (a common word, a number): skipped
    assert DocumentNames().mentioned("Gallu") == [] and len(names) == 8


def _graph(store):
    with Store.open(store) as s:
        g = s.graph()
        src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64))).tolist()
        dst = g.node_ids[g.indices.astype(np.intp)].tolist()
        edges = {(a, b): (int(t), round(float(w), 4))
                 for a, b, t, w in zip(src, dst, g.types.tolist(), g.weights.tolist())}
        nodes, chunks = {}, {}
        for rid in s.ids.tolist():
            body = s.body(int(rid))
            if fl.memory_type(s.header(int(rid)).flags) == fl.MemoryType.SEMANTIC:
                nodes.setdefault(body["name"], []).append((int(rid), body.get("etype")))
            elif body.get("source"):
                chunks[body["source"]] = int(rid)
    return edges, nodes, chunks


def test_consolidation_links_each_chunk_to_its_document_and_to_the_ones_it_names(tmp_path):
    e = FakeEmbedder()
    store = build(tmp_path / "st", e, FakeExtractor())
    edges, nodes, chunks = _graph(store)
    for title in DOCS:  # one node per document, never a duplicate
        assert len(nodes[title]) == 1, (title, nodes[title])
        assert nodes[title][0][1] == "document"
        own = nodes[title][0][0]
        assert edges[(chunks[title], own)] == (gf.ABSTRACTION, 1.0)
        assert edges[(own, chunks[title])] == (gf.ABSTRACTION, 1.0)
    # "Lilu (mythology)" names Gallu; "Paris" names the Seine and the Seine names Paris.
    for a, b in (("Lilu (mythology)", "Gallu"), ("Paris", "Seine"), ("Seine", "Paris")):
        node = nodes[b][0][0]
        assert edges[(chunks[a], node)] == (gf.ABSTRACTION, 0.8)
        assert edges[(node, chunks[a])] == (gf.ABSTRACTION, 0.8)
    assert (chunks["Gallu"], nodes["Lilu (mythology)"][0][0]) not in edges  # Lilu != "Lilu (..."
    assert verify(store).ok
    # Idempotent: new documents get their node, the known ones keep theirs.
    with StoreWriter.open(store) as w:
        r = ingest(w, [Item(text="Kur\nKur is the underworld where the Gallu takes people.",
                            where="t", source="Kur")], e, IngestConfig())
        assert [o.status for o in r.outcomes] == ["stored"], r.outcomes
    with StoreWriter.open(store) as w:
        res = consolidate(w, FakeExtractor(), e, ConsolidateConfig())
    # "Kur" was already an entity node (the Gallu chunk names it): that node becomes the
    # document's rather than a second one being made (before issue 18 the entity had been
    # merged, by the cosine of an identical description, into "Gallu The Gallu").
    assert res.windows == 1 and res.document_nodes + res.nodes_merged >= 1
    edges, nodes2, chunks = _graph(store)
    assert edges[(chunks["Kur"], nodes2["Kur"][0][0])] == (gf.ABSTRACTION, 1.0)
    assert all(len(v) == 1 for k, v in nodes2.items() if k in DOCS or k == "Kur")
    assert edges[(chunks["Kur"], nodes2["Gallu"][0][0])] == (gf.ABSTRACTION, 0.8)
    assert verify(store).ok


def test_a_conversation_makes_no_document_nodes(tmp_path):
    e = FakeEmbedder()
    with StoreWriter.open(tmp_path / "c", create=True, embedder=e.name, dim=e.dim) as w:
        ingest(w, [Item(text=f"Gallu and Paris, turn {i}", where="t", session="s1",
                        speaker="Ann", timestamp_ms=1_700_000_000_000 + i) for i in range(6)],
               e, IngestConfig())
    with StoreWriter.open(tmp_path / "c") as w:
        res = consolidate(w, FakeExtractor(), e, ConsolidateConfig())
    assert res.document_nodes == 0 and res.document_links == 0 and res.windows == 2


def test_ecphory_follows_the_links_of_its_best_chunks(tmp_path):
    e = FakeEmbedder()
    store = build(tmp_path / "st", e, FakeExtractor())
    q = "Lilu or lilitu is a class of demon in Mesopotamian mythology"
    out = ask(store, q, e, explain=True, k=50)
    res = [r for r in out["results"] if r["type"] == "episodic"]
    assert res[0]["source"] == "Lilu (mythology)"
    linked = [r for r in res if r.get("hop") == "link"]
    assert [r["source"] for r in linked] == ["Gallu"]
    seed, node, chunk = linked[0]["path"]
    assert seed == res[0]["id"] and chunk == linked[0]["id"]
    sem = linked[0]["signals"]["semantic"]
    assert abs(linked[0]["score"] - (sem + 0.3 * res[0]["signals"]["semantic"])) < 1e-5
    # The gate and `confidence` see cosines, never the link-boosted score.
    assert out["confidence"] == max(r["signals"]["semantic"] for r in out["results"])
    # Without the hop (chunk_rank = cosine) the same chunk scores its own cosine only.
    plain = ask(store, q, e, explain=True, k=50, chunk_rank="cosine")
    gallu = [r for r in plain["results"] if r.get("source") == "Gallu"][0]
    assert gallu["score"] == gallu["signals"]["semantic"] < linked[0]["score"]
    off = ask(store, q, e, explain=True, k=50, link_seeds=0)
    assert not [r for r in off["results"] if r.get("hop") == "link"]


def _consolidate(path, e, **kw):
    with StoreWriter.open(path) as w:
        return consolidate(w, FakeExtractor(), e, ConsolidateConfig(**kw))


def _ingest(path, e, items, create=False):
    kw = dict(create=True, embedder=e.name, dim=e.dim) if create else {}
    with StoreWriter.open(path, **kw) as w:
        ingest(w, items, e, IngestConfig())


def test_a_long_document_keeps_every_link_past_the_top_k_rule(tmp_path):
    e = FakeEmbedder()
    store = tmp_path / "st"
    big = [Item(text=f"Bigdoc part {i}: facts number {i} about rivers.", where=f"b{i}",
                source="Bigdoc") for i in range(20)]
    small = [Item(text="Small\nThis short note cites Bigdoc once.", where="s", source="Small")]
    _ingest(store, e, big + small, create=True)
    res = _consolidate(store, e, max_in_edges=15)
    edges, nodes, _ = _graph(store)
    node = nodes["Bigdoc"][0][0]
    with Store.open(store) as s:
        chunk_of = {s.body(int(r))["text"]: int(r) for r in s.ids.tolist()}
    own = [chunk_of[it.text] for it in big]
    assert all(edges[(c, node)] == (gf.ABSTRACTION, 1.0) for c in own)  # 20 > K, all kept
    assert edges[(chunk_of[small[0].text], node)] == (gf.ABSTRACTION, 0.8)
    assert res.document_nodes == 2 and verify(store).ok


def test_a_run_stopped_between_windows_is_finished_without_duplicates(tmp_path, monkeypatch):
    e = FakeEmbedder()
    store = tmp_path / "st"
    from test_ecphory import doc_items
    _ingest(store, e, doc_items(), create=True)
    real, calls = consolidate_mod._process_window, []

    def two_then_die(*a, **k):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt("killed before the third window")
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(consolidate_mod, "_process_window", two_then_die)
        try:
            _consolidate(store, e)
        except KeyboardInterrupt:
            pass
    _, nodes, _ = _graph(store)
    first = {t for t in nodes if t in DOCS}
    assert 2 <= len(first) < len(DOCS)  # the two windows' own documents and what they name
    res = _consolidate(store, e)
    assert res.windows == len(DOCS) - 2 and res.document_nodes == len(DOCS) - len(first)
    edges, nodes, chunks = _graph(store)
    assert all(len(nodes[t]) == 1 for t in DOCS)
    assert edges[(chunks["Lilu (mythology)"], nodes["Gallu"][0][0])] == (gf.ABSTRACTION, 0.8)
    assert verify(store).ok


def test_a_document_takes_over_the_entity_node_of_its_name(tmp_path):
    e = FakeEmbedder()
    store = tmp_path / "st"
    _ingest(store, e, [Item(text="I read a book about Gallu yesterday.", where="t",
                            session="s1", timestamp_ms=1_700_000_000_000)], create=True)
    _consolidate(store, e)
    _, before, _ = _graph(store)
    gallu = before["Gallu"][0][0]
    assert before["Gallu"] == [(gallu, "concept")]
    from test_ecphory import doc_items
    _ingest(store, e, doc_items())
    res = _consolidate(store, e)
    edges, nodes, chunks = _graph(store)
    assert nodes["Gallu"] == [(gallu, "concept")] and res.document_nodes == len(DOCS) - 1
    with Store.open(store) as s:
        assert s.body(gallu)["document"] is True
    assert edges[(chunks["Gallu"], gallu)] == (gf.ABSTRACTION, 1.0)
    assert edges[(chunks["Lilu (mythology)"], gallu)] == (gf.ABSTRACTION, 0.8)
    out = ask(store, "Lilu or lilitu is a class of demon in Mesopotamian mythology", e,
              explain=True, k=50)
    assert [r["source"] for r in out["results"] if r.get("hop") == "link"] == ["Gallu"]
    assert verify(store).ok


def test_a_chunk_consolidated_before_the_document_it_names_is_linked_when_it_arrives(tmp_path):
    e = FakeEmbedder()
    store = tmp_path / "st"
    note = "Small\nThis short note cites the Bigdoc Annex twice: Bigdoc Annex."
    _ingest(store, e, [Item(text=note, where="s", source="Small"),
                       Item(text="Ann talked about the Bigdoc Annex today.", where="t",
                            session="s1", speaker="Ann", timestamp_ms=1_700_000_000_000),
                       Item(text="Annexes of big docs are not the Bigdoc annex.", where="u",
                            source="Other")], create=True)
    with StoreWriter.open(store) as w:  # no model entities: only document links can join them
        consolidate(w, FakeExtractor(max_entities=0), e, ConsolidateConfig())
    _, nodes, _ = _graph(store)
    assert "Bigdoc Annex" not in nodes  # not a document yet
    _ingest(store, e, [Item(text="Bigdoc Annex\nThe annex of the big document.", where="b",
                            source="Bigdoc Annex")])
    with StoreWriter.open(store) as w:
        res = consolidate(w, FakeExtractor(max_entities=0), e, ConsolidateConfig())
    edges, nodes, chunks = _graph(store)
    node = nodes["Bigdoc Annex"][0][0]
    with Store.open(store) as s:
        turn = [int(r) for r in s.ids.tolist() if s.body(int(r)).get("session") == "s1"][0]
    assert edges[(chunks["Small"], node)] == (gf.ABSTRACTION, 0.8)   # from the earlier run
    assert edges[(turn, node)] == (gf.ABSTRACTION, 0.8)              # a conversation turn too
    assert (chunks["Other"], node) not in edges                      # "annex" is not the name
    assert edges[(chunks["Bigdoc Annex"], node)] == (gf.ABSTRACTION, 1.0)
    assert res.document_nodes == 1 and verify(store).ok
