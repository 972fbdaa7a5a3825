"""Name bridges: pseudo-relevance feedback through the names the best memories mention.

"Which care home is Dad going into?" finds the long message that weighs "Fernbank" against
"Aspen Lodge", but not "I rang Fernbank straight after. They can take him", which says neither
"care" nor "home". The name is the bridge: the proper names that the best
`bridge_docs` candidates mention (capitalised inside a sentence, not a speaker of the store, not
a word of the question) become a second BM25 query, whose normalised score, times
`lambda_bridge`, is added to every candidate's fused score. Classic pseudo-relevance feedback
(RM3 and its kin), restricted to names: in chat the other words of a turn are mostly small
talk, and a name is what ties two turns about one thing together when no consolidation has run
(consolidation's entity nodes do it through the graph).
"""
from __future__ import annotations

import re

from ...models.words import _DAYS, _MONTHS, _STOP

_NAME = re.compile(r"(?<![\w'’])([A-Z][\w’'&-]*)")
_SENTENCE_END = re.compile(r"(?:[.!?:;]\s+|\n)\W*$")  # what a sentence-initial word follows
_LOOK_BACK = 64  # characters: enough for any run of punctuation, and linear in the text
_POSSESSIVE = re.compile(r"['’]s?$")
_NOT_NAME = _STOP | frozenset(_DAYS) | frozenset(_MONTHS)


def names_in(text: str | None) -> list[str]:
    """Capitalised words of `text` that are not the first word of a sentence, not stopwords,
    days or months, possessives cut off ("Fernbank's" -> "Fernbank"), in order, once each."""
    out: list[str] = []
    text = text or ""
    for m in _NAME.finditer(text):
        before = text[max(0, m.start() - _LOOK_BACK): m.start()]
        first = m.start() <= _LOOK_BACK and not re.search(r"\w", before)  # the text's first word
        if first or _SENTENCE_END.search(before):
            continue
        word = _POSSESSIVE.sub("", m.group(1))
        if len(word) > 1 and word.casefold() not in _NOT_NAME and word not in out:
            out.append(word)
    return out


def bridge_query(bodies: list[dict], query: str, is_speaker) -> str | None:
    """The names of `bodies` that the question does not use and that are no speaker's
    (`is_speaker(name)`), as one query string; None when there are none."""
    asked = {_POSSESSIVE.sub("", w).casefold() for w in re.findall(r"[\w'’-]+", query)}
    names: list[str] = []
    for body in bodies:
        for name in names_in(body.get("text")):
            if name.casefold() not in asked and name not in names and not is_speaker(name):
                names.append(name)
    return " ".join(names) or None
