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
residual cheap: the gradient on U is -2R, and tr(V'LV) = -<V_U, R> + sum_{i in C} v_i'(LV)_i."""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from ...linalg._csr import csr_compact, csr_row_ptr, sort_row
from ...linalg._reductions import chunked_sums, ordered_total
from ...linalg._rowops import SUM_BLOCK, _add_row_products
from ...linalg._simd import _madd, prefetch_ahead


def _canonical_sum(values) -> float:
    """Sum in fixed SUM_BLOCK-row chunks, added in order (thread-count independent)."""
    return ordered_total(chunked_sums(values))


#: rows per reduction chunk (partial sums in a fixed order: thread-count independent)
RB = SUM_BLOCK


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
    row into two runs with a tail each, slower (docs/decisions/block-fit-at-1e6.md)."""
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
            q[c] = _madd(
                w3,
                np.float64(X[k3, c]),
                _madd(
                    w2,
                    np.float64(X[k2, c]),
                    _madd(w1, np.float64(X[k1, c]), _madd(w0, np.float64(X[k0, c]), q[c])),
                ),
            )
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
    partials of every outer iteration, instead of a Python loop over the chunks)."""
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
