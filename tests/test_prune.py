"""`synapse prune` / `synapse mark` (FORMAT.md section 14) on real files and subprocesses:
every policy, trash and restore, purge (raw bytes of every file), compaction under kill -9,
recall unchanged by compaction."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from store_format import flags as fl
from store_format import graph_files as gf
from store_format import ingest_index as ix
from store_format import manifest as mf
from store_format.vectors import quantize_batch
from synapse_cli.engine import graphview
from synapse_cli.engine.maintenance import prune as pr
from synapse_cli.engine.consolidate.dormancy import DormancyState
from synapse_cli.engine.ingest import md5_of
from synapse_cli.engine.memory import NewMemory
from synapse_cli.engine.recall import RecallConfig, recall
from synapse_cli.engine.store import Store, StoreWriter
from synapse_cli.engine.maintenance.verify import verify
from synapse_cli.models.bm25 import BM25Index
from synapse_cli.models.fake import FakeEmbedder

from conftest import (SYNAPSE, Mem, assert_clean_failure, build_store, cli_env, dir_digest,
                      run_cli, segment_limit, spawn_python, start_cli)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakes_extractor import FakeExtractor  # noqa: E402

DAY = 86_400_000
NOW = 1_750_000_000_000
EMB = FakeEmbedder()


# --- building stores ---------------------------------------------------------------------------


def index_store(path, texts_by_id: dict[int, str] | None = None) -> None:
    """Add BM25 postings and an ingest index for every record (as ingest would)."""
    with StoreWriter.open(path) as w:
        ids = [int(i) for i in w.ids]
        texts = [w.body(i)["text"] for i in ids] if texts_by_id is None else \
            [texts_by_id[i] for i in ids]
        c = BM25Index.open(path, w.manifest.bm25).add(ids, texts)
        ix.create(w.path / ix.NAME)
        md5s = [md5_of(t) for t in texts]
        n = ix.append(w.path / ix.NAME, 0, ix.make_entries(md5s, ids, [i % 7 for i in ids]))
        w.stage(bm25=c, ingest={"file": ix.NAME, "entries": n})
        w.commit()


def mem(text, ts=NOW, **kw) -> Mem:
    return Mem(text=text, vector=EMB.encode([text])[0], timestamp_ms=ts, **kw)


def append(path, mems, edges=()) -> list[int]:
    with StoreWriter.open(path, create=True) as w:
        ids = w.append(mems)
        if edges:
            src, dst, typ = zip(*[(ids[a], ids[b], t) for a, b, t in edges])
            w.add_edges(list(src), list(dst), np.asarray(typ, np.uint8), 0.8)
        w.commit()
    return ids


def all_files_bytes(path) -> dict[str, bytes]:
    return {e.name: Path(e.path).read_bytes() for e in os.scandir(path) if e.is_file()}


# --- policies ----------------------------------------------------------------------------------


@pytest.fixture
def policy_store(tmp_path):
    """One record per situation each policy must decide; `ids` maps a name to its id."""
    p = tmp_path / "store"
    E, S = fl.MemoryType.EPISODIC, fl.MemoryType.SEMANTIC
    spec = {
        "old": mem("an old chat about the weather", NOW - 120 * DAY),
        "old_unresolved": mem("old open task file the taxes", NOW - 120 * DAY, resolved=False),
        "old_pinned": mem("old but pinned wedding day", NOW - 120 * DAY, pinned=True),
        "old_important": mem("old and important launch codes", NOW - 120 * DAY, importance=10.0),
        "recent": mem("a recent chat about lunch", NOW - DAY // 24),
        "low_util": mem("idle filler words", NOW, storage_strength=0.1),
        "candidate": mem("consolidated filler", NOW, consolidated=True),
        "tagged": mem("Bob said hello", NOW, tags=["speaker:bob", "Project-X"],
                      meta={"speaker": "bob"}),
        "node_orphan": mem("Zed [TYPE] person [DESC] nobody", NOW, memory_type=S),
        "node_linked": mem("Ann [TYPE] person [DESC] friend", NOW, memory_type=S),
        "node_recalled": mem("Kim [TYPE] person [DESC] recalled", NOW, memory_type=S,
                             recall_count=3),
        "node_via_dead": mem("Lee [TYPE] person [DESC] via trash", NOW, memory_type=S),
        "dead": mem("already in the trash", NOW, tombstone=True),
        "episode": mem("Ann went hiking", NOW, memory_type=E),
    }
    names = list(spec)
    k = {n: i for i, n in enumerate(names)}
    ids = append(p, list(spec.values()),
                 edges=[(k["node_linked"], k["episode"], gf.ABSTRACTION),
                        (k["dead"], k["node_via_dead"], gf.ABSTRACTION)])
    ids = dict(zip(names, ids))
    with StoreWriter.open(p) as w:  # consolidate's mark (FORMAT.md 13.3)
        rid = ids["candidate"]
        w.rewrite(rid, body=dict(w.body(rid), prune_candidate=True, replay_score=0.05))
        w.stage()
        w.commit()
    index_store(p)
    with StoreWriter.open(p) as w:  # consolidation's dormancy state (FORMAT.md 16)
        archived = [ids["node_orphan"], ids["node_via_dead"], ids["dead"]]
        DormancyState(archived + [ids["node_linked"]], [10, 12, 10, 3], [0, 0, 0, 0],
                      [True, True, True, False], windows=12).stage(w)
        w.commit()
    return p, ids


def test_each_policy_selects_what_it_should(policy_store):
    p, ids = policy_store
    inv = {v: k for k, v in ids.items()}
    with Store.open(p) as s:
        def names(policy):
            sel = pr.select(s, policy, embedder=EMB, now_ms=NOW)
            return ({inv[i] for i in sel.selected},
                    {k: {inv[i] for i in v} for k, v in sel.protected.items()})

        # pinned and unresolved records do not decay at all (seed 004), importance 10 holds on
        assert names(pr.PrunePolicy(decayed_below=0.05, at_ms=NOW)) == (
            {"old"}, {"pinned": set(), "unresolved": set()})
        # later --at: "recent" has decayed too
        assert "recent" in names(pr.PrunePolicy(decayed_below=0.05, at_ms=NOW + 200 * DAY))[0]
        assert names(pr.PrunePolicy(dormant=True))[0] == {"node_orphan", "node_via_dead"}
        assert names(pr.PrunePolicy(low_utility_below=0.2))[0] == {"low_util", "candidate"}
        assert names(pr.PrunePolicy(low_utility_below=0.0))[0] == {"candidate"}
        before = names(pr.PrunePolicy(before_ms=NOW - DAY))
        assert before[0] == {"old", "old_important"}
        assert before[1]["unresolved"] == {"old_unresolved"}
        by_id = pr.select(s, pr.PrunePolicy(ids=(ids["old_unresolved"], ids["old_pinned"],
                                                 ids["dead"], 9999)))
        assert by_id.selected == [ids["old_unresolved"]]  # named: Zeigarnik does not protect
        assert by_id.protected["pinned"] == [ids["old_pinned"]]  # pinned: never
        assert by_id.in_trash == [ids["dead"]] and by_id.not_found == [9999]
        assert names(pr.PrunePolicy(tags=("speaker:bob",)))[0] == {"tagged"}
        assert names(pr.PrunePolicy(tags=("project-x",)))[0] == {"tagged"}
        assert names(pr.PrunePolicy(tags=("speaker:nobody",)))[0] == set()
        q = pr.select(s, pr.PrunePolicy(query="chat about the weather", min_similarity=0.5),
                      embedder=EMB, now_ms=NOW)
        assert {inv[i] for i in q.selected} == {"old"}
        assert q.query_matches[0]["id"] == ids["old"] and q.query_matches[0]["similarity"] >= 0.5
        # combinations: any = union, all = intersection
        both = pr.PrunePolicy(before_ms=NOW - DAY, decayed_below=0.05, at_ms=NOW)
        assert names(both)[0] == {"old", "old_important"}
        both.match = "all"
        assert names(both)[0] == {"old"}
        # dormant = what consolidation archived (not in the trash already), whatever its edges
        sel = names(pr.PrunePolicy(dormant=True, ids=(ids["episode"],)))[0]
        assert sel == {"node_orphan", "node_via_dead", "episode"}
        assert pr.select(s, pr.PrunePolicy(dormant=True)).policies["dormant"] == sorted(
            [ids["node_orphan"], ids["node_via_dead"]])


def test_cli_dry_run_lists_each_policy_and_changes_nothing(policy_store):
    p, ids = policy_store
    before = dir_digest(p)
    r = run_cli(["prune", "--before", str(NOW - DAY), "--dormant", "--tag", "speaker:bob",
                 "--low-utility", "0.2", "--decayed", "0.05", "--at", str(NOW), "--id",
                 str(ids["old_unresolved"]), "--dry-run", "--compact"], p)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["dry_run"] is True
    assert set(rep["policies"]) == {"decayed", "dormant", "low_utility", "before", "id", "tag"}
    assert rep["policies"]["tag"] == [ids["tagged"]]
    assert ids["old_pinned"] in rep["protected"]["pinned"]
    assert ids["dead"] in rep["would_remove"]  # the trash is emptied by --compact
    assert dir_digest(p) == before


def test_cli_needs_yes_off_a_terminal_and_usage_errors(policy_store):
    p, ids = policy_store
    before = dir_digest(p)
    r = run_cli(["prune", "--id", str(ids["old"])], p)
    assert r.returncode == 2 and "--yes" in r.stderr
    assert run_cli(["prune"], p).returncode == 2
    assert run_cli(["prune", "--restore", "1", "--compact"], p).returncode == 2
    assert run_cli(["prune", "--before", "yesterday-ish", "--yes"], p).returncode == 2
    assert dir_digest(p) == before


# --- trash and restore -------------------------------------------------------------------------


def _recall_ids(path, query, mode="synapse", k=10):
    with Store.open(path) as s:
        cfg = RecallConfig(mode=mode, k=k, gate=False)
        res = recall(s, query, EMB.encode([query])[0], cfg, graphview.build(s), now_ms=NOW)
        return [r["id"] for r in res["results"]]


def test_trash_is_invisible_to_recall_bm25_and_graph_then_restore(policy_store):
    p, ids = policy_store
    target = ids["old"]
    for mode in ("vector", "bm25", "hybrid", "synapse"):
        assert target in _recall_ids(p, "chat about the weather", mode)
    r = run_cli(["prune", "--id", str(target), "--id", str(ids["node_linked"]), "--yes",
                 "--json"], p)
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(r.stdout)["trashed"]) == sorted([target, ids["node_linked"]])
    for mode in ("vector", "bm25", "hybrid", "synapse"):
        assert target not in _recall_ids(p, "chat about the weather", mode)
    with Store.open(p) as s:
        a = graphview.build(s)
        pos = int(np.searchsorted(a.ids, ids["node_linked"]))
        assert a.indptr[pos + 1] == a.indptr[pos]  # no edge out of a trashed record
        assert pos not in set(a.indices.tolist())  # and none into it
        bm = BM25Index.open(p, s.manifest.bm25)
        live = [int(i) for i, f in zip(a.ids, a.flags) if not fl.is_tombstone(f)]
        bm.set_live(live)
        assert target not in bm.top_k("weather", 10)[0].tolist()
    r = run_cli(["prune", "--restore", str(target), "--restore", "424242"], p)
    assert r.returncode == 65 and "424242" in r.stderr, r.stderr  # an unknown id: nothing done
    assert target not in _recall_ids(p, "chat about the weather", "vector")
    r = run_cli(["prune", "--restore", str(target)], p)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["restored"] == [target] and rep["not_found"] == []
    assert target in _recall_ids(p, "chat about the weather", "vector")
    assert verify(p).ok


def test_mark_pin_resolve(policy_store):
    p, ids = policy_store
    rid = ids["old"]
    r = run_cli(["mark", str(rid), str(ids["recent"]), "--pin", "--unresolve"], p)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert rows[0] == {"id": rid, "pinned": True, "resolved": False, "in_trash": False,
                       "dormant": False}
    with Store.open(p) as s:
        f = s.header(rid).flags
        assert fl.is_pinned(f) and not fl.is_resolved(f)
    # pinned: no policy prunes it any more, not even --id
    r = run_cli(["prune", "--id", str(rid), "--yes"], p)
    assert json.loads(r.stdout)["trashed"] == []
    r = run_cli(["mark", str(rid), "--unpin", "--resolve"], p)
    assert json.loads(r.stdout)["pinned"] is False
    before = dir_digest(p)
    r = run_cli(["mark", str(rid), "999999", "--pin"], p)  # unknown id: nothing changes
    assert r.returncode == 65 and "999999" in r.stderr
    assert run_cli(["mark", str(rid)], p).returncode == 2
    # contradicting flags: the last one given silently won (a hostile pass)
    for a, b in (("--pin", "--unpin"), ("--unresolve", "--resolve")):
        r = run_cli(["mark", str(rid), a, b], p)
        assert "contradict" in assert_clean_failure(r, 2)[0]
    assert dir_digest(p) == before
    # --restore-dormant: an archived node comes back into the active graph (FORMAT.md 16)
    node = ids["node_orphan"]
    r = run_cli(["mark", str(node), str(ids["node_linked"]), "--restore-dormant"], p)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["dormant"] for x in r.stdout.splitlines()] == [False, False]
    with Store.open(p) as s:
        sel = pr.select(s, pr.PrunePolicy(dormant=True))
        assert sel.policies["dormant"] == [ids["node_via_dead"]]
        assert node not in graphview.build(s).ids[graphview.build(s).dormant].tolist()
    assert verify(p).ok


# --- purge: the right to be forgotten ----------------------------------------------------------

SECRET = "Dorothea hid the qwxzylophant key under the blue flowerpot"


def test_purge_leaves_no_byte_of_the_record_in_any_file(tmp_path):
    p = tmp_path / "store"
    lines = [{"text": SECRET, "speaker": "Dorothea", "session": "s1"},
             {"text": "Dorothea likes the Blue Garden cafe", "speaker": "Dorothea", "session": "s1"},
             {"text": "Marcus went to Lisbon for the conference", "speaker": "Marcus",
              "session": "s1"},
             {"text": "Marcus booked a Lisbon hotel near the river", "speaker": "Marcus",
              "session": "s2"}]
    data = "".join(json.dumps(x) + "\n" for x in lines)
    import subprocess
    r = subprocess.run([str(Path(sys.executable).with_name("synapse")), "--store", str(p),
                        "ingest", "-"], input=data, capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    secret_id = json.loads(r.stdout.splitlines()[0])["id"]
    from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
    from synapse_cli.models.embedder import get_embedder

    with StoreWriter.open(p) as w:  # a superseded payload entry of the secret record
        w.rewrite(secret_id, body=dict(w.body(secret_id), note="edited"))
        w.stage()
        w.commit()
    with StoreWriter.open(p) as w:  # semantic nodes, edges, extract.cache
        consolidate(w, FakeExtractor(), get_embedder(), ConsolidateConfig(window=2,
                                                                          prune_threshold=0.0))
    assert (p / "extract.cache").stat().st_size > 0
    for v in ("v2", "v3"):  # leaves seg-*.dat.bak copies of every record
        assert run_cli(["migrate", "--header", v, "--yes"], p).returncode == 0
    assert any(n.endswith(".bak") for n in os.listdir(p))
    with Store.open(p) as s:
        qvec = bytes(np.asarray(s.vector(secret_id)).tobytes())
        nodes_before = [int(i) for i, f in zip(s.ids, np.concatenate(
            [np.asarray(x.headers["flags"]) for x in s.segments]))
            if fl.memory_type(int(f)) == fl.MemoryType.SEMANTIC]
        from_secret = [n for n in nodes_before if secret_id in s.body(n).get("sources", [])]
    assert from_secret  # the fake extractor made nodes out of the secret's names
    assert any(b"qwxzylophant" in data for data in all_files_bytes(p).values())
    # a pin does not keep a node that may quote the forgotten text; the purge says so
    assert run_cli(["mark", str(from_secret[0]), "--pin"], p).returncode == 0

    before = dir_digest(p)
    r = run_cli(["prune", "--query", "where is the qwxzylophant key hidden", "--min-similarity",
                 "0.5", "--purge", "--dry-run"], p, env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["query_matches"][0]["id"] == secret_id and secret_id in rep["would_remove"]
    # the dry run names what the purge adds: the nodes derived from it, pinned or not
    assert sorted(rep["derived_nodes"]) == sorted(from_secret)
    assert set(from_secret) <= set(rep["would_remove"])
    assert rep["pinned_derived_nodes"] == [from_secret[0]] and rep["requeued_for_consolidation"]
    assert dir_digest(p) == before
    shutil.copy(p / "MANIFEST", p / "MANIFEST.tmp")  # a leftover of an interrupted commit
    r = run_cli(["prune", "--id", str(secret_id), "--purge", "--yes", "--json"], p)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["selected"] == [secret_id] and rep["purged"] is True
    assert rep["pinned_derived_nodes"] == [from_secret[0]] and "pinned" in r.stderr
    assert secret_id in rep["removed_ids"]
    files = all_files_bytes(p)
    for needle in (SECRET.encode(), b"qwxzylophant", b"flowerpot", qvec):
        hits = [n for n, data in files.items() if needle in data]
        assert not hits, (needle[:20], hits)
    assert not any(n.endswith((".bak", ".tmp")) for n in files)
    assert verify(p).ok
    with Store.open(p) as s:
        assert secret_id not in s.ids.tolist()
        g = s.graph()
        assert secret_id not in g.node_ids.tolist()
        bm = BM25Index.open(p, s.manifest.bm25)
        assert secret_id not in bm._arrays()[0].tolist()
        assert "qwxzylophant" not in bm._terms and "flowerpot" not in bm._terms
        assert "lisbon" in bm._terms  # terms of kept records stay
        e = ix.read(p / s.manifest.ingest["file"], s.manifest.ingest["entries"])
        assert secret_id not in e["record_id"].tolist()
        for rid in s.ids.tolist():
            assert secret_id not in (s.body(int(rid)).get("sources") or [])
        assert set(nodes_before) & set(s.ids.tolist())  # nodes of kept records remain
        assert sorted(rep["derived_nodes"]) == sorted(from_secret)
        requeued = rep["requeued_for_consolidation"]
        for rid in requeued:
            assert not fl.is_consolidated(s.header(rid).flags)
    with StoreWriter.open(p) as w:  # rebuilt from what remains, without the secret
        consolidate(w, FakeExtractor(), get_embedder(), ConsolidateConfig(window=2,
                                                                          prune_threshold=0.0))
    assert not any(b"qwxzylophant" in d for d in all_files_bytes(p).values())
    with Store.open(p) as s:
        for rid in requeued:
            assert fl.is_consolidated(s.header(rid).flags)  # extracted again
    # the rest of the store still answers; ingest and consolidate keep working
    r = run_cli(["recall", "Lisbon conference", "--mode", "bm25", "--no-touch"], p,
                env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0 and "Lisbon" in r.stdout
    r = subprocess.run([str(Path(sys.executable).with_name("synapse")), "--store", str(p),
                        "ingest", "-"], input=json.dumps({"text": "a new memory"}) + "\n",
                       capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["id"] > secret_id  # ids are never reused
    assert verify(p).ok


# --- compaction: ids stable, crash-safe ---------------------------------------------------------


def _big_store(path, n=3000):
    with segment_limit(700):
        b = build_store(path, n, seed=3, max_segment_records=700)
    index_store(path)
    return b


def _snapshot(path) -> dict:
    """Live record id -> (header bytes without trailer, vector, body); edges among them."""
    out = {}
    with Store.open(path) as s:
        for seg in s.segments:
            hb = seg.header.header_bytes + s.manifest.dim
            for row in range(seg.n):
                if fl.is_tombstone(int(seg.raw[row, 31])):
                    continue
                rid = int(seg.ids[row])
                out[rid] = (seg.raw[row, :hb].tobytes(), json.dumps(s.body(rid), sort_keys=True))
        g = s.graph()
        src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
        dst = g.node_ids[g.indices.astype(np.intp)]
        edges = {(int(a), int(b), int(t)) for a, b, t in zip(src, dst, g.types)
                 if int(a) in out and int(b) in out}
        bm = BM25Index.open(path, s.manifest.bm25)
        bm.set_live(list(out))
        bm_ids = sorted(int(x) for x in bm.scores("alpha")[0])
    return {"records": out, "edges": edges, "bm25": bm_ids}


def test_compaction_keeps_ids_and_recall(tmp_path):
    p = tmp_path / "store"
    b = _big_store(p, 2000)
    with StoreWriter.open(p) as w:
        pr.trash(w, b.ids[::3])
    queries = [m.text for m in b.mems[5:400:40]] + ["alpha beta", "memory 17"]
    modes = ("vector", "bm25", "hybrid", "synapse")

    def ranked():
        with Store.open(p) as s:
            a = graphview.build(s)
            out = {}
            for q in queries:
                for mode in modes:
                    cfg = RecallConfig(mode=mode, k=20, gate=False)
                    res = recall(s, q, EMB.encode([q])[0], cfg, a, now_ms=NOW)
                    out[q, mode] = [(r["id"], round(r["score"], 4)) for r in res["results"]]
            return out

    before, snap = ranked(), _snapshot(p)
    with StoreWriter.open(p) as w:
        rep = pr.compact(w)
    assert rep["removed_records"] > 600 and rep["bytes_reclaimed"] > 0
    assert verify(p).ok
    assert _snapshot(p) == snap
    after = ranked()
    for key in before:
        assert [i for i, _ in after[key]] == [i for i, _ in before[key]], key
        assert np.allclose([s for _, s in after[key]], [s for _, s in before[key]], atol=2e-4)


CHILD = """
import sys
sys.path[:0] = [sys.argv[2]]
from conftest import segment_limit
from synapse_cli.engine.store import StoreWriter
from synapse_cli.engine.maintenance import prune as pr
with segment_limit(700):
    with StoreWriter.open(sys.argv[1]) as w:
        print("ready", flush=True)
        sys.stdin.readline()
        pr.compact(w, purge=sys.argv[3] == "1")
print("done", flush=True)
"""


def test_compaction_survives_kill_9(tmp_path):
    base = tmp_path / "base"
    b = _big_store(base, 3000)
    rng = random.Random(7)
    with StoreWriter.open(base) as w:
        pr.trash(w, rng.sample(b.ids, 1200))
    want = _snapshot(base)
    all_before = set(Store.open(base).ids.tolist())
    # How long one compaction takes in a child here (under the machine's current load), to
    # spread the kills over it.
    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    child = spawn_python(CHILD, probe, Path(__file__).parent, False)
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    t0 = time.perf_counter()
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done", child.stderr.read()
    duration = time.perf_counter() - t0
    child.wait()
    outcomes = {"old": 0, "new": 0}
    for trial in range(20):
        p = tmp_path / f"t{trial}"
        shutil.copytree(base, p)
        child = spawn_python(CHILD, p, Path(__file__).parent, trial % 4 == 0)
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        child.stdin.write("go\n")
        child.stdin.flush()
        time.sleep(rng.uniform(0, duration * 1.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        with StoreWriter.open(p) as w:  # recovery: orphans deleted
            ids = set(w.ids.tolist())
        assert verify(p).ok, verify(p).as_dict()
        assert ids in (all_before, set(want["records"])), trial
        outcomes["old" if ids == all_before else "new"] += 1
        assert _snapshot(p) == want, trial  # no live record lost or changed, ids stable
        m = mf.read_manifest(p)
        stray = [n for n in os.listdir(p) if mf.is_data_file(n) and n not in mf.named_files(m)]
        assert not stray and not any(n.endswith(".tmp") for n in os.listdir(p))
        shutil.rmtree(p)
    assert outcomes["old"] and outcomes["new"], outcomes  # kills landed before and after


def test_compaction_rebuilds_the_same_ingest_index_from_the_bodies(tmp_path):
    """The rebuilt index (FORMAT.md 14.2) holds what ingest wrote: same MD5s, ids and session
    keys, for the records compaction keeps."""
    p = tmp_path / "store"
    lines = "".join(json.dumps({"text": f"note {i}", "session": f"s{i % 3}"}) + "\n"
                    for i in range(30)).encode()
    assert subprocess.run([str(SYNAPSE), "ingest"], input=lines, capture_output=True,
                          env=cli_env(p, HF_HUB_OFFLINE="1"), timeout=300).returncode == 0
    m = mf.read_manifest(p)
    before = ix.read(p / m.ingest["file"], m.ingest["entries"])
    assert run_cli(["prune", "--id", "7", "--compact", "--yes"], p).returncode == 0
    m = mf.read_manifest(p)
    after = ix.read(p / m.ingest["file"], m.ingest["entries"])
    assert np.array_equal(after, before[before["record_id"] != 7])


def test_a_scope_keeps_a_forget_to_one_users_memories(tmp_path):
    """`within` (MCP forget's `tags`): a query or id outside the scope selects nothing and a dry
    run lists none of another user's texts."""
    from synapse_cli import api

    store = tmp_path / "st"
    api.ingest([{"text": "Ana's password hint is the name of her cat Miso.", "tags": ["user:ana"]},
                {"text": "Bob's password hint is his first car.", "tags": ["user:bob"]}],
               store=store)
    dry = api.prune(store, query="password hint", within=["user:bob"], dry_run=True)
    assert dry["selected"] == [2] and [m["id"] for m in dry["query_matches"]] == [2]
    out = api.prune(store, ids=[1, 2], within=["user:bob"])
    assert out["trashed"] == [2] and out["out_of_scope"] == [1]
    ana = api.recall("What is the password hint?", store=store, tags=["user:ana"], touch=False)
    assert [r["id"] for r in ana["results"]] == [1]
    # a scoped purge empties its user's part of the trash: another user's trashed record
    # stays, restorable (it was refused, naming how many of another user's were there)
    api.prune(store, ids=[1])
    dry = api.prune(store, ids=[2], within=["user:bob"], purge=True, dry_run=True)
    assert dry["selected"] == []  # already in the trash
    assert dry["would_remove"] == [2]  # what the real run removes; not Ana's, trashed too
    out = api.prune(store, ids=[2], within=["user:bob"], purge=True)
    assert out["removed_ids"] == [2] and "1" not in json.dumps(out["out_of_scope"])
    assert api.restore([1], store=store)["restored"] == [1]
    assert [m["id"] for m in api.list_memories(store)["memories"]] == [1]


def test_the_command_line_scope_is_within(tmp_path):
    """The command line had no scope: `prune --tag user:bob --query ... --match all --dry-run`
    selected only Bob's record but listed Ana's text among the query matches (helper)."""
    from synapse_cli import api

    store = tmp_path / "st"
    api.ingest([{"text": "Ana's password hint is the name of her cat Miso.", "tags": ["user:ana"]},
                {"text": "Bob's password hint is his first car.", "tags": ["user:bob"]}],
               store=store)
    r = run_cli(["prune", "--within", "user:bob", "--query", "password hint", "--dry-run",
                 "--json"], store)
    assert r.returncode == 0, r.stderr
    dry = json.loads(r.stdout)
    assert dry["selected"] == [2] and "Miso" not in r.stdout + r.stderr
    assert run_cli(["prune", "--id", "1", "--yes"], store).returncode == 0
    r = run_cli(["prune", "--within", "user:bob", "--id", "999", "--dry-run", "--json"], store)
    assert json.loads(r.stdout)["out_of_scope"] == [999]  # as the API: ids are not probed
    r = run_cli(["prune", "--within", "user:bob", "--id", "2", "--purge", "--dry-run",
                 "--json"], store)
    assert json.loads(r.stdout)["would_remove"] == [2]  # not Ana's record, in the trash too
    r = run_cli(["prune", "--within", "user:bob", "--id", "2", "--purge", "--yes", "--json"],
                store)
    assert r.returncode == 0 and json.loads(r.stdout)["removed_ids"] == [2], r.stderr
    assert run_cli(["prune", "--restore", "1"], store).returncode == 0  # Ana's, still there
    r = run_cli(["prune", "--within", "", "--id", "2", "--dry-run"], store)
    assert r.returncode == 2 and "--within" in r.stderr
    # a restore is not scoped: with --within it is refused, not done for another user
    r = run_cli(["prune", "--within", "user:bob", "--restore", "1"], store)
    assert r.returncode == 2 and "--within" in r.stderr


def test_a_scoped_query_searches_inside_the_scope(tmp_path):
    """The query policy took the best 1,000 matches over every user and only then the scope:
    with 1,100 of Ana's records, Bob's own matching record was never found (review)."""
    from synapse_cli import api
    from synapse_cli.models.fake import FakeEmbedder

    EMB = FakeEmbedder(384)
    store = tmp_path / "st"
    api.ingest([{"text": f"bank PIN is {n}", "tags": ["user:ana"]} for n in range(1100)]
               + [{"text": "the PIN for my bank card is 4821", "tags": ["user:bob"]}],
               store=store, embedder=EMB)
    dry = api.prune(store, query="bank PIN", within=["user:bob"], min_similarity=0.0,
                    dry_run=True, embedder=EMB)
    assert dry["selected"] == [1101]


def _purge_state(p) -> tuple:
    """What a purge decides: the records left, which are consolidated, and every body."""
    with Store.open(p) as s:
        ids = s.ids.tolist()
        return (ids, [bool(fl.is_consolidated(s.header(r).flags)) for r in ids],
                [s.body(r) for r in ids])


def test_a_restore_dry_run_says_what_the_run_would(tmp_path):
    # it listed every id asked for as "restore", also one not in the trash
    from synapse_cli import api

    store = tmp_path / "s"
    api.ingest(["one note", "another note"], store=store, embedder=FakeEmbedder(384))
    api.prune(store, ids=[1])
    r = run_cli(["prune", "--restore", "1", "--restore", "2", "--dry-run", "--json"], store)
    assert r.returncode == 0, r.stderr
    dry = json.loads(r.stdout)
    assert dry["restore"] == [1] and dry["not_in_trash"] == [2]
    r = run_cli(["prune", "--restore", "1", "--restore", "2", "--json"], store)
    real = json.loads(r.stdout)
    assert real["restored"] == dry["restore"] and real["not_in_trash"] == dry["not_in_trash"]


def test_a_restore_does_not_make_a_second_live_copy_of_a_statement(tmp_path):
    # a line pruned, then the same input again (a log replayed: same text, speaker and time;
    # a new live record, as deduplication skips the trash), then restored: two live records
    # would say the same thing at the same time
    from synapse_cli import api

    store, emb = tmp_path / "s", FakeEmbedder(384)
    line = {"text": "the wifi password is hunter2", "speaker": "ana",
            "timestamp": "2026-03-01T10:00:00Z"}
    api.ingest([line], store=store, embedder=emb)
    api.prune(store, ids=[1])
    assert api.ingest([line], store=store, embedder=emb)[0]["id"] == 2
    r = run_cli(["prune", "--restore", "1", "--dry-run", "--json"], store)
    assert r.returncode == 0, r.stderr
    dry = json.loads(r.stdout)
    assert dry["restore"] == [] and dry["already_live"] == [{"id": 1, "live_id": 2}]
    r = run_cli(["prune", "--restore", "1", "--json"], store)
    real = json.loads(r.stdout)
    assert real["restored"] == [] and real["already_live"] == dry["already_live"], r.stderr
    assert [m["id"] for m in api.list_memories(store)["memories"]] == [2]
    # both copies in the trash: the first asked for comes back, the second is held by it
    api.prune(store, ids=[2])
    out = api.restore([2, 1], store=store)
    assert out["restored"] == [2] and out["already_live"] == [{"id": 1, "live_id": 2}]
    # the same text under other tags (another user's) is another statement: not a copy
    api.ingest([{"text": "my locker code is 4512", "tags": ["user:ana"]},
                {"text": "my locker code is 4512", "tags": ["user:bob"]}],
               store=store, embedder=emb)
    api.prune(store, ids=[3])
    out = api.restore([3], store=store)
    assert out["restored"] == [3] and out["already_live"] == []


def test_a_restore_brings_back_the_same_words_said_at_other_times(tmp_path):
    # "ok" twice in a session is two statements (ingest keeps both): pruning the session and
    # restoring it brings both back, in either order, and a line ingested again without a
    # time (stamped anew) is a statement of its own too
    from synapse_cli import api

    store, emb = tmp_path / "s", FakeEmbedder(384)
    api.ingest([{"text": "ok", "speaker": "ana", "session": "s1",
                 "timestamp": "2026-03-01T10:00:00Z"},
                {"text": "lunch at noon?", "speaker": "bob", "session": "s1",
                 "timestamp": "2026-03-01T10:01:00Z"},
                {"text": "ok", "speaker": "ana", "session": "s1",
                 "timestamp": "2026-03-01T10:02:00Z"}], store=store, embedder=emb)
    api.prune(store, tags=["session:s1"])
    assert api.restore([1, 2, 3], store=store)["restored"] == [1, 2, 3]
    api.prune(store, ids=[1])
    assert api.restore([1], store=store) == {"restored": [1], "not_in_trash": [],
                                             "already_live": [], "not_found": []}
    api.ingest(["remember the milk"], store=store, embedder=emb)
    api.prune(store, ids=[4])
    time.sleep(0.01)  # stamped at another millisecond
    api.ingest(["remember the milk"], store=store, embedder=emb)
    assert api.restore([4], store=store)["restored"] == [4]


def _consolidated_secret(base) -> int:
    """A consolidated store of four lines, the first SECRET (whose id is returned): purging
    it trashes the nodes derived from it and requeues the episodes they linked."""
    from synapse_cli import api
    from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
    from synapse_cli.models.embedder import get_embedder

    lines = [{"text": SECRET, "speaker": "Dorothea", "session": "s1"},
             {"text": "Dorothea likes the Blue Garden cafe", "speaker": "Dorothea",
              "session": "s1"},
             {"text": "Marcus went to Lisbon for the conference", "speaker": "Marcus",
              "session": "s1"},
             {"text": "Marcus booked a Lisbon hotel near the river", "speaker": "Marcus",
              "session": "s2"}]
    secret_id = api.ingest(lines, store=base, embedder=get_embedder())[0]["id"]
    with StoreWriter.open(base) as w:
        consolidate(w, FakeExtractor(), get_embedder(), ConsolidateConfig(window=2,
                                                                          prune_threshold=0.0))
    return secret_id


def test_a_scoped_purge_removes_the_derived_nodes_and_spares_another_users_trash(tmp_path):
    from synapse_cli import api
    from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
    from synapse_cli.models.embedder import get_embedder

    store = tmp_path / "s"
    lines = [{"text": SECRET, "speaker": "Dorothea", "tags": ["user:ana"]},
             {"text": "Dorothea likes the Blue Garden cafe", "speaker": "Dorothea",
              "tags": ["user:ana"]},
             {"text": "Bob keeps his locker code 4471 in his wallet", "speaker": "Bob",
              "tags": ["user:bob"]}]
    secret_id, _, bob = (r["id"] for r in api.ingest(lines, store=store, embedder=get_embedder()))
    with StoreWriter.open(store) as w:
        consolidate(w, FakeExtractor(), get_embedder(), ConsolidateConfig(window=3,
                                                                          prune_threshold=0.0))
    api.prune(store, ids=[bob])
    out = api.prune(store, ids=[secret_id], within=["user:ana"], purge=True)
    assert secret_id in out["removed_ids"] and out["derived_nodes"], out
    assert bob not in out["removed_ids"]
    # the report names only the scope's records: no other user's requeued episode, no
    # store-wide counts (a review found Ana's id and the store's record count in Bob's report)
    assert not {"kept_records", "bytes_before", "deleted_files"} & set(out)
    assert bob not in out["requeued_for_consolidation"]
    assert not any(SECRET.encode() in f.read_bytes() for f in store.iterdir() if f.is_file())
    assert api.restore([bob], store=store)["restored"] == [bob]
    assert verify(store).ok


def test_a_purge_killed_after_its_commit_leaves_no_copy(tmp_path, monkeypatch):
    """The copies outside the records (extract.cache, migration backups) were deleted after the
    compaction's commit: killed in between, the purge left them, and a rerun found no record
    to purge. They go first now."""
    from synapse_cli import api

    store = tmp_path / "s"
    secret_id = _consolidated_secret(store)
    (store / "extract.cache").write_text(SECRET)  # what a real extractor's cache holds
    (store / "seg-000001.dat.bak").write_text(SECRET)  # a migration's backup

    class Killed(BaseException):
        pass

    compact = pr.compaction.compact

    def commit_then_die(*a, **k):
        compact(*a, **k)
        raise Killed()
    monkeypatch.setattr(pr.compaction, "compact", commit_then_die)
    with pytest.raises(Killed):
        api.prune(store, ids=[secret_id], purge=True)
    assert not (store / "extract.cache").exists() and not (store / "seg-000001.dat.bak").exists()
    assert not any(SECRET.encode() in f.read_bytes() for f in store.iterdir() if f.is_file())


def test_a_purge_the_disk_stops_says_what_it_did(tmp_path, monkeypatch):
    """Disk full in the compaction: the record and its derived nodes are in the trash and
    episodes wait for consolidate (each committed before); the error said only "disk full"."""
    from store_format.errors import StoreIOError
    from synapse_cli import api

    store = tmp_path / "s"
    secret_id = _consolidated_secret(store)

    def full(*a, **k):
        raise StoreIOError("disk full", str(store / "payload-2.log"))
    monkeypatch.setattr(pr.compaction, "compact", full)
    with pytest.raises(StoreIOError) as info:
        api.prune(store, ids=[secret_id], purge=True)
    hint = info.value.hint
    assert "(1) are in the trash" in hint and "node(s) derived from them" in hint, hint
    assert "prune --purge --yes` again" in hint
    scoped = tmp_path / "scoped"
    secret_id = _consolidated_secret(scoped)
    with pytest.raises(StoreIOError) as info:  # scoped: the same scope again, not all users'
        api.prune(scoped, ids=[secret_id], purge=True, within=["speaker:Dorothea"])
    assert "prune --within speaker:Dorothea --purge --yes` again" in info.value.hint


@pytest.mark.parametrize("killed_after", [1, 2])
def test_a_purge_killed_between_its_writes_ends_where_an_uninterrupted_one_does(
        tmp_path, monkeypatch, killed_after):
    """purge writes the requeue of episodes, then the trashing of derived nodes (flag bytes,
    durable at once), then compacts. Killed after any of the first two and run again, it must requeue the same
    episodes and remove the same nodes: trashing the nodes first lost their episodes' requeue
    for good (a rerun no longer sees the trashed nodes as derived)."""
    base = tmp_path / "base"
    secret_id = _consolidated_secret(base)
    with StoreWriter.open(base) as w:
        pr.trash(w, [secret_id])
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    shutil.copytree(base, whole)
    shutil.copytree(base, killed)
    with StoreWriter.open(whole) as w:
        rep = pr.compact(w, purge=True)
    assert rep["derived_nodes"] and rep["requeued_for_consolidation"], rep

    class Killed(BaseException):
        pass

    set_flags, calls = StoreWriter.set_flags, []

    def write_then_die(self, *a, **k):  # flag writes are in place and durable at once
        out = set_flags(self, *a, **k)
        calls.append(1)
        if len(calls) == killed_after:
            raise Killed()
        return out
    with monkeypatch.context() as m:
        m.setattr(StoreWriter, "set_flags", write_then_die)
        with pytest.raises(Killed), StoreWriter.open(killed) as w:
            pr.compact(w, purge=True)
    with StoreWriter.open(killed) as w:
        pr.compact(w, purge=True)
    assert _purge_state(killed) == _purge_state(whole)
    assert verify(killed).ok


def test_a_compaction_the_os_refuses_is_named_and_changes_nothing(tmp_path, monkeypatch):
    """A store directory without write access: compaction cannot create its new files; the
    error was a bare "[Errno 13]". The refusal is simulated (as root chmod does not refuse)."""
    import errno

    from store_format.errors import StoreIOError
    from synapse_cli import api

    store = tmp_path / "st"
    api.ingest(["one note", "another note"], store=store, embedder=FakeEmbedder(384))
    api.prune(store, ids=[1])
    before = dir_digest(store)

    def refuse(path, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(path / "payload-2.log"))
    monkeypatch.setattr(pr.compaction, "compact", refuse)
    with pytest.raises(StoreIOError) as info:
        api.prune(store, compact=True)
    assert "cannot write the compacted store: Permission denied" in str(info.value)
    assert "write access to the store directory" in info.value.hint
    assert dir_digest(store) == before


def test_compaction_refuses_a_store_verify_finds_damaged(tmp_path):
    """Compaction deletes the old files: on a damaged store it made the damage permanent (a
    MANIFEST rewritten with a valid checksum and a lower record count compacted those records
    away, exit 0, and verify then called the store healthy). It now refuses, exit 65, and
    verify still reports the damage."""
    import struct

    store = tmp_path / "st"
    build_store(store, 20)
    assert run_cli(["prune", "--id", "1", "--yes"], store).returncode == 0  # a trash to empty
    raw = (store / "MANIFEST").read_bytes()
    body = json.loads(raw[mf.HEADER.size:-4])
    body["segments"][0]["records"] -= 3
    data = json.dumps(body, separators=(",", ":")).encode()
    head = mf.HEADER.pack(mf.MAGIC, mf.FORMAT_VERSION, 0, len(data)) + data
    (store / "MANIFEST").write_bytes(head + struct.pack("<I", mf.crc32c(head)))
    assert not verify(store).ok
    before = dir_digest(store)
    lines = assert_clean_failure(run_cli(["prune", "--compact", "--yes"], store), 65)
    assert "the store is damaged" in lines[0] and "nothing was removed" in lines[0]
    assert "export --skip-damaged" in lines[-1]
    assert dir_digest(store) == before and not verify(store).ok


def test_api_prune_and_mark_that_can_do_nothing_are_usage_errors_as_in_the_cli(tmp_path):
    """`api.prune()` with no policy and `api.mark(ids)` with no flag returned as if they had
    worked, where `synapse prune` and `synapse mark` exit 2 ("nothing to do"): a caller's
    forgotten argument went unnoticed."""
    from synapse_cli import api
    from synapse_cli.engine.config import ConfigError

    store = tmp_path / "st"
    api.ingest(["one note", "another note"], store=store, embedder=FakeEmbedder(384))
    before = dir_digest(store)
    with pytest.raises(ConfigError, match="nothing to prune") as info:
        api.prune(store)
    assert info.value.usage
    with pytest.raises(ConfigError, match="nothing to mark"):
        api.mark([1], store)
    assert dir_digest(store) == before
