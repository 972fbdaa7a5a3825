"""Export and import: a store as portable JSON lines (docs/FORMAT.md section 17).

The export holds what the store *means* (records with their text, metadata, flags and counts,
semantic nodes, edges, dormancy, spike trains), nothing of how it is stored (no vectors, no
offsets, no header layout). Import embeds with the importing store's model, keeps record ids,
so that edges, node `sources` and user-held ids stay valid, and writes everything in one
transaction after the whole input has been checked: a bad or truncated export stores nothing.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

import numpy as np
import orjson

from store_format import flags as fl
from store_format import ingest_index as ix
from store_format import spikes as sp
from store_format.errors import CorruptStore, StoreError
from store_format.headers import array_to_headers

from .consolidate.dormancy import DormancyState
from .ingest import md5_of
from .inputs import BOM, InputError, duplicate_key, item_from_object
from .maintenance.inspect import EDGE_TYPES
from .memory import NewMemory
from .store import Store, StoreWriter

FORMAT_NAME = "synapse-export"
FORMAT_VERSION = 1
TYPES = {t.name.lower(): t for t in fl.MemoryType}
EDGE_CODES = {name: code for code, name in EDGE_TYPES.items()}
# Body keys with a field of their own in a record line; every other key goes to `extra`.
OWN_KEYS = ("text", "speaker", "session", "source", "tags", "meta")
NODE_KEYS = ("name", "etype", "desc", "sources", "relations")
FLAG_NAMES = ("tombstone", "pinned", "resolved", "consolidated")
_F32_005 = np.float32(0.05)  # the header's bound, compared as stored (FORMAT.md 4)
CHUNK = 4096           # records read (export) or embedded and appended (import) at a time


# --- export -----------------------------------------------------------------------------------


def _spike_trains(store: Store) -> dict[int, list]:
    """record id -> [[time_ms, kind], ...], the spikes readers use (FORMAT.md 15), log order."""
    out: dict[int, list] = {}
    for e in sp.latest(store.spike_entries()):
        out.setdefault(int(e["record_id"]), []).append([int(e["time_ms"]), int(e["kind"])])
    return out


def _dormancy(store: Store | None) -> tuple[dict, dict[int, dict]]:
    """The dormancy header and per-node state (None: those of a store that has none)."""
    state = DormancyState.load(store) if store is not None else DormancyState()
    per_node = {int(r): {"low_windows": int(lo), "recall_seen": int(se), "archived": bool(a)}
                for r, lo, se, a in zip(state.ids, state.low, state.seen, state.archived)}
    return {"windows": state.windows, "last_window": state.last_window}, per_node


def record_line(rid: int, h, body: dict, spikes: list | None, dormant: dict | None) -> dict:
    f = fl.decode_flags(h.flags)
    semantic = f["memory_type"] == fl.MemoryType.SEMANTIC
    line = {"kind": "record", "id": rid, "type": f["memory_type"].name.lower(),
            "text": body.get("text", ""), "timestamp_ms": h.timestamp_ms,
            "speaker": body.get("speaker"), "session": body.get("session"),
            "source": body.get("source"), "tags": list(body.get("tags") or []),
            "meta": body.get("meta"),
            "flags": {name: bool(f[name]) for name in FLAG_NAMES},
            "importance": h.importance, "valence": h.valence, "arousal": h.arousal,
            "storage_strength": h.storage_strength, "recall_count": h.recall_count}
    own = set(OWN_KEYS) | (set(NODE_KEYS) if semantic else set())
    if semantic:
        line["node"] = {k: body[k] for k in NODE_KEYS if k in body}
    line["extra"] = {k: v for k, v in body.items() if k not in own}
    if spikes:
        line["spikes"] = spikes
    if dormant:
        line["dormancy"] = dormant
    return line


def damaged_records(store: Store) -> list[tuple[int, int, int, str]]:
    """(segment index, row, id as read, problem) of every record whose header or body fails
    its checks (CRC, bounds, an id not above the last good one): what `export --skip-damaged`
    leaves out. Rows are read by position, never through the id index (Store.ids), which a
    damaged id would stop; a chunk that reads cleanly costs one pass."""
    out, prev = [], 0
    payload_bytes = store.manifest.payload.bytes

    def read(seg, lo: int, hi: int, prev: int) -> None:
        seg.check(lo, hi, prev_id=prev, payload_bytes=payload_bytes)
        for row in range(lo, hi):
            store.payload.read(int(seg.payload_offsets[row]), int(seg.payload_lengths[row]),
                               int(seg.ids[row]))
    for k, seg in enumerate(store.segments):
        for lo in range(0, seg.n, CHUNK):
            hi = min(seg.n, lo + CHUNK)
            try:
                read(seg, lo, hi, prev)
                prev = int(seg.ids[hi - 1])
                continue
            except CorruptStore:
                pass
            for row in range(lo, hi):  # find which ones
                try:
                    read(seg, row, row + 1, prev)
                    prev = int(seg.ids[row])
                except CorruptStore as exc:
                    out.append((k, row, int(seg.ids[row]), str(exc)))
    return out


def uncounted_segment_rows(store: Store) -> list[tuple[str, str]]:
    """For a rescue from a MANIFEST that fails its CRC, (what, problem) of the records it may
    have lost: intact rows a segment file holds past the count that MANIFEST gives it, and
    segment files it does not name. They are not exported (nothing says they were committed),
    and the rescue must say so rather than look complete (a hostile pass lowered the count)."""
    from store_format import segments as sg

    out, named = [], set()
    for seg in store.segments:
        name = Path(seg.path).name
        named.add(name)
        extra, intact = sg.intact_rows_past(seg.path, seg.n, seg.header.stride)
        if intact:
            out.append((f"{name} rows {seg.n}-{seg.n + extra - 1}",
                        f"the MANIFEST counts {seg.n} records in this file, which holds "
                        f"{intact} more intact ones after them: not exported"))
    for name in sorted(os.listdir(store.path)):
        if sg.is_segment_name(name) and name not in named:
            out.append((name, "a segment file the MANIFEST does not name: not exported"))
    return out


def _derived(read, default, what: str, lost: list | None):
    """`read()`; in a rescue (`lost` is a list) a damaged or missing file gives `default` and
    (what, problem) in `lost` instead of stopping the export."""
    if lost is None:
        return read()
    try:
        return read()
    except StoreError as exc:
        lost.append((what, str(exc)))
        return default


def export_lines(store: Store, now_ms: int | None = None, skip: frozenset = frozenset(),
                 lost: list | None = None) -> Iterator[dict]:
    """The export of a committed snapshot, line by line (header, records in id order, edges).
    `skip`: (segment index, row) of records left out (damaged_records), with every edge that
    does not join two records exported. `lost`: a rescue: the graph, spike trains or dormancy
    state that cannot be read are left out and named there, the records are exported all the
    same."""
    m = store.manifest
    g = _derived(store.graph, None, "edges", lost)
    spikes = _derived(lambda: _spike_trains(store), {}, "spike trains", lost)
    dorm_header, dorm = _derived(lambda: _dormancy(store), _dormancy(None), "dormancy state",
                                 lost)
    if g is None:
        src = dst = np.zeros(0, np.uint64)
        types = weights = np.zeros(0)
    else:
        node_ids = np.asarray(g.node_ids)
        src = np.repeat(node_ids, np.diff(np.asarray(g.indptr, np.int64)))
        dst = node_ids[np.asarray(g.indices, np.int64)]
        types, weights = g.types, g.weights
    kept = [np.array([(k, row) not in skip for row in range(seg.n)], bool) if skip
            else np.ones(seg.n, bool) for k, seg in enumerate(store.segments)]
    ids = np.concatenate([np.asarray(seg.ids)[keep] for seg, keep in zip(store.segments, kept)]
                         or [np.zeros(0, np.uint64)])
    edges = np.flatnonzero(np.isin(src, ids) & np.isin(dst, ids))
    n_nodes = 0
    for seg, keep in zip(store.segments, kept):
        if seg.n:
            semantic = fl.memory_type_code(np.asarray(seg.headers["flags"])) \
                == fl.MemoryType.SEMANTIC
            n_nodes += int(np.count_nonzero(semantic & keep))
    yield {"format": FORMAT_NAME, "version": FORMAT_VERSION,
           "exported_at_ms": int(time.time() * 1000) if now_ms is None else now_ms,
           "store": {"embedder": m.embedder, "dim": m.dim, "header_version": m.header_version,
                     "store_id": m.store_id, "next_record_id": m.next_record_id},
           "counts": {"records": len(ids), "nodes": n_nodes, "edges": len(edges)},
           "dormancy": dorm_header}
    prev = 0
    for k, (seg, keep) in enumerate(zip(store.segments, kept)):
        for lo in range(0, seg.n, CHUNK):
            hi = min(seg.n, lo + CHUNK)
            # every record checked (CRC, bounds, id order) by position, as damaged_records
            # did: a whole chunk at once, one by one around a damaged one
            if keep[lo:hi].all():
                seg.check(lo, hi, prev_id=prev, payload_bytes=m.payload.bytes)
                rows, checked = range(lo, hi), True
            else:
                rows, checked = [lo + i for i in np.flatnonzero(keep[lo:hi]).tolist()], False
            headers = array_to_headers(seg.headers[lo:hi])
            for row in rows:
                if not checked:
                    seg.check(row, row + 1, prev_id=prev, payload_bytes=m.payload.bytes)
                rid = prev = int(seg.ids[row])
                body = store.payload.read(int(seg.payload_offsets[row]),
                                          int(seg.payload_lengths[row]), rid)
                yield record_line(rid, headers[row - lo], body, spikes.get(rid), dorm.get(rid))
    for k in edges:
        yield {"kind": "edge", "src": int(src[k]), "dst": int(dst[k]),
               "type": EDGE_TYPES[int(types[k])], "weight": float(weights[k])}


def write_export(store: Store, out: IO[bytes], skip: frozenset = frozenset(),
                 lost: list | None = None) -> dict:
    """Write the export to a binary stream; returns the header's counts."""
    counts = {}
    for line in export_lines(store, skip=skip, lost=lost):
        counts = counts or line["counts"]
        out.write(orjson.dumps(line) + b"\n")
    return counts


# --- import: checking -------------------------------------------------------------------------


@dataclass
class Parsed:
    header: dict
    records: list[dict] = field(default_factory=list)
    edges: list[tuple[int, int, int, float]] = field(default_factory=list)


def lost_in(parsed: Parsed, header_version: int) -> dict:
    """What importing `parsed` in `header_version` drops (field -> records), as `migrate`'s
    plan counts a downgrade: v1 headers have no arousal and no storage strength."""
    if header_version >= 2:
        return {}
    lost = {"arousal": sum(1 for r in parsed.records if r["arousal"]),
            "storage_strength": sum(1 for r in parsed.records if r["storage_strength"] != 1.0)}
    return {k: n for k, n in lost.items() if n}


def _want(cond: bool, line: int, reason: str) -> None:
    if not cond:
        raise InputError(f"line {line}", reason)


def _int(v, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _num(v, lo: float, hi: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and lo <= v <= hi


def _opt_str(v) -> bool:
    return v is None or (isinstance(v, str) and v != "")


def _check_header(obj, n: int) -> dict:
    _want(isinstance(obj, dict) and obj.get("format") == FORMAT_NAME, n,
          f"not a synapse export (the first line must be the header with "
          f"\"format\": \"{FORMAT_NAME}\")")
    _want(obj.get("version") == FORMAT_VERSION and not isinstance(obj.get("version"), bool), n,
          f"export format version {obj.get('version')!r}: this synapse reads version "
          f"{FORMAT_VERSION}")
    counts = obj.get("counts")
    _want(isinstance(counts, dict) and all(_int(counts.get(k), 0, 2**63) for k in
                                           ("records", "nodes", "edges")), n,
          "header: counts must hold records, nodes and edges (integers >= 0)")
    store = obj.get("store")
    # at most 2^63: room for every id a store can still give (at 2^64 - 1 the import went
    # through and every later ingest failed)
    _want(isinstance(store, dict) and _int(store.get("next_record_id", 1), 1, 2**63), n,
          "header: store.next_record_id must be an integer in 1 .. 2^63")
    dorm = obj.get("dormancy") or {}
    _want(isinstance(dorm, dict) and _int(dorm.get("windows", 0), 0, 2**63)
          and isinstance(dorm.get("last_window", []), list)
          and all(_int(x, 1, 2**64 - 1) for x in dorm.get("last_window", [])), n,
          "header: dormancy must be {\"windows\": int, \"last_window\": [ids]}")
    return obj


def _check_record(r: dict, n: int, prev_id: int) -> None:
    _want(_int(r.get("id"), 1, 2**63 - 1), n, "id must be an integer in 1 .. 2^63-1")
    _want(r["id"] > prev_id, n, f"id {r['id']} is not greater than the previous record's "
                                f"({prev_id}): records come in increasing id order")
    _want(r.get("type") in TYPES, n, f"type must be one of {', '.join(TYPES)}")
    _want(isinstance(r.get("text"), str), n, "text must be a string")
    try:  # what ingest refuses, import refuses too: empty, NUL, lone surrogates, oversize
        item_from_object({"text": r["text"]}, f"line {n}")
    except InputError as exc:
        _want(False, n, f"text: {exc.reason}")
    _want(_int(r.get("timestamp_ms"), 0, 2**53), n, "timestamp_ms must be an integer in "
                                                    "0 .. 2^53")
    for key in ("speaker", "session", "source"):
        _want(_opt_str(r.get(key)), n, f"{key} must be a non-empty string or null")
    _want(_is_str_list(r.get("tags")), n, "tags must be a list of strings")
    _check_tags(r, n)
    _want(r.get("meta") is None or isinstance(r["meta"], dict), n, "meta must be an object "
                                                                    "or null")
    flags = r.get("flags")
    _want(isinstance(flags, dict) and all(isinstance(flags.get(k), bool) for k in FLAG_NAMES),
          n, f"flags must hold {', '.join(FLAG_NAMES)} as true/false")
    _want(_num(r.get("importance"), -1, 11) and _F32_005 <= np.float32(r["importance"]) <= 10,
          n, "importance must be a number in 0.05 .. 10")
    _want(_int(r.get("valence"), -128, 127), n, "valence must be an integer in -128 .. 127")
    _want(_int(r.get("arousal"), 0, 255), n, "arousal must be an integer in 0 .. 255")
    _want(_num(r.get("storage_strength"), 0.0, 5.0) and np.float32(r["storage_strength"]) <= 5,
          n, "storage_strength must be a number in 0 .. 5")
    _want(_int(r.get("recall_count"), 0, 2**32 - 1), n, "recall_count must be an integer in "
                                                        "0 .. 2^32-1")
    semantic = r["type"] == "semantic"
    extra = r.get("extra", {})
    _want(isinstance(extra, dict), n, "extra must be an object")
    clash = set(extra) & (set(OWN_KEYS) | (set(NODE_KEYS) if semantic else set()))
    _want(not clash, n, f"extra repeats {', '.join(sorted(clash))}, which has a field of its own")
    _check_extra(extra, n)
    node = r.get("node")
    _want(not semantic or (isinstance(node, dict) and isinstance(node.get("name"), str)), n,
          "a semantic record needs \"node\" with a string \"name\"")
    _want(semantic or node is None, n, "only a semantic record has \"node\"")
    if semantic:  # what consolidate reads back from a node's body
        _want(all(isinstance(node.get(k, ""), str) for k in ("etype", "desc")), n,
              "node.etype and node.desc must be strings")
        _want(isinstance(node.get("sources", []), list)
              and all(_int(x, 1, 2**64 - 1) for x in node.get("sources", [])), n,
              "node.sources must be a list of record ids")
        _want(isinstance(node.get("relations", []), list)
              and all(isinstance(x, list) for x in node.get("relations", [])), n,
              "node.relations must be a list of [name, relation, weight]")
    spikes = r.get("spikes", [])
    _want(isinstance(spikes, list) and all(
        isinstance(s, list) and len(s) == 2 and _int(s[0], -(2**63), 2**63 - 1)
        and s[1] in (sp.RECALL, sp.STIMULUS) for s in spikes), n,
        "spikes must be a list of [time_ms, kind 1|2]")
    d = r.get("dormancy")
    _want(d is None or (isinstance(d, dict) and _int(d.get("low_windows"), 0, 0xFFFF)
                        and _int(d.get("recall_seen"), 0, 2**32 - 1)
                        and isinstance(d.get("archived"), bool)), n,
          "dormancy must be {\"low_windows\", \"recall_seen\", \"archived\"}")


def _is_str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# The keys of `extra` that synapse itself reads back (FORMAT.md 17), with the shape it needs: an
# edited export must not plant a value that makes a later command fail ("facts": 5 made every
# `consolidate` crash). Other keys are kept as they are.
EXTRA_SHAPES = {
    "facts": (_is_str_list, "a list of strings"),
    "md5": (lambda v: isinstance(v, str), "a string"),
    "dia_id": (lambda v: isinstance(v, str), "a string"),
    "chunk": (lambda v: isinstance(v, list) and len(v) == 2
              and all(_int(x, 0, 2**63 - 1) for x in v) and v[0] <= v[1],
              "[start, end] character offsets"),
    "document": (lambda v: isinstance(v, bool), "true or false"),
    "prune_candidate": (lambda v: isinstance(v, bool), "true or false"),
}


def _check_extra(extra: dict, n: int) -> None:
    for key, (ok, shape) in EXTRA_SHAPES.items():
        if key in extra:
            _want(ok(extra[key]), n, f"extra.{key} must be {shape}")


RECORD_KEYS = frozenset(("kind", "id", "type", "text", "timestamp_ms", "speaker", "session",
                         "source", "tags", "meta", "flags", "importance", "valence", "arousal",
                         "storage_strength", "recall_count", "node", "extra", "spikes",
                         "dormancy"))


def _check_tags(r: dict, n: int) -> None:
    """What ingest refuses in a tag, import refuses too (an invisible character: `user:ana`
    and `user:ana` + U+200B look alike and are two users; an empty or overlong tag), and the
    speaker:, session: and source: tags must be the ones the record's fields give, as ingest
    sets them: a record of speaker Ana without `speaker:Ana` escaped `--tag speaker:Ana`.
    A field of a record line that export never writes is refused, not dropped."""
    from store_format.tags import normalize_tag

    from .inputs import RESERVED_TAG_PREFIXES, check_tag

    unknown = set(r) - RECORD_KEYS
    _want(not unknown, n, f"unknown field(s) {', '.join(sorted(unknown))}")
    for tag in r["tags"]:
        try:
            check_tag(tag, f"line {n}", reserved=True)
        except InputError as exc:
            _want(False, n, exc.reason)
    reserved = {t for t in map(normalize_tag, r["tags"]) if t.startswith(RESERVED_TAG_PREFIXES)}
    given = {normalize_tag(f"{k}:{r[k]}") for k in ("speaker", "session", "source")
             if isinstance(r.get(k), str)}
    _want(reserved == given, n, "the speaker:, session: and source: tags must be those of its "
                                "speaker, session and source fields ("
                                + (", ".join(sorted(given)) or "none") + ")")


def parse_export(lines: Iterable[bytes], where: str = "-") -> Parsed:
    """Check a whole export; InputError naming `where` and the line on the first problem
    (including an export that ends before its header's counts are reached)."""
    parsed: Parsed | None = None
    ids: set[int] = set()
    prev_id = n_nodes = 0
    n = 0
    for n, raw in enumerate(lines, 1):
        if not isinstance(raw, (bytes, bytearray)):  # the API's iterable of lines
            raise InputError(f"{where}:{n}", f"expected a line as bytes, not "
                                             f"{type(raw).__name__}")
        if n == 1:
            raw = raw.removeprefix(BOM)  # an editor's byte-order mark, as ingest skips it
        if not raw.strip():
            raise InputError(f"{where}:{n}", "empty line")
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{where}:{n}", f"not valid JSON ({exc.msg} at character "
                                              f"{exc.pos + 1}); the export is damaged or "
                                              "was cut short") from None
        if (key := duplicate_key(raw)) is not None:  # orjson keeps the last one silently
            raise InputError(f"{where}:{n}", f"`{key}` appears twice in one object")
        try:
            if parsed is None:
                parsed = Parsed(_check_header(obj, n))
                continue
            _want(isinstance(obj, dict), n, "expected a JSON object")
            kind = obj.get("kind")
            if kind == "record":
                _want(not parsed.edges, n, "a record after the edges: records come first")
                _check_record(obj, n, prev_id)
                if "md5" in obj.get("extra", {}):  # ingest's digest, of the text as imported:
                    # an export edited to redact a line must not make the old line a duplicate
                    obj["extra"]["md5"] = md5_of(obj["text"]).hex()
                prev_id = obj["id"]
                ids.add(prev_id)
                n_nodes += obj["type"] == "semantic"
                parsed.records.append(obj)
            elif kind == "edge":
                _want(_int(obj.get("src"), 1, 2**64 - 1) and _int(obj.get("dst"), 1, 2**64 - 1),
                      n, "src and dst must be record ids")
                _want(obj["src"] in ids and obj["dst"] in ids, n,
                      f"edge {obj['src']} -> {obj['dst']} names a record the export does not "
                      "hold")
                _want(obj.get("type") in EDGE_CODES, n,
                      f"edge type must be one of {', '.join(EDGE_CODES)}")
                _want(_num(obj.get("weight"), 0.0, 1.0), n, "weight must be a number in 0 .. 1")
                parsed.edges.append((obj["src"], obj["dst"], EDGE_CODES[obj["type"]],
                                     float(obj["weight"])))
            else:
                _want(False, n, f"unknown kind {kind!r} (expected record or edge)")
        except InputError as exc:
            raise InputError(f"{where}:{n}", exc.reason) from None
    if parsed is None:
        raise InputError(f"{where}:1", "empty input: no export header")
    c = parsed.header["counts"]
    got = {"records": len(parsed.records), "nodes": n_nodes, "edges": len(parsed.edges)}
    for key in ("records", "nodes", "edges"):
        if got[key] != c[key]:
            raise InputError(f"{where}:{n + 1}",
                             f"the export ends after {got['records']} records and "
                             f"{got['edges']} edges, but its header announces {c['records']} "
                             f"records ({c['nodes']} nodes) and {c['edges']} edges: truncated "
                             f"or damaged")
    return parsed


# --- import: writing --------------------------------------------------------------------------


@dataclass
class _Imported(NewMemory):
    """A record as exported: header fields and body given, not derived (NewMemory derives)."""

    recall_count: int = 0
    tombstone: bool = False
    full_body: dict = field(default_factory=dict)

    def header(self, exact_norm: float):
        h = super().header(exact_norm)
        return h.replace(recall_count=self.recall_count,
                         flags=fl.set_flag(h.flags, fl.TOMBSTONE, self.tombstone))

    def body(self) -> dict:
        return self.full_body


def body_of(r: dict) -> dict:
    """The payload body a record line stands for (the inverse of `record_line`)."""
    body = {"text": r["text"]}
    for key in ("speaker", "session", "source"):
        if r.get(key) is not None:
            body[key] = r[key]
    if r.get("meta") is not None:
        body["meta"] = r["meta"]
    body.update(r.get("extra") or {})
    body.update(r.get("node") or {})
    if r["tags"]:
        body["tags"] = list(r["tags"])
    return body


def embed_text(r: dict) -> str:
    """What is embedded: an episode as ingest embeds it ("speaker: text"), a node its text."""
    if r["type"] != "semantic" and r.get("speaker"):
        return f"{r['speaker']}: {r['text']}"
    return r["text"]


def bm25_text(r: dict) -> str:
    """What BM25 indexes: as ingest (episodes) and consolidate ("name desc") do."""
    if r["type"] == "semantic":
        node = r["node"]
        return f"{node.get('name', '')} {node.get('desc', '')}"
    return embed_text(r)


def _memory(r: dict, vector: np.ndarray) -> _Imported:
    f = r["flags"]
    return _Imported(text=r["text"], vector=vector, timestamp_ms=r["timestamp_ms"],
                     memory_type=TYPES[r["type"]], importance=float(r["importance"]),
                     valence=r["valence"], arousal=r["arousal"],
                     storage_strength=float(r["storage_strength"]), tags=list(r["tags"]),
                     pinned=f["pinned"], resolved=f["resolved"],
                     consolidated=f["consolidated"], recall_count=r["recall_count"],
                     tombstone=f["tombstone"], full_body=body_of(r))


@dataclass
class ImportResult:
    records: int = 0
    nodes: int = 0
    edges: int = 0
    embed_seconds: float = 0.0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"records": self.records, "nodes": self.nodes, "edges": self.edges,
                "embed_seconds": round(self.embed_seconds, 3), "seconds": round(self.seconds, 3)}


class StoreNotEmpty(InputError):
    """Import into a store that holds or once held records: a wrong target, not bad input."""

    hint = "import into a new directory: synapse --store NEW_DIR import FILE"


def check_empty(w: StoreWriter) -> None:
    """Import writes ids as exported: only into a store that has never held a record (one
    whose records were all purged still has its ids taken)."""
    if w.count:
        raise StoreNotEmpty(str(w.path), f"the store is not empty ({w.count} records): import "
                                         "goes into a new or empty store")
    if w.manifest.next_record_id != 1:
        raise StoreNotEmpty(str(w.path), "the store is empty but has held records (ids up to "
                                         f"{w.manifest.next_record_id - 1} are taken): import "
                                         "writes the exported ids, so it goes into a new store")


def import_parsed(w: StoreWriter, parsed: Parsed, embedder, progress=None) -> ImportResult:
    """Write a checked export into the empty store `w` in one transaction (one commit)."""
    from ..models.bm25 import BM25Index

    t0 = time.perf_counter()
    check_empty(w)
    res = ImportResult()
    recs = parsed.records
    bm25 = BM25Index.open(w.path, w.manifest.bm25, append_only=True)
    for lo in range(0, len(recs), CHUNK):  # embedded and appended a chunk at a time
        part = recs[lo:lo + CHUNK]
        t1 = time.perf_counter()
        vectors = embedder.encode([embed_text(r) for r in part])
        res.embed_seconds += time.perf_counter() - t1
        # ids as exported: each run of consecutive ids is one append from next_record_id
        start = 0
        for k in range(1, len(part) + 1):
            if k == len(part) or part[k]["id"] != part[k - 1]["id"] + 1:
                w.stage(next_record_id=part[start]["id"])
                got = w.append([_memory(r, v) for r, v in zip(part[start:k], vectors[start:k])])
                assert got[0] == part[start]["id"], "ids must be kept"
                start = k
        w.stage(bm25=bm25.add([r["id"] for r in part], [bm25_text(r) for r in part]))
        if progress is not None:
            progress(lo + len(part), len(recs))
    res.records = len(recs)
    res.nodes = sum(r["type"] == "semantic" for r in recs)

    last = recs[-1]["id"] if recs else 0
    w.stage(next_record_id=max(last + 1, parsed.header["store"].get("next_record_id", 1)))
    if parsed.edges:
        src, dst, typ, wgt = zip(*parsed.edges)
        w.add_edges(np.array(src, np.uint64), np.array(dst, np.uint64), np.array(typ, np.uint8),
                    np.array(wgt, np.float32))
        res.edges = len(parsed.edges)
    _stage_ingest_index(w, recs)
    _stage_spikes(w, recs)
    _stage_dormancy(w, parsed)
    w.commit()
    res.seconds = time.perf_counter() - t0
    return res


def _stage_ingest_index(w: StoreWriter, recs: list[dict]) -> None:
    """Deduplication of later ingests: the index rebuilt from the bodies, as compaction does
    (FORMAT.md 12, 14.2)."""
    keep = [r for r in recs if "md5" in (r.get("extra") or {})]  # the records ingest made
    if not keep:
        return
    path = w.path / ix.NAME
    ix.create(path)
    e = ix.make_entries([bytes.fromhex(r["extra"]["md5"]) for r in keep],
                        [r["id"] for r in keep],
                        [ix.session_key(r.get("session"), r.get("source"), r.get("tags") or (),
                                        r.get("speaker")) for r in keep])
    w.stage(ingest={"file": ix.NAME, "entries": ix.append(path, 0, e)})


def _stage_spikes(w: StoreWriter, recs: list[dict]) -> None:
    rows = [(r["id"], t, k) for r in recs for t, k in r.get("spikes", [])]
    if rows:
        ids, times, kinds = (np.array(c) for c in zip(*rows))
        # staged as add_spikes does, but with each spike's own time and kind
        w._spike_entries.append(sp.make_entries(ids, times.astype(np.int64), kinds))


def _stage_dormancy(w: StoreWriter, parsed: Parsed) -> None:
    nodes = [r for r in parsed.records if r.get("dormancy")]
    head = parsed.header.get("dormancy") or {}
    if not nodes and not head.get("windows"):
        return
    d = [r["dormancy"] for r in nodes]
    DormancyState([r["id"] for r in nodes], [x["low_windows"] for x in d],
                  [x["recall_seen"] for x in d], [x["archived"] for x in d],
                  head.get("windows", 0), head.get("last_window", [])).stage(w)
