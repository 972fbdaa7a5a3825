"""The PageRank cache `pagerank.cache` (docs/FORMAT.md section 16.3).

PageRank is a property of the graph, not of a query: consolidation, which changes the graph,
computes it once after its last commit and stores it here with the key of the graph it was
computed for; recall uses it while the key still matches and computes it itself otherwise.
Not committed data, like `extract.cache`: a missing, damaged or stale file is a miss, never an
error; only the holder of the writer lock writes it.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct

import numpy as np

from store_format import fileheader, fileio
from store_format import flags as fl
from store_format.crc32c import crc32c
from store_format.errors import StoreError

NAME = "pagerank.cache"
MAGIC = b"SYNPRANK"
_HEAD = struct.Struct("<32sQQ")  # key, manifest generation, n


def graph_key(store, arrays) -> bytes:
    """SHA-256 of what PageRank depends on: the committed graph files and lengths, the record
    positions (segments and their counts) and which records are out of the graph (trash,
    archived). A recall touch or a payload rewrite leaves it unchanged."""
    m = store.manifest
    ident = json.dumps([m.store_id, list(m.graph), [list(s) for s in m.segments]],
                       separators=(",", ":"))
    out = fl.is_tombstone(arrays.flags) | arrays.dormant
    h = hashlib.sha256(ident.encode())
    h.update(np.packbits(out).tobytes())
    return h.digest()


def compute(arrays) -> np.ndarray:
    """PageRank per record position, scaled so the largest is 1 (float32)."""
    if not len(arrays.indices):
        return np.zeros(arrays.n, np.float32)
    from ..kernels.pagerank import pagerank

    pr, _ = pagerank(arrays.indptr, arrays.indices, arrays.weights, validate=False)
    pr = np.asarray(pr, np.float64)
    top = float(pr.max()) if len(pr) else 0.0
    return (pr / top if top > 0 else np.zeros_like(pr)).astype(np.float32)


def load(store, arrays) -> np.ndarray | None:
    """The cached PageRank when it was computed for this graph, else None."""
    try:
        data = (store.path / NAME).read_bytes()
    except OSError:
        return None
    size = fileheader.SIZE + _HEAD.size + 4 * arrays.n + 4
    if len(data) != size or struct.unpack_from("<I", data, size - 4)[0] != crc32c(data[:-4]):
        return None
    try:
        fileheader.check(data[:fileheader.SIZE], MAGIC, store.path / NAME, "PageRank cache")
    except StoreError:
        return None
    key, _, n = _HEAD.unpack_from(data, fileheader.SIZE)
    if n != arrays.n or key != graph_key(store, arrays):
        return None
    return np.frombuffer(data, np.float32, n, fileheader.SIZE + _HEAD.size).copy()


def save(store, arrays, pr: np.ndarray) -> None:
    """Write the cache for the graph of `arrays` (temp file, fsync, rename)."""
    body = (fileheader.pack(MAGIC)
            + _HEAD.pack(graph_key(store, arrays), store.manifest.generation, arrays.n)
            + np.ascontiguousarray(pr, np.float32).tobytes())
    fileio.atomic_replace(store.path / NAME, body + struct.pack("<I", crc32c(body)))


def pagerank_for(store, arrays) -> np.ndarray:
    """Recall's PageRank: the cache when fresh, else computed here (not written: recall is a
    reader; the next consolidation refreshes the file)."""
    pr = load(store, arrays)
    return pr if pr is not None else compute(arrays)


def refresh(store) -> np.ndarray:
    """Compute PageRank for the committed graph of `store` and cache it (consolidation)."""
    from . import graphview

    arrays = graphview.build(store)
    pr = compute(arrays)
    save(store, arrays, pr)
    return pr


def remove(store_dir) -> None:
    """Drop the cache (after a compaction its positions mean other records)."""
    try:
        os.unlink(os.path.join(store_dir, NAME))
    except FileNotFoundError:
        pass
