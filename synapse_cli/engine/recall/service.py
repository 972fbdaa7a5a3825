"""Recaller: a store opened for answering queries, with the embedder loaded once.

Used by `synapse recall` (one process, one or many queries) and by benchmarks and the Python
API. Settings come as in the CLI: keyword arguments (like flags) > `SYNAPSE_*` > the config
file > defaults. Reconsolidation needs the writer lock; recall never waits for it: when another
writer holds the lock, or the file system refuses the write (read-only, full), the touch is
skipped and the result says so (`touched: false`; `touch_error` keeps the reason).
"""
from __future__ import annotations

import dataclasses
import threading
import time

from store_format import manifest as mf
from store_format import spikes
from store_format.errors import CorruptStore, LockTimeout, StoreIOError

from .. import config, graphview
from ..paths import resolve_store
from ..store import READ_RETRIES, Store, StoreWriter, worth_retrying
from .config import RecallConfig
from .dispatch import recall


def recall_config(cfg: RecallConfig | config.Settings | None = None, **options) -> RecallConfig:
    """The RecallConfig of a query.

    `cfg`: a RecallConfig (taken as it is), resolved settings (`api.settings(k=3)`), or None
    for the settings of `SYNAPSE_*` and the config file. `options`: settings by key (`k=3`,
    `alpha=0.9`), which win over `cfg` as flags do, or RecallConfig fields (`explain=True`,
    `tags=("user:ana",)`)."""
    from .synaptic import SynapticConfig

    by_key = {s.key: s.name for s in config.SETTINGS}
    fields = {f.name for f in dataclasses.fields(RecallConfig)}
    if isinstance(cfg, RecallConfig):
        unknown = set(options) - fields
        if unknown:  # a setting of another section cannot be applied to a finished config
            raise config.ConfigError(f"not a recall option: {', '.join(sorted(unknown))}",
                                     usage=True, hint="pass api.settings(...) instead of a "
                                                      "RecallConfig to set it")
        return dataclasses.replace(cfg, **_checked({"tags": cfg.tags, "types": cfg.types,
                                                    **options}))
    flags = {by_key[k]: v for k, v in options.items() if k in by_key}
    rest = {k: v for k, v in options.items() if k not in by_key}
    unknown = set(rest) - fields
    if unknown:
        raise config.ConfigError(f"unknown setting(s) or option(s): {', '.join(sorted(unknown))}",
                                 usage=True, hint="`synapse config` lists every setting")
    rest = _checked(rest)
    if isinstance(cfg, config.Settings):  # its flags, then these options over them
        flags = {**{n: v for n, v in cfg.values.items() if cfg.sources[n] == "flag"}, **flags}
    elif cfg is not None:
        raise TypeError(f"cfg must be a RecallConfig, settings or None, not {type(cfg).__name__}")
    settings = config.resolve(flags)
    return RecallConfig(**{**settings.kwargs("recall"),
                           "synaptic": SynapticConfig.from_settings(settings), **rest})


def _checked(options: dict) -> dict:
    """`options` with RecallConfig fields given by name checked against the type of their
    default (`explain="no"` is an error, not True: engine/arguments.py) and the `tags` and
    `types` filters read into tuples: an iterator kept as given would be empty by the time the
    filter runs (its check reads it) and the recall would match every user's records. What the
    filters hold is checked with the query (filters.check_filters)."""
    from .. import arguments as a

    defaults = {f.name: f.default for f in dataclasses.fields(RecallConfig)}
    out = dict(options)
    for name, value in options.items():
        default = defaults.get(name)
        if isinstance(default, bool):
            a.flag(value, name)
        elif isinstance(default, int):
            a.integer(value, name)
        elif isinstance(default, float):
            a.real(value, name)
        elif name in ("tags", "types"):
            out[name] = a.strings(value, name)
    return out


def check_query(query) -> str:
    """A query is non-empty text without NUL or lone surrogates (InputError)."""
    from ..inputs import InputError, _text

    if not isinstance(query, str) or not query.strip():
        raise InputError("query", "empty query" if isinstance(query, str) or query is None
                         else f"expected text, got {type(query).__name__}")
    return _text(query, "query", "query")


class Recaller:
    """`Recaller(store)`: `store` as `--store` (None: $SYNAPSE_HOME, else the default).

    Each `recall` first moves to the store as committed now (`refresh`: one read of the
    manifest when nothing changed), so a long-lived Recaller sees what other processes
    ingested since; `follow=False` keeps the snapshot taken at open (benchmarks)."""

    def __init__(self, path=None, embedder=None, follow: bool = True):
        self.path = resolve_store(path)
        self.store = Store.open(self.path)
        self.follow = follow
        self._closed = False
        self._embedder = embedder
        self._arrays = None
        self.touch_error: str | None = None  # the OS's reason, when a touch failed (any query)
        self._own_generation: int | None = None  # the commit of our last touch, if only ours
        # One recall at a time: a refresh closes the snapshot (its mmaps) that another thread's
        # recall is reading ("mmap closed", or a purged record from the old snapshot)
        self._lock = threading.RLock()

    @property
    def embedder(self):
        from .. import embedding

        if self._embedder is None:
            self._embedder = embedding.embedder()
        embedding.check(self.store, self._embedder)
        return self._embedder

    @property
    def arrays(self) -> graphview.RecallArrays:
        if self._arrays is None:
            self._arrays = graphview.build(self.store)
        return self._arrays

    def recall(self, query: str, cfg: RecallConfig | config.Settings | None = None,
               touch: bool = True, now_ms: int | None = None, check=None, **options) -> dict:
        """What `synapse recall --json` prints for `query`. `cfg` and `options`: see
        `recall_config` (`r.recall(q, k=3)`, `r.recall(q, api.settings(k=3))`). Safe to call
        from several threads: they take turns."""
        with self._lock:
            return self._recall(query, cfg, touch, now_ms, check, **options)

    def _recall(self, query, cfg, touch, now_ms, check, **options) -> dict:
        if self._closed:
            raise ValueError("this Recaller is closed")
        from .. import arguments as a

        check_query(query)
        a.flag(touch, "touch")
        now_ms = a.epoch_ms(now_ms, "now_ms")
        cfg = recall_config(cfg, **options)
        if self.follow:
            self.refresh()
        vec = embed = None
        for attempt in range(READ_RETRIES + 1):
            try:
                if vec is None:  # reads the store (its speakers): inside the retry
                    vec, embed = self._query_vectors(query, cfg)
                result = recall(self.store, query, vec, cfg, self.arrays, now_ms=now_ms,
                                embed=embed)
                break
            except (CorruptStore, StoreIOError) as exc:
                # A writer committed after we read the manifest (a compaction deleted a file
                # it named, a record now points at a newer payload entry): read the new
                # manifest and start again (store.worth_retrying).
                if attempt == READ_RETRIES or not worth_retrying(self.path,
                                                                 self.store.manifest, exc):
                    raise
                self.store.close()
                self.store, self._arrays = Store.open(self.path), None
        if check is not None:  # recall --verify: may reject before anything is touched
            result = check(result)
        stimulated = result.pop("stimulated_ids", ())  # --mode synaptic: every node reached
        if touch and result["results"]:
            result["touched"] = self._touch([r["id"] for r in result["results"]], now_ms,
                                            stimulated)
        return result

    def _query_vectors(self, query: str, cfg: RecallConfig):
        """(the query's vector, the `embed` recall gets). The default mode also embeds the query
        without the store's speakers' names (speakers.py, score.name_free_sim): both go to the
        model in one batch, one call instead of two."""
        encode = self.embedder.encode
        bare = None
        if cfg.mode == "synapse" and cfg.name_free_sim > 0:
            from .speakers import without_speakers

            bare = without_speakers(self.store, self.arrays, query, cfg.tags)
        if bare is None:
            return encode([query])[0], encode
        vecs = encode([query, bare])

        def embed(texts):
            return vecs[1:] if list(texts) == [bare] else encode(texts)
        return vecs[0], embed

    def _touch(self, ids, now_ms: int | None = None, stimulated=()) -> bool:
        """Reconsolidate the returned records (a recall spike each) and give every other
        record the synaptic stimulus reached a stimulus spike (seed 001 section 3.1)."""
        try:
            with StoreWriter.open(self.path, lock_timeout=0) as w:
                w.touch(ids, now_ms)
                others = sorted(set(stimulated) - set(ids))
                if others:
                    w.add_spikes(others, int(time.time() * 1000) if now_ms is None else now_ms,
                                 spikes.STIMULUS)
                m = w.commit()  # the recall spikes (FORMAT.md 15)
            # the next commit after our snapshot: nobody else wrote in between (see refresh)
            mine = (m.store_id == self.store.manifest.store_id
                    and m.generation == self.store.manifest.generation + 1)
            self._own_generation = m.generation if mine else None
            return True
        except LockTimeout:
            return False  # a writer is busy: recall does not wait for it
        except (StoreIOError, OSError) as exc:
            # A read-only or full file system: the answer matters more than the rehearsal.
            self.touch_error = str(exc)
            return False

    def refresh(self) -> bool:
        """Move to the store as committed now, for a long-lived Recaller (`synapse mcp`);
        returns whether anything changed. When the only commit since the snapshot is this
        Recaller's own touch (recall counts rewritten in place, spikes logged), the graph
        arrays and their caches stay and only the spike log is read again."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> bool:
        m = mf.read_manifest(self.path, check_files=False)
        if (m.store_id, m.generation) == (self.store.manifest.store_id,
                                          self.store.manifest.generation):
            return False
        own = m.generation == self._own_generation and m.store_id == self.store.manifest.store_id
        old, self.store = self.store, Store.open(self.path)
        old.close()
        if own and self._arrays is not None:
            self._arrays.spikes = self.store.spike_entries()
            self._arrays.cache.pop("spike_trains", None)
        else:
            self._arrays = None
        self._own_generation = None
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
