"""`synapse mcp`: one store's memory as Model Context Protocol tools, on the official SDK.

Every tool calls the Python API (`synapse_cli.api`), which the CLI's commands call too: nothing
is implemented twice. A long-lived server differs from the CLI in three ways, all here:
- models load once, on the first call that needs them (the embedder, the extraction model);
- one open Recaller serves every recall and is reopened when another process committed (a CLI
  ingest, the cron consolidate), so each call sees the store as it is now;
- the writer lock is taken inside a write call and released before it returns, and a write
  waits at most `mcp.write_wait` seconds for another writer: the cron job is never starved;
  a cancelled `consolidate` (or one whose client went away) stops after its current window.
A user error is a tool error carrying the CLI's one-line message and hint; the server lives on.
Logs go to stderr only: on stdio, stdout is the protocol.
"""
from __future__ import annotations

import functools
import hmac
import inspect
import json
import logging
import math
import re
import threading
import time
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from typing_extensions import Required, TypedDict

from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError

from . import api
from .commands.exits import INTERNAL, code_for, hint_for

log = logging.getLogger("synapse.mcp")

INSTRUCTIONS = (
    "Long-term memory for this agent, kept on the user's machine. Call `recall` before you answer "
    "anything that may depend on what was said or done earlier (preferences, facts about people, "
    "plans, decisions); if it comes back with `rejected: true`, say you have no record of it "
    "rather than guessing. Call `remember` with what is worth keeping after each exchange: one "
    "memory per fact or event, with the speaker and, when you know it, the time it happened. "
    "When a fact changes, remember the new statement; recall tries to put the current one "
    "first, but when two results disagree, trust the one with the later `time`.")

MemoryType = Literal["episodic", "semantic", "working", "procedural"]
Mode = Literal["synapse", "vector", "bm25", "hybrid", "ecphory", "synaptic"]
Time = StrictStr | StrictInt  # ISO 8601 or epoch ms
# Tool arguments are strict, as the Python API's are (engine/arguments.py): `ids: [true]` or
# `["2"]` is an error, not record 1 or 2; `explain: "yes"` is not True.


class MemoryIn(TypedDict, total=False):
    """One memory, as one line of `synapse ingest` input: every field of that schema, and an
    unknown one is an error (a typo must not vanish, as on the command line)."""

    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[misc]

    text: Required[str]
    speaker: str
    session: str | int  # the ingest schema reads "session": 7 as "7"
    source: str
    timestamp: str | int | float
    tags: list[str]
    meta: dict[str, Any]
    type: MemoryType
    importance: float
    valence: float
    arousal: float
    pinned: bool
    resolved: bool
    dia_id: str


def _errors(failure: type[Exception]):
    """Run a tool (or resource); any error becomes `failure` (the SDK's ToolError or
    ResourceError, which the client gets as isError with this text): the CLI's one line and
    hint for a user error, a pointer to stderr (where the traceback goes) for a bug."""
    def sort(fn, exc: Exception):
        if isinstance(exc, failure):
            return exc
        if isinstance(exc, Stopped):
            return failure(str(exc))
        if code_for(exc) != INTERNAL:  # a user error: InputError, ConfigError, ...
            hint = hint_for(exc)
            return failure(str(exc) + (f" (hint: {hint})" if hint else ""))
        log.exception("internal error in %s", fn.__name__)
        return failure("internal error (a bug in synapse); the server's stderr has the "
                       "traceback")

    def wrap(fn):
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def acall(*args, **kwargs):
                try:
                    return await fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - the one place errors are sorted
                    raise sort(fn, exc) from None
            return acall

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the one place a tool's errors are sorted
                raise sort(fn, exc) from None
        return call
    return wrap


def _time(value: str | int | None, where: str, end: bool = False,
          start: bool = False) -> int | None:
    """ISO 8601 text or epoch milliseconds -> epoch ms; `end`: the end of a window, where a
    bare date is its last millisecond (inputs.parse_window_end), `start` its start, where a
    time between two milliseconds is rounded up (parse_window_start), as on the command line."""
    if value is None:
        return None
    from .engine.inputs import parse_timestamp, parse_window_end, parse_window_start

    return (parse_window_end if end else parse_window_start if start
            else parse_timestamp)(value, where)


class Memory:
    """What the tool calls share: the store (fixed at start), the models, one Recaller."""

    def __init__(self, path: Path):
        self.path = path
        self._embedder = None
        self._extractor = None
        self._recaller = None
        self._models = threading.Lock()       # one load of each model
        self._reading = threading.Lock()      # recalls share one Recaller
        # The SDK runs tool calls in parallel threads, and each would open its own writer: the
        # second of two remembers waited `mcp.write_wait` for the first, this server's own
        # lock, and failed. So the writes of one server queue here; write_wait is only how
        # long one waits for another process's writer (the cron job).
        self.writing = threading.Lock()
        self.stopping = threading.Event()     # set on shutdown: a consolidation stops

    def settings(self):
        """Read at each call: a changed config file or variable applies without a restart."""
        return api.settings()

    def embedder(self):
        with self._models:
            if self._embedder is None:
                from .engine.embedding import embedder

                self._embedder = embedder()
            return self._embedder

    def recall(self, query: str, touch: bool, **kwargs) -> dict:
        from store_format.errors import StoreNotFound
        from .engine.recall import Recaller

        embedder = self.embedder()
        with self._reading:
            try:
                if self._recaller is None:
                    self._recaller = Recaller(self.path, embedder=embedder, follow=False)
                else:
                    self._recaller.refresh()  # what other processes committed since
            except StoreNotFound:  # nothing remembered yet: no record of anything
                return {"query": query, "rejected": True, "confidence": 0.0, "results": [],
                        "note": "the store is empty: nothing has been remembered yet"}
            return api.recall_with(self._recaller, query, touch=touch, **kwargs)

    def consolidate(self, max_seconds: float, stop: threading.Event):
        """Consolidate for at most `max_seconds`; when `stop` is set (the call was cancelled or
        the client went away) or the server closes, stop after the window being extracted
        (each window commits on its own: nothing is lost) and release the writer lock."""
        from store_format import manifest
        from store_format.lock import POLL_SECONDS

        def progress(done: int, total: int) -> None:
            if stop.is_set() or self.stopping.is_set():
                raise Stopped(f"consolidate stopped after {done} of {total} windows: the call "
                              "was cancelled")

        def between() -> None:  # this server's own writes (remember) go between slices too
            self.writing.release()
            try:
                time.sleep(3 * POLL_SECONDS)
            finally:
                self.writing.acquire()
            # close() may have taken `writing` in the pause and gone on: write nothing more
            if stop.is_set() or self.stopping.is_set():
                raise Stopped("consolidate stopped between two slices: the call was cancelled")

        manifest.read_manifest(self.path, check_files=False)  # StoreNotFound before the model
        with self.writing:
            if self._extractor is None:
                self._extractor = api.load_extractor(self.path)
            return api.run_consolidate(self.path, max_seconds=max_seconds, progress=progress,
                                       extractor=self._extractor, embedder=self.embedder(),
                                       lock_timeout=self.write_wait(),
                                       between=between)

    def write_wait(self) -> float:
        return self.settings()["mcp.write_wait"]

    def close(self, wait: float = 30.0) -> None:
        """Stop: a consolidation stops after its window; a write in progress gets up to `wait`
        seconds to commit (after that the process may end under it: commits are atomic)."""
        self.stopping.set()
        if self.writing.acquire(timeout=wait):
            self.writing.release()
        if self._recaller is not None:
            self._recaller.close()


class Embedded:
    """The embedder with the vectors of `texts` computed up front (Embedder protocol): a large
    `remember` runs the model before it takes the writer lock, so the lock, which the cron job
    and this server's other writes wait for, is held to write only."""

    def __init__(self, embedder, texts: list[str]):
        self.name, self.dim, self._inner = embedder.name, embedder.dim, embedder
        self._known = dict(zip(texts, embedder.encode(texts)))

    def encode(self, texts: list[str]):
        import numpy as np

        missing = list(dict.fromkeys(t for t in texts if t not in self._known))
        if missing:  # the store's ingest goal, or text the caller did not announce
            self._known.update(zip(missing, self._inner.encode(missing)))
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._known[t] for t in texts])


MAX_IDS = 10_000  # ids one forget, restore, pin or unpin call may name


class Stopped(Exception):
    """A consolidation stopped between windows because its call was cancelled."""


def build(path: Path, scope: str | None = None):
    """The MCPServer with synapse's tools and resources over the store at `path`. `scope`: a
    tag (checked by the caller as ingest checks one) fixed for the server's life: remember
    adds it, every other tool and resource sees only the records carrying it, and the graph
    tools, whose nodes mix users, are refused."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from . import __version__

    mem = Memory(path)
    server = MCPServer("synapse", version=__version__, instructions=INSTRUCTIONS,
                       log_level="WARNING")
    def tool(annotations):
        """Register a tool; its description is the docstring, dedented for the model."""
        def register(fn):
            server.add_tool(fn, description=inspect.cleandoc(fn.__doc__), annotations=annotations)
            # An unknown argument is an error, as an unknown flag is on the command line (the
            # SDK's argument model ignores it: `{"query": .., "tag": [..]}` recalled unfiltered).
            # _tool_manager is the SDK's own attribute: tests/test_mcp.py fails if it moves.
            t = server._tool_manager.get_tool(fn.__name__)
            model = t.fn_metadata.arg_model
            model.model_config["extra"] = "forbid"
            model.model_rebuild(force=True)
            t.parameters = model.model_json_schema(by_alias=True)
            return fn
        return register

    fixed = (scope,) if scope else ()
    from store_format.tags import normalize_tag

    def bounded(ids) -> None:
        """A call names at most MAX_IDS ids (a million took a core for minutes)."""
        if ids is not None and len(ids) > MAX_IDS:
            raise api.InputError("ids", f"{len(ids)} ids: at most {MAX_IDS} per call")

    def in_namespace(tag: str, of: str) -> bool:
        """`tag` is in the namespace of `of` ("user:bob" in "user:ana"'s)."""
        return normalize_tag(tag).split(":", 1)[0] == normalize_tag(of).split(":", 1)[0]

    def within(tags) -> tuple[str, ...]:
        """A caller's `tags` AND the server's scope: a caller can narrow the scope, never
        widen it."""
        return (*(tags or ()), *fixed)

    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)

    @tool(writes)
    @_errors(ToolError)
    def remember(memories: list[MemoryIn]) -> dict:
        """Store memories: what was said or done, one fact or event per item.

        Give `speaker` (who said it) and `timestamp` (ISO 8601, when it happened; default now)
        when you know them; `tags` (e.g. "project:atlas") let recall and forget filter later.
        Returns one {id, status} per item: stored, duplicate (the same text with the same
        speaker, tags and time is already stored) or gated (dropped by the store's ingest
        goal). An invalid item stores nothing and the error names it. A server started with
        --scope TAG adds TAG to every memory's tags (so 63 others at most)."""
        from .engine.ingest import retrieval_text
        from .engine.inputs import MAX_TAGS, item_from_object

        def given(m: dict, n: int) -> dict:
            m = {k: v for k, v in m.items() if v is not None}
            tags = m.get("tags", [])
            if not fixed or not isinstance(tags, list):  # item_from_object says what is wrong
                return m
            mine = normalize_tag(scope)
            named = [(t, normalize_tag(t)) for t in tags if isinstance(t, str)]
            # "user:bob" beside the server's "user:ana" would file the memory under Bob's
            # scope too, where his recall finds it: a scope is never widened, also on write
            other = [t for t, norm in named if in_namespace(t, scope) and norm != mine]
            if other:
                raise api.InputError(f"item {n}", f"tag {other[0]!r} names another scope than "
                                                  f"this server's ({scope})")
            if len(tags) >= MAX_TAGS and mine not in {norm for _, norm in named}:
                raise api.InputError(f"item {n}", f"`tags`: at most {MAX_TAGS - 1} besides "
                                                  f"this server's scope tag {scope}, which it adds")
            return {**m, "tags": [*tags, *fixed]}

        items = [item_from_object(given(m, n), f"item {n}") for n, m in enumerate(memories, 1)]
        if not items:
            return {"results": [], "counts": {"stored": 0, "duplicate": 0, "gated": 0}}
        # the model runs before the writer lock is taken: the lock is held to write only
        embedder = Embedded(mem.embedder(), [retrieval_text(it) for it in items])
        with mem.writing:
            result = api.ingest_items(items, path, embedder=embedder,
                                      lock_timeout=mem.write_wait())
        results = [o.as_dict() for o in result.outcomes]
        counts = {s: sum(r["status"] == s for r in results)
                  for s in ("stored", "duplicate", "gated")}
        return {"results": results, "counts": counts}

    @tool(writes)  # a recall is rehearsal: it strengthens what it returns
    @_errors(ToolError)
    def recall(query: StrictStr, k: Optional[StrictInt] = None, mode: Optional[Mode] = None,
               types: Optional[list[MemoryType]] = None, since: Optional[Time] = None,
               until: Optional[Time] = None, as_of: Optional[Time] = None,
               tags: Optional[list[StrictStr]] = None, explain: StrictBool = False) -> dict:
        """Find the memories that matter for a question, by spreading activation through the
        memory graph (it finds memories that share no words with the question).

        Returns {query, rejected, confidence, results: [{id, text, speaker, time, score, ...}]}.
        `rejected: true` with no results means the store holds no record of this: tell the
        user you do not know rather than guess. The current version of a changed fact is
        usually first; when results disagree, the one with the later `time` is current. Filters: `tags` (all must match; "speaker:NAME" works), `since`/`until`
        (ISO 8601 or epoch ms), `types`; `as_of` answers as at a past time. `k`: how many
        (default from the `mcp.recall_k` setting, 10). `explain` adds each result's path
        and `via`, the semantic nodes (people, places, things) that tie it to the question.
        Leave `mode` unset: the default mode is the one with the "no record" gate; the
        baselines vector, bm25 and hybrid always return their nearest memories, related or not.
        A server started with --scope TAG adds TAG to `tags`: only that user's memories."""
        s = mem.settings()
        if k is not None and not 1 <= k <= 1000:
            raise api.InputError("k", f"{k}: expected 1 to 1000")
        as_of_ms = _time(as_of, "as_of", end=True)
        if as_of_ms is not None and until is not None:
            raise api.InputError("as_of", "as_of and until both end the window: give one")
        opts = dict(k=s["mcp.recall_k"] if k is None else k, explain=explain, types=tuple(types or ()),
                    tags=within(tags), since_ms=_time(since, "since", start=True),
                    until_ms=as_of_ms if as_of_ms is not None else _time(until, "until", end=True))
        if mode:
            opts["mode"] = mode
        return mem.recall(query, touch=as_of_ms is None, now_ms=as_of_ms, **opts)

    @tool(ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                             openWorldHint=False))
    @_errors(ToolError)
    def forget(ids: Optional[list[StrictInt]] = None, query: Optional[StrictStr] = None,
               tags: Optional[list[StrictStr]] = None, dry_run: StrictBool = False,
               purge: StrictBool = False) -> dict:
        """Forget memories by id, or those that match `query` (similarity above 0.45).

        `tags` limits it to memories carrying every one of them (e.g. ["user:bob"]: nothing
        of another user is forgotten or shown; ids outside are listed under `out_of_scope`;
        `purge` then empties only that user's part of the trash).
        By default they go to the trash: recall ignores them and `restore` brings them back.
        Call with `dry_run: true` first to see what would go (`selected`, and `query_matches`
        with each match's text). `purge: true` deletes them and every copy for good (the
        user's right to be forgotten): only when the user explicitly asks for that. Pinned
        memories are never forgotten (unpin first). A server started with --scope TAG adds
        TAG to `tags`: nothing outside that user's memories is forgotten or shown."""
        if not ids and not query:
            raise api.InputError("forget", "give `ids` or `query`")
        bounded(ids)
        with mem.writing:
            return api.prune(path, ids=ids or (), query=query, within=within(tags),
                             dry_run=dry_run, purge=purge, embedder=mem.embedder(),
                             lock_timeout=mem.write_wait())

    def scoped(ids: list[int], tags) -> tuple[list[int], list[int]]:
        """(ids inside the `tags` scope (and the server's), ids outside it or unknown to the
        store): as for `forget`, a scope keeps one user's agent off another user's memories,
        and does not tell it which ids exist."""
        bounded(ids)
        tags = within(tags)
        if not tags:
            return ids, []
        from .engine import arguments

        inside = _carrying(path, arguments.tags(tags, "tags"), ids)
        return [i for i in ids if i in inside], [i for i in ids if i not in inside]

    @tool(writes)
    @_errors(ToolError)
    def restore(ids: list[StrictInt], tags: Optional[list[StrictStr]] = None) -> dict:
        """Take forgotten memories out of the trash (before a purge). Returns the restored
        and not_in_trash ids, and under `already_live` ({id, live_id}) those left in the
        trash because the same memory (text, tags and time) was remembered again since
        (restoring would make two copies); an id the store does not hold (never stored, or
        purged) is an error and nothing is restored. With `tags` (a user's scope, as for
        forget), ids of memories without every tag are left alone and listed under
        `out_of_scope`; a server started with --scope TAG adds TAG to `tags`."""
        inside, outside = scoped(ids, tags)
        with mem.writing:
            out = api.restore(inside, path, lock_timeout=mem.write_wait()) if inside else {
                "restored": [], "not_in_trash": [], "already_live": [], "not_found": []}
        return {**out, "out_of_scope": outside}

    @tool(writes)
    @_errors(ToolError)
    def pin(ids: list[StrictInt], tags: Optional[list[StrictStr]] = None) -> dict:
        """Pin memories: they never fade and are never forgotten by policy. Returns each
        memory's flags under `results`; with `tags` (a user's scope; a server started with
        --scope TAG adds TAG), other memories are left alone and listed under `out_of_scope`."""
        inside, outside = scoped(ids, tags)
        with mem.writing:
            rows = api.mark(inside, path, pin=True, lock_timeout=mem.write_wait()) \
                if inside else []
        return {"results": rows, "out_of_scope": outside}

    @tool(writes)
    @_errors(ToolError)
    def unpin(ids: list[StrictInt], tags: Optional[list[StrictStr]] = None) -> dict:
        """Unpin memories: they fade and can be pruned again like any other. With `tags` (a
        user's scope; a server started with --scope TAG adds TAG), other memories are left
        alone and listed under `out_of_scope`."""
        inside, outside = scoped(ids, tags)
        with mem.writing:
            rows = api.mark(inside, path, pin=False, lock_timeout=mem.write_wait()) \
                if inside else []
        return {"results": rows, "out_of_scope": outside}

    @tool(read_only)
    @_errors(ToolError)
    def memory_status() -> dict:
        """What the store holds: memories by type and flag (how many are consolidated,
        pinned, in the trash), graph edges by type, bytes on disk. On a server started with
        --scope TAG: the memories carrying TAG only, without the store-wide parts."""
        return api.inspect(path, within=fixed)

    @tool(read_only)
    @_errors(ToolError)
    def find_nodes(name: StrictStr = "", limit: StrictInt = 20) -> dict:
        """Find entities of the memory graph (people, places, things that consolidation
        extracted) whose name contains `name`; exact names first, then the most mentioned.
        Returns {nodes: [{id, name, type, description, mentions}]}; open one with
        `open_node`. A node carries the tags of the memories it was made from (only memories
        carrying them join it), and its description quotes them: on a server started with
        --scope TAG only the nodes that carry TAG are found. `limit`: 1 to 200."""
        if not 1 <= limit <= 200:  # as recall's k: an error, not quietly another number
            raise api.InputError("limit", f"{limit}: expected 1 to 200")
        return {"nodes": api.nodes(name, path, limit=limit, within=fixed)}

    @tool(read_only)
    @_errors(ToolError)
    def open_node(id: StrictInt) -> dict:
        """One entity of the memory graph: its description, relations, linked entities and
        the memories it was extracted from (newest first). On a server started with --scope
        TAG, a node without TAG is "no record" and only linked records with TAG are listed."""
        return api.node(id, path, within=fixed)

    @tool(writes)
    @_errors(ToolError)
    async def consolidate(max_seconds: Optional[StrictFloat] = None) -> dict:
        """Run the local model over memories not yet consolidated, building the memory graph
        that recall spreads through. Stops after `max_seconds` (default: the
        `mcp.consolidate_seconds` setting, 10); `left_windows` says what is left for the next
        call. Usually a nightly cron job does this; call it when the user asks. On a server
        started with --scope TAG it works on every user's memories alike, but says only
        {scope, finished, left_because (when not finished), episodes: how many of TAG's
        memories this call consolidated}: the other counts (windows, nodes, edges, what is
        left) are about every user's memories."""
        import anyio

        budget = mem.settings()["mcp.consolidate_seconds"] if max_seconds is None else max_seconds
        if not (budget > 0 and math.isfinite(budget)):
            raise api.InputError("max_seconds", "expected a finite number of seconds > 0")
        stop = threading.Event()
        try:  # the model runs in a worker thread; a cancelled call tells it to stop
            result = await anyio.to_thread.run_sync(mem.consolidate, budget, stop,
                                                    abandon_on_cancel=True)
        except Stopped:
            if scope:  # its message counts every user's windows
                raise Stopped("consolidate stopped: the call was cancelled") from None
            raise
        finally:
            stop.set()
        if not scope:
            return result.as_dict()
        # Windows mix users (a shared session) and so do the nodes and edges made from them;
        # only the scope's own episodes among those consolidated can be counted without
        # telling what other users said or how much. `finished` does say whether anyone's
        # memories are left, which the agent needs to know whether to call again.
        out = {"scope": list(fixed), "finished": not result.left_windows,
               "episodes": len(_carrying(path, fixed, [i for ids, _ in result.extractions
                                                       for i in ids]))}
        if result.left_windows:
            out["left_because"] = result.left_because
        return out

    @server.resource("synapse://status", mime_type="application/json",
                     description="The store summary (as `synapse inspect --json`); under "
                                 "--scope, the scope's records only.")
    @_errors(ResourceError)
    def status_resource() -> str:
        return _json(api.inspect(path, within=fixed))

    @server.resource("synapse://record/{record_id}", mime_type="application/json",
                     description="One record: header fields, text and metadata, edges; under "
                                 "--scope, only a record carrying the scope tag (and its "
                                 "edges to such records).")
    @_errors(ResourceError)
    def record_resource(record_id: str) -> str:
        if not (record_id.isascii() and record_id.isdigit()):  # not "१" (Devanagari 1)
            raise ResourceError(f"record id {record_id!r}: expected a number")
        return _json(api.inspect_record(int(record_id), path, within=fixed))

    server.memory = mem  # for serve(): closed on shutdown
    sdk_call_tool = server.call_tool  # the SDK's handler looks it up on the instance per call

    async def call_tool(name, arguments, context=None):
        """The SDK's call_tool, with arguments that fail a tool's schema reported in one line,
        as the CLI reports a bad flag, not as pydantic's multi-line text and link."""
        try:
            return await sdk_call_tool(name, arguments, context)
        except ToolError as e:  # not UnexpectedToolError: a crash says nothing of its values
            if not isinstance(e, UnexpectedToolError) and isinstance(e.__cause__, ValidationError):
                raise ToolError(f"{name}: {schema_errors(e.__cause__)}") from e.__cause__
            raise

    server.call_tool = call_tool
    return server


def schema_errors(exc: ValidationError) -> str:
    """pydantic's errors in one line: "tag: unknown argument; k: expected an integer, got
    '5'"."""
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "extra_forbidden":
            out.append(f"{where}: unknown argument")
        elif err["type"] == "missing":
            out.append(f"{where}: required")
        else:
            got = repr(err.get("input"))
            got = got if len(got) <= 40 else got[:37] + "..."
            out.append(f"{where}: {err['msg'][0].lower() + err['msg'][1:]}, got {got}")
    return "; ".join(out)


def _carrying(path: Path, tags, ids) -> set[int]:
    """Those of `ids` the store holds whose record carries every one of `tags`."""
    from .engine.filters import carries
    from .engine.store import Store

    with Store.open(path) as s:
        return {i for i in ids if carries(s, i, tags)}


def _json(obj) -> str:
    from .commands.output import dumps

    return dumps(obj).decode("utf-8")


def bearer_guard(app, token: str):
    """ASGI middleware: refuse (401) any HTTP request without `Authorization: Bearer <token>`."""
    expected = token.encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, credentials = got.partition(b" ")
            # the scheme is case-insensitive (RFC 7235: "bearer" is "Bearer"); the token is not
            if scheme.lower() != b"bearer" or not hmac.compare_digest(credentials, expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b"synapse mcp: missing or wrong bearer token\n"})
                return
        await app(scope, receive, send)
    return guarded


def serve(path: Path, http: tuple[str, int] | None = None, token: str | None = None,
          scope: str | None = None) -> None:
    """Serve until the client closes stdin (stdio) or SIGINT/SIGTERM (both)."""
    logging.basicConfig(level=logging.WARNING, format="synapse mcp: %(levelname)s %(message)s")
    server = build(path, scope)
    try:
        if http is None:
            import anyio

            anyio.run(_serve_stdio, server)
        else:
            _serve_http(server, *http, token)
    finally:
        server.memory.close()


async def _serve_stdio(server) -> None:
    """What `server.run("stdio")` does, except that a line that is no JSON-RPC message gets
    an error reply (JSON-RPC 2.0: -32700 parse error, -32600 invalid request) and a warning
    on stderr. The SDK's stdio transport passes the exception on and the server drops it
    without a word, so a client waiting for that request's id would wait for ever (a lone
    surrogate "\ud800" or a cut-off line did that); over HTTP the SDK already answers 400."""
    import anyio
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs, SDK 2.x
    async with stdio_server() as (read_stream, write_stream):
        checked_in, checked_out = anyio.create_memory_object_stream(0)

        async def check():
            async with checked_in:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        try:
                            reply = _error_reply(item)
                        except Exception:  # noqa: BLE001 (a bad line must never end the server)
                            log.exception("could not answer an unreadable line")
                            continue
                        if reply is not None:
                            await write_stream.send(reply)
                    else:
                        await checked_in.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(check)
            await lowlevel.run(checked_out, write_stream,
                               lowlevel.create_initialization_options())


def _error_reply(exc: Exception):
    """The JSON-RPC error answering a line the transport could not read as a message, or None
    when nothing must be answered (a blank line; a client's own response, which JSON-RPC never
    answers). The id is the line's own when one can be read from it, else null (JSON-RPC 2.0);
    a lone surrogate, which pydantic refuses, is still JSON to Python's reader."""
    from mcp.shared.message import SessionMessage
    from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

    errors = exc.errors() if hasattr(exc, "errors") else []
    first = errors[0] if errors else {}
    line = first.get("input")
    if isinstance(line, str):
        if not line.strip():
            return None
        try:
            line = json.loads(line)
        except ValueError:
            pass
    if isinstance(line, dict) and "method" not in line and ("result" in line or "error" in line):
        log.warning("dropped a response that is no JSON-RPC message: %s",
                    str(exc).splitlines()[0])
        return None
    rid = line.get("id") if isinstance(line, dict) else _id_in(line) if isinstance(line, str) \
        else None
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) \
            or isinstance(rid, str) and not rid.isprintable():
        rid = None  # no id, or one that cannot go back (a lone surrogate, a control character)
    parse = first.get("type") == "json_invalid"
    why = first.get("msg") or str(exc).splitlines()[0]
    if not parse and first.get("loc"):
        why += f" ({'.'.join(map(str, first['loc']))})"
    log.warning("request %s: %s: %s", rid, "not JSON" if parse else "not a JSON-RPC message",
                why)
    error = ErrorData(code=PARSE_ERROR if parse else INVALID_REQUEST,
                      message=("Parse error: " if parse else "Invalid request: ") + why)
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=rid, error=error))


def _id_in(line: str):
    """The first `"id": ...` of a line cut off before it could be read as JSON, or None."""
    m = re.search(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")', line)
    try:
        return None if m is None else json.loads(m.group(1))
    except ValueError:  # "a\x", a raw tab: no id
        return None


class _ClientGone(logging.Filter):
    """A client that goes away in the middle of its request is no error of the server: one
    warning line instead of the SDK's traceback under "Error handling POST request"."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if type(exc).__name__ == "ClientDisconnect":  # starlette.requests.ClientDisconnect
            record.msg, record.args = "a client went away before its request was read", ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def _serve_http(server, host: str, port: int, token: str | None) -> None:
    import anyio
    import uvicorn

    logging.getLogger("mcp.server.streamable_http").addFilter(_ClientGone())

    app = server.streamable_http_app(host=host)
    if token is not None:
        app = bearer_guard(app, token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    # uvicorn handles SIGINT/SIGTERM itself: it stops accepting, finishes calls, then returns.
    anyio.run(uvicorn.Server(config).serve)
