"""The arrays recall works on: every committed record in id order, with the graph mapped onto
record positions (the stored CSR only has rows for records that have edges). Edges touching a
tombstoned or archived (dormant, FORMAT.md 16) record are dropped."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store_format import dormancy as dm
from store_format import flags as fl
from store_format import graph_files as gf
from store_format import spikes as sp
from store_format.headers import HEADER_BYTES

from .store import Store


# A node with this many edges or fewer is never a hub, whatever the store's size: in a store of
# twelve episodes, 0.2 of them is 2.4, and the node of a person three lines name ("her sister
# Maya") is exactly the bridge the graph is for. A speaker's node, linked to all her turns, is
# over it in any real conversation. No LoCoMo or agent-use store is small enough to notice.
HUB_MIN_EDGES = 5


@dataclass
class RecallArrays:
    ids: np.ndarray          # u64 [n], record ids in position order
    timestamps: np.ndarray   # i64 [n]
    flags: np.ndarray        # u8 [n]
    indptr: np.ndarray       # i64 [n+1], out-edges per record position
    indices: np.ndarray      # i32 [m], destination positions
    weights: np.ndarray      # f32 [m]
    types: np.ndarray        # u8 [m]
    spikes: np.ndarray = field(default_factory=lambda: np.zeros(0, sp.ENTRY_DTYPE))  # the log
    dormant: np.ndarray | None = None  # bool [n]: archived by dormancy (FORMAT.md 16)
    # per-snapshot results recall reuses across queries (BM25 index, PageRank); filled lazily
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    def spike_trains(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr int64[n+1], times_ms int64[m]) by record position: each record's timestamp,
        then its logged spikes, ascending (store_format.spikes.trains)."""
        if "spike_trains" not in self.cache:
            self.cache["spike_trains"] = sp.trains(self.spikes, self.ids, self.timestamps)
        return self.cache["spike_trains"]

    def semantic(self) -> np.ndarray:
        """bool [n]: the record is a semantic node (consolidate's people, places, things)."""
        if "semantic" not in self.cache:
            self.cache["semantic"] = fl.memory_type_code(self.flags) == fl.MemoryType.SEMANTIC
        return self.cache["semantic"]

    def reaching_outside(self, t_min: int, t_max: int) -> np.ndarray:
        """bool [n]: semantic nodes linked to a record whose time is outside [t_min, t_max]. A
        node's text, vector and relations hold what every episode that names it said, so a
        node that a later episode enriched would tell a time-filtered recall what was said after
        the window ("Berlin marathon ... finished in 3 hours 52" for --as-of June)."""
        window, mask = self.cache.get("outside", (None, None))
        if window != (t_min, t_max):  # only the last window is kept: a server sees many
            src = np.repeat(np.arange(self.n), np.diff(self.indptr))
            t = self.timestamps[self.indices]
            mask = np.zeros(self.n, bool)
            mask[src[(t < t_min) | (t > t_max)]] = True
            mask &= self.semantic()
            self.cache["outside"] = ((t_min, t_max), mask)
        return mask

    def without_hubs(self, share: float,
                     within: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """(indptr, indices, weights, types) without the edges of hub nodes: semantic nodes
        linked to more than `share` of the episodes and to more than HUB_MIN_EDGES records
        (once per snapshot and share). `within` (bool [n]): the graph of those records alone
        (a tag or time wall), its hubs counted among its own episodes, so that what other
        users store does not decide whether a user's node is a hub."""
        graph = (self.indptr, self.indices, self.weights, self.types)
        semantic = self.semantic()
        if within is not None:
            return _drop_hubs(subgraph(graph, within), semantic & within,
                              np.count_nonzero(within & ~semantic), share)
        key = ("hubless", share)
        if key not in self.cache:
            self.cache[key] = _drop_hubs(graph, semantic, np.count_nonzero(~semantic), share)
        return self.cache[key]

    def __post_init__(self):
        if self.dormant is None:
            self.dormant = np.zeros(len(self.ids), bool)

    @property
    def n(self) -> int:
        return len(self.ids)



def _drop_hubs(graph: tuple, semantic: np.ndarray, episodes: int,
               share: float) -> tuple[np.ndarray, ...]:
    """`graph` without the edges of the `semantic` nodes linked to more than `share` of its
    `episodes` and to more than HUB_MIN_EDGES records."""
    outdeg = np.diff(graph[0])
    limit = max(share * episodes, HUB_MIN_EDGES)
    hub = semantic & (outdeg > limit)
    return subgraph(graph, ~hub) if hub.any() else graph


def subgraph(graph: tuple, keep: np.ndarray) -> tuple[np.ndarray, ...]:
    """(indptr, indices, weights, types) of `graph` without the edges that touch a position
    where `keep` (bool [n]) is False."""
    indptr, indices, weights, types = graph
    n = len(indptr) - 1
    src = np.repeat(np.arange(n), np.diff(indptr))
    ok = keep[src] & keep[indices]
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src[ok], minlength=n), out=out[1:])
    return out, indices[ok], weights[ok], types[ok]


# Activation that crosses a semantic node is weighted like a word in IDF: a node that 3 of 600
# episodes mention is a strong bridge between them, a node that 60 mention (a speaker, "today")
# a weak one. Each ABSTRACTION edge into or out of a semantic node is scaled by
# log(N / df) / log(N), N = live episodes, df = the node's episodes (1 for df = 1, 0 for a node
# linked to every episode). Measured on the consolidated LoCoMo dev stores:
# bench/quality/consolidation_recall.py. False: the weights as stored.
# Off since the query's similarity leaves out the speakers' names (score.name_free_sim): on
# the conversations the consolidation changes are chosen on (conv-26, conv-30), recall@10 over
# 1-4 on consolidated stores 74.67 / 73.59 with this and KEEP_TEMPORAL_FAN off, 71.28 / 70.63
# with both on (fresh 72.06 / 71.35); the rows no-idf, no-fan-compensation, stored-weights.
SEMANTIC_IDF = False
IDF_OUT = True  # also scale the node -> episode direction (the fan effect already divides it)


def semantic_idf(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray,
                 types: np.ndarray, flags: np.ndarray, live: np.ndarray) -> np.ndarray:
    """`weights` (f32 [m]) with every ABSTRACTION edge that touches a semantic node scaled by
    that node's IDF (see SEMANTIC_IDF); positions by `indptr` (i64 [n+1]) / `indices`
    (i32 [m]); `live` (bool [n]) the records that count as episodes."""
    n = len(indptr) - 1
    semantic = fl.memory_type_code(flags) == fl.MemoryType.SEMANTIC
    if not semantic.any() or not len(indices):
        return weights
    src = np.repeat(np.arange(n), np.diff(indptr))
    dst = indices.astype(np.int64)
    abst = types == gf.ABSTRACTION
    to_episode = abst & semantic[src] & ~semantic[dst]
    df = np.bincount(src[to_episode], minlength=n).astype(np.float64)
    episodes = max(int(np.count_nonzero(live & ~semantic)), 2)
    idf = np.clip(np.log(episodes / np.maximum(df, 1.0)) / np.log(episodes), 0.0, 1.0)
    factor = np.ones(len(indices), np.float64)
    touch_src = abst & semantic[src]
    touch_dst = abst & semantic[dst]
    if IDF_OUT:
        factor[touch_src] *= idf[src[touch_src]]
    factor[touch_dst & ~touch_src] *= idf[dst[touch_dst & ~touch_src]]
    return (weights * factor).astype(np.float32)


# The fan effect divides what a record passes on by its out-degree, so every edge consolidation
# adds to an episode (one per node that names it) thins what it passes to its neighbours in time:
# on the consolidated LoCoMo dev stores that alone cost more recall than the semantic edges
# brought (bench/quality/consolidation_recall.py, rows no-fan-compensation and no-semantic-edges). With
# this on, an episode's TEMPORAL out-edges are scaled by (out-degree / temporal out-degree): the
# wave along a session is what it is in a store never consolidated, and the semantic edges add
# to it. False: the weights as stored (the default now: see SEMANTIC_IDF).
KEEP_TEMPORAL_FAN = False


def keep_temporal_fan(indptr: np.ndarray, weights: np.ndarray, types: np.ndarray,
                      flags: np.ndarray) -> np.ndarray:
    """`weights` (f32 [m]) with each episode's TEMPORAL out-edges scaled by its out-degree over
    its temporal out-degree (see KEEP_TEMPORAL_FAN); semantic records unchanged."""
    n = len(indptr) - 1
    if not len(weights):
        return weights
    src = np.repeat(np.arange(n), np.diff(indptr))
    temporal = types == gf.TEMPORAL
    deg = np.diff(indptr).astype(np.float64)
    tdeg = np.bincount(src[temporal], minlength=n).astype(np.float64)
    semantic = fl.memory_type_code(flags) == fl.MemoryType.SEMANTIC
    scale = np.where((tdeg > 0) & ~semantic, deg / np.maximum(tdeg, 1.0), 1.0)
    return np.where(temporal, weights * scale[src], weights).astype(np.float32)


def unit_vectors(store: Store, pos: np.ndarray) -> np.ndarray:
    """Unit float32 vectors [len(pos), dim] of the records at positions `pos` (int8
    dequantised), positions in recall's order (non-empty segments, one after the other)."""
    segs, start = [], 0
    for s in store.segments:
        if s.n:
            segs.append((s, start))
            start += s.n
    starts = np.array([b for _, b in segs], np.int64)
    pos = np.asarray(pos, np.int64)
    dim = store.manifest.dim
    out = np.zeros((len(pos), dim), np.float32)
    which = np.searchsorted(starts, pos, side="right") - 1
    for k, (s, b) in enumerate(segs):
        rows = np.flatnonzero(which == k)
        if not len(rows):
            continue
        hb = HEADER_BYTES[s.header.header_version]
        rec = np.asarray(s.raw)[pos[rows] - b]
        out[rows] = rec[:, hb:hb + dim].view(np.int8).astype(np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)


def build(store: Store) -> RecallArrays:
    ids = store.ids
    n = len(ids)
    ts = np.concatenate([np.asarray(s.headers["timestamp_ms"], np.int64) for s in store.segments]) \
        if store.segments else np.zeros(0, np.int64)
    flags = np.concatenate([np.asarray(s.headers["flags"], np.uint8) for s in store.segments]) \
        if store.segments else np.zeros(0, np.uint8)
    dormant = np.isin(ids, dm.archived_ids(store.path, store.manifest.dormancy))
    g = store.graph()
    indptr = np.zeros(n + 1, np.int64)
    if g.n_edges and n:
        # Graph node ids -> record positions; an edge to a record this snapshot lacks is dropped.
        row_pos = np.searchsorted(ids, g.node_ids)
        row_ok = (row_pos < n) & (ids[np.minimum(row_pos, n - 1)] == g.node_ids)
        counts = np.diff(g.indptr.astype(np.int64))
        src = np.repeat(row_pos, counts)
        src_ok = np.repeat(row_ok, counts)
        dst = row_pos[g.indices.astype(np.int64)]
        dst_ok = row_ok[g.indices.astype(np.int64)]
        keep = src_ok & dst_ok
        # A tombstoned record is in the trash (FORMAT.md 14.1): no activation flows through it
        # and it takes no part in PageRank, exactly as after compaction removed it. An archived
        # (dormant) node is out of the active graph the same way until it is woken (16).
        dead = fl.is_tombstone(flags) | dormant
        keep[keep] &= ~dead[src[keep]] & ~dead[dst[keep]]
        src, dst = src[keep], dst[keep]
        order = np.argsort(src, kind="stable")
        src, dst = src[order], dst[order]
        weights = np.asarray(g.weights)[keep][order]
        types = np.asarray(g.types)[keep][order]
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        indices = dst.astype(np.int32)
        if SEMANTIC_IDF:
            weights = semantic_idf(indptr, indices, np.asarray(weights, np.float32), types,
                                   flags, ~dead)
        if KEEP_TEMPORAL_FAN:
            weights = keep_temporal_fan(indptr, np.asarray(weights, np.float32), types, flags)
    else:
        indices = np.zeros(0, np.int32)
        weights = np.zeros(0, np.float32)
        types = np.zeros(0, np.uint8)
    return RecallArrays(ids, ts, flags, indptr, indices, np.ascontiguousarray(weights, np.float32),
                        np.ascontiguousarray(types, np.uint8), store.spike_entries(), dormant)
