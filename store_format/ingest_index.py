"""`ingest.idx` (docs/FORMAT.md section 12): MD5 and session key per ingested record.

Loaded whole with one vectorised CRC pass, so `ingest` can deduplicate and find the last record
of a session in a 10k-record store in milliseconds.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from . import entrylog, fileheader
from .errors import InvalidRecord
from .tags import normalize_tag

NAME = "ingest.idx"
MAGIC = b"SYNINGST"
VERSION = 1
HEADER_SIZE = 16
ENTRY_DTYPE = np.dtype([("md5", "V16"), ("record_id", "<u8"), ("session", "<u8"),
                        ("reserved", "<u4"), ("crc", "<u4")])
assert ENTRY_DTYPE.itemsize == 40


def own_tags(tags, speaker: str | None = None, session: str | None = None,
             source: str | None = None) -> tuple[str, ...]:
    """A record's own tags, normalised and sorted: `tags` without the speaker:, session: and
    source: tags ingest derives from its metadata (those say where it came from, not whose it
    is)."""
    added = {normalize_tag(f"{k}:{v}") for k, v in
             (("speaker", speaker), ("session", session), ("source", source)) if v}
    return tuple(sorted({normalize_tag(t) for t in tags} - added - {""}))


# A record with up to this many own tags is also linked to the latest record of its session whose
# own tags are a part of its own (wider_keys): 2^6 - 1 lookups at most.
MAX_NESTED_TAGS = 6


def wider_keys(session: str | None, source: str | None, tags=(),
               speaker: str | None = None) -> list[int]:
    """The session keys of the proper subsets of the item's own tags (the untagged key first):
    the chains a labelled turn ("plan" besides "user:ana") also continues, so that it stays in
    its conversation. [] without own tags, without a session or source, or with more than
    MAX_NESTED_TAGS own tags."""
    import itertools

    own = own_tags(tags, speaker, session, source)
    if not own or len(own) > MAX_NESTED_TAGS or not (session or source):
        return []
    return [session_key(session, source, part) for r in range(len(own))
            for part in itertools.combinations(own, r)]


def session_key(session: str | None, source: str | None, tags=(),
                speaker: str | None = None) -> int:
    """The chain a record joins (FORMAT.md 12): its session, else its source, and its own tags
    (normalised; not the speaker:, session: and source: tags ingest adds). Records of one
    session with different tags are different users' or agents': a chain through another
    user's records would cut a tagged recall's chain apart at every one of them (a tag filter
    is a wall), and so let what another user stored move this user's activation. A record
    without tags has the key of the name alone, as before tags counted. 0: no chain."""
    if session:
        key = "session:" + session
    elif source:
        key = "source:" + source
    else:
        return 0
    own = own_tags(tags, speaker, session, source)
    if own:
        key += "\0" + "\0".join(own)
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def _file_header() -> bytes:
    return fileheader.pack(MAGIC, VERSION)


def make_entries(md5s: list[bytes], record_ids, sessions) -> np.ndarray:
    e = np.zeros(len(md5s), ENTRY_DTYPE)
    if len(md5s):
        e["md5"] = np.frombuffer(b"".join(md5s), "V16")
        e["record_id"] = record_ids
        e["session"] = sessions
    return entrylog.sign(e)


def create(path) -> None:
    entrylog.create(path, MAGIC)


def read(path, entries: int) -> np.ndarray:
    """The first `entries` entries, every one checked; typed errors name path and offset."""
    return entrylog.read(path, entries, ENTRY_DTYPE, MAGIC, "ingest index",
                         lambda e: entrylog.increasing(e["record_id"]) | (e["reserved"] != 0))


def entry_offset(i: int) -> int:
    """Byte offset of entry `i` (for messages)."""
    return HEADER_SIZE + ENTRY_DTYPE.itemsize * i


def mismatch(path, i: int, record_id: int, missing: bool = False) -> InvalidRecord:
    """The error for entry `i`, which names a record the store lacks or whose text has another
    MD5: the index belongs to another store, or was damaged consistently with its CRCs."""
    what = "which the store does not hold" if missing else "whose text has another MD5"
    return InvalidRecord(f"ingest index entry {i} names record {record_id}, {what} (a foreign "
                         "or stale index; `synapse prune --compact` rebuilds it, and empties "
                         "the trash)", str(path), entry_offset(i))


def append(path, committed: int, entries: np.ndarray) -> int:
    """Append after `committed` entries (a longer tail is truncated first), fsync."""
    return entrylog.append(path, committed, entries)


def exists(store_dir) -> bool:
    return (Path(store_dir) / NAME).exists()
