"""What a semantic node is (issue 18): candidates from the part-of-speech tagger, names that
start a sentence, relations a possessive role states, one node per name linked to the episodes
that name it and described by all of them; and how recall's view weighs its edges."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from store_format import flags as fl
from store_format import graph_files as gf
from synapse_cli.engine import graphview
from synapse_cli.engine.consolidate.run import (ConsolidateConfig, consolidate, describe_node,
                                            mentions, name_key)
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.models import postag
from synapse_cli.models.candidates import _tagged_nouns, candidate_spans
from synapse_cli.models.extractor import role_relations, speaker_entities, window_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakes_extractor import FakeExtractor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "fixtures" / "demo.ndjson"


# --- candidates -----------------------------------------------------------------------------

def test_tagger_is_offline_and_tags():
    tags = dict(postag.tag("I love pottery and video games."))
    assert tags["pottery"] == "NN" and tags["games"] == "NNS"
    assert postag.common_word("Adding") and postag.common_word("Lately")
    assert not postag.common_word("Maya") and not postag.common_word("Dolomites")


def test_tagged_nouns_find_bare_nouns_verbatim():
    body = "I love pottery and video games, and my kids are into almond milk lately."
    got = _tagged_nouns(body)
    assert "pottery" in got and "video games" in got and "almond milk" in got
    assert "kids" not in got  # generic
    assert all(g in body for g in got)


def test_sentence_initial_names():
    text = window_text(["Caroline: Maya finished the Berlin marathon.",
                        "Melanie: Adding NYC to my list. Yep, lately I run."])
    c = candidate_spans(text, limit=30)
    assert "Maya" in c
    assert not {"Adding", "Yep", "Lately"} & set(c)
    assert "Maya" not in candidate_spans(text, limit=30, pos=False)  # the x4 rule


def test_tagged_set_names_only_tagger_spans():
    tagged: set = set()
    c = candidate_spans(window_text(["A: I bought a hoodie. I love pottery."]), limit=30,
                        tagged=tagged)
    assert "pottery" in c and "pottery" in tagged and "hoodie" not in tagged


# --- relations ------------------------------------------------------------------------------

@pytest.mark.parametrize("turn,rel", [
    ("Caroline: Caroline said she spent last summer hiking with her sister Maya.",
     ("Maya", "sister of", "Caroline")),
    ("Melanie: My dog Pixel chewed my shoes.", ("Pixel", "dog of", "Melanie")),
    ("Melanie: Caroline's brother Tom came by.", ("Tom", "brother of", "Caroline")),
])
def test_role_relations(turn, rel):
    out = role_relations([turn], speaker_entities([turn], {"entities": [], "relations": []}))
    assert rel in {(r["src"], r["rel"], r["dst"]) for r in out["relations"]}
    ent = {e["name"]: e for e in out["entities"]}
    assert ent[rel[0]]["type"] == "person" and rel[0] in turn


def test_role_relations_need_an_owner():
    turn = "Melanie: She went with her sister Maya."  # "her": no name before it
    out = role_relations([turn], {"entities": [], "relations": []})
    assert out["relations"] == []


# --- node identity and description ----------------------------------------------------------

def test_name_key_and_mentions():
    assert name_key("the Dolomites") == name_key("Dolomites") == "dolomite"
    assert name_key("books") == name_key("book")
    assert mentions("Maya", "Caroline: I hiked with her sister Maya.")
    assert mentions("Maya", "Caroline: Maya's race went well.")
    assert mentions("Caroline", "Caroline: I went running.")  # the speaker
    assert not mentions("Maya", "Caroline: Mayan ruins are old.")


def test_describe_node_from_relations_and_facts():
    body = {"name": "Maya", "etype": "person", "desc": "x",
            "relations": [["Caroline", "sister of", 1.0], ["Berlin", "talks about", 0.8]],
            "facts": ["Maya is training for the Berlin marathon", "Maya finished in 3:52"]}
    d = describe_node(body)
    assert d.startswith("sister of Caroline; Maya is training") and "talks about" not in d
    assert describe_node({"name": "Caroline", "etype": "person", "desc": "a speaker",
                          "relations": [], "facts": []}) == "a speaker"


# --- the demo store (fake extractor: exact; real model below) --------------------------------

@pytest.fixture(scope="module")
def embedder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from synapse_cli.models.embedder import get_embedder

    return get_embedder()


def _demo_store(path: Path, embedder, extractor):
    from synapse_cli.engine.ingest import IngestConfig, ingest
    from synapse_cli.engine.inputs import parse_ndjson

    with StoreWriter.open(path, create=True, embedder=embedder.name, dim=embedder.dim) as w:
        ingest(w, list(parse_ndjson(DEMO.read_bytes().splitlines(), "demo")), embedder,
               IngestConfig())
    with StoreWriter.open(path) as w:
        return consolidate(w, extractor, embedder, ConsolidateConfig())


def _nodes(path: Path) -> dict[str, tuple[int, dict]]:
    with Store.open(path) as s:
        return {s.body(int(r))["name"]: (int(r), s.body(int(r))) for r in s.ids
                if fl.memory_type(s.header(int(r)).flags) == fl.MemoryType.SEMANTIC}


def _maya_lines(path: Path) -> set[int]:
    with Store.open(path) as s:
        return {int(r) for r in s.ids if "Maya" in s.body(int(r))["text"]
                and fl.memory_type(s.header(int(r)).flags) == fl.MemoryType.EPISODIC}


def _check_maya(path: Path):
    nodes = _nodes(path)
    assert [n for n in nodes if n.casefold() == "maya"] == ["Maya"]
    rid, body = nodes["Maya"]
    lines = _maya_lines(path)
    assert len(lines) == 3
    assert body["etype"] == "person"
    assert set(body["sources"]) == lines
    assert "sister of Caroline" in body["desc"]
    assert len(body["facts"]) == 3 and "marathon" in body["desc"]
    assert body["text"] == f"Maya [TYPE] person [DESC] {body['desc']}"
    with Store.open(path) as s:
        g = s.graph()
        src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
        dst = g.node_ids[g.indices.astype(np.intp)]
        typ = np.asarray(g.types)
        live = np.asarray(g.weights) > 0
    linked = set(dst[(src == rid) & (typ == gf.ABSTRACTION) & live].tolist())
    assert linked == lines  # the three lines that name her, not every line of their windows


def test_demo_maya_node_fake_extractor(tmp_path, embedder):
    path = tmp_path / "st"
    _demo_store(path, embedder, FakeExtractor())
    _check_maya(path)
    with StoreWriter.open(path) as w:  # idempotent: nothing left, nothing changes
        again = consolidate(w, FakeExtractor(), embedder, ConsolidateConfig())
    assert again.windows == 0
    _check_maya(path)


def test_a_new_node_is_stamped_with_the_newest_episode_that_names_it(tmp_path, embedder):
    """Not with the newest episode of its window: "Lago di Braies", named only by the 2nd
    line (18:06) of a window that ends at 18:10, was stamped 18:10, so `--until 18:08` hid
    a node whose every link is inside the window (a hostile pass)."""
    from synapse_cli import api

    path = tmp_path / "st"
    _demo_store(path, embedder, FakeExtractor())
    rid, body = _nodes(path)["Lago di Braies"]
    with Store.open(path) as s:
        stamp = {int(r): int(s.header(int(r)).timestamp_ms) for r in s.ids}
        g = s.graph()
        at = list(map(int, g.node_ids)).index(rid)
        linked = [int(g.node_ids[j]) for j in g.indices[g.indptr[at]:g.indptr[at + 1]]]
    assert stamp[rid] == max(stamp[int(r)] for r in body["sources"])
    session = max(t for r, t in stamp.items() if r <= 5)  # the window: the first 5 lines
    until = max(stamp[r] for r in linked)  # every record it links (a related node too)
    assert until < session
    out = api.recall("Lago di Braies", store=path, mode="vector", types=["semantic"],
                     gate=False, touch=False, until_ms=until, embedder=embedder)
    assert rid in [r["id"] for r in out["results"]]


def _sister_question_routes(path: Path) -> list[list[int]]:
    """`recall --explain`'s routes through semantic nodes to the line with the result."""
    from synapse_cli import api

    out = api.recall("How did Caroline's sister do in the marathon?", store=path, explain=True,
                     touch=False)
    assert not out["rejected"]
    (finish,) = [r for r in out["results"] if r["text"].startswith("Maya finished")]
    return finish["via"]


def test_demo_maya_node_real_model(tmp_path, embedder):
    from synapse_cli.models.extractor import LlamaExtractor

    path = tmp_path / "st"
    _demo_store(path, embedder, LlamaExtractor(embedder=embedder))
    _check_maya(path)
    maya = _nodes(path)["Maya"][0]
    # the question does not name her: the graph ties her node to the answer
    assert any(route[-2] == maya for route in _sister_question_routes(path))
    nodes = _nodes(path)
    assert nodes["Dolomites"][1]["etype"] == "place"
    for name, (_, body) in nodes.items():
        text = "\n".join(json.loads(line)["text"] for line in DEMO.read_text().splitlines())
        assert name in text or name in {"Caroline", "Melanie"}  # no invented names


# --- recall's view of the graph -------------------------------------------------------------

def _graph():
    """Positions 0-3 episodes (a temporal chain), 4 a node named by 0 and 3, 5 a node named by
    every episode."""
    edges = [(0, 1, 0), (1, 0, 0), (1, 2, 0), (2, 1, 0), (2, 3, 0), (3, 2, 0)]
    for ep in (0, 3):
        edges += [(ep, 4, 1), (4, ep, 1)]
    for ep in range(4):
        edges += [(ep, 5, 1), (5, ep, 1)]
    edges.sort()
    src = np.array([e[0] for e in edges])
    indptr = np.zeros(7, np.int64)
    np.cumsum(np.bincount(src, minlength=6), out=indptr[1:])
    indices = np.array([e[1] for e in edges], np.int32)
    types = np.array([e[2] for e in edges], np.uint8)
    weights = np.where(types == gf.TEMPORAL, 1.0, 0.8).astype(np.float32)
    flags = np.array([fl.with_memory_type(0, fl.MemoryType.EPISODIC)] * 4
                     + [fl.with_memory_type(0, fl.MemoryType.SEMANTIC)] * 2, np.uint8)
    return indptr, indices, weights, types, flags


def _w(indptr, indices, weights, a, b):
    lo, hi = indptr[a], indptr[a + 1]
    return float(weights[lo:hi][indices[lo:hi] == b][0])


def test_semantic_idf_weakens_common_nodes():
    indptr, indices, weights, types, flags = _graph()
    w = graphview.semantic_idf(indptr, indices, weights, types, flags, np.ones(6, bool))
    assert _w(indptr, indices, w, 0, 4) == pytest.approx(0.8 * np.log(4 / 2) / np.log(4))
    assert _w(indptr, indices, w, 4, 3) == pytest.approx(0.8 * np.log(4 / 2) / np.log(4))
    assert _w(indptr, indices, w, 0, 5) == 0.0  # named by every episode: no bridge
    assert _w(indptr, indices, w, 0, 1) == 1.0  # temporal edges untouched


def test_keep_temporal_fan():
    indptr, indices, weights, types, flags = _graph()
    w = graphview.keep_temporal_fan(indptr, weights, types, flags)
    # episode 0: 1 temporal edge of 3 -> x3, so 1/fan is what it was before consolidation
    assert _w(indptr, indices, w, 0, 1) == pytest.approx(3.0)
    assert _w(indptr, indices, w, 1, 2) == pytest.approx(1.5)  # 2 temporal of 3
    assert _w(indptr, indices, w, 0, 4) == pytest.approx(0.8)
    assert _w(indptr, indices, w, 4, 0) == pytest.approx(0.8)  # nodes unchanged
