"""recall --verify (engine/recall/answer_check.py): the prompt, the reject rule, the real llama.cpp
model's yes/no log-odds, and the CLI flag end to end. How well the model separates answerable
from unanswerable questions is measured by bench/quality/locomo_recall.py --verify, not asserted here."""
from __future__ import annotations

import json
import math

import pytest

from conftest import ROOT, assert_clean_failure, run_cli
from synapse_cli.engine.recall.answer_check import (MAX_MEMORY_CHARS, AnswerChecker, VerifyConfig,
                                             build_prompt, memory_line)

MEMORIES = [{"speaker": "Caroline", "text": "I went hiking in the Dolomites with my sister Maya."},
            {"speaker": "Melanie", "text": "I painted a sunrise over the lake last summer."}]


def _result(results=MEMORIES, rejected=False):
    return {"query": "Where did Caroline go hiking?", "rejected": rejected,
            "results": [dict(r) for r in results]}


class FixedScore(AnswerChecker):
    """The reject rule alone: a checker whose model always answers with log-odds `s`."""

    def __init__(self, s):
        super().__init__(extractor=object())
        self.s, self.calls = s, []

    def score(self, query, results):
        self.calls.append((query, len(results)))
        return self.s


def test_prompt_holds_query_and_memories():
    p = build_prompt("Where did  Caroline\ngo hiking?", MEMORIES)
    assert "- Caroline: I went hiking in the Dolomites" in p
    assert "- Melanie: I painted a sunrise" in p
    assert "Question: Where did Caroline go hiking?" in p
    assert p.startswith("<|im_start|>system\n") and p.endswith("<|im_start|>assistant\n")
    long = memory_line({"text": "word " * 500})
    assert len(long) <= MAX_MEMORY_CHARS + 4 and long.endswith("...")
    assert memory_line({"text": "no speaker"}) == "no speaker"


def test_reject_rule():
    keep = FixedScore(0.5).check(_result(), VerifyConfig(threshold=0.0, memories=1))
    assert not keep["rejected"] and len(keep["results"]) == 2
    assert keep["verify"]["passed"] and keep["verify"]["memories"] == 1
    drop = FixedScore(-0.5).check(_result(), VerifyConfig(threshold=0.0))
    assert drop["rejected"] and drop["results"] == [] and not drop["verify"]["passed"]
    assert drop["verify"]["score"] == -0.5
    # what the gate rejected (or nothing returned) is not sent to the model
    c = FixedScore(1.0)
    assert "verify" not in c.check(_result(rejected=True), VerifyConfig())
    assert "verify" not in c.check(_result(results=[]), VerifyConfig())
    assert c.calls == []


@pytest.fixture(scope="module")
def checker():
    from synapse_cli.api import model_path

    return AnswerChecker(model_path(None), threads=2)  # the packaged SmolLM2 GGUF


def test_real_model_scores_are_deterministic_log_odds(checker):
    a = checker.score("Where did Caroline go hiking?", MEMORIES)
    b = checker.score("What is the name of Melanie's dog?", MEMORIES[1:])
    assert math.isfinite(a) and math.isfinite(b)
    assert checker.score("Where did Caroline go hiking?", MEMORIES) == pytest.approx(a, abs=1e-4)
    # the threshold decides, on the real score
    cfg_hi, cfg_lo = VerifyConfig(threshold=a + 1), VerifyConfig(threshold=a - 1)
    assert checker.check(_result(), cfg_hi)["rejected"]
    out = checker.check(_result(), cfg_lo)
    assert not out["rejected"] and out["verify"]["score"] == pytest.approx(a, abs=1e-3)


def test_cli_verify(tmp_path):
    store = tmp_path / "store"
    r = run_cli(["ingest", ROOT / "fixtures" / "demo.ndjson"], store)
    assert r.returncode == 0, r.stderr
    q = ["recall", "Where did Caroline go hiking?", "--no-touch", "--verify"]
    out = json.loads(run_cli(q + ["--verify-threshold", "-100"], store).stdout)
    assert not out["rejected"] and out["results"]
    assert out["verify"]["passed"] and out["verify"]["memories"] == 5
    assert math.isfinite(out["verify"]["score"])
    out = json.loads(run_cli(q + ["--verify-threshold", "100", "--verify-memories", "2"],
                             store).stdout)
    assert out["rejected"] and out["results"] == [] and out["verify"]["memories"] == 2
    # without --verify nothing is checked
    assert "verify" not in json.loads(run_cli(q[:-1], store).stdout)
    # no model where the settings point: one line, exit 66
    r = run_cli(q, store, env={"SYNAPSE_MODEL": tmp_path / "missing.gguf"})
    assert_clean_failure(r, 66)
    r = run_cli(q + ["--verify-memories", "0"], store)
    assert_clean_failure(r, 2)
