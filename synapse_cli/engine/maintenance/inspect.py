"""`inspect`: what is in a store (summary) and everything about one record."""
from __future__ import annotations

from collections import Counter

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf
from store_format.fileio import file_sizes
from store_format.headers import HEADER_BYTES

from ..filters import tag_mask
from ..store import Store

EDGE_TYPES = {gf.TEMPORAL: "temporal", gf.ABSTRACTION: "abstraction",
              gf.ASSOCIATION: "association", gf.RELATION: "relation"}


def summary(store: Store, within=()) -> dict:
    """The store's summary; with `within` (a scope's tags) only the records carrying every one
    of them are counted, and the store-wide parts (edges, segments, bytes) are left out."""
    m = store.manifest
    scope = tag_mask(store, within) if within else np.ones(len(store.ids), bool)
    start = 0
    by_type: Counter = Counter()
    by_flag: Counter = Counter()
    versions: Counter = Counter()
    prev_id = 0
    for seg in store.segments:
        # The counts read every record's header: refuse one that fails its CRC or validation.
        seg.check(prev_id=prev_id, payload_bytes=m.payload.bytes)
        prev_id = int(seg.ids[-1]) if seg.n else prev_id
        versions[seg.header.header_version] += seg.n
        if not seg.n:
            continue
        mine, start = scope[start:start + seg.n], start + seg.n
        flags = np.asarray(seg.headers["flags"])[mine]
        live = ~fl.is_tombstone(flags)
        types = (flags & fl.MEMORY_TYPE_MASK) >> fl.MEMORY_TYPE_SHIFT
        for t in fl.MemoryType:
            by_type[t.name.lower()] += int(np.count_nonzero(live & (types == t)))
        by_flag["tombstone"] += int(np.count_nonzero(~live))
        for name, bit in (("consolidated", fl.CONSOLIDATED), ("pinned", fl.PINNED),
                          ("resolved", fl.RESOLVED)):
            by_flag[name] += int(np.count_nonzero(live & ((flags & bit) != 0)))
    records = {"total": int(scope.sum()), "by_type": dict(by_type), "by_flag": dict(by_flag)}
    if within:
        return {"store": str(store.path), "store_id": m.store_id, "scope": list(within),
                "records": records,
                "note": "counts of the records in the scope only; the store-wide parts of the "
                        "summary (edges, segments, bytes on disk) are not shown under a scope"}
    g = store.graph()
    edges = {EDGE_TYPES[int(t)]: int(np.count_nonzero(g.types == t)) for t in np.unique(g.types)}
    files = dict(sorted(file_sizes(store.path).items()))
    return {
        "store": str(store.path),
        "store_id": m.store_id,
        "generation": m.generation,
        "header_version": m.header_version,
        "header_bytes": HEADER_BYTES[m.header_version],
        "dim": m.dim,
        "embedder": m.embedder,
        "records": records,
        "segments": [{"file": s.file, "records": s.records,
                      "header_version": r.header.header_version}
                     for s, r in zip(m.segments, store.segments)],
        "header_versions": {f"v{v}": n for v, n in sorted(versions.items())},
        # which tokenizer BM25 reads text with (FORMAT.md 11; None before the first ingest):
        # an older store keeps its own until its records move to a new store
        "bm25_tokenizer": _tokenizer_version(store),
        "edges": {"total": g.n_edges, "by_type": edges},
        "bytes": {"total": sum(files.values()), "files": files},
    }


def _tokenizer_version(store: Store) -> int | None:
    from ...models.bm25 import read_version

    c = store.manifest.bm25 or {}
    found = [read_version(store.path / c[f], c[f"{f}_bytes"]) for f in ("vocab", "log") if f in c]
    return next((v for v in found if v is not None), None)


def record(store: Store, record_id: int, within=()) -> dict:
    """Every header field decoded, the payload, and the edges in and out (KeyError if absent);
    with `within` (a scope's tags), only the edges whose other end carries every one of them."""
    seg, row = store.locate(record_id)
    h = store.header(record_id)
    header = {k: v for k, v in vars(h).items()}
    header["flags_decoded"] = {k: (v.name.lower() if isinstance(v, fl.MemoryType) else v)
                               for k, v in fl.decode_flags(h.flags).items()}
    header["synaptic_tags"] = f"0x{h.synaptic_tags:016x}"
    g = store.graph()
    out_edges, in_edges = [], []
    pos = int(np.searchsorted(g.node_ids, np.uint64(record_id)))
    if pos < g.n_nodes and int(g.node_ids[pos]) == record_id:
        lo, hi = int(g.indptr[pos]), int(g.indptr[pos + 1])
        for k in range(lo, hi):
            out_edges.append({"to": int(g.node_ids[g.indices[k]]), "type": EDGE_TYPES[int(g.types[k])],
                              "weight": float(g.weights[k])})
        rows = np.repeat(np.arange(g.n_nodes), np.diff(g.indptr.astype(np.int64)))
        for k in np.nonzero(g.indices == pos)[0]:
            in_edges.append({"from": int(g.node_ids[rows[k]]), "type": EDGE_TYPES[int(g.types[k])],
                             "weight": float(g.weights[k])})
    if within:
        scope = tag_mask(store, within)
        inside = {int(i) for i in store.ids[scope]}
        out_edges = [e for e in out_edges if e["to"] in inside]
        in_edges = [e for e in in_edges if e["from"] in inside]
    where = {} if within else {  # under a scope: a position counts every user's records
        "segment": store.manifest.segments[seg].file, "index": row}
    return {
        "id": int(record_id),
        **where,
        "header_version": store.segments[seg].header.header_version,
        "header": header,
        "payload": store.body(record_id),
        "edges": {"out": out_edges, "in": in_edges},
    }
