"""Document engrams: each ingested document's name (its `source`) as a semantic node, linked to
the document's own chunks and to every chunk that names the document.

Seed 002 recalls through a bipartite entity-chunk graph, and what a multi-hop question travels
along is a chunk that names another document ("born in Young, New South Wales" leads to the
passage "Young, New South Wales"). The local 135M model extracts few of those names: on HotpotQA
only 41 of the 100 gold passage pairs share any engram, mostly generic ones ("American"). A
corpus names its documents already, so consolidation links them by exact match of the name,
which needs no model and invents nothing:
- `consolidate` first gives every document it is about to read a node "NAME [TYPE] document
  [DESC] <the start of its first chunk>" (unless a node of that name exists);
- each window's episode is linked (ABSTRACTION, both directions) to the node of its own
  document (weight 1, so the top-K rule never drops a document's own chunks) and to the node
  of every other document whose name its text contains (`abstraction_weight`).
A name is matched case-sensitively on word boundaries, without a trailing parenthesis
("Bethel University (Minnesota)" is named by "Bethel University"); names shorter than 3
characters or starting in lower case are not matched (they are words, not names).
Limits: a chunk consolidated before a document of the name it mentions was ingested is not
linked to it later; and when a node of the document's name already existed (an entity the
model extracted in an earlier run), that node serves as the document's node for this run but a
later run does not know the name as a document's.
"""
from __future__ import annotations

import re

MAX_WORDS = 8          # longest name matched, in words
MIN_CHARS = 3
_PAREN = re.compile(r"\s*\([^()]*\)$")
_WORD = re.compile(r"\S+")
_LEAD = "\"'“‘([{<¿"
_TRAIL = ".,;:!?)]}>\"'”’"
DOCUMENT_TYPE = "document"


def base_name(source: str) -> str:
    """What running text calls a document: its name without a trailing parenthesis."""
    return _PAREN.sub("", source).strip()


class DocumentNames:
    """Document names by what text calls them (several documents can share one)."""

    def __init__(self, sources=()):
        self.by_base: dict[str, list[str]] = {}
        for s in sources:
            self.add(s)

    def add(self, source: str) -> None:
        b = base_name(source)
        if len(b) >= MIN_CHARS and not b[0].islower():
            names = self.by_base.setdefault(b, [])
            if source not in names:
                names.append(source)

    def __len__(self) -> int:
        return len(self.by_base)

    def mentioned(self, text: str) -> list[str]:
        """The documents whose name occurs in `text` as whole words, in order of first
        mention."""
        if not self.by_base:
            return []
        words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
        found: dict[str, None] = {}
        for i, (start, end) in enumerate(words):
            while start < end and text[start] in _LEAD:
                start += 1
            for j in range(i, min(i + MAX_WORDS, len(words))):
                stop = words[j][1]
                span = text[start:stop]
                for cand in (span, span.rstrip(_TRAIL)):
                    for s in self.by_base.get(cand, ()):
                        found[s] = None
        return list(found)


def node_text(source: str, first_chunk: str, chars: int = 200) -> str:
    """The engram text of a document's node (seed 002 eq. 1)."""
    desc = " ".join(first_chunk.split())[:chars]
    return f"{source} [TYPE] {DOCUMENT_TYPE} [DESC] {desc}"
