"""Block-exact BCD: the unconstrained rows solved together by preconditioned CG.

Rows of V with no constraint pair (the set U) enter the objective only through the smooth
term, so with the constrained rows C fixed their exact minimiser solves the sparse SPD system

    L_UU V_U = -L_UC V_C                     (bcdkl-tnnls2015 eq. 15-17, one block)

for all r columns at once. The solver alternates

1. a warm-started preconditioned conjugate-gradient solve of that system (every column at
   once; the preconditioner is built once per graph and reused), and
2. one colour-parallel pass of exact row updates over C (the same kernels as the sweeps),

so it is still block coordinate descent: PCG from a warm start lowers the block's quadratic
at every iteration and the row updates are exact minimisers, hence the objective never
increases. Internally U comes first (in the plan's locality order), then C; the layout is a
pure function of the plan, so checkpoints and resumes line up.

By-products of the CG residual R = -L_UC V_C - L_UU V_U make the objective and the KKT
residual cheap: the gradient on U is -2R, and tr(V'LV) = -<V_U, R> + sum_{i in C} v_i'(LV)_i.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from ._aggregation import plain_aggregation_hierarchy
from ._memory import populated_empty
from ._errors import ValidationError
from ._kernels import (CHUNK, SUM_BLOCK, _add_row_products, _madd, csr_compact, csr_row_ptr,
                       greedy_colouring, pair_terms, prefetch_ahead, sort_row, sweep_units,
                       sweep_units_serial)
from ._kkt import lv_kkt_row_terms, rows_lv
from ._plan import _constraint_lists, permute_split, split_nonzero
from .executors._inprocess import chunked_sums, ordered_total


def _canonical_sum(values) -> float:
    """Sum in fixed SUM_BLOCK-row chunks, added in order (thread-count independent)."""
    return ordered_total(chunked_sums(values))

__all__ = ["BlockLayout", "block_layout", "AMGPreconditioner", "JacobiPreconditioner",
           "block_pcg", "pcg_loop", "PRECONDITIONERS", "BlockPart", "BlockSession",
           "seeded_global_random"]

PRECONDITIONERS = ("amg", "amg-plain", "amg-additive", "jacobi")

#: Rounding guard of the subspace search, in units of V's machine epsilon: a step (s1, s2)
#: is taken only if its decrease exceeds SEARCH_NOISE * eps * (|s1| + |s2|) * max(diag L) *
#: ||V||^2. The search's coefficients <LD, V>, <LS, V> carry absolute errors of about
#: eps * ||L|| * ||V||^2 (LD's U rows come from the CG step alpha P, while V moved by the
#: rounded X + alpha P; LS is carried by a recurrence), which a step multiplies. Near a
#: stationary point D and S are at rounding level, the model is flat, and the search found
#: steps of 1e7 whose claimed decrease of 3e-9 was an increase of 6e-9 (measured error per
#: unit step: 0.03 eps max(diag L) ||V||^2), which the carried residual then kept as an
#: offset of the objective. Rejected, the outer iteration keeps its plain block step.
#: eps is float64's for every dtype: the errors come from the carried float64 quantities of
#: the fast path (float64 only); on float32 V the coefficients are products of the stored
#: arrays summed in float64. (With float32's eps the guard refused nearly every momentum
#: step near the optimum: float32 fits of 400 points needed more than 2,000 outer
#: iterations where float64 needed 143-717, and stopped up to 4e-4 above in objective;
#: with float64's they take float64's count, monotone. bench/RESULTS.md, "float32 block
#: fits".)
SEARCH_NOISE = 64.0

#: rows per reduction chunk (partial sums in a fixed order: thread-count independent)
RB = SUM_BLOCK


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
        return self.c_colour_rows[self.c_colour_ptr[c]: self.c_colour_ptr[c + 1]]

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


# --------------------------------------------------------------------------------------------
# compiled kernels (rows of the U block; reductions per RB-row chunk)
# --------------------------------------------------------------------------------------------

@njit(nogil=True, cache=True, inline="always")
def _row_times(i, indptr, indices, data, diag, X, q):
    """q = (A X)_i for A = diag + off-diagonal CSR (float64 accumulation)."""
    r = X.shape[1]
    d = np.float64(diag[i])
    for c in range(r):
        q[c] = d * X[i, c]
    _add_row_products(i, indptr, indices, data, X, q, r, 1.0, _madd)


@njit(nogil=True, cache=True, parallel=True)
def _matvec_dot(indptr, indices, data, diag, P, Q, part, canonical=False):
    """Q = A P (A = diag + off-diagonal CSR); part[ch, c] = sum over chunk rows of P*Q.

    Q's rows are computed; P may hold further (halo) rows that A's columns reach. The rows
    of P that the entries ``PREFETCH_AHEAD`` further on read are prefetched
    (``prefetch_ahead``). ``canonical``: the CSR holds the diagonal among its sorted
    entries (the AMG matrix; :func:`_row_times_canonical`): the same Q and sums, bit for
    bit, where its rows are the operator's plus the diagonal."""
    n, r = Q.shape
    n_ch = (n + RB - 1) // RB
    nnz = indptr[n]
    for ch in prange(n_ch):
        acc = np.zeros(r)
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            prefetch_ahead(indptr, indices, i, P, nnz)
            if canonical:
                _row_times_canonical(i, indptr, indices, data, diag, P, q)
            else:
                _row_times(i, indptr, indices, data, diag, P, q)
            for c in range(r):
                Q[i, c] = q[c]
                acc[c] += P[i, c] * q[c]
        for c in range(r):
            part[ch, c] = acc[c]


@njit(nogil=True, cache=True, inline="always")
def _row_times_canonical(i, indptr, indices, data, diag, X, q):
    """:func:`_row_times` over a canonical CSR that holds the diagonal among its sorted
    entries (the AMG matrix): q = diag_i x_i, then every entry in order with the diagonal
    entry's weight taken as 0 (four neighbours per pass over q, as ``_add_row_products``).
    Over rows stored sorted these are the off-diagonal operator's entries in its order,
    plus exact zeros (the diagonal's, and none for the explicit zeros the canonical form
    dropped): the sums of :func:`_row_times`, bit for bit (an exact zero added leaves a
    sum as it is, but for the sign of a zero sum). Skipping the diagonal instead split each
    row into two runs with a tail each: 81 against 60 ms at n = 1e6, r = 16."""
    r = X.shape[1]
    d = np.float64(diag[i])
    for c in range(r):
        q[c] = d * X[i, c]
    p = indptr[i]
    end = indptr[i + 1]
    while p + 3 < end:
        k0 = indices[p]
        k1 = indices[p + 1]
        k2 = indices[p + 2]
        k3 = indices[p + 3]
        w0 = np.float64(data[p]) * np.float64(k0 != i)
        w1 = np.float64(data[p + 1]) * np.float64(k1 != i)
        w2 = np.float64(data[p + 2]) * np.float64(k2 != i)
        w3 = np.float64(data[p + 3]) * np.float64(k3 != i)
        for c in range(r):
            q[c] = _madd(w3, np.float64(X[k3, c]), _madd(w2, np.float64(X[k2, c]), _madd(
                w1, np.float64(X[k1, c]), _madd(w0, np.float64(X[k0, c]), q[c]))))
        p += 4
    while p < end:
        k = indices[p]
        w = np.float64(data[p]) * np.float64(k != i)
        for c in range(r):
            q[c] = _madd(w, np.float64(X[k, c]), q[c])
        p += 1


@njit(nogil=True, cache=True, parallel=True)
def _pre_smooth(indptr, indices, data, diag, w, b, x, res):
    """x = w b; res = b - A x (A = diag + off-diagonal CSR)."""
    n, r = b.shape
    for i in prange(n):
        for c in range(r):
            x[i, c] = w[i] * b[i, c]
    for ch in prange((n + RB - 1) // RB):
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            _row_times(i, indptr, indices, data, diag, x, q)
            for c in range(r):
                res[i, c] = b[i, c] - q[c]


@njit(nogil=True, cache=True, parallel=True)
def _post_smooth(indptr, indices, data, diag, w, b, x, out):
    """out = x + w (b - A x)."""
    n, r = b.shape
    for ch in prange((n + RB - 1) // RB):
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            _row_times(i, indptr, indices, data, diag, x, q)
            for c in range(r):
                out[i, c] = x[i, c] + w[i] * (b[i, c] - q[c])


@njit(nogil=True, cache=True, parallel=True)
def _csr_mm(indptr, indices, data, X, out, accumulate):
    """out (+)= M X for a CSR matrix M (rows in parallel): the multigrid transfers P, P'."""
    n = indptr.shape[0] - 1
    r = X.shape[1]
    for i in prange(n):
        if not accumulate:
            for c in range(r):
                out[i, c] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            v = data[p]
            for c in range(r):
                out[i, c] += v * X[k, c]


#: Fine levels of at least this many rows restrict by a scatter plan
#: (:func:`_restriction_plan`) instead of the product with R = P'.
RESTRICT_SCATTER_MIN_ROWS = 50_000


def _restriction_plan(P, serial: bool):
    """For a prolongator P (CSR, sorted) with at most one entry per row and at least
    ``RESTRICT_SCATTER_MIN_ROWS`` rows: (bounds, ptr, rows) for :func:`_restrict_scatter`,
    the coarse rows cut into one range per thread and, per range, the fine rows whose entry
    falls in it, ascending; else None.

    P' b gathered row by row (``_csr_mm`` over R = P') reads b at the rows of each aggregate,
    scattered over a quarter of a million rows of the RCM order at n = 1e6; the scatter reads
    b in its own order and adds into the coarse rows (34,720 x 16 at n = 1e6: in cache).
    Each coarse row is summed by one thread over its fine rows in ascending order, which is
    R's order, so the sums are bitwise the product's."""
    n = P.shape[0]
    if n < RESTRICT_SCATTER_MIN_ROWS or np.diff(P.indptr).max(initial=0) > 1:
        return None
    n_parts = 1 if serial else max(1, numba.get_num_threads())
    bounds = (np.arange(n_parts + 1, dtype=np.int64) * P.shape[1]) // n_parts
    ptr = np.zeros(n_parts + 1, np.int64)
    rows = np.empty(int(P.indptr[-1]), np.int32 if n < np.iinfo(np.int32).max else np.int64)
    _fill_restriction_plan(P.indptr, P.indices, bounds, ptr, rows)
    return bounds, ptr, rows


@njit(nogil=True, cache=True)
def _fill_restriction_plan(p_ptr, p_idx, bounds, ptr, rows):
    """ptr[k + 1] - ptr[k] = the fine rows whose entry is in part k's coarse rows
    [bounds[k], bounds[k + 1]), listed ascending in rows[ptr[k]:ptr[k + 1]]."""
    n = p_ptr.shape[0] - 1
    for i in range(n):
        if p_ptr[i + 1] > p_ptr[i]:
            ptr[np.searchsorted(bounds, p_idx[p_ptr[i]], side="right")] += 1
    for k in range(ptr.shape[0] - 1):
        ptr[k + 1] += ptr[k]
    at = ptr[:-1].copy()
    for i in range(n):
        if p_ptr[i + 1] > p_ptr[i]:
            k = np.searchsorted(bounds, p_idx[p_ptr[i]], side="right") - 1
            rows[at[k]] = i
            at[k] += 1


@njit(nogil=True, cache=True, parallel=True)
def _restrict_scatter(bounds, ptr, rows, p_ptr, p_idx, p_val, b, out):
    """out = P' b for a P of at most one entry per row, by :func:`_restriction_plan`'s plan:
    part k zeroes coarse rows [bounds[k], bounds[k + 1]) and adds w_i b_i into its coarse
    row for its fine rows ``rows[ptr[k]:ptr[k + 1]]`` in order (``_csr_mm``'s sums)."""
    r = b.shape[1]
    for k in prange(ptr.shape[0] - 1):
        for a in range(bounds[k], bounds[k + 1]):
            for c in range(r):
                out[a, c] = 0.0
        for q in range(ptr[k], ptr[k + 1]):
            i = rows[q]
            e = p_ptr[i]
            a = p_idx[e]
            v = p_val[e]
            for c in range(r):
                out[a, c] += v * b[i, c]


@njit(nogil=True, cache=True, parallel=True)
def _scale_rows(w, X, out):
    """out = diag(w) X."""
    n, r = X.shape
    for i in prange(n):
        for c in range(r):
            out[i, c] = w[i] * X[i, c]


@njit(nogil=True, cache=True, parallel=True)
def _cg_update(X, R, P, Q, alpha):
    """X += alpha P ; R -= alpha Q (per column alpha)."""
    n, r = X.shape
    for i in prange(n):
        for c in range(r):
            X[i, c] += alpha[c] * P[i, c]
            R[i, c] -= alpha[c] * Q[i, c]


@njit(nogil=True, cache=True, parallel=True)
def _cg_update_x_sums(X, P, alpha, n2_part, d2_part):
    """X += alpha P (``_cg_update`` without the residual: a last PCG step, whose
    R -= alpha Q nothing would read) with the chunk sums of ||X||^2 and ||X - X_start||^2
    that ``_copy_delta`` (no copy, Xold = X_start) would form after it: finish_block's sums
    for a one-step PCG on V's own float64 rows, whose start Vprev equals X bit for bit."""
    n, r = X.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                x0 = X[i, c]
                x = x0 + alpha[c] * P[i, c]
                X[i, c] = x
                dd = x - x0
                a += x * x
                b += dd * dd
        n2_part[ch] = a
        d2_part[ch] = b


@njit(nogil=True, cache=True, parallel=True)
def _dots(R, Z, part_rz, part_rr):
    """part_rz[ch, c] = sum R*Z, part_rr[ch, c] = sum R*R over the chunk's rows."""
    n, r = R.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = np.zeros(r)
        b = np.zeros(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                a[c] += R[i, c] * Z[i, c]
                b[c] += R[i, c] * R[i, c]
        for c in range(r):
            part_rz[ch, c] = a[c]
            part_rr[ch, c] = b[c]


@njit(nogil=True, cache=True, parallel=True)
def _additive_dots(w, R, indptr, indices, data, X, Z, part_rz, part_rr):
    """Z = diag(w) R + P X (P: CSR ``indptr, indices, data``) fused with the R*Z and R*R chunk
    sums: the finest level of the additive cycle and the PCG dots in one pass over the rows,
    with the arithmetic of ``_scale_rows``, ``_csr_mm(accumulate=True)`` and ``_dots`` (each
    entry and each chunk sum bitwise theirs); Z is written and read while its row is in
    cache instead of in three passes over the (n, r) blocks. With a P of empty rows it is
    the Jacobi step Z = diag(w) R with its sums.

    Each row is formed in float64 and stored once; the sums read Z as stored. So a float32
    Z (a one-step PCG's direction, ``BlockPart.pcg_precondition``) holds each entry rounded
    once, and R*Z is the sum for that rounded direction, which keeps the PCG's step exact
    along it; a float64 Z gets the arithmetic above, bit for bit."""
    n, r = R.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = np.zeros(r)
        b = np.zeros(r)
        z = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            wi = w[i]
            for c in range(r):
                z[c] = wi * R[i, c]
            for p in range(indptr[i], indptr[i + 1]):
                k = indices[p]
                v = data[p]
                for c in range(r):
                    z[c] += v * X[k, c]
            for c in range(r):
                Z[i, c] = z[c]
                zc = np.float64(Z[i, c])
                a[c] += R[i, c] * zc
                b[c] += R[i, c] * R[i, c]
        for c in range(r):
            part_rz[ch, c] = a[c]
            part_rr[ch, c] = b[c]


@njit(nogil=True, cache=True, parallel=True)
def _direction(P, Z, beta):
    """P = Z + beta P."""
    n, r = P.shape
    for i in prange(n):
        for c in range(r):
            P[i, c] = Z[i, c] + beta[c] * P[i, c]


def _colsum(part):
    """Column totals of chunk partials, added in chunk order (compiled for the 1-D and 2-D
    partials of every outer iteration: a Python loop over ~1,000 chunks took 0.3-0.6 ms a
    call at n = 1e6, eleven calls per outer iteration)."""
    part = np.asarray(part, np.float64)
    return _colsum_1d(part) if part.ndim == 1 else _colsum_2d(part)


@njit(nogil=True, cache=True)
def _colsum_1d(part):
    tot = 0.0
    for k in range(part.shape[0]):
        tot = tot + part[k]
    return tot


@njit(nogil=True, cache=True)
def _colsum_2d(part):
    tot = np.zeros(part.shape[1])
    for k in range(part.shape[0]):
        for c in range(part.shape[1]):
            tot[c] = tot[c] + part[k, c]
    return tot


@njit(nogil=True, cache=True)
def _cholesky_solve_block(Lc, Uc, b, x):
    """x = (Lc Lc')^{-1} b for a lower Cholesky factor Lc (Uc = Lc', row-major for the
    backward pass), every column of b."""
    n, r = b.shape
    for i in range(n):  # forward: Lc y = b
        for c in range(r):
            x[i, c] = b[i, c]
        for k in range(i):
            w = Lc[i, k]
            for c in range(r):
                x[i, c] -= w * x[k, c]
        d = Lc[i, i]
        for c in range(r):
            x[i, c] /= d
    for i in range(n - 1, -1, -1):  # backward: Lc' x = y
        for k in range(i + 1, n):
            w = Uc[i, k]
            for c in range(r):
                x[i, c] -= w * x[k, c]
        d = Lc[i, i]
        for c in range(r):
            x[i, c] /= d


class _Kernels:
    """The parallel kernels of a block solve, or their serial compilations (Dask actors)."""

    NAMES = ("_matvec_dot", "_pre_smooth", "_post_smooth", "_csr_mm", "_scale_rows",
             "_cg_update", "_cg_update_x_sums", "_dots", "_additive_dots", "_direction",
             "_neg_residual_rows",
             "_copy_delta", "_direction_LD", "_residual_dots",
             "_subspace_step", "_save", "_pair_coeffs2",
             "_direction_cg", "_pair_coeffs2_cg", "_subspace_step_cg",
             "_uc_products", "_update_rows", "_restrict_scatter",
             "_select_columns", "_diag_gershgorin")  # the last two: set-up

    def __init__(self, serial: bool):
        from ._kernels import pair_terms_serial, serial_variant

        g = globals()
        for name in self.NAMES:
            setattr(self, name.lstrip("_"),
                    serial_variant(g[name]) if serial else g[name])
        self.rows_lv = serial_variant(rows_lv) if serial else rows_lv
        self.lv_kkt_row_terms = (serial_variant(lv_kkt_row_terms) if serial
                                 else lv_kkt_row_terms)
        self.pair_terms = pair_terms_serial if serial else pair_terms
        self.serial = serial


_KERNELS = {}


def kernels(serial: bool = False) -> _Kernels:
    """The kernel set (built once per process: serial ones compile on first use)."""
    if serial not in _KERNELS:
        _KERNELS[serial] = _Kernels(serial)
    return _KERNELS[serial]


# --------------------------------------------------------------------------------------------
# preconditioners (symmetric positive definite, act on all columns at once)
# --------------------------------------------------------------------------------------------

def _int64_csr(M):
    M = sp.csr_matrix(M, dtype=np.float64)
    M.sort_indices()
    M.indptr = M.indptr.astype(np.int64)
    M.indices = M.indices.astype(np.int64)
    return M


_GLOBAL_RANDOM_LOCK = threading.RLock()


@contextmanager
def seeded_global_random(seed: int = 0):
    """pyamg draws from numpy's global generator (spectral-radius estimates, LOBPCG's
    preconditioner set-up): seed it for the block and restore the caller's state, so that
    fits are reproducible bit for bit. Holds a process-wide lock meanwhile: Dask actors
    sharing a worker process build their preconditioners on concurrent threads."""
    with _GLOBAL_RANDOM_LOCK:
        saved = np.random.get_state()
        np.random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(saved)


class JacobiPreconditioner:
    """Z = D^{-1} R."""

    name = "jacobi"

    def __init__(self, A_diag, serial: bool = False):
        self.dinv = 1.0 / np.asarray(A_diag, np.float64)
        self.setup_seconds = 0.0
        self.K = kernels(serial)
        # no coarse correction: P with empty rows
        self._no_P = (np.zeros(self.dinv.shape[0] + 1, np.int64), np.empty(0, np.int64),
                      np.empty(0), np.empty((0, 0)))

    def apply_dots(self, R, Z, part_rz, part_rr):
        ptr, idx, val, X = self._no_P
        self.K.additive_dots(self.dinv, R, ptr, idx, val, X, Z, part_rz, part_rr)


# pyamg's aggregation reads only the sparsity pattern of its strength matrix and skips the
# diagonal, and the default strength (symmetric, theta = 0) keeps every entry: so A itself
# (strength=None) gives the same aggregates and the same hierarchy, bit for bit, without
# the pass that computes and row-scales a strength matrix (about 0.4 s of a 1.7 s set-up at
# n = 1e6; tested).
AMG_OPTIONS = {"strength": None}


#: A row of L_UU whose off-diagonal entries sum (in absolute value) to at most this times its
#: diagonal is decoupled for the AMG preconditioner (``AMGPreconditioner``'s fallback).
DECOUPLED_RTOL = float(np.sqrt(np.finfo(np.float64).eps))


@njit(nogil=True, cache=True, parallel=True)
def _diag_gershgorin(indptr, indices, data, diag, ratio):
    """The diagonal of a CSR matrix (0 where a row stores none) and, per row,
    (|d_i| + sum_{j != i} |a_ij|) / d_i (0 where d_i <= 0), whose maximum is the Gershgorin
    bound on the spectral radius of D^-1 A: one pass over the rows, the off-diagonal entries
    added in their stored order (explicit zeros add 0)."""
    n = diag.shape[0]
    for i in prange(n):
        # d <= 0: ratio 0, and the caller refuses the level
        diag[i], ratio[i] = _gershgorin_row(i, indptr[i], indptr[i + 1], indices, data)


@njit(nogil=True, cache=True, inline="always")
def _gershgorin_row(i, start, end, indices, data):
    """(d_i, (|d_i| + sum_{j != i} |a_ij|) / d_i) of row i stored in entries start..end
    (d_i = 0 where the row stores no diagonal; the ratio 0 where d_i <= 0), the
    off-diagonal terms added in stored order."""
    d = 0.0
    for p in range(start, end):
        if indices[p] == i:
            d = data[p]
    s = abs(d)
    for p in range(start, end):
        if indices[p] != i:
            s += abs(data[p])
    return d, (s / d if d > 0.0 else 0.0)


def _decoupled_rows(A: sp.csr_matrix, rtol: float = DECOUPLED_RTOL) -> np.ndarray:
    """Mask of the rows of A whose off-diagonal absolute sum is at most ``rtol`` times the
    diagonal (none, or Gaussian weights of far neighbours, ~1e-20: they round away next to
    the diagonal)."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    off = A.indices != rows
    mass = np.bincount(rows[off], weights=np.abs(A.data[off]), minlength=A.shape[0])
    return mass <= rtol * np.abs(A.diagonal())


#: The AMG hierarchies' coarsest size and depth (pyamg's defaults).
AMG_MAX_COARSE = 500
AMG_MAX_LEVELS = 10

#: Key of a block fit's cache holding the AMG matrix (L_UU with its diagonal, canonical) from
#: :func:`whole_free_blocks` until the session's preconditioner takes it.
_AMG_MATRIX_KEY = "free matrix"

#: Key of a block fit's cache holding L_UU's plain-aggregation hierarchy from the
#: 'coarse-free' start until the session's preconditioner takes it.
HIERARCHY_KEY = "free hierarchy"


def free_hierarchy(prep, n_free: int, cache=None):
    """The plain-aggregation hierarchy of L_UU (rows and columns 0..n_free of the prepared L,
    U-first) that the default preconditioner ('amg-additive', and 'amg-plain') builds: the
    same matrix (``free_operator`` over every row, then ``free_matrix``) and the same
    ``plain_aggregation_hierarchy``, bit for bit. ``cache``: a block fit's; the U-block
    operator is taken from it, or left in it under the session's key ('operator') with the
    C columns of the U rows ('uc'), all three from one pass (:func:`whole_free_blocks`)."""
    if cache is not None and CANONICAL_OPERATOR_KEY in cache:
        A = cache[CANONICAL_OPERATOR_KEY]
    elif cache is not None and "operator" in cache:
        A = free_matrix(*cache["operator"], np.asarray(prep.diag[:n_free], np.float64))
    else:
        A = _free_blocks_into(cache, prep.indptr, prep.indices, prep.data, prep.diag, n_free)
    return plain_aggregation_hierarchy(A, AMG_MAX_COARSE, AMG_MAX_LEVELS)


def _free_blocks_into(cache, indptr, indices, data, diag, n_free):
    """:func:`whole_free_blocks`: the operator and the C columns left in ``cache`` (if any)
    under the session's keys ('operator', or ``CANONICAL_OPERATOR_KEY`` where the AMG matrix
    serves as the operator; 'uc'); returns the AMG matrix."""
    bounds = None
    if cache is not None:
        nu = int(n_free)
        bounds = (np.empty(nu), np.empty(nu))
    ops, A, uc = whole_free_blocks(indptr, indices, data, diag, n_free, bounds)
    if cache is not None:
        cache[_FINEST_BOUNDS_KEY] = (A.data, A.indptr) + bounds
        cache["uc"] = uc
        if ops is None:
            cache[CANONICAL_OPERATOR_KEY] = A
        else:
            cache["operator"] = ops
    return A


#: A fit cache's key for the AMG matrix's diagonal and Gershgorin ratios from the pass that
#: formed it (``whole_free_blocks(bounds=...)``): (A.data, A.indptr, diag, ratio), until the
#: session's preconditioner takes them for its finest level.
_FINEST_BOUNDS_KEY = "free matrix bounds"

#: A fit cache's key for the AMG matrix of L_UU where it also serves as the U block's
#: operator (:func:`whole_free_blocks`; the product then skips its diagonal entries).
CANONICAL_OPERATOR_KEY = "operator (AMG matrix)"


def _same_array(a, b) -> bool:
    """Whether ``a`` and ``b`` are the same memory (one array, or views of all of it)."""
    return (a.dtype == b.dtype and a.shape == b.shape
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


class AMGPreconditioner:
    """One symmetric V-cycle of smoothed-aggregation AMG (pyamg hierarchy), all columns at once.

    pyamg builds the hierarchy (aggregation, smoothed prolongators, Galerkin coarse operators)
    once per graph; a plain-aggregation one (``smooth=None``) comes from pyamg's steps with
    compiled Galerkin products (:mod:`npkl_dist._aggregation`). pyamg's own cycle works on one
    vector at a time, so the cycle here applies the same hierarchy to an (n, r) block: damped
    Jacobi pre- and post-smoothing (weight 4/(3 rho), rho = the Gershgorin bound on the
    spectral radius of D^{-1}A, which keeps the cycle SPD), Galerkin restriction P', and a
    dense Cholesky solve on the coarsest level.
    ``additive``: the finest level takes its Jacobi weights plus the coarse correction
    instead of smoothing (see :meth:`_additive`).
    """

    name = "amg"

    def __init__(self, A: sp.csr_matrix, max_coarse: int = AMG_MAX_COARSE,
                 max_levels: int = AMG_MAX_LEVELS, smooth="jacobi", serial: bool = False,
                 additive: bool = False, hierarchy=None, finest_bounds=None):
        """``hierarchy``: A's plain-aggregation hierarchy (``smooth=None``), already built
        with these ``max_coarse`` and ``max_levels`` (:func:`free_hierarchy`, which the
        'coarse-free' start builds first); used instead of building it again.
        ``finest_bounds``: (data, indptr, diag, ratio), ``_diag_gershgorin`` of the matrix
        whose ``data`` and ``indptr`` arrays these are (:func:`whole_free_blocks`); taken
        for the finest level if that level's matrix holds these very arrays."""
        import time

        t0 = time.perf_counter()
        self.K = kernels(serial)
        self.additive = bool(additive)
        A = sp.csr_matrix(A, dtype=np.float64)
        if hierarchy is not None and smooth is not None:
            raise ValueError("AMGPreconditioner: a given hierarchy is a plain-aggregation one "
                             "(smooth=None)")
        if smooth == "jacobi":
            # local (row-sum) weights instead of a power-iteration spectral radius:
            # same hierarchy quality here at a fraction of the set-up time
            smooth = ("jacobi", {"weighting": "local"})
        opts = dict(max_coarse=max_coarse, smooth=smooth, max_levels=max_levels)
        self._finest_bounds = finest_bounds
        self._split = None
        if not self._build(A, opts, hierarchy):
            # a degenerate hierarchy: rows of A coupled to the rest by nothing, or by weights
            # that round away next to their diagonal (two points joined only by a Gaussian
            # weight of 1e-20), made an aggregate whose prolongator column the local Jacobi
            # smoothing cancelled to exactly zero; the next level had a zero row and the cycle
            # gave NaN (6,000 points, 40% of them constrained: tests/test_blocksolve.py).
            # Such rows are taken as decoupled: solved by their diagonal, the hierarchy built
            # on the others.
            iso = _decoupled_rows(A)
            keep = np.flatnonzero(~iso)
            self._split = (keep, np.flatnonzero(iso), 1.0 / A.diagonal()[iso])
            if keep.size == 0:  # a diagonal block: no hierarchy at all
                self.levels, self.coarse, self.n_levels = [], None, 0
                self.operator_complexity = 1.0
            elif not self._build(A[keep][:, keep].tocsr(), opts):
                raise ValueError(
                    "precond: the AMG hierarchy of the unconstrained block is degenerate (a "
                    "coarse level with a zero diagonal); fit with precond='jacobi'")
        self._finest_bounds = None  # held by the finest level where taken
        self.setup_seconds = time.perf_counter() - t0

    def _build(self, A, opts, hierarchy=None) -> bool:
        """The hierarchy of A (pyamg, or ``hierarchy`` if given) and its levels; False where
        it is degenerate (a level with a non-positive diagonal, or a coarsest matrix that is
        not positive definite)."""
        import pyamg
        from scipy.linalg import LinAlgError

        # pyamg estimates spectral radii from np.random's global generator: seed it for the
        # set-up (restoring the caller's state) so that the hierarchy, and with it every fit
        # and every resume, is reproducible bit for bit.
        with seeded_global_random():
            if hierarchy is not None:
                ml = hierarchy
            elif opts["smooth"] is None:
                # plain aggregation: pyamg's steps, with the Galerkin products compiled
                # (npkl_dist._aggregation; the same hierarchy bit for bit)
                ml = plain_aggregation_hierarchy(A, opts["max_coarse"], opts["max_levels"],
                                                 serial=self.K.serial)
            else:
                ml = pyamg.smoothed_aggregation_solver(A, symmetry="hermitian", keep=False,
                                                       **opts, **AMG_OPTIONS)
            try:
                return self._setup_levels(ml)
            except LinAlgError:  # the coarsest matrix is not positive definite
                return False

    def _setup_levels(self, ml) -> bool:
        """The levels of pyamg's hierarchy ``ml`` as the cycle uses them; False (nothing
        usable set) where a level has a non-positive diagonal."""
        from scipy.linalg import cho_factor

        self.levels = []
        for k, lev in enumerate(ml.levels[:-1]):
            A = sp.csr_matrix(lev.A)
            # the diagonal and the Gershgorin bound on rho(D^-1 A) in one pass: cheap, and a
            # smaller weight keeps the smoother convergent and the cycle SPD
            given = self._finest_bounds if k == 0 else None
            if given is not None and _same_array(A.data, given[0]) and _same_array(
                    A.indptr, given[1]):
                d, ratio = given[2], given[3]  # from the pass that wrote A
            else:
                d, ratio = np.empty(A.shape[0]), np.empty(A.shape[0])
                self.K.diag_gershgorin(A.indptr, A.indices, A.data, d, ratio)
            if np.any(d <= 0):
                return False
            level = {"diag": d, "w": (4.0 / (3.0 * ratio.max())) / d,
                     "P": _int64_csr(lev.P)}
            level["scatter"] = _restriction_plan(level["P"], self.K.serial)
            if level["scatter"] is None:  # restricted by the product with R = P'
                level["R"] = _int64_csr(lev.P.T)
            if not (self.additive and k == 0):  # the additive finest level never smooths
                # the off-diagonal part (sorted rows, no explicit zeros) its smoothing reads
                (ptr, idx, val), _ = split_nonzero(A, serial=self.K.serial)
                level.update(indptr=ptr, indices=idx, data=val)
            self.levels.append(level)
        coarse = ml.levels[-1].A.toarray()
        # lower Cholesky factor; solved by a compiled substitution, not LAPACK: a threaded
        # BLAS on a busy machine (or from Dask actor threads) made it 30x slower
        from ._simplenpkl import _OneBlasThread  # the process's one threadpoolctl scan

        with _OneBlasThread():  # tiny: threads only contend
            Lc = np.tril(cho_factor(coarse, lower=True)[0])
        self.coarse = (np.ascontiguousarray(Lc), np.ascontiguousarray(Lc.T))
        self.operator_complexity = float(ml.operator_complexity())
        self._work_r, self._work_arrays = None, None
        self.n_levels = len(ml.levels)
        return True

    def _work(self, r):
        """Per-level work arrays for r columns, allocated once and reused: a fresh (n, r)
        array per cycle meant fresh pages from the OS each time (at n = 1e6 the fine-level
        pre-smoothing took 0.43 s against 0.17 s for the same product in post-smoothing).
        Level k: x, res (its size), the restricted residual and the coarse correction (the
        next level's size)."""
        if self._work_r != r:
            self._work_arrays = []
            for k, lev in enumerate(self.levels):
                # the additive cycle never smooths on the finest level
                n_k = 0 if self.additive and k == 0 else lev["diag"].shape[0]
                n_c = lev["P"].shape[1]
                # base pages, mapped at once (npkl_dist._memory): level 1 at n = 1e6 holds
                # four 4.4 MB arrays, fresh memory that huge pages make dear in this VM
                self._work_arrays.append((populated_empty((n_k, r)), populated_empty((n_k, r)),
                                          populated_empty((n_c, r)), populated_empty((n_c, r))))
            self._work_r = r
        return self._work_arrays

    def _restrict(self, lev, b, out):
        """out = P' b: by the level's scatter plan where it has one, else the product
        with R = P' (the same sums, bitwise)."""
        plan = lev.get("scatter")
        if plan is not None:
            P_ = lev["P"]
            self.K.restrict_scatter(*plan, P_.indptr, P_.indices, P_.data, b, out)
        else:
            R_ = lev["R"]
            self.K.csr_mm(R_.indptr, R_.indices, R_.data, b, out, False)

    def _cycle(self, k, b, out, work):
        """out = the V-cycle from level k applied to b (out must not alias b)."""
        if k == len(self.levels):
            _cholesky_solve_block(*self.coarse, b, out)
            return
        lev = self.levels[k]
        args = (lev["indptr"], lev["indices"], lev["data"], lev["diag"], lev["w"])
        K = self.K
        x, res, coarse_b, coarse_x = work[k]
        K.pre_smooth(*args, b, x, res)  # x = w b (one Jacobi step from 0), res = b - A x
        P_ = lev["P"]
        self._restrict(lev, res, coarse_b)
        self._cycle(k + 1, coarse_b, coarse_x, work)
        K.csr_mm(P_.indptr, P_.indices, P_.data, coarse_x, x, True)
        K.post_smooth(*args, b, x, out)  # out = x + w (b - A x)

    def apply_to(self, R, Z):
        """Z = M R for an (n, r) block (Z may be a view, e.g. the own rows of a longer
        array; it must not alias R)."""
        if self._split is not None:  # decoupled rows exactly, the hierarchy on the rest
            keep, iso, inv = self._split
            Z[iso] = R[iso] * inv[:, None]
            if keep.size:
                Zk = np.empty((keep.size, R.shape[1]))
                self._apply(np.ascontiguousarray(R[keep]), Zk)
                Z[keep] = Zk
            return
        self._apply(R, Z)

    def _apply(self, R, Z):
        if not self.levels:
            if Z.dtype != np.float64:  # the substitutions accumulate in their output
                Z64 = np.empty(R.shape)
                _cholesky_solve_block(*self.coarse, R, Z64)
                Z[...] = Z64
                return
            _cholesky_solve_block(*self.coarse, R, Z)
        elif self.additive:
            self._additive(R, Z, self._work(R.shape[1]))
        else:
            self._cycle(0, R, Z, self._work(R.shape[1]))

    def _additive(self, b, out, work, part_rz=None, part_rr=None):
        """out = W b + P M_1 P' b: the finest level additive (its Jacobi weights W plus the
        coarse correction, the V-cycle from level 1), so no product with the finest matrix.
        A sum of two SPD operators: SPD, a valid PCG preconditioner. Weaker per step than
        the V-cycle, but each outer iteration of a block solve then makes one pass over
        L_UU instead of three; see ``precond`` in ``fit_bcd``. With ``part_rz, part_rr``:
        the finest level fused with the b*out and b*b chunk sums (``_additive_dots``)."""
        lev = self.levels[0]
        _, _, coarse_b, coarse_x = work[0]
        P_ = lev["P"]
        self._restrict(lev, b, coarse_b)
        self._cycle(1, coarse_b, coarse_x, work)
        if part_rz is not None:
            self.K.additive_dots(lev["w"], b, P_.indptr, P_.indices, P_.data, coarse_x, out,
                                 part_rz, part_rr)
            return
        self.K.scale_rows(lev["w"], b, out)
        self.K.csr_mm(P_.indptr, P_.indices, P_.data, coarse_x, out, True)

    def apply_dots(self, R, Z, part_rz, part_rr):
        """Z = M R with the R*Z and R*R chunk sums (``_dots``). The additive cycle's finest
        level, which only scales R and adds the prolongated coarse correction, is fused with
        the sums (``_additive_dots``: the same numbers as ``apply_to`` then ``_dots``, in one
        pass over the rows instead of three; at n = 1e6 about 20 ms of a 0.22 s outer
        iteration, bench/RESULTS.md)."""
        if self._split is None and self.levels and self.additive:
            self._additive(R, Z, self._work(R.shape[1]), part_rz, part_rr)
            return
        self.apply_to(R, Z)
        self.K.dots(R, Z, part_rz, part_rr)


# --------------------------------------------------------------------------------------------
# block PCG
# --------------------------------------------------------------------------------------------

def pcg_loop(precondition, matvec, update, B_norm, *, rtol: float, maxiter: int) -> int:
    """Warm-started PCG on every column at once, written against three operations so that
    one loop serves the in-process solve and the partitioned (Dask) one:

    precondition() -> (rz, rr)        Z = M R; per-column R'Z and R'R
    matvec(beta) -> pq                P = Z (beta None) or Z + beta P; Q = A P; per-column P'Q
    update(alpha, precondition) -> (rz, rr) or None
                                      X += alpha P, R -= alpha Q, then (if asked) Z = M R

    Stops when every column has ||R_c|| <= rtol ||B_c|| (``B_norm`` None: the initial
    residual's norms) or after ``maxiter`` iterations. Returns the number of iterations.
    """
    rz, rr = precondition()
    target = rtol * (np.sqrt(rr) if B_norm is None else B_norm)
    if np.all(np.sqrt(rr) <= target):
        return 0
    it = 0
    beta = None
    while it < maxiter:
        it += 1
        pq = matvec(beta)
        alpha = np.where(pq > 0, rz / np.where(pq > 0, pq, 1.0), 0.0)
        if it == maxiter:  # no next iteration: skip the preconditioner
            update(alpha, False)
            break
        rz_new, rr = update(alpha, True)
        if np.all(np.sqrt(rr) <= target):
            break
        beta = np.where(rz > 0, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        rz = rz_new
    return it


def block_pcg(A_off, A_diag, M, X, R, B_norm, *, rtol: float, maxiter: int, work=None):
    """Warm-started PCG on every column of A X = B, given the residual R = B - A X.

    X and R are updated in place. Stops when every column has ||R_c|| <= rtol ||B_c|| or after
    ``maxiter`` iterations. Returns the number of iterations.
    """
    n, r = X.shape
    n_ch = (n + RB - 1) // RB
    if work is None:
        work = (np.empty_like(X), np.empty_like(X), np.empty_like(X))
    Z, P, Q = work
    part_a = np.empty((n_ch, r))
    part_b = np.empty((n_ch, r))

    def precondition():
        M.apply_dots(R, Z, part_a, part_b)
        return _colsum(part_a), _colsum(part_b)

    def matvec(beta):
        if beta is None:
            P[...] = Z
        else:
            _direction(P, Z, beta)
        _matvec_dot(A_off.indptr, A_off.indices, A_off.data, A_diag, P, Q, part_a)
        return _colsum(part_a)

    def update(alpha, again):
        _cg_update(X, R, P, Q, alpha)
        return precondition() if again else None

    return pcg_loop(precondition, matvec, update, B_norm, rtol=rtol, maxiter=maxiter)


def check_method_loss(loss: str):
    if loss == "linear":
        raise ValidationError(
            "method: 'block' solves the unconstrained rows as one linear system, which the "
            "linear loss's ball constraints ||v_i|| <= b rule out; use method='sweeps' (or "
            "'auto') for loss='linear'"
        )


@njit(nogil=True, cache=True, parallel=True)
def _neg_residual_rows(n_free, indptr, indices, data, diag, V, X, R, dinv, part_xr, part_g):
    """R = -(L V)_U for the first n_free rows (the exact CG residual of L_UU X = -L_UC V_C,
    with X = V[:n_free] in float64), fused with chunk sums of X*R and ||dinv R||^2."""
    r = V.shape[1]
    n_ch = (n_free + RB - 1) // RB
    nnz = indptr[n_free]
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n_free)):
            prefetch_ahead(indptr, indices, i, V, nnz)
            d = np.float64(diag[i])
            for c in range(r):
                q[c] = -d * X[i, c]
            _add_row_products(i, indptr, indices, data, V, q, r, -1.0, _madd)
            s = dinv[i]
            for c in range(r):
                R[i, c] = q[c]
                a += X[i, c] * q[c]
                b += (s * q[c]) * (s * q[c])
        part_xr[ch] = a
        part_g[ch] = b


@njit(nogil=True, cache=True, parallel=True)
def _copy_delta(X, Xold, V, copy, set_old, n2_part, d2_part):
    """V[:n] = X (cast to V's dtype) and X = that rounded value (``copy`` False: X is V's
    own float64 rows, nothing to write); chunk sums of ||X||^2 and ||X - Xold||^2; Xold = X
    if ``set_old`` (else Xold is the start of the outer iteration kept elsewhere: Vprev)."""
    n, r = X.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                if copy:
                    V[i, c] = X[i, c]
                    x = np.float64(V[i, c])
                    X[i, c] = x
                else:
                    x = X[i, c]
                dd = x - Xold[i, c]
                if set_old:
                    Xold[i, c] = x
                a += x * x
                b += dd * dd
        n2_part[ch] = a
        d2_part[ch] = b


@njit(nogil=True, cache=True, inline="always")
def _row_times_step(i, indptr, indices, data, diag, V, Vprev, q):
    """q = (L D)_i for D = V - Vprev (float64), D formed on the fly (as _row_times)."""
    r = V.shape[1]
    d = np.float64(diag[i])
    for c in range(r):
        q[c] = d * (np.float64(V[i, c]) - Vprev[i, c])
    # four neighbours per pass over q, as _add_row_products (the same roundings)
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
        for c in range(r):
            q[c] = ((((q[c] + w0 * (np.float64(V[k0, c]) - Vprev[k0, c]))
                      + w1 * (np.float64(V[k1, c]) - Vprev[k1, c]))
                     + w2 * (np.float64(V[k2, c]) - Vprev[k2, c]))
                    + w3 * (np.float64(V[k3, c]) - Vprev[k3, c]))
        p += 4
    while p < end:
        k = indices[p]
        w = np.float64(data[p])
        for c in range(r):
            q[c] += w * (np.float64(V[k, c]) - Vprev[k, c])
        p += 1


@njit(nogil=True, cache=True, parallel=True)
def _direction_LD(uc_ptr, uc_idx, uc_data, nu, indptr, indices, data, diag, V, Vprev,
                  Q, alpha, use_q, LD, S, LS, part_a, part_b, part):
    """LD = L D for LD's rows (the own rows), D = V - Vprev (float64; never stored: formed
    where it is read), with chunk sums of <LD, V> and <LD, D>, and in the same pass those
    of <LS, V>, <LD, S>, <LS, S> (part[:, 0..2]) for the subspace search.

    Rows i >= nu take a row product with D. The first ``nu`` rows (0 for the plain product)
    are U rows after a one-step PCG: with V in float64 they moved by exactly the CG step
    alpha P, and Q = L_UU P, so (L D)_U = alpha Q + L_UC D_C -- only their few constrained
    neighbours (``uc_*``: the U rows' entries in C columns, local numbering). ``use_q``
    False: the PCG took no step (D_U = 0)."""
    r = V.shape[1]
    n = LD.shape[0]
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        a2 = 0.0
        b2 = 0.0
        e2 = 0.0
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            if i < nu:
                for c in range(r):
                    q[c] = alpha[c] * Q[i, c] if use_q else 0.0
                for p in range(uc_ptr[i], uc_ptr[i + 1]):
                    k = uc_idx[p]
                    w = uc_data[p]
                    for c in range(r):
                        q[c] += w * (np.float64(V[k, c]) - Vprev[k, c])
            else:
                _row_times_step(i, indptr, indices, data, diag, V, Vprev, q)
            for c in range(r):
                LD[i, c] = q[c]
                v = np.float64(V[i, c])
                a += q[c] * v
                b += q[c] * (v - Vprev[i, c])
                sc = np.float64(S[i, c])
                lsc = np.float64(LS[i, c])
                a2 += lsc * v
                b2 += q[c] * sc
                e2 += lsc * sc
        part_a[ch] = a
        part_b[ch] = b
        part[ch, 0] = a2
        part[ch, 1] = b2
        part[ch, 2] = e2


@njit(nogil=True, cache=True, parallel=True)
def _residual_dots(R, X, dinv, part_xr, part_g):
    """Chunk sums of X*R and ||dinv R||^2 of a residual R as it is (a resumed fit's; as
    :func:`_neg_residual_rows` and the residual update of :func:`_subspace_step` sum)."""
    n_free, r = R.shape
    n_ch = (n_free + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n_free)):
            s = dinv[i]
            for c in range(r):
                q = R[i, c]
                a += X[i, c] * q
                b += (s * q) * (s * q)
        part_xr[ch] = a
        part_g[ch] = b


@njit(nogil=True, cache=True, parallel=True)
def _subspace_step(V, Vprev, LD, S, LS, s1, s2, part, R, Q, alpha, use_q, dinv, res,
                   part_xr, part_g):
    """V += s1 D + s2 S with D = V - Vprev; then the outer iteration's whole step
    S <- (1 + s1) D + s2 S and LS <- (1 + s1) LD + s2 LS (stored in V's dtype, so a resumed
    fit reproduces them), with chunk sums of ||S||^2 and ||V||^2 over the own rows (LD's).
    Halo rows (beyond LD's) get the same V and S updates, so a partition's copies stay equal
    to their owners' rows. Vprev becomes the new V (the next outer iteration's start, as
    :func:`_save` would copy it) in the same pass.

    ``res``: in the same pass, the residual of R's rows (the own U rows) without a product
    with L: V moved from Vprev by the whole step S (LS = L S, just updated), so
    -(L V)_U = R_start - (L S)_U, and after a one-step PCG R holds R_start - alpha Q
    (``use_q``); with its chunk sums of X*R and ||dinv R||^2 (X = V's U rows)."""
    n_all, r = V.shape
    n = LD.shape[0]
    for i in prange(n, n_all):
        for c in range(r):
            sc = np.float64(S[i, c])
            v = np.float64(V[i, c])
            d = v - Vprev[i, c]
            V[i, c] = v + s1 * d + s2 * sc
            S[i, c] = (1.0 + s1) * d + s2 * sc
            Vprev[i, c] = V[i, c]
    n_ch = (n + RB - 1) // RB
    nu = R.shape[0] if res else 0
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        xr = 0.0
        g = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                sc = np.float64(S[i, c])
                v = np.float64(V[i, c])
                d = v - Vprev[i, c]
                V[i, c] = v + s1 * d + s2 * sc
                S[i, c] = (1.0 + s1) * d + s2 * sc
                LS[i, c] = (1.0 + s1) * LD[i, c] + s2 * np.float64(LS[i, c])
                x = np.float64(S[i, c])
                a += x * x
                v = np.float64(V[i, c])
                Vprev[i, c] = v
                b += v * v
            if i < nu:  # -(L V)_U = R_start (- alpha Q) - (L S)_U
                w = dinv[i]
                for c in range(r):
                    q = R[i, c]
                    if use_q:
                        q += alpha[c] * Q[i, c]
                    q -= np.float64(LS[i, c])
                    R[i, c] = q
                    xr += np.float64(V[i, c]) * q
                    g += (w * q) * (w * q)
        part[ch, 0] = a
        part[ch, 1] = b
        if ch * RB < nu:
            part_xr[ch] = xr
            part_g[ch] = g


@njit(nogil=True, cache=True, inline="always")
def _pair_terms(acc, vi, vj, di, dj, si, sj):
    """One column's terms of a pair's (c0, c1, c2, c11, c22, c12) (see ``_pair_coeffs2``)
    added to ``acc``."""
    c0, c1, c2, c11, c22, c12 = acc
    return (c0 + vi * vj, c1 + (vi * dj + di * vj), c2 + (vi * sj + si * vj),
            c11 + di * dj, c22 + si * sj, c12 + (di * sj + si * dj))


@njit(nogil=True, cache=True, inline="always")
def _store_pair(out, k, t, acc):
    for m in range(6):
        out[k, m] = t * acc[m]


@njit(nogil=True, cache=True, parallel=True)
def _pair_coeffs2(pi, pj, pt, V, Vprev, S, out):
    """t z along V + s1 D + s2 S (D = V - Vprev) is
    c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12; out[:, 0..5] = (c0, c1, c2, c11,
    c22, c12) per pair."""
    r = V.shape[1]
    for k in prange(pi.shape[0]):  # pairs are independent: any thread count, same bits
        i = pi[k]
        j = pj[k]
        acc = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        for c in range(r):
            vi = np.float64(V[i, c])
            vj = np.float64(V[j, c])
            acc = _pair_terms(acc, vi, vj, vi - Vprev[i, c], vj - Vprev[j, c],
                              np.float64(S[i, c]), np.float64(S[j, c]))
        _store_pair(out, k, pt[k], acc)


# -- the outer step's direction from the one-step PCG (``D_FROM_CG``) --------------------------
# The U rows moved by exactly alpha Z in a one-step PCG (X += alpha Z, Z = P, V float64), so
# their step D_U is alpha Z, formed where it is read: Vprev and L D are stored for the C rows
# only (local rows: own U [0, nu), own C [nu, n_own), halo U [n_own, n_own + nfh), halo C
# after; ``Vp`` holds the own C rows, then the halo C rows).

@njit(nogil=True, cache=True, inline="always")
def _step_of(k, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh):
    """D[k, c] (float64) of local row k: alpha Z on U rows (own, then the halo's rows of Z;
    0 where the PCG took no step), V - Vp on C rows."""
    if k < nu:
        return alpha[c] * np.float64(Z[k, c]) if use_q else 0.0
    if k < n_own + nfh and k >= n_own:
        return alpha[c] * np.float64(Z[k - n_own + nu, c]) if use_q else 0.0
    return _c_step(k, c, V, Vp, nu, n_own, nfh)


@njit(nogil=True, cache=True, inline="always")
def _c_step(k, c, V, Vp, nu, n_own, nfh):
    """D[k, c] = V - Vp of a C row k (own, or the halo's)."""
    if k < n_own:
        return np.float64(V[k, c]) - Vp[k - nu, c]
    return np.float64(V[k, c]) - Vp[k - nu - nfh, c]


@njit(nogil=True, cache=True, parallel=True)
def _uc_products(ucr, uc_ptr, uc_idx, uc_data, V, Vp, nu, n_own, nfh, UCD):
    """UCD[s] = (L_UC D_C) of U row ucr[s] (the U rows with C neighbours, in order): the
    C rows' part of (L D)_U, formed once per outer iteration for the direction and the step
    while the few C rows are in cache. Read from the U rows' own passes, those gathers
    missed cache on every entry (137,000 entries at n = 1e6: 7-8 ms a pass)."""
    r = V.shape[1]
    for s in prange(ucr.shape[0]):
        i = ucr[s]
        for c in range(r):
            UCD[s, c] = 0.0
        for p in range(uc_ptr[i], uc_ptr[i + 1]):
            k = uc_idx[p]
            w = uc_data[p]
            for c in range(r):
                UCD[s, c] += w * _c_step(k, c, V, Vp, nu, n_own, nfh)


@njit(nogil=True, cache=True, parallel=True)
def _direction_cg(ucr, UCD, nu, n_own, nfh, indptr, indices, data, diag, V, Vp, Z, alpha,
                  use_q, Q, LDC, S, LS, part_a, part_b, part, upd, pend, n2_part):
    """:func:`_direction_LD` with D_U = alpha Z: the sums of <LD, V>, <LD, D>, <LS, V>,
    <LD, S>, <LS, S> over the own rows, with (L D)_U = alpha Q + L_UC D_C (``UCD`` of
    :func:`_uc_products` on the rows ``ucr``) formed and summed (not stored: the step forms
    it again) and (L D)_C stored in LDC (own C rows).

    ``pend`` (``FOLD_X_UPDATE``): the PCG's X += alpha Z is still to be taken on the U rows
    but ``upd`` (sorted; the C rows' U neighbours, moved before the C rows' updates): their
    V is read as V + alpha Z, rounded as that update rounds it, and the chunk sums of
    ||X||^2 over the U rows that the update would have formed go to ``n2_part``."""
    r = V.shape[1]
    n_ch = (n_own + RB - 1) // RB
    nb = ucr.shape[0]
    nup = upd.shape[0]
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        a2 = 0.0
        b2 = 0.0
        e2 = 0.0
        x2 = 0.0
        q = np.empty(r)
        d = np.empty(r)
        sb = np.searchsorted(ucr, ch * RB)
        su = np.searchsorted(upd, ch * RB)
        for i in range(ch * RB, min((ch + 1) * RB, n_own)):
            if i < nu:
                boundary = sb < nb and ucr[sb] == i
                moved = su < nup and upd[su] == i
                if moved:
                    su += 1
                take = pend and not moved  # V here is the start of the PCG's step
                # one pass over the row, the sums in the order of the general rows' below
                for c in range(r):
                    dz = alpha[c] * np.float64(Z[i, c]) if use_q else 0.0
                    qc = alpha[c] * Q[i, c] if use_q else 0.0
                    if boundary:
                        qc += UCD[sb, c]
                    v = np.float64(V[i, c]) + dz if take else np.float64(V[i, c])
                    if pend:
                        x2 += v * v
                    a += qc * v
                    b += qc * dz
                    sc = np.float64(S[i, c])
                    lsc = np.float64(LS[i, c])
                    a2 += lsc * v
                    b2 += qc * sc
                    e2 += lsc * sc
                if boundary:
                    sb += 1
                continue
            dg = np.float64(diag[i])
            for c in range(r):
                d[c] = np.float64(V[i, c]) - Vp[i - nu, c]
                q[c] = dg * d[c]
            for p in range(indptr[i], indptr[i + 1]):
                k = indices[p]
                w = np.float64(data[p])
                for c in range(r):
                    q[c] += w * _step_of(k, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh)
            for c in range(r):
                LDC[i - nu, c] = q[c]
                v = np.float64(V[i, c])
                a += q[c] * v
                b += q[c] * d[c]
                sc = np.float64(S[i, c])
                lsc = np.float64(LS[i, c])
                a2 += lsc * v
                b2 += q[c] * sc
                e2 += lsc * sc
        part_a[ch] = a
        part_b[ch] = b
        part[ch, 0] = a2
        part[ch, 1] = b2
        part[ch, 2] = e2
        if pend and ch * RB < nu:
            n2_part[ch] = x2


@njit(nogil=True, cache=True, parallel=True)
def _pair_coeffs2_cg(pi, pj, pt, V, Vp, S, Z, alpha, use_q, nu, n_own, nfh, out):
    """:func:`_pair_coeffs2` with the step D of :func:`_step_of`."""
    r = V.shape[1]
    for k in prange(pi.shape[0]):  # pairs are independent: any thread count, same bits
        i = pi[k]
        j = pj[k]
        acc = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        for c in range(r):
            acc = _pair_terms(acc, np.float64(V[i, c]), np.float64(V[j, c]),
                              _step_of(i, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh),
                              _step_of(j, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh),
                              np.float64(S[i, c]), np.float64(S[j, c]))
        _store_pair(out, k, pt[k], acc)


@njit(nogil=True, cache=True, parallel=True)
def _subspace_step_cg(V, Vp, LDC, S, LS, s1, s2, part, R, Q, alpha, use_q, r_moved, dinv,
                      res, part_xr, part_g, ucr, UCD, Z, nu, n_own, nfh, upd, pend, LVC):
    """:func:`_subspace_step` with D_U = alpha Z: V += s1 D + s2 S, S <- (1 + s1) D + s2 S,
    LS <- (1 + s1) LD + s2 LS, Vp <- V on the C rows; ||S||^2 and ||V||^2 chunk sums over
    the own rows; ``res``: the residual R_start (- alpha Q where the step moved R) - (L S)_U
    with its sums. (L D)_U = alpha Q + L_UC D_C, the second term from ``UCD`` (formed before
    the C rows move: :func:`_uc_products`). The own C rows' sums continue the chunk the U
    rows left, so every chunk sums its rows in order. ``pend``: the PCG's X += alpha Z is
    taken here on the U rows but ``upd`` (as :func:`_direction_cg` reads them). ``LVC``
    (own C rows, or empty): (L V)_C += the new (L S)_C (``LV_FROM_STEP``)."""
    n_loc, r = V.shape
    carry = LVC.shape[0] > 0
    n_chu = (nu + RB - 1) // RB
    qa = alpha if use_q else np.zeros(r)  # alpha Z as read (0: the PCG took no step)
    ra = alpha if r_moved else np.zeros(r)  # alpha Q added back to R
    nb = ucr.shape[0]
    for ch in prange(n_chu):
        a = 0.0
        b = 0.0
        xr = 0.0
        g = 0.0
        ld = np.empty(r)
        sb = np.searchsorted(ucr, ch * RB)
        su = np.searchsorted(upd, ch * RB)
        nup = upd.shape[0]
        for i in range(ch * RB, min((ch + 1) * RB, nu)):
            moved = su < nup and upd[su] == i
            if moved:
                su += 1
            take = pend and not moved  # V here is the start of the PCG's step
            if use_q:
                for c in range(r):
                    ld[c] = alpha[c] * Q[i, c]
            else:
                ld[:] = 0.0
            if sb < nb and ucr[sb] == i:  # (L D)_i = alpha Q_i + (L_UC D_C)_i
                for c in range(r):
                    ld[c] += UCD[sb, c]
                sb += 1
            # one pass over the row (V, S, LS in float64 here: what is written is what a
            # read would give back)
            w = dinv[i]
            for c in range(r):
                dd = qa[c] * np.float64(Z[i, c])
                sc = S[i, c]
                v = V[i, c] + dd if take else V[i, c]
                vn = v + s1 * dd + s2 * sc
                sn = (1.0 + s1) * dd + s2 * sc
                ls = (1.0 + s1) * ld[c] + s2 * LS[i, c]
                V[i, c] = vn
                S[i, c] = sn
                LS[i, c] = ls
                a += sn * sn
                b += vn * vn
                if res:  # -(L V)_U = R_start (- alpha Q) - (L S)_U
                    q = R[i, c] + ra[c] * Q[i, c] if r_moved else R[i, c]
                    q -= ls
                    R[i, c] = q
                    xr += vn * q
                    g += (w * q) * (w * q)
        part[ch, 0] = a
        part[ch, 1] = b
        if res:
            part_xr[ch] = xr
            part_g[ch] = g
    for i in prange(n_own, n_loc):  # halo rows: V and S as their owners move them
        for c in range(r):
            dd = _step_of(i, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh)
            sc = np.float64(S[i, c])
            v = np.float64(V[i, c])
            V[i, c] = v + s1 * dd + s2 * sc
            S[i, c] = (1.0 + s1) * dd + s2 * sc
            if i >= n_own + nfh:
                Vp[i - nu - nfh, c] = V[i, c]
    n_ch = (n_own + RB - 1) // RB
    for ch in prange(nu // RB, n_ch):
        first = ch * RB < nu  # the chunk the U rows began
        a = part[ch, 0] if first else 0.0
        b = part[ch, 1] if first else 0.0
        for i in range(max(ch * RB, nu), min((ch + 1) * RB, n_own)):
            for c in range(r):
                sc = np.float64(S[i, c])
                v = np.float64(V[i, c])
                dd = v - Vp[i - nu, c]
                V[i, c] = v + s1 * dd + s2 * sc
                S[i, c] = (1.0 + s1) * dd + s2 * sc
                LS[i, c] = (1.0 + s1) * LDC[i - nu, c] + s2 * np.float64(LS[i, c])
                if carry:  # V = Vprev + S: (L V)_C = (L Vprev)_C + (L S)_C
                    LVC[i - nu, c] += np.float64(LS[i, c])
                x = np.float64(S[i, c])
                a += x * x
                v = np.float64(V[i, c])
                Vp[i - nu, c] = v
                b += v * v
        part[ch, 0] = a
        part[ch, 1] = b


@njit(nogil=True, cache=True, parallel=True)
def _update_rows(rows, X, P, alpha):
    """X[i] += alpha P[i] for i in ``rows`` (the PCG's update, as ``_cg_update_x_sums``
    rounds it, on those rows only)."""
    r = X.shape[1]
    for q in prange(rows.shape[0]):
        i = rows[q]
        for c in range(r):
            X[i, c] = X[i, c] + alpha[c] * P[i, c]


def subspace_search(a, B, C, gamma, loss_code):
    """argmin over (s1, s2) of  phi(s) = 2 a's + s'Bs + gamma sum [loss(z(s)) - loss(z(0))],
    z(s) = c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12 (C's columns). Returns
    (s1, s2, phi) with phi < 0, or zeros when nothing decreases the objective.

    phi is smooth for the square and squared-hinge losses, so a damped Newton method on its
    exact gradient and Hessian finds the minimiser in a few steps:

    - square loss: the pair sum is a quartic polynomial in s, whose coefficients one pass
      over the pairs gives (:func:`_pair_gram`); Newton then costs nothing per step;
    - squared hinge: each Newton step is one pass (:func:`_pair_derivs`);
    - hinge (not differentiable): :func:`subspace_search_nelder_mead` with its trials
      evaluated on a box around the line search's point (:class:`BoxedPairSum`: the pairs
      that cannot cross their kink inside the box are summed into one quadratic once);
    - linear loss (not solved by block solves; kept for completeness): the plain
      :func:`subspace_search_nelder_mead`.

    Either way the returned step's phi is evaluated exactly, pair by pair (:func:`_phi_pairs`),
    and only a decrease is accepted, so the fit stays monotone. At the papers' protocol
    (1.2 pairs per point) the derivative-free search took 150-220 passes over the pairs per
    outer iteration; these take 1-2 (polynomial) or about 5-30 (squared hinge).
    With S = 0 (the first outer iteration, or after a restart) the search is along D only.
    """
    if loss_code not in (1, 2):
        return subspace_search_nelder_mead(a, B, C, gamma, loss_code, boxed=loss_code == 0)
    C = np.ascontiguousarray(C, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    dims = 2 if B[1, 1] > 0 else 1
    if loss_code == 2:
        Q = _pair_gram(C)

        def fun(s):
            return _poly_phi(a, B, Q, gamma, s[0], s[1] if dims == 2 else 0.0, dims)
    else:
        def fun(s):
            s2 = s[1] if dims == 2 else 0.0
            f, g1, g2, h11, h12, h22 = _pair_derivs(C, s[0], s2, loss_code)
            return _assemble(a, B, gamma, f, g1, g2, h11, h12, h22, s[0], s2, dims)

    s = _damped_newton(fun, dims)
    s1, s2 = float(s[0]), float(s[1]) if dims == 2 else 0.0
    if (s1 == 0.0 and s2 == 0.0) or not (np.isfinite(s1) and np.isfinite(s2)):
        return 0.0, 0.0, 0.0
    v = (2.0 * (a[0] * s1 + a[1] * s2) + B[0, 0] * s1 * s1 + 2.0 * B[0, 1] * s1 * s2
         + B[1, 1] * s2 * s2 + gamma * _phi_pairs(C, s1, s2, loss_code))
    return (s1, s2, v) if v < 0.0 and np.isfinite(v) else (0.0, 0.0, 0.0)


def _assemble(a, B, gamma, f, g1, g2, h11, h12, h22, s1, s2, dims):
    """(phi, gradient, Hessian) in the first ``dims`` coordinates from the pair sums."""
    val = (2.0 * (a[0] * s1 + a[1] * s2) + B[0, 0] * s1 * s1 + 2.0 * B[0, 1] * s1 * s2
           + B[1, 1] * s2 * s2 + gamma * f)
    g = np.array([2.0 * (a[0] + B[0, 0] * s1 + B[0, 1] * s2) + gamma * g1,
                  2.0 * (a[1] + B[0, 1] * s1 + B[1, 1] * s2) + gamma * g2])
    H = np.array([[2.0 * B[0, 0] + gamma * h11, 2.0 * B[0, 1] + gamma * h12],
                  [2.0 * B[0, 1] + gamma * h12, 2.0 * B[1, 1] + gamma * h22]])
    return val, g[:dims], H[:dims, :dims]


def _damped_newton(fun, dims, max_iter=100):
    """Minimise from s = 0 by Newton steps damped Levenberg-Marquardt style: the shift mu
    makes H + mu I positive definite and grows until the step lowers the value, so every
    accepted step decreases it. Stops when a step no longer changes s (relative 1e-12) or
    the value, or when the model predicts a decrease below phi's rounding."""
    s = np.zeros(dims)
    val, g, H = fun(s)
    mu = 0.0
    eye = np.eye(dims)
    for _ in range(max_iter):
        if not np.all(np.isfinite(g)) or not np.any(g):
            break
        scale = max(float(np.abs(H).max()), 1e-300)
        lam = float(np.linalg.eigvalsh(H).min())
        if lam <= 1e-14 * scale:
            mu = max(mu, 1e-12 * scale - lam)
        accepted = False
        for _ in range(60):
            try:
                d = np.linalg.solve(H + mu * eye, -g)
            except np.linalg.LinAlgError:
                d = None
            if d is not None and np.all(np.isfinite(d)):
                # the quadratic model's decrease; below rounding of phi, stop (a trial pass
                # would only see rounding noise)
                pred = -float(g @ d) - 0.5 * float(d @ H @ d)
                if pred <= 1e-15 * max(abs(val), 1e-300):
                    break
                nv, ng, nH = fun(s + d)
                if nv <= val:
                    accepted = True
                    break
            mu = max(4.0 * mu, 1e-10 * scale)
        if not accepted:
            break
        s = s + d
        small = float(np.abs(d).max()) <= 1e-12 * max(float(np.abs(s).max()), 1e-300)
        unchanged = nv == val
        val, g, H = nv, ng, nH
        mu *= 0.25
        if small or unchanged:
            break
    return s


@njit(nogil=True, cache=True)
def _pair_gram_rows(C, start, stop, Q):
    """Q (upper triangle) += sum of p p' over pairs start..stop-1 (see :func:`_pair_gram`)."""
    p = np.empty(6)
    for k in range(start, stop):
        p[0] = 1.0 - C[k, 0]
        for q in range(1, 6):
            p[q] = -C[k, q]
        for u in range(6):
            for v in range(u, 6):
                Q[u, v] += p[u] * p[v]


@njit(nogil=True, cache=True, parallel=True)
def _pair_gram(C):
    """The square loss's pair sum as a polynomial in s, from one pass over the pairs: sum
    (1 - z)^2 = m' Q m with m = (1, s1, s2, s1^2, s2^2, s1 s2), Q = sum p p' and
    p = (1 - c0, -c1, -c2, -c11, -c22, -c12). Returns the 6 x 6 Q. Blocks of SUM_BLOCK
    pairs on numba's threads, added in block order (the same bits for any thread count)."""
    m = C.shape[0]
    nb = (m + SUM_BLOCK - 1) // SUM_BLOCK
    part = np.zeros((nb, 6, 6))
    for b in prange(nb):
        _pair_gram_rows(C, b * SUM_BLOCK, min((b + 1) * SUM_BLOCK, m), part[b])
    Q = np.zeros((6, 6))
    for b in range(nb):
        for u in range(6):
            for v in range(u, 6):
                Q[u, v] += part[b, u, v]
    for u in range(6):
        for v in range(u):
            Q[u, v] = Q[v, u]
    return Q


def _poly_phi(a, B, Q, gamma, s1, s2, dims):
    """(phi, gradient, Hessian) of the square loss from :func:`_pair_gram`'s polynomial:
    the pair sum minus its value at s = 0 is m'Qm - Q[0, 0]."""
    m = np.array([1.0, s1, s2, s1 * s1, s2 * s2, s1 * s2])
    dm1 = np.array([0.0, 1.0, 0.0, 2.0 * s1, 0.0, s2])
    dm2 = np.array([0.0, 0.0, 1.0, 0.0, 2.0 * s2, s1])
    Qm = Q @ m
    f = float(m @ Qm) - Q[0, 0]
    g1, g2 = 2.0 * float(dm1 @ Qm), 2.0 * float(dm2 @ Qm)
    h11 = 2.0 * (float(dm1 @ Q @ dm1) + 2.0 * Qm[3])  # d2m/ds1^2 = 2 e_3
    h22 = 2.0 * (float(dm2 @ Q @ dm2) + 2.0 * Qm[4])  # d2m/ds2^2 = 2 e_4
    h12 = 2.0 * (float(dm1 @ Q @ dm2) + Qm[5])  # d2m/ds1ds2 = e_5
    return _assemble(a, B, gamma, f, g1, g2, h11, h12, h22, s1, s2, dims)


@njit(nogil=True, cache=True)
def _pair_derivs_rows(C, s1, s2, loss_code, start, stop, out):
    """out[0..5] = (f, g1, g2, h11, h12, h22) summed over pairs start..stop-1."""
    f = 0.0
    g1 = 0.0
    g2 = 0.0
    h11 = 0.0
    h12 = 0.0
    h22 = 0.0
    for k in range(start, stop):
        z0 = C[k, 0]
        c11 = C[k, 3]
        c22 = C[k, 4]
        c12 = C[k, 5]
        z = (z0 + s1 * (C[k, 1] + s1 * c11) + s2 * (C[k, 2] + s2 * c22) + s1 * s2 * c12)
        z1 = C[k, 1] + 2.0 * s1 * c11 + s2 * c12
        z2 = C[k, 2] + 2.0 * s2 * c22 + s1 * c12
        if loss_code == 2:
            e = 1.0 - z
            e0 = 1.0 - z0
            f += e * e - e0 * e0
            l1 = -2.0 * e
            l2 = 2.0
        elif loss_code == 1:
            h = max(1.0 - z, 0.0)
            h0 = max(1.0 - z0, 0.0)
            f += h * h - h0 * h0
            l1 = -2.0 * h
            l2 = 2.0 if h > 0.0 else 0.0
        else:
            l1 = 0.0
            l2 = 0.0
        g1 += l1 * z1
        g2 += l1 * z2
        h11 += l2 * z1 * z1 + 2.0 * l1 * c11
        h22 += l2 * z2 * z2 + 2.0 * l1 * c22
        h12 += l2 * z1 * z2 + l1 * c12
    out[0] = f
    out[1] = g1
    out[2] = g2
    out[3] = h11
    out[4] = h12
    out[5] = h22


@njit(nogil=True, cache=True, parallel=True)
def _pair_derivs(C, s1, s2, loss_code):
    """sum over pairs of loss(z(s)) - loss(z(0)) with its gradient and Hessian in s, for
    the squared hinge (``loss_code`` 1; generalised Hessian: the active pairs') or the square
    loss (2). Returns (f, g1, g2, h11, h12, h22). Blocks of SUM_BLOCK pairs on numba's
    threads, added in block order (the same bits for any thread count)."""
    m = C.shape[0]
    nb = (m + SUM_BLOCK - 1) // SUM_BLOCK
    part = np.zeros((nb, 6))
    for b in prange(nb):
        _pair_derivs_rows(C, s1, s2, loss_code, b * SUM_BLOCK, min((b + 1) * SUM_BLOCK, m),
                          part[b])
    t = np.zeros(6)
    for b in range(nb):
        for q in range(6):
            t[q] += part[b, q]
    return t[0], t[1], t[2], t[3], t[4], t[5]


def subspace_search_nelder_mead(a, B, C, gamma, loss_code, boxed=False, compiled=True):
    """argmin over (s1, s2) of  phi(s) = 2 a's + s'Bs + gamma sum [loss(z(s)) - loss(z(0))],
    z(s) = c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12 (C's columns), starting from
    the exact line search along the first direction. Returns (s1, s2, phi) with phi < 0, or
    zeros when nothing decreases the objective.

    Derivative-free (a line search, then Nelder-Mead; each trial a pass over the pairs, about
    150-350 of them per call): the hinge's path, and the slow reference of
    :func:`subspace_search`'s Newton solvers.

    ``boxed`` (the hinge): the line search's bracket and Nelder-Mead's trials near the line
    search's point are evaluated by :class:`BoxedPairSum`, which visits only the pairs that
    may cross their kink there (the same function up to rounding); the returned phi is the
    exact pass over every pair, and only a decrease is returned.

    ``compiled``: Nelder-Mead runs as one compiled call (:func:`_nelder_mead_2d`, scipy's
    algorithm and arithmetic step for step, the trials' pair sums in :func:`_phi_pairs`'s
    order), not ``scipy.optimize.minimize``, whose Python loop and per-trial calls cost
    about 25 us per trial: the same simplex and the same point, bit for bit
    (``tests/test_blocksolve.py``). ``False`` runs scipy's, the reference.
    """
    C = np.ascontiguousarray(C)
    base = _loss_sum(C[:, 0], loss_code)

    def smooth(s1, s2):
        return (2.0 * (a[0] * s1 + a[1] * s2) + B[0, 0] * s1 * s1 + 2.0 * B[0, 1] * s1 * s2
                + B[1, 1] * s2 * s2)

    def phi(s):
        s1, s2 = float(s[0]), float(s[1])
        return smooth(s1, s2) + gamma * _phi_pairs(C, s1, s2, loss_code)

    def on_box(centre, half):
        box = BoxedPairSum(C, centre, half)

        def phi_box(s):
            s1, s2 = float(s[0]), float(s[1])
            return smooth(s1, s2) + gamma * box(s1, s2)
        return phi_box

    bracket = None
    if boxed:
        def bracket(lo, hi):
            f = on_box((0.5 * (lo + hi), 0.0), (0.5 * (hi - lo), 0.0))
            return lambda t: f((t, 0.0))

    if compiled:
        s1, v1 = _plane_line_search(a, B, C, gamma, loss_code, base, boxed)
    else:
        s1, v1 = line_search(a[0], B[0, 0], C[:, 0], C[:, 1], C[:, 3], gamma, loss_code,
                             base=base, phi=lambda t: phi((t, 0.0)), bracket_phi=bracket)
    best = (s1, 0.0, v1)
    exact = not boxed  # whether best's value is the pass over every pair
    if B[1, 1] > 0:
        scale = max(abs(s1), 1e-3)
        simplex = np.array([[s1, 0.0], [s1 + 0.5 * scale, 0.0], [s1, 0.5 * scale]])
        xatol, fatol = 1e-7 * scale, 1e-15 * max(1.0, abs(base))
        centre, half = (s1, 0.0), (2.0 * scale, 2.0 * scale)
        if compiled:
            x = np.empty(2)
            _nelder_mead_2d(*_trial_args(a, B, C, gamma, loss_code),
                            *_box_args(C, centre, half, boxed), simplex, float(xatol),
                            float(fatol), 600, x)
        else:
            from scipy.optimize import minimize

            trial = on_box(centre, half) if boxed else phi
            x = minimize(trial, np.array([s1, 0.0]), method="Nelder-Mead",
                         options={"xatol": xatol, "fatol": fatol, "maxiter": 600,
                                  "initial_simplex": simplex}).x
        v = phi(x)
        if v < best[2]:
            best, exact = (float(x[0]), float(x[1]), v), True
    if not exact and best[2] < 0.0:  # the line search's value came from the box: exact now
        best = (best[0], best[1], phi((best[0], best[1])))
    return best if best[2] < 0.0 else (0.0, 0.0, 0.0)


def _plane_line_search(a, B, C, gamma, loss_code, base, boxed):
    """:func:`line_search` along the plane's first direction as
    :func:`subspace_search_nelder_mead` calls it (phi = its trial at (s, 0); ``boxed``: the
    bracket on a :class:`BoxedPairSum`), with the grid's trials and the bounded Brent search
    compiled (:func:`_brent_bounded`): the same step and value, bit for bit."""
    args = _trial_args(a, B, C, gamma, loss_code)
    hi, grid = _line_grid(float(a[0]), float(B[0, 0]), gamma, base)
    vals = np.empty(16)
    _line_trials(grid, *args, *_box_args(C, None, None, False), vals)
    k, lo_b, hi_b = _line_bracket(grid, vals, hi)
    box = _box_args(C, (0.5 * (lo_b + hi_b), 0.0), (0.5 * (hi_b - lo_b), 0.0), boxed)
    x, fx = _brent_bounded(float(lo_b), float(hi_b), float(1e-6 * hi_b), 500, *args, *box)
    s, v = (float(x), float(fx)) if fx < vals[k] else (float(grid[k]), float(vals[k]))
    return (s, v) if v < 0.0 else (0.0, 0.0)


def _trial_args(a, B, C, gamma, loss_code):
    """The search's data as the compiled trials take it (:func:`_nm_trial`)."""
    return (float(a[0]), float(a[1]), float(B[0, 0]), float(B[0, 1]), float(B[1, 1]),
            float(gamma), C, int(loss_code))


def _box_args(C, centre, half, boxed):
    """(boxed, rest, k, lo, hi) of :func:`_nm_trial`: a :class:`BoxedPairSum` on the box of
    ``centre`` and ``half`` when ``boxed``, else empty stand-ins (every trial sums all
    pairs)."""
    if not boxed:
        return False, C[:0], np.zeros(6), np.zeros(2), np.zeros(2)
    box = BoxedPairSum(C, centre, half)
    return True, box.rest, np.array(box.k), np.array(box.lo), np.array(box.hi)


@njit(nogil=True, cache=True)
def _line_trials(grid, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi,
                 out):
    """out[q] = the plane search's trial at (grid[q], 0).  OUT."""
    for q in range(grid.shape[0]):
        out[q] = _nm_trial(grid[q], 0.0, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed,
                           rest, k, lo, hi)


@njit(nogil=True, cache=True)
def _brent_bounded(x1, x2, xatol, maxfun, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed,
                   rest, k, lo, hi):
    """scipy.optimize.minimize_scalar(method='bounded') on [x1, x2] of the plane search's
    trial at (s, 0), step for step (scipy's ``_minimize_scalar_bounded``: the same golden
    and parabolic steps by the same expressions). Returns (x, f(x))."""
    sqrt_eps = np.sqrt(2.2e-16)
    golden_mean = 0.5 * (3.0 - np.sqrt(5.0))
    a, b = x1, x2
    fulc = a + golden_mean * (b - a)
    nfc, xf = fulc, fulc
    rat = 0.0
    e = 0.0
    x = xf
    fx = _nm_trial(x, 0.0, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi)
    num = 1
    ffulc = fx
    fnfc = fx
    xm = 0.5 * (a + b)
    tol1 = sqrt_eps * np.abs(xf) + xatol / 3.0
    tol2 = 2.0 * tol1
    while np.abs(xf - xm) > (tol2 - 0.5 * (b - a)):
        golden = True
        if np.abs(e) > tol1:
            golden = False
            r = (xf - nfc) * (fx - ffulc)
            q = (xf - fulc) * (fx - fnfc)
            p = (xf - fulc) * q - (xf - nfc) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = np.abs(q)
            r = e
            e = rat
            if (np.abs(p) < np.abs(0.5 * q * r)) and (p > q * (a - xf)) and (p < q * (b - xf)):
                rat = (p + 0.0) / q
                x = xf + rat
                if ((x - a) < tol2) or ((b - x) < tol2):
                    si = np.sign(xm - xf) + (1.0 if (xm - xf) == 0 else 0.0)
                    rat = tol1 * si
            else:
                golden = True
        if golden:
            if xf >= xm:
                e = a - xf
            else:
                e = b - xf
            rat = golden_mean * e
        si = np.sign(rat) + (1.0 if rat == 0 else 0.0)
        x = xf + si * max(np.abs(rat), tol1)
        fu = _nm_trial(x, 0.0, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo,
                       hi)
        num += 1
        if fu <= fx:
            if x >= xf:
                a = xf
            else:
                b = xf
            fulc, ffulc = nfc, fnfc
            nfc, fnfc = xf, fx
            xf, fx = x, fu
        else:
            if x < xf:
                a = x
            else:
                b = x
            if (fu <= fnfc) or (nfc == xf):
                fulc, ffulc = nfc, fnfc
                nfc, fnfc = x, fu
            elif (fu <= ffulc) or (fulc == xf) or (fulc == nfc):
                fulc, ffulc = x, fu
        xm = 0.5 * (a + b)
        tol1 = sqrt_eps * np.abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
        if num >= maxfun:
            break
    return xf, fx


#: Pairs up to which the compiled search sums them on the calling thread (the same blocks
#: and order as :func:`_phi_pairs`, so the same bits; a parallel region per trial costs more
#: than it saves on a few thousand pairs).
_SERIAL_PAIRS_MAX = 8 * SUM_BLOCK


@njit(nogil=True, cache=True)
def _phi_pairs_any(C, s1, s2, loss_code):
    """:func:`_phi_pairs`, on this thread when C is short: the same partial sums in the
    same order either way."""
    m = C.shape[0]
    if m > _SERIAL_PAIRS_MAX:
        return _phi_pairs(C, s1, s2, loss_code)
    tot = 0.0
    for start in range(0, m, SUM_BLOCK):
        tot += _phi_pair_rows(C, s1, s2, loss_code, start, min(start + SUM_BLOCK, m))
    return tot


@njit(nogil=True, cache=True)
def _nm_trial(s1, s2, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi):
    """One Nelder-Mead trial of :func:`subspace_search_nelder_mead`: ``phi`` or, ``boxed``,
    ``phi_box`` (:class:`BoxedPairSum` with constants ``k`` on [lo, hi]), the same
    expressions in the same order."""
    sm = (2.0 * (a0 * s1 + a1 * s2) + B00 * s1 * s1 + 2.0 * B01 * s1 * s2 + B11 * s2 * s2)
    if boxed and lo[0] <= s1 <= hi[0] and lo[1] <= s2 <= hi[1]:
        pairs = (k[0] - s1 * (k[1] + s1 * k[3]) - s2 * (k[2] + s2 * k[4]) - s1 * s2 * k[5]
                 + _phi_pairs_any(rest, s1, s2, 0))
    else:
        pairs = _phi_pairs_any(C, s1, s2, loss_code)
    return sm + gamma * pairs


@njit(nogil=True, cache=True, inline="always")
def _nm_less(x, y):
    """x < y in numpy's sort order (NaN last)."""
    return x < y or (np.isnan(y) and not np.isnan(x))


@njit(nogil=True, cache=True, inline="always")
def _nm_sort(sim, fsim):
    """Sort the three vertices by value: numpy's argsort on three entries (an insertion
    sort, stable), as scipy's ``np.argsort(fsim)`` and ``np.take``."""
    for j in range(1, 3):
        f = fsim[j]
        x0 = sim[j, 0]
        x1 = sim[j, 1]
        i = j - 1
        while i >= 0 and _nm_less(f, fsim[i]):
            fsim[i + 1] = fsim[i]
            sim[i + 1, 0] = sim[i, 0]
            sim[i + 1, 1] = sim[i, 1]
            i -= 1
        fsim[i + 1] = f
        sim[i + 1, 0] = x0
        sim[i + 1, 1] = x1


@njit(nogil=True, cache=True)
def _nelder_mead_2d(a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest, k, lo, hi,
                    simplex, xatol, fatol, maxiter, x):
    """scipy.optimize.minimize(method='Nelder-Mead') in two dimensions (rho 1, chi 2, psi
    0.5, sigma 0.5; no bounds, no maxfev) from ``simplex`` on :func:`_nm_trial`, step for
    step: the same reflections, expansions, contractions and shrinks, computed by the same
    expressions, and the same stopping test. OUT: x, the best vertex. Returns its value."""
    sim = simplex.copy()
    fsim = np.empty(3)
    for j in range(3):
        fsim[j] = _nm_trial(sim[j, 0], sim[j, 1], a0, a1, B00, B01, B11, gamma, C,
                            loss_code, boxed, rest, k, lo, hi)
    _nm_sort(sim, fsim)
    iterations = 1
    while iterations < maxiter:
        dx = 0.0
        df = 0.0
        for j in range(1, 3):
            dx = max(dx, abs(sim[j, 0] - sim[0, 0]), abs(sim[j, 1] - sim[0, 1]))
            df = max(df, abs(fsim[0] - fsim[j]))
        if dx <= xatol and df <= fatol:
            break
        xb0 = (sim[0, 0] + sim[1, 0]) / 2
        xb1 = (sim[0, 1] + sim[1, 1]) / 2
        xr0 = 2.0 * xb0 - sim[2, 0]
        xr1 = 2.0 * xb1 - sim[2, 1]
        fxr = _nm_trial(xr0, xr1, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed, rest,
                        k, lo, hi)
        if fxr < fsim[0]:
            xe0 = 3.0 * xb0 - 2.0 * sim[2, 0]
            xe1 = 3.0 * xb1 - 2.0 * sim[2, 1]
            fxe = _nm_trial(xe0, xe1, a0, a1, B00, B01, B11, gamma, C, loss_code, boxed,
                            rest, k, lo, hi)
            if fxe < fxr:
                sim[2, 0], sim[2, 1], fsim[2] = xe0, xe1, fxe
            else:
                sim[2, 0], sim[2, 1], fsim[2] = xr0, xr1, fxr
        elif fxr < fsim[1]:
            sim[2, 0], sim[2, 1], fsim[2] = xr0, xr1, fxr
        else:
            shrink = False
            if fxr < fsim[2]:  # outside contraction
                xc0 = 1.5 * xb0 - 0.5 * sim[2, 0]
                xc1 = 1.5 * xb1 - 0.5 * sim[2, 1]
                fxc = _nm_trial(xc0, xc1, a0, a1, B00, B01, B11, gamma, C, loss_code,
                                boxed, rest, k, lo, hi)
                if fxc <= fxr:
                    sim[2, 0], sim[2, 1], fsim[2] = xc0, xc1, fxc
                else:
                    shrink = True
            else:  # inside contraction
                xc0 = 0.5 * xb0 + 0.5 * sim[2, 0]
                xc1 = 0.5 * xb1 + 0.5 * sim[2, 1]
                fxc = _nm_trial(xc0, xc1, a0, a1, B00, B01, B11, gamma, C, loss_code,
                                boxed, rest, k, lo, hi)
                if fxc < fsim[2]:
                    sim[2, 0], sim[2, 1], fsim[2] = xc0, xc1, fxc
                else:
                    shrink = True
            if shrink:
                for j in range(1, 3):
                    sim[j, 0] = sim[0, 0] + 0.5 * (sim[j, 0] - sim[0, 0])
                    sim[j, 1] = sim[0, 1] + 0.5 * (sim[j, 1] - sim[0, 1])
                    fsim[j] = _nm_trial(sim[j, 0], sim[j, 1], a0, a1, B00, B01, B11, gamma,
                                        C, loss_code, boxed, rest, k, lo, hi)
        iterations += 1
        _nm_sort(sim, fsim)
    x[0] = sim[0, 0]
    x[1] = sim[0, 1]
    return fsim[0]


class BoxedPairSum:
    """The hinge's pair sum  sum_k max(1 - z_k(s), 0) - max(1 - z_k(0), 0)  for s in a box
    |s1 - c1| <= h1, |s2 - c2| <= h2, visiting only the pairs that may cross their kink there.

    z_k(s) = z_k(c) + grad z_k(c)'u + c11 u1^2 + c22 u2^2 + c12 u1 u2 (u = s - c), so over the
    box |z_k(s) - z_k(c)| <= |dz1| h1 + |dz2| h2 + |c11| h1^2 + |c22| h2^2 + |c12| h1 h2 =: b_k.
    Pairs with z_k(c) - b_k > 1 are inactive everywhere in the box (they add the constant
    -h0_k); pairs with z_k(c) + b_k < 1 are active everywhere (they add 1 - z_k(s) - h0_k, a
    quadratic in s whose six coefficients are summed once). The rest are evaluated pair by
    pair at every call. Outside the box every pair is (:func:`_phi_pairs`). The classification
    keeps a relative margin of 1e-12, so rounding can only move a pair to the exact list.
    """

    def __init__(self, C, centre, half):
        C = np.ascontiguousarray(C, dtype=np.float64)
        self.C = C
        c1, c2 = float(centre[0]), float(centre[1])
        h1, h2 = abs(float(half[0])), abs(float(half[1]))
        self.lo = (c1 - h1, c2 - h2)
        self.hi = (c1 + h1, c2 + h2)
        z0 = C[:, 0]
        zc = z0 + c1 * (C[:, 1] + c1 * C[:, 3]) + c2 * (C[:, 2] + c2 * C[:, 4]) \
            + c1 * c2 * C[:, 5]
        d1 = C[:, 1] + 2.0 * c1 * C[:, 3] + c2 * C[:, 5]
        d2 = C[:, 2] + 2.0 * c2 * C[:, 4] + c1 * C[:, 5]
        b = (np.abs(d1) * h1 + np.abs(d2) * h2 + np.abs(C[:, 3]) * h1 * h1
             + np.abs(C[:, 4]) * h2 * h2 + np.abs(C[:, 5]) * h1 * h2)
        b = b + 1e-12 * (np.abs(zc) + b + 1.0)
        off = zc - b > 1.0
        on = zc + b < 1.0
        h0 = np.maximum(1.0 - z0, 0.0)
        Con = C[on]
        # active pairs: sum (1 - z(s)) - h0 = k0 - s1 k1 - s2 k2 - s1^2 k11 - s2^2 k22 - s1 s2 k12
        self.k = (float(np.sum(1.0 - Con[:, 0] - h0[on])) - float(np.sum(h0[off])),) \
            + tuple(float(x) for x in Con[:, 1:].sum(axis=0))
        self.rest = np.ascontiguousarray(C[~(on | off)])

    def __call__(self, s1, s2):
        if not (self.lo[0] <= s1 <= self.hi[0] and self.lo[1] <= s2 <= self.hi[1]):
            return _phi_pairs(self.C, s1, s2, 0)
        k0, k1, k2, k11, k22, k12 = self.k
        return (k0 - s1 * (k1 + s1 * k11) - s2 * (k2 + s2 * k22) - s1 * s2 * k12
                + _phi_pairs(self.rest, s1, s2, 0))


@njit(nogil=True, cache=True, parallel=True)
def _save(V, Vprev):
    n, r = V.shape
    for i in prange(n):
        for c in range(r):
            Vprev[i, c] = V[i, c]


@njit(nogil=True, cache=True)
def _phi_pair_rows(C, s1, s2, loss_code, start, stop):
    """sum over pairs start..stop-1 of loss(z(s)) - loss(z(0)) (in pair order)."""
    tot = 0.0
    for k in range(start, stop):
        z0 = C[k, 0]
        z = (z0 + s1 * (C[k, 1] + s1 * C[k, 3]) + s2 * (C[k, 2] + s2 * C[k, 4])
             + s1 * s2 * C[k, 5])
        if loss_code == 0:
            tot += max(1.0 - z, 0.0) - max(1.0 - z0, 0.0)
        elif loss_code == 1:
            h = max(1.0 - z, 0.0)
            h0 = max(1.0 - z0, 0.0)
            tot += h * h - h0 * h0
        elif loss_code == 2:
            tot += (1.0 - z) * (1.0 - z) - (1.0 - z0) * (1.0 - z0)
        else:
            tot += z0 - z
    return tot


@njit(nogil=True, cache=True, parallel=True)
def _phi_pairs(C, s1, s2, loss_code):
    """sum over pairs of loss(z(s)) - loss(z(0)), z(s) from the coefficient rows of C.

    Fixed blocks of SUM_BLOCK pairs run on numba's threads; their partial sums are added in
    block order, so the value does not depend on the thread count."""
    m = C.shape[0]
    nb = (m + SUM_BLOCK - 1) // SUM_BLOCK
    part = np.zeros(nb)
    for b in prange(nb):
        part[b] = _phi_pair_rows(C, s1, s2, loss_code, b * SUM_BLOCK,
                                 min((b + 1) * SUM_BLOCK, m))
    tot = 0.0
    for b in range(nb):
        tot += part[b]
    return tot


def _loss_sum(z, loss_code):
    if loss_code == 0:
        return float(np.maximum(1.0 - z, 0.0).sum())
    if loss_code == 1:
        return float((np.maximum(1.0 - z, 0.0) ** 2).sum())
    if loss_code == 2:
        return float(((1.0 - z) ** 2).sum())
    return float(-z.sum())


def _line_grid(a, b, gamma, base):
    """The line search's upper bound on s and its 16 geometric trial points: the loss is
    >= 0, so it cannot fall by more than gamma * base, which bounds s."""
    if b > 0:
        hi = (-a + np.sqrt(a * a + b * gamma * max(base, 0.0))) / b
    else:
        hi = 16.0
    hi = float(min(max(hi, 1e-12), 1e6))
    return hi, hi * np.geomspace(1e-3, 1.0, 16)


def _line_bracket(grid, vals, hi):
    """(index of the best trial, the bracket around it) for the bounded search."""
    k = int(np.argmin(vals))
    lo_b = grid[k - 1] if k > 0 else 0.0
    hi_b = grid[k + 1] if k + 1 < grid.shape[0] else hi
    return k, lo_b, hi_b


def line_search(a, b, c0, c1, c2, gamma, loss_code, base=None, phi=None, bracket_phi=None):
    """argmin over s >= 0 of  phi(s) = 2 s a + s^2 b + gamma sum loss(c0 + s c1 + s^2 c2)
    minus phi(0); returns (s, phi(s) - phi(0)) with s = 0 when nothing decreases.

    phi is exact (the smooth part is the quadratic <V+sD, L(V+sD)>), so accepting only
    decreases keeps the objective monotone. ``bracket_phi(lo, hi)``, if given, returns the
    function the bounded search evaluates inside the bracket [lo, hi] (the same phi, cheaper
    there: :class:`BoxedPairSum`).
    """
    from scipy.optimize import minimize_scalar

    if base is None:
        base = _loss_sum(c0, loss_code)
    if phi is None:
        def phi(s):
            return 2.0 * s * a + s * s * b + gamma * (
                _loss_sum(c0 + s * (c1 + s * c2), loss_code) - base)

    hi, grid = _line_grid(a, b, gamma, base)
    vals = np.array([phi(s) for s in grid])
    k, lo_b, hi_b = _line_bracket(grid, vals, hi)
    inner = phi if bracket_phi is None else bracket_phi(lo_b, hi_b)
    res = minimize_scalar(inner, bounds=(lo_b, hi_b), method="bounded",
                          options={"xatol": 1e-6 * hi_b})
    s, v = (float(res.x), float(res.fun)) if res.fun < vals[k] else (float(grid[k]),
                                                                       float(vals[k]))
    return (s, v) if v < 0.0 else (0.0, 0.0)


def colour_units(layout, c):
    """Rows of C's colour ``c`` and the bounds of its units: the rows of a colour are
    independent, cut into fixed units of CHUNK rows (a fixed grouping of the change sums)."""
    rows = layout.rows_of(c)
    return rows, np.append(np.arange(0, rows.shape[0], CHUNK), rows.shape[0]).astype(np.int64)


@njit(nogil=True, cache=True, inline="always")
def _selected(k, colmap, keep_beyond):
    """The new column of column k (-1: dropped)."""
    if k < colmap.shape[0]:
        return colmap[k]
    return k if keep_beyond else -1


@njit(nogil=True, cache=True, parallel=True)
def _select_columns(indptr, indices, data, nrows, colmap, keep_beyond, diag, canonical):
    """The entries of rows 0..nrows whose column c has colmap[c] >= 0, renamed to colmap[c],
    in their order, as CSR (int64 indices, float64 data); columns beyond colmap are kept as
    they are (``keep_beyond``) or dropped. ``canonical``: also the diagonal
    ``diag`` (row i, column i), every row sorted by column and exact zeros dropped -- what
    scipy's ``(A + sp.diags(diag)).tocsr()`` gives for an off-diagonal A, in one pass.
    Rows in parallel (a count pass, then a fill pass); each row is written by one thread in
    its own order, so the result does not depend on the thread count."""
    cnt = np.zeros(nrows, np.int64)
    for i in prange(nrows):
        c = 1 if canonical else 0
        for p in range(indptr[i], indptr[i + 1]):
            if _selected(indices[p], colmap, keep_beyond) >= 0:
                c += 1
        cnt[i] = c
    bound = csr_row_ptr(cnt)
    idx = np.empty(bound[nrows], np.int64)
    val = np.empty(bound[nrows], np.float64)
    for i in prange(nrows):
        start = bound[i]
        q = start
        for p in range(indptr[i], indptr[i + 1]):
            c = _selected(indices[p], colmap, keep_beyond)
            if c >= 0:
                idx[q] = c
                val[q] = np.float64(data[p])
                q += 1
        if canonical:
            idx[q] = i
            val[q] = np.float64(diag[i])
            q += 1
            sort_row(idx, val, start, q)
            w = start
            for a in range(start, q):  # scipy's sum keeps no explicit zeros
                if val[a] != 0.0:
                    idx[w], val[w] = idx[a], val[a]
                    w += 1
            q = w
        cnt[i] = q - start
    if np.sum(cnt) == bound[nrows]:
        return bound, idx, val
    return csr_compact(bound, idx, val, cnt)  # exact zeros dropped (canonical)


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
    return kernels(serial).select_columns(indptr, indices, data, nu, colmap, False, _NO_DIAG,
                                          False)


def free_matrix(A_ptr, A_idx, A_data, diag, serial=False):
    """The own block of L_UU with its diagonal, as a canonical scipy CSR (float64): the
    matrix the AMG hierarchy is built on (entries of A in halo columns are dropped)."""
    nu = diag.shape[0]
    colmap = _column_map(nu, [(0, nu, 0)])
    ptr, idx, val = kernels(serial).select_columns(A_ptr, A_idx, A_data, nu, colmap, False,
                                                   np.asarray(diag, np.float64), True)
    A = sp.csr_matrix((val, idx, ptr), shape=(nu, nu))
    A.has_sorted_indices = True
    A.has_canonical_format = True
    return A


@njit(nogil=True, cache=True)
def _u_columns_of_c_rows(indptr, indices, nu, n_own):
    """The U rows (columns < nu) that the own C rows' entries reach, sorted, unique (int64;
    marked in one pass: np.unique's hashing took 0.05 s of the set-up at n = 1e6)."""
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
    over the U rows instead of three selections (at n = 1e6 the three took 0.33 s of a
    2.3 s set-up): the AMG matrix (``free_matrix`` over ``free_operator``) and the C columns
    (``constrained_columns``), the same arrays bit for bit.

    Returns (operator, A, uc). Where every U row's entries in U columns are stored sorted
    (as ``permute_split`` leaves L), the operator is None: A serves as the product's
    operator too (``_matvec_dot(canonical=True)`` weighs its diagonal entries 0; the same sums bit
    for bit), so the fit holds one copy of L_UU, not two. Else the operator is
    ``free_operator``'s (ptr, idx, val).

    A's index arrays are int32 where its entries fit (scipy's own choice, so the CSR takes
    them without a copy; at n = 1e6 the int64 arrays and scipy's int32 copies of them cost
    0.1-0.2 s of fresh pages).

    ``bounds``: None, or two (n_free,) float64 arrays filled with ``_diag_gershgorin``'s
    diagonal and ratio of A, bitwise, from the rows as they are written (the preconditioner's
    finest level then skips that pass over A: 0.03-0.04 s at n = 1e6)."""
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
    # fault in here: npkl_dist._memory)
    fidx, fval = populated_empty(nnz, idx_dtype), populated_empty(nnz, np.float64)
    uidx, uval = np.empty(uptr[nu], np.int64), np.empty(uptr[nu], np.float64)
    gd, gr = bounds if bounds is not None else (np.empty(0), np.empty(0))
    if bounds is not None and not (gd.shape == gr.shape == (nu,)):
        raise ValueError(f"bounds: two arrays of shape ({nu},), got {gd.shape}, {gr.shape}")
    _free_block_fill(indptr, indices, data, nu, d, fptr, fidx, fval, uptr, uidx, uval, gd,
                     gr)
    A = sp.csr_matrix((fval, fidx, fptr), shape=(nu, nu))
    A.has_sorted_indices = True
    A.has_canonical_format = True
    ops = free_operator(indptr, indices, data, nu, diag.shape[0], 0) if unsorted.any() \
        else None
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
def _free_block_fill(indptr, indices, data, nu, diag, fptr, fidx, fval, uptr, uidx, uval,
                     gdiag, gratio):
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
    return kernels(serial).select_columns(indptr, indices, data, nu, colmap, True, _NO_DIAG,
                                          False)


#: The subspace search takes L D on the U rows from the one-step PCG (alpha Q plus the
#: constrained neighbours) instead of a product with L (one of five passes over L per outer
#: iteration); False: always the product (the reference, for tests).
LD_FROM_CG = True

#: A session of one-step PCGs (``inner_maxiter=1``, the default) on float64 V with the two
#: rules above takes the U rows' outer step D_U as the PCG's alpha Z, exactly what X += alpha Z
#: moved them by (up to the rounding of that sum), instead of V - Vprev: the previous V and
#: L D are then stored for the constrained rows only. At n = 1e6, r = 16 that is two 128 MB
#: arrays fewer to fault in and three fewer streams through the direction and step passes
#: (bench/RESULTS.md, "Block fits at n = 1e6: fresh pages, one copy of L_UU, and the outer
#: step from the PCG"). False: Vprev and L D on every row (the reference, for tests).
D_FROM_CG = True

#: With D_FROM_CG in an in-process fit (one part, no halo), the one-step PCG's X += alpha Z
#: is taken where the direction and the step passes read the U rows (rounded as the update
#: rounds it: the same iterates bit for bit), except on the U rows that the C rows' updates
#: read, which move before them: a pass over the U rows less per outer iteration. False: the
#: update as a pass of its own (the reference, for tests).
FOLD_X_UPDATE = True

#: The residual after an outer iteration comes from the residual before it and L S (see
#: ``_subspace_step``) instead of a product with L; False: always the product (the
#: reference, for tests). Rounding does not build up unchecked: a checkpoint stores R
#: (column block 4 of 4), so a resumed fit continues bit for bit, and joint moves and
#: resumes from older checkpoints recompute it exactly.
RESIDUAL_FROM_STEP = True

#: With D_FROM_CG, the own C rows' (L V)_C is carried from step to step as the U rows'
#: residual is: the outer step S leaves V = Vprev + S and L S is formed on those rows, so
#: (L V)_C += (L S)_C, and the objective and KKT terms of the C rows read it instead of their
#: neighbours' rows (scattered over L's order: about 7 ms of an outer iteration at n = 1e6).
#: Formed exactly at the first objective and after V is replaced; checkpoints hold it in the
#: C rows of their R block, so a resumed fit continues bit for bit. False: the C rows'
#: neighbours read at every objective (the reference, for tests).
LV_FROM_STEP = True

#: A one-step PCG (``inner_maxiter=1``, the default) takes its direction rounded to float32:
#: Z = M R is stored once in single precision (each entry rounded once) and the step is the
#: exact minimiser along that rounded direction (R*Z, L Z and X += alpha Z all read the
#: stored float32 Z, in float64 arithmetic). The product with L_UU gathers ~14 neighbour rows
#: of Z per row; a float32 row is one cache line instead of two (bench/RESULTS.md, "a
#: one-step PCG's direction in float32": 17-21 ms of a ~0.2 s outer iteration at n = 1e6).
#: The driver decides for every part at once, so a halo row has its owner's precision.
#: False: float64 directions (the reference, for tests).
DIRECTION_FLOAT32 = True

#: A standalone in-process block fit touches its work arrays' pages in a background thread
#: while its set-up runs (:class:`Prefault`) from this many entries of V (n x rank) on.
PREFAULT_MIN_ENTRIES = 1 << 20


def d_from_cg(extrapolate, dtype, inner_maxiter) -> bool:
    """Whether a block session with these settings takes D_U from its one-step PCG
    (``D_FROM_CG``)."""
    return bool(D_FROM_CG and LD_FROM_CG and RESIDUAL_FROM_STEP and extrapolate
                and np.dtype(dtype) == np.float64 and inner_maxiter == 1)


def session_buffers(n, n_free, rank, dtype=np.float64, extrapolate=True, inner_maxiter=1):
    """{name: (shape, dtype)}: the work arrays that an in-process block session
    (:class:`BlockPart` over every row) allocates in a fit with these settings, as its
    ``_buffer`` names them (``tests/test_prefault.py`` checks that a fit asks for exactly
    these)."""
    n, nu, r = int(n), int(n_free), int(rank)
    f64, vdt = np.dtype(np.float64), np.dtype(dtype)
    specs = {"R": ((nu, r), f64), "Q": ((nu, r), f64), "delta2": ((n,), f64),
             "norm2": ((n,), f64)}
    one_step32 = bool(nu and inner_maxiter == 1 and DIRECTION_FLOAT32)
    if nu and not one_step32:  # a one-step PCG's direction is float32 only (Z32 below)
        specs["Z"] = ((nu, r), f64)
    if vdt != f64:
        specs["X"] = ((nu, r), f64)
    if extrapolate:
        # the C rows' previous V and L D only where D_U comes from the PCG (D_FROM_CG)
        nc = n - nu if d_from_cg(extrapolate, vdt, inner_maxiter) else n
        specs.update(Vprev=((nc, r), f64), LD=((nc, r), f64), S=((n, r), vdt),
                     LS=((n, r), vdt))
    else:
        specs["Xold"] = ((nu, r), f64)
    if one_step32:  # no PCG without U rows
        specs["Z32"] = ((nu, r), np.dtype(np.float32))
    if nu and inner_maxiter > 1:
        specs["P"] = ((nu, r), f64)
    return specs


class Prefault:
    """A block session's work arrays, allocated with their pages mapped in a background
    thread while the fit's set-up (layout, AMG hierarchy, start) runs on the main thread.

    The first write to a fresh page is a page fault; in this kind of VM a fresh 128 MB
    array took 0.13-0.3 s of them, and a standalone fit at n = 1e6 paid about 0.8 s of its
    first outer iteration (1.0-1.3 s against 0.2 s later) touching eight such arrays. The
    set-up's serial stretches (reverse Cuthill-McKee, pyamg's aggregation and relaxation)
    leave the second core idle; the faults go there. The arrays are on base pages, mapped
    in one call (:func:`~npkl_dist._memory.populated_empty`): numpy's huge pages cost
    several times more to fault in where the memory was handed back to the host, and kept
    the second core busy through most of the set-up. The thread only allocates and maps,
    so nothing computed depends on it: a fit
    takes these arrays or fresh ones to the same result, bitwise. The arrays exist from the
    start of the set-up instead of its end, so the set-up's temporaries and they overlap: a
    fit's peak memory can grow by up to their size (about 1 GB at n = 1e6, r = 16). Measured
    there: peak resident 2.40 GB against 2.25 GB without (``ru_maxrss`` of a 3-iteration
    fit, the process at 0.75 GB before it).

    ``specs``: {name: (shape, dtype)} (:func:`session_buffers`)."""

    def __init__(self, specs):
        self.specs = dict(specs)
        self._arrays = {}
        self._ready = {name: threading.Event() for name in self.specs}
        self.missed = []  # names asked for and not held (shape, dtype or name unknown)
        self._thread = threading.Thread(target=self._run, name="npkl-prefault", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            for name, (shape, dtype) in self.specs.items():
                self._arrays[name] = populated_empty(shape, dtype, zeros=True)
                self._ready[name].set()
        finally:  # nobody waits forever for an array the thread did not make
            for ev in self._ready.values():
                ev.set()

    def take(self, name, shape, dtype):
        """The array held as ``name`` if it has this shape and dtype (then no longer held),
        else None. Waits for that array (the arrays are made in the specs' order). Its
        contents are zeros (``populated_empty(..., zeros=True)``)."""
        self._wait(name)
        a = self._arrays.get(name)
        if a is None or a.shape != tuple(shape) or a.dtype != np.dtype(dtype):
            self.missed.append(name)
            return None
        del self._arrays[name]
        return a

    def drop(self, name):
        """Let go of the array held as ``name`` (a fit that turned out not to need it)."""
        self._wait(name)
        self._arrays.pop(name, None)

    def _wait(self, name):
        """Until the array ``name`` is made (a name not in the specs: the whole thread)."""
        ev = self._ready.get(name)
        if ev is not None:
            ev.wait()
        else:
            self._thread.join()

    def left(self):
        """Names of the arrays still held (not taken). Waits for the thread."""
        self._thread.join()
        return sorted(self._arrays)

    def close(self):
        """Wait for the thread and drop what was not taken; returns the names dropped."""
        left = self.left()
        self._arrays.clear()
        return left


class BlockPart:
    """The rows of V that one executor block updates in a block solve, with their halo.

    Rows [base, base + n_own) of the U-first layout, local ``0..n_own``; their first
    ``n_free`` are unconstrained (U), the rest constrained (C). ``V`` holds the own rows
    followed by the halo rows (rows of other parts that the own rows read);
    ``indptr/indices/data`` are the own rows' part of L's off-diagonal in that local
    numbering (entries in their global order), ``cptr/cidx/csgn`` their constraint lists,
    ``colour_rows/unit_ptr`` the own C rows of each colour cut into units, ``pair_*`` the
    pairs whose first point is an own row. The first ``n_free_halo`` halo rows (the halo is
    sorted by global row) are unconstrained. In-process the one part is the whole problem
    and has no halo.

    The preconditioner is built on the part's own diagonal block of L_UU: with several
    parts it is block-Jacobi (additive Schwarz without overlap) with a local AMG cycle or
    Jacobi in each block -- symmetric positive definite, so PCG stays PCG. Every method
    returns per-chunk partial sums (RB rows, chunks aligned when ``base`` is a multiple of
    RB) or per-row values; the driver (:class:`BlockSession`) adds them in a fixed order.
    """

    def __init__(self, *, V, n_own, n_free, n_free_halo, base, indptr, indices, data, diag,
                 cptr, cidx, csgn, pmax, colour_rows, unit_ptr, pair_own, pair_other, pair_t,
                 loss_code, gamma, bound, precond="amg-additive", extrapolate=True,
                 serial=False, cache=None, prefault=None, inner_maxiter=None):
        self.K = kernels(serial)
        self._prefault = prefault
        # cache (a FitSetup's): what does not depend on gamma, the loss or V's values -- the
        # U-block operator, the preconditioner, the work arrays -- kept for the next fit
        self._cache = cache
        self.V = V
        n_loc, r = V.shape
        self.n_own, self.nu, self.base = int(n_own), int(n_free), int(base)
        self.indptr, self.indices, self.data, self.diag = indptr, indices, data, diag
        self.cptr, self.cidx, self.csgn, self.pmax = cptr, cidx, csgn, int(pmax)
        self.colour_rows, self.unit_ptr = colour_rows, unit_ptr
        self.pair_own, self.pair_other, self.pair_t = pair_own, pair_other, pair_t
        self.loss_code, self.gamma, self.bound = loss_code, gamma, bound
        nu, nw = self.nu, self.nu + int(n_free_halo)
        whole = cache is not None and not serial and int(n_free_halo) == 0
        if whole and "operator" not in cache and CANONICAL_OPERATOR_KEY not in cache:
            # no U rows in the halo (an in-process fit's one part): the operator, the C
            # columns and the AMG matrix in one pass (the same arrays as the three selections)
            cache[_AMG_MATRIX_KEY] = _free_blocks_into(cache, indptr, indices, data, diag, nu)
        # the AMG matrix as the operator too (its rows are the operator's plus the diagonal,
        # which the product skips: the same sums), or the operator of its own
        self._canonical = cache.get(CANONICAL_OPERATOR_KEY) if whole else None
        if self._canonical is not None:
            A = self._canonical
            self.A_ptr, self.A_idx, self.A_data = A.indptr, A.indices, A.data
        else:
            self.A_ptr, self.A_idx, self.A_data = self._cached(
                "operator", lambda: free_operator(indptr, indices, data, nu, self.n_own,
                                                  int(n_free_halo), serial=serial))
        self.A_diag = np.asarray(diag[:nu], np.float64)
        self.dinv = 1.0 / self.A_diag
        fast = extrapolate and V.dtype == np.float64 and nu > 0
        self.ld_from_cg = bool(LD_FROM_CG) and fast
        self.r_from_step = bool(RESIDUAL_FROM_STEP) and fast
        # D_U = alpha Z (D_FROM_CG): set for the session's PCGs (every part alike, so that
        # halo rows move as their owners do); ``inner_maxiter`` None: not known, not taken
        self.d_from_cg = d_from_cg(extrapolate, V.dtype, inner_maxiter)
        self.nfh = int(n_free_halo)
        if self.ld_from_cg or self.d_from_cg:
            self.uc = self._cached("uc", lambda: constrained_columns(
                indptr, indices, data, nu, self.n_own, int(n_free_halo), serial=serial))
        if self.d_from_cg:  # the U rows with C neighbours, and their L_UC D_C
            self.ucr = self._cached("uc rows", lambda: np.flatnonzero(np.diff(self.uc[0])))
            self.UCD = populated_empty((self.ucr.shape[0], V.shape[1]))  # 16 MB at 1e6
        # (L V) of the own C rows, carried by the subspace steps (LV_FROM_STEP); valid only
        # while _lv_ok (formed at the next objective otherwise)
        self.lv_from_step = self.d_from_cg and bool(LV_FROM_STEP)
        self.LVC = np.empty((self.n_own - self.nu, r)) if self.lv_from_step else None
        self._lv_ok = False
        # the PCG's X += alpha Z folded into the direction and step passes (FOLD_X_UPDATE):
        # in-process only (a halo row's owner would not know which rows others read early)
        self.fold_x = (self.d_from_cg and bool(FOLD_X_UPDATE) and n_loc == self.n_own
                       and nu > 0)
        self._x_pending = False
        self.upd = (self._cached("C rows' U columns", lambda: _u_columns_of_c_rows(
            indptr, indices, nu, self.n_own)) if self.fold_x else np.empty(0, np.int64))
        self._cg_steps, self._alpha, self._r_moved = 0, None, False
        self._finish_parts = None
        self._no_q = np.empty((0, V.shape[1]))  # Q and uc of the plain product (unused)
        self._no_lv = np.empty((0, V.shape[1]))  # (L V)_C not carried
        self._no_uc = (np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0))
        self.precond_setup(precond, serial)
        self._x_is_v = V.dtype == np.float64  # X: V's own U rows, or a float64 copy
        if self._x_is_v:
            self.X = V[:nu]
        else:
            self.X = self._buffer("X", (nu, r))
            self.X[...] = V[:nu]
        self.R = self._buffer("R", (nu, r))
        # Z = M R: own rows, then the U halo. In float64, or in float32 for a one-step PCG
        # (DIRECTION_FLOAT32); each allocated on first use, so a fit of one-step PCGs never
        # makes the float64 one (at n = 1e6, r = 16: 128 MB of fresh pages, 0.16-0.3 s of
        # page faults in this kind of VM)
        self._z_shape = (nw, r)
        self.Z, self._Z64, self._Z32 = None, None, None
        # the CG direction: Z itself on a CG iteration's first step (no copy); an array of
        # its own only once a second step needs P and the next Z at once
        self.P, self._P = None, None
        self.Q = self._buffer("Q", (nu, r))
        self.delta2 = self._buffer("delta2", (self.n_own,), zero=True)
        self.norm2 = self._buffer("norm2", (self.n_own,), zero=True)
        self.extrapolate = bool(extrapolate)
        self._vprev_is_v = False  # Vprev holds V (the subspace step leaves it so)
        # chunk sums of ||v_i||^2 over the own rows of V as it is, where the subspace step
        # formed them (None: V moved since, objective_parts sums them itself)
        self._vn = None
        if self.extrapolate:
            # V at the start of the outer iteration (halo rows too); the step D = V - Vprev
            # is formed where it is read, and Vprev's U rows are the block step's start
            if self.d_from_cg:  # the C rows' only: own, then the halo's
                self.Vprev = self._buffer("Vprev", (n_loc - nu - self.nfh, r))
                self.LD = self._buffer("LD", (self.n_own - nu, r))
            else:
                self.Vprev = self._buffer("Vprev", (n_loc, r))
                self.LD = self._buffer("LD", (self.n_own, r))
            # the previous outer iteration's whole step (halo rows too) and L times it (own
            # rows), in V's dtype: checkpointed with V so that a resume continues bitwise
            self.S = self._buffer("S", (n_loc, r), V.dtype, zero=True)
            self.LS = self._buffer("LS", (self.n_own, r), V.dtype, zero=True)
        else:
            self.Xold = self._buffer("Xold", self.X.shape)
            self.Xold[...] = self.X

    def _cached(self, key, build):
        """``build()``, or what the cache holds under ``key`` (built once per setup)."""
        if self._cache is None:
            return build()
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def _buffer(self, name, shape, dtype=np.float64, zero=False):
        """A work array: the cache's from the previous fit, or the prefault's (their pages
        already touched: a fresh 128 MB array costs 0.13-0.3 s of page faults in this VM),
        or fresh. Its contents are never read before written, or zeroed here (``zero``)."""
        dtype, shape = np.dtype(dtype), tuple(shape)
        key = ("buffer", name)
        a = None if self._cache is None else self._cache.get(key)
        if a is not None and (a.shape != shape or a.dtype != dtype):
            a = None
        fresh = False  # the prefault's: zeros already (fresh mappings)
        if a is None and self._prefault is not None:
            a = self._prefault.take(name, shape, dtype)
            fresh = a is not None
        if a is None:
            if self._cache is None:
                return np.zeros(shape, dtype) if zero else np.empty(shape, dtype)
            a = np.empty(shape, dtype)
        if self._cache is not None:
            self._cache[key] = a
        if zero and not fresh:  # (S and LS at n = 1e6: 12 ms of the set-up's, saved)
            a.fill(0)
        return a

    @classmethod
    def whole(cls, prep, layout, V, precond="amg-additive", extrapolate=True, cache=None,
              prefault=None, inner_maxiter=None):
        """The one part of an in-process solve: every row, no halo."""
        n = V.shape[0]
        units = [colour_units(layout, c) for c in range(layout.n_colours)]
        rows, ptrs = [u[0] for u in units], [u[1] for u in units]
        return cls(V=V, n_own=n, n_free=layout.n_free, n_free_halo=0, base=0,
                   indptr=prep.indptr, indices=prep.indices, data=prep.data, diag=prep.diag,
                   cptr=prep.cptr, cidx=prep.cidx, csgn=prep.csgn, pmax=prep.pmax,
                   colour_rows=rows, unit_ptr=ptrs, pair_own=prep.pi, pair_other=prep.pj,
                   pair_t=prep.pt, loss_code=prep.loss_code, gamma=prep.gamma,
                   bound=prep.bound, precond=precond, extrapolate=extrapolate, cache=cache,
                   prefault=prefault, inner_maxiter=inner_maxiter)

    def precond_setup(self, precond, serial):
        self.M = self._cached(("precond", precond, bool(serial)),
                              lambda: self._make_precond(precond, serial))

    def _make_precond(self, precond, serial):
        nu = self.nu
        # the hierarchy the 'coarse-free' start built on this L_UU (an in-process fit's one
        # part: its U block is the whole L_UU)
        h = self._cache.pop(HIERARCHY_KEY, None) if self._cache is not None else None
        # the AMG matrix whole_free_blocks formed with the operator (dropped if not used)
        A = self._cache.pop(_AMG_MATRIX_KEY, None) if self._cache is not None else None
        # its diagonal and Gershgorin ratios, if the pass that formed it took them
        fb = self._cache.pop(_FINEST_BOUNDS_KEY, None) if self._cache is not None else None
        if (h is not None and precond in ("amg-additive", "amg-plain") and nu > 0
                and self.base == 0 and h.levels[0].A.shape[0] == nu):
            return AMGPreconditioner(h.levels[0].A, serial=serial, smooth=None,
                                     additive=precond == "amg-additive", hierarchy=h,
                                     finest_bounds=fb)
        if precond.startswith("amg") and nu > 0:
            if A is None:
                A = self._canonical if self._canonical is not None else free_matrix(
                    self.A_ptr, self.A_idx, self.A_data, self.A_diag, serial=serial)
            return AMGPreconditioner(A, serial=serial,
                                     smooth="jacobi" if precond == "amg" else None,
                                     additive=precond == "amg-additive",
                                     finest_bounds=fb)
        return JacobiPreconditioner(self.A_diag, serial=serial)

    def _chunks(self, n, width=None):
        n_ch = (n + RB - 1) // RB
        return np.zeros(n_ch) if width is None else np.zeros((n_ch, width))

    # -- the unconstrained block ----------------------------------------------------------
    def residual(self):
        """R = -(L V)_U for the own U rows; chunk sums of X*R and ||dinv R||^2."""
        pxr, pg = self._chunks(self.nu), self._chunks(self.nu)
        if self.nu:
            self.K.neg_residual_rows(self.nu, self.indptr, self.indices, self.data, self.diag,
                                     self.V, self.X, self.R, self.dinv, pxr, pg)
        return pxr, pg

    def save(self):
        self._cg_steps, self._alpha, self._r_moved = 0, None, False
        self._finish_parts = None
        self._x_pending = False
        if self.extrapolate and not self._vprev_is_v:
            if self.d_from_cg:  # the C rows only: own, then the halo's
                nc = self.n_own - self.nu
                self.Vprev[:nc] = self.V[self.nu:self.n_own]
                self.Vprev[nc:] = self.V[self.n_own + self.nfh:]
            else:
                self.K.save(self.V, self.Vprev)
        self._vprev_is_v = False  # the step moves V from here on
        self._vn = None

    def pcg_precondition(self, single=False):
        """Z = M R with the chunk sums of R*Z and R*R. ``single``: Z in float32, the
        direction of a one-step PCG (``DIRECTION_FLOAT32``; every part gets the same)."""
        if single:
            if self._Z32 is None:
                self._Z32 = self._buffer("Z32", self._z_shape, np.float32, zero=True)
            self.Z = self._Z32
        else:
            if self._Z64 is None:
                self._Z64 = self._buffer("Z", self._z_shape, zero=True)
            self.Z = self._Z64
        r = self.R.shape[1]
        pa, pb = self._chunks(self.nu, r), self._chunks(self.nu, r)
        self.M.apply_dots(self.R, self.Z[:self.nu], pa, pb)
        return pa, pb

    def pcg_matvec(self, beta):
        if beta is None:
            self._P = self.Z
        else:
            self.K.direction(self._P, self.Z, beta)
        part = self._chunks(self.nu, self.R.shape[1])
        self.K.matvec_dot(self.A_ptr, self.A_idx, self.A_data, self.A_diag, self._P, self.Q,
                          part, self._canonical is not None)
        return part

    def pcg_update(self, alpha, precondition):
        if precondition:
            self.K.cg_update(self.X, self.R, self._P, self.Q, alpha)
        else:
            # the last step: R - alpha Q would not be read. The residual is formed anew
            # after the C rows (subspace_step's fused update from R as it stands, or
            # residual()), and the direction pass reads Q, not R.
            parts = (self._chunks(self.nu), self._chunks(self.nu))
            if self.fold_x and self._cg_steps == 0:
                # taken by finish_block on the rows the C rows read, by the direction and
                # step passes on the others (their sums of ||X||^2 come from the direction)
                self._x_pending = True
                self._finish_parts = parts  # zeros: the U part comes with the direction
            else:
                self.K.cg_update_x_sums(self.X, self._P, alpha, *parts)
                if self._cg_steps == 0 and self.extrapolate and self._x_is_v:
                    # also the first step: X's start is Vprev, so these are finish_block's
                    # sums
                    self._finish_parts = parts
        self._r_moved = bool(precondition)
        self._cg_steps += 1
        self._alpha = np.asarray(alpha, np.float64)
        if not precondition:
            return None
        if self._P is self.Z:  # the next Z overwrites this direction: keep it apart
            if self.P is None:
                self.P = self._buffer("P", self.Z.shape)
            self.P[...] = self.Z
            self._P = self.P
        return self.pcg_precondition()

    def finish_block(self):
        """V_U = X (rounded to V's dtype); chunk sums of ||X||^2 and ||X - Xold||^2 (formed
        by the PCG's step where it was the only one)."""
        if self._x_pending:  # the rows the C rows' updates read move now
            self.K.update_rows(self.upd, self.X, self._P, self._alpha)
        if self._finish_parts is not None:
            parts, self._finish_parts = self._finish_parts, None
            return parts
        pn, pd = self._chunks(self.nu), self._chunks(self.nu)
        if self.d_from_cg:  # the PCG took no step: X is its start (no Vprev on U rows)
            self.K.copy_delta(self.X, self.X, self.V, False, False, pn, pd)
            return pn, pd
        old = self.Vprev if self.extrapolate else self.Xold
        self.K.copy_delta(self.X, old, self.V, not self._x_is_v, not self.extrapolate, pn, pd)
        return pn, pd

    # -- the constrained rows -------------------------------------------------------------
    def colour_step(self, c):
        rows, ptr = self.colour_rows[c], self.unit_ptr[c]
        if rows.shape[0]:
            kernel = (sweep_units if not self.K.serial and numba.get_num_threads() > 1
                      and rows.shape[0] > 2 * CHUNK else sweep_units_serial)
            kernel(rows, ptr, self.base, self.indptr, self.indices, self.data, self.diag,
                   self.cptr, self.cidx, self.csgn, self.V, self.loss_code, self.gamma,
                   self.bound, self.pmax, self.delta2, self.norm2)

    def c_change(self):
        """Per-row change and norm sums of the own C rows (see ``sweep_rows``)."""
        return self.delta2[self.nu:].copy(), self.norm2[self.nu:].copy()

    # -- subspace search ------------------------------------------------------------------
    def direction(self):
        """LD = L D (D = V - Vprev); chunk sums of <LD, V>, <LD, D>, <LS, V>, <LD, S>,
        <LS, S>; the pair coefficients of the owned pairs."""
        K, n = self.K, self.n_own
        pa, pb, part = self._chunks(n), self._chunks(n), self._chunks(n, 3)
        if self.d_from_cg:  # D_U = alpha Z, (L D)_U = alpha Q + L_UC D_C
            use_q, alpha = self._cg_step()
            Z = self._z_or_empty()
            K.uc_products(self.ucr, *self.uc, self.V, self.Vprev, self.nu, n, self.nfh,
                          self.UCD)
            n2 = self._chunks(self.nu)
            K.direction_cg(self.ucr, self.UCD, self.nu, n, self.nfh, self.indptr,
                           self.indices, self.data, self.diag, self.V, self.Vprev, Z, alpha,
                           use_q, self.Q, self.LD, self.S, self.LS, pa, pb, part, self.upd,
                           self._x_pending, n2)
            coeffs = np.empty((self.pair_own.shape[0], 6))
            K.pair_coeffs2_cg(self.pair_own, self.pair_other, self.pair_t, self.V, self.Vprev,
                              self.S, Z, alpha, use_q, self.nu, n, self.nfh, coeffs)
            # ||X||^2 over the U rows where the update was folded (finish_block gave zeros)
            return pa, pb, part, coeffs, (n2 if self._x_pending else None)
        if self.ld_from_cg and self._cg_steps <= 1:  # (L D)_U from the PCG step
            use_q, alpha = self._cg_step()
            K.direction_LD(*self.uc, self.nu, self.indptr, self.indices, self.data,
                           self.diag, self.V, self.Vprev, self.Q, alpha, use_q, self.LD,
                           self.S, self.LS, pa, pb, part)
        else:  # the product with L on every row
            K.direction_LD(*self._no_uc, 0, self.indptr, self.indices, self.data, self.diag,
                           self.V, self.Vprev, self._no_q, self._alpha0(), False, self.LD,
                           self.S, self.LS, pa, pb, part)
        coeffs = np.empty((self.pair_own.shape[0], 6))
        K.pair_coeffs2(self.pair_own, self.pair_other, self.pair_t, self.V, self.Vprev, self.S,
                      coeffs)
        return pa, pb, part, coeffs

    def subspace_step(self, s1, s2):
        """V += s1 D + s2 S (halo rows included), S and LS become this outer step; then the
        exact residual. Returns chunk sums of ||S||^2, ||V||^2 and the residual's."""
        part = self._chunks(self.n_own, 2)
        fused = self.r_from_step and self._cg_steps <= 1  # the residual in the same pass
        pxr, pg = self._chunks(self.nu), self._chunks(self.nu)
        use_q, alpha = self._cg_step()
        if self.d_from_cg:
            self.K.subspace_step_cg(self.V, self.Vprev, self.LD, self.S, self.LS, s1, s2, part,
                                    self.R, self.Q, alpha, use_q, use_q and self._r_moved,
                                    self.dinv, fused, pxr, pg, self.ucr, self.UCD,
                                    self._z_or_empty(),
                                    self.nu, self.n_own, self.nfh, self.upd, self._x_pending,
                                    self.LVC if self._lv_ok else self._no_lv)
            self._x_pending = False
            self._vprev_is_v = True
            self._vn = part[:, 1]
            return part, ((pxr, pg) if fused else self.residual())
        # R is R_start - alpha Q where the PCG's one step updated it, else R_start
        self.K.subspace_step(self.V, self.Vprev, self.LD, self.S, self.LS, s1, s2, part,
                             self.R, self.Q, alpha, use_q and self._r_moved, self.dinv, fused,
                             pxr, pg)
        self._vprev_is_v = True
        self._vn = part[:, 1]  # ||V||^2 of the V this step leaves, per chunk
        if self.nu and not self._x_is_v:
            self.X[...] = self.V[:self.nu]
        return part, ((pxr, pg) if fused else self.residual())

    def _alpha0(self):
        return np.zeros(self.V.shape[1])

    def _z_or_empty(self):
        """Z (own U rows, then the halo's), or an empty one where no PCG ran (no U rows)."""
        if self.Z is not None:
            return self.Z
        return np.zeros((0, self.V.shape[1]), np.float32)

    def _cg_step(self):
        """(whether the PCG took its one step, its alpha) for this outer iteration."""
        use_q = self._cg_steps == 1
        return use_q, (self._alpha if use_q else self._alpha0())

    def _residual_sums(self):
        """Chunk sums of X*R and ||dinv R||^2 of R as it is (as :meth:`residual`)."""
        pxr, pg = self._chunks(self.nu), self._chunks(self.nu)
        self.K.residual_dots(self.R, self.X, self.dinv, pxr, pg)
        return pxr, pg

    # -- by-products, state -------------------------------------------------------------------
    def objective_parts(self, with_kkt=True):
        """Per own C row: v_i'(LV)_i and the KKT term (zeros without ``with_kkt``: the row
        box QPs of the hinge are most of this pass); per owned pair: its loss; chunk sums
        of ||v_i||^2 over the own rows (the KKT residual's scale; none without ``with_kkt``),
        taken from the subspace step that left V, which formed them in its own pass (a pass
        over V less per traced outer iteration: about 8 ms at n = 1e6, r = 16), else summed
        here."""
        V = self.V
        c = np.arange(self.nu, self.n_own, dtype=np.int64)
        sm = np.empty(c.shape[0])
        g = np.zeros(c.shape[0])
        # from (L V)_C: carried by the steps (LV_FROM_STEP), or formed here (one read of
        # the C rows' neighbours for both terms)
        if self.lv_from_step:
            LVC = self.LVC
        else:
            LVC = np.empty((c.shape[0], V.shape[1]))
        if not (self.lv_from_step and self._lv_ok):
            self.K.rows_lv(c, self.indptr, self.indices, self.data, self.diag, V, LVC)
            self._lv_ok = self.lv_from_step
        self.K.lv_kkt_row_terms(c, LVC, self.diag, self.cptr, self.cidx, self.csgn, V,
                                self.loss_code, self.gamma, self.bound, self.pmax,
                                bool(with_kkt), sm, g)
        pairs = np.empty(self.pair_own.shape[0])
        self.K.pair_terms(self.pair_own, self.pair_other, self.pair_t, V, self.loss_code,
                          pairs)
        if not with_kkt:
            vn = []
        elif self._vn is not None:
            vn = self._vn
        else:
            vn = chunked_sums(np.einsum("ij,ij->i", V[:self.n_own], V[:self.n_own],
                                        dtype=np.float64))
        return sm, g, pairs, vn

    def own(self):
        return self.V[:self.n_own]

    def state_arrays(self):
        """Own rows of S, LS and the residual R (on the C rows: the carried (L V)_C where
        the fit carries it, else zero), in V's dtype (empty without extrapolation)."""
        if not self.extrapolate:
            return []
        R = np.zeros((self.n_own, self.V.shape[1]), self.V.dtype)
        R[:self.nu] = self.R
        if self.lv_from_step and self._lv_ok:  # the C rows' block: the carried (L V)_C
            R[self.nu:] = self.LVC
        return [self.S[:self.n_own], self.LS, R]

    def load_state(self, S, LS, R=None):
        """S for the own and halo rows, LS and R (None: checkpoints before R was stored) for
        the own rows. Returns the residual's partial sums (as :meth:`residual`): of the
        stored R where the fit carries it from step to step, else of the exact one."""
        if self.extrapolate:
            self.S[...] = S
            self.LS[...] = LS
        self._lv_ok = False
        if R is not None and self.lv_from_step and np.any(R[self.nu:self.n_own]):
            # the carried (L V)_C (checkpoints from before it was stored: zeros, formed anew)
            self.LVC[...] = R[self.nu:self.n_own]
            self._lv_ok = True
        if R is not None and self.r_from_step:
            self.R[...] = R[:self.nu]
            return self._residual_sums()
        return self.residual()

    def assign(self, V_local):
        """Replace V (own and halo rows): a joint move. The momentum restarts (S = 0);
        returns the exact residual's partial sums (as :meth:`residual`)."""
        self.V[...] = V_local
        self._vprev_is_v = False
        self._vn = None
        self._lv_ok = False
        if self.nu:
            if not self._x_is_v:
                self.X[...] = self.V[:self.nu]
            if not self.extrapolate:
                self.Xold[...] = self.X
        if self.extrapolate:
            self.S[...] = 0
            self.LS[...] = 0
        return self.residual()


class BlockSession:
    """State of a block-exact fit on one machine: V (internal U-first order) updated in place.

    The algorithm (one :meth:`step`) is written against parts (:class:`BlockPart`) and
    reductions of their partial sums: in-process one part holds everything; the Dask
    executor subclasses this with one part per worker block and halo exchanges
    (``npkl_dist.executors._dask``). The driver adds partial sums in row order, so the
    stopping decisions are those of the sums, not of the partitioning.

    Parameters
    ----------
    prep : PreparedProblem in the layout's order
    layout : BlockLayout
    V : (n, r) array, the factor (its dtype is the problem's)
    n_threads : int
    precond : {'amg-plain', 'amg-additive', 'amg', 'jacobi'}
    extrapolate : bool
    cache : dict, optional
        A :class:`~npkl_dist.FitSetup`'s: the U-block operator, the preconditioner and the
        work arrays are taken from it (and left in it for the next fit of the setup).
    prefault : Prefault, optional
        Work arrays whose pages a background thread touched during the fit's set-up; taken
        where the cache holds none.
    """

    def __init__(self, prep, layout, V, n_threads=1, precond="amg-additive", extrapolate=True,
                 cache=None, prefault=None, inner_maxiter=None):
        check_precond(precond)
        self._prefault = prefault
        # the PCG steps each outer iteration takes, where fixed for the session (1: the
        # parts may take D_U from the PCG step, D_FROM_CG); None: any
        self.inner_maxiter = None if inner_maxiter is None else int(inner_maxiter)
        self.prep, self.layout = prep, layout
        self.n_threads = int(n_threads)
        self.n_free = layout.n_free
        self.extrapolate = bool(extrapolate)
        self.cg_iterations = []
        self.steps_taken = []
        self._cache = cache
        self._noise = (SEARCH_NOISE * float(np.finfo(np.float64).eps)
                       * (float(np.max(prep.diag)) if prep.diag.size else 0.0))
        self._threads(self._setup, prep, layout, V, precond)
        self._threads(self._residual)

    def _setup(self, prep, layout, V, precond):
        self.V = V
        self.parts = [BlockPart.whole(prep, layout, V, precond=precond,
                                      extrapolate=self.extrapolate, cache=self._cache,
                                      prefault=self._prefault,
                                      inner_maxiter=self.inner_maxiter)]
        self.pair_index = [np.arange(prep.pi.shape[0])]

    # -- how parts are called (overridden by the partitioned session) ------------------------
    def _call(self, name, *args, send=None):
        """``part.name(*args)`` on every part, results in part order. ``send`` names the
        rows to pass on to the other parts' halos ('Z' or ('V', route)): nothing to do with
        one part."""
        return [getattr(p, name)(*args) for p in self.parts]

    def _threads(self, fn, *args):
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads)
        try:
            return fn(*args)
        finally:
            numba.set_num_threads(previous)

    @staticmethod
    def _total(parts):
        """Chunk partials of every part, in order, added in order."""
        parts = [np.asarray(p) for p in parts]
        shape = next((p.shape[1:] for p in parts if p.ndim), ())
        return _colsum(np.concatenate([p.reshape((-1,) + shape) for p in parts]))

    def _residual(self):
        res = self._call("residual")
        self._set_residual(res)

    def _set_residual(self, res):
        self._xr = float(self._total([x[0] for x in res]))
        self._gU = float(self._total([x[1] for x in res]))

    # -- one outer iteration ------------------------------------------------------------------
    def step(self, colour_order, rtol, maxiter):
        """Block solve of U, then the exact row updates of C in ``colour_order``.

        Returns (delta2, norm2, cg_iterations)."""
        if self.inner_maxiter is not None and int(maxiter) != self.inner_maxiter:
            raise ValueError(
                f"maxiter: this session was set up for {self.inner_maxiter} PCG step(s) per "
                f"outer iteration (its work arrays depend on it), got {maxiter}; make a "
                f"session with inner_maxiter={maxiter}")
        return self._threads(self._step, colour_order, rtol, maxiter)

    def _pcg(self, rtol, maxiter):
        tot = self._total
        single = bool(DIRECTION_FLOAT32) and maxiter == 1

        def precondition():  # before the first step: a one-step PCG's direction
            res = self._call("pcg_precondition", single, send="Z")
            return tot([x[0] for x in res]), tot([x[1] for x in res])

        def matvec(beta):
            return tot(self._call("pcg_matvec", beta))

        def update(alpha, again):
            res = self._call("pcg_update", alpha, again, send="Z" if again else None)
            return (tot([x[0] for x in res]), tot([x[1] for x in res])) if again else None

        return pcg_loop(precondition, matvec, update, None, rtol=rtol, maxiter=maxiter)

    def _step(self, colour_order, rtol, maxiter):
        self._call("save")
        it = 0
        d2 = n2 = 0.0
        if self.n_free:
            it = self._pcg(rtol, maxiter)
            res = self._call("finish_block", send=("V", self.layout.n_colours))
            n2 = float(self._total([x[0] for x in res]))
            d2 = float(self._total([x[1] for x in res]))
        for c in colour_order:
            self._call("colour_step", int(c), send=("V", int(c)))
        res = self._call("c_change")
        d2 += float(_canonical_sum(np.concatenate([x[0] for x in res])))
        n2 += float(_canonical_sum(np.concatenate([x[1] for x in res])))
        if self.extrapolate:
            d2, n2 = self._extrapolate(n2)  # ends with the exact residual
        else:
            self._residual()
        self.cg_iterations.append(it)
        return d2, n2, it

    def _extrapolate(self, norm2):
        """Exact minimisation of the objective over V + s1 D + s2 S, D = this outer step and
        S = the previous outer iteration's whole step (a conjugate-gradient-like momentum);
        accepted only where it lowers the objective by more than the search's rounding
        (``SEARCH_NOISE``; ``norm2`` = ||V||^2), so the fit stays monotone."""
        p = self.prep
        res = self._call("direction")
        if len(res[0]) > 4 and res[0][4] is not None:
            # the U rows' ||X||^2, formed by the direction pass (FOLD_X_UPDATE); norm2 held
            # the C rows' part: the same sum as the U part plus it
            norm2 = float(self._total([x[4] for x in res])) + norm2
        tot = self._total([x[2] for x in res])
        a = np.array([float(self._total([x[0] for x in res])), tot[0]])
        B = np.array([[float(self._total([x[1] for x in res])), tot[1]], [tot[1], tot[2]]])
        coeffs = np.empty((p.pi.shape[0], 6))
        for idx, x in zip(self.pair_index, res):
            coeffs[idx] = x[3]
        s1, s2, v = subspace_search(a, B, coeffs, p.gamma, p.loss_code)
        if -v <= self._noise * (abs(s1) + abs(s2)) * norm2:
            s1 = s2 = 0.0
        self.steps_taken.append((s1, s2))
        res = self._call("subspace_step", s1, s2)
        tot2 = self._total([x[0] for x in res])
        self._set_residual([x[1] for x in res])
        return float(tot2[0]), float(tot2[1])

    def state_arrays(self):
        """Arrays beyond V that a checkpoint must hold to resume bitwise."""
        return self.parts[0].state_arrays()

    def load_state_arrays(self, arrays):
        """S, LS and (checkpoints since R was stored) R; the residual follows."""
        if self.extrapolate:
            self._set_residual(self._threads(lambda: [self.parts[0].load_state(*arrays)]))

    # -- by-products ----------------------------------------------------------------------------
    def objective_kkt(self, with_kkt=True):
        """(objective, kkt) of the current V, from the exact residual and the C rows; kkt is
        None without ``with_kkt`` (the objective alone: the same value)."""
        return self._threads(self._objective_kkt, with_kkt)

    def _objective_kkt(self, with_kkt=True):
        p = self.prep
        res = self._call("objective_parts", with_kkt)
        sm = np.concatenate([x[0] for x in res])
        g = np.concatenate([x[1] for x in res])
        pairs = np.empty(p.pi.shape[0])
        for idx, x in zip(self.pair_index, res):
            pairs[idx] = x[2]
        obj = -self._xr + float(_canonical_sum(sm)) + p.gamma * float(_canonical_sum(pairs))
        if not with_kkt:
            return obj, None
        vn = ordered_total([v for x in res for v in x[3]])
        num = self._gU + float(_canonical_sum(g))
        kkt = float(np.sqrt(num / vn)) if vn > 0 else float(np.sqrt(num))
        return obj, kkt

    def gather(self):
        return self.V

    def assign(self, V):
        """Replace V (internal order): a joint move (``npkl_dist._joint``). The momentum
        restarts, the residual is recomputed exactly."""
        self._set_residual(self._threads(self._assign_parts, V))

    def _assign_parts(self, V):
        return [self.parts[0].assign(V)]

    def checkpoint_array(self):
        """V and the state arrays side by side: what a checkpoint stores."""
        return np.hstack([self.gather()] + self.state_arrays()) if self.extrapolate \
            else self.gather()

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        W = self.checkpoint_array()
        for start in range(0, W.shape[0], row_block):
            store.write_V_block(ckpt_id, start, W[start:start + row_block])

    def close(self):
        pass


def check_precond(precond):
    if precond not in PRECONDITIONERS:
        raise ValidationError(
            f"precond: {precond!r} is not one of {', '.join(PRECONDITIONERS)}"
        )
