"""The Python API: what `synapse ingest`, `consolidate` and `recall` do, as three functions.

    from synapse_cli import api

    api.ingest([{"text": "Met Ana at the climbing gym", "speaker": "me"}], store="mem/")
    api.consolidate(store="mem/")
    answer = api.recall("who did I meet?", store="mem/", k=5)

Each returns what the command prints with --json, as Python objects. `store` defaults like the
CLI's (`$SYNAPSE_HOME`, else `$XDG_DATA_HOME/synapse`). Settings (see `synapse config`) are
keyword arguments named by their key (`k=5`, `alpha=0.9`, `goal="..."`, `model="x.gguf"`) and
take precedence over `SYNAPSE_*` variables and the config file, exactly as flags do. For many
queries against one store, `Recaller` loads the embedder and the graph once.
Errors are exceptions: `InputError` (a bad item), `ConfigError`, `ModelNotFound`,
`ModelUnusable` (a file llama.cpp cannot load) and the `StoreError` family (store_format.errors).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterable

from store_format.errors import StoreError
from .engine import config
from .engine.config import ConfigError
from .engine.inputs import InputError
from .models.extractor import ModelNotFound, ModelUnusable
from .engine.paths import resolve_store
from .engine.service import Recaller

__all__ = ["ingest", "consolidate", "recall", "Recaller", "settings", "InputError",
           "ConfigError", "ModelNotFound", "ModelUnusable", "StoreError"]

_BY_KEY = {s.key: s.name for s in config.SETTINGS}


def settings(**overrides) -> config.Settings:
    """Effective settings, with `overrides` (setting keys) in the place of flags."""
    unknown = set(overrides) - set(_BY_KEY)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}", usage=True,
                          hint="`synapse config` lists every setting")
    return config.resolve({_BY_KEY[k]: v for k, v in overrides.items()})


def _split(kwargs: dict) -> tuple[dict, dict]:
    """(setting overrides, other keyword arguments)."""
    return ({k: v for k, v in kwargs.items() if k in _BY_KEY},
            {k: v for k, v in kwargs.items() if k not in _BY_KEY})


def _check_embedder(w, embedder) -> None:
    if w.manifest.embedder != embedder.name or w.manifest.dim != embedder.dim:
        raise ConfigError(f"store {w.path} was built with {w.manifest.embedder} "
                          f"(dim {w.manifest.dim}), not {embedder.name}",
                          hint="use the embedding model the store was created with "
                               "(SYNAPSE_EMBED_MODEL_DIR), or a new store", usage=True)


def ingest_items(items: list, store=None, *, lock_timeout: float = 30.0, embedder=None,
                 resolved: config.Settings | None = None, **overrides):
    """Ingest validated `inputs.Item`s in one transaction; returns an `IngestResult`.
    `resolved`: settings already resolved (else from `overrides`)."""
    from .engine.ingest import IngestConfig, ingest as run
    from .engine.store import StoreWriter
    from .models.embedder import get_embedder

    cfg = IngestConfig(**(resolved or settings(**overrides)).kwargs("ingest"))
    embedder = embedder or get_embedder()
    with StoreWriter.open(resolve_store(store), lock_timeout=lock_timeout, create=True,
                          embedder=embedder.name, dim=embedder.dim) as w:
        _check_embedder(w, embedder)
        return run(w, items, embedder, cfg)


def ingest(items: Iterable, store=None, **kwargs) -> list[dict]:
    """Store `items` (dicts of the NDJSON input schema, or plain strings) as episodic memories.

    One transaction: an invalid item raises `InputError` and nothing is stored. Returns one
    `{"id", "status", "where", "utility"}` per item (status stored, duplicate or gated)."""
    from .engine.inputs import item_from_object

    if isinstance(items, (str, bytes, dict)):  # iterating one would store its characters/keys
        raise TypeError("items must be a list of strings or dicts, not a single "
                        + ("dict" if isinstance(items, dict) else "string"))
    # a plain string is {"text": ...}: the same checks as the CLI's input (empty, NUL, length)
    parsed = [item_from_object({"text": obj} if isinstance(obj, str) else obj, f"item {n}")
              for n, obj in enumerate(items, 1)]
    if not parsed:
        return []
    result = ingest_items(parsed, store, **kwargs)
    return [o.as_dict() for o in result.outcomes]


def model_path(setting: str | None) -> str:
    """The GGUF file to use: the setting, else the packaged SmolLM2."""
    from .models.extractor import default_model_path

    try:
        path = setting or str(default_model_path())
    except FileNotFoundError as exc:
        raise ModelNotFound(str(exc)) from None
    if os.path.isdir(path):
        raise ModelNotFound(f"model {path}: is a directory, not a GGUF file")
    if not os.path.isfile(path):
        raise ModelNotFound(f"model {path}: no such file")
    check_gguf(path)
    return path


def check_gguf(path: str) -> None:
    """Refuse a file that is not GGUF before llama.cpp is asked to load it (its own failure is
    an exception with no reason given). An unreadable file is an OSError (exit 74)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelUnusable(f"model {path}: not a GGUF file (it does not start with \"GGUF\")")


def run_consolidate(store=None, *, lock_timeout: float = 30.0, max_seconds: float | None = None,
                    progress=None, extractor=None, embedder=None, **overrides):
    """Consolidate the store; returns a `ConsolidateResult` (see `consolidate`)."""
    from .engine.consolidate import ConsolidateConfig, consolidate as run
    from .engine.extract_cache import model_sha256
    from .engine.store import StoreWriter
    from .models.embedder import get_embedder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    s = settings(**overrides)
    path = model_path(s["extraction.model"]) if extractor is None else None
    cfg = ConsolidateConfig(**s.kwargs("consolidate"), max_seconds=max_seconds)
    with StoreWriter.open(resolve_store(store), lock_timeout=lock_timeout) as w:
        embedder = embedder or get_embedder()
        _check_embedder(w, embedder)
        if extractor is None:
            from .models.extractor import LlamaExtractor

            extractor = LlamaExtractor(path, threads=s["extraction.threads"],
                                       model_sha256=model_sha256(w.path, path))
        return run(w, extractor, embedder, cfg, progress=progress)


def consolidate(store=None, **kwargs) -> dict:
    """Turn unconsolidated episodes into semantic nodes and edges with the local model.

    `max_seconds` stops between windows; the summary's `left_windows` says what remains.
    Returns the summary `synapse consolidate --json` prints."""
    return run_consolidate(store, **kwargs).as_dict()


def recall(query: str, store=None, *, touch: bool = True, embedder=None, **kwargs) -> dict:
    """The memories that matter for `query`: `{"query", "rejected", "confidence", "results"}`.

    Keyword arguments are settings (`k`, `mode`, `alpha`, `tau_gate`, ...) or other
    `RecallConfig` fields (`explain`, `types`, `tags`, `since_ms`, `until_ms`)."""
    from .engine.recall import RecallConfig

    if not isinstance(query, str) or not query.strip():
        raise InputError("query", "empty query")
    overrides, rest = _split(kwargs)
    unknown = set(rest) - {f.name for f in dataclasses.fields(RecallConfig)}
    if unknown:
        raise ConfigError(f"unknown setting(s) or option(s): {', '.join(sorted(unknown))}",
                          usage=True, hint="`synapse config` lists every setting")
    cfg = RecallConfig(**{**settings(**overrides).kwargs("recall"), **rest})
    with Recaller(resolve_store(store), embedder=embedder) as r:
        return r.recall(query, cfg, touch=touch)


def store_path(store=None) -> Path:
    """Where the store is: `store`, else `$SYNAPSE_HOME`, else `$XDG_DATA_HOME/synapse`."""
    return resolve_store(store)
