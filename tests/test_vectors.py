"""int8 quantisation (docs/FORMAT.md section 5)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from store_format.vectors import dequantize_cosine, dequantize_dot, quantize, quantize_batch


def test_known_values():
    # max |v| = 2: 127*v/2 -> [63.5 -> 64 (half even), -127, 31.75 -> 32, 0, 127*0.25/2=15.875 -> 16]
    v = np.array([1.0, -2.0, 0.5, 0.0, 0.25], dtype=np.float32)
    q, norm = quantize(v)
    assert q.dtype == np.int8 and q.tolist() == [64, -127, 32, 0, 16]
    assert norm == pytest.approx(np.sqrt(1 + 4 + 0.25 + 0.0625))
    # half-even: 127 * 1/254... use max 254 so that 127*v/254 = v/2
    q2, _ = quantize(np.array([1.0, 3.0, 5.0, 254.0], dtype=np.float32))
    assert q2.tolist() == [0, 2, 2, 127]  # 0.5->0, 1.5->2, 2.5->2


def test_zero_vector():
    q, norm = quantize(np.zeros(8, dtype=np.float32))
    assert not q.any() and norm == 0.0
    assert dequantize_cosine(q, np.ones(8, dtype=np.float32) / np.sqrt(8)) == 0.0


def test_rejects_nonfinite():
    with pytest.raises(ValueError):
        quantize(np.array([1.0, np.nan], dtype=np.float32))


vecs = arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 48)),
              elements=st.floats(-1e3, 1e3, width=32))


@given(vecs)
def test_batch_properties(v):
    q, norms = quantize_batch(v)
    assert q.shape == v.shape and q.dtype == np.int8 and norms.dtype == np.float32
    assert (q != -128).all()
    # exact_norm is a float32 field (FORMAT.md 5): the float64 norm rounded to float32, which in
    # the subnormal range is coarser than any relative tolerance ([1e-45, 1e-45] -> 1.4e-45)
    expected = np.linalg.norm(v.astype(np.float64), axis=1).astype(np.float32)
    np.testing.assert_allclose(norms, expected, rtol=1e-6)
    for row, qrow in zip(v, q):
        single, _ = quantize(row)
        assert (single == qrow).all()
        if np.abs(row).max() > 0:
            assert np.abs(qrow).max() == 127  # the peak maps to +-127
            # per-element error at most half a step
            step = np.abs(row.astype(np.float64)).max() / 127
            assert np.all(np.abs(qrow * step - row) <= step / 2 + 1e-9 * step)


def test_cosine_recovery_384():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((200, 384)).astype(np.float32)
    u = rng.standard_normal(384).astype(np.float32)
    u /= np.linalg.norm(u)
    q, norms = quantize_batch(v)
    true_cos = (v @ u) / np.linalg.norm(v, axis=1)
    cos = dequantize_cosine(q, u)
    assert cos.shape == (200,) and cos.dtype == np.float32
    assert np.abs(cos - true_cos).max() < 0.01
    np.testing.assert_allclose(dequantize_dot(q, norms, u), v @ u, atol=0.01 * np.sqrt(384))
    assert dequantize_cosine(q[3], u) == pytest.approx(float(cos[3]), abs=1e-6)
