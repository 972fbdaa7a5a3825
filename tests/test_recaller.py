"""`api.Recaller` takes its settings as `api.recall` does (issue 21): keyword arguments, settings
from `api.settings(...)`, `SYNAPSE_*` variables and the config file; `Recaller(None)` opens the
default store. Real MiniLM embeddings over the README's demo conversation."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from synapse_cli import api
from synapse_cli.engine.config import SETTINGS

QUERY = "Where did Caroline go hiking last summer?"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("recaller") / "store"
    lines = (ROOT / "fixtures" / "demo.ndjson").read_text().splitlines()
    api.ingest([json.loads(line) for line in lines], store=path)
    return path


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch, tmp_path):
    """No SYNAPSE_* variable or config file of the user's; tests set their own."""
    for s in SETTINGS:
        monkeypatch.delenv(s.env, raising=False)
    monkeypatch.delenv("SYNAPSE_HOME", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _n(result: dict) -> int:
    assert result["rejected"] is False, result
    return len(result["results"])


def test_keyword_arguments_and_settings_objects(store):
    with api.Recaller(store) as r:
        assert _n(r.recall(QUERY, touch=False)) == 12  # default k = 30; the store holds 12
        assert _n(r.recall(QUERY, k=3, touch=False)) == 3
        assert _n(r.recall(QUERY, api.settings(k=2), touch=False)) == 2
        # a keyword wins over the settings object, as a flag wins over the variable
        assert _n(r.recall(QUERY, api.settings(k=2), k=4, touch=False)) == 4
        explained = r.recall(QUERY, k=1, explain=True, touch=False)["results"][0]
        assert explained["path"] and "Dolomites" in explained["text"]
        with pytest.raises(api.ConfigError, match="kk"):
            r.recall(QUERY, kk=3)


def test_environment_and_config_file_are_honoured_like_api_recall(store, monkeypatch,
                                                                  tmp_path):
    monkeypatch.setenv("SYNAPSE_K", "2")
    with api.Recaller(store) as r:
        assert _n(r.recall(QUERY, touch=False)) == 2
        assert _n(r.recall(QUERY, k=5, touch=False)) == 5  # the argument beats the variable
    assert _n(api.recall(QUERY, store=store, touch=False)) == 2  # the same as the function
    monkeypatch.delenv("SYNAPSE_K")
    config = tmp_path / "config" / "synapse" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[recall]\nk = 4\n")
    with api.Recaller(store) as r:
        assert _n(r.recall(QUERY, touch=False)) == 4
    config.write_text("[recall]\nk = 0\n")  # out of range: the error names the file
    with api.Recaller(store) as r, pytest.raises(api.ConfigError, match="config.toml"):
        r.recall(QUERY, touch=False)


def test_none_opens_the_default_store(store, monkeypatch):
    monkeypatch.setenv("SYNAPSE_HOME", str(store))
    with api.Recaller(None) as r:
        assert r.path == store
        assert "Dolomites" in r.recall(QUERY, k=1, touch=False)["results"][0]["text"]
    with api.Recaller() as r:
        assert r.path == store
