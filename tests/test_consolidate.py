"""`synapse consolidate`: windows, nodes, edges, flags, cache, crash safety, lock, budget,
silence; with a fake extractor (fast, exact) and with the real SmolLM2 model."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from store_format import flags as fl
from store_format.crc32c import crc32c
from store_format import graph_files as gf
from synapse_cli.engine.consolidate.run import ConsolidateConfig, consolidate, plan_windows
from synapse_cli.engine.consolidate.extract_cache import CACHE_NAME, ExtractCache
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.maintenance.verify import verify
from synapse_cli.models.extractor import candidate_spans, clean_result

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakes_extractor import FakeExtractor  # noqa: E402

SYNAPSE = str(Path(sys.executable).with_name("synapse"))
ROOT = Path(__file__).resolve().parents[1]
NAMES = ["Caroline", "Melanie", "Maya", "Berlin", "Dolomites", "Pixel", "Blue Bottle", "Oslo"]


def run(store, *args, stdin: bytes = b"", check_rc: int | None = 0, env=None, timeout=600):
    env = dict(os.environ, HF_HUB_OFFLINE="1") if env is None else env
    p = subprocess.run([SYNAPSE, "--store", str(store), *args], input=stdin,
                       capture_output=True, env=env, timeout=timeout)
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stderr.decode())
    return p


def synthetic(n: int, sessions: int = 4, seed: int = 0) -> bytes:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rnd.sample(NAMES, 2)
        rows.append({"text": f"{a} talked with {b} about trip number {i} and the weather.",
                     "speaker": rnd.choice(["Caroline", "Melanie"]),
                     "session": f"s{i % sessions}", "timestamp": 1_700_000_000_000 + i * 60_000})
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@pytest.fixture(scope="module")
def embedder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from synapse_cli.models.embedder import get_embedder

    return get_embedder()


def ingest_bytes(store, data: bytes):
    run(store, "ingest", stdin=data)


def semantic_names(store, tagged: bool = False) -> list:
    """The semantic nodes' names (with `tagged`: (casefolded name, tags) pairs)."""
    with Store.open(store) as s:
        out = []
        for rid in s.ids:
            h = s.header(int(rid))
            if fl.memory_type(h.flags) == fl.MemoryType.SEMANTIC:
                b = s.body(int(rid))
                out.append((b["name"].casefold(), tuple(b.get("tags", ()))) if tagged
                           else b["name"])
        return out


def live_edges(store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with Store.open(store) as s:
        g = s.graph()
        src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
        return src, g.node_ids[g.indices.astype(np.intp)], np.asarray(g.types)


def run_fake(store, embedder, extractor=None, **cfg):
    with StoreWriter.open(store) as w:
        return consolidate(w, extractor or FakeExtractor(), embedder, ConsolidateConfig(**cfg))


# --- candidate spans and result cleaning ---------------------------------------------------------

def test_candidate_spans_occur_verbatim():
    text = ("Caroline: Caroline hiked near Lago di Braies with Maya.\nMelanie: They met at "
            "Blue Bottle on Friday at 10am and adopted a rescue dog named Pixel.")
    c = candidate_spans(text, limit=20)
    assert {"Lago di Braies", "Maya", "Blue Bottle", "10am", "Pixel", "rescue dog"} <= set(c)
    assert "Caroline" not in c and "Melanie" not in c  # speakers: linked by the engine
    assert "Friday" not in c  # a weekday is relative ("on Friday"): not a node
    assert "They" not in c and all(x in text for x in c)
    assert not any("\n" in x or ":" in x for x in c)


def test_clean_result_drops_invented_and_duplicate_names():
    texts = ["Caroline: I met Maya in Berlin."]
    raw = {"entities": [["Caroline", "place"], ["Bob", "person"], ["Maya", "person"],
                        ["maya", "object"], ["Berlin", "bogus"]],
           "relations": [["Maya", "met in", "Berlin", 7], ["Maya", "x", "Bob", 0.5],
                         ["Maya", "self", "Maya", 0.5]]}
    r = clean_result(raw, texts, candidate_spans(texts[0]))
    # "Caroline" is the speaker, not a candidate: dropped like the invented "Bob".
    assert [e["name"] for e in r["entities"]] == ["Maya", "Berlin"]
    assert r["entities"][1]["type"] == "concept"      # unknown type
    assert r["relations"] == [{"src": "Maya", "dst": "Berlin", "rel": "met in", "weight": 1.0}]
    assert r["entities"][0]["description"] == "I met Maya in Berlin"


def test_speakers_become_person_nodes_related_to_what_they_mention(tmp_path, embedder):
    store = tmp_path / "st"
    ingest_bytes(store, (ROOT / "fixtures" / "demo.ndjson").read_bytes())
    res = run_fake(store, embedder)
    with Store.open(store) as s:
        bodies = {s.body(int(r))["name"]: s.body(int(r)) for r in s.ids
                  if fl.memory_type(s.header(int(r)).flags) == fl.MemoryType.SEMANTIC}
    assert bodies["Caroline"]["etype"] == bodies["Melanie"]["etype"] == "person"
    assert any(rel[1] == "talks about" for rel in bodies["Caroline"]["relations"])
    first = res.extractions[0][1]
    assert {"Caroline", "Melanie"} <= {e["name"] for e in first["entities"]}


# --- the engine with the fake extractor ----------------------------------------------------------

def test_windows_nodes_edges_flags(tmp_path, embedder):
    store = tmp_path / "st"
    ingest_bytes(store, (ROOT / "fixtures" / "demo.ndjson").read_bytes())
    with Store.open(store) as s:
        wins = plan_windows(s, 5)
    # sessions s1, s2, s3, oldest first, each tag set apart (s1's line 5 has the tag "plan",
    # s3's line 11 "travel": FORMAT.md 13.3)
    assert [len(w.ids) for w in wins] == [4, 1, 3, 1, 3]
    res = run_fake(store, embedder)
    assert (res.windows, res.episodes, res.left_windows) == (5, 12, 0)
    names = semantic_names(store)
    assert len(names) == len(set(semantic_names(store, tagged=True))) == res.nodes_created
    assert res.nodes_merged > 0  # Caroline / Melanie recur across windows
    with Store.open(store) as s:
        for rid in s.ids:
            h = s.header(int(rid))
            if fl.memory_type(h.flags) == fl.MemoryType.EPISODIC:
                assert fl.is_consolidated(h.flags)
            else:
                body = s.body(int(rid))
                assert body["text"].startswith(f"{body['name']} [TYPE] {body['etype']} [DESC] ")
    src, dst, typ = live_edges(store)
    keys = set(zip(src.tolist(), dst.tolist(), typ.tolist()))
    ab = [(a, b) for a, b, t in keys if t == gf.ABSTRACTION]
    assert ab and all((b, a, gf.ABSTRACTION) in keys for a, b in ab)  # both directions
    assert any(t == gf.RELATION for _, _, t in keys)
    assert verify(store).ok
    again = run_fake(store, embedder)
    assert again.windows == 0 and semantic_names(store) == names


def test_low_replay_score_marks_prune_candidates(tmp_path, embedder):
    store = tmp_path / "st"
    ingest_bytes(store, synthetic(10, sessions=1))
    res = run_fake(store, embedder, prune_threshold=10.0)  # everything is below
    assert res.prune_candidates == 10 and res.nodes_created == 0
    with Store.open(store) as s:
        for rid in s.ids:
            assert s.body(int(rid))["prune_candidate"] is True
            assert fl.is_consolidated(s.header(int(rid)).flags)
    assert verify(store).ok


def test_replay_score_is_utility_times_frequency_bonus(tmp_path, embedder):
    """Seed 003 B.3: ReplayScore = utility x (1 + bonus for entities the turn shares with another
    turn or a known node, and for its recalls). Low scorers are kept (consolidated, not in the
    trash), marked prune_candidate, and `prune --low-utility 0` selects exactly them."""
    from synapse_cli.engine.consolidate.run import NodeIndex, replay_scores
    from synapse_cli.engine.memory import NewMemory

    texts = ["We met Ingrid at the Tate Modern.", "Ingrid liked the Tate Modern a lot.",
             "it rained all day.", "nothing new today."]
    store = tmp_path / "st"
    with StoreWriter.open(store, create=True) as w:
        ids = w.append([NewMemory(text=t, vector=v, timestamp_ms=1_700_000_000_000 + i,
                                  storage_strength=0.5, meta={"session": "s"})
                        for i, (t, v) in enumerate(zip(texts, embedder.encode(texts)))])
        w.commit()
        w.refresh()
        for _ in range(2):  # two recalls of the rainy turn
            w.touch([ids[2]])
            w.commit()
            w.refresh()
        assert w.header(ids[2]).recall_count == 2
        win = plan_windows(w, 5)[0]
        scores = replay_scores(w, win, NodeIndex.load(w), ConsolidateConfig())
    cands = candidate_spans("\n".join(texts))
    shared = [sum(1 for c in cands if c in texts[i] and c in texts[1 - i]) for i in (0, 1)]
    assert shared[0] >= 2 and shared[0] == shared[1]  # Ingrid, Tate Modern
    expected = [0.25 * (1 + 0.1 * shared[0]), 0.25 * (1 + 0.1 * shared[1]), 0.25 * 1.2, 0.25]
    assert np.allclose(scores, expected)
    res = run_fake(store, embedder, prune_threshold=0.28)  # only the repeated and recalled pass
    assert res.prune_candidates == 1
    with Store.open(store) as s:
        flags = [s.header(i).flags for i in ids]
        assert all(fl.is_consolidated(f) and not fl.is_tombstone(f) for f in flags)
        assert [s.body(i).get("prune_candidate", False) for i in ids] == [False, False, False,
                                                                           True]
    r = run(store, "prune", "--low-utility", "0", "--dry-run", "--json")
    assert json.loads(r.stdout)["policies"]["low_utility"] == [ids[3]]


def test_incoming_edges_capped(tmp_path, embedder):
    store = tmp_path / "st"
    ingest_bytes(store, synthetic(60))
    res = run_fake(store, embedder, max_in_edges=4)
    assert res.edges_removed > 0
    src, dst, typ = live_edges(store)
    nontemporal = Counter(d for d, t in zip(dst.tolist(), typ.tolist()) if t != gf.TEMPORAL)
    assert max(nontemporal.values()) <= 4
    assert verify(store).ok


def test_the_graph_does_not_depend_on_how_many_runs_built_it(tmp_path, embedder):
    """A run stopped after each window (cron's --max-seconds, a kill and a re-run) must build
    the graph one run builds. It did not: an edge read back from disk (float32 0.800000011920929)
    outranked a new one (0.8) in the top-K rule, so a hub kept its first sources, not its
    newest (found by a helper: 98 edges differed on 100 turns)."""
    one, split = tmp_path / "one", tmp_path / "split"
    ingest_bytes(one, synthetic(40, sessions=2))
    ingest_bytes(split, synthetic(40, sessions=2))
    run_fake(one, embedder, max_in_edges=4, window=5)

    class Stop(Exception):
        pass

    def stop(done, total):
        raise Stop

    runs = 0
    for _ in range(50):  # 8 windows: a run that makes no progress must not loop for ever
        with StoreWriter.open(split) as w:
            try:
                if consolidate(w, FakeExtractor(), embedder,
                               ConsolidateConfig(max_in_edges=4, window=5),
                               progress=stop).windows == 0:
                    break
            except Stop:
                runs += 1
    else:
        pytest.fail("consolidation stopped after each window never finished")
    assert runs > 5

    def graph(store):
        src, dst, typ = live_edges(store)
        return sorted(zip(src.tolist(), dst.tolist(), typ.tolist()))

    assert graph(one) == graph(split) and semantic_names(one) == semantic_names(split)


def test_crash_between_commit_and_rewrites_does_not_duplicate(tmp_path, embedder, monkeypatch):
    """The committed nodes and edges exist but the episodes were never flagged: a re-run must
    merge into those nodes and upsert the same edge keys."""
    store = tmp_path / "st"
    ingest_bytes(store, synthetic(20, sessions=2))

    class Crash(BaseException):
        pass

    def crash(*a, **k):
        raise Crash

    with StoreWriter.open(store) as w:
        monkeypatch.setattr(StoreWriter, "rewrite", crash)
        with pytest.raises(Crash):
            consolidate(w, FakeExtractor(), embedder, ConsolidateConfig())
    monkeypatch.undo()
    names_before = semantic_names(store)
    assert names_before  # the first window's nodes were committed
    fake = FakeExtractor()
    run_fake(store, embedder, extractor=fake)
    names = semantic_names(store)
    assert len(names) == len({n.casefold() for n in names})
    assert set(names_before) <= set(names)
    assert verify(store).ok
    assert len(ExtractCache(store).entries) == 4 and fake.calls == 3  # window 1 from the cache


def test_cache_ignores_damaged_lines(tmp_path):
    cache = ExtractCache(tmp_path)
    cache.put("a" * 64, {"entities": [], "relations": []})
    cache.put("b" * 64, {"entities": [{"name": "X", "type": "person", "description": "x"}],
                         "relations": []})
    cache.put("d" * 64, {"entities": [{"name": "X"}], "relations": []})  # wrong shape: a miss
    data = (tmp_path / CACHE_NAME).read_bytes()
    lines = data.split(b"\n")
    lines[0] = lines[0].replace(b"relations", b"relatiOns")  # CRC no longer matches
    (tmp_path / CACHE_NAME).write_bytes(b"\n".join(lines) + b'{"k":"torn')
    again = ExtractCache(tmp_path)
    assert set(again.entries) == {"b" * 64} and again.skipped == 2
    again.put("c" * 64, {"entities": [], "relations": []})  # the torn tail is cut first
    assert set(ExtractCache(tmp_path).entries) == {"b" * 64, "c" * 64}
    # a line nested too deep for the JSON parser (RecursionError) is a bad line too, not a
    # crash of every later consolidate (helper)
    deep = b'{"k":"' + b"e" * 64 + b'","x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with open(tmp_path / CACHE_NAME, "ab") as f:
        f.write(deep + b"\t" + f"{crc32c(deep):08x}".encode() + b"\n")
    assert set(ExtractCache(tmp_path).entries) == {"b" * 64, "c" * 64}


def test_a_cache_that_is_a_directory_is_named(tmp_path):
    from store_format.errors import StoreIOError

    (tmp_path / CACHE_NAME).mkdir()
    with pytest.raises(StoreIOError, match="Is a directory") as e:
        ExtractCache(tmp_path)
    assert CACHE_NAME in str(e.value)


DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from fakes_extractor import FakeExtractor
from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
from synapse_cli.engine.store import StoreWriter
from synapse_cli.models.embedder import get_embedder
from synapse_cli.models import postag
e = get_embedder()
postag.tag("warm up")  # the tagger's lexicon loads before the kills start (0.2-1 s)
print("ready", flush=True)
with StoreWriter.open({store!r}) as w:
    consolidate(w, FakeExtractor(), e, ConsolidateConfig())
"""


def test_kill_9_during_consolidation_then_rerun(tmp_path, embedder):
    store = tmp_path / "st"
    ingest_bytes(store, synthetic(150, sessions=5))
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(ROOT / "tests"), store=str(store)))
    rnd = random.Random(1)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for _ in range(4):
        p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env)
        p.stdout.readline()
        time.sleep(rnd.uniform(0.2, 1.2))
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert verify(store).ok
    res = run_fake(store, embedder)
    assert verify(store).ok
    names = semantic_names(store)
    assert len(names) == len({n.casefold() for n in names})
    with Store.open(store) as s:
        assert not plan_windows(s, 5)  # everything consolidated exactly once
    # Same graph as a clean run on a fresh copy of the input.
    clean = tmp_path / "clean"
    ingest_bytes(clean, synthetic(150, sessions=5))
    run_fake(clean, embedder)
    assert sorted(semantic_names(clean)) == sorted(names)
    assert res.windows < 30


# --- the CLI -------------------------------------------------------------------------------------

def test_lock_busy_exits_75(tmp_path):
    store = tmp_path / "st"
    ingest_bytes(store, (ROOT / "fixtures" / "demo.ndjson").read_bytes())
    with StoreWriter.open(store):
        p = run(store, "--lock-timeout", "0", "consolidate", check_rc=75)
    assert b"lock" in p.stderr.lower()


def test_max_seconds_zero_leaves_work_and_exits_75(tmp_path):
    store = tmp_path / "st"
    ingest_bytes(store, (ROOT / "fixtures" / "demo.ndjson").read_bytes())
    p = run(store, "consolidate", "--max-seconds", "0", "--json", check_rc=75)
    summary = json.loads(p.stdout)
    assert summary["windows"] == 0 and summary["left_windows"] == 5
    assert summary["left_episodes"] == 12


@pytest.mark.slow
def test_cli_with_real_model_is_silent_and_resumable(tmp_path):
    store = tmp_path / "st"
    ingest_bytes(store, (ROOT / "fixtures" / "demo.ndjson").read_bytes())
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "SYNAPSE_HOME": str(store)}
    p = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), SYNAPSE,
                        "consolidate"], capture_output=True, stdin=subprocess.DEVNULL,
                       timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout == b"" and p.stderr == b""
    names = semantic_names(store)
    # one node per name and tag set: "Blue Bottle" of the `plan` line 5, and of line 12
    assert names and len(names) == len(set(semantic_names(store, tagged=True)))
    demo = (ROOT / "fixtures" / "demo.ndjson").read_text()
    assert all(n in demo for n in names)
    assert verify(store).ok
    assert len(ExtractCache(store).entries) == 5


@pytest.mark.slow
def test_real_model_kill_9_then_rerun(tmp_path):
    store = tmp_path / "st"
    ingest_bytes(store, synthetic(30, sessions=2))
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.Popen([SYNAPSE, "--store", str(store), "consolidate"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not (store / CACHE_NAME).exists():
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert verify(store).ok
    run(store, "consolidate")
    names = semantic_names(store)
    assert len(names) == len({n.casefold() for n in names})
    src, dst, typ = live_edges(store)
    assert len(set(zip(src.tolist(), dst.tolist(), typ.tolist()))) == len(src)
    assert verify(store).ok


@pytest.mark.slow
def test_real_model_names_occur_in_window():
    from synapse_cli.models.extractor import LlamaExtractor

    x = LlamaExtractor()
    rows = [json.loads(line) for line in (ROOT / "fixtures" / "demo.ndjson").open()]
    texts = [f"{r['speaker']}: {r['text']}" for r in rows[:5]]
    r1 = x.extract(texts)
    assert r1 == x.extract(texts)  # deterministic
    assert r1["entities"]
    joined = "\n".join(texts)
    for e in r1["entities"]:
        assert e["name"] in joined and e["type"]
    for r in r1["relations"]:
        assert 0.0 <= r["weight"] <= 1.0


class _SlowExtractor:
    """FakeExtractor at a real model's pace (0.3 s a window)."""

    cache_id = "slow\nf1"

    def __init__(self):
        from fakes_extractor import FakeExtractor

        self.inner = FakeExtractor()

    def extract(self, window_texts):
        time.sleep(0.3)
        return self.inner.extract(window_texts)


def _ana_store(path, n: int, emb):
    from synapse_cli import api

    api.ingest([{"text": f"Ana met Bruno in Lisbon on day {i}", "speaker": "Ana"}
                for i in range(n)], store=path, embedder=emb)
    return path


def _consolidating(store, extractor, emb, **kw):
    """(thread running api.run_consolidate, dict whose "r" is its result once joined)."""
    import threading

    from synapse_cli import api

    out = {}
    run = threading.Thread(target=lambda: out.update(r=api.run_consolidate(
        store, extractor=extractor, embedder=emb, window=4, **kw)))
    run.start()
    return run, out


def test_an_ingest_waits_seconds_not_the_whole_consolidation(tmp_path, monkeypatch):
    """Consolidation holds the writer lock a slice at a time: an agent's ingest during the
    nightly run went through only after it, and failed at its --lock-timeout when the run
    was longer. A run that cannot take the lock back stops there and says why."""
    from synapse_cli import api
    from synapse_cli.models.fake import FakeEmbedder

    monkeypatch.setattr(api, "SLICE_SECONDS", 0.5)
    emb = FakeEmbedder(384)
    store = _ana_store(tmp_path / "s", 60, emb)
    run, out = _consolidating(store, _SlowExtractor(), emb, lock_timeout=30)
    time.sleep(1.0)
    t0 = time.monotonic()
    api.ingest([{"text": "Bruno moved to Porto", "speaker": "Bruno"}], store=store,
               embedder=emb, lock_timeout=2.0)  # the whole run takes ~5 s
    waited = time.monotonic() - t0
    run.join(timeout=120)
    assert waited < 2.0 and run.is_alive() is False
    res = out["r"]
    assert res.left_windows == 0 and res.episodes >= 60, res.as_dict()
    assert verify(store).ok

    # another writer holds the lock past the run's timeout when it comes back: it stops
    from store_format.lock import WriterLock

    api.ingest([{"text": f"Carla cooked dinner {i}", "speaker": "Carla"} for i in range(40)],
               store=store, embedder=emb)
    run, out = _consolidating(store, _SlowExtractor(), emb, lock_timeout=0.3)
    time.sleep(0.2)
    with WriterLock(store, 30):  # taken between two slices, held past 0.3 s
        time.sleep(1.5)
    run.join(timeout=120)
    res = out["r"]
    assert res.left_windows > 0 and res.left_because == "lock", res.as_dict()
    assert res.as_dict()["left_because"] == "lock"


def test_a_slice_whose_planning_outlasts_it_still_moves_on(tmp_path, monkeypatch):
    """Reading and planning a large store took longer than a slice: every slice stopped before
    its first window and the run never ended (a review's reproduction: 120,000 episodes)."""
    from synapse_cli import api
    from synapse_cli.engine.consolidate import run as engine
    from synapse_cli.models.fake import FakeEmbedder

    from fakes_extractor import FakeExtractor

    monkeypatch.setattr(api, "SLICE_SECONDS", 0.2)
    load = engine.NodeIndex.load

    def slow_load(store):
        time.sleep(0.3)  # planning alone outlasts the slice
        return load(store)
    monkeypatch.setattr(engine.NodeIndex, "load", staticmethod(slow_load))
    emb = FakeEmbedder(384)
    run, out = _consolidating(_ana_store(tmp_path / "s", 24, emb), FakeExtractor(), emb)
    run.join(timeout=120)
    assert not run.is_alive() and out["r"].left_windows == 0 and out["r"].episodes == 24
