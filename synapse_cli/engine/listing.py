"""`list`: the memories of a store, newest first, filtered like recall, a page at a time.

Paging is by cursor, not by offset: `after` names the last record of the previous page, and the
next page holds the records that come after it in the order (timestamp, id) descending, so a
record ingested between two pages neither repeats nor shifts one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf

from .filters import tag_mask
from .inputs import RESERVED_TAG_PREFIXES, utc_datetime
from .store import Store

TYPE_NAMES = {t.name.lower(): int(t) for t in fl.MemoryType}


@dataclass
class ListQuery:
    types: tuple = ()              # names of memory types; empty: every type
    tags: tuple = ()               # every one must be carried (speaker:x, session:y too)
    since_ms: int | None = None
    until_ms: int | None = None
    trashed: bool = False          # the trash instead of the live records
    limit: int = 50
    after: int | None = None       # the id the previous page ended with


def _columns(store: Store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ids, timestamps, flags of every committed record, in position order."""
    if not store.segments:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
    ts = np.concatenate([np.asarray(s.headers["timestamp_ms"], np.int64) for s in store.segments])
    flags = np.concatenate([np.asarray(s.headers["flags"], np.uint8) for s in store.segments])
    return store.ids, ts, flags


def _iso(ms: int) -> str | None:
    t = utc_datetime(ms)
    return None if t is None else t.isoformat(timespec="seconds").replace("+00:00", "Z")


def _episodes_linked(store: Store, node_ids: list[int], semantic: set[int]) -> dict[int, int]:
    """How many episodes (non-semantic records) each node has an ABSTRACTION edge to."""
    g = store.graph()
    out = {}
    gids = np.asarray(g.node_ids)
    for nid in node_ids:
        pos = int(np.searchsorted(gids, np.uint64(nid)))
        if pos >= g.n_nodes or int(gids[pos]) != nid:
            out[nid] = 0
            continue
        lo, hi = int(g.indptr[pos]), int(g.indptr[pos + 1])
        dst = gids[np.asarray(g.indices[lo:hi])][np.asarray(g.types[lo:hi]) == gf.ABSTRACTION]
        out[nid] = sum(int(d) not in semantic for d in dst)
    return out


def _row(rid: int, ts: int, flags: int, h, body: dict) -> dict:
    f = fl.decode_flags(flags)
    row = {"id": rid, "type": f["memory_type"].name.lower(), "time": _iso(ts),
           "timestamp_ms": ts, "text": body.get("text", "")}
    for key in ("speaker", "session", "source"):
        if body.get(key):
            row[key] = body[key]
    row["tags"] = [t for t in body.get("tags") or []
                   if not t.startswith(RESERVED_TAG_PREFIXES)]
    row.update(pinned=bool(f["pinned"]), resolved=bool(f["resolved"]),
               consolidated=bool(f["consolidated"]), in_trash=bool(f["tombstone"]),
               recall_count=h.recall_count, importance=round(h.importance, 4))
    if f["memory_type"] == fl.MemoryType.SEMANTIC:
        row.update(name=body.get("name", ""), etype=body.get("etype", ""))
    return row


def list_memories(store: Store, q: ListQuery) -> dict:
    """`{"memories": [...], "next_after": id or None, "total": matching records}`.
    KeyError(after) when `after` is not a record of the store."""
    ids, ts, flags = _columns(store)
    mask = fl.is_tombstone(flags) if q.trashed else ~fl.is_tombstone(flags)
    if q.types:
        codes = [TYPE_NAMES[t] for t in q.types]
        mask &= np.isin(fl.memory_type_code(flags), codes)
    if q.since_ms is not None:
        mask &= ts >= q.since_ms
    if q.until_ms is not None:
        mask &= ts <= q.until_ms
    if (q.since_ms is not None or q.until_ms is not None) \
            and (fl.memory_type_code(flags[mask]) == fl.MemoryType.SEMANTIC).any():
        # recall's window rule: a node is in a window only when every record it links is
        # (its text holds what they all said: "finished in 3:52" is not June's)
        from .graphview import build

        t_max = q.until_ms if q.until_ms is not None else 2**63 - 1
        mask &= ~build(store).reaching_outside(q.since_ms or 0, t_max)
    if q.tags:
        mask &= tag_mask(store, q.tags, candidates=mask.copy())
    total = int(np.count_nonzero(mask))
    if q.after is not None:
        store.locate(q.after)  # KeyError for an id the store does not hold
        pos = int(np.searchsorted(ids, np.uint64(q.after)))
        t_after = int(ts[pos])
        mask &= (ts < t_after) | ((ts == t_after) & (ids < np.uint64(q.after)))
    pos = np.flatnonzero(mask)
    order = pos[np.lexsort((-ids[pos].astype(np.int64), -ts[pos]))]  # newest, then highest id
    page = order[:max(0, q.limit)]
    page_ids = [int(i) for i in ids[page]]
    bodies = store.bodies(page_ids)
    headers = [store.header(rid) for rid in page_ids]
    rows = [_row(rid, int(ts[p]), int(flags[p]), h, b)
            for rid, p, h, b in zip(page_ids, page.tolist(), headers, bodies)]
    nodes = [r["id"] for r in rows if r["type"] == "semantic"]
    if nodes:
        semantic = set(int(i) for i in ids[fl.memory_type_code(flags) == fl.MemoryType.SEMANTIC])
        linked = _episodes_linked(store, nodes, semantic)
        for r in rows:
            if r["type"] == "semantic":
                r["episodes"] = linked[r["id"]]
    more = len(order) > len(page)
    return {"memories": rows, "next_after": page_ids[-1] if more and page_ids else None,
            "total": total}
