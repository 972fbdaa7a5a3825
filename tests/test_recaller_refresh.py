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
