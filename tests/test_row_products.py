"""The unrolled sparse row products (four neighbours per pass over the accumulator) give
exactly the sums of the plain loop over the neighbours, in order, for every row length
(the unrolled body and the tail), both dtypes and both signs; and the CSR product to
rounding. Every solver's row product goes through one of these kernels."""

import numpy as np
import pytest
import scipy.sparse as sp

from npkl_dist._blocksolve import _row_times_step
from npkl_dist._kernels import _add_row_products, _gather


def _csr(seed, n=40, dtype=np.float64):
    """Rows of 0..11 entries (every remainder mod 4, rows shorter than one unrolled pass)."""
    rng = np.random.default_rng(seed)
    lengths = np.arange(n) % 12
    indptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    indices = np.concatenate([rng.choice(n, size=k, replace=False) for k in lengths])
    data = rng.standard_normal(indptr[-1]).astype(dtype)
    return indptr, indices.astype(np.int64), data


def _plain(i, indptr, indices, data, X, y, sign, f64=True):
    """The plain loop in Python floats (IEEE double, as the compiled code without fastmath)."""
    y = [float(v) for v in y]
    for p in range(indptr[i], indptr[i + 1]):
        k = indices[p]
        for q in range(X.shape[1]):
            if f64:
                y[q] = y[q] + (sign * float(data[p])) * float(X[k, q])
            else:  # the BCD gather: the product in the problem's dtype, the sum in float64
                y[q] = y[q] + float(data[p] * X[k, q])
    return np.array(y)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_add_row_products_equals_the_plain_loop_bitwise(seed, sign, dtype):
    indptr, indices, data = _csr(seed, dtype=dtype)
    n = indptr.size - 1
    rng = np.random.default_rng(seed + 10)
    X = rng.standard_normal((n, 7)).astype(dtype)
    y0 = rng.standard_normal(7)
    for i in range(n):
        y = y0.copy()
        _add_row_products(i, indptr, indices, data, X, y, 7, sign)
        np.testing.assert_array_equal(y, _plain(i, indptr, indices, data, X, y0, sign))
    # and the sparse product, to rounding
    A = sp.csr_matrix((data.astype(np.float64), indices, indptr), shape=(n, n))
    Y = np.zeros((n, 7))
    for i in range(n):
        _add_row_products(i, indptr, indices, data, X, Y[i], 7, sign)
    np.testing.assert_allclose(Y, sign * (A @ X.astype(np.float64)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gather_equals_the_plain_loop_bitwise(dtype):
    indptr, indices, data = _csr(3, dtype=dtype)
    n = indptr.size - 1
    V = np.random.default_rng(4).standard_normal((n, 5)).astype(dtype)
    g = np.empty(5)
    for i in range(n):
        _gather(i, indptr, indices, data, V, g)
        np.testing.assert_array_equal(
            g, _plain(i, indptr, indices, data, V, np.zeros(5), 1.0, f64=False))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_row_times_step_equals_the_plain_loop_bitwise(dtype):
    indptr, indices, data = _csr(5)
    n = indptr.size - 1
    rng = np.random.default_rng(6)
    V = rng.standard_normal((n, 6)).astype(dtype)
    Vprev = rng.standard_normal((n, 6))
    diag = rng.random(n) + 1.0
    q = np.empty(6)
    D = V.astype(np.float64) - Vprev
    for i in range(n):
        _row_times_step(i, indptr, indices, data, diag, V, Vprev, q)
        ref = _plain(i, indptr, indices, data, D, diag[i] * D[i], 1.0)
        np.testing.assert_array_equal(q, ref)
