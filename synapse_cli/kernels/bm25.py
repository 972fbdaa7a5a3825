"""numba kernels for the BM25 index: query scoring over CSR postings.

The arrays come from ``synapse_cli.models.bm25``, which validates every id and offset read from
disk before they reach these functions (numba does no bounds checks).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import crc  # noqa: F401  (loading the kernels accelerates store_format's CRC32C)


@njit(cache=True)
def bm25_accumulate(indptr, doc_idx, tf, q_terms, q_weights, doc_norm, live, k1, out):
    """Add the BM25 contribution of each query term to ``out``.

    Parameters
    ----------
    indptr : int64[n_terms + 1]
        CSR row pointers: postings of term ``t`` are ``indptr[t]:indptr[t+1]``.
    doc_idx : int32[n_postings]
        Document position of each posting (< len(out)).
    tf : float64[n_postings]
        Term frequency of each posting.
    q_terms : int64[m]
        Distinct query term ids (< n_terms).
    q_weights : float64[m]
        ``idf(t) * (times t occurs in the query)``.
    doc_norm : float64[n_docs]
        ``k1 * (1 - b + b * doc_len / avgdl)``, precomputed once per live set.
    live : bool[n_docs]
        Dead documents receive nothing.
    k1 : float
    out : float64[n_docs]
        Accumulator, updated in place.
    """
    k1p1 = k1 + 1.0
    for j in range(q_terms.shape[0]):
        t = q_terms[j]
        w = q_weights[j]
        for p in range(indptr[t], indptr[t + 1]):
            d = doc_idx[p]
            if live[d]:
                f = tf[p]
                # Same expression and order as rank-bm25, so results agree to the last bits.
                out[d] += w * (f * k1p1 / (f + doc_norm[d]))


@njit(cache=True)
def postings_csr(term, tf, n_terms_per_doc, n_vocab):
    """Transpose document-major postings into term-major CSR by a counting sort.

    Parameters
    ----------
    term : uint32[n_postings]
        Term ids, document by document (validated < n_vocab).
    tf : uint32[n_postings]
        Term frequencies aligned with `term`.
    n_terms_per_doc : uint32[n_docs]
        Postings per document; sums to n_postings (validated).
    n_vocab : int

    Returns
    -------
    indptr : int64[n_vocab + 1]
    doc_idx : int32[n_postings]
        Document positions, increasing within each term.
    tf_csr : float64[n_postings]

    O(n_postings); numpy's stable argsort of 32-bit keys is a merge sort, ~10x slower at 2M
    postings, and this runs on the first query of every CLI process.
    """
    n_post = term.shape[0]
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    for p in range(n_post):
        indptr[term[p] + 1] += 1
    for t in range(n_vocab):
        indptr[t + 1] += indptr[t]
    fill = indptr[:-1].copy()
    doc_idx = np.empty(n_post, dtype=np.int32)
    tf_csr = np.empty(n_post, dtype=np.float64)
    p = 0
    for d in range(n_terms_per_doc.shape[0]):
        for _ in range(n_terms_per_doc[d]):
            t = term[p]
            q = fill[t]
            doc_idx[q] = d
            tf_csr[q] = tf[p]
            fill[t] = q + 1
            p += 1
    return indptr, doc_idx, tf_csr
