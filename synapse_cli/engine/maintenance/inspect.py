"""`inspect`: what is in a store (summary) and everything about one record."""
from __future__ import annotations

from collections import Counter

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf
from store_format.fileio import file_sizes
from store_format.headers import HEADER_BYTES

from ..store import Store

EDGE_TYPES = {gf.TEMPORAL: "temporal", gf.ABSTRACTION: "abstraction",
              gf.ASSOCIATION: "association", gf.RELATION: "relation"}


def summary(store: Store) -> dict:
    m = store.manifest
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
        flags = np.asarray(seg.headers["flags"])
        live = ~fl.is_tombstone(flags)
        types = (flags & fl.MEMORY_TYPE_MASK) >> fl.MEMORY_TYPE_SHIFT
        for t in fl.MemoryType:
            by_type[t.name.lower()] += int(np.count_nonzero(live & (types == t)))
        by_flag["tombstone"] += int(np.count_nonzero(~live))
        for name, bit in (("consolidated", fl.CONSOLIDATED), ("pinned", fl.PINNED),
                          ("resolved", fl.RESOLVED)):
            by_flag[name] += int(np.count_nonzero(live & ((flags & bit) != 0)))
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
        "records": {"total": store.count, "by_type": dict(by_type), "by_flag": dict(by_flag)},
        "segments": [{"file": s.file, "records": s.records,
                      "header_version": r.header.header_version}
                     for s, r in zip(m.segments, store.segments)],
        "header_versions": {f"v{v}": n for v, n in sorted(versions.items())},
        "edges": {"total": g.n_edges, "by_type": edges},
        "bytes": {"total": sum(files.values()), "files": files},
    }


def record(store: Store, record_id: int) -> dict:
    """Every header field decoded, the payload, and the edges in and out (KeyError if absent)."""
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
    return {
        "id": int(record_id),
        "segment": store.manifest.segments[seg].file,
        "index": row,
        "header_version": store.segments[seg].header.header_version,
        "header": header,
        "payload": store.body(record_id),
        "edges": {"out": out_edges, "in": in_edges},
    }
