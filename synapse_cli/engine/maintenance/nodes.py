"""The semantic graph as a reader sees it: find nodes by name, open one with its edges and the
episodes it came from. Used by `synapse mcp` (and the Python API) to browse what consolidation
built, the way the reference MCP memory server lets an agent open its entities."""
from __future__ import annotations

import numpy as np

from store_format import flags as fl

from ..filters import exact_tags
from ..store import Store
from .inspect import EDGE_TYPES

# How many episodes and linked nodes `node` lists (a hub can link thousands).
MAX_LISTED = 50


def _semantic_ids(store: Store) -> np.ndarray:
    """Ids of live semantic records, in id order."""
    out = []
    for seg in store.segments:
        if not seg.n:
            continue
        flags = np.asarray(seg.headers["flags"])
        types = (flags & fl.MEMORY_TYPE_MASK) >> fl.MEMORY_TYPE_SHIFT
        keep = (types == fl.MemoryType.SEMANTIC) & ~fl.is_tombstone(flags)
        out.append(np.asarray(seg.ids)[keep])
    return np.concatenate(out) if out else np.zeros(0, np.uint64)


def _summary(rid: int, body: dict) -> dict:
    return {"id": rid, "name": body.get("name", ""), "type": body.get("etype", ""),
            "description": body.get("desc", ""), "mentions": len(body.get("sources", []))}


def find(store: Store, name: str, limit: int = 20, within=()) -> list[dict]:
    """Semantic nodes whose name contains `name` (case-insensitive): exact names first, then
    the nodes more episodes mention. An empty `name` lists every node that way. `within` (a
    scope's normalised tags): only the nodes that carry all of them, which consolidation built
    from memories that all carry them (FORMAT.md 13.3)."""
    want = name.casefold().strip()
    ids = _semantic_ids(store).tolist()
    hits = []
    for rid, body in zip(ids, store.bodies(ids)):
        got = str(body.get("name", "")).casefold()
        if want in got and set(within) <= exact_tags(body):
            hits.append((got != want, -len(body.get("sources", [])), rid, body))
    hits.sort(key=lambda h: h[:3])
    return [_summary(rid, body) for _, _, rid, body in hits[:limit]]


def node(store: Store, node_id: int, within=()) -> dict:
    """One semantic node: name, type, description, relations, the nodes it links to, and the
    episodes it came from (newest first). KeyError if the store has no such record;
    ValueError if the record is not a semantic node. `within` (a scope's normalised tags): the
    caller has checked that the node carries them; the linked nodes and episodes listed are
    those that carry them too."""
    h = store.header(node_id)
    if fl.decode_flags(h.flags)["memory_type"] != fl.MemoryType.SEMANTIC:
        raise ValueError(f"record {node_id} is an episode, not a semantic node")
    body = store.body(node_id)
    g = store.graph()
    linked_nodes, episodes = [], []
    pos = int(np.searchsorted(g.node_ids, np.uint64(node_id)))
    if pos < g.n_nodes and int(g.node_ids[pos]) == node_id:
        lo, hi = int(g.indptr[pos]), int(g.indptr[pos + 1])
        targets = [(int(g.node_ids[g.indices[k]]), EDGE_TYPES[int(g.types[k])],
                    float(g.weights[k])) for k in range(lo, hi)]
        present = [t for t in targets if _has(store, t[0])]
        bodies = store.bodies([t[0] for t in present])
        for (to, etype, weight), b in zip(present, bodies):
            f = fl.decode_flags(store.header(to).flags)
            if f["tombstone"] or not set(within) <= exact_tags(b):
                continue
            if f["memory_type"] == fl.MemoryType.SEMANTIC:
                linked_nodes.append({"id": to, "name": b.get("name", ""), "edge": etype,
                                     "weight": round(weight, 4)})
            elif etype == "abstraction":
                episodes.append({"id": to, "text": b.get("text", ""),
                                 "speaker": b.get("speaker"),
                                 "time_ms": int(store.header(to).timestamp_ms)})
    episodes.sort(key=lambda e: -e["time_ms"])
    linked_nodes.sort(key=lambda n: -n["weight"])
    return {**_summary(node_id, body),
            "relations": [{"to": r[0], "relation": r[1], "weight": r[2]}
                          for r in body.get("relations", [])],
            "linked_nodes": linked_nodes[:MAX_LISTED], "episodes": episodes[:MAX_LISTED],
            "episodes_total": len(episodes)}


def _has(store: Store, rid: int) -> bool:
    try:
        store.locate(rid)
        return True
    except KeyError:
        return False
