"""The unrolled sparse row products (four neighbours per pass over the accumulator) give
exactly the sums of the plain loop over the neighbours, in order, for every row length
(the unrolled body and the tail), both dtypes and both signs; and the CSR product to
rounding. Every solver's row product goes through one of these kernels. With ``_fmadd``
(KL-ADMM) each term is added by one correctly rounded fused multiply-add, checked against
exact rational arithmetic."""

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from npkl_dist.linalg._rowops import (
    _add_row_products,
    _dot_row_vec,
    _dot_row_vec_fused,
    _dot_rows,
    _dot_rows_fused,
    _gather,
)
from npkl_dist.linalg._simd import _fma, _fmadd, _madd
from npkl_dist.solvers.block._steps import _row_times_step


def fma_exact(a, b, c):
    """a * b + c rounded once to the nearest double (ties to even): Fraction is exact and
    its conversion to float rounds correctly."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


@njit
def _fma_compiled(a, b, c):
    return _fma(a, b, c)


@njit
def _dots(A, i, B, j, y, fused, vector=False):
    if vector:  # KL-ADMM's: the fused dots with the 4 lanes in one vector register
        return _dot_rows_fused(A, i, B, j, A.shape[1]), _dot_row_vec_fused(A, i, y, A.shape[1])
    if fused:
        return _dot_rows(A, i, B, j, A.shape[1], _fmadd), _dot_row_vec(A, i, y, A.shape[1], _fmadd)
    return _dot_rows(A, i, B, j, A.shape[1], _madd), _dot_row_vec(A, i, y, A.shape[1], _madd)


def _csr(seed, n=40, dtype=np.float64):
    """Rows of 0..11 entries (every remainder mod 4, rows shorter than one unrolled pass)."""
    rng = np.random.default_rng(seed)
    lengths = np.arange(n) % 12
    indptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    indices = np.concatenate([rng.choice(n, size=k, replace=False) for k in lengths])
    data = rng.standard_normal(indptr[-1]).astype(dtype)
    return indptr, indices.astype(np.int64), data


def _plain(i, indptr, indices, data, X, y, sign, f64=True, fused=False):
    """The plain loop in Python floats (IEEE double, as the compiled code without fastmath);
    ``fused``: each term added by an exactly rounded fma instead."""
    y = [float(v) for v in y]
    for p in range(indptr[i], indptr[i + 1]):
        k = indices[p]
        for q in range(X.shape[1]):
            if fused:
                y[q] = fma_exact(sign * float(data[p]), float(X[k, q]), y[q])
            elif f64:
                y[q] = y[q] + (sign * float(data[p])) * float(X[k, q])
            else:  # the BCD gather: the product in the problem's dtype, the sum in float64
                y[q] = y[q] + float(data[p] * X[k, q])
    return np.array(y)


@njit
def _row_products(i, indptr, indices, data, X, y, sign, fused):
    if fused:
        _add_row_products(i, indptr, indices, data, X, y, X.shape[1], sign, _fmadd)
    else:
        _add_row_products(i, indptr, indices, data, X, y, X.shape[1], sign, _madd)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_add_row_products_equals_the_plain_loop_bitwise(seed, sign, dtype, fused):
    indptr, indices, data = _csr(seed, dtype=dtype)
    n = indptr.size - 1
    rng = np.random.default_rng(seed + 10)
    X = rng.standard_normal((n, 7)).astype(dtype)
    y0 = rng.standard_normal(7)
    for i in range(n):
        y = y0.copy()
        _row_products(i, indptr, indices, data, X, y, sign, fused)
        np.testing.assert_array_equal(
            y, _plain(i, indptr, indices, data, X, y0, sign, fused=fused)
        )
    # and the sparse product, to rounding
    A = sp.csr_matrix((data.astype(np.float64), indices, indptr), shape=(n, n))
    Y = np.zeros((n, 7))
    for i in range(n):
        _row_products(i, indptr, indices, data, X, Y[i], sign, fused)
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
            g, _plain(i, indptr, indices, data, V, np.zeros(5), 1.0, f64=False)
        )


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


_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(_finite, _finite, _finite)
def test_fma_rounds_once(a, b, c):
    """The compiled fma is a * b + c computed exactly, then rounded once."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if abs(exact) >= 2.0**1023:  # overflows as a double: nothing to compare
        return
    assert _fma_compiled(a, b, c) == fma_exact(a, b, c)


def test_fma_differs_from_two_roundings_where_it_should():
    # 0.1 * 3 rounds up; the fused form keeps the lost bits
    a, b, c = 0.1, 3.0, -0.30000000000000004
    assert a * b + c == 0.0
    assert _fma_compiled(a, b, c) == fma_exact(a, b, c) == -2.7755575615628914e-17


@pytest.mark.parametrize("mode", ["plain", "fused", "vector"])
@pytest.mark.parametrize("r", [0, 1, 3, 4, 7, 8, 13, 31, 103])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dots_follow_their_lane_order_bitwise(r, mode, dtype):
    """``_dot_rows`` and ``_dot_row_vec``: lanes q mod 4 summed separately, combined
    (0 + 1) + (2 + 3), then the tail, each term by ``madd``: checked in Python floats.
    ``vector``: KL-ADMM's ``_dot_rows_fused`` / ``_dot_row_vec_fused``, whose lanes are one
    4-wide register, must give the fused scalar sums bit for bit (float32 rows widened
    lane by lane)."""
    rng = np.random.default_rng(r)
    A = rng.standard_normal((3, r)).astype(dtype)
    B = rng.standard_normal((3, r)).astype(dtype)
    y = rng.standard_normal(r)
    fused = mode != "plain"

    def ref(x, z):
        add = fma_exact if fused else (lambda u, v, w: u * v + w)
        lanes = [0.0] * 4
        q4 = r - r % 4
        for q in range(q4):
            lanes[q % 4] = add(float(x[q]), float(z[q]), lanes[q % 4])
        acc = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
        for q in range(q4, r):
            acc = add(float(x[q]), float(z[q]), acc)
        return acc

    d_rows, d_vec = _dots(A, 1, B, 2, y, fused, mode == "vector")
    assert d_rows == ref(A[1], B[2])
    assert d_vec == ref(A[1], y)
    if mode == "vector":  # and the scalar kernels they replace, on rows at every offset
        for i in range(3):
            for j in range(3):
                assert _dots(A, i, B, j, y, True, True) == _dots(A, i, B, j, y, True)
        # arrays that are not C-contiguous (element loads instead of one vector load)
        wide = rng.standard_normal((3, 2 * r)).astype(dtype)
        for A2, B2, y2 in (
            (np.asfortranarray(A), np.asfortranarray(B), y),
            (wide[:, ::2], wide[:, 1::2], rng.standard_normal(2 * r)[::2]),
        ):
            assert _dots(A2, 1, B2, 2, y2, True, True) == _dots(A2, 1, B2, 2, y2, True)
            assert _dots(A2, 1, B2, 2, y2, True, True) == (ref(A2[1], B2[2]), ref(A2[1], y2))


def _without_prefetch(kernel):
    """``kernel`` compiled with prefetch_ahead replaced by a no-op (same arithmetic)."""
    import types as pytypes

    @njit(inline="always")
    def nothing(indptr, indices, i, X, nnz):
        pass

    f = kernel.py_func
    g = dict(f.__globals__)
    g["prefetch_ahead"] = nothing
    h = pytypes.FunctionType(
        f.__code__, g, f.__name__ + "_no_prefetch", f.__defaults__, f.__closure__
    )
    return njit(nogil=True, parallel=True)(h)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prefetching_products_equal_them_without_prefetch_bitwise(dtype, global_random_seed):
    """The block solve's prefetching products (the product with L_UU and its sums, the first
    residual) give bit for bit what the same kernels give without the prefetches, on rows of
    every length (empty rows, the last rows, whose look-ahead runs off the entries), with
    halo rows in P beyond Q's; and the prefetch itself reads nothing (any array, any row
    in range, C or F order)."""
    from npkl_dist.linalg._simd import prefetch_row
    from npkl_dist.solvers.block._kernels import RB, _matvec_dot
    from npkl_dist.solvers.block._steps import _neg_residual_rows

    rng = np.random.default_rng(global_random_seed)
    n, halo, r = 3000, 200, 16
    M = sp.random(
        n,
        n + halo,
        density=0.004,
        random_state=np.random.RandomState(rng.integers(2**31)),
        format="csr",
    )
    M.data[:] = rng.standard_normal(M.nnz)
    M = M.tolil()
    M[5, :] = 0
    M[n - 1, :] = 0
    M = M.tocsr()
    ptr, idx = M.indptr.astype(np.int64), M.indices.astype(np.int64)
    val = M.data.astype(dtype)
    diag = rng.uniform(1, 2, n).astype(dtype)
    P = rng.standard_normal((n + halo, r)).astype(dtype)
    n_ch = (n + RB - 1) // RB
    outs = []
    for kernel in (_matvec_dot, _without_prefetch(_matvec_dot)):
        Q, part = np.empty((n, r)), np.empty((n_ch, r))
        kernel(ptr, idx, val, diag, P, Q, part)
        outs.append((Q, part))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    # the residual reads L's rows over all n points (here: n + halo rows, square)
    Ms = sp.random(
        n + halo,
        n + halo,
        density=0.004,
        random_state=np.random.RandomState(rng.integers(2**31)),
        format="csr",
    )
    Ms.data[:] = rng.standard_normal(Ms.nnz)
    V = rng.standard_normal((n + halo, r)).astype(dtype)
    X = V[:n].astype(np.float64)
    dinv = rng.uniform(0.5, 1, n)
    dres = rng.uniform(1, 2, n + halo).astype(dtype)
    res = []
    for kernel in (_neg_residual_rows, _without_prefetch(_neg_residual_rows)):
        R, pa, pb = np.empty((n, r)), np.empty(n_ch), np.empty(n_ch)
        kernel(
            n,
            Ms.indptr.astype(np.int64),
            Ms.indices.astype(np.int64),
            Ms.data.astype(dtype),
            dres,
            V,
            X,
            R,
            dinv,
            pa,
            pb,
        )
        res.append((R, pa, pb))
    for a, b in zip(*res):
        np.testing.assert_array_equal(a, b)

    @njit
    def touch(X, rows):
        for i in rows:
            prefetch_row(X, i)

    for arr in (P, np.asfortranarray(P), P[:, :3], np.zeros((1, 1))):
        before = arr.copy()
        touch(arr, np.arange(arr.shape[0]))
        np.testing.assert_array_equal(arr, before)


# KL-ADMM's elementwise passes in 4-lane vectors (``_v4_*``, ``_add_row_products_fused``,
# ``admm_rows``): the same operations on the same values as the scalar loops they replace.

from npkl_dist.linalg._rowops import _add_row_products_fused
from npkl_dist.linalg._simd import (
    _v4_add,
    _v4_div,
    _v4_load,
    _v4_load1,
    _v4_mul,
    _v4_splat,
    _v4_store,
    _v4_store1,
    _v4_sub,
)
from npkl_dist.linalg._smallqp import _cholesky_body
from npkl_dist.solvers.admm._kernels import admm_row_norms, admm_rows

_WIDTHS = [0, 1, 3, 4, 5, 7, 8, 13, 25, 31, 103]


def _layouts(A, rng):
    """A as C-ordered, Fortran-ordered and strided (every other column of a wider array)."""
    wide = rng.standard_normal((A.shape[0], 2 * A.shape[1])).astype(A.dtype)
    wide[:, ::2] = A
    return [A, np.asfortranarray(A), wide[:, ::2]]


@njit
def _row_products_vector(i, indptr, indices, data, X, y):
    _add_row_products_fused(i, indptr, indices, data, X, y, X.shape[1])


@pytest.mark.parametrize("r", _WIDTHS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vector_row_products_equal_the_scalar_ones_bitwise(r, dtype):
    indptr, indices, data = _csr(r, dtype=dtype)
    n = indptr.size - 1
    rng = np.random.default_rng(r + 50)
    y0 = rng.standard_normal(r)
    for X in _layouts(rng.standard_normal((n, r)).astype(dtype), rng):
        for i in range(n):
            y, y_scalar = y0.copy(), y0.copy()
            _row_products_vector(i, indptr, indices, data, X, y)
            _row_products(i, indptr, indices, data, X, y_scalar, 1.0, True)
            np.testing.assert_array_equal(y, y_scalar)
            if i % 5 == 0:  # and the exactly rounded reference
                np.testing.assert_array_equal(
                    y, _plain(i, indptr, indices, data, X, y0, 1.0, fused=True)
                )


@njit
def _lanewise(A, B, y, out, s, t):
    """out[1, q] = ((s A[1, q] + B[2, q]) - y[q]) / t in vectors of 4, then y[q] = out[1, q]
    as stored, through ``_v4_store1``."""
    r = A.shape[1]
    for q in range(0, r - r % 4, 4):
        v = _v4_div(
            _v4_sub(
                _v4_add(_v4_mul(_v4_splat(s), _v4_load(A, 1, q)), _v4_load(B, 2, q)),
                _v4_load1(y, q),
            ),
            _v4_splat(t),
        )
        _v4_store(out, 1, q, v)
        _v4_store1(y, q, _v4_load(out, 1, q))


@pytest.mark.parametrize("r", [4, 8, 12, 28, 104])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vector_arithmetic_and_stores_round_as_scalar_code(r, dtype):
    """mul, add, sub and div are IEEE lane by lane (numpy's float64 operations, bit for
    bit), and a store rounds each lane to the array's dtype as an assignment does, at
    every layout; the other rows are untouched."""
    rng = np.random.default_rng(r)
    A = rng.standard_normal((3, r)).astype(dtype)
    B = rng.standard_normal((3, r)).astype(dtype)
    y0 = rng.standard_normal(r)
    s, t = 1.7, -0.3
    want = ((s * A[1].astype(np.float64) + B[2].astype(np.float64)) - y0) / t
    for out in _layouts(np.full((3, r), 5.0, dtype), rng):
        y = y0.copy()
        _lanewise(A, B, y, out, s, t)
        np.testing.assert_array_equal(out[1], want.astype(dtype))
        np.testing.assert_array_equal(y, want.astype(dtype).astype(np.float64))
        assert np.all(out[0] == 5.0) and np.all(out[2] == 5.0)


@njit
def _admm_rows_scalar(
    start,
    stop,
    indptr,
    indices,
    data,
    diag,
    cptr,
    cidx,
    csgn,
    diagonal,
    X,
    Lam,
    lam_sign,
    rho,
    gamma,
    pmax,
    out,
    sm,
    nrm,
):
    """``admm_rows`` with every elementwise pass as a plain loop over q: the form the vector
    passes replaced (commit 8b7fbc7), kept as their reference."""
    r = X.shape[1]
    pm = pmax + 1
    want_sm = sm.shape[0] > 0
    c = np.empty(r)
    y = np.empty(r)
    M = np.empty((pm, pm))
    z = np.empty(pm)
    rows = np.empty(pm, np.int64)
    for i in range(start, stop):
        dii = np.float64(diag[i])
        for q in range(r):
            y[q] = dii * np.float64(X[i, q])
        _add_row_products(i, indptr, indices, data, X, y, r, 1.0, _fmadd)
        if want_sm:
            sm[i] = _dot_row_vec_fused(X, i, y, r)
        for q in range(r):
            c[q] = rho * np.float64(X[i, q]) + lam_sign * np.float64(Lam[i, q]) - y[q]
        p_i = 0
        for s in range(cptr[i], cptr[i + 1]):
            k = cidx[s]
            rows[p_i] = k
            if csgn[s] > 0:
                for q in range(r):
                    c[q] += gamma * X[k, q]
            p_i += 1
        if diagonal:
            rows[p_i] = i
            for q in range(r):
                c[q] += gamma * X[i, q]
            p_i += 1
        if p_i == 0:
            for q in range(r):
                out[i, q] = c[q] / rho
            continue
        for a in range(p_i):
            ka = rows[a]
            z[a] = _dot_row_vec_fused(X, ka, c, r)
            for b in range(a):
                d = _dot_rows_fused(X, ka, X, rows[b], r)
                M[a, b] = d
                M[b, a] = d
            M[a, a] = nrm[ka] + rho / gamma
        _cholesky_body(M, z, p_i, True)
        for a in range(p_i):
            za = -z[a]
            ka = rows[a]
            for q in range(r):
                c[q] = _fma(np.float64(X[ka, q]), za, c[q])
        for q in range(r):
            out[i, q] = c[q] / rho


@pytest.mark.parametrize("r", [1, 3, 4, 8, 13, 25, 31])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_admm_rows_equal_their_scalar_form_bitwise(r, dtype):
    """The KL-ADMM half-step with its vector passes against ``_admm_rows_scalar``: the new
    rows and the smooth terms bit for bit, for both signs of Lam, with and without diagonal
    targets, rows with no constraint, and X, Lam and out at every layout."""
    rng = np.random.default_rng(100 + r)
    indptr, indices, data = _csr(r, n=40)
    n = indptr.size - 1
    diag = rng.random(n) + 1.0
    ncon = rng.integers(0, 4, n) * (np.arange(n) % 7 != 0)  # some rows unconstrained
    cptr = np.r_[0, np.cumsum(ncon)].astype(np.int64)
    cidx = rng.integers(0, n, cptr[-1]).astype(np.int64)
    csgn = rng.choice([-1, 1], cptr[-1]).astype(np.int64)
    pmax = int(ncon.max()) + 1
    X0 = rng.standard_normal((n, r)).astype(dtype)
    Lam0 = rng.standard_normal((n, r)).astype(dtype)
    nrm = np.empty(n)
    admm_row_norms(X0, nrm)
    for X, Lam, out_like in zip(
        _layouts(X0, rng), _layouts(Lam0, rng), _layouts(np.zeros((n, r), dtype), rng)
    ):
        for diagonal in (True, False):
            for lam_sign in (-1.0, 1.0):
                args = (
                    indptr,
                    indices,
                    data,
                    diag,
                    cptr,
                    cidx,
                    csgn,
                    diagonal,
                    X,
                    Lam,
                    lam_sign,
                    3.5,
                    0.7,
                    pmax,
                )
                out, ref = out_like.copy(), out_like.copy()
                sm, sm_ref = np.empty(n), np.empty(n)
                admm_rows(0, n, *args, out, sm, nrm)
                _admm_rows_scalar(0, n, *args, ref, sm_ref, nrm)
                np.testing.assert_array_equal(out, ref)
                np.testing.assert_array_equal(sm, sm_ref)
