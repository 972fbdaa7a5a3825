"""Exact tag filters. A record header's synaptic tags are a 64-bit Bloom filter (FORMAT.md 4.2):
it never misses a tag the record carries, but about 0.3% of other records match too, so a
filter that stopped there would hand one user's memories to another. The Bloom bits only
pre-select; the tags in the record's payload decide."""
from __future__ import annotations

import numpy as np

from store_format.tags import contains_many, encode_tags, normalize_tag

from .store import Store


# Memory types as bits of recall's type filter (the header scan's type_mask).
TYPE_BITS = {"working": 1, "episodic": 2, "semantic": 4, "procedural": 8}


def exact_tags(body: dict) -> set[str]:
    """The normalised tags a record carries: its `tags` plus speaker:, session: and source:
    from its metadata (ingest stores those as tags too; older records may lack them)."""
    out = {normalize_tag(t) for t in body.get("tags") or [] if isinstance(t, str)}
    for key in ("speaker", "session", "source"):
        if body.get(key):
            out.add(normalize_tag(f"{key}:{body[key]}"))
    return out


def carries(store: Store, record_id: int, tags) -> bool:
    """The store holds `record_id` and its record carries every one of `tags` (exact_tags)."""
    try:
        store.locate(int(record_id))
    except KeyError:
        return False
    want = {normalize_tag(t) for t in tags}
    return not want or want <= exact_tags(store.body(int(record_id)))


def header_tags(store: Store, cache: dict | None = None) -> np.ndarray:
    """u64 [n]: every record's Bloom filter in position order (once per snapshot in `cache`)."""
    if cache is not None and "synaptic_tags" in cache:
        return cache["synaptic_tags"]
    tags = (np.concatenate([np.asarray(s.headers["synaptic_tags"], np.uint64)
                            for s in store.segments])
            if store.segments else np.zeros(0, np.uint64))
    if cache is not None:
        cache["synaptic_tags"] = tags
    return tags


def newest_tagged(blooms: np.ndarray, tags, body_of, limit: int) -> list[int]:
    """The last `limit` positions of `blooms` (u64 Bloom filters, oldest first) whose record
    carries every one of `tags`, newest first: the Bloom bits pre-select, then `body_of(pos)`
    (its payload) decides, read one at a time until `limit` are found, not every hit's."""
    want = {normalize_tag(t) for t in tags} - {""}
    hits = np.flatnonzero(contains_many(blooms, encode_tags(want)))[::-1]
    out = []
    for pos in hits.tolist():
        if len(out) == limit:
            break
        if want <= exact_tags(body_of(pos)):
            out.append(pos)
    return out


def tag_mask(store: Store, tags, cache: dict | None = None,
             candidates: np.ndarray | None = None) -> np.ndarray:
    """bool [n]: the records that carry every one of `tags`, exactly. Only the Bloom hits
    (restricted to `candidates` when given) have their payload read. Cached per snapshot and
    tag set when `candidates` is None."""
    want = {normalize_tag(t) for t in tags} - {""}
    key = ("tag_mask", frozenset(want))
    if candidates is None and cache is not None and key in cache:
        return cache[key]
    if not want:
        return np.ones(len(store.ids), bool)
    hits = contains_many(header_tags(store, cache), encode_tags(want))
    if candidates is not None:
        hits &= candidates
    pos = np.flatnonzero(hits)
    if len(pos):
        bodies = store.bodies(store.ids[pos])
        hits[pos] = [want <= exact_tags(b) for b in bodies]
    if candidates is None and cache is not None:
        cache[key] = hits
    return hits


def check_filters(cfg) -> dict:
    """Refuse a recall filter that would silently match nothing or the wrong records: a time
    window that ends before it starts, tags that are not a list of non-empty strings (a bare
    string would be read as one tag per character), an unknown type. ConfigError with
    usage=True: exit 2 on the command line. Returns the filters as checked, {tags, types,
    since_ms, until_ms} (tuples and Python ints): the caller filters with these, since an
    iterator in `cfg` has been read here and a numpy integer compares as an array."""
    from .arguments import epoch_ms, strings, tags
    from .config import ConfigError

    tag_filter, types = tags(cfg.tags, "tags"), strings(cfg.types, "types")
    if any(t not in TYPE_BITS for t in types):
        raise ConfigError(f"types must be a list of {', '.join(TYPE_BITS)}", usage=True)
    since, until = epoch_ms(cfg.since_ms, "since_ms"), epoch_ms(cfg.until_ms, "until_ms")
    if since is not None and until is not None and since > until:
        raise ConfigError("the time window ends before it starts (since is later than until)",
                          usage=True,
                          hint="swap the two times")
    return {"tags": tag_filter, "types": types, "since_ms": since, "until_ms": until}
