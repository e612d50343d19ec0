"""Plain-aggregation AMG hierarchies with a compiled Galerkin product.

The block solver's default preconditioner (``precond='amg-additive'``, and ``'amg-plain'``)
is a plain-aggregation hierarchy: pyamg's ``smoothed_aggregation_solver`` with
``smooth=None`` and no strength filter. pyamg forms each coarse operator as ``R @ A @ P``,
two general sparse products through BSR. With a tentative prolongator, which has at most
one entry per row, that is one pass over A's entries per aggregate, far cheaper than
pyamg's products (docs/decisions/block-fit-at-1e6.md).

The pass reproduces scipy's products exactly: the same sums in the same order, each coarse
row's entries in scipy's stored order, and no entry whose sum is exactly zero. That order
matters, because the next level's aggregation visits a row's neighbours in stored order. A
sorted variant, tried first, gave other level-1 aggregates at n = 1e6 and a fit that needed
30 outer iterations instead of 28. Everything else is pyamg's own code, called in pyamg's
order: the aggregation (``standard_aggregation``), the improvement of the near-null
candidate by relaxation on A x = 0 (finest level only), and ``fit_candidates``. So the
hierarchy is pyamg's bit for bit, which ``tests/linalg/test_aggregation.py`` checks level by level.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange
from pyamg.aggregation import fit_candidates, standard_aggregation
from pyamg.relaxation.utils import relaxation_as_linear_operator

from ._csr import csr_compact, csr_row_ptr
from ._rowops import serial_variant
from ._simd import prefetch1, prefetch_rows_ahead

#: How far ahead the Galerkin passes' reverse walk over a row's columns prefetches their
#: aggregates and weights (the fine rows themselves: ``prefetch_rows_ahead``; the rows of an
#: aggregate are scattered over about a quarter of a million rows of the RCM order at
#: n = 1e6; docs/decisions/block-fit-at-1e6.md).
COLUMNS_AHEAD = 8

#: pyamg's default improvement of the candidates (``smoothed_aggregation_solver``'s
#: ``improve_candidates``): finest level only.
IMPROVE_CANDIDATES = ("block_gauss_seidel", {"sweep": "symmetric", "iterations": 4})


class Level:
    """One level: ``A`` (CSR); on all but the coarsest, ``P`` (CSR, the tentative
    prolongator to the next level)."""

    __slots__ = ("A", "P")

    def __init__(self, A, P=None):
        self.A, self.P = A, P


class Hierarchy:
    """The levels of a plain-aggregation hierarchy (the attributes of pyamg's
    ``MultilevelSolver`` that the block solver reads)."""

    def __init__(self, levels):
        self.levels = levels

    def operator_complexity(self) -> float:
        return float(sum(lev.A.nnz for lev in self.levels) / self.levels[0].A.nnz)


def plain_aggregation_hierarchy(
    A: sp.csr_matrix, max_coarse: int = 500, max_levels: int = 10, serial: bool = False
) -> Hierarchy:
    """pyamg's ``smoothed_aggregation_solver(A, symmetry='hermitian', strength=None,
    smooth=None, max_coarse=..., max_levels=...)`` hierarchy, with the Galerkin products
    compiled. ``A``: symmetric CSR, float64, canonical (sorted, no duplicates).

    pyamg draws no random numbers on this path; the caller may seed anyway. ``serial``: the
    Galerkin passes without threads (Dask block actors, which parallelise over blocks)."""

    A = sp.csr_matrix(A, dtype=np.float64)
    levels = [Level(A)]
    B = np.ones((A.shape[0], 1))
    while len(levels) < max_levels and levels[-1].A.shape[0] > max_coarse:
        A = levels[-1].A
        agg_op = standard_aggregation(A)[0]  # strength None: C = A
        early = None
        if len(levels) == 1:  # pyamg improves the candidates on the finest level only
            if not serial and A.shape[0] >= OVERLAP_MIN_ROWS:
                # the coarse rows' entry counts depend on the aggregates alone: counted on
                # the other core while pyamg's serial relaxation runs on this one
                early = _EarlyStructure(A, _aggregate_of_rows(agg_op), agg_op.shape[1])
            b = np.zeros((A.shape[0], 1))
            A.symmetry = "hermitian"  # what pyamg's relaxation reads
            try:
                B = relaxation_as_linear_operator(IMPROVE_CANDIDATES, A, b) @ B
            except BaseException:
                if early is not None:
                    early.join()
                raise
        T, B = fit_candidates(agg_op, B)
        T = sp.csr_matrix(T)
        agg, t = _single_entry_columns(T)
        levels[-1].P = T
        structure = early.result(agg) if early is not None else None
        ptr, idx, val = galerkin_plain(
            A.indptr, A.indices, A.data, agg, t, T.shape[1], serial=serial, structure=structure
        )
        # rows in scipy's entry order, as pyamg's levels (not sorted)
        levels.append(Level(sp.csr_matrix((val, idx, ptr), shape=(T.shape[1], T.shape[1]))))
    return Hierarchy(levels)


#: Finest levels of at least this many rows count the coarse rows' entries in a thread of
#: their own during the candidate's relaxation (off the set-up's critical path;
#: docs/decisions/block-fit-at-1e6.md).
OVERLAP_MIN_ROWS = 200_000


def _aggregate_of_rows(agg_op) -> np.ndarray:
    """(n,) int64: each row's aggregate in pyamg's aggregation operator, -1 where none."""
    agg_op = sp.csr_matrix(agg_op)
    n = agg_op.shape[0]
    agg = np.full(n, -1, np.int64)
    counts = np.diff(agg_op.indptr)
    has = counts > 0
    agg[has] = agg_op.indices[agg_op.indptr[:-1][has]]
    return agg


class _EarlyStructure:
    """:func:`galerkin_structure` of A and the aggregates ``agg``, computed in a thread
    (serial compiled passes without the GIL); ``result(agg)`` waits for it and returns it
    if the prolongator's aggregates are ``agg`` (they are: fit_candidates keeps the
    aggregation operator's pattern), else None (the caller counts again)."""

    def __init__(self, A, agg, n_coarse):
        self.agg = agg
        self._out = None
        self._error = None

        def run():
            try:
                self._out = galerkin_structure(A.indptr, A.indices, agg, n_coarse, serial=True)
            except BaseException as exc:  # re-raised by result()
                self._error = exc

        self._thread = threading.Thread(target=run, name="npkl-galerkin-count", daemon=True)
        self._thread.start()

    def join(self):
        self._thread.join()

    def result(self, agg):
        self.join()
        if self._error is not None:
            raise self._error
        return self._out if np.array_equal(agg, self.agg) else None


def _single_entry_columns(T: sp.csr_matrix):
    """(agg, t): row i of T is t[i] in column agg[i], or empty (agg[i] = -1, t[i] = 0).
    Refuses a T with more than one entry in a row (not a tentative prolongator of one
    candidate)."""
    n = T.shape[0]
    counts = np.diff(T.indptr)
    if counts.size and counts.max() > 1:
        raise ValueError("galerkin_plain: the prolongator has a row with more than one entry")
    agg = np.full(n, -1, np.int64)
    t = np.zeros(n)
    has = counts == 1
    agg[has] = T.indices[T.indptr[:-1][has]]
    t[has] = T.data[T.indptr[:-1][has]]
    return agg, t


@njit(nogil=True, cache=True)
def _group_rows(agg, n_coarse):
    """Fine rows grouped by aggregate (counting sort, rows ascending in each group)."""
    ptr = np.zeros(n_coarse + 1, np.int64)
    for i in range(agg.shape[0]):
        if agg[i] >= 0:
            ptr[agg[i] + 1] += 1
    for a in range(n_coarse):
        ptr[a + 1] += ptr[a]
    rows = np.empty(ptr[n_coarse], np.int64)
    fill = ptr[:-1].copy()
    for i in range(agg.shape[0]):
        a = agg[i]
        if a >= 0:
            rows[fill[a]] = i
            fill[a] += 1
    return ptr, rows


@njit(nogil=True, cache=True, parallel=True)
def _galerkin_count(indptr, indices, agg, gptr, grows, n_coarse, n_chunks):
    """Entries of each coarse row (distinct aggregates among the rows' columns)."""
    counts = np.zeros(n_coarse, np.int64)
    step = (n_coarse + n_chunks - 1) // n_chunks
    nodata = np.empty(0)
    for ch in prange(n_chunks):
        mark = np.full(n_coarse, -1, np.int64)
        gend = gptr[min(n_coarse, (ch + 1) * step)]
        for a in range(ch * step, min(n_coarse, (ch + 1) * step)):
            cnt = 0
            for g in range(gptr[a], gptr[a + 1]):
                prefetch_rows_ahead(indptr, indices, nodata, grows, g, gend, agg, nodata)
                i = grows[g]
                for p in range(indptr[i], indptr[i + 1]):
                    b = agg[indices[p]]
                    if b >= 0 and mark[b] != a:
                        mark[b] = a
                        cnt += 1
            counts[a] = cnt
    return counts


@njit(nogil=True, cache=True, parallel=True)
def _galerkin_fill(
    indptr, indices, data, agg, t, gptr, grows, cptr, n_coarse, n_chunks, n_fine, max_ra
):
    """Row a of Tᵀ A T at cptr[a] .. cptr[a] + kept[a], formed as scipy forms (Tᵀ A) T:
    the same sums in the same order, the same order of the entries in a row, and no entry
    whose sum is exactly zero (see :func:`galerkin_plain`)."""
    idx = np.empty(cptr[n_coarse], np.int64)
    val = np.empty(cptr[n_coarse], np.float64)
    kept = np.zeros(n_coarse, np.int64)
    step = (n_coarse + n_chunks - 1) // n_chunks
    for ch in prange(n_chunks):
        ra = np.zeros(n_fine)  # row a of Tᵀ A, dense
        jmark = np.full(n_fine, -1, np.int64)
        jlist = np.empty(max_ra, np.int64)
        bsum = np.zeros(n_coarse)
        bmark = np.full(n_coarse, -1, np.int64)
        blist = np.empty(n_coarse, np.int64)
        gend = gptr[min(n_coarse, (ch + 1) * step)]
        for a in range(ch * step, min(n_coarse, (ch + 1) * step)):
            # Tᵀ A: rows i of aggregate a ascending (Tᵀ's rows are sorted), A's entries in
            # their order; columns listed as first met
            m = 0
            for g in range(gptr[a], gptr[a + 1]):
                prefetch_rows_ahead(indptr, indices, data, grows, g, gend, ra, jmark)
                i = grows[g]
                ti = t[i]
                for p in range(indptr[i], indptr[i + 1]):
                    j = indices[p]
                    ra[j] += ti * data[p]
                    if jmark[j] != a:
                        jmark[j] = a
                        jlist[m] = j
                        m += 1
            # (Tᵀ A) T: Tᵀ A's row in scipy's stored order (the reverse of first met),
            # without its zero sums
            nb = 0
            for k in range(m - 1, -1, -1):
                if k >= COLUMNS_AHEAD:
                    prefetch1(agg, jlist[k - COLUMNS_AHEAD])
                    prefetch1(t, jlist[k - COLUMNS_AHEAD])
                j = jlist[k]
                v = ra[j]
                ra[j] = 0.0
                b = agg[j]
                if v == 0.0 or b < 0:
                    continue
                bsum[b] += v * t[j]
                if bmark[b] != a:
                    bmark[b] = a
                    blist[nb] = b
                    nb += 1
            q = cptr[a]
            for k in range(nb - 1, -1, -1):  # stored in reverse of first met
                b = blist[k]
                if bsum[b] != 0.0:
                    idx[q] = b
                    val[q] = bsum[b]
                    q += 1
                bsum[b] = 0.0
            kept[a] = q - cptr[a]
    return idx, val, kept


# serial compilations for callers that parallelise at a coarser level (see serial_variant)
_galerkin_count_serial = serial_variant(_galerkin_count)
_galerkin_fill_serial = serial_variant(_galerkin_fill)


def _n_chunks(n_coarse: int, n_chunks: int | None, serial: bool) -> int:
    """The Galerkin passes' chunks of coarse rows: ``n_chunks``, by default one per thread
    (one if ``serial``), at least 1 and at most ``n_coarse``."""

    if n_chunks is None:
        n_chunks = 1 if serial else numba.get_num_threads()
    return max(1, min(n_coarse, int(n_chunks)))


def galerkin_structure(
    indptr, indices, agg, n_coarse: int, n_chunks: int | None = None, serial: bool = False
):
    """(gptr, grows, counts): the fine rows grouped by aggregate and each coarse row's entry
    count in Tᵀ A T, for T's aggregates ``agg`` (no values needed: what
    :func:`galerkin_plain` computes first, and takes as ``structure``)."""
    n_coarse = int(n_coarse)
    n_chunks = _n_chunks(n_coarse, n_chunks, serial)
    count = _galerkin_count_serial if serial else _galerkin_count
    agg = np.asarray(agg, np.int64)
    gptr, grows = _group_rows(agg, n_coarse)
    return gptr, grows, count(indptr, indices, agg, gptr, grows, n_coarse, n_chunks)


def galerkin_plain(
    indptr,
    indices,
    data,
    agg,
    t,
    n_coarse: int,
    n_chunks: int | None = None,
    serial: bool = False,
    structure=None,
):
    """CSR (ptr, indices, data) of Tᵀ A T for A = (indptr, indices, data) and the tentative
    prolongator T with T[i, agg[i]] = t[i] (row i empty where agg[i] < 0).

    It is what pyamg's ``R @ A @ P`` gives (scipy's SMMP products, ``(Tᵀ A) T``) bit for
    bit: the same sums in the same order, each row's entries in scipy's order (the reverse
    of first met; the next level's aggregation depends on it), and no entry whose sum is
    exactly zero. Coarse rows in ``n_chunks`` parallel chunks (default: one per thread; each
    holds two dense arrays over A's rows). ``serial``: compiled without threads, one chunk
    by default. ``structure``: :func:`galerkin_structure` of these aggregates, if the caller
    has it."""
    n_coarse = int(n_coarse)
    n_chunks = _n_chunks(n_coarse, n_chunks, serial)
    fill = _galerkin_fill_serial if serial else _galerkin_fill
    agg = np.asarray(agg, np.int64)
    t = np.asarray(t, np.float64)
    if structure is None:
        structure = galerkin_structure(indptr, indices, agg, n_coarse, n_chunks, serial)
    gptr, grows, counts = structure
    cptr = csr_row_ptr(counts)
    # the longest row of Tᵀ A is at most the entries of an aggregate's rows
    cs = np.zeros(grows.shape[0] + 1, np.int64)
    np.cumsum(np.diff(np.asarray(indptr, np.int64))[grows], out=cs[1:])
    max_ra = int(np.max(cs[gptr[1:]] - cs[gptr[:-1]])) if n_coarse else 0
    idx, val, kept = fill(
        indptr,
        indices,
        np.asarray(data, np.float64),
        agg,
        t,
        gptr,
        grows,
        cptr,
        n_coarse,
        n_chunks,
        agg.shape[0],
        max(max_ra, 1),
    )
    if np.array_equal(kept, counts):  # no sum was exactly zero
        return cptr, idx, val
    return csr_compact(cptr, idx, val, kept)
