"""Document engrams: each ingested document's name (its `source`) as a semantic node, linked to
the document's own chunks and to every chunk that names the document.

Seed 002 recalls through a bipartite entity-chunk graph, and what a multi-hop question travels
along is a chunk that names another document ("born in Young, New South Wales" leads to the
passage "Young, New South Wales"). The local 135M model extracts few of those names: on HotpotQA
only 41 of the 100 gold passage pairs share any engram, mostly generic ones ("American"). A
corpus names its documents already, so consolidation links them by exact match of the name,
which needs no model and invents nothing:
- the first consolidation window that reads or names a document gives it a node "NAME [TYPE]
  document [DESC] <the start of its first chunk>", in that window's commit (so `--max-seconds`
  and a kill stop it like any window); a node of that name that exists already (an entity the
  model extracted) becomes the document's instead, its body marked `document: true`. The names
  a run looks for are those of the documents it is about to read and of earlier ones;
- each window's episode is linked (ABSTRACTION, both directions) to the node of its own
  document (weight 1) and to the node of every other document whose name its text contains
  (`abstraction_weight`). A document node is exempt from the top-K incoming-edge rule: its
  in-edges are its chunks and the chunks that name it, as many as the corpus has, not the
  quadratic growth the rule is there to stop.
A name matches as a sequence of whole words, case-sensitively, after the same normalisation of
both sides: words split at whitespace and dashes, edge punctuation and a possessive 's dropped,
a trailing parenthesis of the name ignored ("Bethel University (Minnesota)" is named by
"Bethel University's"), and so are a file's directory and extension (`ingest --format doc
notes/Gallu.txt` makes the source "notes/Gallu.txt", named by "Gallu"). Not matched: names
shorter than 3 characters or starting in lower case, and one-word names that are a number or a
common word ("Her (film)", "1984 (novel)").
A chunk consolidated by an earlier run, before the document it names was ingested, is found
when the document's node is made: through the BM25 postings of the name's words, then the same
match on its text.
"""
from __future__ import annotations

import re

from ...models.words import _STOP

_PAREN = re.compile(r"\s*\([^()]*\)$")
_FILE = re.compile(r"^\S+\.[A-Za-z0-9]{1,5}$")   # a path: no spaces, ends in .ext
_SPLIT = re.compile(r"[\s\-\u2010-\u2015]+")
_EDGE = "\"'“”‘’()[]{}<>¿¡.,;:!?*"
_POSSESSIVE = re.compile(r"['’]s$")
DOCUMENT_TYPE = "document"


def base_name(source: str) -> str:
    """What running text calls a document: a file's name without directory and extension
    ("notes/Gallu.txt": "Gallu"), a title without a trailing parenthesis."""
    if _FILE.match(source):
        source = source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return _PAREN.sub("", source).strip()


def _words(text: str) -> list[str]:
    out = []
    for w in _SPLIT.split(text):
        w = _POSSESSIVE.sub("", w.strip(_EDGE)).strip(_EDGE)
        if w:
            out.append(w)
    return out


def is_document(body: dict) -> bool:
    """A node that stands for a document (made for it, or an entity node it took over)."""
    return body.get("etype") == DOCUMENT_TYPE or bool(body.get("document"))


class DocumentNames:
    """Document names by the word sequence text calls them (several documents can share one)."""

    def __init__(self, sources=()):
        self.by_words: dict[tuple[str, ...], list[str]] = {}
        self.longest = 0
        for s in sources:
            self.add(s)

    def add(self, source: str) -> None:
        base = base_name(source)
        key = tuple(_words(base))
        if len(base) < 3 or not key or base[0].islower():
            return
        if len(key) == 1 and (key[0].isdigit() or key[0].casefold() in _STOP):
            return
        names = self.by_words.setdefault(key, [])
        if source not in names:
            names.append(source)
        self.longest = max(self.longest, len(key))

    def __len__(self) -> int:
        return len(self.by_words)

    def mentioned(self, text: str) -> list[str]:
        """The documents whose name occurs in `text`, in order of first mention."""
        if not self.by_words:
            return []
        words = _words(text)
        found: dict[str, None] = {}
        for i in range(len(words)):
            for j in range(i + 1, min(i + self.longest, len(words)) + 1):
                for s in self.by_words.get(tuple(words[i:j]), ()):
                    found[s] = None
        return list(found)


def node_text(source: str, first_chunk: str, chars: int = 200) -> tuple[str, str]:
    """(engram text, description) of a document's node (seed 002 eq. 1)."""
    desc = " ".join(first_chunk.split())[:chars]
    return f"{source} [TYPE] {DOCUMENT_TYPE} [DESC] {desc}", desc
