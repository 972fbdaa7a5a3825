"""FakeEmbedder: deterministic, dependency-free vectors for unit tests only.

It obeys the :class:`synapse_cli.models.embedder.Embedder` protocol (float32 ``[n, dim]``,
L2-normalised rows) but carries no meaning beyond word overlap: each lower-cased word maps to a
fixed pseudo-random unit vector (seeded by BLAKE2b of the word, identical in every process and
on every platform) and a text is the normalised sum of its words' vectors, so texts sharing
words have a higher cosine. A text without words gets the vector of its whole string.
Never use it for anything a user sees.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

__all__ = ["FakeEmbedder"]

_WORD = re.compile(r"\w+", re.UNICODE)


class FakeEmbedder:
    def __init__(self, dim: int = 384, name: str = "fake-embedder") -> None:
        if dim < 1:
            raise ValueError("dim must be positive")
        self.dim = int(dim)
        self.name = name
        self._cache: dict[str, np.ndarray] = {}

    def _unit(self, key: str) -> np.ndarray:
        vec = self._cache.get(key)
        if vec is None:
            seed = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")
            vec = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            vec /= np.float32(np.linalg.norm(vec))
            self._cache[key] = vec
        return vec

    def encode(self, texts: list[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = _WORD.findall(str(text).lower())
            if words:
                for w in words:
                    out[i] += self._unit("w:" + w)
            else:
                out[i] = self._unit("t:" + str(text))
            norm = np.float32(np.linalg.norm(out[i]))
            if norm > 0:
                out[i] /= norm
            else:  # words whose vectors cancel exactly: practically impossible, keep rows unit
                out[i] = self._unit("t:" + str(text))
        return out

    def __repr__(self) -> str:
        return f"FakeEmbedder(dim={self.dim}, name={self.name!r})"
