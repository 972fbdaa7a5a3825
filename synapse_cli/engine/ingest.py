"""`ingest`: turn parsed items into episodic records, in one transaction.

Order of work: deduplicate by MD5 (against the store's ingest index and within the input),
embed what is new, drop off-goal items (seed 003 gating), tag utility (importance, surprise,
emotion), append records + payload, temporal edges to the previous record of the same session
or source and the same tags (seed 000; ingest_index.session_key), BM25 postings and the ingest
index; then one manifest commit. A crash before the commit leaves the store as it was.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf
from store_format import ingest_index as ix
from store_format.tags import normalize_tag

from .inputs import Item, legacy_ms, normalize_text
from .memory import NewMemory
from .store import Store, StoreWriter

RECENT_FOR_SURPRISE = 64  # memories that define "novel" (seed 003's surprise signal)


@dataclass
class IngestConfig:
    goal: str | None = None
    goal_threshold: float = 0.1        # cosine below which an item is off-goal (MiniLM: on-goal ~0.2+, off-goal ~0)
    default_importance: float = 1.0
    utility_weights: tuple = (1 / 3, 1 / 3, 1 / 3)  # importance, surprise, emotion


@dataclass
class Outcome:
    where: str
    status: str                 # stored | duplicate | gated
    id: int | None = None
    utility: float | None = None
    goal_similarity: float | None = None

    def as_dict(self) -> dict:
        d = {"id": self.id, "status": self.status, "where": self.where}
        if self.utility is not None:
            d["utility"] = round(self.utility, 4)
        if self.goal_similarity is not None:
            d["goal_similarity"] = round(self.goal_similarity, 4)
        return d


@dataclass
class IngestResult:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict:
        c = {"stored": 0, "duplicate": 0, "gated": 0}
        for o in self.outcomes:
            c[o.status] += 1
        return c


def md5_of(text: str) -> bytes:
    return hashlib.md5(normalize_text(text).encode("utf-8")).digest()


def retrieval_text(item: Item) -> str:
    """What is embedded and indexed: "speaker: text" when the speaker is known.

    Questions name people ("what did Caroline say about ..."); without the speaker in the
    indexed text neither trigger can match them (LoCoMo dev, recall@10: dense 29.5 without,
    51.0 with; bench/quality/locomo_recall.py). The stored text stays as given.
    """
    return f"{item.speaker}: {item.text}" if item.speaker else item.text


def utility(importance: float, surprise: float, emotion: float, weights) -> float:
    """CraniMem's BaseUtility = w_I I + w_S S + w_E E with each signal in [0, 1].

    Importance (0.05 .. 10 in the header) maps to I = min(1, importance / 2), so the default
    1.0 is a middling 0.5 and anything marked 2 or more is fully important.
    """
    i = min(1.0, importance / 2.0)
    return float(weights[0] * i + weights[1] * surprise + weights[2] * emotion)


def _recent_unit_vectors(w: StoreWriter, n: int, tags=()) -> np.ndarray:
    """Unit float vectors of the last `n` committed records (dequantised int8); with `tags`,
    of the last `n` that carry every one of them: an item's surprise, which ingest reports as
    part of its utility, never depends on another user's records."""
    from .filters import newest_tagged

    parts, need = [], n
    for seg in reversed(w.segments):
        if need <= 0:
            break
        if not tags:
            rows = np.arange(max(0, seg.n - need), seg.n)
        else:
            blooms = np.asarray(seg.headers["synaptic_tags"], np.uint64)
            rows = np.asarray(sorted(newest_tagged(
                blooms, tags, lambda row: w.body(int(seg.ids[row])), need)), np.int64)
        if len(rows):
            parts.append(np.asarray(seg.vectors[rows], dtype=np.float32))
            need -= len(rows)
    if not parts:
        return np.zeros((0, w.manifest.dim), np.float32)
    v = np.concatenate(parts)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.maximum(norms, 1e-12)


def _checked_duplicate(w: Store, index_file, index: np.ndarray, i: int,
                       digest: bytes) -> int:
    """The record index entry `i` names, after checking that it holds text of that MD5: an
    index copied from another store would otherwise turn new input away as "duplicate"."""
    rid = int(index["record_id"][i])
    try:
        stored = w.body(rid).get("md5", digest.hex())  # a body without one cannot disagree
    except KeyError:
        raise ix.mismatch(index_file, i, rid, missing=True) from None
    if stored != digest.hex():
        raise ix.mismatch(index_file, i, rid)
    return rid


def item_tags(item: Item) -> frozenset[str]:
    """The normalised tags the record of `item` will carry (filters.exact_tags of its body):
    its own tags and its speaker:, session: and source:."""
    from .filters import exact_tags

    return frozenset(exact_tags({"tags": item.tags, "speaker": item.speaker,
                                 "session": item.session, "source": item.source}))


def _stored_statement(w: Store, index_file, index: np.ndarray, entries, digest: bytes,
                      tags: frozenset[str], timestamp_ms: int | None) -> int | None:
    """The live record that already holds this statement, or None. A duplicate is the same
    text with the same tags (so the same speaker, session and source: one user's statement is
    never taken for another's, filters.exact_tags) at the same time (any time, when the item
    gives none): the same input twice stores nothing new, but a restatement by someone else or
    later is a record of its own, so recency and --as-of see it ("standup is at 9:30" said
    again in November). A record in the trash holds nothing: a statement made again after
    `prune` is stored again. `tags`: the item's (item_tags); `timestamp_ms`: its time, if it
    gives one (_same_time)."""
    from .filters import exact_tags

    for i in reversed(entries):
        rid = _checked_duplicate(w, index_file, index, i, digest)
        seg, row = w.locate(rid)
        headers = w.segments[seg].headers
        if fl.is_tombstone(int(headers["flags"][row])) or exact_tags(w.body(rid)) != tags:
            continue
        if timestamp_ms is None or _same_time(int(headers["timestamp_ms"][row]), timestamp_ms):
            return rid
    return None


def _same_time(a: int, b: int) -> bool:
    """Two stored times of one input: equal, or one of them as an older synapse stored the
    other (legacy_ms: a millisecond early for some ISO times with a fraction of a second)."""
    return a == b or a == legacy_ms(b) or b == legacy_ms(a)


def _index_file(store: Store) -> tuple[str, object, int | None]:
    """(name, path, committed entries) of the store's ingest index; None entries when it has
    none yet (no ingest, or its file is gone)."""
    m = store.manifest
    name = m.ingest["file"] if m.ingest is not None else ix.NAME  # -G after compaction
    path = store.path / name
    if m.ingest is None or not path.exists():
        return name, path, None
    return name, path, m.ingest["entries"]


def live_copies(store: Store, ids) -> dict[int, int]:
    """For each of `ids` (records in the trash) whose statement a live record holds, that
    record's id: what deduplication answers when the same input comes again (_stored_statement
    with the record's text, tags and time), typically a log replayed after `prune`. The same
    words at another time are a statement of their own, as at ingest ("ok" twice in a chat;
    a line ingested again without a time, stamped anew): both can be live. The copy carries
    the very same tags (speaker:, session:, source: included), so it is in every scope the
    trashed record is in: no other user's record is ever named."""
    from .filters import exact_tags

    _, index_file, entries = _index_file(store)
    ids = list(dict.fromkeys(int(i) for i in ids))
    if not ids or not entries:
        return {}
    keys = {}  # id -> its statement (digest, tags, time)
    for rid, body in zip(ids, store.bodies(ids)):
        if "md5" in body and isinstance(body.get("text"), str):  # else never deduplicated
            keys[rid] = (md5_of(body["text"]), frozenset(exact_tags(body)),
                         store.header(rid).timestamp_ms)
    index = ix.read(index_file, entries)
    # the index entries of those digests, in one pass over the index (not one per id)
    wanted = np.array([np.frombuffer(k[0], "V16")[0] for k in keys.values()])
    entries_of: dict[bytes, list[int]] = {}
    if len(wanted):
        for i in np.flatnonzero(np.isin(index["md5"], wanted)).tolist():
            entries_of.setdefault(bytes(index["md5"][i]), []).append(i)
    out: dict[int, int] = {}
    first: dict[tuple, int] = {}  # statement -> the first of `ids` to make it: it holds the rest
    for rid, key in keys.items():
        live = first.get(key)
        if live is None:
            live = _stored_statement(store, index_file, index, entries_of.get(key[0], []), *key)
        if live is None:
            first[key] = rid
        else:
            out[rid] = live
    return out


def ingest(w: StoreWriter, items: list[Item], embedder, cfg: IngestConfig,
           now_ms: int | None = None) -> IngestResult:
    """Ingest `items` into the store held by writer `w` and commit. Items are already valid."""
    t0 = time.perf_counter()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    result = IngestResult()
    m = w.manifest
    index_name, index_file, committed_entries = _index_file(w)
    if committed_entries is None:
        ix.create(index_file)
        committed_entries = 0
    index = ix.read(index_file, committed_entries)
    seen: dict[bytes, list[int]] = {}  # digest -> its entries, oldest first
    for i, d in enumerate(index["md5"]):
        seen.setdefault(bytes(d), []).append(i)
    last_of_session: dict[int, int] = {}
    for key, rid in zip(index["session"].tolist(), index["record_id"].tolist()):
        if key:
            last_of_session[key] = rid  # ids increase along the file: the last one wins

    # 1. deduplicate
    fresh: list[tuple[int, Item, bytes]] = []
    batch_seen: dict[tuple, Outcome] = {}  # (digest, tags, timestamp) -> first outcome
    # (digest, tags) -> first outcome: an item without a time repeats one at any time, in the
    # batch as in the store (_stored_statement), whether or not the two came in one run
    batch_any: dict[tuple, Outcome] = {}
    repeats: list[tuple[Outcome, Outcome]] = []  # (repeat, first) inside this batch
    for item in items:
        digest = md5_of(item.text)
        rid = _stored_statement(w, index_file, index, seen.get(digest, ()), digest,
                                item_tags(item), item.timestamp_ms)
        key = (digest, item_tags(item), item.timestamp_ms)
        first = batch_any.get(key[:2]) if item.timestamp_ms is None else batch_seen.get(key)
        if rid is not None:
            result.outcomes.append(Outcome(item.where, "duplicate", rid))
        elif first is not None:
            result.outcomes.append(Outcome(item.where, "duplicate", None))
            repeats.append((result.outcomes[-1], first))
        else:
            result.outcomes.append(Outcome(item.where, "stored"))
            batch_seen[key] = result.outcomes[-1]
            batch_any.setdefault(key[:2], result.outcomes[-1])
            fresh.append((len(result.outcomes) - 1, item, digest))
    if not fresh:
        result.seconds = time.perf_counter() - t0
        return result

    # 2. embed, 3. gate
    vectors = embedder.encode([retrieval_text(it) for _, it, _ in fresh])
    if cfg.goal:
        goal = embedder.encode([cfg.goal])[0]
        sims = vectors @ goal
        keep = []
        for (slot, item, digest), vec, sim in zip(fresh, vectors, sims):
            result.outcomes[slot].goal_similarity = float(sim)
            if sim < cfg.goal_threshold:
                result.outcomes[slot].status = "gated"
            else:
                keep.append(((slot, item, digest), vec))
        fresh = [k for k, _ in keep]
        vectors = np.stack([v for _, v in keep]) if keep else vectors[:0]
    if not fresh:
        result.seconds = time.perf_counter() - t0
        return result

    # 4. utility tagging: surprise = 1 - max cosine to recent memories and earlier batch items,
    # those of the item's tags only (one user's utility must not tell what another stored)
    recent: dict[frozenset, np.ndarray] = {}
    scopes = [frozenset(normalize_tag(t) for t in item.tags) for _, item, _ in fresh]
    memories = []
    for k, ((slot, item, digest), vec) in enumerate(zip(fresh, vectors)):
        if scopes[k] not in recent:
            recent[scopes[k]] = _recent_unit_vectors(w, RECENT_FOR_SURPRISE, scopes[k])
        earlier = [j for j in range(max(0, k - RECENT_FOR_SURPRISE), k)
                   if scopes[k] <= scopes[j]]
        context = np.concatenate([recent[scopes[k]], vectors[earlier]])
        surprise = 1.0 if len(context) == 0 else float(np.clip(1 - np.max(context @ vec), 0, 1))
        emotion = max(abs(item.valence), item.arousal or 0.0)
        importance = item.importance if item.importance is not None else cfg.default_importance
        u = utility(importance, surprise, emotion, cfg.utility_weights)
        result.outcomes[slot].utility = u
        tags = list(item.tags)
        tags += [f"speaker:{item.speaker}"] if item.speaker else []
        tags += [f"session:{item.session}"] if item.session else []
        tags += [f"source:{item.source}"] if item.source else []
        memories.append(NewMemory(
            text=item.text, vector=vec,
            timestamp_ms=item.timestamp_ms if item.timestamp_ms is not None else now_ms,
            memory_type=item.memory_type, importance=importance,
            valence=int(round(item.valence * 127)),
            arousal=None if item.arousal is None else int(round(item.arousal * 255)),
            storage_strength=2.0 * u,  # CraniMem utility kept in the header (FORMAT.md 4)
            tags=tags, pinned=item.pinned, resolved=item.resolved,
            meta={"speaker": item.speaker, "session": item.session, "source": item.source,
                  "dia_id": item.dia_id, "md5": digest.hex(),
                  "chunk": list(item.chunk) if item.chunk else None,
                  "utility": {"value": round(u, 4), "surprise": round(surprise, 4),
                              "emotion": round(emotion, 4)},
                  **({"meta": item.meta} if item.meta else {})},
        ))

    # 5. append records, temporal edges, BM25, ingest index; 6. commit
    ids = w.append(memories)
    src, dst = [], []
    sessions = []
    for rid, (slot, item, digest) in zip(ids, fresh):
        result.outcomes[slot].id = rid
        key = ix.session_key(item.session, item.source, item.tags, item.speaker)
        sessions.append(key)
        if key:
            prev = last_of_session.get(key)
            # A labelled turn (own tags {plan}, or {user:ana, plan}) also follows the newest
            # turn of each part of its own tags, when newer than `prev`: it stays in its
            # conversation under every filter that lets it through ({user:ana}'s turn is its
            # link under Ana's tag, whatever Bob or an untagged turn said in between).
            wider = [last_of_session[k] for k in ix.wider_keys(
                item.session, item.source, item.tags, item.speaker) if k in last_of_session]
            for p in sorted({prev, *wider} - {None}):
                if prev is None or p >= prev:
                    src += [p, rid]  # stored both ways so activation can flow back in time
                    dst += [rid, p]
            last_of_session[key] = rid
    if src:
        w.add_edges(src, dst, gf.TEMPORAL, 1.0)

    from ..models.bm25 import BM25Index

    bm25 = BM25Index.open(w.path, m.bm25, append_only=True)
    bm25_committed = bm25.add(ids, [retrieval_text(it) for _, it, _ in fresh])
    entries = ix.make_entries([d for _, _, d in fresh], ids, sessions)
    n = ix.append(index_file, committed_entries, entries)
    w.stage(bm25=bm25_committed, ingest={"file": index_name, "entries": n})
    w.commit()
    for repeat, first in repeats:
        repeat.id = first.id  # None when the first was gated
    w.refresh()  # the next batch through this writer deduplicates against these records
    result.seconds = time.perf_counter() - t0
    return result

