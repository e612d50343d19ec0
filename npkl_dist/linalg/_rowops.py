"""Compiled row operations over CSR neighbours and row-major factors, in a fixed order: the
gather of a row's neighbour sum, row products and dot products in 4 interleaved lanes (plain
and fused), per-block sums, row distances, and the ``take_rows``/``serial_variant``/``literal_arg``
helpers.

Conventions (pynndescent / scikit-learn style): small pure kernels, loops inside ``@njit``,
caller-allocated outputs marked ``# OUT``. Arrays are in the solver's internal (relabelled)
order. The Laplacian is passed split into its diagonal ``diag`` and its off-diagonal CSR
``(indptr, indices, data)``; the constraints as symmetric per-point lists ``(cptr, cidx, csgn)``."""

from __future__ import annotations

import types

import numpy as np
from numba import njit, prange, typeof
from numba import types as nbtypes
from numba._dispatcher import compute_fingerprint

from ._simd import (
    _fma,
    _madd,
    _v4_fma,
    _v4_load,
    _v4_load1,
    _v4_pair_sum,
    _v4_splat,
    _v4_store1,
    _v4_zero,
)

#: Rows per parallel work item of the KL-ADMM half-step; a sweep step runs in parallel only
#: above 2 * CHUNK rows (a parallel region costs more than it saves below).
CHUNK = 512

#: Reductions over rows are summed in fixed chunks of SUM_BLOCK rows, chunk partials then
#: added in row order. Every executor does the same (its row blocks are multiples of
#: SUM_BLOCK), so sums -- and the stopping decisions made from them -- are bitwise identical.
SUM_BLOCK = 1024


@njit(nogil=True, cache=True, inline="always")
def _gather(i, indptr, indices, data, V, g):
    """g <- sum_{k != i} L_ik v_k (off-diagonal row i times V)."""
    r = V.shape[1]
    for c in range(r):
        g[c] = 0.0
    # four neighbours per pass over g, as in _add_row_products (the same roundings, in the
    # dtype arithmetic of the plain loop: w * V[k, c] in the problem's dtype)
    p = indptr[i]
    end = indptr[i + 1]
    while p + 3 < end:
        k0 = indices[p]
        k1 = indices[p + 1]
        k2 = indices[p + 2]
        k3 = indices[p + 3]
        w0 = data[p]
        w1 = data[p + 1]
        w2 = data[p + 2]
        w3 = data[p + 3]
        for c in range(r):
            g[c] = (((g[c] + w0 * V[k0, c]) + w1 * V[k1, c]) + w2 * V[k2, c]) + w3 * V[k3, c]
        p += 4
    while p < end:
        k = indices[p]
        w = data[p]
        for c in range(r):
            g[c] += w * V[k, c]
        p += 1


@njit(nogil=True, cache=True, inline="always")
def _add_row_products(i, indptr, indices, data, X, y, r, sign, madd):
    """y[q] += sign * sum_p data[p] X[indices[p], q] over row i of the CSR, in p order,
    in float64 (``sign`` +1 or -1: ``y + (-w) x`` rounds exactly as ``y - w x``), each
    term added by ``madd`` (``_madd`` or ``_fmadd``).

    Four neighbours per pass over y: ``(((y + w0 x0) + w1 x1) + w2 x2) + w3 x3`` is the
    same sequence of roundings as four single passes, so the sums are bitwise those of the
    plain loop, with a quarter of the loads and stores of y (docs/decisions/kl-admm.md)."""
    _add_range_products(indptr[i], indptr[i + 1], indices, data, X, y, r, sign, madd)


@njit(nogil=True, cache=True, inline="always")
def _add_range_products(p, end, indices, data, X, y, r, sign, madd):
    """:func:`_add_row_products` over the CSR entries p..end (part of a row). Two adjacent
    ranges in turn add exactly as the one range over both: the four-neighbour passes
    round as single ones."""
    while p + 3 < end:
        k0 = indices[p]
        k1 = indices[p + 1]
        k2 = indices[p + 2]
        k3 = indices[p + 3]
        w0 = sign * np.float64(data[p])
        w1 = sign * np.float64(data[p + 1])
        w2 = sign * np.float64(data[p + 2])
        w3 = sign * np.float64(data[p + 3])
        for q in range(r):
            y[q] = madd(
                w3,
                np.float64(X[k3, q]),
                madd(
                    w2,
                    np.float64(X[k2, q]),
                    madd(w1, np.float64(X[k1, q]), madd(w0, np.float64(X[k0, q]), y[q])),
                ),
            )
        p += 4
    while p < end:
        k = indices[p]
        w = sign * np.float64(data[p])
        for q in range(r):
            y[q] = madd(w, np.float64(X[k, q]), y[q])
        p += 1


@njit(nogil=True, cache=True, inline="always")
def _dot_rows(A, i, B, j, r, madd):
    """sum_q A[i, q] B[j, q] in float64 with four interleaved partial sums (lanes q mod 4,
    combined (0+1)+(2+3), then the tail): independent chains the CPU can overlap, where
    one running sum waits on every add. Fixed order, so every caller agrees bit for bit."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    q4 = r - r % 4
    for q in range(0, q4, 4):
        s0 = madd(np.float64(A[i, q]), np.float64(B[j, q]), s0)
        s1 = madd(np.float64(A[i, q + 1]), np.float64(B[j, q + 1]), s1)
        s2 = madd(np.float64(A[i, q + 2]), np.float64(B[j, q + 2]), s2)
        s3 = madd(np.float64(A[i, q + 3]), np.float64(B[j, q + 3]), s3)
    acc = (s0 + s1) + (s2 + s3)
    for q in range(q4, r):
        acc = madd(np.float64(A[i, q]), np.float64(B[j, q]), acc)
    return acc


@njit(nogil=True, cache=True, inline="always")
def _dot_row_vec(A, i, y, r, madd):
    """sum_q A[i, q] y[q], in the lane order of ``_dot_rows``. Written out rather than
    ``_dot_rows`` on ``y.reshape((1, r))``: the view is costly on small KL-ADMM fits
    (docs/decisions/kl-admm.md)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    q4 = r - r % 4
    for q in range(0, q4, 4):
        s0 = madd(np.float64(A[i, q]), y[q], s0)
        s1 = madd(np.float64(A[i, q + 1]), y[q + 1], s1)
        s2 = madd(np.float64(A[i, q + 2]), y[q + 2], s2)
        s3 = madd(np.float64(A[i, q + 3]), y[q + 3], s3)
    acc = (s0 + s1) + (s2 + s3)
    for q in range(q4, r):
        acc = madd(np.float64(A[i, q]), y[q], acc)
    return acc


@njit(nogil=True, cache=True, inline="always")
def _dot_rows_fused(A, i, B, j, r):
    """``_dot_rows(A, i, B, j, r, _fmadd)`` with its 4 lanes in one vector register (the
    same sum, bit for bit). A and B: float32 / float64 arrays (a vector load where
    C-contiguous)."""
    acc = _v4_zero()
    q4 = r - r % 4
    for q in range(0, q4, 4):
        acc = _v4_fma(_v4_load(A, i, q), _v4_load(B, j, q), acc)
    s = _v4_pair_sum(acc)
    for q in range(q4, r):
        s = _fma(np.float64(A[i, q]), np.float64(B[j, q]), s)
    return s


@njit(nogil=True, cache=True, inline="always")
def _dot_row_vec_fused(A, i, y, r):
    """``_dot_row_vec(A, i, y, r, _fmadd)`` likewise (y: float64)."""
    acc = _v4_zero()
    q4 = r - r % 4
    for q in range(0, q4, 4):
        acc = _v4_fma(_v4_load(A, i, q), _v4_load1(y, q), acc)
    s = _v4_pair_sum(acc)
    for q in range(q4, r):
        s = _fma(np.float64(A[i, q]), y[q], s)
    return s


@njit(nogil=True, cache=True, inline="always")
def _add_row_products_fused(i, indptr, indices, data, X, y, r):
    """``_add_row_products(i, ..., X, y, r, 1.0, _fmadd)`` with y's columns in 4-lane vectors
    (y: float64, C-contiguous): each element gets the same fused multiply-adds in the same
    order, so y is bitwise the scalar form's. Written out because LLVM's own vectorisation
    of the scalar loop leaves up to 15 of r columns to a scalar tail at KL-ADMM's ranks."""
    q4 = r - r % 4
    p = indptr[i]
    end = indptr[i + 1]
    while p + 3 < end:
        k0 = indices[p]
        k1 = indices[p + 1]
        k2 = indices[p + 2]
        k3 = indices[p + 3]
        w0 = np.float64(data[p])
        w1 = np.float64(data[p + 1])
        w2 = np.float64(data[p + 2])
        w3 = np.float64(data[p + 3])
        s0 = _v4_splat(w0)
        s1 = _v4_splat(w1)
        s2 = _v4_splat(w2)
        s3 = _v4_splat(w3)
        for q in range(0, q4, 4):
            acc = _v4_fma(s0, _v4_load(X, k0, q), _v4_load1(y, q))
            acc = _v4_fma(s1, _v4_load(X, k1, q), acc)
            acc = _v4_fma(s2, _v4_load(X, k2, q), acc)
            _v4_store1(y, q, _v4_fma(s3, _v4_load(X, k3, q), acc))
        for q in range(q4, r):
            y[q] = _fma(
                w3,
                np.float64(X[k3, q]),
                _fma(
                    w2,
                    np.float64(X[k2, q]),
                    _fma(w1, np.float64(X[k1, q]), _fma(w0, np.float64(X[k0, q]), y[q])),
                ),
            )
        p += 4
    while p < end:
        k = indices[p]
        w = np.float64(data[p])
        sw = _v4_splat(w)
        for q in range(0, q4, 4):
            _v4_store1(y, q, _v4_fma(sw, _v4_load(X, k, q), _v4_load1(y, q)))
        for q in range(q4, r):
            y[q] = _fma(w, np.float64(X[k, q]), y[q])
        p += 1


@njit(nogil=True, cache=True, inline="always")
def _dot_row_vec_plain(A, i, y, r):
    """``_dot_row_vec`` with two roundings per term (the BCD solvers' arithmetic)."""
    return _dot_row_vec(A, i, y, r, _madd)


@njit(nogil=True, cache=True)
def block_sums(x):
    """Per-SUM_BLOCK sums of x (plain left-to-right sums; numpy's are pairwise), in order:
    the partial sums every executor reduces with, so that totals agree bit for bit."""
    n = x.shape[0]
    out = np.empty((n + SUM_BLOCK - 1) // SUM_BLOCK)
    for b in range(out.shape[0]):
        part = 0.0
        for i in range(b * SUM_BLOCK, min((b + 1) * SUM_BLOCK, n)):
            part += x[i]
        out[b] = part
    return out


@njit(nogil=True, cache=True)
def row_sq_dist(A, B, out):
    """out[i] = ||a_i - b_i||^2 in float64, left to right (as ``admm_run``).  OUT (n,)."""
    for i in range(out.shape[0]):
        acc = 0.0
        for q in range(A.shape[1]):
            d = np.float64(A[i, q]) - np.float64(B[i, q])
            acc += d * d
        out[i] = acc


@njit(nogil=True, cache=True)
def row_sq(A, out):
    """out[i] = ||a_i||^2 in float64, left to right (as ``admm_run``).  OUT (n,)."""
    for i in range(out.shape[0]):
        acc = 0.0
        for q in range(A.shape[1]):
            a = np.float64(A[i, q])
            acc += a * a
        out[i] = acc


@njit(nogil=True, cache=True)
def _block_total(x, n):
    """sum(x[:n]) as the executors reduce it: ``block_sums`` added in order."""
    total = 0.0
    for part in block_sums(x[:n]):
        total += part
    return total


@njit(nogil=True, cache=True, parallel=True)
def _take_rows(A, idx, out):
    """out[q] = A[idx[q]], rows in parallel (each output row written by one thread)."""
    r = A.shape[1]
    for q in prange(idx.shape[0]):
        src = idx[q]
        for c in range(r):
            out[q, c] = A[src, c]


_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def take_rows(A, idx, dtype=None, out=None) -> np.ndarray:
    """``np.ascontiguousarray(A[idx], dtype)``: a relabelling of an (n, r) factor, into a
    fit's internal order (``idx`` = the order) or back (``idx`` = its inverse, ``rank_of``).
    Float32/float64 (n, r) arrays with indices in range take one parallel compiled pass, the
    same values bit for bit (a float64 to float32 conversion rounds as numpy's does;
    docs/decisions/block-fit-at-1e6.md). Anything else
    (negative or out-of-range indices among it) takes numpy's route.

    ``out``: a C-contiguous array of the result's shape and dtype to write it into (one
    whose pages are already touched: a block fit's result, prefaulted during its set-up);
    ignored if it does not fit, or on numpy's route."""
    A = np.asarray(A)
    dtype = A.dtype if dtype is None else np.dtype(dtype)
    idx = np.asarray(idx)
    if (
        A.ndim != 2
        or A.dtype not in _ROW_DTYPES
        or dtype not in _ROW_DTYPES
        or idx.ndim != 1
        or idx.dtype.kind not in "iu"
        or (idx.size and (idx.min() < 0 or idx.max() >= A.shape[0]))
    ):
        return np.ascontiguousarray(A[idx], dtype=dtype)
    shape = (idx.shape[0], A.shape[1])
    if (
        out is None
        or out.shape != shape
        or out.dtype != dtype
        or not out.flags.c_contiguous
        or not out.flags.writeable
    ):
        out = np.empty(shape, dtype)
    _take_rows(A, idx, out)
    return out


def serial_variant(kernel):
    """``kernel`` (an ``@njit(parallel=True)`` dispatcher) compiled without ``parallel``:
    prange runs as range, the arithmetic is the same.

    For callers that parallelise at a coarser level, e.g. Dask block actors with one thread
    each -- an OpenMP parallel region started from a worker's actor thread gains nothing and
    can stall. The copy gets its own qualified name: numba's on-disk cache keys an entry by
    the function's name and bytecode, not by its compile flags, so a plain
    ``njit(kernel.py_func)`` shares the parallel kernel's cache entry and whichever compiles
    first is loaded for both.
    """

    if isinstance(kernel, literal_arg):
        return literal_arg(serial_variant(kernel.kernel), kernel.arg)
    f = kernel.py_func
    g = types.FunctionType(
        f.__code__, f.__globals__, f.__name__ + "_serial", f.__defaults__, f.__closure__
    )
    g.__qualname__ = f.__qualname__ + "_serial"
    g.__module__ = f.__module__
    g.__doc__ = f.__doc__
    return njit(nogil=True, cache=True)(g)


class literal_arg:
    """``kernel`` (an ``@njit`` dispatcher called from Python) compiled with its integer
    argument ``arg`` as a constant: one specialisation per value met.

    Code reached only for other values of the argument is then never compiled, when the
    kernel's callees branch on it at typing time (``@overload(..., prefer_literal=True)``
    stubs; the losses' QPs, docs/decisions/cold-start.md). numba's own ``literally`` would
    re-type the kernel on every call from Python; this wrapper picks the compiled
    specialisation by the arguments' type fingerprints instead (numba's dispatch keys) and
    calls its entry point. The arithmetic is the kernel's: a specialisation computes what the
    generic kernel computes for that value, bit for bit.
    """

    def __init__(self, kernel, arg: str):
        self.kernel = kernel
        code = kernel.py_func.__code__
        self.arg = arg
        self.pos = code.co_varnames[: code.co_argcount].index(arg)
        self.__name__ = kernel.__name__
        self.__doc__ = kernel.__doc__
        self.__wrapped__ = kernel.py_func
        self._entries: dict = {}

    @property
    def py_func(self):
        return self.kernel.py_func

    def entry(self, *args):
        """The compiled specialisation for these arguments (compiled or loaded on first use)."""
        value = int(args[self.pos])
        key = (value, *map(compute_fingerprint, args))
        entry = self._entries.get(key)
        if entry is None:
            sig = tuple(
                nbtypes.literal(value) if k == self.pos else typeof(a) for k, a in enumerate(args)
            )
            entry = self._entries[key] = self.kernel.compile(sig)
        return entry

    def __call__(self, *args):
        return self.entry(*args)(*args)
