"""The coarse spectral start (``start='coarse'``): the bottom eigenvectors of L on a coarse
plain-aggregation level, prolongated and scaled.

``start='spectral'`` solves for the r bottom eigenvectors of L by LOBPCG, far dearer than the
fit it starts; most of what it buys is global (which points move together), and a coarse level
of an aggregation hierarchy holds that at a tiny fraction of the cost:

1. Aggregate L's graph (pyamg's ``standard_aggregation``, rows visited in the order given)
   and form the Galerkin operator Tᵀ L T for the tentative prolongator with orthonormal
   columns, T[i, agg(i)] = b_i / ||b on agg(i)||, where the candidate b is the constant
   improved by a few damped Jacobi steps on L x = 0 (:func:`near_null_candidate`; for a
   normalised Laplacian the smooth vectors are √degree, not constant). Repeat while the
   level has more than ``max_coarse`` rows and the next would keep at least 2r; each coarse
   level's candidate is the norms of b on its aggregates, as in pyamg's ``fit_candidates``.
2. The r bottom eigenpairs of the last level: dense ``eigh`` up to ``DENSE_MAX`` rows, else
   ARPACK (``eigsh``, smallest algebraic, a fixed start vector, so deterministic).
3. E = T_0 T_1 ... X: the candidate's shape on each finest aggregate (rows of isolated
   points, which no aggregate holds, are 0). Its columns are orthonormal and, the levels
   being exact Galerkin products, tr(Eᵀ L E) = tr(Xᵀ A_c X) without a product with L.
4. V = sqrt(s) E, with s minimising the objective along the ray (a one-dimensional convex
   problem in s, as for the spectral start), but with a mean row norm of at least
   ``MIN_ROW_NORM`` (:func:`start_scale`: with few pairs the ray's optimum is the saddle
   V = 0).

The aggregation is greedy in row order, so the start depends on the order of L's rows:
:func:`fit_bcd` computes it in its internal (locality) order, :func:`initial_V` in the
original order. Both are the same construction; the vectors differ.

``start='coarse-free'`` (:func:`free_basis`, :func:`free_start`; block fits' default where at
least ``FREE_MIN_FRACTION`` of the points are in no pair) takes the hierarchy the block
solver builds anyway for its preconditioner: the plain-aggregation hierarchy of L_UU, the
unconstrained block (``_blocksolve.free_hierarchy``). The r bottom eigenvectors of its
coarsest level with at least 2r rows (:func:`basis_level`), prolongated, give E_U (a level of
fewer rows would cap the fit's rank: docs/decisions/rank-deficient-starts.md); the constrained rows get one Jacobi step on L E = 0
from them, e_i = -(L_CU E_U)_i / l_ii; the scale is the coarse start's. The fit builds the
hierarchy once for both.

Reference: docs/algorithms.md, "BCD" (starts); docs/decisions/coarse-start-and-c-passes.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange
from pyamg.aggregation import standard_aggregation
from scipy.optimize import minimize_scalar
from scipy.sparse.linalg import eigsh

from ...linalg._aggregation import _group_rows, _single_entry_columns
from ...linalg._blas import _OneBlasThread
from ...linalg._reductions import chunked_sums, ordered_total, row_norms2
from ...problem._objective import loss_fn

#: Coarsen while a level has more rows than this (the block solver's AMG uses the same).
MAX_COARSE = 500

#: Eigenproblems of at most this many rows are solved densely; larger ones by ARPACK.
DENSE_MAX = 1000

#: The start's smallest mean row norm (see :func:`start_scale`); the random start's is 1.
MIN_ROW_NORM = 0.1

#: start='auto' of a block fit takes 'coarse-free' (the block solver's own hierarchy of
#: L_UU) where at least this fraction of the points is in no pair, else 'coarse'.
FREE_MIN_FRACTION = 0.5

#: The coarse-free start's level has at least this many times the rank's rows (as
#: :func:`coarse_basis` stops coarsening before a level of fewer than 2 rank rows).
LEVEL_MIN_FACTOR = 2

#: Damped Jacobi steps that improve the finest level's candidate (pyamg: 4 symmetric
#: Gauss-Seidel sweeps).
CANDIDATE_STEPS = 8


@dataclass
class CoarseBasis:
    """The aggregation levels (``aggs[k]``, ``ts[k]``: level k's aggregate of each row and
    T's entry there) and the last level's eigenpairs (ascending ``w``, columns of ``X``)."""

    aggs: list
    ts: list
    w: np.ndarray
    X: np.ndarray
    rank: int

    @property
    def n_coarse(self) -> int:
        return int(self.X.shape[0])


def _aggregate(A: sp.csr_matrix, b=None):
    """(agg, t, n_coarse, b_coarse) of pyamg's standard aggregation of A's graph, with the
    tentative prolongator of the candidate ``b`` (default: ones): t = b / ||b on the
    aggregate|| (orthonormal columns), and the coarse candidate those norms."""

    T = standard_aggregation(A)[0].tocsr()
    n, nc = T.shape
    b = np.ones(n) if b is None else np.asarray(b, np.float64)
    counts = np.diff(T.indptr)
    agg = np.full(n, -1, np.int64)
    has = counts > 0
    agg[has] = T.indices[T.indptr[:-1][has]]
    norm = np.sqrt(np.bincount(agg[has], weights=b[has] ** 2, minlength=nc))
    t = np.zeros(n)
    ok = has.copy()
    ok[has] = norm[agg[has]] > 0
    t[ok] = b[ok] / norm[agg[ok]]
    return agg, t, nc, norm


@njit(parallel=True, cache=True)
def _jacobi_step(indptr, indices, data, diag, omega, x, out):
    """out = x - omega D⁻¹ (diag(d) + A_off) x, one row per iteration."""
    for i in prange(x.shape[0]):
        acc = diag[i] * x[i]
        for p in range(indptr[i], indptr[i + 1]):
            acc += data[p] * x[indices[p]]
        out[i] = x[i] - omega * acc / diag[i]


def near_null_candidate(indptr, indices, data, diag, steps: int = CANDIDATE_STEPS):
    """Ones improved by ``steps`` damped Jacobi iterations on L x = 0 (the weight 1 / the
    Gershgorin bound of D⁻¹ L, so the iteration contracts and keeps x >= 0 on an M-matrix):
    the local shape of L's smoothest vectors, e.g. √degree for a normalised Laplacian, where
    the constant that piecewise-constant aggregates hold is not smooth. pyamg improves its
    candidate the same way (by Gauss-Seidel)."""
    diag = np.asarray(diag, np.float64)
    data = np.asarray(data, np.float64)
    rows = np.empty(diag.shape[0])
    _row_ratio(indptr, data, diag, rows)
    ratio = float(np.max(rows)) if diag.size else 1.0
    x = np.ones(diag.shape[0])
    y = np.empty_like(x)
    for _ in range(int(steps)):
        _jacobi_step(indptr, indices, data, diag, 1.0 / ratio, x, y)
        x, y = y, x
    return x


@njit(parallel=True, cache=True)
def _galerkin_fill(
    indptr, indices, data, diag, agg, t, gptr, grows, bptr, slot, n_coarse, n_chunks
):
    """Tᵀ (A + diag(diag)) T row by row into slots of a bound on each row's length
    (``bptr``): the diagonal entry first, then the columns in the order first met. Returns
    (idx, val, counts). ``slot[ch]`` is a chunk's column-to-position map, all -1 on entry and
    on exit. Only the written part of each row's slot is touched."""
    idx = np.empty(bptr[n_coarse], np.int32)
    val = np.empty(bptr[n_coarse])
    counts = np.zeros(n_coarse, np.int64)
    step = (n_coarse + n_chunks - 1) // n_chunks
    for ch in prange(n_chunks):
        sl = slot[ch]
        for a in range(ch * step, min(n_coarse, (ch + 1) * step)):
            start = bptr[a]
            idx[start] = a
            val[start] = 0.0
            sl[a] = start
            nxt = start + 1
            for g in range(gptr[a], gptr[a + 1]):
                i = grows[g]
                ti = t[i]
                val[start] += ti * ti * diag[i]
                for p in range(indptr[i], indptr[i + 1]):
                    j = indices[p]
                    b = agg[j]
                    if b < 0:
                        continue
                    q = sl[b]
                    if q < 0:
                        q = nxt
                        sl[b] = q
                        idx[q] = b
                        val[q] = 0.0
                        nxt += 1
                    val[q] += ti * data[p] * t[j]
            for q in range(start, nxt):
                sl[idx[q]] = -1
            counts[a] = nxt - start
    return idx, val, counts


@njit(parallel=True, cache=True)
def _compact_rows(bptr, cptr, idx, val, out_idx, out_val):
    for a in prange(cptr.shape[0] - 1):
        src = bptr[a]
        for q in range(cptr[a], cptr[a + 1]):
            out_idx[q] = idx[src]
            out_val[q] = val[src]
            src += 1


def galerkin(indptr, indices, data, diag, agg, t, n_coarse: int) -> sp.csr_matrix:
    """Tᵀ (A + diag(diag)) T for T[i, agg[i]] = t[i] (row i empty where agg[i] < 0), A the
    CSR (indptr, indices, data). One pass per coarse row over its aggregate's rows, columns
    marked in a dense array over the coarse rows (each chunk its own), each row written into
    a slot as long as its aggregate's entries (plus the diagonal), then compacted; the
    coarse diagonal is stored even where it sums to 0. (The block solver's
    ``_aggregation.galerkin_plain`` reproduces scipy's entry order for pyamg's next
    aggregation; this start needs only the operator.)"""

    n_coarse = int(n_coarse)
    agg = np.asarray(agg, np.int64)
    gptr, grows = _group_rows(agg, n_coarse)
    n_chunks = max(1, min(n_coarse, 4 * numba.get_num_threads()))
    slot = np.full((n_chunks, n_coarse), -1, np.int64)
    has = agg >= 0
    bound = np.bincount(
        agg[has], weights=np.diff(np.asarray(indptr, np.int64))[has], minlength=n_coarse
    ).astype(np.int64)
    bptr = np.zeros(n_coarse + 1, np.int64)
    np.cumsum(np.minimum(bound + 1, n_coarse), out=bptr[1:])
    idx, val, counts = _galerkin_fill(
        indptr,
        indices,
        np.asarray(data, np.float64),
        np.asarray(diag, np.float64),
        agg,
        np.asarray(t, np.float64),
        gptr,
        grows,
        bptr,
        slot,
        n_coarse,
        n_chunks,
    )
    cptr = np.zeros(n_coarse + 1, np.int64)
    np.cumsum(counts, out=cptr[1:])
    out_idx = np.empty(cptr[-1], np.int32)
    out_val = np.empty(cptr[-1])
    _compact_rows(bptr, cptr, idx, val, out_idx, out_val)
    return sp.csr_matrix((out_val, out_idx, cptr), shape=(n_coarse, n_coarse))


@njit(parallel=True, cache=True)
def _row_ratio(indptr, data, diag, out):
    """out[i] = 1 + sum_j |a_ij| / d_i (Gershgorin's bound of row i of D⁻¹ A)."""
    for i in prange(diag.shape[0]):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            acc += abs(data[p])
        out[i] = 1.0 + acc / diag[i]


def coarse_basis(
    indptr,
    indices,
    data,
    diag,
    rank: int,
    max_coarse: int = MAX_COARSE,
    dense_max: int = DENSE_MAX,
) -> CoarseBasis:
    """The hierarchy and eigenpairs of the coarse start for L = off-diagonal CSR (``indptr,
    indices, data``, no diagonal entries) + diag(``diag``)."""
    rank = int(rank)
    n = int(np.shape(diag)[0])
    A = sp.csr_matrix((np.asarray(data, np.float64), indices, indptr), shape=(n, n))
    A_diag = np.asarray(diag, np.float64)  # each level: off-diagonal part + diagonal
    aggs, ts = [], []
    b = near_null_candidate(A.indptr, A.indices, A.data, A_diag) if n > max_coarse else None
    while A.shape[0] > max_coarse:
        agg, t, nc, b = _aggregate(A, b)
        if nc < 2 * rank or nc >= A.shape[0]:
            break
        Ac = galerkin(A.indptr, A.indices, A.data, A_diag, agg, t, nc)
        A_diag = Ac.diagonal()
        Ac.setdiag(0.0)  # the stored diagonal entries become explicit zeros
        aggs.append(agg)
        ts.append(t)
        A = Ac
    A = (A + sp.diags(A_diag)).tocsr()
    w, X = bottom_eigenpairs(A, rank, dense_max)
    return CoarseBasis(aggs, ts, w, X, rank)


def bottom_eigenpairs(A: sp.csr_matrix, rank: int, dense_max: int = DENSE_MAX):
    """(w, X): the min(rank, m) smallest eigenvalues of the symmetric (m, m) A, ascending, and
    their eigenvectors: dense ``eigh`` up to ``dense_max`` rows, else ARPACK from a fixed
    start vector (deterministic).

    On one BLAS thread, whatever the process's count: LAPACK's rounding depends on it, and
    eigenvalues equal up to rounding (one per connected component of the graph, the shift
    ``delta`` each) then come back in another order or sign, a start that differs by a
    signed permutation of V's columns: a resume in a process whose BLAS runs on another
    number of threads would not reproduce the uninterrupted fit bit for bit."""
    m = A.shape[0]
    k = min(int(rank), m)
    with _OneBlasThread():
        if m <= dense_max or k >= m - 1:
            w, X = np.linalg.eigh(A.toarray())
            w, X = w[:k], X[:, :k]
        else:
            w, X = eigsh(A, k=k, which="SA", tol=1e-6, v0=np.ones(m))
            order = np.argsort(w, kind="stable")
            w, X = w[order], X[:, order]
    return np.ascontiguousarray(w), np.ascontiguousarray(X)


def free_basis(hierarchy, rank: int, dense_max: int = DENSE_MAX) -> CoarseBasis:
    """The basis of ``start='coarse-free'`` from the plain-aggregation hierarchy of L_UU (the
    block solver's default preconditioner's, ``_blocksolve.free_hierarchy``): its tentative
    prolongators (orthonormal columns, one entry per row) down to the level
    :func:`basis_level` picks, and the bottom eigenpairs of that level's operator."""

    k = basis_level([lev.A.shape[0] for lev in hierarchy.levels], rank)
    aggs, ts = [], []
    for lev in hierarchy.levels[:k]:
        agg, t = _single_entry_columns(sp.csr_matrix(lev.P))
        aggs.append(agg)
        ts.append(t)
    w, X = bottom_eigenpairs(sp.csr_matrix(hierarchy.levels[k].A), rank, dense_max)
    return CoarseBasis(aggs, ts, w, X, int(rank))


def basis_level(sizes, rank: int) -> int:
    """The level of a hierarchy (``sizes``: its levels' row counts, finest first) whose
    eigenvectors the coarse-free start prolongates: the coarsest with at least
    ``LEVEL_MIN_FACTOR`` x rank rows (the finest if none has). A level of m rows gives at
    most m independent columns, and the fit never leaves the start's column span
    (``npkl_dist.solvers.bcd._rank``): the coarsest level of the preconditioner's hierarchy had one row
    on a planted-partition graph (99,013 -> 1,870 -> 1 rows), and the fit ended at rank 1."""
    k = 0
    for i, m in enumerate(sizes):
        if m >= LEVEL_MIN_FACTOR * int(rank):
            k = i
    return k


@njit(parallel=True, cache=True, nogil=True)
def _fill_constrained_rows(indptr, indices, data, diag, nu, E, terms):
    """Rows nu.. of E (the C rows) = one Jacobi step on L E = 0 from the U rows alone,
    e_i = -(sum over U columns j of l_ij e_j) / l_ii; then terms[i - nu] = the C rows' part of
    tr(Eᵀ L E): 2 e_i·(L_CU E_U)_i + e_i·(L_CC E_C)_i (diagonal included). ``indptr, indices,
    data``: L's off-diagonal (CSR), ``diag`` its diagonal."""
    n, r = E.shape
    for i in prange(nu, n):
        acc = np.zeros(r)
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j < nu:
                a = np.float64(data[p])
                for c in range(r):
                    acc[c] += a * E[j, c]
        d = np.float64(diag[i])
        for c in range(r):
            E[i, c] = -acc[c] / d
    for i in prange(nu, n):
        s = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            dot = 0.0
            for c in range(r):
                dot += E[i, c] * E[j, c]
            s += (2.0 if j < nu else 1.0) * np.float64(data[p]) * dot
        dot = 0.0
        for c in range(r):
            dot += E[i, c] * E[i, c]
        terms[i - nu] = s + np.float64(diag[i]) * dot


def free_start(
    indptr,
    indices,
    data,
    diag,
    n_free,
    pi,
    pj,
    pt,
    basis: CoarseBasis,
    *,
    rank: int,
    loss: str,
    gamma: float,
    bound: float,
    dtype=np.float64,
    out=None,
) -> np.ndarray:
    """``start='coarse-free'`` in the U-first order of a block fit (rows 0..n_free
    unconstrained): E_U = the basis prolongated (the bottom eigenvectors of L_UU's coarse
    Galerkin operator), E_C = one Jacobi step from E_U (:func:`_fill_constrained_rows`),
    scaled along the ray as the coarse start (:func:`start_scale`, with E's own Frobenius
    norm for the floor). tr(Eᵀ L E) = sum(w) (exact Galerkin on the U block) plus the C
    rows' terms, without a product with L. ``out``: a C-contiguous (n, rank) float64 array
    to build E in (then, for float64, the start itself), or None."""
    n = int(np.shape(diag)[0])
    nu = int(n_free)
    if out is None:
        E = np.empty((n, rank))
    elif out.shape != (n, rank) or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"free_start: out must be a C-contiguous ({n}, {rank}) float64 array")
    else:
        E = out
    prolong(basis, rank, np.float64, out=E[:nu])
    terms = np.empty(n - nu)
    _fill_constrained_rows(indptr, indices, data, diag, nu, E, terms)
    a = float(np.sum(basis.w[:rank])) + float(np.sum(terms))
    return _scaled(
        E,
        a,
        pi,
        pj,
        pt,
        rank=rank,
        loss=loss,
        gamma=gamma,
        bound=bound,
        dtype=dtype,
        own_norm=True,
    )


@njit(parallel=True, cache=True)
def _prolong_rows(agg, t, Y, out):
    """out[i] = t[i] * Y[agg[i]] (0 where agg[i] < 0)."""
    r = Y.shape[1]
    for i in prange(agg.shape[0]):
        a = agg[i]
        if a < 0:
            for c in range(r):
                out[i, c] = 0.0
        else:
            ti = t[i]
            for c in range(r):
                out[i, c] = ti * Y[a, c]


def prolong(basis: CoarseBasis, rank: int, dtype=np.float64, out=None) -> np.ndarray:
    """E = T_0 T_1 ... X[:, :rank], shape (n, rank); columns beyond the coarse level's size
    (only when n < rank) are zero. ``out``: a C-contiguous (n, rank) array of ``dtype`` to
    write E into (the finest level's rows go there directly, not through a copy)."""
    X = basis.X
    Y = np.zeros((X.shape[0], rank))
    Y[:, : min(rank, X.shape[1])] = X[:, :rank]
    for k in range(len(basis.aggs) - 1, -1, -1):
        shape = (basis.aggs[k].shape[0], rank)
        if k == 0 and out is not None:
            if out.shape != shape or out.dtype != np.dtype(dtype) or not out.flags.c_contiguous:
                raise ValueError(f"prolong: out must be a C-contiguous {shape} {dtype} array")
            dst = out
        else:
            dst = np.empty(shape, np.float64 if k else dtype)
        _prolong_rows(basis.aggs[k], basis.ts[k], Y, dst)
        Y = dst
    if not basis.aggs:  # no levels: E is the coarse basis itself
        if out is not None:
            out[...] = Y
            return out
    return np.ascontiguousarray(Y, dtype=dtype)


def smooth_energy(basis: CoarseBasis, rank: int) -> float:
    """tr(Eᵀ L E) of :func:`prolong`'s E, from the coarse level alone (exact Galerkin)."""
    return float(np.sum(basis.w[:rank]))


def start_scale(
    loss: str,
    gamma: float,
    bound: float,
    a: float,
    z: np.ndarray,
    max_row2: float,
    n: int,
    r: int,
    min_row: float = MIN_ROW_NORM,
    endpoint: bool = True,
    fro2: float | None = None,
) -> float:
    """The scale s of V = sqrt(s) E: the s >= 0 minimising s a + gamma sum loss(s z) (the
    objective along the ray, where a = tr(Eᵀ L E) and z = t_p <e_i, e_j> over the pairs), but
    at least ``min_row``² n / ``fro2``, which gives V a mean squared row norm of ``min_row``²
    (``fro2`` = ||E||_F², default r: E has r orthonormal columns). For the linear loss s also keeps every row in the ball
    (max_row2 = max ||e_i||²). ``endpoint``: take the search interval's upper end where it is
    no worse than the bounded search's point (which never reaches the end); the spectral
    start calls this with ``min_row=0, endpoint=False``, its rule before the coarse start.

    The floor matters: with few pairs the smooth fields barely touch them, the ray's optimum
    is V = 0, and V = 0 is a saddle of the factored problem that no step leaves. From a small
    multiple of E the fit grows the directions the pairs favour out of E's smooth ones
    (docs/decisions/coarse-start-and-c-passes.md)."""

    lf = loss_fn(loss)
    z = np.asarray(z, np.float64)

    def f(s):
        return s * a + gamma * float(np.sum(lf(s * z)))

    hi = f(0.0) / max(a, 1e-300) if f(0.0) > 0 else np.inf
    cap = bound**2 / max_row2 if loss == "linear" and max_row2 > 0 else np.inf
    hi = min(hi, cap)
    if not np.isfinite(hi) or hi <= 0:
        hi = float(n) / r
    s = max(float(minimize_scalar(f, bounds=(0.0, hi), method="bounded").x), 0.0)
    if endpoint and f(hi) <= f(s):  # the bounded search stops short of an optimum at its end
        s = hi
    fro2 = float(r) if fro2 is None else float(fro2)
    return min(max(s, min_row**2 * n / max(fro2, 1e-300)), cap)


def coarse_start(
    indptr,
    indices,
    data,
    diag,
    pi,
    pj,
    pt,
    *,
    rank: int,
    loss: str,
    gamma: float,
    bound: float,
    dtype=np.float64,
    basis: CoarseBasis | None = None,
) -> tuple[np.ndarray, CoarseBasis]:
    """(V, basis): the coarse start in the order of L's rows (off-diagonal CSR + diagonal)
    with the pairs (pi, pj, pt) in that order. ``basis``: one computed before for this L and
    this rank (a fit setup's cache), reused."""
    if basis is None or basis.rank != rank:
        basis = coarse_basis(indptr, indices, data, diag, rank)
    E = prolong(basis, rank, np.float64)
    return _scaled(
        E,
        smooth_energy(basis, rank),
        pi,
        pj,
        pt,
        rank=rank,
        loss=loss,
        gamma=gamma,
        bound=bound,
        dtype=dtype,
    ), basis


def _scaled(E, a, pi, pj, pt, *, rank, loss, gamma, bound, dtype, own_norm=False):
    """sqrt(s) E in ``dtype``, s from :func:`start_scale` for a = tr(Eᵀ L E) and the pairs
    (pi, pj, pt) in E's row order; scales E in place. ``own_norm``: the floor from E's own
    Frobenius norm (else E has ``rank`` orthonormal columns)."""
    pi = np.asarray(pi, np.int64)
    pj = np.asarray(pj, np.int64)
    z = np.asarray(pt, np.float64) * np.einsum("kr,kr->k", E[pi], E[pj])

    row2 = row_norms2(E) if loss == "linear" or own_norm else None
    max_row2 = float(np.max(row2)) if loss == "linear" and len(E) else 0.0
    fro2 = ordered_total(chunked_sums(row2)) if own_norm else None
    s = start_scale(loss, gamma, bound, a, z, max_row2, E.shape[0], rank, fro2=fro2)
    _scale_in_place(E, np.sqrt(s))
    return np.ascontiguousarray(E, dtype=dtype)


@njit(parallel=True, cache=True, nogil=True)
def _scale_in_place(E, c):
    """E *= c, rows in parallel."""
    n, r = E.shape
    for i in prange(n):
        for k in range(r):
            E[i, k] *= c
