"""Dormancy (seed 000 node garbage collection, FORMAT.md 16) and the PageRank cache (16.3):
nodes archived after W quiet windows, skipped by recall and PageRank, woken by a later mention
or `mark --restore-dormant`; crash safety of the state (kill -9, re-run after a crash between
commit and rewrites); compaction carries it; `prune --dormant` uses it."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from store_format import dormancy as dm
from store_format import flags as fl
from store_format import manifest as mf
from synapse_cli.engine import graphview, pagerank_cache
from synapse_cli.engine.consolidate.run import ConsolidateConfig, consolidate, plan_windows
from synapse_cli.engine.consolidate.dormancy import DormancyConfig, DormancyState
from synapse_cli.engine.memory import NewMemory
from synapse_cli.engine.recall import RecallConfig, recall
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.maintenance.verify import verify
from synapse_cli.models.fake import FakeEmbedder

from conftest import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakes_extractor import FakeExtractor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CITIES = ["Oslo", "Berlin", "Kyoto", "Lima", "Cairo", "Quito", "Hanoi", "Perth", "Dakar", "Tunis",
          "Sofia", "Riga", "Accra", "Bern", "Dublin", "Havana"]
T0 = 1_700_000_000_000


def drifting(cities=CITIES, start: int = 0) -> bytes:
    """One session whose topic moves on: window k (5 turns) talks about cities[k] only."""
    rows = []
    for k, c in enumerate(cities):
        for j in range(5):
            i = start + k * 5 + j
            rows.append({"text": f"We talked about {c} again, trip number {i}.", "session": "s1",
                         "timestamp": T0 + i * 60_000})
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def ingest(store, data: bytes) -> None:
    r = subprocess.run([str(Path(sys.executable).with_name("synapse")), "--store", str(store),
                        "ingest"], input=data, capture_output=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def embedder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from synapse_cli.models.embedder import get_embedder

    return get_embedder()


def run_fake(store, embedder, **cfg):
    with StoreWriter.open(store) as w:
        return consolidate(w, FakeExtractor(), embedder, ConsolidateConfig(**cfg))


def node_ids(store) -> dict[str, int]:
    with Store.open(store) as s:
        return {s.body(int(r))["name"]: int(r) for r in s.ids
                if fl.memory_type(s.header(int(r)).flags) == fl.MemoryType.SEMANTIC}


def state(store) -> DormancyState:
    with Store.open(store) as s:
        return DormancyState.load(s)


def state_tuple(store):
    d = state(store)
    return (d.ids.tolist(), d.low.tolist(), d.seen.tolist(), d.archived.tolist(), d.windows)


def recall_ids(store, embedder, query: str, **kw) -> list[int]:
    with Store.open(store) as s:
        cfg = RecallConfig(k=50, gate=False, **kw)
        res = recall(s, query, embedder.encode([query])[0], cfg, graphview.build(s))
    return [r["id"] for r in res["results"]]


@pytest.fixture
def archived_store(tmp_path, embedder):
    store = tmp_path / "st"
    ingest(store, drifting())
    res = run_fake(store, embedder, dormancy_windows=3)
    return store, res


# --- archiving and what it hides ---------------------------------------------------------------

def test_quiet_nodes_are_archived_and_recall_and_pagerank_skip_them(archived_store, embedder):
    store, res = archived_store
    nodes = node_ids(store)
    assert set(nodes) == set(CITIES)
    d = state(store)
    assert d.windows == res.windows == len(CITIES)
    archived = {n for n, rid in nodes.items() if rid in set(d.archived_ids())}
    # Window k's node is reached from window k+1 (temporal edge to its episodes), then quiet:
    # archived after 3 more windows; the newest cities are still active.
    assert archived == set(CITIES[:len(CITIES) - 4]) and res.archived == len(archived)
    assert not (set(d.ids[d.archived].tolist()) - set(nodes.values()))  # only semantic nodes
    assert verify(store).ok
    with Store.open(store) as s:
        m = s.manifest.dormancy
        assert m["file"] == f"dormancy-{s.manifest.generation}.dat"
        assert sorted(os.listdir(store)).count(m["file"]) == 1
        assert not [f for f in os.listdir(store) if f.startswith("dormancy") and f != m["file"]]
        a = graphview.build(s)
        gone = np.flatnonzero(a.dormant)
        assert sorted(a.ids[gone].tolist()) == sorted(nodes[n] for n in archived)
        src = np.repeat(np.arange(a.n), np.diff(a.indptr))
        assert not (a.dormant[src].any() or a.dormant[a.indices].any())  # out of the graph
    oslo = nodes["Oslo"]
    # no mode returns an archived node (the scan leaves it out); synaptic once did
    for mode in ("synapse", "synaptic", "ecphory", "vector", "hybrid"):
        hits = recall_ids(store, embedder, "Oslo", types=("semantic",), mode=mode)
        assert not set(hits) & {nodes[n] for n in archived}, mode
        assert nodes["Havana"] in recall_ids(store, embedder, "Havana", types=("semantic",),
                                             mode=mode), mode
    # `mark --restore-dormant` brings it back (one commit), and recall finds it again.
    r = run_cli(["mark", str(oslo), "--restore-dormant", "--json"], store)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"id": oslo, "pinned": False, "resolved": True,
                                    "in_trash": False, "dormant": False}
    assert oslo not in state(store).archived_ids() and state(store).low[
        list(state(store).ids).index(oslo)] == 0
    assert oslo in recall_ids(store, embedder, "Oslo", types=("semantic",))
    assert verify(store).ok
    r = run_cli(["mark", "999999", "--restore-dormant"], store)
    assert r.returncode == 65 and "no record with id 999999" in r.stderr


def test_a_window_naming_an_archived_node_wakes_it(archived_store, embedder):
    store, _ = archived_store
    nodes = node_ids(store)
    assert nodes["Oslo"] in state(store).archived_ids()
    ingest(store, drifting(["Oslo"], start=len(CITIES) * 5))
    res = run_fake(store, embedder, dormancy_windows=3)
    assert res.woken == 1 and res.nodes_created == 0  # merged into the archived node
    assert nodes["Oslo"] not in state(store).archived_ids()
    assert node_ids(store) == nodes


def test_windows_zero_never_archives(tmp_path, embedder):
    store = tmp_path / "st"
    ingest(store, drifting())
    res = run_fake(store, embedder, dormancy_windows=0)
    d = state(store)
    assert res.archived == 0 and not d.archived.any()
    assert d.low.max() >= 10  # still counted, so turning it on later acts on the history


def test_document_windows_do_not_age_nodes(tmp_path, embedder):
    """A corpus (episodes with a source and no session) is not time passing: the texts that
    archive 12 cities as one conversation (the test above) archive nothing as 16 documents."""
    rows = [json.loads(x) for x in drifting().decode().splitlines()]
    store = tmp_path / "docs"
    docs = [dict({k: v for k, v in r.items() if k != "session"}, source=f"doc-{i // 5}")
            for i, r in enumerate(rows)]
    ingest(store, "".join(json.dumps(r) + "\n" for r in docs).encode())
    res = run_fake(store, embedder, dormancy_windows=3)
    d = state(store)
    assert res.windows == len(CITIES) == res.document_nodes
    assert set(node_ids(store)) == set(CITIES) | {f"doc-{k}" for k in range(len(CITIES))}
    assert res.archived == 0 and not d.archived.any() and d.windows == 0
    assert not d.low.any()
    assert d.last_window == sorted(d.last_window) and len(d.last_window) == 5  # resume marker
    assert verify(store).ok


def _unit_store(path):
    """Episode e, nodes a (edge from e), b, c (pinned); no other edges."""
    emb = FakeEmbedder()
    S = fl.MemoryType.SEMANTIC

    def m(text, **kw):
        return NewMemory(text=text, vector=emb.encode([text])[0], timestamp_ms=T0, **kw)

    with StoreWriter.open(path, create=True) as w:
        ids = w.append([m("episode"), m("A [TYPE] x [DESC] a", memory_type=S),
                        m("B [TYPE] x [DESC] b", memory_type=S),
                        m("C [TYPE] x [DESC] c", memory_type=S, pinned=True)])
        w.add_edges([ids[0]], [ids[1]], np.asarray([2], np.uint8), 0.8)
        w.commit()
    return ids


def test_recall_and_energy_keep_a_node_awake(tmp_path):
    e, a, b, c = _unit_store(tmp_path / "st")
    cfg = DormancyConfig(epsilon=0.01, windows=3)
    with StoreWriter.open(tmp_path / "st") as w:
        st = DormancyState()
        for k in range(2):  # a gets energy from e; b and c none
            assert st.observe(w, [e, 1000 + k], [], cfg) == []
        assert dict(zip(st.ids.tolist(), st.low.tolist())) == {a: 0, b: 2, c: 0}  # c pinned
        w.touch([b])  # a recall of b since the last window: activity ("repeated recall")
        w.commit()
        w.refresh()
        assert st.observe(w, [e, 1002], [], cfg) == []
        assert dict(zip(st.ids.tolist(), st.low.tolist()))[b] == 0
        for k in range(3):
            got = st.observe(w, [e, 1003 + k], [], cfg)
        assert got == [b] and st.archived_ids() == [b]
        assert st.observe(w, [e, 1009], [b], cfg) == [] and st.archived_ids() == []  # named
        # A window whose episodes were all in the last one is that window re-run: not counted.
        n = st.windows
        st.observe(w, [e, 1009], [], cfg)
        assert st.windows == n


# --- crash safety ------------------------------------------------------------------------------

def test_rerun_after_crash_between_commit_and_rewrites_counts_the_window_once(
        tmp_path, embedder, monkeypatch):
    store, clean = tmp_path / "st", tmp_path / "clean"
    ingest(store, drifting())
    ingest(clean, drifting())

    class Crash(BaseException):
        pass

    def crash(*a, **k):
        raise Crash

    with StoreWriter.open(store) as w:
        monkeypatch.setattr(StoreWriter, "rewrite", crash)
        with pytest.raises(Crash):
            consolidate(w, FakeExtractor(), embedder, ConsolidateConfig(dormancy_windows=3))
    monkeypatch.undo()
    assert state(store).windows == 1  # committed with the window, episodes not flagged
    run_fake(store, embedder, dormancy_windows=3)
    run_fake(clean, embedder, dormancy_windows=3)
    assert verify(store).ok
    assert state_tuple(store) == state_tuple(clean)


DRIVER = """
import os, signal, sys
sys.path.insert(0, {tests!r})
os.environ["HF_HUB_OFFLINE"] = "1"
from fakes_extractor import FakeExtractor
from synapse_cli.engine.consolidate import dormancy
from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
from synapse_cli.engine.store import StoreWriter
from synapse_cli.models.embedder import get_embedder

point, at = sys.argv[1], int(sys.argv[2])
calls = {{"n": 0}}
if point == "staged":  # the new dormancy file is on disk, the manifest does not name it yet
    orig = dormancy.DormancyState.stage
    def stage(self, w):
        orig(self, w)
        calls["n"] += 1
        if calls["n"] == at:
            os.kill(os.getpid(), signal.SIGKILL)
    dormancy.DormancyState.stage = stage
elif point == "committed":  # killed in the in-place rewrites after a window's commit
    orig_rw = StoreWriter.rewrite
    def rewrite(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return orig_rw(self, *a, **k)
    StoreWriter.rewrite = rewrite
e = get_embedder()
print("ready", flush=True)
with StoreWriter.open({store!r}) as w:
    consolidate(w, FakeExtractor(), e, ConsolidateConfig(dormancy_windows=3))
"""


def _driver(tmp_path, store, *args) -> subprocess.Popen:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(ROOT / "tests"), store=str(store)))
    return subprocess.Popen([sys.executable, str(script), *map(str, args)],
                            stdout=subprocess.PIPE, env=dict(os.environ, HF_HUB_OFFLINE="1"))


@pytest.mark.parametrize("point,at", [("staged", 1), ("staged", 7), ("committed", 1),
                                      ("committed", 23)])
def test_kill_9_during_the_dormancy_update(tmp_path, embedder, point, at):
    store, clean = tmp_path / "st", tmp_path / "clean"
    ingest(store, drifting())
    ingest(clean, drifting())
    p = _driver(tmp_path, store, point, at)
    out, _ = p.communicate(timeout=600)
    assert p.returncode == -signal.SIGKILL, out
    assert verify(store).ok
    run_fake(store, embedder, dormancy_windows=3)
    run_fake(clean, embedder, dormancy_windows=3)
    assert verify(store).ok
    assert state_tuple(store) == state_tuple(clean)
    with Store.open(store) as s:
        assert not plan_windows(s, 5)
        named = s.manifest.dormancy["file"]
    assert [f for f in os.listdir(store) if f.startswith("dormancy")] == [named]


def test_kill_9_at_random_times(tmp_path, embedder):
    store = tmp_path / "st"
    ingest(store, drifting())
    rnd = random.Random(5)
    for _ in range(4):
        p = _driver(tmp_path, store, "none", 0)
        p.stdout.readline()
        time.sleep(rnd.uniform(0.1, 1.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert verify(store).ok
    run_fake(store, embedder, dormancy_windows=3)
    assert verify(store).ok
    d = state(store)
    nodes = node_ids(store)
    assert set(d.ids.tolist()) <= set(nodes.values())
    # A window is counted at most once more than in a clean run only when a kill fell inside
    # its in-place rewrites (a smaller window is planned again); 4 kills bound that.
    assert len(CITIES) <= d.windows <= len(CITIES) + 4
    assert {n for n, r in nodes.items() if r in set(d.archived_ids())} >= set(CITIES[:8])


# --- compaction, prune --dormant, format checks ------------------------------------------------

def test_prune_dormant_uses_the_state_and_compaction_carries_it(archived_store, embedder):
    store, _ = archived_store
    archived = state(store).archived_ids()
    r = run_cli(["prune", "--dormant", "--dry-run", "--json"], store)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["policies"]["dormant"] == archived
    # Trash two of them, then compact: the state of removed nodes goes, the rest is kept.
    gone = archived[:2]
    r = run_cli(["prune", "--id", str(gone[0]), "--id", str(gone[1]), "--compact", "--yes",
                 "--json"], store)
    assert r.returncode == 0, r.stderr
    d = state(store)
    assert d.archived_ids() == archived[2:] and not set(gone) & set(d.ids.tolist())
    assert d.windows == len(CITIES)
    with Store.open(store) as s:
        assert mf.DORMANCY_RE.fullmatch(s.manifest.dormancy["file"])
    assert verify(store).ok
    r = run_cli(["prune", "--dormant", "--yes", "--json"], store)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["trashed"] == archived[2:]
    assert json.loads(run_cli(["prune", "--dormant", "--dry-run", "--json"], store).stdout)[
        "policies"]["dormant"] == []  # in the trash now: nothing live is dormant


def test_damaged_dormancy_file_is_reported(archived_store):
    store, _ = archived_store
    with Store.open(store) as s:
        name = s.manifest.dormancy["file"]
    path = store / name
    data = bytearray(path.read_bytes())
    data[dm.HEADER_SIZE + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    rep = verify(store)
    assert not rep.ok and any(p.file == name for p in rep.problems)
    r = run_cli(["recall", "Oslo"], store)
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_manifest_dormancy_key_round_trips_and_rejects_bad_values(tmp_path):
    m = mf.Manifest.new(dim=4, embedder="x")
    m = mf.Manifest(**{**m.__dict__, "dormancy": {"file": "dormancy-3.dat", "entries": 2,
                                                  "windows": 5, "last_window": [4, 7]}})
    mf.write_manifest(tmp_path, m)
    assert mf.read_manifest(tmp_path, check_files=False).dormancy == m.dormancy
    for bad in ({"file": "../x.dat", "entries": 0, "windows": 0, "last_window": []},
                {"file": "dormancy.dat", "entries": 0, "windows": 0, "last_window": [0]},
                {"file": "dormancy.dat", "entries": 0, "windows": 0}):
        with pytest.raises(Exception):
            mf.write_manifest(tmp_path, mf.Manifest(**{**m.__dict__, "dormancy": bad}))


# --- the PageRank cache ------------------------------------------------------------------------

def test_pagerank_cache_is_used_when_fresh_and_recomputed_when_stale(archived_store, embedder,
                                                                     monkeypatch):
    store, _ = archived_store
    assert (store / pagerank_cache.NAME).exists()  # written by consolidation
    with Store.open(store) as s:
        a = graphview.build(s)
        cached = pagerank_cache.load(s, a)
        assert cached is not None and np.array_equal(cached, pagerank_cache.compute(a))
        assert cached[a.dormant].max() < cached[~a.dormant].max()
    calls = []
    real = pagerank_cache.compute
    monkeypatch.setattr(pagerank_cache, "compute", lambda arr: calls.append(1) or real(arr))
    with Store.open(store) as s:
        res = recall(s, "Havana", embedder.encode(["Havana"])[0], RecallConfig(gate=False),
                     graphview.build(s))
    assert calls == [] and res["results"]
    # A change of the graph (a node to the trash) makes it stale: recall computes it.
    r = run_cli(["prune", "--id", str(node_ids(store)["Havana"]), "--yes"], store)
    assert r.returncode == 0, r.stderr
    with Store.open(store) as s:
        a = graphview.build(s)
        assert pagerank_cache.load(s, a) is None
        pr = pagerank_cache.pagerank_for(s, a)
        assert calls == [1] and np.array_equal(pr, real(a))
    # a damaged cache is a miss, never an error
    raw = bytearray((store / pagerank_cache.NAME).read_bytes())
    raw[40] ^= 1
    (store / pagerank_cache.NAME).write_bytes(bytes(raw))
    with Store.open(store) as s:
        assert pagerank_cache.load(s, graphview.build(s)) is None
