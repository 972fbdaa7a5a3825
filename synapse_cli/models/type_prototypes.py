"""Types of common nouns the rules leave untyped (object, concept or preference), from the MiniLM
embedder consolidation already loads: the type whose prototype phrases are nearest the span.

SmolLM2 asked to choose among the three types was right about as often as answering "object"
for everything (README_extract.md); the nearest prototype is right about two times in three on
the tune split. The prototypes are general descriptions and examples written for the guideline's
types, not phrases of the gold windows.
"""
from __future__ import annotations

import numpy as np

PROTOTYPES = {
    "object": ("a physical object, a thing you can hold",
               "food, a dish, a drink, an ingredient",
               "clothes, a toy, a gadget, a tool, a vehicle, a book, a gift"),
    "concept": ("an idea, a feeling, a belief",
                "a social issue, a cause, a subject people discuss",
                "a situation, a problem, a value"),
    "preference": ("a hobby, a sport or an activity someone enjoys doing",
                   "painting, hiking, reading, dancing, cooking, gaming"),
}
PROTO_TYPES = tuple(PROTOTYPES)


class PrototypeTyper:
    """`scores(spans)` -> [len(spans), len(PROTO_TYPES)] cosine to each type's nearest prototype."""

    def __init__(self, embedder):
        self.embedder = embedder
        self._protos = None

    def scores(self, spans: list[str]) -> np.ndarray:
        if not spans:
            return np.zeros((0, len(PROTO_TYPES)), dtype=np.float32)
        if self._protos is None:
            self._protos = [np.asarray(self.embedder.encode(list(PROTOTYPES[t])), np.float32)
                            for t in PROTO_TYPES]
        v = np.asarray(self.embedder.encode(list(spans)), np.float32)
        return np.stack([(v @ p.T).max(axis=1) for p in self._protos], axis=1)

    def types(self, spans: list[str]) -> list[str]:
        """The nearest type of each span."""
        return [PROTO_TYPES[i] for i in self.scores(spans).argmax(axis=1)]
