"""`synapse recall` end to end with the real embedder: gate, graph-only recall, explain, modes,
filters, reconsolidation and the NDJSON query stream."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synapse_cli.engine.store import Store, StoreWriter

SYNAPSE = str(Path(sys.executable).with_name("synapse"))
ROOT = Path(__file__).resolve().parents[1]


def run(store, *args, stdin: str = "", rc: int = 0):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run([SYNAPSE, "--store", str(store), *args], input=stdin.encode(),
                       capture_output=True, env=env, timeout=300)
    assert p.returncode == rc, p.stderr.decode()
    assert b"Traceback" not in p.stderr
    return [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    store = tmp_path_factory.mktemp("recall") / "st"
    run(store, "ingest", stdin=(ROOT / "fixtures" / "demo.ndjson").read_text())
    return store


def test_empty_store_says_no_record(tmp_path):
    store = tmp_path / "st"
    with StoreWriter.open(store, create=True) as w:
        w.commit()
    out = run(store, "recall", "anything at all")[0]
    assert out["rejected"] is True and out["results"] == [] and out["confidence"] == 0.0


def test_missing_store_is_an_error_not_a_rejection(tmp_path):
    run(tmp_path / "nowhere", "recall", "x", rc=66)


@pytest.mark.parametrize("query", ["quantum chromodynamics of neutron stars",
                                   "what is the capital of Peru", "how to bake sourdough bread"])
def test_unrelated_query_is_rejected(demo, query):
    out = run(demo, "recall", query, "--no-touch")[0]
    assert out["rejected"] is True and out["results"] == []


def test_related_query_answers_with_every_signal(demo):
    out = run(demo, "recall", "Where did Caroline go hiking?", "--no-touch", "--k", "3")[0]
    assert out["rejected"] is False and out["confidence"] > 0.05
    top = out["results"][0]
    assert "Dolomites" in top["text"]
    assert set(top["signals"]) == {"semantic", "bm25", "activation", "pagerank", "decay"}
    assert top["speaker"] == "Caroline" and top["session"] == "s1" and top["type"] == "episodic"
    scores = [r["score"] for r in out["results"]]
    assert scores == sorted(scores, reverse=True)


def test_activation_reaches_a_memory_through_the_graph_only(tmp_path):
    """The second turn shares no words with the query; only the temporal edge reaches it."""
    store = tmp_path / "st"
    turns = [{"text": "Kendall and I went on the ski trip to Whistler.", "session": "a",
              "speaker": "me"},
             {"text": "He broke up with Mark right afterwards.", "session": "a", "speaker": "me"},
             {"text": "The quarterly tax forms are due in April.", "session": "b", "speaker": "me"}]
    run(store, "ingest", stdin="\n".join(json.dumps(t) for t in turns))
    out = run(store, "recall", "ski trip in Whistler", "--no-touch", "--explain")[0]
    by_id = {r["id"]: r for r in out["results"]}
    assert 2 in by_id, out
    assert by_id[2]["signals"]["bm25"] == 0.0
    assert by_id[2]["signals"]["activation"] > 0.0
    assert by_id[2]["path"][-1] == 2 and by_id[2]["path"][0] == 1  # anchor -> node
    vector = run(store, "recall", "ski trip in Whistler", "--no-touch", "--mode", "vector")[0]
    assert all(r["signals"]["activation"] == 0.0 for r in vector["results"])


@pytest.mark.parametrize("mode", ["vector", "bm25", "hybrid", "synapse"])
def test_modes(demo, mode):
    out = run(demo, "recall", "Berlin marathon", "--mode", mode, "--no-touch", "--k", "2")[0]
    assert out["mode"] == mode and not out["rejected"]
    assert any("marathon" in r["text"] for r in out["results"])


@pytest.mark.parametrize("flag", ["--no-inhibition", "--no-fan", "--no-decay", "--no-gate",
                                  "--no-graph", "--no-activation"])
def test_ablation_switches_run(demo, flag):
    out = run(demo, "recall", "Berlin marathon", flag, "--no-touch", "--no-gate")[0]
    assert out["results"], flag


def test_filters(demo):
    out = run(demo, "recall", "what happened with Pixel", "--tag", "speaker:Melanie", "--no-touch")[0]
    assert out["results"] and all(r["speaker"] == "Melanie" for r in out["results"])
    out = run(demo, "recall", "marathon", "--since", "2026-09-01", "--no-touch")[0]
    assert out["results"] and all(r["timestamp"] >= 1788220800000 for r in out["results"])
    out = run(demo, "recall", "marathon", "--type", "semantic", "--no-touch")[0]
    assert out["rejected"] and out["results"] == []
    run(demo, "recall", "x", "--type", "nonsense", rc=2)
    run(demo, "recall", "x", "--since", "yesterday-ish", rc=2)
    run(demo, "recall", "x", "--mode", "magic", rc=2)


def test_reconsolidation_touch_and_no_touch(tmp_path):
    store = tmp_path / "st"
    run(store, "ingest", stdin=(ROOT / "fixtures" / "demo.ndjson").read_text())
    first = run(store, "recall", "Berlin marathon", "--k", "2")[0]
    assert first["touched"] is True
    ids = [r["id"] for r in first["results"]]
    with Store.open(store) as s:
        assert [s.header(i).recall_count for i in ids] == [1, 1]
        spikes = s.spike_entries()  # each touched record gets a recall spike (FORMAT.md 15)
        assert sorted(spikes["record_id"].tolist()) == sorted(ids)
    run(store, "recall", "Berlin marathon", "--k", "2", "--no-touch")
    with Store.open(store) as s:
        assert [s.header(i).recall_count for i in ids] == [1, 1]
        assert len(s.spike_entries()) == 2
    run(store, "inspect", "verify")


def test_queries_as_ndjson_on_stdin(demo):
    out = run(demo, "recall", "--no-touch", "--k", "1",
              stdin='{"query": "Berlin marathon"}\n{"query": "neutron star physics"}\n')
    assert [o["query"] for o in out] == ["Berlin marathon", "neutron star physics"]
    assert out[0]["rejected"] is False and out[1]["rejected"] is True
    run(demo, "recall", stdin='{"q": 1}\n', rc=65)
    run(demo, "recall", stdin="", rc=2)
