"""What every recall mode starts from, on one snapshot: the header scan (dense similarity,
decay and importance of every record, with the filters applied), the filter wall, the top-k of
a score array, and the store's BM25 index opened once. Every mode imports these from here, none
from another mode's module: no circle between the modes."""
from __future__ import annotations

import numpy as np

from store_format.tags import encode_tags

from ..filters import TYPE_BITS
from ..store import Store


def scan_records(store: Store, query_vec: np.ndarray, cfg, now_ms: int, arrays):
    """(sim, decay, importance) per record position; sim is -inf where a record is tombstoned,
    archived as dormant (out of the active graph, FORMAT.md 16) or filtered out (tags exactly:
    engine/filters.py; with a time window, a semantic node also when one of the records it
    links is outside it: RecallArrays.reaching_outside).
    `arrays` (RecallArrays): its cache keeps each segment's int8 vector norms from the first
    query of a snapshot, so later scans make one pass over each vector, not two (a vector
    rewritten in place after that, e.g. a semantic node's EMA update, keeps its old norm until
    the next snapshot, like the graph and BM25 do). `cfg`: what RecallConfig says of types,
    tags and the time window."""
    from ...kernels.header_scan import scan

    cache = arrays.cache

    type_mask = 0b1111
    if cfg.types:
        type_mask = sum(TYPE_BITS[t] for t in cfg.types)
    tag_query = encode_tags(cfg.tags) if cfg.tags else 0
    norms = cache.setdefault("inv_norms", {})
    t_min = cfg.since_ms or 0
    t_max = cfg.until_ms if cfg.until_ms is not None else 2**63 - 1
    n = sum(s.n for s in store.segments)
    sim, dec, imp = (np.empty(n, np.float32) for _ in range(3))
    start = 0
    for k, s in enumerate(store.segments):
        if not s.n:
            continue
        ready = k in norms
        inv = norms[k] if ready else np.empty(s.n, np.float32)
        end = start + s.n
        scan(s.raw, s.header.header_version, s.header.dim, query_vec, now_ms,
             type_mask=type_mask, t_min=t_min, t_max=t_max,
             tag_query=tag_query, inv_norm=inv, inv_norm_ready=ready,
             out=(sim[start:end], dec[start:end], imp[start:end]))
        norms[k] = inv
        start = end
    if cfg.since_ms is not None or cfg.until_ms is not None:
        sim[arrays.reaching_outside(t_min, t_max)] = -np.inf
    if cfg.tags:  # the kernel checked the Bloom bits; the payload's tags decide
        from ..filters import tag_mask

        sim[~tag_mask(store, cfg.tags, cache)] = -np.inf
    if arrays.dormant.any():
        sim[arrays.dormant] = -np.inf
    return sim, dec, imp


def walled(cfg) -> bool:
    """A tag or time filter is a wall: the records outside it are neither returned nor carry
    activation (and so never appear in an --explain path), since a tag is how users and agents
    are kept apart and a time window is what was known then. A type filter only chooses what is
    returned: semantic nodes still carry activation between the episodes it lets through."""
    return bool(cfg.tags) or cfg.since_ms is not None or cfg.until_ms is not None


def bm25_open(store: Store, cache: dict):
    """The store's BM25 index, opened once per snapshot, whatever its live set (for what does
    not depend on it: the vocabulary, document lengths)."""
    from ...models.bm25 import BM25Index

    if "bm25" not in cache:
        cache["bm25"] = BM25Index.open(store.path, store.manifest.bm25)
        cache.pop("bm25_live", None)  # a fresh index has every record live
    return cache["bm25"]


def top(scores: np.ndarray, k: int, floor: float = -np.inf) -> np.ndarray:
    """Positions of the k best scores above `floor`, best first, ties to the lower position
    (-inf marks records the scan filtered out)."""
    from ...kernels.ranking import top_k

    return top_k(scores, k, floor)
