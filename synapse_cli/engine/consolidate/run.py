"""`consolidate`: episodic windows -> semantic nodes and graph edges (seed 000 Algorithm 1).

Per window of N unconsolidated episodes of one session or source (oldest first):
1. replay score (seed 003 B.3) = utility * (1 + frequency bonus); low scores are kept but marked
   as prune candidates and take no part in extraction;
2. extraction (cached, FORMAT.md 13.1) of entities and relations from the kept turns, plus the
   speakers of those turns as person nodes related to what they mention (deterministic);
3. each entity becomes a node "name [TYPE] type [DESC] description" (seed 002 eq. 1), or merges
   into an existing node with the same name or name key, or cosine >= 0.92 between names that
   share a word (EMA of the vector); its description is rebuilt from its relations ("sister of
   Caroline", `role_relations`) and the clause of every episode that names it (`facts`); each
   document the window reads or names gets a node if it has none (engine/consolidate/doclinks.py);
4. ABSTRACTION edges node <-> each episode that names it, RELATION edges from the extraction,
   ASSOCIATION edges between similar nodes, document links, at most K incoming non-temporal
   edges per node (document nodes excepted);
5. dormancy (seed 000 3.1, engine/consolidate/dormancy.py; off by default, `dormancy_windows` 0): the
   window's activation is observed over the committed graph and the new state staged into the
   same commit;
6. commit (nodes, edges, BM25 postings, new payload entries, dormancy state), and only then
   rewrite existing records in place (consolidated flags, EMA vectors): see FORMAT.md 13.3 for
   why that order makes a crash at any point safe to re-run.
After the last window, PageRank of the new graph is computed and cached (FORMAT.md 16.3).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, fields

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf
from store_format.ingest_index import own_tags

from ...models.extractor import (candidate_spans, describe, role_relations, speaker_entities,
                                window_text)
from ...models.words import _SPEAKER
from .. import pagerank_cache
from ..memory import NewMemory
from ..store import StoreWriter
from . import doclinks
from .dormancy import DormancyConfig, DormancyState
from .extract_cache import ExtractCache, cache_key

MAX_LIST = 32  # sources / relations kept in a node's body
MAX_FACTS = 8  # clauses about a node kept in its body (its description is built from them)
MAX_DESC = 400  # characters of a node's description
SPEAKER_DESC = "a speaker"
_LEAD = re.compile(r"^(?:a|an|the|my|your|his|her|our|their|this|that|these|those|some)\s+")


def name_key(name: str) -> str:
    """What makes two names one node: casefolded, whitespace collapsed, one leading article or
    possessive dropped, a plural -s of the last word dropped ("the Dolomites" = "Dolomites",
    "books" = "book"; the matching rule of bench/quality/README_extract.md)."""
    k = _LEAD.sub("", " ".join(name.casefold().split()))
    return k[:-1] if len(k) > 3 and k.endswith("s") and not k.endswith("ss") else k


def mentions(name: str, text: str) -> bool:
    """Does episode `text` ("speaker: text") name `name`? Its speaker, or the name as a whole
    word anywhere in the turn (case-insensitive, a plural or possessive allowed)."""
    m = _SPEAKER.match(text)
    if m and m.group(1).casefold() == name.casefold():
        return True
    body = text[m.end():] if m else text
    stem = re.escape(name_key(name) or name.casefold())
    return re.search(rf"(?<![\w-]){stem}(?:s|es|['’]s)?(?![\w-])", body.casefold()) is not None


def describe_node(body: dict) -> str:
    """A node's description from everything known about it: the relations it states ("sister of
    Caroline") then the clauses of the episodes that mention it, oldest first (FORMAT.md 13.3)."""
    if body.get("etype") == "person" and body.get("desc") == SPEAKER_DESC \
            and not body.get("facts"):
        return SPEAKER_DESC
    parts = [f"{r[1]} {r[0]}" for r in body.get("relations", [])
             if isinstance(r, list) and len(r) >= 2 and r[1] != "talks about"]
    parts += [f for f in body.get("facts", []) if f not in parts]
    desc = "; ".join(parts) or str(body.get("desc", ""))
    return desc[:MAX_DESC].rsplit(" ", 1)[0] if len(desc) > MAX_DESC else desc


@dataclass
class ConsolidateConfig:
    window: int = 5
    prune_threshold: float = 0.15
    dedup_threshold: float = 0.92
    assoc_threshold: float = 0.92
    max_in_edges: int = 15
    abstraction_weight: float = 0.8
    ema: float = 0.1                # weight of the new vector in a merge
    entity_bonus: float = 0.1       # per entity repeated in the window or already known (<= 5)
    recall_bonus: float = 0.1       # per recall (<= 10)
    dormancy_epsilon: float = 0.01  # seed 000: activation below this is a low window
    # Seed 000: W = 10 low windows in a row archive a node; 0 = never. Default 0: on the
    # consolidated LoCoMo dev stores W = 10 archived most topics of a long conversation and cost
    # 3.7 points of recall@10 (bench/quality/consolidation_recall.py, row no-dormancy; FORMAT.md 16.1).
    dormancy_windows: int = 0
    max_seconds: float | None = None


@dataclass
class Window:
    ids: list[int]
    texts: list[str]        # what the model sees ("speaker: text")
    timestamp_ms: int       # of the newest episode
    # The document it was cut from (episodes with a source and no session), else None. A
    # document window is not time passing in the agent's life: it does not advance the
    # dormancy clock (FORMAT.md 16.1).
    source: str | None = None
    # The own tags (ingest_index.own_tags) every episode of the window carries: the tags of
    # the nodes it makes (FORMAT.md 13.3)
    tags: frozenset = frozenset()
    times: list[int] = field(default_factory=list)  # of each episode, as `ids`


@dataclass
class ConsolidateResult:
    windows: int = 0
    episodes: int = 0
    rebuilt: bool = False           # a --rebuild run (engine/consolidate/rebuild.py), which
    nodes_dropped: int = 0          # dropped these nodes first
    nodes_created: int = 0
    nodes_merged: int = 0
    edges: int = 0
    edges_removed: int = 0
    prune_candidates: int = 0
    archived: int = 0               # nodes archived as dormant by this run
    woken: int = 0                  # archived nodes a window named again
    document_nodes: int = 0         # nodes made for documents (engine/consolidate/doclinks.py)
    document_links: int = 0         # episode <-> document node links (both directions: 1)
    cache_hits: int = 0
    extract_seconds: float = 0.0
    seconds: float = 0.0
    left_windows: int = 0
    left_episodes: int = 0
    # why windows were left: "max_seconds", or "lock" (another writer held the store past
    # the lock timeout when the run came back for its next slice)
    left_because: str = ""
    setup_seconds: float = 0.0      # reading the store and planning, before the first window
    extractions: list = field(default_factory=list)  # (window ids, result), for reports

    def add(self, other: "ConsolidateResult") -> None:
        """Count `other` (the next slice of the same run) in; what is left is its."""
        for f in fields(self):
            if f.name in ("left_windows", "left_episodes", "left_because"):
                setattr(self, f.name, getattr(other, f.name))
            elif f.name not in ("seconds", "rebuilt"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("windows", "episodes", "nodes_created",
                                           "nodes_merged", "edges", "edges_removed",
                                           "prune_candidates", "archived", "woken",
                                           "document_nodes", "document_links",
                                           "cache_hits", "left_windows", "left_episodes")}
        if self.left_windows:
            d["left_because"] = self.left_because
        if self.rebuilt:  # also when it dropped nothing: one key set for every rebuild
            d["nodes_dropped"] = self.nodes_dropped
        d["seconds"] = round(self.seconds, 3)
        d["extract_seconds"] = round(self.extract_seconds, 3)
        return d


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)


def _window(chunk: list[tuple[int, int, dict]]) -> Window:
    texts = [f"{b['speaker']}: {b['text']}" if b.get("speaker") else b["text"]
             for _, _, b in chunk]
    source = chunk[0][2].get("source")
    document = all(b.get("source") == source and not b.get("session") for _, _, b in chunk)
    return Window([r for _, r, _ in chunk], texts, max(t for t, _, _ in chunk),
                  source if source and document else None, _own_tags(chunk[0][2]),
                  [t for t, _, _ in chunk])


def _own_tags(body: dict) -> frozenset:
    return frozenset(own_tags(body.get("tags") or (), body.get("speaker"), body.get("session"),
                              body.get("source")))


def plan_windows(store, size: int, resume=()) -> list[Window]:
    """Unconsolidated live episodes grouped by session, else source, else alone; each stream in
    (timestamp, id) order cut into windows of `size`, one set of own tags at a time (two users'
    memories never share a window, and how one user's are cut never depends on another's);
    windows ordered oldest first.

    `resume`: the episodes of the last window committed (FORMAT.md 16). When a crash
    interrupted its in-place rewrites, some of them are still unflagged: that window comes
    first, whole (flagged members included), so it is redone exactly (extraction cache hit,
    same nodes and edge keys) and the later windows keep the boundaries of an uninterrupted
    run."""
    resume = {int(i) for i in resume}
    streams: dict[tuple, list[tuple[int, int, dict]]] = {}
    again: list[tuple[int, int, dict]] = []
    pending = False
    for seg in store.segments:
        f = np.asarray(seg.headers["flags"])
        live = (fl.memory_type_code(f) == fl.MemoryType.EPISODIC) & ~fl.is_tombstone(f)
        todo = live & ~fl.is_consolidated(f)
        ids = np.asarray(seg.ids)
        in_resume = live & np.isin(ids, np.fromiter(resume, np.uint64, len(resume)))
        ts = np.asarray(seg.headers["timestamp_ms"])
        rows = np.flatnonzero(todo | in_resume)
        # one checked read per segment, not one per record: planning a large first run
        # (100k episodes) is what a slice of it waits for (api.SLICE_SETUP_RATIO)
        for row, body in zip(rows.tolist(), store.bodies(ids[rows])):
            rid = int(ids[row])
            if in_resume[row]:
                again.append((int(ts[row]), rid, body))
                pending |= bool(todo[row])
                continue
            key = (f"session:{body['session']}" if body.get("session") else
                   f"source:{body['source']}" if body.get("source") else f"record:{rid}")
            streams.setdefault((key, _own_tags(body)), []).append((int(ts[row]), rid, body))
    windows = []
    for items in streams.values():
        items.sort(key=lambda x: (x[0], x[1]))
        for i in range(0, len(items), size):
            windows.append(_window(items[i:i + size]))
    windows.sort(key=lambda w: (w.timestamp_ms - 0, w.ids[0]))
    if pending:
        again.sort(key=lambda x: (x[0], x[1]))
        windows.insert(0, _window(again))
    return windows


class NodeIndex:
    """The semantic nodes in memory: unit vectors for the dense dedup scan, names, bodies and
    tags. A mention joins only a node whose tags are all its own (FORMAT.md 13.3): one "Paris"
    per user, and a user's labelled memories still join that user's nodes."""

    def __init__(self, dim: int):
        self.ids: list[int] = []
        self.vectors = np.zeros((0, dim), np.float32)
        self.bodies: list[dict] = []
        self.tags: list[frozenset] = []
        # each node's tag set as a small code, so that the dense scans mask by numpy
        self.codes: dict[frozenset, int] = {}
        self.code = np.zeros(0, np.int32)
        self.by_name: dict[str, list[int]] = {}  # casefolded name -> indices
        self.by_key: dict[str, list[int]] = {}   # name_key -> indices: a name and its forms

    @classmethod
    def load(cls, store) -> "NodeIndex":
        idx = cls(store.manifest.dim)
        vecs = []
        for seg in store.segments:
            f = np.asarray(seg.headers["flags"])
            rows = np.flatnonzero((fl.memory_type_code(f) == fl.MemoryType.SEMANTIC)
                                  & ~fl.is_tombstone(f))
            ids = np.asarray(seg.ids)[rows]
            for row, rid, body in zip(rows.tolist(), ids.tolist(), store.bodies(ids)):
                vecs.append(_unit(np.asarray(seg.vectors[row], np.float32)))  # dequantised
                idx._add(rid, body)
        if vecs:
            idx.vectors = np.stack(vecs)
        return idx

    def _add(self, rid: int, body: dict) -> int:
        i = len(self.ids)
        self.ids.append(rid)
        self.bodies.append(body)
        tags = frozenset(body.get("tags") or ())
        self.tags.append(tags)
        self.code = np.append(self.code, np.int32(self.codes.setdefault(tags, len(self.codes))))
        name = str(body.get("name", ""))
        self.by_name.setdefault(name.casefold(), []).append(i)
        self.by_key.setdefault(name_key(name), []).append(i)
        return i

    def _within(self, hits, tags: frozenset) -> int | None:
        """Of `hits`, the node a mention carrying `tags` joins: of those whose tags are all in
        `tags`, the one with the most, first made first. A node's tags never change: what
        another user stores never decides which node is one user's."""
        within = [i for i in hits if self.tags[i] <= tags]
        return max(within, key=lambda i: (len(self.tags[i]), -i)) if within else None

    def find(self, name: str, tags=frozenset()) -> int | None:
        """The node of this name (compared case-insensitively) that a mention carrying `tags`
        joins (_within), else None."""
        return self._within(self.by_name.get(name.casefold(), []), frozenset(tags))

    def document(self, source: str) -> int | None:
        """The node of a document: the untagged node of its name (one per source), else None."""
        return next((i for i in self.by_name.get(source.casefold(), []) if not self.tags[i]),
                    None)

    def other_tags(self, tags) -> np.ndarray:
        """bool per node: its tags are not `tags`."""
        return self.code != self.codes.get(frozenset(tags), -1)

    def not_within(self, tags) -> np.ndarray:
        """bool per node: some of its tags are not in `tags` (a mention carrying `tags` may
        not join it)."""
        return ~np.isin(self.code, [c for t, c in self.codes.items() if t <= tags])

    def add(self, rid: int, body: dict, vector: np.ndarray) -> int:
        self.vectors = np.concatenate([self.vectors, _unit(vector)[None]])
        return self._add(rid, body)

    def match(self, name: str, vector: np.ndarray, threshold: float,
              tags=frozenset()) -> int | None:
        """Among the nodes a mention carrying `tags` may join (find): same name (case-insensitive)
        first, then the same `name_key` ("the Dolomites", "books"): descriptions differ from
        window to window, so two mentions of "Caroline" can fall below the cosine threshold;
        then cosine, only between names that share a word: two names described by the same
        clause ("the Dolomites with her sister Maya") embed alike and must stay two nodes."""
        tags = frozenset(tags)
        hit = self.find(name, tags)
        if hit is None:
            hit = self._within(self.by_key.get(name_key(name), []), tags)
        if hit is not None:
            return hit
        if len(self.ids):
            sims = self.vectors @ vector
            sims[self.not_within(tags)] = -np.inf
            words = set(name_key(name).split())
            for best in np.argsort(-sims)[:5].tolist():
                if sims[best] < threshold:
                    break
                if words & set(name_key(str(self.bodies[best].get("name", ""))).split()):
                    return int(best)
        return None


class InEdges:
    """Incoming non-temporal edges per node, {dst: {(src, type): weight}}, for the top-K rule.
    Nodes in `exempt` (document nodes, engine/consolidate/doclinks.py) keep every incoming edge."""

    def __init__(self, graph: gf.CSRGraph, exempt=frozenset()):
        self.exempt = set(exempt)
        self.map: dict[int, dict[tuple[int, int], float]] = {}
        counts = np.diff(graph.indptr.astype(np.int64))
        src = np.repeat(graph.node_ids, counts)
        dst = graph.node_ids[graph.indices.astype(np.intp)]
        for s, d, t, w in zip(src.tolist(), dst.tolist(), graph.types.tolist(),
                              graph.weights.tolist()):
            if t != gf.TEMPORAL:
                self.map.setdefault(d, {})[(s, t)] = w

    def upsert(self, src: int, dst: int, etype: int, weight: float) -> None:
        # as the edge log will hold it (float32): an edge read back from an earlier run must
        # rank exactly as it did when it was new, or the graph depends on how many runs the
        # work took (a reloaded 0.800000011920929 outranked a new 0.8, and a hub kept its first
        # sources instead of its newest)
        self.map.setdefault(dst, {})[(src, etype)] = float(np.float32(weight))

    def excess(self, dst: int, k: int) -> list[tuple[int, int]]:
        """(src, type) of the edges beyond the K strongest (ties: the older source goes)."""
        edges = self.map.get(dst, {})
        if len(edges) <= k or dst in self.exempt:
            return []
        ranked = sorted(edges.items(), key=lambda e: (-e[1], -e[0][0], e[0][1]))
        drop = [key for key, _ in ranked[k:]]
        for key in drop:
            del edges[key]
        return drop


def replay_scores(w: StoreWriter, win: Window, nodes: NodeIndex,
                  cfg: ConsolidateConfig) -> np.ndarray:
    """ReplayScore = utility * (1 + FreqBonus) (seed 003 B.3). Utility is header
    storage_strength / 2; the bonus counts entity candidates the turn shares with another turn
    of the window or with a known node, and the turn's recall_count."""
    cands = candidate_spans(window_text(win.texts))
    scores = []
    for i, (rid, text) in enumerate(zip(win.ids, win.texts)):
        h = w.header(rid)
        rep = sum(1 for c in cands if c in text and (
            nodes.find(c, win.tags) is not None
            or any(c in t for j, t in enumerate(win.texts) if j != i)))
        bonus = cfg.entity_bonus * min(rep, 5) + cfg.recall_bonus * min(h.recall_count, 10)
        scores.append(min(1.0, h.storage_strength / 2.0) * (1.0 + bonus))
    return np.asarray(scores, np.float64)


def _append_nodes(w: StoreWriter, nodes: NodeIndex, pending: list) -> None:
    """Append new semantic nodes ((NewMemory, index in `nodes`) pairs), give them their ids
    and stage their BM25 postings ("name desc") for the next commit."""
    new_ids = w.append([m for m, _ in pending])
    for rid, (_, i) in zip(new_ids, pending):
        nodes.ids[i] = rid
    if new_ids:
        from ...models.bm25 import BM25Index

        bm25 = BM25Index.open(w.path, w.manifest.bm25, append_only=True)
        w.stage(bm25=bm25.add(new_ids, [f"{nodes.bodies[i]['name']} {nodes.bodies[i]['desc']}"
                                        for _, i in pending]))


class Documents:
    """The documents a run knows (engine/consolidate/doclinks.py): their names, to find them in text, and
    the first chunk of each planned one, to describe its node when a window first needs it."""

    def __init__(self, windows: list[Window], nodes: NodeIndex):
        self._bm25 = None  # opened on first need: the episodes ingested before this run
        self.names = doclinks.DocumentNames(b["name"] for b in nodes.bodies
                                            if doclinks.is_document(b))
        self.first_chunk: dict[str, str] = {}
        for win in windows:
            if win.source is not None and win.source not in self.first_chunk:
                self.first_chunk[win.source] = win.texts[0]
                self.names.add(win.source)

    def links(self, win: Window, text: str, weight: float) -> list[tuple[str, float]]:
        """(source, weight) of the documents one episode of `win` links to: its own (1) and
        every other one its text names (`weight`)."""
        out = [(s, weight) for s in self.names.mentioned(text) if s != win.source]
        return out + ([(win.source, 1.0)] if win.source is not None else [])

    def earlier_mentions(self, w: StoreWriter, source: str) -> list[int]:
        """Consolidated live episodes of other documents or conversations that name `source`,
        found through the BM25 postings of its name: those consolidated before the document was
        known get their link when its node is made."""
        one = doclinks.DocumentNames([source])
        if not len(one):  # a name never matched (too short, a common word)
            return []
        if self._bm25 is None:
            from ...models.bm25 import BM25Index

            self._bm25 = BM25Index.open(w.path, w.manifest.bm25)
        out = []
        for rid in self._bm25.containing(doclinks.base_name(source)).tolist():
            try:
                h = w.header(rid)
            except KeyError:
                continue
            # An episode still to consolidate gets its links from its own window.
            if (fl.is_tombstone(h.flags) or not fl.is_consolidated(h.flags)
                    or fl.memory_type(h.flags) == fl.MemoryType.SEMANTIC):
                continue
            body = w.body(rid)
            if body.get("source") != source and one.mentioned(str(body.get("text", ""))):
                out.append(int(rid))
        return out


def _process_window(w: StoreWriter, win: Window, extractor, embedder, cache: ExtractCache,
                    nodes: NodeIndex, inedges: InEdges, dormancy: DormancyState,
                    docs: Documents, cfg: ConsolidateConfig, res: ConsolidateResult) -> None:
    scores = replay_scores(w, win, nodes, cfg)
    keep = [i for i in range(len(win.ids)) if scores[i] >= cfg.prune_threshold]
    kept_ids = [win.ids[i] for i in keep]
    kept_texts = [win.texts[i] for i in keep]
    result = {"entities": [], "relations": []}
    if keep:
        key = cache_key(extractor.cache_id, window_text(kept_texts))
        cached = cache.get(key)
        if cached is not None:
            result = cached
            res.cache_hits += 1
        else:
            t0 = time.perf_counter()
            result = extractor.extract(kept_texts)
            res.extract_seconds += time.perf_counter() - t0
            cache.put(key, result)
        # Speakers are linked deterministically (never by the model): a person node each,
        # related to what they mention. Not cached: it costs nothing and the rule may change.
        result = role_relations(kept_texts, speaker_entities(kept_texts, result))
    res.extractions.append((win.ids, result))

    # Nodes: merge or create. `slot` maps an entity name to its node (existing or pending).
    ents = result["entities"]
    speaker_names = {t.split(": ", 1)[0].casefold() for t in kept_texts if _SPEAKER.match(t)}
    # Which kept episodes name each entity (a speaker: their own turns too): a node is linked
    # to those, not to the whole window, and described by their clauses.
    seen_in = [[ep for ep, t in zip(kept_ids, kept_texts) if mentions(e["name"], t)] or
               list(kept_ids) for e in ents]
    facts = [[] if e["name"].casefold() in speaker_names else
             list(dict.fromkeys(c for c in (describe(e["name"], [t]) for t in kept_texts
                                            if mentions(e["name"], t)) if c))
             for e in ents]
    first = [{"name": e["name"], "etype": e["type"], "facts": f,
              "desc": SPEAKER_DESC if e["name"].casefold() in speaker_names else
              e["description"], "relations": []} for e, f in zip(ents, facts)]
    # The vector embeds the name with its first clause only (as before facts): every clause
    # of the window would make the text several times longer and MiniLM as many times slower.
    vecs = embedder.encode([f"{e['name']} [TYPE] {e['type']} [DESC] "
                            f"{(b['facts'] or [b['desc']])[0]}"
                            for e, b in zip(ents, first)]) if ents \
        else np.zeros((0, w.manifest.dim))
    pending: list[tuple[NewMemory, int]] = []   # (memory, index in `nodes`)
    touched_existing: dict[int, None] = {}
    window_nodes: dict[str, int] = {}           # casefolded name -> index in `nodes`
    n_existing = len(nodes.ids)
    # Document nodes first (engine/consolidate/doclinks.py), so that a name the model also extracts merges
    # into them: made when a window first reads or names the document; an entity node of the
    # same name is taken over (marked `document`, rewritten after the commit).
    doc_links = [(ep, src, wt) for ep, text in zip(win.ids, win.texts)
                 for src, wt in docs.links(win, text, cfg.abstraction_weight)]
    missing = list(dict.fromkeys(src for _, src, _ in doc_links
                                 if nodes.document(src) is None))
    # A new node is stamped with the newest episode that links it, not the window's newest:
    # a time filter keeps a node only when its stamp and every record it links are inside
    # (RecallArrays.reaching_outside), so the window's stamp hid a node about episode 2 from
    # `--until` episode 3.
    time_of = dict(zip(win.ids, win.times))
    made = [doclinks.node_text(src, docs.first_chunk.get(src, "")) for src in missing]
    for src, (text, desc), v in zip(missing, made, embedder.encode([t for t, _ in made])
                                    if made else []):
        body = {"name": src, "etype": doclinks.DOCUMENT_TYPE, "desc": desc, "sources": [],
                "relations": []}
        when = max((time_of[ep] for ep, s, _ in doc_links if s == src and ep in time_of),
                   default=win.timestamp_ms)
        pending.append((NewMemory(text=text, vector=v, timestamp_ms=when,
                                  memory_type=fl.MemoryType.SEMANTIC, resolved=True, meta={}),
                        nodes.add(0, body, v)))
        res.document_nodes += 1
        doc_links += [(ep, src, cfg.abstraction_weight) for ep in docs.earlier_mentions(w, src)
                      if ep not in win.ids]
    for src in {src for _, src, _ in doc_links}:
        hit = nodes.document(src)
        if not doclinks.is_document(nodes.bodies[hit]):
            nodes.bodies[hit]["document"] = True
            touched_existing[hit] = None
    node_eps: dict[int, list[int]] = {}       # index in `nodes` -> episodes that name it
    for e, v, eps, f, b0 in zip(ents, vecs, seen_in, facts, first):
        v = _unit(v)
        hit = nodes.match(e["name"], v, cfg.dedup_threshold, win.tags)
        if hit is not None:
            nodes.vectors[hit] = _unit((1 - cfg.ema) * nodes.vectors[hit] + cfg.ema * v)
            body = nodes.bodies[hit]
            old = [s for s in body.get("sources", []) if s not in eps]
            body["sources"] = (old + eps)[-MAX_LIST:]
            if f and not doclinks.is_document(body):
                had = body.get("facts")
                if had is None:  # a node from before facts: its one clause is the first fact
                    d = str(body.get("desc", ""))
                    had = [d] if d and d != SPEAKER_DESC else []
                body["facts"] = list(dict.fromkeys(list(had) + f))[:MAX_FACTS]
            if hit < n_existing:
                touched_existing[hit] = None
                res.nodes_merged += 1
        else:
            body = dict(b0, sources=list(eps), **({"tags": sorted(win.tags)} if win.tags else {}))
            hit = nodes.add(0, body, v)  # id assigned at append
            when = max((time_of[ep] for ep in eps if ep in time_of), default=win.timestamp_ms)
            pending.append((NewMemory(text="", vector=v, timestamp_ms=when,
                                      memory_type=fl.MemoryType.SEMANTIC, resolved=True,
                                      tags=sorted(win.tags), meta={}), hit))
            res.nodes_created += 1
        window_nodes[e["name"].casefold()] = hit
        node_eps[hit] = list(dict.fromkeys(node_eps.get(hit, []) + eps))
    for r in result["relations"]:
        s, d = window_nodes.get(r["src"].casefold()), window_nodes.get(r["dst"].casefold())
        if s is not None and d is not None and s != d:
            rels = nodes.bodies[s].setdefault("relations", [])
            entry = [nodes.bodies[d]["name"], r["rel"], float(r["weight"])]
            if entry not in rels:
                rels[:] = (rels + [entry])[-MAX_LIST:]
            if s < n_existing:
                touched_existing[s] = None

    for i in set(window_nodes.values()):  # descriptions from all that is known now
        b = nodes.bodies[i]
        if not doclinks.is_document(b):
            b["desc"] = describe_node(b)
    for mem, i in pending:  # bodies are final now (relations of this window included)
        b = nodes.bodies[i]
        if not mem.text:
            mem.text = f"{b['name']} [TYPE] {b['etype']} [DESC] {b['desc']}"
        mem.meta = dict(b)
        mem.vector = nodes.vectors[i]
    _append_nodes(w, nodes, pending)

    # Edges.
    src, dst, typ, wgt = [], [], [], []

    def edge(a: int, b: int, t: int, x: float) -> None:
        x = float(min(1.0, max(0.0, x)))
        src.append(a), dst.append(b), typ.append(t), wgt.append(x)
        inedges.upsert(a, b, t, x)

    for i in sorted(set(window_nodes.values()), key=lambda i: nodes.ids[i]):
        for ep in node_eps[i]:
            edge(ep, nodes.ids[i], gf.ABSTRACTION, cfg.abstraction_weight)
            edge(nodes.ids[i], ep, gf.ABSTRACTION, cfg.abstraction_weight)
    for r in result["relations"]:
        s, d = window_nodes.get(r["src"].casefold()), window_nodes.get(r["dst"].casefold())
        if s is not None and d is not None and s != d:
            edge(nodes.ids[s], nodes.ids[d], gf.RELATION, r["weight"])
    # Document links (engine/consolidate/doclinks.py), after the abstraction edges so that an episode's
    # own document keeps weight 1 when the model also named it. Every episode of the window,
    # prune candidates too: what a chunk names is a fact about its text, not an extraction.
    linked: set[int] = set()
    for ep, source, weight in doc_links:
        nid = nodes.ids[nodes.document(source)]
        edge(ep, nid, gf.ABSTRACTION, weight)
        edge(nid, ep, gf.ABSTRACTION, weight)
        inedges.exempt.add(nid)
        linked.add(nid)
        res.document_links += 1
    for i in sorted(set(window_nodes.values())):
        sims = nodes.vectors @ nodes.vectors[i]
        sims[i] = -1.0
        # only between nodes of one tag set: no edge from another user's node, nor from an
        # untagged node that every user's mentions may join
        sims[nodes.other_tags(nodes.tags[i])] = -1.0
        for j in np.argsort(-sims)[:cfg.max_in_edges]:
            if sims[j] <= cfg.assoc_threshold:
                break
            edge(nodes.ids[i], nodes.ids[int(j)], gf.ASSOCIATION, sims[j])
            edge(nodes.ids[int(j)], nodes.ids[i], gf.ASSOCIATION, sims[j])
    if src:
        w.add_edges(src, dst, np.asarray(typ, np.uint8), np.asarray(wgt, np.float32))
        res.edges += len(src)
    rs, rd, rt = [], [], []
    for d in sorted(set(dst)):
        for s, t in inedges.excess(d, cfg.max_in_edges):
            rs.append(s), rd.append(d), rt.append(t)
    if rs:  # after the upserts in the same commit: the log applies entries in order
        w.add_edges(rs, rd, np.asarray(rt, np.uint8), 0.0, gf.REMOVE)
        res.edges_removed += len(rs)

    # Dormancy: observed over the committed graph, staged into this window's commit.
    named = {nodes.ids[i] for i in window_nodes.values() if i < n_existing} | linked
    before = set(dormancy.archived_ids())
    archived = dormancy.observe(w, win.ids, named, DormancyConfig(cfg.dormancy_epsilon,
                                                                  cfg.dormancy_windows),
                                clock=win.source is None)
    dormancy.stage(w)
    res.woken += len(before & named)
    res.archived += len(archived)

    # In-place rewrites of committed records: applied by commit() after the manifest.
    for i in touched_existing:
        b = nodes.bodies[i]
        text = w.body(nodes.ids[i])["text"] if doclinks.is_document(b) else \
            f"{b['name']} [TYPE] {b['etype']} [DESC] {b['desc']}"
        w.rewrite_after_commit(nodes.ids[i], vector=nodes.vectors[i], body={**b, "text": text})
    for k, rid in enumerate(win.ids):
        h = w.header(rid)
        h = h.replace(flags=fl.set_flag(h.flags, fl.CONSOLIDATED))
        if scores[k] < cfg.prune_threshold:
            body = dict(w.body(rid), prune_candidate=True, replay_score=round(float(scores[k]), 4))
            w.rewrite_after_commit(rid, header=h, body=body)
            res.prune_candidates += 1
        else:
            w.rewrite_after_commit(rid, header=h)
    w.commit()
    w.refresh()
    res.windows += 1
    res.episodes += len(win.ids)


def consolidate(w: StoreWriter, extractor, embedder, cfg: ConsolidateConfig | None = None,
                progress=None, at_least_one: bool = False,
                pagerank: bool = True) -> ConsolidateResult:
    """Consolidate every pending window of the store held by writer `w`, one commit each.

    `progress(done, total)` is called after each window. Stops between windows once
    `cfg.max_seconds` have passed (after the first window with `at_least_one`: a slice of a
    longer run always moves on, however long planning took); `left_windows` /
    `left_episodes` say what remains. `pagerank`: refresh the PageRank cache at the end
    (a sliced run does it once, after its last slice).
    """
    cfg = cfg or ConsolidateConfig()
    t0 = time.perf_counter()
    res = ConsolidateResult()
    dormancy = DormancyState.load(w)
    windows = plan_windows(w, cfg.window, resume=dormancy.last_window)
    if not windows:
        res.seconds = time.perf_counter() - t0
        return res
    cache = ExtractCache(w.path)
    nodes = NodeIndex.load(w)
    docs = Documents(windows, nodes)
    inedges = InEdges(w.graph(), {nodes.ids[i] for i, b in enumerate(nodes.bodies)
                                  if doclinks.is_document(b)})
    res.setup_seconds = time.perf_counter() - t0
    for n, win in enumerate(windows):
        if cfg.max_seconds is not None and time.perf_counter() - t0 >= cfg.max_seconds \
                and not (at_least_one and n == 0):
            res.left_windows = len(windows) - n
            res.left_episodes = sum(len(x.ids) for x in windows[n:])
            res.left_because = "max_seconds"
            break
        _process_window(w, win, extractor, embedder, cache, nodes, inedges, dormancy, docs, cfg,
                        res)
        if progress is not None:
            progress(n + 1, len(windows))
    if res.windows and pagerank:  # the graph changed: PageRank once, for every recall until
        pagerank_cache.refresh(w)    # the next change
    res.seconds = time.perf_counter() - t0
    return res
