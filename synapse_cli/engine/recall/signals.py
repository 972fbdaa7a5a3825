"""The signals of the default pipeline (synapse.py) and of the baselines, per record position of
one snapshot: the header scan's similarity, decay and importance (scan.py), BM25 from the
persisted postings, and, in mode `synapse`, the spreading activation from the anchors (dual
trigger) and PageRank."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from store_format import flags as fl

from .. import graphview
from ..store import Store
from .scan import bm25_open, scan_records, top as _top, walled

if TYPE_CHECKING:
    from .config import RecallConfig


@dataclass
class Signals:
    sim: np.ndarray
    decay: np.ndarray
    importance: np.ndarray
    bm25: np.ndarray
    activation: np.ndarray
    pagerank: np.ndarray
    pred: np.ndarray | None = None
    anchors: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    no_result: np.ndarray | None = None   # bool per position: may not be returned
    bonus: np.ndarray | None = None       # float per position added to the fused score
    graph: tuple | None = None            # (indptr, indices, weights, types) the wave ran on


def visible(store: Store, arrays: graphview.RecallArrays, until_ms: int | None,
            tags=()) -> np.ndarray:
    """bool [n]: the records a recall may see, whose words count for its BM25 statistics and
    its gate's vocabulary: live (not in the trash, not archived), formed by `until_ms` (None:
    now), as `--as-of` asks, and carrying every one of `tags` (tags are how users are kept
    apart). A type or `--since` filter only chooses what is returned and is not here."""
    from ..filters import tag_mask

    seen = ~fl.is_tombstone(arrays.flags)
    if arrays.dormant is not None:
        seen &= ~arrays.dormant
    if until_ms is not None:
        seen &= arrays.timestamps <= until_ms
    if tags:
        seen &= tag_mask(store, tags, arrays.cache)
    return seen


def _bm25_index(store: Store, arrays: graphview.RecallArrays, until_ms: int | None, *, tags):
    """The store's BM25 index, opened once per snapshot (its cache lives on the RecallArrays),
    its statistics (df, document count, avgdl) over the records the recall may see (visible).
    So a tagged recall in a shared store ranks exactly as the user's own store would; with the
    whole store's statistics another user's records moved every IDF
    (bench/quality/agent_use.py --shared tagged). A tiny scope is then as degenerate as a tiny
    store: rank-bm25 gives a word in half of the live documents IDF 0."""
    from store_format.tags import normalize_tag

    cache = arrays.cache
    index = bm25_open(store, cache)
    key = (until_ms, frozenset(normalize_tag(t) for t in tags) - {""})
    if cache.get("bm25_live", ()) != key:
        seen = visible(store, arrays, until_ms, key[1])
        index.set_live(None if seen.all() else arrays.ids[seen])
        cache["bm25_live"] = key
    return index


def _bm25(store: Store, query: str, arrays: graphview.RecallArrays, passed: np.ndarray,
          until_ms: int | None = None, variant_weight: float = 0.0, *, tags) -> np.ndarray:
    """BM25 score per record position (0 for records without postings or filtered out), with
    the statistics of `until_ms` and `tags` (_bm25_index); `variant_weight`: see
    BM25Index.scores."""
    ids, cache = arrays.ids, arrays.cache
    if store.manifest.bm25 is None:
        return np.zeros(len(ids), np.float64)
    index = _bm25_index(store, arrays, until_ms, tags=tags)
    docs, scores = index.scores(query, live_only=False,  # dead documents score 0
                                variant_weight=variant_weight)
    if "bm25_pos" not in cache:  # document -> record position, once per snapshot
        pos = np.searchsorted(ids, docs)
        ok = pos < len(ids)
        ok[ok] = ids[pos[ok]] == docs[ok]
        same = len(docs) == len(ids) and bool(ok.all())  # usual: every record indexed
        cache["bm25_pos"] = None if same else (pos[ok], ok)
    where = cache["bm25_pos"]
    if where is None:
        out = scores
    else:
        out = np.zeros(len(ids), np.float64)
        out[where[0]] = scores[where[1]]
    if not passed.all():
        out[~passed] = 0.0
    return out


def _norm(x: np.ndarray) -> np.ndarray:
    top = float(x.max()) if len(x) else 0.0
    return x / top if top > 0 else np.zeros_like(x)


def _word_scores(store: Store, query: str, record_ids: np.ndarray, arrays: graphview.RecallArrays,
                 until_ms: int | None, variant_weight: float, *,
                 tags) -> tuple[list[str], np.ndarray]:
    """Each query word's BM25 share for each of `record_ids` (BM25Index.word_scores), with
    the statistics of `until_ms` and `tags` (_bm25_index)."""
    if store.manifest.bm25 is None:
        from ...models.tokenize import tokenize

        words = sorted(set(tokenize(query)))
        return words, np.zeros((len(words), len(record_ids)))
    return _bm25_index(store, arrays, until_ms, tags=tags).word_scores(query, record_ids,
                                                                        variant_weight)


def compute_signals(store: Store, arrays: graphview.RecallArrays, query: str,
                    query_vec: np.ndarray, cfg: RecallConfig, now_ms: int,
                    embed=None) -> Signals:
    sim, dec, imp = scan_records(store, query_vec, cfg, now_ms, arrays)
    if cfg.mode == "synapse" and cfg.name_free_sim > 0 and embed is not None:
        from .speakers import without_speakers

        bare = without_speakers(store, arrays, query, cfg.tags)
        if bare is not None:
            bare_sim = scan_records(store, embed([bare])[0], cfg, now_ms, arrays)[0]
            w = np.float32(cfg.name_free_sim)
            sim = np.where(np.isfinite(sim), (1 - w) * sim + w * bare_sim, sim)
    passed = np.isfinite(sim)
    bm25 = (_bm25(store, query, arrays, passed, cfg.until_ms,
                  cfg.variant_weight if cfg.mode == "synapse" else 0.0, tags=cfg.tags)
            if cfg.mode != "vector" else np.zeros(len(sim)))
    n = len(sim)
    act = np.zeros(n, np.float32)
    pr = np.zeros(n, np.float32)
    pred = graph = None
    anchors = np.zeros(0, np.int64)
    no_result = None  # the default mode returns no semantic node unless they are asked for
    if cfg.mode == "synapse" and not cfg.semantic_results and not cfg.types:
        semantic = arrays.semantic()
        no_result = semantic if semantic.any() else None
    if cfg.mode == "synapse" and n:
        anchors = _anchors(sim, bm25, arrays, cfg)
        if cfg.activation:
            from ...kernels.activation import activate

            if cfg.graph:
                # behind a wall, the graph of what it lets through, hubs counted there
                wall = passed if walled(cfg) and not passed.all() else None
                indptr, indices, weights, types = arrays.without_hubs(cfg.hub_share, wall)
            else:
                indptr, indices = np.zeros(n + 1, np.int64), np.zeros(0, np.int32)
                weights, types = np.zeros(0, np.float32), np.zeros(0, np.uint8)
            anchor_sims = np.maximum(sim[anchors], 0)
            if cfg.anchor_energy == "fused":
                # relative to the best BM25 of what may be returned, as in synapse.rank: a
                # node's short "name desc" text often scores highest and shrank every episode
                # anchor's energy
                returnable = bm25 if no_result is None else bm25[~no_result]
                top_bm25 = float(returnable.max()) if len(returnable) else 0.0
                lexical = bm25[anchors] / top_bm25 if top_bm25 > 0 else 0.0
                anchor_sims = 0.5 * (anchor_sims + lexical)
            anchor_sims = anchor_sims.astype(np.float32)
            graph = (indptr, indices, weights, types)
            act, pred = activate(indptr, indices, weights, types, arrays.timestamps,
                                 anchors.astype(np.int32), anchor_sims, alpha=cfg.alpha, S=cfg.S,
                                 delta=cfg.delta, rho=cfg.rho, beta=cfg.beta if cfg.inhibition else 0.0,
                                 M=cfg.M, gamma=cfg.gamma, theta=cfg.theta, T=cfg.T,
                                 use_fan=cfg.fan, use_inhibition=cfg.inhibition,
                                 frontier_only=True, validate=False)
            act[~passed] = 0
        # only when it counts: PageRank is over every user's records, so under a tag filter
        # even the reported signal would tell what others add (README "Keeping users apart")
        if cfg.graph and len(arrays.indices) and cfg.lambda_pr != 0:
            pr = arrays.cache.get("pagerank")
            if pr is None:  # a property of the graph, not of the query: once per snapshot,
                from ..pagerank_cache import pagerank_for  # from consolidation's cache if fresh

                pr = arrays.cache["pagerank"] = pagerank_for(store, arrays)
    return Signals(sim, dec, imp, bm25, act, pr, pred, anchors, no_result, graph=graph)


def _anchors(sim: np.ndarray, bm25: np.ndarray, arrays: graphview.RecallArrays,
             cfg: RecallConfig) -> np.ndarray:
    """Positions that seed the activation, each at `anchor_min_sim` or more: the top
    `anchors_k` episodes of each trigger (cosine, BM25) and, on a consolidated store, the
    `node_anchors` semantic nodes closest to the query. Separate places: a node that took an
    episode's place cost the episode that holds the date or detail the node does not say
    (bench/quality/consolidation_recall.py)."""
    node = arrays.semantic()
    dense = _top(np.where(node, -np.inf, sim), cfg.anchors_k)
    if cfg.node_anchors > 0 and node.any():
        dense = np.union1d(dense, _top(np.where(node, sim, -np.inf), cfg.node_anchors))
    lexical = _top(np.where(node, 0.0, bm25), cfg.anchors_k, 0.0)  # 0: filtered by the scan
    anchors = np.union1d(dense, lexical)
    anchors = anchors[sim[anchors] >= cfg.anchor_min_sim]
    # Nodes seed activation only beside an episode (unless a type filter leaves no episode): a
    # node's derived text ("Dockerfile [TYPE] ...") sits a little closer to an unrelated
    # question than its episode does, and alone it let "How do I make a sourdough starter?"
    # through the gate of a consolidated store whose episodes reach nothing (agent-use;
    # consolidated LoCoMo dev recall@10 unchanged).
    if (~node[anchors]).any() or not np.isfinite(sim[~node]).any():
        return anchors
    return anchors[:0]


def result_row(arrays: graphview.RecallArrays, pos: int, body: dict, score: float,
               signals: dict, digits: int = 6) -> dict:
    """One result as every mode returns it: the record, its score, the mode's own signals, and
    the metadata its body holds (README "recall output")."""
    r = {"id": int(arrays.ids[pos]), "text": body.get("text"),
         "score": round(float(score), digits), "signals": signals,
         "timestamp": int(arrays.timestamps[pos]),
         "type": fl.memory_type(int(arrays.flags[pos])).name.lower(),
         "speaker": body.get("speaker"), "session": body.get("session")}
    for extra in ("source", "dia_id", "chunk"):  # chunk: [start, end) in a `--format doc` file
        if body.get(extra) is not None:
            r[extra] = body[extra]
    return r
