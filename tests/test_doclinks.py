"""Document engrams and links (engine/doclinks.py): names matched in text, the nodes and edges
consolidation makes for a corpus, idempotence, and ecphory's hop along the links."""
from __future__ import annotations

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf
from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
from synapse_cli.engine.doclinks import DocumentNames, base_name
from synapse_cli.engine.ingest import IngestConfig, ingest
from synapse_cli.engine.inputs import Item
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.verify import verify
from synapse_cli.models.fake import FakeEmbedder

from fakes_extractor import FakeExtractor
from test_ecphory import DOCS, ask, build


def test_names_are_matched_whole_case_sensitive_and_without_parenthesis():
    names = DocumentNames(["Young, New South Wales", "Bethel University (Minnesota)", "Gallu",
                           "Frozen (2013 film)", "Frozen (band)", "ox", "iPhone", "Sulli"])
    assert base_name("Bethel University (Minnesota)") == "Bethel University"
    text = ('She was born in Young, New South Wales, and studied at "Bethel University". '
            "The Gallu's cousin saw Frozen. Gallup polls; frozen peas; an ox; the iPhone.")
    assert names.mentioned(text) == ["Young, New South Wales", "Bethel University (Minnesota)",
                                     "Frozen (2013 film)", "Frozen (band)"]
    assert names.mentioned("Gallu, then Sulli.") == ["Gallu", "Sulli"]
    assert DocumentNames().mentioned("Gallu") == [] and len(names) == 5  # "ox", "iPhone" skipped


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
            else:
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
    assert res.document_nodes == 1 and res.windows == 1
    edges, nodes2, chunks = _graph(store)
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
    # Without the hop (chunk_rank = cosine) the same chunk scores its own cosine only.
    plain = ask(store, q, e, explain=True, k=50, chunk_rank="cosine")
    gallu = [r for r in plain["results"] if r.get("source") == "Gallu"][0]
    assert gallu["score"] == gallu["signals"]["semantic"] < linked[0]["score"]
    off = ask(store, q, e, explain=True, k=50, link_seeds=0)
    assert not [r for r in off["results"] if r.get("hop") == "link"]
