"""`synapse list` (issue 22): newest first, filtered like recall (type, time window, tags,
speaker:/session:, the trash), paged by cursor; JSON lines in a pipe, a table on a terminal."""
from __future__ import annotations

import json
import os

import pytest

from conftest import assert_clean_failure, run_cli
from fakes_extractor import FakeExtractor
from synapse_cli import api
from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
from synapse_cli.engine.store import StoreWriter

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def items() -> list[dict]:
    out = []
    for i in range(12):
        out.append({"text": f"Note {i}: Ana met Bruno at the Lisbon office about Project Kite",
                    "speaker": "Ana" if i % 2 else "Bruno", "session": f"s{i // 4}",
                    "timestamp": T0 + i * DAY, "tags": ["work"] if i % 3 == 0 else []})
    out.append({"text": "Buy oat milk", "type": "working", "timestamp": T0 + 5 * DAY})
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from synapse_cli.models.embedder import get_embedder

    e = get_embedder()
    path = tmp_path_factory.mktemp("list") / "store"
    api.ingest(items(), store=path, embedder=e)
    with StoreWriter.open(path) as w:
        consolidate(w, FakeExtractor(), e, ConsolidateConfig())
    api.prune(store=path, ids=[2])
    api.mark([4], store=path, pin=True)
    return path


def ids(page) -> list[int]:
    return [m["id"] for m in page["memories"]]


def everything(store, **kw) -> list[dict]:
    return api.list_memories(store, limit=1000, **kw)["memories"]


def test_newest_first_live_only_and_the_trash(store):
    rows = everything(store)
    keys = [(m["timestamp_ms"], m["id"]) for m in rows]
    assert keys == sorted(keys, reverse=True)
    assert 2 not in [m["id"] for m in rows] and not any(m["in_trash"] for m in rows)
    trash = everything(store, trashed=True)
    assert [m["id"] for m in trash] == [2] and trash[0]["in_trash"]
    assert next(m for m in rows if m["id"] == 4)["pinned"]


def test_filters_type_time_tags_speaker_session(store):
    assert {m["type"] for m in everything(store, types=["working"])} == {"working"}
    nodes = everything(store, types=["semantic"])
    assert nodes and all(m["name"] and m["etype"] and "episodes" in m for m in nodes)
    assert max(m["episodes"] for m in nodes) >= 2  # "Ana" is named in many notes
    window = everything(store, since_ms=T0 + 3 * DAY, until_ms=T0 + 6 * DAY,
                        types=["episodic"])
    assert sorted(m["text"][:6] for m in window) == ["Note 3", "Note 4", "Note 5", "Note 6"]
    assert {m["id"] for m in everything(store, tags=["work"])} == {1, 4, 7, 10}
    ana = everything(store, tags=["speaker:Ana"])
    assert ana and all(m["speaker"] == "Ana" for m in ana)
    s1 = everything(store, tags=["session:s1", "speaker:Bruno"])
    assert [m["text"][:6] for m in s1] == ["Note 6", "Note 4"]


def test_paging_covers_everything_once_and_survives_an_insert(store, tmp_path):
    full = [m["id"] for m in everything(store)]
    seen, after = [], None
    while True:
        page = api.list_memories(store, limit=3, after=after)
        seen += ids(page)
        after = page["next_after"]
        if after is None:
            break
        assert len(page["memories"]) == 3 and page["total"] == len(full)
    assert seen == full
    # a memory stored between two pages (newer than all) neither repeats nor shifts one
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    first = api.list_memories(copy, limit=3)
    api.ingest([{"text": "a late note", "timestamp": T0 + 99 * DAY}], store=copy)
    second = api.list_memories(copy, limit=3, after=first["next_after"])
    assert ids(first) + ids(second) == full[:6]


def test_cli_pipe_json_lines_paging_and_errors(store):
    r = run_cli(["list", "--limit", "4"], store)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [m["id"] for m in rows] == [m["id"] for m in everything(store)][:4]
    r2 = run_cli(["list", "--limit", "4", "--after", rows[-1]["id"]], store)
    assert [json.loads(x)["id"] for x in r2.stdout.splitlines()] == \
        [m["id"] for m in everything(store)][4:8]
    r = run_cli(["list", "--type", "semantic", "--tag", "speaker:Ana"], store)
    assert r.returncode == 0 and r.stdout == ""
    assert_clean_failure(run_cli(["list", "--after", "999"], store), 65)
    assert_clean_failure(run_cli(["list", "--type", "nodes"], store), 2)
    assert_clean_failure(run_cli(["list", "--since", "2026-02-01", "--until", "2026-01-01"],
                                 store), 2)
    # "0" and "2024" are neither a date nor a time in ms; the message said "write a time as
    # epoch milliseconds" to someone who had written one
    for short in ("0", "2024"):
        lines = assert_clean_failure(run_cli(["list", "--since", short], store), 2)
        assert "neither a date nor epoch milliseconds" in lines[0]


def test_a_since_between_two_milliseconds_is_rounded_up(store):
    """"--since 00:00:00.0001Z" lets nothing of 00:00:00.000 through (it was cut down to the
    millisecond the record has); recall reads --since the same way."""
    from synapse_cli.engine.inputs import parse_window_start

    day5 = {m["id"] for m in everything(store, since_ms=T0 + 5 * DAY, until_ms=T0 + 5 * DAY)}
    assert day5
    for cmd in (["list"], ["recall", "Ana met Bruno", "--no-gate", "--k", "50"]):
        got = {}
        for since in ("2026-01-06T00:00:00Z", "2026-01-06T00:00:00.0001Z"):
            r = run_cli([*cmd, "--since", since, "--json"], store)
            assert r.returncode == 0, r.stderr
            rows = [json.loads(x) for x in r.stdout.splitlines()]
            rows = rows[0]["results"] if cmd[0] == "recall" else rows
            got[since] = {m["id"] for m in rows}
        assert got["2026-01-06T00:00:00Z"] & day5, cmd
        assert not got["2026-01-06T00:00:00.0001Z"] & day5, cmd
    assert parse_window_start(T0 + 0.5, "since") == T0 + 1
    assert parse_window_start(T0, "since") == T0
    assert parse_window_start("2026-01-06T00:00:00.000999Z", "since") == T0 + 5 * DAY + 1
    # the instant's fraction of a millisecond, not the local time's (review)
    assert parse_window_start("2026-01-06T01:00:00+01:00:00.000500", "since") == \
        T0 + 5 * DAY


def test_cli_table_on_a_terminal(store):
    from test_terminal import on_terminal

    code, screen, _ = on_terminal(["list", "--limit", "5"], store)
    assert code == 0
    assert "id" in screen and "memory" in screen and "Note 11" in screen
    assert "next page: --after" in screen and "{" not in screen


def test_a_window_lists_the_nodes_recall_would_and_no_node_that_knows_later(store):
    """A semantic node is in a window only when every episode it links is (its text holds what
    they all said); `list` checked the node's own time and showed nodes recall leaves out."""
    from synapse_cli.engine import graphview
    from synapse_cli.engine.store import Store

    until = T0 + 5 * DAY
    listed = set(ids(api.list_memories(store, limit=1000, types=["semantic"],
                                       until_ms=until)))
    with Store.open(store) as s:
        arrays = graphview.build(s)
        semantic = [int(i) for i, sem in zip(arrays.ids, arrays.semantic()) if sem]
        later = {int(arrays.ids[p]) for p in
                 arrays.reaching_outside(0, until).nonzero()[0]}
    assert later and not listed & later  # the nodes that also know days 6-11 are not listed
    recalled = api.recall("Ana Bruno Lisbon Project Kite", store=store, types=["semantic"],
                          until_ms=until, gate=False, touch=False, k=1000)
    assert {r["id"] for r in recalled["results"]} <= listed <= set(semantic)


def test_filters_given_as_iterators_are_applied(store):
    """check_filters read a generator of tags first, and the listing then had none."""
    tagged = ids(api.list_memories(store, limit=1000, tags=["work"]))
    assert tagged and ids(api.list_memories(store, limit=1000,
                                            tags=(t for t in ["work"]))) == tagged
