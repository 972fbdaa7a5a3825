"""Crash and concurrency torture at CI size (bench/reliability/torture.py runs the long versions).

Crash: random ingest / consolidate (fake extractor) / recall / prune --compact / migrate, most
of them SIGKILLed at a random moment; after each, `verify` passes, every acknowledged record is
there with its exact text (unless an acknowledged prune removed it), nothing is duplicated and
recall answers. Concurrency: 4 writers, 4 readers, a consolidator and a compactor for 20 s.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from synapse_cli.engine.store import Store

from conftest import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "reliability"))
import torture  # noqa: E402


@pytest.fixture(scope="module")
def embedder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from synapse_cli.models.embedder import get_embedder

    return get_embedder()


def test_sigkill_at_random_moments(tmp_path, embedder):
    store = tmp_path / "store"
    out = torture.torture(store, trials=60, seconds=60, seed=9, embedder=embedder)
    print(json.dumps(out))
    assert not out["failures"], out["failures"]
    assert out["trials"] >= 20 and out["kills_total"] >= 10, out
    assert set(out["ops"]) == set(torture.OPS), out["ops"]
    r = run_cli(["inspect", "verify", "--json"], store)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"], r.stdout + r.stderr
    with Store.open(store) as s:  # documents were consolidated too: their nodes exist
        names = {s.body(int(i)).get("name") for i in s.ids.tolist()
                 if s.body(int(i)).get("etype") == "document"}
    assert names and names <= set(torture.DOCS), names


def test_writers_readers_consolidation_and_compaction_at_once(tmp_path, embedder):
    out = torture.concurrency(tmp_path / "store", seconds=20, embedder=embedder, seed=3)
    print(json.dumps(out))
    assert not out["problems"], out["problems"]
    assert not out["reader_errors"], out["reader_errors"]  # no torn read, no missing file
    c = out["commands"]
    assert c.get("ingest", 0) >= 4 and c.get("recall", 0) >= 1 and c.get("consolidate", 0) >= 1
    assert out["lock_acquisitions"] >= c["ingest"]
    assert out["max_lock_wait_s"] < out["lock_timeout_s"], out  # bounded: nobody timed out
