"""A memory about to be stored: what `ingest`, `consolidate` and tests hand to the store."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store_format import flags as fl
from store_format.headers import Header
from store_format.tags import encode_tags


@dataclass
class NewMemory:
    """One record to append. `vector` is the float32 embedding (dim of the store).

    `resolved` defaults to True: only memories marked unresolved (open tasks, the Zeigarnik
    effect) resist decay. `arousal` None means "derive from valence" (seed 004).
    """

    text: str
    vector: np.ndarray
    timestamp_ms: int
    memory_type: int = fl.MemoryType.EPISODIC
    importance: float = 1.0
    valence: int = 0
    arousal: int | None = None
    storage_strength: float = 1.0
    tags: list[str] = field(default_factory=list)
    pinned: bool = False
    resolved: bool = True
    consolidated: bool = False
    meta: dict = field(default_factory=dict)

    def header(self, exact_norm: float) -> Header:
        arousal = self.arousal if self.arousal is not None else min(255, abs(self.valence) * 2)
        return Header(
            timestamp_ms=int(self.timestamp_ms),
            synaptic_tags=encode_tags(self.tags),
            exact_norm=float(exact_norm),
            importance=float(self.importance),
            valence=int(self.valence),
            flags=fl.make_flags(memory_type=self.memory_type, pinned=self.pinned,
                                resolved=self.resolved, consolidated=self.consolidated),
            arousal=int(arousal),
            storage_strength=float(self.storage_strength),
        )

    def body(self) -> dict:
        """The payload entry: the text plus metadata (docs/FORMAT.md section 6)."""
        body = {"text": self.text}
        body.update({k: v for k, v in self.meta.items() if v is not None})
        if self.tags:
            body["tags"] = list(self.tags)
        return body
