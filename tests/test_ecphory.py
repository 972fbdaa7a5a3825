"""`recall --mode ecphory` (seed 002): cue extraction (rules and the real local model), the
centroid spreading of Algorithm 1 against a literal reference, chunk grounding through the
provenance edges, the fallback on stores without engrams, and the CLI end to end with the real
embedder and the real extraction model."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from store_format import flags as fl
from store_format import graph_files as gf
from synapse_cli.engine import graphview
from synapse_cli.engine.recall import ecphory
from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
from synapse_cli.engine.ingest import IngestConfig, ingest
from synapse_cli.engine.inputs import parse_document
from synapse_cli.engine.recall import RecallConfig, recall
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.models import cues as cues_mod
from synapse_cli.models.fake import FakeEmbedder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakes_extractor import FakeExtractor  # noqa: E402

SYNAPSE = str(Path(sys.executable).with_name("synapse"))

DOCS = {
    "Lilu (mythology)": "Lilu or lilitu is a class of demon in Mesopotamian mythology. "
                        "The Gallu and the Lilu are both demons of the underworld.",
    "Alu (demon)": "The Alu is a demon of Mesopotamian mythology that haunts Babylon at night.",
    "Gallu": "The Gallu is a demon of the underworld who drags people to Kur.",
    "Paris": "Paris is the capital of France, on the Seine. The Louvre is in Paris.",
    "Seine": "The Seine flows through Paris to the English Channel at Le Havre.",
}


def doc_items(docs=DOCS):
    items = []
    for title, text in docs.items():
        items += list(parse_document(f"{title}\n{text}".encode(), title))
    return items


def build(path, embedder, extractor=None, docs=DOCS):
    with StoreWriter.open(path, create=True, embedder=embedder.name, dim=embedder.dim) as w:
        ingest(w, doc_items(docs), embedder, IngestConfig())
    if extractor is not None:
        with StoreWriter.open(path) as w:
            consolidate(w, extractor, embedder, ConsolidateConfig())
    return path


def ask(path, query, embedder, **cfg):
    with Store.open(path) as s:
        arrays = graphview.build(s)
        c = RecallConfig(mode="ecphory", **cfg)
        return recall(s, query, embedder.encode([query])[0], c, arrays, embed=embedder.encode)


# --- cues ----------------------------------------------------------------------------------------

def test_rule_cues_are_verbatim_names_with_lists_split():
    q = "Are Christopher Nolan and Sathish Kalathil both film directors?"
    c = cues_mod.rule_cues(q)
    assert c[:2] == ["Christopher Nolan", "Sathish Kalathil"]
    assert all(x in q for x in c)
    assert cues_mod.rule_cues("If Gallu is a demon Lilu is what?") == ["Gallu", "Lilu", "demon"]
    assert cues_mod.rule_cues("what is it?") == []
    # a name list joined by "and" is kept whole when a side is not capitalised
    assert cues_mod._split_lists("Simon and garfunkel") == ["Simon and garfunkel"]


def test_cue_text_falls_back_to_the_query():
    assert cues_mod.cue_text(["Gallu", "Lilu"], "q") == "Gallu, Lilu"
    assert cues_mod.cue_text([], "the query") == "the query"


def test_query_spans_and_grammar():
    q = "Who directed the film shot in Leland, North Carolina in 1986?"
    spans = cues_mod.query_spans(q)
    assert "North Carolina" in spans and "Leland" in spans and "1986" in spans
    for s in spans:
        words = s.split()
        assert len(words) <= cues_mod.MAX_SPAN_WORDS and s in q.replace(",", "")
        assert not cues_mod._is_filler(words[0]) and not cues_mod._is_filler(words[-1])
    g = cues_mod.cue_grammar(spans)
    assert g.startswith("root ::= cue") and g.count('(", " cue') == cues_mod.MAX_CUES - 1
    assert all(json.dumps(s) in g for s in spans)


def test_unavailable_model_falls_back_to_rules(tmp_path):
    q = "If Gallu is a demon Lilu is what?"
    c, used, note = cues_mod.extract_cues(q, "model", model_path=tmp_path / "none.gguf")
    assert (c, used) == (cues_mod.rule_cues(q), "rules") and "unavailable" in note
    with pytest.raises(ValueError):
        cues_mod.extract_cues(q, "bogus")


def test_model_cues_with_the_real_local_model():
    """The packaged SmolLM2 through llama.cpp: cues are spans of the query, deterministic."""
    q = "Who directed the film that was shot in or around Leland, North Carolina in 1986"
    c1, used, note = cues_mod.extract_cues(q, "model")
    assert used == "model" and note is None and c1
    assert set(c1) <= set(cues_mod.query_spans(q))
    assert cues_mod.extract_cues(q, "model")[0] == c1
    assert cues_mod.model_cues().last_usage.get("completion_tokens", 0) >= 1


# --- Algorithm 1 -----------------------------------------------------------------------------------

def reference_spread(vecs, live, cue, k_init, hops, expansion, n_seeds, rank=None):
    """Algorithm 1 lines 3-16 written out literally with Python lists (seeds and weights by
    `rank`, the query in the seed's eq. 2, else by the cue)."""
    m = len(vecs)
    rank = cue if rank is None else rank
    sim = [float(vecs[i] @ rank) if live[i] else -np.inf for i in range(m)]

    def search(q, k):
        cand = [i for i in range(m) if live[i]]
        cand.sort(key=lambda i: (-float(vecs[i] @ q), i))
        return cand[:k]

    s_all = search(cue, k_init)
    hop = {i: 0 for i in s_all}
    for t in range(1, hops + 1):
        seeds = sorted(s_all, key=lambda i: (-sim[i], i))[:n_seeds]
        w = np.exp([sim[i] for i in seeds])
        w = w / w.sum()
        c = sum(wi * vecs[i] for wi, i in zip(w, seeds))
        for i in search(c, expansion * k_init):
            if i not in hop:
                s_all.append(i)
                hop[i] = t
    return s_all, hop


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_centroid_spread_matches_the_literal_algorithm(seed):
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((300, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    live = rng.random(300) > 0.2
    cue = vecs[5] + 0.3 * rng.standard_normal(16).astype(np.float32)
    cue /= np.linalg.norm(cue)
    sims, s_all, hops, trace = ecphory.centroid_spread(vecs, live, cue, 4, 2, 3, 10)
    ref_all, ref_hop = reference_spread(vecs, live, cue, 4, 2, 3, 10)
    assert s_all == ref_all
    assert hops == [ref_hop[i] for i in ref_all]
    assert len(s_all) == len(set(s_all)) and all(live[i] for i in s_all)
    assert len(trace) == 2 and all(abs(sum(h["weights"]) - 1) < 1e-9 for h in trace)
    assert np.isneginf(sims[~live]).all()
    # seeds, weights and re-ranking by another vector (the query): S_0 still by the cue
    query = vecs[77] + vecs[5]
    query /= np.linalg.norm(query)
    qsims, q_all, q_hops, _ = ecphory.centroid_spread(vecs, live, cue, 4, 2, 3, 10, query)
    ref_q, ref_qhop = reference_spread(vecs, live, cue, 4, 2, 3, 10, query)
    assert q_all == ref_q and q_hops == [ref_qhop[i] for i in ref_q]
    assert q_all[:4] == ref_all[:4] and np.allclose(qsims[live], (vecs @ query)[live])
    # D = 0 is the plain cue search
    _, only, h0, t0 = ecphory.centroid_spread(vecs, live, cue, 4, 0, 3, 10)
    assert only == ref_all[:4] and h0 == [0] * 4 and t0 == []


def test_rank_chunks_orders():
    sim = np.array([0.1, 0.9, 0.5, 0.3], np.float32)
    via = {0: 0, 2: 1}       # chunk 0 from the best engram, chunk 2 from the second
    direct = [1, 2]          # direct search: chunk 1, then chunk 2
    assert ecphory.rank_chunks(via, direct, sim, "engram", 60) == [0, 2, 1]
    assert ecphory.rank_chunks(via, direct, sim, "cosine", 60) == [1, 2, 0]
    assert ecphory.rank_chunks(via, direct, sim, "rrf", 60) == [2, 0, 1]  # 2 found both ways


# --- the mode on stores ----------------------------------------------------------------------------

@pytest.mark.parametrize("rerank_by", ["cue", "query"])
def test_chunks_come_from_provenance_edges_and_direct_search(tmp_path, rerank_by):
    e = FakeEmbedder()
    store = build(tmp_path / "st", e, FakeExtractor())
    out = ask(store, "If Gallu is a demon Lilu is what?", e, explain=True, k=50, k_final=3,
              direct_chunks=2, rerank_by=rerank_by)
    assert out["mode"] == "ecphory" and not out["rejected"] and "fallback" not in out
    assert out["cues"] == ["Gallu", "Lilu", "demon"] and out["cue_extractor"] == "rules"
    res = out["results"]
    chunks = [r for r in res if r["type"] == "episodic"]
    engrams = [r for r in res if r["type"] == "semantic"]
    assert len(engrams) == 3 and [r["score"] for r in engrams] == sorted(
        [r["score"] for r in engrams], reverse=True)
    assert res.index(chunks[-1]) < res.index(engrams[0])  # chunks first, then engrams
    with Store.open(store) as s:
        g = s.graph()
        src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
        dst = g.node_ids[g.indices.astype(np.intp)]
        prov = set(zip(src[g.types == gf.ABSTRACTION].tolist(),
                       dst[g.types == gf.ABSTRACTION].tolist()))
    engram_ids = {r["id"] for r in engrams}
    direct = 0
    for r in chunks:
        assert r["source"] in DOCS
        if len(r["path"]) == 2:  # [engram, chunk]: a provenance edge of a final engram
            assert r["path"][0] in engram_ids and tuple(r["path"]) in prov
        else:
            direct += 1
    assert direct <= 2
    titles = [r["source"] for r in chunks]
    assert titles[0] in ("Lilu (mythology)", "Gallu") and "Gallu" in titles[:3]
    assert [h["hop"] for h in out["hops"]] == [1, 2]
    assert all(len(h["seeds"]) == len(h["weights"]) for h in out["hops"])


def test_store_without_engrams_falls_back_to_direct_chunk_search(tmp_path):
    e = FakeEmbedder()
    store = build(tmp_path / "st", e)  # ingested, never consolidated
    out = ask(store, "the Seine flows through Paris", e, k=3)
    assert out["fallback"] == ecphory.FALLBACK_NOTE and not out["rejected"]
    assert [r["source"] for r in out["results"]][:2] == ["Seine", "Paris"]
    q = "the Seine flows through Paris"
    by_cue = ask(store, q, e, k=3, rerank_by="cue")
    assert by_cue["cues"] == ["Seine", "Paris"] and "fallback" in by_cue
    with Store.open(store) as s:  # the fallback is vector search, with the query or the cue
        for out_, vec in ((out, e.encode([q])[0]), (by_cue, e.encode(["Seine, Paris"])[0])):
            v = recall(s, q, vec, RecallConfig(mode="vector", k=3))
            assert [r["id"] for r in out_["results"]] == [r["id"] for r in v["results"]]
    # filters that leave no engram fall back too
    store2 = build(tmp_path / "st2", e, FakeExtractor())
    out = ask(store2, "the Seine flows through Paris", e, types=("episodic",))
    assert out["fallback"] == ecphory.FILTERED_NOTE  # not "run consolidate": it was run
    assert all(r["type"] == "episodic" for r in out["results"])


def test_unrelated_query_and_empty_store(tmp_path):
    e = FakeEmbedder()
    empty = tmp_path / "empty"
    with StoreWriter.open(empty, create=True, embedder=e.name, dim=e.dim) as w:
        w.commit()
    out = ask(empty, "anything", e)
    assert out["rejected"] and out["results"] == [] and out["confidence"] == 0.0
    store = build(tmp_path / "st", e, FakeExtractor())
    out = ask(store, "quantum chromodynamics of neutron stars", e)
    assert out["rejected"] and out["results"] == []
    assert not ask(store, "quantum chromodynamics of neutron stars", e, gate=False)["rejected"]


def test_settings_reach_the_mode(tmp_path):
    from synapse_cli.engine import config

    s = config.resolve({"recall.mode": "ecphory"}, path=tmp_path / "none.toml",
                       environ={"SYNAPSE_K_FINAL": "2", "SYNAPSE_HOPS": "1",
                                "SYNAPSE_CUES": "model"})
    cfg = RecallConfig(**s.kwargs("recall"))
    assert (cfg.mode, cfg.k_final, cfg.hops, cfg.cues) == ("ecphory", 2, 1, "model")
    e = FakeEmbedder()
    store = build(tmp_path / "st", e, FakeExtractor())
    out = ask(store, "If Gallu is a demon Lilu is what?", e, k_final=2, hops=1, explain=True)
    assert sum(r["type"] == "semantic" for r in out["results"]) == 2
    assert [h["hop"] for h in out["hops"]] == [1]


# --- end to end: real embedder, real extraction model, the CLI ---------------------------------------

def run(store, *args, rc=0, stdin=b""):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run([SYNAPSE, "--store", str(store), *args], input=stdin,
                       capture_output=True, env=env, timeout=600)
    assert p.returncode == rc, p.stderr.decode()
    assert b"Traceback" not in p.stderr
    return p


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("ecphory") / "st"
    docs = tmp_path_factory.mktemp("docs")
    for title, text in DOCS.items():
        (docs / f"{title}.txt").write_text(f"{title}\n{text}")
        run(store, "ingest", "--format", "doc", str(docs / f"{title}.txt"))
    run(store, "consolidate")  # the packaged SmolLM2 through llama.cpp
    return store


def test_cli_ecphory_with_real_models(real_store):
    out = json.loads(run(real_store, "recall", "If Gallu is a demon Lilu is what?", "--mode",
                         "ecphory", "--explain", "--no-touch", "--k", "8").stdout)
    assert out["mode"] == "ecphory" and not out["rejected"] and "fallback" not in out
    assert out["cues"] and out["cue_extractor"] == "rules"
    res = out["results"]
    assert {"semantic", "episodic"} == {r["type"] for r in res}
    chunk = next(r for r in res if r["type"] == "episodic")
    assert chunk["source"].endswith(".txt") and "path" in chunk and "hop" in chunk
    assert set(chunk["signals"]) == {"semantic", "bm25", "activation", "pagerank", "decay"}
    assert out["hops"] and all(h["seeds"] for h in out["hops"])
    sources = [Path(r["source"]).name for r in res if r["type"] == "episodic"]
    assert set(sources[:2]) == {"Lilu (mythology).txt", "Gallu.txt"}
    model = json.loads(run(real_store, "recall", "If Gallu is a demon Lilu is what?", "--mode",
                           "ecphory", "--cues", "model", "--no-touch").stdout)
    assert model["cue_extractor"] == "model" and model["results"]
    assert set(model["cues"]) <= set(cues_mod.query_spans("If Gallu is a demon Lilu is what?"))


def test_cli_bad_cues_value_is_a_usage_error(real_store):
    p = run(real_store, "recall", "x", "--mode", "ecphory", "--cues", "magic", rc=2)
    assert len(p.stderr.decode().strip().splitlines()) <= 2
