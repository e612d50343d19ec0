"""The block method's layout: the U-first row order, the colours of the constrained rows, the
free (unconstrained) operator and its blocks, and the argument checks of the method."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from ..._errors import ValidationError
from ...linalg._csr import csr_row_ptr, sort_row
from ...linalg._memory import populated_empty
from ...linalg._rowops import CHUNK
from .._colouring import greedy_colouring
from .._plan import _constraint_lists, permute_split
from ._kernel_set import kernels
from ._kernels import _gershgorin_row

PRECONDITIONERS = ("amg", "amg-plain", "amg-additive", "jacobi")


# --------------------------------------------------------------------------------------------
# layout
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockLayout:
    """U-first internal order derived from a sweep plan.

    order : (n,) original index of internal row q (U rows first, then C, each in plan order)
    n_free : |U|
    c_colour_rows, c_colour_ptr : colours of the C rows (a proper colouring of the
        conflict graph restricted to C), rows in internal (U-first) numbering.
    """

    order: np.ndarray
    rank_of: np.ndarray
    n_free: int
    c_colour_rows: np.ndarray
    c_colour_ptr: np.ndarray

    @property
    def n_colours(self) -> int:
        return int(self.c_colour_ptr.shape[0] - 1)

    def rows_of(self, c: int) -> np.ndarray:
        return self.c_colour_rows[self.c_colour_ptr[c] : self.c_colour_ptr[c + 1]]

    def colour_order(self, rng: np.random.Generator) -> np.ndarray:
        return rng.permutation(self.n_colours)


def constrained_mask(problem) -> np.ndarray:
    """(n,) bool: the points in at least one constraint pair (the layout's C rows)."""
    constrained = np.zeros(problem.n_points, bool)
    c = problem.constraints
    constrained[c.i] = True
    constrained[c.j] = True
    return constrained


def free_count(problem) -> int:
    """The number of points in no constraint pair (the layout's U rows)."""
    return problem.n_points - int(np.count_nonzero(constrained_mask(problem)))


def block_layout(problem, plan, return_matrix: bool = False):
    """U-first layout from ``plan``'s locality order (a SweepPlan, or the order itself, e.g.
    from ``relabel_order``); the constrained rows get a greedy proper colouring of the
    conflict graph (manifold edges and constraint pairs) restricted to them.

    ``return_matrix``: also return L in the layout's order (what ``prepare`` would compute
    again), as ``(layout, Lp)`` with Lp a ``SplitL``."""
    n = problem.n_points
    constrained = constrained_mask(problem)
    plan_order = np.asarray(getattr(plan, "order", plan))
    in_c = constrained[plan_order]  # internal plan rows that are constrained
    free_rows = np.flatnonzero(~in_c)
    con_rows = np.flatnonzero(in_c)
    perm = np.concatenate([free_rows, con_rows])  # new internal q -> plan internal row
    order = plan_order[perm].astype(np.int64)
    rank_of = np.empty(n, np.int64)
    rank_of[order] = np.arange(n, dtype=np.int64)
    n_free = int(free_rows.shape[0])
    Lp = permute_split(problem.L, order, rank_of)
    cptr, cidx, _ = _constraint_lists(problem, rank_of)
    colour = np.zeros(n, np.int64)
    active = np.zeros(n, np.bool_)
    active[n_free:] = True
    greedy_colouring(n, Lp.indptr, Lp.indices, cptr, cidx, active, colour)
    new_rows = np.arange(n_free, n, dtype=np.int64)
    ccol = colour[n_free:]
    srt = np.lexsort((new_rows, ccol))
    used, counts = np.unique(ccol, return_counts=True)
    ptr = np.zeros(used.shape[0] + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    layout = BlockLayout(order, rank_of, n_free, new_rows[srt], ptr)
    return (layout, Lp) if return_matrix else layout


def check_method_loss(loss: str):
    if loss == "linear":
        raise ValidationError(
            "method: 'block' solves the unconstrained rows as one linear system, which the "
            "linear loss's ball constraints ||v_i|| <= b rule out; use method='sweeps' (or "
            "'auto') for loss='linear'"
        )


def colour_units(layout, c):
    """Rows of C's colour ``c`` and the bounds of its units: the rows of a colour are
    independent, cut into fixed units of CHUNK rows (a fixed grouping of the change sums)."""
    rows = layout.rows_of(c)
    return rows, np.append(np.arange(0, rows.shape[0], CHUNK), rows.shape[0]).astype(np.int64)


def _column_map(n_cols, keep_ranges):
    """colmap for :func:`_select_columns` over columns 0..n_cols: column c in [lo, hi)
    becomes c - lo + new_lo for each (lo, hi, new_lo) of ``keep_ranges``; every other
    column is dropped (-1)."""
    colmap = np.full(n_cols, -1, np.int64)
    for lo, hi, new_lo in keep_ranges:
        colmap[lo:hi] = np.arange(new_lo, new_lo + hi - lo, dtype=np.int64)
    return colmap


_NO_DIAG = np.empty(0)


def free_operator(indptr, indices, data, n_free_own, n_own, n_free_halo, serial=False):
    """The block of L_UU that a partition's own U rows (local 0..n_free_own) need, as CSR
    over the U-local numbering: own U rows, then the U rows of the halo (local
    ``n_own + k`` becomes ``n_free_own + k``, k < n_free_halo). Entries keep their order.

    Returns (indptr, indices, data) with int64 indices and float64 data. ``serial``: without
    threads (Dask block actors)."""
    nu, n_own, nfh = int(n_free_own), int(n_own), int(n_free_halo)
    colmap = _column_map(n_own + nfh, [(0, nu, 0), (n_own, n_own + nfh, nu)])
    return kernels(serial).select_columns(
        indptr, indices, data, nu, colmap, False, _NO_DIAG, False
    )


def free_matrix(A_ptr, A_idx, A_data, diag, serial=False):
    """The own block of L_UU with its diagonal, as a canonical scipy CSR (float64): the
    matrix the AMG hierarchy is built on (entries of A in halo columns are dropped)."""
    nu = diag.shape[0]
    colmap = _column_map(nu, [(0, nu, 0)])
    ptr, idx, val = kernels(serial).select_columns(
        A_ptr, A_idx, A_data, nu, colmap, False, np.asarray(diag, np.float64), True
    )
    A = sp.csr_matrix((val, idx, ptr), shape=(nu, nu))
    A.has_sorted_indices = True
    A.has_canonical_format = True
    return A


@njit(nogil=True, cache=True)
def _u_columns_of_c_rows(indptr, indices, nu, n_own):
    """The U rows (columns < nu) that the own C rows' entries reach, sorted, unique (int64;
    marked in one pass instead of np.unique's hashing)."""
    seen = np.zeros(max(nu, 0), np.bool_)
    count = 0
    for p in range(indptr[nu], indptr[n_own]):
        k = indices[p]
        if k < nu and not seen[k]:
            seen[k] = True
            count += 1
    out = np.empty(count, np.int64)
    q = 0
    for k in range(nu):
        if seen[k]:
            out[q] = k
            q += 1
    return out


def whole_free_blocks(indptr, indices, data, diag, n_free, bounds=None):
    """The U block of an in-process block fit's one part (every row, no halo) from one pass
    over the U rows instead of three selections (docs/decisions/block-fit-at-1e6.md): the AMG
    matrix (``free_matrix`` over ``free_operator``) and the C columns
    (``constrained_columns``), the same arrays bit for bit.

    Returns (operator, A, uc). Where every U row's entries in U columns are stored sorted
    (as ``permute_split`` leaves L), the operator is None: A serves as the product's
    operator too (``_matvec_dot(canonical=True)`` weighs its diagonal entries 0; the same sums bit
    for bit), so the fit holds one copy of L_UU, not two. Else the operator is
    ``free_operator``'s (ptr, idx, val).

    A's index arrays are int32 where its entries fit (scipy's own choice, so the CSR takes
    them without a copy, sparing fresh pages).

    ``bounds``: None, or two (n_free,) float64 arrays filled with ``_diag_gershgorin``'s
    diagonal and ratio of A, bitwise, from the rows as they are written (the preconditioner's
    finest level then skips that pass over A)."""
    nu = int(n_free)
    d = np.asarray(diag[:nu], np.float64)
    cf = np.empty(nu, np.int64)
    cu = np.empty(nu, np.int64)
    unsorted = np.zeros(nu, np.uint8)
    _free_block_counts(indptr, indices, data, nu, d, cf, cu, unsorted)
    nnz = int(cf.sum())
    idx_dtype = np.int32 if max(nnz, nu) < np.iinfo(np.int32).max else np.int64
    fptr = np.zeros(nu + 1, idx_dtype)
    np.cumsum(cf, dtype=idx_dtype, out=fptr[1:])
    uptr = csr_row_ptr(cu)
    # on base pages, mapped in one call (numpy's huge pages cost several times more to
    # fault in here: npkl_dist.linalg._memory)
    fidx, fval = populated_empty(nnz, idx_dtype), populated_empty(nnz, np.float64)
    uidx, uval = np.empty(uptr[nu], np.int64), np.empty(uptr[nu], np.float64)
    gd, gr = bounds if bounds is not None else (np.empty(0), np.empty(0))
    if bounds is not None and not (gd.shape == gr.shape == (nu,)):
        raise ValueError(f"bounds: two arrays of shape ({nu},), got {gd.shape}, {gr.shape}")
    _free_block_fill(indptr, indices, data, nu, d, fptr, fidx, fval, uptr, uidx, uval, gd, gr)
    A = sp.csr_matrix((fval, fidx, fptr), shape=(nu, nu))
    A.has_sorted_indices = True
    A.has_canonical_format = True
    ops = free_operator(indptr, indices, data, nu, diag.shape[0], 0) if unsorted.any() else None
    return ops, A, (uptr, uidx, uval)


@njit(nogil=True, cache=True, parallel=True)
def _free_block_counts(indptr, indices, data, nu, diag, cf, cu, unsorted):
    """Per U row: its entries in the AMG matrix (U columns, exact zeros dropped, the
    diagonal where nonzero) and in C columns; ``unsorted`` 1 where its U-column entries are
    not in increasing column order or hold its own column."""
    for i in prange(nu):
        b = 1 if diag[i] != 0.0 else 0
        c = 0
        last = -1
        bad = 0
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j < nu:
                if np.float64(data[p]) != 0.0:
                    b += 1
                if j <= last or j == i:
                    bad = 1
                last = j
            else:
                c += 1
        cf[i], cu[i] = b, c
        unsorted[i] = bad


@njit(nogil=True, cache=True, parallel=True)
def _free_block_fill(
    indptr, indices, data, nu, diag, fptr, fidx, fval, uptr, uidx, uval, gdiag, gratio
):
    """The rows counted by :func:`_free_block_counts`: U-column entries without exact zeros
    plus the diagonal (where nonzero), sorted by column (the AMG matrix, as
    ``_select_columns``' canonical pass over the operator leaves it); C-column entries in
    their order (uc). Each row written by one thread. Where ``gdiag`` is not empty,
    ``_diag_gershgorin`` of each row as written into ``gdiag, gratio``."""
    bounds = gdiag.shape[0] > 0
    for i in prange(nu):
        qf, qu = fptr[i], uptr[i]
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            v = np.float64(data[p])
            if j < nu:
                if v != 0.0:
                    fidx[qf], fval[qf] = j, v
                    qf += 1
            else:
                uidx[qu], uval[qu] = j, v
                qu += 1
        if diag[i] != 0.0:
            fidx[qf], fval[qf] = i, diag[i]
            qf += 1
        sort_row(fidx, fval, fptr[i], qf)  # sorted but the diagonal, as a rule
        if bounds:  # _diag_gershgorin's terms of the row just written
            gdiag[i], gratio[i] = _gershgorin_row(i, fptr[i], qf, fidx, fval)


def constrained_columns(indptr, indices, data, n_free_own, n_own, n_free_halo, serial=False):
    """The entries of the own U rows (local 0..n_free_own) in constrained columns -- own C
    rows [n_free_own, n_own) and halo C rows (local >= n_own + n_free_halo) -- as CSR in the
    local numbering (entries keep their order). Returns (indptr, indices, data)."""
    nu, n_own, nfh = int(n_free_own), int(n_own), int(n_free_halo)
    colmap = _column_map(n_own + nfh, [(nu, n_own, nu)])  # the halo's C rows lie beyond
    return kernels(serial).select_columns(indptr, indices, data, nu, colmap, True, _NO_DIAG, False)


def check_precond(precond):
    if precond not in PRECONDITIONERS:
        raise ValidationError(f"precond: {precond!r} is not one of {', '.join(PRECONDITIONERS)}")
