"""Recaller.refresh, what a long-lived server (`synapse mcp`) relies on: it sees what other
processes committed, and after only its own touch it keeps the graph arrays."""
from __future__ import annotations

import pytest

from synapse_cli import api
from synapse_cli.engine.recall import Recaller
from synapse_cli.models.fake import FakeEmbedder

EMB = FakeEmbedder(384)


def test_refresh_after_own_touch_and_after_another_writer(tmp_path):
    path = tmp_path / "st"
    api.ingest(["the standup is at 9:30", "lunch was pizza"], store=str(path), embedder=EMB)
    with Recaller(path, embedder=EMB) as r:
        assert r.refresh() is False  # nothing committed since it opened
        first = api.recall_with(r, "when is standup?", k=1)
        assert first["touched"] is True
        arrays = r.arrays
        spikes_before = len(arrays.spikes)
        assert r.refresh() is True           # its own touch is a commit
        assert r.arrays is arrays            # ... which keeps the arrays
        assert len(r.arrays.spikes) > spikes_before  # with the recall spike read again

        api.ingest(["standup moved to 10:00"], store=str(path), embedder=EMB)  # another writer
        assert r.refresh() is True
        assert r.arrays is not arrays        # rebuilt: the new record is in them
        texts = [x["text"] for x in api.recall_with(r, "standup moved", k=3,
                                                    touch=False)["results"]]
        assert "standup moved to 10:00" in texts


def test_a_touch_after_another_commit_is_not_taken_for_its_own(tmp_path):
    path = tmp_path / "st"
    api.ingest(["the standup is at 9:30"], store=str(path), embedder=EMB)
    with Recaller(path, embedder=EMB) as r:
        arrays = r.arrays
        api.ingest(["standup moved to 10:00"], store=str(path), embedder=EMB)
        api.recall_with(r, "standup", k=1)   # touches, on top of the other writer's commit
        assert r.refresh() is True
        assert r.arrays is not arrays        # both commits seen: rebuilt, not patched


def test_recall_follows_other_writers_unless_asked_not_to(tmp_path):
    """An agent's long-lived Recaller sees what `synapse ingest` added since it opened."""
    path = tmp_path / "st"
    api.ingest(["the standup is at 9:30"], store=str(path), embedder=EMB)
    with Recaller(path, embedder=EMB) as r, Recaller(path, embedder=EMB, follow=False) as snap:
        api.ingest(["the codeword is PERIWINKLE"], store=str(path), embedder=EMB)
        seen = [x["text"] for x in r.recall("codeword PERIWINKLE", k=2, touch=False)["results"]]
        assert "the codeword is PERIWINKLE" in seen
        old = [x["text"] for x in snap.recall("codeword PERIWINKLE", k=2,
                                              touch=False)["results"]]
        assert "the codeword is PERIWINKLE" not in old
    with pytest.raises(ValueError, match="closed"):
        r.recall("standup")


def test_one_recaller_shared_by_threads_while_another_writer_purges(tmp_path):
    """Four threads on one Recaller while records are purged and the store compacted: a
    refresh in one thread closed the snapshot another was reading ("mmap closed or invalid"),
    and recalls that started after the purge returned the purged text (a helper's run)."""
    import threading
    import time

    from synapse_cli import api
    from synapse_cli.models.fake import FakeEmbedder

    emb = FakeEmbedder(384)
    store = tmp_path / "s"
    api.ingest([{"text": f"note {i} about the garden shed and the tomatoes", "tags": ["user:a"]}
                for i in range(60)], store=store, embedder=emb)
    errors, seen = [], []
    stop = threading.Event()
    with api.Recaller(store, embedder=emb) as r:
        def reader(mode):
            while not stop.is_set():
                started = time.monotonic()
                try:
                    out = r.recall("garden shed tomatoes", k=60, mode=mode, touch=False,
                                   tags=["user:a"])
                    seen.append((started, {x["id"] for x in out["results"]}))
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    errors.append(repr(exc))
        threads = [threading.Thread(target=reader, args=(m,))
                   for m in ("synapse", "bm25", "hybrid", "vector")]
        for t in threads:
            t.start()
        purged = []
        for rid in range(1, 11):
            api.prune(store, ids=[rid], purge=True)
            purged.append((time.monotonic(), rid))
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    for done, rid in purged:
        assert not any(rid in ids for started, ids in seen if started > done), rid
    assert len(seen) > 20
