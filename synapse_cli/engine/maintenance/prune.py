"""`prune`: forgetting (seed 000 section 3.1 and "right to be forgotten", seed 003 pruning to
trash, seed 004 tombstone/pinned/Zeigarnik), and `mark` (pin, resolve).

Policies select records; selected records go to the *trash* (tombstone flag set in place,
FORMAT.md 14.1) where `restore` can bring them back; `compact` empties the trash by rewriting
the store (14.2); `purge` is compaction plus the removal of every other copy (14.3).

Policies (combinable; a record is selected when any policy matches, or every one with
``match="all"``):
- decayed: effective decay (seed 004, `scoring.effective_decay`) x importance below a
  threshold at a time;
- dormant: semantic nodes that consolidation archived because their activation stayed below
  epsilon for W windows (seed 000 garbage collection; engine/consolidate/dormancy.py, FORMAT.md 16);
- low utility: header utility (storage_strength / 2, CraniMem) below a threshold, or marked
  `prune_candidate` by consolidation (seed 003);
- before: formed before a time;
- ids: named records;
- tags: any of the tags, exactly (engine/filters.py: the Bloom bits pre-select, the payload decides;
  speaker:, session: and source: included);
- query: "forget what matches this": hybrid (dense + BM25) recall, kept where the dense
  similarity reaches a floor.
`within` is not a policy but a scope: when given, only records carrying every one of its tags
can be selected, named by id or matched by a query ("forget what user:bob said about his
PIN"); nothing outside it is listed, not even a dry run's query matches.
Protection: pinned records are never pruned; unresolved ones (Zeigarnik, resolved bit 0) only
when named by id.
"""
from __future__ import annotations

import re
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from store_format import compaction
from store_format import dormancy as dm
from store_format import flags as fl
from store_format import graph_files as gf
from store_format.errors import StoreError, StoreIOError
from store_format.fileio import file_sizes
from store_format.tags import normalize_tag

from ..filters import header_tags, tag_mask
from ..scoring import effective_decay_array
from ..store import Store, StoreWriter

POLICY_NAMES = ("decayed", "dormant", "low_utility", "before", "id", "tag", "query")


@dataclass
class PrunePolicy:
    decayed_below: float | None = None
    at_ms: int | None = None           # when decay is evaluated (default: now)
    dormant: bool = False
    low_utility_below: float | None = None
    before_ms: int | None = None
    ids: tuple = ()
    tags: tuple = ()
    query: str | None = None
    min_similarity: float = 0.45
    match: str = "any"                 # any | all
    within: tuple = ()                 # scope: every tag required (not a policy)

    def active(self) -> list[str]:
        on = {"decayed": self.decayed_below is not None, "dormant": self.dormant,
              "low_utility": self.low_utility_below is not None,
              "before": self.before_ms is not None, "id": bool(self.ids),
              "tag": bool(self.tags), "query": self.query is not None}
        return [n for n in POLICY_NAMES if on[n]]


@dataclass
class Selection:
    policies: dict = field(default_factory=dict)    # policy -> ids it matched (live records)
    protected: dict = field(default_factory=dict)   # pinned / unresolved -> ids spared
    selected: list = field(default_factory=list)    # ids that go to the trash
    query_matches: list = field(default_factory=list)  # [{id, similarity, text}] for --query
    not_found: list = field(default_factory=list)   # --id values the store does not hold
    in_trash: list = field(default_factory=list)    # --id values already tombstoned
    out_of_scope: list = field(default_factory=list)  # ids without every `within` tag

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Table:
    """Header columns of every committed record, in id order."""

    ids: np.ndarray
    flags: np.ndarray
    ts: np.ndarray
    recall: np.ndarray
    arousal: np.ndarray
    strength: np.ndarray
    importance: np.ndarray

    @classmethod
    def of(cls, store: Store) -> "Table":
        def col(name, dtype, default):
            parts = [np.asarray(s.headers[name], dtype) if name in s.headers.dtype.names
                     else np.full(s.n, default, dtype) for s in store.segments]
            return np.concatenate(parts) if parts else np.zeros(0, dtype)

        return cls(np.asarray(store.ids, np.uint64), col("flags", np.uint8, 0),
                   col("timestamp_ms", np.int64, 0), col("recall_count", np.int64, 0),
                   col("arousal", np.int64, 0), col("storage_strength", np.float32, 1.0),
                   col("importance", np.float32, 1.0))


def _dormant(store: Store, t: Table, live: np.ndarray) -> np.ndarray:
    """Mask of live records the committed dormancy state archives (FORMAT.md 16)."""
    return live & np.isin(t.ids, dm.archived_ids(store.path, store.manifest.dormancy))


def select(store: Store, policy: PrunePolicy, embedder=None, now_ms: int | None = None) -> Selection:
    """What `policy` would send to the trash (nothing is written)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    t = Table.of(store)
    n = len(t.ids)
    live = ~fl.is_tombstone(t.flags)
    sel = Selection()
    scope = tag_mask(store, policy.within) if policy.within else np.ones(n, bool)
    masks: dict[str, np.ndarray] = {}
    if policy.decayed_below is not None:
        at = policy.at_ms if policy.at_ms is not None else now_ms
        d = effective_decay_array(at - t.ts, t.recall, t.arousal, t.flags)
        masks["decayed"] = live & (d * t.importance < np.float32(policy.decayed_below))
    if policy.low_utility_below is not None:
        low = live & (t.strength / np.float32(2.0) < np.float32(policy.low_utility_below))
        for pos in np.flatnonzero(live & ~low & fl.is_consolidated(t.flags)).tolist():
            if store.body(int(t.ids[pos])).get("prune_candidate") is True:
                low[pos] = True
        masks["low_utility"] = low
    if policy.before_ms is not None:
        masks["before"] = live & (t.ts < policy.before_ms)
    if policy.ids:
        m = np.zeros(n, bool)
        for rid in dict.fromkeys(int(i) for i in policy.ids):
            pos = int(np.searchsorted(t.ids, np.uint64(rid))) if 0 < rid < 2**64 else n
            if pos >= n or int(t.ids[pos]) != rid:
                # under a scope, an id the store does not hold looks like another user's: a
                # scoped agent cannot probe which ids exist
                (sel.out_of_scope if policy.within else sel.not_found).append(rid)
            elif not scope[pos]:
                sel.out_of_scope.append(rid)
            elif not live[pos]:
                sel.in_trash.append(rid)
            else:
                m[pos] = True
        masks["id"] = m
    if policy.tags:  # any of the tags, each exactly (engine/filters.py)
        m = np.zeros(n, bool)
        for tag in policy.tags:
            if normalize_tag(tag):
                m |= tag_mask(store, [tag], candidates=live)
        masks["tag"] = m
    if policy.query is not None:
        masks["query"] = _query_mask(store, policy, t, live & scope, embedder, now_ms, sel)
    if policy.dormant:
        masks["dormant"] = _dormant(store, t, live)

    for name in POLICY_NAMES:
        if name in masks:
            sel.policies[name] = [int(x) for x in t.ids[masks[name] & scope]]
    if not masks:
        return sel
    combine = np.logical_and if policy.match == "all" else np.logical_or
    chosen = combine.reduce([masks[k] for k in masks]) & live & scope
    pinned = chosen & fl.is_pinned(t.flags)
    named = masks.get("id", np.zeros(n, bool))
    unresolved = chosen & ~pinned & ~fl.is_resolved(t.flags) & ~named
    sel.protected = {"pinned": [int(x) for x in t.ids[pinned]],
                     "unresolved": [int(x) for x in t.ids[unresolved]]}
    sel.selected = [int(x) for x in t.ids[chosen & ~pinned & ~unresolved]]
    return sel


def _query_mask(store, policy, t, live, embedder, now_ms, sel) -> np.ndarray:
    from .. import graphview
    from ..recall import RecallConfig, recall

    if embedder is None:
        from ..embedding import embedder as default_embedder

        embedder = default_embedder()
    # within the scope from the start: the best 1,000 of every user could hold none of its own
    cfg = RecallConfig(mode="hybrid", k=1000, gate=False, tags=tuple(policy.within))
    vec = embedder.encode([policy.query])[0]
    res = recall(store, policy.query, vec, cfg, graphview.build(store), now_ms=now_ms)
    m = np.zeros(len(t.ids), bool)
    for r in res["results"]:
        pos = int(np.searchsorted(t.ids, np.uint64(r["id"])))
        if r["signals"]["semantic"] >= policy.min_similarity and live[pos]:
            m[pos] = True
            sel.query_matches.append({"id": r["id"], "similarity": r["signals"]["semantic"],
                                      "text": r["text"]})
    return m


# --- writing -----------------------------------------------------------------------------------


def set_bit(w: StoreWriter, ids, bit: int, on: bool) -> list[int]:
    """Set or clear one flag bit; returns the ids that changed."""
    updates, changed = {}, []
    for rid in dict.fromkeys(int(i) for i in ids):
        seg, row = w.locate(rid)
        old = int(w.segments[seg].raw[row, 31])
        new = fl.set_flag(old, bit, on)
        if new != old:
            updates[rid] = new
            changed.append(rid)
    w.set_flags(updates)  # checks every record before rewriting any
    return changed


def trash(w: StoreWriter, ids) -> list[int]:
    """Tombstone `ids` (FORMAT.md 14.1); returns the ids that were live."""
    return set_bit(w, ids, fl.TOMBSTONE, True)


def restore_plan(store: Store, ids) -> dict:
    """What `restore` would do with `ids`, which the store holds: `restore` (in the trash),
    `not_in_trash`, and `already_live`, [{id, live_id}]: a record whose statement a live record
    already holds (the same input ingested again after the prune, ingest.live_copies) stays in the
    trash, since restoring it would make two live copies of one statement."""
    from ..ingest import live_copies

    asked = list(dict.fromkeys(int(i) for i in ids))
    trashed = [r for r in asked if fl.is_tombstone(store.header(r).flags)]
    live, gone = live_copies(store, trashed), set(trashed)
    return {"restore": [r for r in trashed if r not in live],
            "not_in_trash": [r for r in asked if r not in gone],
            "already_live": [{"id": r, "live_id": m} for r, m in live.items()]}


def restore(w: StoreWriter, ids) -> dict:
    """Take records out of the trash (restore_plan). Ids that compaction already removed are
    `not_found`."""
    found, missing = [], []
    for rid in dict.fromkeys(int(i) for i in ids):
        try:
            w.locate(rid)
            found.append(rid)
        except KeyError:
            missing.append(rid)
    plan = restore_plan(w, found)
    restored = set_bit(w, plan["restore"], fl.TOMBSTONE, False)
    return {"restored": restored, "not_in_trash": plan["not_in_trash"],
            "already_live": plan["already_live"], "not_found": missing}


class InTrash(ValueError):
    """Pinning a record in the trash: compaction would delete it all the same."""


def mark(w: StoreWriter, ids, pin: bool | None = None, resolve: bool | None = None,
         restore_dormant: bool = False) -> list[dict]:
    """Pin/unpin and resolve/unresolve records, and bring dormant (archived) nodes back into
    the active graph; every id is checked before anything changes."""
    from ..consolidate import dormancy

    ids = list(dict.fromkeys(int(i) for i in ids))
    for rid in ids:
        w.locate(rid)  # KeyError for an unknown id, before any write
        if pin and fl.is_tombstone(w.header(rid).flags):
            raise InTrash(rid)
    updates = {}
    for rid in ids:
        f = w.header(rid).flags  # a checked read
        if pin is not None:
            f = fl.set_flag(f, fl.PINNED, pin)
        if resolve is not None:
            f = fl.set_flag(f, fl.RESOLVED, resolve)
        updates[rid] = f
    w.set_flags(updates)
    if restore_dormant:
        dormancy.restore(w, ids)
    dormant = dormancy.archived(w)
    out = []
    for rid in ids:
        f = updates[rid]
        out.append({"id": rid, "pinned": bool(fl.is_pinned(f)), "resolved": bool(fl.is_resolved(f)),
                    "in_trash": bool(fl.is_tombstone(f)), "dormant": rid in dormant})
    return out


def store_bytes(path) -> int:
    """Bytes of every regular file in the store directory."""
    return sum(file_sizes(path).values())


def derived_nodes(w: Store, removed: set[int]) -> tuple[list[int], list[int]]:
    """Live semantic nodes derived from a removed record (it is among their `sources`, or an
    ABSTRACTION edge joins them): their name and description may quote the forgotten text, so
    purge removes them (FORMAT.md 14.3). Returns (nodes, their other live source episodes),
    which are re-queued for consolidation so the next run rebuilds the nodes without it."""
    t = Table.of(w)
    live = ~fl.is_tombstone(t.flags)
    semantic = live & (fl.memory_type_code(t.flags) == fl.MemoryType.SEMANTIC)
    g = w.graph()
    src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
    dst = g.node_ids[g.indices.astype(np.intp)]
    abst = np.asarray(g.types) == gf.ABSTRACTION
    gone = np.fromiter(removed, np.uint64, len(removed))
    touched = set(dst[abst & np.isin(src, gone)].tolist()) | set(src[abst & np.isin(dst, gone)].tolist())
    nodes, episodes = [], set()
    for rid in t.ids[semantic].tolist():
        sources = w.body(int(rid)).get("sources")
        sources = [s for s in sources if isinstance(s, int)] if isinstance(sources, list) else []
        if int(rid) in touched or any(s in removed for s in sources):
            nodes.append(int(rid))
            episodes |= {s for s in sources if s not in removed}
            episodes |= set(dst[abst & (src == rid)].tolist()) - removed
    nodes_set = set(nodes)
    requeue = []
    for rid in sorted(episodes - nodes_set):
        try:
            seg, row = w.locate(rid)
        except KeyError:
            continue
        f = int(w.segments[seg].raw[row, 31])
        if not fl.is_tombstone(f) and fl.memory_type(f) != fl.MemoryType.SEMANTIC:
            requeue.append(rid)
    return nodes, requeue


def trash_to_empty(store: Store, within=(), t: "Table | None" = None) -> tuple[set[int], set[int]]:
    """(ids a compaction removes, ids it leaves in the trash): the whole trash; under a scope
    (`within`, a user's tags) its part of it, its nodes included (they carry the tags of the
    memories they came from, FORMAT.md 13.3), and the trashed untagged nodes (nobody's derived
    data, which may quote a purged text: a purge interrupted after it trashed them must remove
    them when run again), never another user's trashed records or nodes, which stay
    restorable (a scope tells nothing of them, not even that they are there). A purge adds the
    nodes derived from what it removes (purge_targets). `t`: the store's Table, when the
    caller has read it."""
    t = Table.of(store) if t is None else t
    trashed = fl.is_tombstone(t.flags)
    if not within:
        return set(t.ids[trashed].tolist()), set()
    untagged = header_tags(store) == 0  # the Bloom filter of a record without tags
    mine = tag_mask(store, within) | (
        (fl.memory_type_code(t.flags) == fl.MemoryType.SEMANTIC) & untagged)
    return set(t.ids[trashed & mine].tolist()), set(t.ids[trashed & ~mine].tolist())


def _relations_to(store: Store, removed: set[int]) -> dict[int, set[str]]:
    """node id -> the casefolded names of the removed semantic nodes its RELATION edges point
    to (a node's `relations` name their targets, FORMAT.md 13.3)."""
    g = store.graph()
    rel = np.asarray(g.types) == gf.RELATION
    src = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))[rel]
    dst = g.node_ids[g.indices.astype(np.intp)][rel]
    hit = np.isin(dst, np.fromiter(removed, np.uint64, len(removed)))
    out: dict[int, set[str]] = {}
    names: dict[int, str | None] = {}
    for s, d in zip(src[hit].tolist(), dst[hit].tolist()):
        if d not in names:
            name = store.body(d).get("name")
            names[d] = name.casefold() if isinstance(name, str) else None
        if names[d] is not None:
            out.setdefault(s, set()).add(names[d])
    return out


def purge_targets(store: Store, removed: set[int]) -> tuple[list[int], list[int], list[int]]:
    """(derived nodes, the pinned ones among them, episodes to requeue) of a purge removing
    `removed` (derived_nodes): what `purge` does and what its dry run says it would do."""
    derived, requeue = derived_nodes(store, removed)
    # Forgetting wins over a pin: a derived node may quote the purged text. Said, not silent.
    pinned = [rid for rid in derived if fl.is_pinned(store.header(rid).flags)]
    return derived, pinned, requeue


# what compaction builds again from the records' bodies (FORMAT.md 14.2): damage there is
# what compaction repairs
_REBUILT = re.compile(r"ingest(-\d+)?\.idx")


def refuse_damaged(path) -> None:
    """Compaction keeps what the store's files say and deletes the files: on a store that
    `verify` finds damaged it would make the damage permanent (a MANIFEST rewritten to list no
    segment compacted 33 records to none, and verify then called the store healthy). So it
    runs only on a store whose damage, if any, is in what it rebuilds (_REBUILT);
    CorruptStore names the first problem. The price: a second read of the store (30,000
    records: compaction 1.14 s without it, 2.09 s with it; /tmp-scripted timing, 3 runs)."""
    from store_format.errors import CorruptStore

    from .verify import verify

    report = verify(path, retries=1)  # under our lock, no writer can be mid-commit
    damage = [p for p in report.problems if not _REBUILT.fullmatch(p.file)]
    if not damage:
        return
    p = damage[0]
    err = CorruptStore(f"the store is damaged ({p.kind}: {p.message}); compaction would make "
                       "that permanent, so nothing was removed", Path(path) / p.file, p.offset)
    err.hint = ("synapse inspect verify lists the damage; synapse export --skip-damaged --out "
                "FILE rescues every readable record into a file that import reads")
    raise err


def compact(w: StoreWriter, purge: bool = False, within=(), keep=frozenset()) -> dict:
    """Empty the trash (FORMAT.md 14.2), or under a scope (`within`) its part of it
    (trash_to_empty), but the ids in `keep`, which stay in it; with `purge`, also 14.3. The
    writer is refreshed onto the compacted store. Returns the report."""
    from ...models.bm25 import compact_files

    t0 = time.perf_counter()
    refuse_damaged(w.path)
    before = store_bytes(w.path)
    derived: list[int] = []
    pinned_derived: list[int] = []
    requeue: list[int] = []
    transform = None
    t = Table.of(w)
    removed, spare = trash_to_empty(w, within, t)
    removed, spare = removed - set(keep), spare | (removed & set(keep))
    if purge:
        derived, pinned_derived, requeue = purge_targets(w, removed)
        # Requeue before trashing: each is its own commit, and a purge killed between them is
        # run again from what is committed. Nodes still live are found again (and their
        # episodes requeued again); nodes already trashed no longer are, so their episodes
        # must be requeued by then.
        if requeue:  # consolidate rebuilds their nodes from what remains
            set_bit(w, requeue, fl.CONSOLIDATED, False)
        if derived:
            trash(w, derived)
            removed |= set(derived)
        # the relations to a removed node (also one an interrupted run already trashed): the
        # name each node's RELATION edges point to, so that another user's node of the same
        # name keeps its relations
        gone_names = _relations_to(w, removed | set(derived))

        def transform(rid: int, body: dict):
            new = dict(body)
            if isinstance(body.get("sources"), list):
                new["sources"] = [s for s in body["sources"] if s not in removed]
            names = gone_names.get(rid)
            if isinstance(body.get("relations"), list) and names:
                new["relations"] = [r for r in body["relations"] if not (
                    isinstance(r, list) and r and isinstance(r[0], str)
                    and r[0].casefold() in names)]
            return new if new != body else None

    w.close_writers()
    # Purge deletes the other copies first: they are caches and backups nothing else needs,
    # and a purge killed after the compaction's commit would leave them, its records gone
    # (a retry would find no record to purge). Again after, for what compaction left.
    scrubbed = compaction.scrub(w.path) if purge else []
    try:
        res = compaction.compact(w.path, w.manifest, transform_body=transform,
                                 rewriters=[compact_files], spare=spare)
    except (OSError, StoreError) as exc:  # nothing of the compaction is committed
        err = exc
        if isinstance(exc, PermissionError):
            err = StoreIOError(f"cannot write the compacted store: {exc.strerror}",
                               exc.filename or str(w.path))
            err.hint = ("compaction writes new files beside the old ones: it needs write "
                        "access to the store directory")
        elif not isinstance(exc, StoreError):
            err = StoreIOError(exc.strerror or str(exc), exc.filename or str(w.path))
        if derived or requeue:  # what the purge committed before it stopped
            mine = scope_ids(w, within)  # a scoped purge counts the scope's records only
            n_derived, n_requeue = ((len(derived), len(requeue)) if mine is None else
                                    (len(set(derived) & mine), len(set(requeue) & mine)))
            err.purge_done = (f"{n_derived} node(s) derived from them are in the trash too "
                              f"and {n_requeue} episode(s) wait for consolidate")
        raise err from None
    scrubbed = sorted(set(scrubbed) | set(compaction.scrub(w.path))) if purge else []
    w.manifest = w._pending = res.manifest
    w.refresh()
    from ..pagerank_cache import remove

    remove(w.path)  # its record positions are the old store's
    after = store_bytes(w.path)
    return {"compacted": True, "purged": purge, "removed_records": len(res.removed_ids),
            "removed_ids": [int(x) for x in res.removed_ids], "derived_nodes": derived,
            "pinned_derived_nodes": pinned_derived,
            "requeued_for_consolidation": requeue,
            "kept_records": res.kept, "rewritten_bodies": res.rewritten_bodies,
            "deleted_files": res.deleted_files + scrubbed, "bytes_before": before,
            "bytes_after": after, "bytes_reclaimed": before - after,
            "seconds": round(time.perf_counter() - t0, 3)}


def prune(w: StoreWriter, policy: PrunePolicy, *, compact_after: bool = False,
          purge: bool = False, embedder=None, now_ms: int | None = None,
          selection: Selection | None = None) -> dict:
    """Select (unless `selection` is given), trash, then optionally compact / purge."""
    sel = selection if selection is not None else select(w, policy, embedder, now_ms)
    report = {"dry_run": False, **sel.as_dict()}
    report["trashed"] = trash(w, sel.selected)
    if compact_after or purge:
        mine = scope_ids(w, policy.within)  # before the compaction removes some of them
        try:
            report.update(compact(w, purge=purge, within=policy.within))
        except StoreError as exc:  # the trash is committed, its emptying is not: say so
            if report["trashed"] or getattr(exc, "purge_done", None):
                done = f"the records selected ({len(report['trashed'])}) are in the trash"
                if getattr(exc, "purge_done", None):
                    done += f"; {exc.purge_done}"
                # the same scope again: an unscoped purge would empty every user's trash
                scope = "".join(f" --within {shlex.quote(t)}" for t in policy.within)
                exc.hint = "; ".join(filter(None, [
                    getattr(exc, "hint", None), done, "the trash is not emptied: run `synapse "
                    f"prune{scope} --{'purge' if purge else 'compact'} --yes` again to finish"]))
            raise
        if policy.within:
            scoped_report(report, mine)
    return report


# What a compaction reports about the whole store (files, bytes, other records): a scoped one
# leaves it out, as memory_status under a scope does.
_STORE_WIDE = ("kept_records", "rewritten_bodies", "deleted_files", "bytes_before",
               "bytes_after", "bytes_reclaimed")


def compaction_plan(store: Store, policy: PrunePolicy, selection: Selection,
                    purge: bool) -> dict:
    """What a dry run of `--compact` (or `--purge`) says the real run would remove for good:
    the trash (of the scope, if any) plus what the policies would trash, and with `purge` the
    semantic nodes derived from it (purge_targets). A scoped plan names only the scope's
    records (scoped_report), as the real run's report does."""
    gone = trash_to_empty(store, policy.within)[0] | set(selection.selected)
    report: dict = {}
    if purge:
        derived, pinned, requeue = purge_targets(store, gone)
        report.update(derived_nodes=derived, pinned_derived_nodes=pinned,
                      requeued_for_consolidation=requeue)
        gone |= set(derived)
    report["would_remove"] = sorted(int(x) for x in gone)
    if policy.within:
        scoped_report(report, scope_ids(store, policy.within))
    return report


def scope_ids(store: Store, within) -> set[int] | None:
    """The ids of the records carrying every tag of `within` (None without a scope)."""
    return set(store.ids[tag_mask(store, within)].tolist()) if within else None


def scoped_report(report: dict, mine: set[int]) -> None:
    """A scoped compaction's report (or its dry run's) names only the scope's records (`mine`,
    as they were before it): the nodes derived from a purged record and the episodes requeued
    for consolidation may be another user's or shared (untagged), and are removed or requeued
    all the same, without being named or counted."""
    for key in _STORE_WIDE:
        report.pop(key, None)
    for key in ("removed_ids", "derived_nodes", "pinned_derived_nodes",
                "requeued_for_consolidation", "would_remove"):
        if report.get(key):
            report[key] = [r for r in report[key] if r in mine]
    if "removed_records" in report:
        report["removed_records"] = len(report.get("removed_ids", []))


__all__ = ["PrunePolicy", "Selection", "select", "trash", "restore", "mark", "compact", "prune",
           "store_bytes"]
