"""Persisted, incrementally updated BM25 index (docs/FORMAT.md section 11).

Scores equal rank-bm25's ``BM25Okapi(k1=1.5, b=0.75, epsilon=0.25)`` over the live documents,
with the shared tokenizer (``synapse_cli.models.tokenize``) of the files' version. On disk: ``bm25.vocab`` (terms) and
``bm25.log`` (per-document term ids and frequencies), both append-only under the manifest's
committed lengths. In memory: term -> postings CSR built lazily from the document-major arrays,
so an ``add`` costs only its own documents until the next query.

Typical use (the caller holds the store's writer lock for ``add`` and commits the manifest)::

    index = BM25Index.open(store_dir, manifest.get("bm25"))
    manifest["bm25"] = index.add([41, 42], ["first text", "second text"])
    ids, scores = index.top_k("what did she say", k=10)
"""
from __future__ import annotations

import errno
import math
import os
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from store_format import fileheader
from store_format.crc32c import crc32c
from store_format.errors import (
    ChecksumMismatch, InvalidRecord, StoreIOError, Truncated, UnsafeStore,
)
from store_format.fileio import fsync_dir, fsync_fd, open_for_append, pwrite_all, truncate
from synapse_cli.models.conflate import variants
from synapse_cli.models import tokenize as tok

# numba costs ~0.5 s to import: a one-item `ingest` must not pay it, and for a batch the
# pure-Python CRC (~50 ns/byte) beats the import below a few MB. Importing the kernels hands
# store_format.crc32c its compiled loop (synapse_cli.kernels.crc), for every later CRC too.
_PYTHON_CRC_LIMIT = 4 * 1024 * 1024
_KERNELS = "synapse_cli.kernels.bm25"


def _kernels():
    from synapse_cli.kernels import bm25 as k

    return k


def _use_python_crc(n: int) -> bool:
    return n <= 4096 or (n <= _PYTHON_CRC_LIMIT and _KERNELS not in sys.modules)


def _crc_bytes(data) -> int:
    if not _use_python_crc(len(data)):
        _kernels()
    return crc32c(data)


def _crc(arr: np.ndarray, start: int, end: int) -> int:
    return _crc_bytes(arr[start:end])


VOCAB_MAGIC = b"SYNBM25V"
LOG_MAGIC = b"SYNBM25L"
# The files' format version is the tokenizer's (models/tokenize.py): a store keeps the version
# its index was created with, since its postings are that tokenizer's tokens.
FORMAT_VERSION = tok.VERSION
READ_VERSIONS = (1, 2, 3)
FILE_HEADER = 16
BLOCK_HEADER = 16
MAX_BLOCK_DOCS = 65_536
_U32 = 0xFFFFFFFF
_HDR = struct.Struct("<IIII")  # three u32 counts + CRC32C of them (both block kinds)

DEFAULT_NAMES = {"log": "bm25.log", "vocab": "bm25.vocab"}


def _file_header(magic: bytes, version: int) -> bytes:
    return fileheader.pack(magic, version)


# --------------------------------------------------------------------------- reading


def _read_prefix(path: Path, nbytes: int) -> bytes:
    """The committed prefix of a store file, refusing symlinks and short files."""
    if nbytes == 0:
        return b""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise Truncated("file named by the manifest does not exist", path, 0) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise UnsafeStore("is a symlink; refusing to follow it", path, 0) from None
        raise StoreIOError(exc.strerror or str(exc), path, 0) from None
    try:
        size = os.fstat(fd).st_size
        if size < nbytes:
            raise Truncated(f"committed length {nbytes} exceeds file size {size}", path, size)
        chunks, pos = [], 0
        while pos < nbytes:
            chunk = os.pread(fd, nbytes - pos, pos)
            if not chunk:
                raise Truncated("file shrank while reading", path, pos)
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_file_header(buf: bytes, magic: bytes, path: Path) -> int:
    """Check the 16-byte file header; returns its format version (READ_VERSIONS)."""
    what = "BM25 vocabulary" if magic == VOCAB_MAGIC else "BM25 log"
    version = struct.unpack_from("<H", buf, 8)[0] if len(buf) >= 10 else FORMAT_VERSION
    fileheader.check(buf, magic, path, what, version if version in READ_VERSIONS
                     else FORMAT_VERSION)
    return version


def read_version(path: Path, nbytes: int) -> int | None:
    """The format (tokenizer) version of a BM25 file's committed prefix; None when empty."""
    if nbytes == 0:
        return None
    return _check_file_header(_read_prefix(path, min(nbytes, FILE_HEADER)),
                              VOCAB_MAGIC if path.name.endswith(".vocab") else LOG_MAGIC, path)


def _block_header(buf: bytes, pos: int, path: Path) -> tuple[int, int, int]:
    if len(buf) - pos < BLOCK_HEADER + 4:
        raise Truncated("block header runs past the committed length", path, pos)
    a, b, c, crc = _HDR.unpack_from(buf, pos)
    if crc != crc32c(buf[pos:pos + 12]):
        raise ChecksumMismatch("block header CRC mismatch", path, pos)
    return a, b, c


def _check_block_crc(arr: np.ndarray, pos: int, end: int, path: Path) -> None:
    stored = int(arr[end - 4:end].view("<u4")[0])
    if stored != _crc(arr, pos, end - 4):
        raise ChecksumMismatch("block CRC mismatch", path, pos)


def read_vocab(path: Path, nbytes: int) -> list[str]:
    """Terms of ``bm25.vocab`` in term-id order, validated (FORMAT.md 11.1, 11.3)."""
    buf = _read_prefix(path, nbytes)
    if not buf:
        return []
    _check_file_header(buf, VOCAB_MAGIC, path)
    arr = np.frombuffer(buf, dtype=np.uint8)
    terms: list[str] = []
    seen: set[str] = set()
    pos = FILE_HEADER
    while pos < len(buf):
        n_terms, n_text, first = _block_header(buf, pos, path)
        if n_terms < 1 or n_text < 2 * n_terms:
            raise InvalidRecord(f"bad counts n_terms={n_terms} n_bytes={n_text}", path, pos)
        end = pos + BLOCK_HEADER + n_text + 4
        if end > len(buf):
            raise Truncated("vocabulary block runs past the committed length", path, pos)
        _check_block_crc(arr, pos, end, path)
        if first != len(terms):
            raise InvalidRecord(f"first_term_id {first}, expected {len(terms)}", path, pos + 8)
        try:
            text = buf[pos + BLOCK_HEADER:end - 4].decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecord("terms are not UTF-8", path, pos + BLOCK_HEADER) from None
        parts = text[:-1].split("\n")
        if not text.endswith("\n") or len(parts) != n_terms or not all(parts):
            raise InvalidRecord("terms do not split into n_terms non-empty lines", path, pos)
        for term in parts:
            if term in seen:
                raise InvalidRecord(f"term {term!r} repeated", path, pos + BLOCK_HEADER)
            seen.add(term)
        terms.extend(parts)
        pos = end
    return terms


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _log_arrays(buf: bytes, pos: int, n_docs: int, n_post: int, vocab_size: int, prev_id: int,
                path: Path) -> tuple[np.ndarray, ...]:
    """Zero-copy views of one log block's arrays, after checking FORMAT.md 11.3 on them."""
    o_rec = pos + BLOCK_HEADER
    o_len = o_rec + 8 * n_docs
    o_nt = o_len + 4 * n_docs
    o_term = o_nt + 4 * n_docs
    o_tf = o_term + 4 * n_post
    rec = np.frombuffer(buf, "<u8", n_docs, o_rec)
    dl = np.frombuffer(buf, "<u4", n_docs, o_len)
    nt = np.frombuffer(buf, "<u4", n_docs, o_nt)
    term = np.frombuffer(buf, "<u4", n_post, o_term)
    tf = np.frombuffer(buf, "<u4", n_post, o_tf)
    if struct.unpack_from("<I", buf, o_tf + 4 * n_post)[0] != 0:
        raise InvalidRecord("padding is not 0", path, o_tf + 4 * n_post)
    doc_end = np.cumsum(nt, dtype=np.int64)
    if int(doc_end[-1]) != n_post:
        raise InvalidRecord("n_terms do not sum to n_postings", path, o_nt)
    doc_start = doc_end - nt
    ids_bad = np.empty(n_docs, dtype=bool)
    ids_bad[0] = int(rec[0]) <= prev_id
    ids_bad[1:] = rec[1:] <= rec[:-1]
    order_bad = np.zeros(n_post, dtype=bool)  # posting p repeats or precedes p-1 in its doc
    order_bad[1:] = term[1:] <= term[:-1]
    order_bad[doc_start[doc_start < n_post]] = False
    tf_sum = np.concatenate(([0], np.cumsum(tf, dtype=np.int64)))
    checks = [  # (bad mask, offset of item 0, item size, message)
        (ids_bad, o_rec, 8, "record id 0 or not increasing"),
        (term >= vocab_size, o_term, 4, "term id >= vocab_size"),
        (tf == 0, o_tf, 4, "term frequency 0"),
        (order_bad, o_term, 4, "term ids not increasing within a document"),
        (tf_sum[doc_end] - tf_sum[doc_start] != dl, o_len, 4, "tfs do not sum to doc_len"),
    ]
    for bad, base, size, message in checks:
        if bad.any():
            raise InvalidRecord(message, path, base + size * _first_bad(bad))
    return rec, dl, nt, term, tf


def read_log(path: Path, nbytes: int, n_vocab: int) -> list[tuple[np.ndarray, ...]]:
    """Blocks of ``bm25.log`` as (record_ids, doc_len, n_terms, term_ids, tfs), validated.

    Every count is checked against the committed length before an array is formed, and the
    arrays are zero-copy views of the file bytes, so hostile counts cannot allocate memory.
    """
    buf = _read_prefix(path, nbytes)
    if not buf:
        return []
    _check_file_header(buf, LOG_MAGIC, path)
    arr = np.frombuffer(buf, dtype=np.uint8)
    blocks = []
    prev_id = 0
    pos = FILE_HEADER
    while pos < len(buf):
        n_docs, n_post, vocab_size = _block_header(buf, pos, path)
        if not 1 <= n_docs <= MAX_BLOCK_DOCS:
            raise InvalidRecord(f"n_docs {n_docs} out of range", path, pos)
        end = pos + 24 + 16 * n_docs + 8 * n_post
        if end > len(buf):
            raise Truncated("log block runs past the committed length", path, pos)
        _check_block_crc(arr, pos, end, path)
        if vocab_size > n_vocab:
            raise InvalidRecord(f"vocab_size {vocab_size} > {n_vocab} terms", path, pos + 8)
        blocks.append(_log_arrays(buf, pos, n_docs, n_post, vocab_size, prev_id, path))
        prev_id = int(blocks[-1][0][-1])
        pos = end
    return blocks


# --------------------------------------------------------------------------- writing


def _vocab_block(first_id: int, new_terms: Sequence[str]) -> bytes:
    text = "".join(t + "\n" for t in new_terms).encode("utf-8")
    head = struct.pack("<III", len(new_terms), len(text), first_id)
    body = head + struct.pack("<I", crc32c(head)) + text
    return body + struct.pack("<I", _crc_bytes(body))


def _log_block(rec, dl, nt, term, tf, vocab_size: int) -> bytes:
    head = struct.pack("<III", len(rec), len(term), vocab_size)
    body = b"".join([
        head, struct.pack("<I", crc32c(head)),
        np.asarray(rec, "<u8").tobytes(), np.asarray(dl, "<u4").tobytes(),
        np.asarray(nt, "<u4").tobytes(), np.asarray(term, "<u4").tobytes(),
        np.asarray(tf, "<u4").tobytes(), b"\0\0\0\0",
    ])
    return body + struct.pack("<I", _crc_bytes(body))


def _append(path: Path, committed: int, magic: bytes, data: bytes, version: int) -> int:
    """Truncate any torn tail, append `data` (after a file header if new), fsync; new length."""
    created = committed == 0 and not path.exists()
    fd = open_for_append(path, create=True)
    try:
        truncate(fd, committed, path)
        if committed == 0:
            data = _file_header(magic, version) + data
        pwrite_all(fd, data, committed, path)
        fsync_fd(fd, path)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
    return committed + len(data)


def _safe_name(name: str, store_dir: Path) -> Path:
    if not name or "/" in name or ".." in name:
        raise UnsafeStore(f"manifest names a file outside the store: {name!r}", store_dir)
    return store_dir / name


# --------------------------------------------------------------------------- the index


class BM25Index:
    """BM25 postings of a store: persisted, appendable, scored by a numba kernel.

    Use :meth:`open`; the constructor is internal. Parameters are rank-bm25's defaults.
    """

    k1 = 1.5
    b = 0.75
    epsilon = 0.25

    def __init__(self, store_dir: Path, committed: dict, terms: list[str], blocks: list,
                 version: int = FORMAT_VERSION):
        self.store_dir = store_dir
        self.version = version  # of the tokenizer: the files' format version
        self._committed = committed
        self._terms = terms
        self._term_id = {t: i for i, t in enumerate(terms)}
        self._blocks = blocks  # document-major chunks, concatenated lazily
        self._dead = np.zeros(0, dtype=np.uint64)
        self._csr = None  # (record_ids, doc_len, post_term, post_doc, indptr, csr_doc, csr_tf)
        self._stats = None  # (live, doc_norm, idf) for the current live set
        self._append_only = False

    # ---- persistence

    @classmethod
    def open(cls, store_dir: os.PathLike | str, committed: Mapping | None = None,
             append_only: bool = False) -> "BM25Index":
        """Load the committed prefix of both files; ``committed`` is the manifest's ``bm25``.

        Parameters
        ----------
        store_dir : path-like
            The store directory.
        committed : mapping or None
            ``{"log": name, "log_bytes": n, "vocab": name, "vocab_bytes": n}``; None or zero
            lengths mean an empty index. Bytes past the lengths are ignored (and truncated by
            the next :meth:`add`).

        Raises
        ------
        store_format.errors.StoreError
            A typed error naming the file and byte offset for anything FORMAT.md 11.3 rejects.
        """
        store_dir = Path(store_dir)
        c = dict(DEFAULT_NAMES, log_bytes=0, vocab_bytes=0)
        c.update(committed or {})
        for key in ("log_bytes", "vocab_bytes"):
            if not isinstance(c[key], int) or c[key] < 0:
                raise InvalidRecord(f"manifest bm25.{key} is not a length: {c[key]!r}",
                                    store_dir / "MANIFEST")
        vocab_path = _safe_name(c["vocab"], store_dir)
        log_path = _safe_name(c["log"], store_dir)
        terms = read_vocab(vocab_path, c["vocab_bytes"])
        versions = {v for v in (read_version(vocab_path, c["vocab_bytes"]),
                                read_version(log_path, c["log_bytes"])) if v is not None}
        if len(versions) > 1:
            raise InvalidRecord(f"BM25 files of different format versions {sorted(versions)}",
                                log_path, 8)
        version = versions.pop() if versions else FORMAT_VERSION
        if append_only:
            # `ingest` only appends: the log is not read (the store's record ids already
            # increase), which keeps a one-item ingest independent of the store's size.
            index = cls(store_dir, c, terms, [], version)
            index._append_only = True
            return index
        blocks = read_log(log_path, c["log_bytes"], len(terms))
        return cls(store_dir, c, terms, blocks, version)

    def tokenize(self, text: str) -> list[str]:
        """`text` as this index's tokenizer splits it (queries must use the same one)."""
        return tok.tokenize(text, self.version)

    @property
    def committed(self) -> dict:
        """The manifest's ``bm25`` value describing what this index holds."""
        return dict(self._committed)

    def add(self, record_ids: Sequence[int], texts: Sequence[str]) -> dict:
        """Index new documents durably; returns the new committed lengths for the manifest.

        Parameters
        ----------
        record_ids : sequence of int
            Strictly increasing, each greater than every id already indexed.
        texts : sequence of str
            One text per record id.

        Returns
        -------
        dict
            The new manifest ``bm25`` value. The documents are searchable in this object at
            once; other readers see them after the caller commits the manifest.
        """
        ids = [int(r) for r in record_ids]
        if len(ids) != len(texts):
            raise ValueError("record_ids and texts differ in length")
        if not ids:
            return self.committed
        last = self._last_id()
        for r in ids:
            if not 0 < r <= 2**64 - 1 or r <= last:
                raise ValueError(f"record id {r} is not greater than {last}")
            last = r
        first_new = len(self._terms)
        new_terms: list[str] = []
        try:  # on any failure, forget the term ids handed out: the files keep only a torn tail
            blocks = self._postings_of(ids, texts, first_new, new_terms)
            c = self._committed
            # Vocabulary first: a log block may only name terms that are already durable.
            c_vocab = c["vocab_bytes"]
            if new_terms:
                c_vocab = _append(self.store_dir / c["vocab"], c_vocab, VOCAB_MAGIC,
                                  _vocab_block(first_new, new_terms), self.version)
            data = b"".join(_log_block(*blk, first_new + len(new_terms)) for blk in blocks)
            c_log = _append(self.store_dir / c["log"], c["log_bytes"], LOG_MAGIC, data,
                            self.version)
        except BaseException:
            for t in new_terms:
                del self._term_id[t]
            raise
        self._terms.extend(new_terms)
        self._blocks.extend(blocks)
        self._committed = dict(c, vocab_bytes=c_vocab, log_bytes=c_log)
        self._csr = self._stats = None
        return self.committed

    def _postings_of(self, ids, texts, first_new, new_terms):
        """Tokenize `texts` into log blocks, giving unseen terms ids from `first_new` on."""
        dl, nt, term, tf = [], [], [], []
        for text in texts:
            counts = Counter(self.tokenize(text))
            pairs = []
            for tok, n in counts.items():
                tid = self._term_id.get(tok)
                if tid is None:
                    tid = self._term_id[tok] = first_new + len(new_terms)
                    new_terms.append(tok)
                pairs.append((tid, n))
            pairs.sort()  # the format wants term ids increasing within a document
            dl.append(sum(counts.values()))
            nt.append(len(pairs))
            term.extend(p[0] for p in pairs)
            tf.extend(p[1] for p in pairs)
        if max(dl) > _U32:
            raise ValueError("a document has more than 2**32-1 tokens")
        u32 = [np.array(x, np.uint32) for x in (dl, nt, term, tf)]
        return self._split(np.array(ids, np.uint64), *u32)

    @staticmethod
    def _split(rec, dl, nt, term, tf):
        """Cut one append into blocks within the u32 / MAX_BLOCK_DOCS limits of the format."""
        out, i, p = [], 0, 0
        while i < len(rec):
            j, q = i, p
            while j < len(rec) and j - i < MAX_BLOCK_DOCS and (j == i or q - p + int(nt[j]) <= _U32):
                q += int(nt[j])
                j += 1
            out.append((rec[i:j], dl[i:j], nt[i:j], term[p:q], tf[p:q]))
            i, p = j, q
        return out

    def _last_id(self) -> int:
        return int(self._blocks[-1][0][-1]) if self._blocks else 0

    # ---- live set

    def set_live(self, live_record_ids: Iterable[int] | None) -> None:
        """Restrict scoring to these record ids (None: every indexed record is live).

        df, the document count and avgdl are recomputed over the live documents, exactly as if
        rank-bm25 had been built on them alone. Documents added later are live.
        """
        if live_record_ids is None:
            self._dead = np.zeros(0, dtype=np.uint64)
        else:
            rec = self._arrays()[0]
            if not isinstance(live_record_ids, np.ndarray):
                live_record_ids = list(live_record_ids)
            self._dead = rec[~np.isin(rec, np.asarray(live_record_ids, dtype=np.uint64))]
        self._stats = None

    # ---- in-memory postings

    def _arrays(self):
        """Document-major arrays (record_ids, doc_len, n_terms, term_ids, tfs), concatenated."""
        if len(self._blocks) != 1:
            if not self._blocks:
                e8, e4 = np.zeros(0, np.uint64), np.zeros(0, np.uint32)
                return e8, e4, e4, e4, e4
            self._blocks = [tuple(np.concatenate(col) for col in zip(*self._blocks))]
        return self._blocks[0]

    def knows(self, word: str, within: np.ndarray | None = None) -> bool:
        """Whether `word`, another form of it or, failing both, a word of its family
        (conflate.py: "availability" for "available") is in the vocabulary; with `within`
        (record ids, u64), used by one of those records."""
        from .conflate import family, variants

        forms = ([word] if word in self._term_id else []) + variants(word, self._term_id)
        if not forms and (key := family(word)):  # a scan: only for a word unknown in any form
            forms = [t for t in self._terms if t.startswith(key)]
        if within is None or not forms:
            return bool(forms)
        rec, _, _, _, indptr, csr_doc, _ = self._postings()
        for form in forms:
            tid = self._term_id[form]
            if tid < len(indptr) - 1 and np.isin(rec[csr_doc[indptr[tid]:indptr[tid + 1]]],
                                                 within).any():
                return True
        return False

    def doc_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(record_ids u64, words per document) of every indexed document, by id: its BM25
        length without emoji tokens, which say little (the chatter prior counts words)."""
        rec, dl, nt, term, tf = self._arrays()
        picto = np.fromiter((tok.is_pictograph(t) for t in self._terms), bool, len(self._terms))
        if not picto.any():
            return rec, dl
        doc = np.repeat(np.arange(len(rec)), nt.astype(np.int64))
        emoji = np.bincount(doc, weights=tf * picto[term], minlength=len(rec))
        return rec, (dl - emoji).astype(dl.dtype)

    def _postings(self):
        if self._csr is None:
            rec, dl, nt, term, tf = self._arrays()
            post_doc = np.repeat(np.arange(len(rec), dtype=np.int32), nt)
            indptr, csr_doc, csr_tf = _kernels().postings_csr(term, tf, nt, len(self._terms))
            self._csr = (rec, dl.astype(np.float64), term, post_doc, indptr, csr_doc, csr_tf)
        return self._csr

    def _live_stats(self):
        """(live mask, doc_norm, idf) over the live documents, as rank-bm25 computes them."""
        if self._stats is None:
            rec, dl, term, post_doc, _, _, _ = self._postings()
            live = ~np.isin(rec, self._dead) if len(self._dead) else np.ones(len(rec), bool)
            n = int(live.sum())
            df = np.bincount(term[live[post_doc]], minlength=len(self._terms))
            idf = np.zeros(len(self._terms), dtype=np.float64)
            present = df > 0
            if n and present.any():
                raw = np.log(n - df[present] + 0.5) - np.log(df[present] + 0.5)
                eps = self.epsilon * (math.fsum(raw) / len(raw))  # floor for negative idf
                idf[present] = np.where(raw < 0, eps, raw)
            avgdl = float(dl[live].sum()) / n if n else 1.0
            doc_norm = self.k1 * (1 - self.b + self.b * dl / (avgdl or 1.0))
            self._stats = (live, doc_norm, idf)
        return self._stats

    # ---- queries

    def __len__(self) -> int:
        return int(self._live_stats()[0].sum())

    def scores(self, query: str, live_only: bool = True,
               variant_weight: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """BM25 score of every live document for `query`; with `variant_weight` > 0 each query
        word also brings its other forms in the vocabulary (conflate.py), each weighted by that
        share of a query word (0: rank-bm25's scores exactly).

        Returns
        -------
        record_ids : numpy.ndarray of uint64
            Live record ids, increasing (every indexed id when not `live_only`).
        scores : numpy.ndarray of float64
            rank-bm25's ``get_scores`` over the live corpus in the same order (0 for the
            documents that are not live, when not `live_only`).
        """
        if self._append_only:
            raise RuntimeError("this BM25Index was opened append_only; reopen it to score")
        rec, _, _, _, indptr, csr_doc, csr_tf = self._postings()
        live, doc_norm, idf = self._live_stats()
        counts = {self._term_id[w]: c for w, c in self._query_words(query, variant_weight).items()
                  if w in self._term_id}
        q_terms = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        q_weights = idf[q_terms] * np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        out = np.zeros(len(rec), dtype=np.float64)  # float64: exact agreement with rank-bm25
        if len(q_terms):
            _kernels().bm25_accumulate(indptr, csr_doc, csr_tf, q_terms, q_weights, doc_norm, live,
                            self.k1, out)
        if not live_only:
            return rec, out
        return rec[live], out[live]

    def _query_words(self, query: str, variant_weight: float) -> dict[str, float]:
        """Query word -> its weight: times it occurs; a form of it from the vocabulary that the
        query does not use gets that times `variant_weight`."""
        words = Counter(self.tokenize(query))
        out = dict(words)
        if variant_weight > 0:
            for word, c in words.items():
                for form in variants(word, self._term_id):
                    if form not in words:
                        out[form] = max(out.get(form, 0.0), c * variant_weight)
        return out

    def word_scores(self, query: str, record_ids: np.ndarray,
                    variant_weight: float = 0.0) -> tuple[list[str], np.ndarray]:
        """(the query's words, float64 [words, len(record_ids)]): each word's share of
        `scores(query, variant_weight=...)` for each given record (BM25 is a sum over query
        words), found by binary search in that word's postings rather than by scoring every
        document."""
        rec, _, _, _, indptr, csr_doc, csr_tf = self._postings()
        live, doc_norm, idf = self._live_stats()
        counts = self._query_words(query, variant_weight)
        words = sorted(counts)
        out = np.zeros((len(words), len(record_ids)), dtype=np.float64)
        ids = np.asarray(record_ids, np.uint64)
        docs = np.minimum(np.searchsorted(rec, ids), max(len(rec) - 1, 0))
        ok = (rec[docs] == ids) & live[docs] if len(rec) else np.zeros(len(ids), bool)
        for j, w in enumerate(words):
            t = self._term_id.get(w)
            if t is None:
                continue
            lo, hi = int(indptr[t]), int(indptr[t + 1])
            if hi == lo:
                continue
            at = np.minimum(np.searchsorted(csr_doc[lo:hi], docs), hi - lo - 1)
            hit = ok & (csr_doc[lo + at] == docs)
            f = csr_tf[lo + at[hit]]
            out[j, hit] = idf[t] * counts[w] * (f * (self.k1 + 1.0) / (f + doc_norm[docs[hit]]))
        return words, out

    def containing(self, text: str) -> np.ndarray:
        """Record ids (every indexed one, live or not) whose text has every word of `text`, as
        the index tokenizes it; from the postings of those words, not a pass over the corpus."""
        if self._append_only:
            raise RuntimeError("this BM25Index was opened append_only; reopen it to search")
        words = set(self.tokenize(text))
        if not words or any(w not in self._term_id for w in words):
            return np.zeros(0, np.uint64)
        rec, _, _, _, indptr, csr_doc, _ = self._postings()
        docs = None
        for t in sorted((self._term_id[w] for w in words),
                        key=lambda t: indptr[t + 1] - indptr[t]):  # rarest word first
            d = csr_doc[indptr[t]:indptr[t + 1]]
            docs = d if docs is None else np.intersect1d(docs, d, assume_unique=True)
            if not len(docs):
                break
        return np.sort(rec[docs])

    def top_k(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The `k` best live documents with a positive score, best first (ties: lower id first)."""
        ids, s = self.scores(query)
        k = max(int(k), 0)
        pos = np.flatnonzero(s > 0)
        if 0 < k < len(pos):
            kth = np.partition(s[pos], len(pos) - k)[len(pos) - k]
            pos = pos[s[pos] >= kth]
        pos = pos[np.lexsort((ids[pos], -s[pos]))][:k]
        return ids[pos], s[pos]


# --------------------------------------------------------------------------- compaction


def compact_files(store_dir: os.PathLike | str, manifest, kept_ids: np.ndarray,
                  generation: int) -> dict:
    """Rewrite ``bm25.vocab`` / ``bm25.log`` for compaction (FORMAT.md 14.2) as
    ``bm25-G.vocab`` / ``bm25-G.log``: only the documents of ``kept_ids``, with their term
    frequencies unchanged, and a vocabulary of exactly the terms they use, renumbered in the
    order of their old ids (a term only removed documents used is gone from the files).

    A rewriter for ``store_format.compaction.compact``: returns ``{"bm25": committed}`` for the
    manifest (``{}`` when the store has no BM25 files), after reading the new files back.
    """
    from store_format import manifest as mf

    committed = manifest.bm25
    if committed is None:
        return {}
    store_dir = Path(store_dir)
    index = BM25Index.open(store_dir, committed)
    rec, dl, nt, term, tf = index._arrays()
    keep = np.isin(rec, np.asarray(kept_ids, np.uint64))
    post_keep = np.repeat(keep, nt.astype(np.int64))
    term, tf = term[post_keep], tf[post_keep]
    used = np.unique(term)  # increasing old ids: the new vocabulary keeps their order
    remap = np.full(len(index._terms), -1, np.int64)
    remap[used] = np.arange(len(used))
    new_term = remap[term].astype(np.uint32)  # increasing within a document, as before
    names = {"vocab": mf.generation_name(mf.BM25_VOCAB_NAME, generation),
             "log": mf.generation_name(mf.BM25_LOG_NAME, generation)}
    for key in ("vocab", "log"):  # an orphan of an interrupted compaction: start afresh
        try:
            os.unlink(store_dir / names[key])
        except FileNotFoundError:
            pass
    terms = [index._terms[i] for i in used.tolist()]
    vocab_bytes = 0
    for start in range(0, max(len(terms), 1), 1 << 20):  # blocks of <= 1M terms
        part = terms[start:start + (1 << 20)]
        vocab_bytes = _append(store_dir / names["vocab"], vocab_bytes, VOCAB_MAGIC,
                              _vocab_block(start, part) if part else b"", index.version)
    blocks = BM25Index._split(rec[keep], dl[keep], nt[keep], new_term, tf)
    data = b"".join(_log_block(*blk, len(terms)) for blk in blocks)
    log_bytes = _append(store_dir / names["log"], 0, LOG_MAGIC, data, index.version)
    new = {"log": names["log"], "log_bytes": log_bytes, "vocab": names["vocab"],
           "vocab_bytes": vocab_bytes}
    check = BM25Index.open(store_dir, new)  # read back: every check of FORMAT.md 11.3
    if not np.array_equal(check._arrays()[0], rec[keep]):
        raise InvalidRecord("compacted BM25 log lost documents", store_dir / names["log"])
    return {"bm25": new}
