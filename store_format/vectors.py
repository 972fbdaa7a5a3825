"""int8 vector quantisation, docs/FORMAT.md section 5.

q_i = clamp(round_half_even(127 * v_i / max|v|), -127, 127), computed in float64 so every
implementation rounds the same way; exact_norm keeps the dot product recoverable.
"""
from __future__ import annotations

import numpy as np


def quantize_batch(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantise rows.

    Parameters
    ----------
    vectors : float32 ndarray, shape (n, dim)

    Returns
    -------
    q : int8 ndarray, shape (n, dim)
        Never -128; all zeros for a zero row.
    exact_norm : float32 ndarray, shape (n,)
        L2 norm of each float row (computed in float64, stored as float32).

    Raises
    ------
    ValueError
        If the input is not 2-D or holds a non-finite value.
    """
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError("vector holds NaN or infinity")
    v64 = v.astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", v64, v64))
    peak = np.abs(v64).max(axis=1, initial=0.0)
    safe = np.where(peak > 0, peak, 1.0)[:, None]  # zero rows: 0 / 1 = 0, all bytes 0
    q = np.rint((127.0 * v64) / safe)  # np.rint rounds half to even
    q = np.clip(q, -127, 127).astype(np.int8)
    return q, norms.astype(np.float32)


def quantize(vector: np.ndarray) -> tuple[np.ndarray, float]:
    """Quantise one float32 vector, shape (dim,) -> (int8 (dim,), exact_norm as float32 value)."""
    v = np.asarray(vector, dtype=np.float32)
    if v.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {v.shape}")
    q, norms = quantize_batch(v[None, :])
    return q[0], float(norms[0])


def dequantize_cosine(q: np.ndarray, unit_query: np.ndarray):
    """Cosine of stored vectors with a unit query: (q . u) / ||q||.

    Parameters
    ----------
    q : int8 ndarray, shape (dim,) or (n, dim)
    unit_query : float32 ndarray, shape (dim,), norm 1

    Returns
    -------
    float, or float32 ndarray of shape (n,); 0 for an all-zero q.
    """
    qf = np.asarray(q).astype(np.float32)
    u = np.asarray(unit_query, dtype=np.float32)
    dots = qf @ u
    qnorm = np.sqrt(np.einsum("...i,...i->...", qf, qf))
    cos = np.divide(dots, qnorm, out=np.zeros_like(dots, dtype=np.float32), where=qnorm > 0)
    return float(cos) if np.ndim(cos) == 0 else cos.astype(np.float32)


def dequantize_dot(q: np.ndarray, exact_norm, unit_query: np.ndarray):
    """Dot product of the original float vectors with `unit_query`: exact_norm * cosine."""
    cos = dequantize_cosine(q, unit_query)
    return cos * np.asarray(exact_norm, dtype=np.float32) if np.ndim(cos) else cos * float(exact_norm)
