"""The agent-use suite's data (bench/quality/agent_use/) is consistent: every question points at
lines that exist, each kind has what its metric needs, and an as-of time falls where that
version was the current one. A wrong line number would silently score a right answer as a miss."""
from __future__ import annotations

import json
import sys
from datetime import datetime

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench" / "quality"))
from agent_use import DATA, HALVES  # noqa: E402

CONVERSATIONS = [c for cs in HALVES.values() for c in cs]
KINDS = {"changed", "two_hop", "single", "never"}


def _time(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_questions_point_at_real_lines_and_times(name):
    lines = [json.loads(x) for x in (DATA / f"{name}.ndjson").read_text().splitlines()]
    assert all(set(x) == {"text", "speaker", "session", "timestamp"} for x in lines)
    times = [_time(x["timestamp"]) for x in lines]
    assert times == sorted(times), "turns out of time order"
    questions = json.loads((DATA / f"{name}.questions.json").read_text())
    assert len({q["id"] for q in questions}) == len(questions)
    assert len(questions) >= 24
    for q in questions:
        assert q["kind"] in KINDS, q["id"]
        refs = q["gold"] + q.get("superseded", []) + [g for a in q.get("as_of", [])
                                                      for g in a["gold"]]
        assert all(1 <= i <= len(lines) for i in refs), q["id"]
        if q["kind"] == "never":
            assert not q["gold"] and not q.get("superseded"), q["id"]
            continue
        assert q["gold"], q["id"]
        if q["kind"] == "changed":
            assert q["superseded"] and q["as_of"], q["id"]
            first_current = min(times[i - 1] for i in q["gold"])
            for a in q["as_of"]:  # after that version was said, before the current one
                at = _time(a["time"])
                assert min(times[i - 1] for i in a["gold"]) <= at < first_current, q["id"]
