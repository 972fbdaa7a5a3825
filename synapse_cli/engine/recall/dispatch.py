"""`recall`: answer one query in the configured mode. The modes: `synapse` (the default pipeline,
synapse.py) and its baselines `vector`, `bm25`, `hybrid` (baselines.py), `synaptic` (seed 001,
synaptic.py) and `ecphory` (seed 002, ecphory.py)."""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np

from .. import graphview
from ..store import Store
from . import synapse

if TYPE_CHECKING:
    from .config import RecallConfig

MODES = ("synapse", "vector", "bm25", "hybrid", "synaptic", "ecphory")


def recall(store: Store, query: str, query_vec: np.ndarray, cfg: RecallConfig,
           arrays: graphview.RecallArrays | None = None, now_ms: int | None = None,
           embed=None) -> dict:
    """Answer one query; returns the JSON-ready result (see README "recall output").
    `embed(texts)`: the store's embedder, for what embeds more than the query (ecphory's cue,
    the topic check's words; without it the topic check is lexical only)."""
    from ..filters import check_filters

    cfg = dataclasses.replace(cfg, **check_filters(cfg))  # an iterator in cfg is read there
    t0 = time.perf_counter()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    arrays = arrays if arrays is not None else graphview.build(store)
    if cfg.mode == "synaptic":  # seed 001: its own pipeline (engine/recall/synaptic.py)
        from . import synaptic

        return synaptic.recall(store, query, query_vec, cfg, arrays, now_ms)
    if cfg.mode == "ecphory":  # seed 002: cue-driven centroid spreading (engine/recall/ecphory.py)
        from . import ecphory

        return ecphory.recall(store, query, query_vec, cfg, arrays, now_ms, embed)
    return synapse.run(store, query, query_vec, cfg, arrays, now_ms, embed, t0)
