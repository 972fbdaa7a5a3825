"""The query without the names of the store's speakers.

Ingest embeds "speaker: text", so a question that names a speaker ("Is Dana still
vegetarian?") is close to every turn of hers, "Dana: yep" and "Dana: lol" included, and such
chatter crowds out the turns that state the fact. The similarity of the query with those names
removed ranks by what is asked; that the named person said it is the speaker focus's job
(synapse.py, `lambda_speaker`)."""
from __future__ import annotations

import re

from ..filters import header_tags, newest_tagged
from .topic import topic_words

_WORD = re.compile(r"\b([A-Z][\w-]*)(['\u2019]s)?\b")


def is_speaker(store, arrays, name: str, tags=()) -> bool:
    """Some record carries the tag speaker:<name>, and every one of `tags` (a recall's tag
    filter: whether a name is a speaker never depends on another user's records); cached per
    snapshot. Payloads are read until one confirms, not all of the speaker's records (a CLI
    recall opens a new snapshot each time)."""
    key = ("is_speaker", name, frozenset(tags))
    if key not in arrays.cache:
        blooms = header_tags(store, arrays.cache)
        arrays.cache[key] = bool(newest_tagged(blooms, [f"speaker:{name}", *tags],
                                               lambda pos: store.body(int(store.ids[pos])), 1))
    return arrays.cache[key]


def without_speakers(store, arrays, query: str, tags=()) -> str | None:
    """`query` with every capitalised word that is a speaker of the store (of its records that
    carry `tags`) removed (with its possessive), or None when it names no speaker or nothing
    but names would remain."""
    names = {m.group(1) for m in _WORD.finditer(query)
             if is_speaker(store, arrays, m.group(1), tags)}
    if not names:
        return None
    bare = _WORD.sub(lambda m: " " if m.group(1) in names else m.group(0), query)
    bare = re.sub(r"\s+", " ", bare).strip()
    return bare if topic_words(bare) else None


def subject_names(store, arrays, query: str, tags=(), tokenize=None) -> set[str]:
    """The tokens of the capitalised words of `query` after its first that are not speakers of
    the store (of its records that carry `tags`): "Kwame", "Lagos" in "Dana's sessions with
    Kwame"; not "Dana". `tokenize`: whose tokens (default: the newest tokenizer's)."""
    if tokenize is None:
        from ...models.tokenize import tokenize

    return {t for m in _WORD.finditer(query) if m.start() > 0
            and not is_speaker(store, arrays, m.group(1), tags) for t in tokenize(m.group(1))}
