"""Plain-numpy reference for ``synapse_cli.kernels.bm25.bm25_accumulate`` (tests compare them).

Kept in its own module for now; the lead will merge it into ``kernels/reference.py``.
"""
from __future__ import annotations

import numpy as np


def bm25_scores_reference(indptr, doc_idx, tf, q_terms, q_weights, doc_norm, live, k1):
    """BM25 scores of every document for one query, vectorised per term.

    Parameters are those of ``bm25_accumulate``, without ``out``.

    Returns
    -------
    numpy.ndarray
        float64 scores of shape ``(len(doc_norm),)``; dead documents score 0.
    """
    out = np.zeros(doc_norm.shape[0], dtype=np.float64)
    for t, w in zip(np.asarray(q_terms), np.asarray(q_weights)):
        sl = slice(int(indptr[t]), int(indptr[t + 1]))
        d = np.asarray(doc_idx[sl], dtype=np.int64)
        f = np.asarray(tf[sl], dtype=np.float64)
        contrib = w * (f * (k1 + 1.0) / (f + doc_norm[d]))
        contrib[~live[d]] = 0.0
        np.add.at(out, d, contrib)
    return out


def postings_csr_reference(term, tf, n_terms_per_doc, n_vocab):
    """numpy version of ``synapse_cli.kernels.bm25.postings_csr`` (stable argsort)."""
    term = np.asarray(term, dtype=np.int64)
    post_doc = np.repeat(np.arange(len(n_terms_per_doc), dtype=np.int32), n_terms_per_doc)
    order = np.argsort(term, kind="stable")
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(np.bincount(term, minlength=n_vocab), out=indptr[1:])
    return indptr, post_doc[order], np.asarray(tf, dtype=np.float64)[order]
