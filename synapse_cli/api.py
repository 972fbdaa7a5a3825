"""The Python API: what `synapse ingest`, `consolidate` and `recall` do, as three functions.

    from synapse_cli import api

    api.ingest([{"text": "Met Ana at the climbing gym", "speaker": "me"}], store="mem/")
    api.consolidate(store="mem/")
    answer = api.recall("who did I meet?", store="mem/", k=5)

Each returns what the command prints with --json, as Python objects. `store` defaults like the
CLI's (`$SYNAPSE_HOME`, else `$XDG_DATA_HOME/synapse`). Settings (see `synapse config`) are
keyword arguments named by their key (`k=5`, `alpha=0.9`, `goal="..."`, `model="x.gguf"`) and
take precedence over `SYNAPSE_*` variables and the config file, exactly as flags do. For many
queries against one store, `Recaller` loads the embedder and the graph once.
Errors are exceptions: `InputError` (a bad item), `ConfigError`, `ModelNotFound`,
`ModelUnusable` (a file llama.cpp cannot load) and the `StoreError` family (store_format.errors).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Iterable

from store_format.errors import StoreError
from .engine import config, embedding
from .engine.config import ConfigError
from .engine.inputs import InputError
from .models.extractor import ModelNotFound, ModelUnusable
from .engine.paths import resolve_store
from .engine.recall import Recaller

__all__ = ["ingest", "consolidate", "recall", "Recaller", "settings", "prune", "restore", "mark",
           "inspect", "inspect_record", "verify", "migrate", "nodes", "node", "recall_with",
           "load_extractor", "Ingester", "InputError",
           "ConfigError", "ModelNotFound", "ModelUnusable", "StoreError"]

_BY_KEY = {s.key: s.name for s in config.SETTINGS}


def settings(**overrides) -> config.Settings:
    """Effective settings, with `overrides` (setting keys) in the place of flags."""
    unknown = set(overrides) - set(_BY_KEY)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}", usage=True,
                          hint="`synapse config` lists every setting")
    return config.resolve({_BY_KEY[k]: v for k, v in overrides.items()})


class Ingester:
    """A store held open (and locked) for ingesting batch after batch: each `add(items)` embeds
    and commits one transaction, so an interrupted ingest keeps every batch `add` returned.

        with api.Ingester(store) as ing:
            for batch in batches:
                result = ing.add(batch)   # validated `inputs.Item`s -> an `IngestResult`
    """

    def __init__(self, store=None, *, lock_timeout: float = 30.0, embedder=None,
                 resolved: config.Settings | None = None, **overrides):
        from .engine.ingest import IngestConfig

        self.cfg = IngestConfig(**(resolved or settings(**overrides)).kwargs("ingest"))
        self.embedder = embedder or embedding.embedder()
        self.path, self.lock_timeout, self._w = resolve_store(store), lock_timeout, None

    def __enter__(self) -> "Ingester":
        from .engine.store import StoreWriter

        w = StoreWriter.open(self.path, lock_timeout=self.lock_timeout, create=True,
                             embedder=self.embedder.name, dim=self.embedder.dim)
        try:
            embedding.check(w, self.embedder)
        except BaseException:
            w.close()
            raise
        self._w = w
        return self

    def __exit__(self, *exc):
        self._w.__exit__(*exc)

    def add(self, items: list):
        from .engine.ingest import ingest

        return ingest(self._w, items, self.embedder, self.cfg)


def ingest_items(items: list, store=None, **kwargs):
    """Ingest validated `inputs.Item`s in one transaction; returns an `IngestResult`.
    `resolved`: settings already resolved (else from the keyword overrides)."""
    with Ingester(store, **kwargs) as ing:
        return ing.add(items)


def ingest(items: Iterable, store=None, **kwargs) -> list[dict]:
    """Store `items` (dicts of the NDJSON input schema, or plain strings) as episodic memories.

    One transaction: an invalid item raises `InputError` and nothing is stored. Returns one
    `{"id", "status", "where", "utility"}` per item (status stored, duplicate or gated)."""
    from .engine.inputs import item_from_object

    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Iterable):
        # iterating a string or a dict would store its characters or keys
        raise InputError("items", "expected a list of strings or dicts, not "
                                  + type(items).__name__)
    # a plain string is {"text": ...}: the same checks as the CLI's input (empty, NUL, length)
    parsed = [item_from_object({"text": obj} if isinstance(obj, str) else obj, f"item {n}")
              for n, obj in enumerate(items, 1)]
    if not parsed:
        return []
    result = ingest_items(parsed, store, **kwargs)
    return [o.as_dict() for o in result.outcomes]


def model_path(setting: str | None) -> str:
    """The GGUF file to use: the setting, else the packaged SmolLM2."""
    from .models.extractor import default_model_path

    try:
        path = setting or str(default_model_path())
    except FileNotFoundError as exc:
        raise ModelNotFound(str(exc)) from None
    if os.path.isdir(path):
        raise ModelNotFound(f"model {path}: is a directory, not a GGUF file")
    if not os.path.isfile(path):
        raise ModelNotFound(f"model {path}: no such file")
    check_gguf(path)
    return path


def check_gguf(path: str) -> None:
    """Refuse a file that is not GGUF before llama.cpp is asked to load it (its own failure is
    an exception with no reason given). An unreadable file is an OSError (exit 74)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelUnusable(f"model {path}: not a GGUF file (it does not start with \"GGUF\")")


def load_extractor(store=None, **overrides):
    """The extraction model `consolidate` uses, as the settings choose it (loaded on its
    first cache miss). Pass it to `run_consolidate(extractor=...)` to keep it across runs."""
    from .engine.consolidate import model_sha256
    from .models.extractor import LlamaExtractor

    s = settings(**overrides)
    path = model_path(s["extraction.model"])
    return LlamaExtractor(path, threads=s["extraction.threads"],
                          model_sha256=model_sha256(resolve_store(store), path))


# A consolidation holds the writer lock for one slice of about this many seconds at a time,
# then lets a waiting writer in: an agent's `ingest` must not wait for the whole nightly run
# (a few turns a second: minutes) and fail at its --lock-timeout. A slice lasts at least
# SLICE_SETUP_RATIO times what reading and planning the store took in the one before, so that
# on a large store planning again is at most a fifth of the run.
SLICE_SECONDS = 5.0
SLICE_SETUP_RATIO = 4.0


def run_consolidate(store=None, *, lock_timeout: float = 30.0, max_seconds: float | None = None,
                    progress=None, extractor=None, embedder=None, between=None,
                    rebuild: bool = False, **overrides):
    """Consolidate the store; returns a `ConsolidateResult` (see `consolidate`). With
    `rebuild`, first drop the graph consolidation built (every semantic node and its edges;
    engine/consolidate/rebuild.py) and build it again from every live episode.

    The run goes in slices of SLICE_SECONDS, each under the writer lock and ending on a
    committed window; between two, the lock is released (`between()` is called then: by
    default a pause long enough for a writer that polls the lock to take it) and taken again
    within `lock_timeout`. A run that cannot take it back stops there like one that reached
    `max_seconds`: `left_windows` and `left_because` say so."""
    import dataclasses
    import time

    from store_format.errors import LockTimeout
    from store_format.lock import POLL_SECONDS

    from .engine import pagerank_cache
    from .engine.arguments import flag, real
    from .engine.consolidate import ConsolidateConfig, ConsolidateResult, consolidate as run
    from .engine.consolidate.rebuild import drop_graph
    from .engine.store import StoreWriter

    real(max_seconds, "max_seconds", 0.0)
    flag(rebuild, "rebuild")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    s = settings(**overrides)
    if extractor is None:
        model_path(s["extraction.model"])  # a missing or foreign model file: before the lock
    cfg = ConsolidateConfig(**s.kwargs("consolidate"), max_seconds=max_seconds)
    path, t0, total, done, slice_s = resolve_store(store), time.monotonic(), None, 0, SLICE_SECONDS

    def counted(n: int, of: int) -> None:  # the windows of every slice, one count
        if progress is not None:
            progress(done + n, done + of)
    while True:
        left = None if max_seconds is None else max(0.0, max_seconds - (time.monotonic() - t0))
        budget = slice_s if left is None else min(slice_s, left)
        try:
            with StoreWriter.open(path, lock_timeout=lock_timeout) as w:
                dropped = 0
                if total is None:
                    embedder = embedder or embedding.embedder()
                    embedding.check(w, embedder)
                    extractor = extractor or load_extractor(w.path, **overrides)
                    if rebuild:
                        dropped = drop_graph(w)
                # a slice cut short by the slice length (not by max_seconds) always does a
                # window: however long planning takes, the run moves on
                part = run(w, extractor, embedder, dataclasses.replace(cfg, max_seconds=budget),
                           progress=counted, at_least_one=budget == slice_s, pagerank=False)
        except LockTimeout:
            if total is None:  # the first slice: the lock was never ours
                raise
            total.left_because = "lock"
            break
        if total is None:
            total = ConsolidateResult(rebuilt=rebuild, nodes_dropped=dropped)
        total.add(part)
        done += part.windows
        if not part.left_windows or not part.windows or (left is not None and budget == left):
            break  # done, or max_seconds is spent
        slice_s = max(SLICE_SECONDS, SLICE_SETUP_RATIO * part.setup_seconds)
        (between or (lambda: time.sleep(3 * POLL_SECONDS)))()
    if total.windows:  # the graph changed: PageRank once (FORMAT.md 16.3), if the lock is free
        try:
            with StoreWriter.open(path, lock_timeout=0) as w:
                pagerank_cache.refresh(w)
        except LockTimeout:
            pass  # recall computes it itself until the next run refreshes the file
    total.seconds = time.monotonic() - t0
    return total


def consolidate(store=None, **kwargs) -> dict:
    """Turn unconsolidated episodes into semantic nodes and edges with the local model.

    `max_seconds` stops between windows; the summary's `left_windows` says what remains.
    Returns the summary `synapse consolidate --json` prints."""
    return run_consolidate(store, **kwargs).as_dict()


def recall(query: str, store=None, *, touch: bool = True, embedder=None,
           now_ms: int | None = None, **kwargs) -> dict:
    """The memories that matter for `query`: `{"query", "rejected", "confidence", "results"}`.

    Keyword arguments are settings (`k`, `mode`, `alpha`, `tau_gate`, ...) or other
    `RecallConfig` fields (`explain`, `types`, `tags`, `since_ms`, `until_ms`). `now_ms`
    is the clock decay is computed at; it hides nothing: `recall --as-of T` is
    `now_ms=T, until_ms=T, touch=False` (later memories invisible, no rehearsal)."""
    with Recaller(resolve_store(store), embedder=embedder) as r:
        return recall_with(r, query, touch=touch, now_ms=now_ms, **kwargs)


def recall_with(recaller: Recaller, query: str, *, touch: bool = True, now_ms: int | None = None,
                **kwargs) -> dict:
    """`recall` on an open `Recaller` (the embedder and graph loaded once for many queries);
    keyword arguments as `Recaller.recall` takes them (engine/recall/service.py recall_config)."""
    return recaller.recall(query, touch=touch, now_ms=now_ms, **kwargs)  # checks them all


def store_path(store=None) -> Path:
    """Where the store is: `store`, else `$SYNAPSE_HOME`, else `$XDG_DATA_HOME/synapse`."""
    return resolve_store(store)


# --- keeping the store healthy: what prune, mark, inspect and migrate do ----------------------


def _no_record(rid) -> InputError:
    return InputError(f"id {rid}", "no record with this id in the store (ids are in the "
                                   "output of ingest and recall)")


def require_records(store_obj, ids, within=(), *, unknown=_no_record) -> None:
    """An id the store does not hold (never, or no longer after compaction) is an error
    before anything changes, as in `synapse mark` and `synapse prune --id`. With `within` (a
    scope's tags), a record without every one of them gets the same answer: a scope does not
    reveal that another user's record exists. `unknown(id)` makes the error (the command line
    words it its own way)."""
    from .engine.filters import carries

    for rid in ids:
        if not carries(store_obj, rid, within):
            raise unknown(rid)


def require_pruned_ids(store_obj, policy, *, unknown=_no_record) -> None:
    """A prune's named ids must exist, except under a scope: prune.select lists an unknown id
    as out_of_scope there, like another user's, so a scoped caller cannot probe which exist."""
    if not policy.within:
        require_records(store_obj, policy.ids, unknown=unknown)


def prune(store=None, *, ids: Iterable[int] = (), tags: Iterable[str] = (), query: str | None = None,
          min_similarity: float = 0.45, before_ms: int | None = None,
          decayed_below: float | None = None, at_ms: int | None = None, dormant: bool = False,
          low_utility_below: float | None = None, match: str = "any",
          within: Iterable[str] = (), dry_run: bool = False,
          compact: bool = False, purge: bool = False, lock_timeout: float = 30.0,
          embedder=None) -> dict:
    """Forget memories: records matching the policies go to the trash (recall ignores them,
    `restore` brings them back); `compact` empties the trash, `purge` also deletes every other
    copy. Pinned records are never pruned, unresolved ones only by id. `within`: tags every
    pruned record must carry (a scope, e.g. ["user:bob"]: nothing of another user is selected
    or listed; ids outside it are returned under `out_of_scope`). Returns what
    `synapse prune --json` prints; with `dry_run` nothing changes. With no policy and neither
    `compact` nor `purge`, a ConfigError (usage), as the CLI's exit 2."""
    from .engine import arguments as a
    from .engine.maintenance import prune as pr
    from .engine.store import Store, StoreWriter

    if query is not None and (not isinstance(query, str) or not query.strip()):
        raise InputError("query", "empty query: give the text whose matches to prune")
    policy = pr.PrunePolicy(
        decayed_below=a.real(decayed_below, "decayed_below", 0.0),
        at_ms=a.epoch_ms(at_ms, "at_ms"), dormant=a.flag(dormant, "dormant"),
        low_utility_below=a.real(low_utility_below, "low_utility_below", 0.0),
        before_ms=a.epoch_ms(before_ms, "before_ms"), ids=tuple(a.record_ids(ids)),
        tags=a.tags(tags, "tags"), query=query,
        min_similarity=a.real(min_similarity, "min_similarity", -1.0, 1.0, optional=False),
        match=a.choice(match, "match", ("any", "all")), within=a.tags(within, "within"))
    for name, value in (("dry_run", dry_run), ("compact", compact), ("purge", purge)):
        a.flag(value, name)
    if not (policy.active() or compact or purge):  # as the CLI: a call that can do nothing
        raise ConfigError("nothing to prune: give ids, tags, a query or a policy (decayed_below, "
                          "dormant, low_utility_below, before_ms), or compact / purge",
                          usage=True)
    path = resolve_store(store)
    opened = Store.open(path) if dry_run else StoreWriter.open(path, lock_timeout=lock_timeout)
    with opened as w:
        require_pruned_ids(w, policy)
        sel = pr.select(w, policy, embedder) if policy.active() else pr.Selection()
        if dry_run:
            return {"dry_run": True, **(sel.as_dict() if policy.active() else {}),
                    **(pr.compaction_plan(w, policy, sel, purge) if compact or purge else {})}
        return pr.prune(w, policy, compact_after=compact, purge=purge, selection=sel)


def restore(ids: Iterable[int], store=None, *, lock_timeout: float = 30.0) -> dict:
    """Take records out of the trash: `{"restored", "not_in_trash", "already_live",
    "not_found"}`. A record whose input was ingested again after it was pruned (the same text,
    tags and time, as deduplication compares them) stays in the trash, listed under `already_live`
    as {id, live_id}: restoring it would make two live copies. An id the store does not hold
    (never stored, or removed by compaction) is an InputError and nothing changes, as for
    `mark` and the CLI; so `not_found` is empty here."""
    from .engine.arguments import record_ids
    from .engine.maintenance import prune as pr
    from .engine.store import StoreWriter

    ids = record_ids(ids)
    with StoreWriter.open(resolve_store(store), lock_timeout=lock_timeout) as w:
        require_records(w, ids)
        return pr.restore(w, ids)


def mark(ids: Iterable[int], store=None, *, pin: bool | None = None, resolve: bool | None = None,
         restore_dormant: bool = False, lock_timeout: float = 30.0) -> list[dict]:
    """Pin/unpin (pinned records never decay and are never pruned), resolve/unresolve, bring
    dormant nodes back; returns each record's flags, as `synapse mark --json`. With none of
    the three, a ConfigError (usage), as the CLI's exit 2."""
    from .engine import arguments as a
    from .engine.maintenance import prune as pr
    from .engine.store import StoreWriter

    ids = a.record_ids(ids)
    pin, resolve = a.flag(pin, "pin", optional=True), a.flag(resolve, "resolve", optional=True)
    a.flag(restore_dormant, "restore_dormant")
    if pin is None and resolve is None and not restore_dormant:  # as the CLI
        raise ConfigError("nothing to mark: give pin, resolve or restore_dormant", usage=True)
    with StoreWriter.open(resolve_store(store), lock_timeout=lock_timeout) as w:
        require_records(w, ids)
        try:
            return pr.mark(w, ids, pin=pin, resolve=resolve, restore_dormant=restore_dormant)
        except pr.InTrash as exc:
            raise InputError(f"id {exc.args[0]}", "the record is in the trash; restore it "
                                                  "before pinning it") from None


def inspect(store=None, *, within: Iterable[str] = ()) -> dict:
    """Records by type and flag, segments, header version, edges by type, bytes on disk.
    `within` (a scope's tags): only the records carrying every one of them are counted, and
    the store-wide parts are left out."""
    from .engine.arguments import tags
    from .engine.maintenance.inspect import summary
    from .engine.store import read_retrying

    within = tags(within, "within")
    return read_retrying(resolve_store(store), lambda s: summary(s, within))


def inspect_record(record_id: int, store=None, *, within: Iterable[str] = ()) -> dict:
    """Every header field decoded, the payload and the edges of one record. `within` (a
    scope's tags): a record without every one of them is "no record with this id", and only
    the edges to records inside the scope are shown."""
    from .engine.maintenance.inspect import record
    from .engine.store import read_retrying

    from .engine.arguments import record_id as checked, tags

    record_id, within = checked(record_id, "record_id"), tags(within, "within")

    def build(s):
        require_records(s, [record_id], within)
        return record(s, record_id, within)
    return read_retrying(resolve_store(store), build)


def verify(store=None) -> dict:
    """Walk every checksum and invariant; `{"ok": bool, "problems": [...], ...}`."""
    from .engine.maintenance.verify import verify as run

    return run(resolve_store(store)).as_dict()


def migrate(header: int, store=None, *, dry_run: bool = False, lock_timeout: float = 30.0) -> dict:
    """Rewrite every segment in header layout `header` (1, 2 or 3), atomically; a downgrade
    drops the fields the target lacks (the plan says which). Returns the plan."""
    from store_format import migration
    from .engine.store import Store, StoreWriter

    from .engine.arguments import choice, flag, integer

    header = choice(integer(header, "header"), "header", (1, 2, 3))  # 2.0 is no version
    flag(dry_run, "dry_run")
    path = resolve_store(store)
    opened = Store.open(path) if dry_run else StoreWriter.open(path, lock_timeout=lock_timeout)
    with opened as w:
        plan = migration.plan(w.path, w.manifest, header)
        if not dry_run:
            migration.migrate(w.path, w.manifest, header)
    return plan.as_dict() | {"dry_run": dry_run}


def nodes(name: str = "", store=None, *, limit: int = 20, within=()) -> list[dict]:
    """Semantic nodes (what consolidation extracted) whose name contains `name`: id, name,
    type, description and how many episodes mention each; exact names first. `within` (a
    scope's tags): only the nodes that carry every one of them."""
    from store_format.tags import normalize_tag

    from .engine.arguments import integer, tags
    from .engine.maintenance.nodes import find
    from .engine.store import read_retrying

    if not isinstance(name, str):
        raise ConfigError(f"name={name!r}: expected a string", usage=True)
    limit = integer(limit, "limit", 1)
    within = {normalize_tag(t) for t in tags(within, "within")}
    return read_retrying(resolve_store(store), lambda s: find(s, name, limit, within))


def node(node_id: int, store=None, *, within=()) -> dict:
    """One semantic node with its relations, linked nodes and the episodes it came from. With
    `within` (a scope's tags), a node without every one of them is "no record", and only the
    linked records that carry them are listed."""
    from store_format.tags import normalize_tag

    from .engine.arguments import record_id, tags
    from .engine.maintenance.nodes import node as build
    from .engine.store import read_retrying

    node_id = record_id(node_id, "node_id")
    within = {normalize_tag(t) for t in tags(within, "within")}

    def one(s):
        require_records(s, [node_id], within)
        try:
            return build(s, int(node_id), within)
        except ValueError as exc:
            raise InputError(f"id {node_id}", str(exc)) from None
    return read_retrying(resolve_store(store), one)


# --- data in and out: list, export, import (docs/FORMAT.md section 17) ------------------------

__all__ += ["list_memories", "export", "import_store", "embedder_for"]


def list_memories(store=None, *, types: Iterable[str] = (), tags: Iterable[str] = (),
                  since_ms: int | None = None, until_ms: int | None = None,
                  trashed: bool = False, limit: int = 50, after: int | None = None) -> dict:
    """The memories, newest first: `{"memories": [...], "next_after", "total"}`. Filters as
    recall's (types, exact tags incl. `speaker:`/`session:`, a time window); `trashed` lists
    the trash instead; pass `next_after` back as `after` for the next page."""
    from types import SimpleNamespace

    from .engine import arguments as a
    from .engine.filters import check_filters
    from .engine.listing import ListQuery, list_memories as run
    from .engine.store import read_retrying

    # the same checks as recall's filters (a bare string, an unknown type, a backwards window)
    f = check_filters(SimpleNamespace(types=types, tags=tags, since_ms=since_ms,
                                      until_ms=until_ms))
    q = ListQuery(f["types"], f["tags"], f["since_ms"], f["until_ms"], a.flag(trashed, "trashed"),
                  a.integer(limit, "limit", 1),
                  None if after is None else a.record_id(after, "after"))

    def one(s):
        if after is not None:
            require_records(s, [after])
        return run(s, q)
    return read_retrying(resolve_store(store), one)


def export(out=None, store=None, skip_damaged: bool = False) -> dict:
    """Write the whole store as portable JSON lines (FORMAT.md 17) to `out`: a binary stream
    (None: stdout), or a path written atomically (temp file, fsync, rename: never half a file
    under that name; started again if a concurrent writer changed what was being read).
    Returns the header's counts. A damaged record raises CorruptStore, unless `skip_damaged`:
    then it is left out, with the edges that touch it, and named in the counts' `skipped`
    ([{"id", "problem"}]: the id as read from the damaged record, the problem naming its file
    and row); a lost or damaged graph, spike log or dormancy file is left out and
    named in `lost` ([{"what", "problem"}]), the indexes are not needed: `import` rebuilds a
    healthy store from the rest; a MANIFEST read although its CRC alone is wrong is named in
    `manifest_crc` (the problem, or None), and the intact rows it does not count (or segment
    files it does not name) in `lost` (portable.uncounted_segment_rows)."""
    from store_format import manifest as mf
    from store_format.errors import ChecksumMismatch

    from .engine.arguments import flag
    from .engine.portable import damaged_records, uncounted_segment_rows, write_export
    from .engine.store import Store, read_retrying

    flag(skip_damaged, "skip_damaged")  # "abc" or nan must not mean a rescue export

    def write(s, f):
        if not skip_damaged:
            return write_export(s, f)
        damaged, lost = damaged_records(s), []
        counts = write_export(s, f, frozenset((k, row) for k, row, _, _ in damaged), lost)
        try:  # Store.open let a CRC mismatch through for the rescue: say so
            mf.read_manifest(s.path, check_files=False)
            crc = None
        except ChecksumMismatch as exc:
            crc = str(exc)
            lost += uncounted_segment_rows(s)
        return {**counts, "skipped": [{"id": rid, "problem": p} for _, _, rid, p in damaged],
                "lost": [{"what": w, "problem": p} for w, p in s.cut + lost],
                "manifest_crc": crc}

    if out is None or hasattr(out, "write"):
        import sys

        with Store.open(resolve_store(store), derived=not skip_damaged) as s:
            return write(s, out if out is not None else sys.stdout.buffer)
    path = _export_path(out)
    if path is None:  # a FIFO or a device (/dev/stdout): written straight into, like a stream
        try:
            with open(out, "wb") as f, Store.open(resolve_store(store),
                                                  derived=not skip_damaged) as s:
                return write(s, f)
        except OSError as exc:
            raise _export_write_error(exc, out, "") or exc from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")

    def attempt(s):  # mode 0600 like the store's own files: it holds every memory
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            counts = write(s, f)
            f.flush()
            os.fsync(f.fileno())
        return counts
    try:
        counts = read_retrying(resolve_store(store), attempt, derived=not skip_damaged)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _export_write_error(exc, out, "; nothing was written there") or exc from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return counts


def _export_write_error(exc: OSError, out, outcome: str):
    """A StoreIOError naming `out` for a write into the export that the disk refused (full,
    too big, over quota: the OS names no file then), else None."""
    if exc.filename is None and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        from store_format.errors import StoreIOError

        return StoreIOError(f"writing the export: {exc.strerror or exc}{outcome}", str(out))
    return None


def _export_path(out) -> Path | None:
    """The regular file `export` replaces atomically for `out` (through a symlink: its target),
    or None when `out` is a FIFO or a device, which is written into, never replaced. A path
    that cannot be a file is a ConfigError naming it."""
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise ConfigError(f"out={out!r}: expected the path of the file to write", usage=True)
    path = Path(out)
    try:
        mode = os.stat(path).st_mode  # through links: /dev/stdout is a pipe, a tty or a file
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise ConfigError(f"{out} is a directory: give the path of a file to write", usage=True)
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
        return None
    path = path.resolve()  # a symlink is written through, not replaced
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write {out}: the directory {path.parent} does not exist",
                          usage=True)
    from store_format.manifest import MANIFEST_NAME

    if (path.parent / MANIFEST_NAME).exists():  # `--out STORE/payload.log` replaced the log
        raise ConfigError(f"cannot write {out}: {path.parent} is a synapse store; write the "
                          "export outside any store directory", usage=True)
    return path


def embedder_for(model_dir=None):
    """The embedder of a model directory (None: the embedding.embed_model_dir setting, else the
    packaged MiniLM): BERT models through the torch-free numpy path, any other architecture
    through sentence-transformers."""
    return embedding.embedder(model_dir)


def import_store(source, store=None, *, where: str | None = None, embedder=None,
                 embedder_dir=None, header_version: int = 3, lock_timeout: float = 30.0,
                 progress=None, confirm=None) -> dict:
    """Read an export (a path, `-` for stdin, or an iterable of lines as bytes) into a new or
    empty store, embedding with `embedder` (else the model of `embedder_dir`, else the
    default). Record ids, flags, counts and edges are kept. The whole export is checked first:
    a bad line raises InputError naming it and nothing is written; a failure while writing
    leaves no store behind where there was none. A `header_version` that cannot hold what
    the export says (v1: arousal, storage strength) is refused, unless `confirm` (called
    with what would be lost, before anything is written) returns without raising. Returns
    counts and timings."""
    import shutil
    import sys

    from .engine.portable import import_parsed, lost_in, parse_export
    from .engine.store import StoreWriter
    from store_format import manifest as mf

    from .engine.arguments import choice, integer

    header_version = choice(integer(header_version, "header_version"), "header_version",
                            (1, 2, 3))
    if not isinstance(source, (str, os.PathLike)) and (
            isinstance(source, (bytes, bytearray, dict)) or not hasattr(source, "__iter__")):
        raise ConfigError(f"source {type(source).__name__}: expected a path, '-' (stdin) or "
                          "an iterable of lines as bytes", usage=True)
    if isinstance(source, (str, os.PathLike)):
        name = str(source)
        if name == "-":
            parsed = parse_export(sys.stdin.buffer, where or "-")
        else:
            if os.path.isdir(name):
                raise ConfigError(f"{name} is a directory: give an export file (synapse export "
                                  "--out FILE)", usage=True)
            with open(name, "rb") as f:
                parsed = parse_export(f, where or name)
    else:
        parsed = parse_export(source, where or "input")
    lost = lost_in(parsed, header_version)
    if lost:
        what = (f"importing into header v{header_version} loses "
                + ", ".join(f"{k} on {n} records" for k, n in lost.items()))
        if confirm is None:
            raise ConfigError(what, usage=True, hint="header version 3 keeps every field")
        confirm(what)
    from .engine.store import check_creatable

    path = resolve_store(store)
    new_dir = not os.path.lexists(path)
    # no store yet: only an empty directory, or what an interrupted creation left, which a
    # failed import clears again (an existing store is checked for records under the lock)
    empty_dir = path.is_dir() and not os.path.lexists(path / mf.MANIFEST_NAME)
    if empty_dir:
        check_creatable(path)
    embedder = embedder or embedder_for(embedder_dir)
    try:
        with StoreWriter.open(path, lock_timeout=lock_timeout, create=True,
                              embedder=embedder.name, dim=embedder.dim,
                              header_version=header_version) as w:
            embedding.check(w, embedder)
            result = import_parsed(w, parsed, embedder, progress=progress)
    except BaseException:
        if _holds_records(path):  # another import won the race for this directory: keep it
            raise
        if new_dir:  # ours entirely: leave nothing where there was nothing
            shutil.rmtree(path, ignore_errors=True)
        elif empty_dir:
            for entry in path.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        raise
    return {"store": str(path), "embedder": embedder.name, "dim": embedder.dim,
            "exported_with": parsed.header.get("store", {}).get("embedder"),
            **result.as_dict()}


def _holds_records(path) -> bool:
    """Whether the store at `path` committed a record (a manifest that cannot be read counts
    as yes: never delete what cannot be checked)."""
    from store_format import manifest as mf

    if not (Path(path) / mf.MANIFEST_NAME).exists():
        return False
    try:
        return mf.read_manifest(path, check_files=False).next_record_id > 1
    except StoreError:
        return True
