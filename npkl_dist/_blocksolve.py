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

from contextlib import contextmanager
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from ._errors import ValidationError
from ._kernels import (CHUNK, SUM_BLOCK, greedy_colouring, pair_terms, sweep_units,
                       sweep_units_serial)
from ._kkt import kkt_row_terms
from .executors._inprocess import chunked_sums, ordered_total


def _canonical_sum(values) -> float:
    """Sum in fixed SUM_BLOCK-row chunks, added in order (thread-count independent)."""
    return ordered_total(chunked_sums(values))

__all__ = ["BlockLayout", "block_layout", "AMGPreconditioner", "JacobiPreconditioner",
           "block_pcg", "PRECONDITIONERS", "BlockSession", "seeded_global_random"]

PRECONDITIONERS = ("amg", "amg-plain", "jacobi")

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


def block_layout(problem, plan) -> BlockLayout:
    """U-first layout from ``plan`` (its locality order); the constrained rows get a greedy
    proper colouring of the conflict graph (manifold edges and constraint pairs) restricted
    to them."""
    from ._plan import _constraint_lists

    n = problem.n_points
    constrained = np.zeros(n, bool)
    c = problem.constraints
    constrained[c.i] = True
    constrained[c.j] = True
    in_c = constrained[plan.order]  # internal plan rows that are constrained
    free_rows = np.flatnonzero(~in_c)
    con_rows = np.flatnonzero(in_c)
    perm = np.concatenate([free_rows, con_rows])  # new internal q -> plan internal row
    order = plan.order[perm].astype(np.int64)
    rank_of = np.empty(n, np.int64)
    rank_of[order] = np.arange(n, dtype=np.int64)
    n_free = int(free_rows.shape[0])
    Lp = problem.L[order][:, order].tocsr()
    cptr, cidx, _ = _constraint_lists(problem, rank_of)
    colour = np.zeros(n, np.int64)
    active = np.zeros(n, np.bool_)
    active[n_free:] = True
    greedy_colouring(n, Lp.indptr.astype(np.int64), Lp.indices.astype(np.int64), cptr, cidx,
                     active, colour)
    new_rows = np.arange(n_free, n, dtype=np.int64)
    ccol = colour[n_free:]
    srt = np.lexsort((new_rows, ccol))
    used, counts = np.unique(ccol, return_counts=True)
    ptr = np.zeros(used.shape[0] + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return BlockLayout(order, rank_of, n_free, new_rows[srt], ptr)


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
    for p in range(indptr[i], indptr[i + 1]):
        k = indices[p]
        w = np.float64(data[p])
        for c in range(r):
            q[c] += w * X[k, c]


@njit(nogil=True, cache=True, parallel=True)
def _matvec_dot(indptr, indices, data, diag, P, Q, part):
    """Q = A P (A = diag + off-diagonal CSR); part[ch, c] = sum over chunk rows of P*Q."""
    n, r = P.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        acc = np.zeros(r)
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            _row_times(i, indptr, indices, data, diag, P, q)
            for c in range(r):
                Q[i, c] = q[c]
                acc[c] += P[i, c] * q[c]
        for c in range(r):
            part[ch, c] = acc[c]


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


@njit(nogil=True, cache=True, parallel=True)
def _norms(R, part_rr):
    n, r = R.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        b = np.zeros(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                b[c] += R[i, c] * R[i, c]
        for c in range(r):
            part_rr[ch, c] = b[c]


@njit(nogil=True, cache=True, parallel=True)
def _cg_update(X, R, P, Q, alpha):
    """X += alpha P ; R -= alpha Q (per column alpha)."""
    n, r = X.shape
    for i in prange(n):
        for c in range(r):
            X[i, c] += alpha[c] * P[i, c]
            R[i, c] -= alpha[c] * Q[i, c]


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
def _jacobi_dots(R, dinv, Z, part_rz, part_rr):
    """Z = dinv * R fused with the R*Z and R*R chunk sums."""
    n, r = R.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = np.zeros(r)
        b = np.zeros(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            s = dinv[i]
            for c in range(r):
                z = s * R[i, c]
                Z[i, c] = z
                a[c] += R[i, c] * z
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
    """Column totals of chunk partials, added in chunk order."""
    tot = np.zeros(part.shape[1:]) if part.ndim > 1 else 0.0
    for k in range(part.shape[0]):
        tot = tot + part[k]
    return tot


# --------------------------------------------------------------------------------------------
# preconditioners (symmetric positive definite, act on all columns at once)
# --------------------------------------------------------------------------------------------

def _int64_csr(M):
    M = sp.csr_matrix(M, dtype=np.float64)
    M.sort_indices()
    M.indptr = M.indptr.astype(np.int64)
    M.indices = M.indices.astype(np.int64)
    return M


@contextmanager
def seeded_global_random(seed: int = 0):
    """pyamg draws from numpy's global generator (spectral-radius estimates, LOBPCG's
    preconditioner set-up): seed it for the block and restore the caller's state, so that
    fits are reproducible bit for bit."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


class JacobiPreconditioner:
    """Z = D^{-1} R."""

    name = "jacobi"

    def __init__(self, A_diag):
        self.dinv = 1.0 / np.asarray(A_diag, np.float64)
        self.setup_seconds = 0.0

    def apply_dots(self, R, Z, part_rz, part_rr):
        _jacobi_dots(R, self.dinv, Z, part_rz, part_rr)


class AMGPreconditioner:
    """One symmetric V-cycle of smoothed-aggregation AMG (pyamg hierarchy), all columns at once.

    pyamg builds the hierarchy (aggregation, smoothed prolongators, Galerkin coarse operators)
    once per graph; its own cycle works on one vector at a time, so the cycle here applies the
    same hierarchy to an (n, r) block: damped Jacobi pre- and post-smoothing (weight 4/(3 rho),
    rho = the Gershgorin bound on the spectral radius of D^{-1}A, which keeps the cycle SPD),
    Galerkin restriction P', and a dense Cholesky solve on the coarsest level.
    """

    name = "amg"

    def __init__(self, A: sp.csr_matrix, max_coarse: int = 500, max_levels: int = 10,
                 smooth="jacobi"):
        import time

        import pyamg
        from scipy.linalg import cho_factor

        t0 = time.perf_counter()
        A = sp.csr_matrix(A, dtype=np.float64)
        # pyamg estimates spectral radii from np.random's global generator: seed it for the
        # set-up (restoring the caller's state) so that the hierarchy, and with it every fit
        # and every resume, is reproducible bit for bit.
        with seeded_global_random():
            if smooth == "jacobi":
                # local (row-sum) weights instead of a power-iteration spectral radius:
                # same hierarchy quality here at a fraction of the set-up time
                smooth = ("jacobi", {"weighting": "local"})
            ml = pyamg.smoothed_aggregation_solver(A, symmetry="hermitian",
                                                   max_coarse=max_coarse, smooth=smooth,
                                                   max_levels=max_levels, keep=False)
            self._setup_levels(ml, cho_factor, A)
        self.setup_seconds = time.perf_counter() - t0

    def _setup_levels(self, ml, cho_factor, A):
        self.levels = []
        for lev in ml.levels[:-1]:
            Ak = sp.csr_matrix(lev.A)
            d = Ak.diagonal()
            # Gershgorin bound on rho(D^-1 A): cheap, and a smaller weight keeps the
            # smoother convergent and the cycle SPD
            rho = float(np.max(abs(Ak).sum(axis=1).A1 / d))
            off = (Ak - sp.diags(d)).tocsr()
            off.sort_indices()
            self.levels.append({
                "indptr": off.indptr.astype(np.int64), "indices": off.indices.astype(np.int64),
                "data": off.data, "diag": d, "w": (4.0 / (3.0 * rho)) / d,
                "P": _int64_csr(lev.P), "R": _int64_csr(lev.P.T),
            })
        coarse = ml.levels[-1].A.toarray()
        self.coarse = cho_factor(coarse)
        self.dinv = 1.0 / A.diagonal()
        self.operator_complexity = float(ml.operator_complexity())
        self.n_levels = len(ml.levels)

    def _cycle(self, k, b):
        from scipy.linalg import cho_solve

        if k == len(self.levels):
            return cho_solve(self.coarse, b)
        lev = self.levels[k]
        args = (lev["indptr"], lev["indices"], lev["data"], lev["diag"], lev["w"])
        x = np.empty_like(b)
        res = np.empty_like(b)
        _pre_smooth(*args, b, x, res)  # x = w b (one Jacobi step from 0), res = b - A x
        R_, P_ = lev["R"], lev["P"]
        coarse_b = np.empty((R_.shape[0], b.shape[1]))
        _csr_mm(R_.indptr, R_.indices, R_.data, res, coarse_b, False)
        _csr_mm(P_.indptr, P_.indices, P_.data, self._cycle(k + 1, coarse_b), x, True)
        _post_smooth(*args, b, x, res)  # res = x + w (b - A x)
        return res

    def apply_dots(self, R, Z, part_rz, part_rr):
        Z[...] = self._cycle(0, R)
        _dots(R, Z, part_rz, part_rr)


# --------------------------------------------------------------------------------------------
# block PCG
# --------------------------------------------------------------------------------------------

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
    target = rtol * B_norm
    M.apply_dots(R, Z, part_a, part_b)
    rz = _colsum(part_a)
    rr = _colsum(part_b)
    if np.all(np.sqrt(rr) <= target):
        return 0
    P[...] = Z
    it = 0
    while it < maxiter:
        it += 1
        _matvec_dot(A_off.indptr, A_off.indices, A_off.data, A_diag, P, Q, part_a)
        pq = _colsum(part_a)
        alpha = np.where(pq > 0, rz / np.where(pq > 0, pq, 1.0), 0.0)
        _cg_update(X, R, P, Q, alpha)
        if it == maxiter:  # no next iteration: skip the preconditioner
            _norms(R, part_b)
            break
        M.apply_dots(R, Z, part_a, part_b)
        rz_new = _colsum(part_a)
        rr = _colsum(part_b)
        if np.all(np.sqrt(rr) <= target):
            break
        beta = np.where(rz > 0, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        rz = rz_new
        _direction(P, Z, beta)
    return it


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
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n_free)):
            d = np.float64(diag[i])
            for c in range(r):
                q[c] = -d * X[i, c]
            for p in range(indptr[i], indptr[i + 1]):
                k = indices[p]
                w = np.float64(data[p])
                for c in range(r):
                    q[c] -= w * V[k, c]
            s = dinv[i]
            for c in range(r):
                R[i, c] = q[c]
                a += X[i, c] * q[c]
                b += (s * q[c]) * (s * q[c])
        part_xr[ch] = a
        part_g[ch] = b


@njit(nogil=True, cache=True, parallel=True)
def _copy_delta(X, Xold, V, n2_part, d2_part):
    """V[:n] = X (cast to V's dtype) and X = that rounded value; chunk sums of ||X||^2 and
    ||X - Xold||^2; Xold = X."""
    n, r = X.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                V[i, c] = X[i, c]
                x = np.float64(V[i, c])
                X[i, c] = x
                dd = x - Xold[i, c]
                Xold[i, c] = x
                a += x * x
                b += dd * dd
        n2_part[ch] = a
        d2_part[ch] = b


@njit(nogil=True, cache=True)
def _rows_smooth(rows, indptr, indices, data, diag, V, out):
    """out[q] = v_i'(L V)_i for i = rows[q]."""
    r = V.shape[1]
    for q in range(rows.shape[0]):
        i = rows[q]
        acc = 0.0
        for c in range(r):
            acc += np.float64(diag[i]) * np.float64(V[i, c]) * np.float64(V[i, c])
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            d = 0.0
            for c in range(r):
                d += np.float64(V[i, c]) * np.float64(V[k, c])
            acc += np.float64(data[p]) * d
        out[q] = acc


@njit(nogil=True, cache=True, parallel=True)
def _direction_LD(indptr, indices, data, diag, V, Vprev, D, LD, part_a, part_b):
    """D = V - Vprev (float64), then (second pass) LD = L D with chunk sums of <LD, V>
    and <LD, D>."""
    n, r = V.shape
    for i in prange(n):
        for c in range(r):
            D[i, c] = np.float64(V[i, c]) - Vprev[i, c]
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            _row_times(i, indptr, indices, data, diag, D, q)
            for c in range(r):
                LD[i, c] = q[c]
                a += q[c] * np.float64(V[i, c])
                b += q[c] * D[i, c]
        part_a[ch] = a
        part_b[ch] = b


@njit(nogil=True, cache=True, parallel=True)
def _dots_S(V, LD, S, LS, part):
    """Chunk sums of <LS, V>, <LD, S>, <LS, S> (part[:, 0..2])."""
    n, r = V.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        e = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                sc = np.float64(S[i, c])
                lsc = np.float64(LS[i, c])
                a += lsc * np.float64(V[i, c])
                b += LD[i, c] * sc
                e += lsc * sc
        part[ch, 0] = a
        part[ch, 1] = b
        part[ch, 2] = e


@njit(nogil=True, cache=True, parallel=True)
def _subspace_step(V, D, LD, S, LS, s1, s2, part):
    """V += s1 D + s2 S; then the outer iteration's whole step S <- (1 + s1) D + s2 S and
    LS <- (1 + s1) LD + s2 LS (stored in V's dtype, so a resumed fit reproduces them), with
    chunk sums of ||S||^2 and ||V||^2."""
    n, r = V.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                sc = np.float64(S[i, c])
                V[i, c] = np.float64(V[i, c]) + s1 * D[i, c] + s2 * sc
                S[i, c] = (1.0 + s1) * D[i, c] + s2 * sc
                LS[i, c] = (1.0 + s1) * LD[i, c] + s2 * np.float64(LS[i, c])
                x = np.float64(S[i, c])
                a += x * x
                v = np.float64(V[i, c])
                b += v * v
        part[ch, 0] = a
        part[ch, 1] = b


@njit(nogil=True, cache=True)
def _pair_coeffs2(pi, pj, pt, V, D, S, out):
    """t z along V + s1 D + s2 S is  c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12;
    out[:, 0..5] = (c0, c1, c2, c11, c22, c12) per pair."""
    r = V.shape[1]
    for k in range(pi.shape[0]):
        i = pi[k]
        j = pj[k]
        c0 = 0.0
        c1 = 0.0
        c2 = 0.0
        c11 = 0.0
        c22 = 0.0
        c12 = 0.0
        for c in range(r):
            vi = np.float64(V[i, c])
            vj = np.float64(V[j, c])
            di = D[i, c]
            dj = D[j, c]
            si = np.float64(S[i, c])
            sj = np.float64(S[j, c])
            c0 += vi * vj
            c1 += vi * dj + di * vj
            c2 += vi * sj + si * vj
            c11 += di * dj
            c22 += si * sj
            c12 += di * sj + si * dj
        t = pt[k]
        out[k, 0] = t * c0
        out[k, 1] = t * c1
        out[k, 2] = t * c2
        out[k, 3] = t * c11
        out[k, 4] = t * c22
        out[k, 5] = t * c12


def subspace_search(a, B, C, gamma, loss_code):
    """argmin over (s1, s2) of  phi(s) = 2 a's + s'Bs + gamma sum [loss(z(s)) - loss(z(0))],
    z(s) = c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12 (C's columns), starting from
    the exact line search along the first direction. Returns (s1, s2, phi) with phi < 0, or
    zeros when nothing decreases the objective."""
    from scipy.optimize import minimize

    C = np.ascontiguousarray(C)
    base = _loss_sum(C[:, 0], loss_code)

    def phi(s):
        s1, s2 = float(s[0]), float(s[1])
        return (2.0 * (a[0] * s1 + a[1] * s2) + B[0, 0] * s1 * s1 + 2.0 * B[0, 1] * s1 * s2
                + B[1, 1] * s2 * s2 + gamma * _phi_pairs(C, s1, s2, loss_code))

    s1, v1 = line_search(a[0], B[0, 0], C[:, 0], C[:, 1], C[:, 3], gamma, loss_code,
                         base=base, phi=lambda t: phi((t, 0.0)))
    best = (s1, 0.0, v1)
    if B[1, 1] > 0:
        scale = max(abs(s1), 1e-3)
        res = minimize(phi, np.array([s1, 0.0]), method="Nelder-Mead",
                       options={"xatol": 1e-7 * scale, "fatol": 1e-15 * max(1.0, abs(base)),
                                "maxiter": 600, "initial_simplex": np.array(
                                    [[s1, 0.0], [s1 + 0.5 * scale, 0.0],
                                     [s1, 0.5 * scale]])})
        v = phi(res.x)
        if v < best[2]:
            best = (float(res.x[0]), float(res.x[1]), v)
    return best if best[2] < 0.0 else (0.0, 0.0, 0.0)


@njit(nogil=True, cache=True, parallel=True)
def _save(V, Vprev):
    n, r = V.shape
    for i in prange(n):
        for c in range(r):
            Vprev[i, c] = V[i, c]


@njit(nogil=True, cache=True)
def _phi_pairs(C, s1, s2, loss_code):
    """sum over pairs of loss(z(s)) - loss(z(0)), z(s) from the coefficient rows of C."""
    tot = 0.0
    for k in range(C.shape[0]):
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


def _loss_sum(z, loss_code):
    if loss_code == 0:
        return float(np.maximum(1.0 - z, 0.0).sum())
    if loss_code == 1:
        return float((np.maximum(1.0 - z, 0.0) ** 2).sum())
    if loss_code == 2:
        return float(((1.0 - z) ** 2).sum())
    return float(-z.sum())


def line_search(a, b, c0, c1, c2, gamma, loss_code, base=None, phi=None):
    """argmin over s >= 0 of  phi(s) = 2 s a + s^2 b + gamma sum loss(c0 + s c1 + s^2 c2)
    minus phi(0); returns (s, phi(s) - phi(0)) with s = 0 when nothing decreases.

    phi is exact (the smooth part is the quadratic <V+sD, L(V+sD)>), so accepting only
    decreases keeps the objective monotone.
    """
    from scipy.optimize import minimize_scalar

    if base is None:
        base = _loss_sum(c0, loss_code)
    if phi is None:
        def phi(s):
            return 2.0 * s * a + s * s * b + gamma * (
                _loss_sum(c0 + s * (c1 + s * c2), loss_code) - base)

    # the loss is >= 0, so it cannot fall by more than gamma * base: bounds s
    if b > 0:
        hi = (-a + np.sqrt(a * a + b * gamma * max(base, 0.0))) / b
    else:
        hi = 16.0
    hi = float(min(max(hi, 1e-12), 1e6))
    grid = hi * np.geomspace(1e-3, 1.0, 16)
    vals = np.array([phi(s) for s in grid])
    k = int(np.argmin(vals))
    lo_b = grid[k - 1] if k > 0 else 0.0
    hi_b = grid[k + 1] if k + 1 < grid.shape[0] else hi
    res = minimize_scalar(phi, bounds=(lo_b, hi_b), method="bounded",
                          options={"xatol": 1e-6 * hi_b})
    s, v = (float(res.x), float(res.fun)) if res.fun < vals[k] else (float(grid[k]),
                                                                       float(vals[k]))
    return (s, v) if v < 0.0 else (0.0, 0.0)


class BlockSession:
    """State of a block-exact fit on one machine: V (internal U-first order) updated in place.

    Parameters
    ----------
    prep : PreparedProblem in the layout's order
    layout : BlockLayout
    V : (n, r) array, the factor (its dtype is the problem's)
    n_threads : int
    precond : {'amg', 'jacobi'}
    """

    def __init__(self, prep, layout, V, n_threads, precond="amg-plain", extrapolate=True):
        if precond not in PRECONDITIONERS:
            raise ValidationError(
                f"precond: {precond!r} is not one of {', '.join(PRECONDITIONERS)}"
            )
        self.prep, self.layout, self.V = prep, layout, V
        self.n_threads = int(n_threads)
        n, r = V.shape
        nf = layout.n_free
        self.n_free = nf
        off = sp.csr_matrix((prep.data.astype(np.float64), prep.indices, prep.indptr),
                            shape=(n, n))
        A_off = off[:nf, :nf].tocsr()
        A_off.sort_indices()
        A_off.indptr = A_off.indptr.astype(np.int64)
        A_off.indices = A_off.indices.astype(np.int64)
        self.A_off = A_off
        self.A_diag = prep.diag[:nf].astype(np.float64)
        self.dinv = 1.0 / self.A_diag
        self.c_rows = np.arange(nf, n, dtype=np.int64)
        self._threads(self._build_precond, precond)
        self.X = V[:nf] if V.dtype == np.float64 else V[:nf].astype(np.float64)
        self.Xold = self.X.copy()
        self.R = np.empty((nf, r))
        self.work = (np.empty((nf, r)), np.empty((nf, r)), np.empty((nf, r)))
        self.cg_iterations = []
        self.extrapolate = bool(extrapolate)
        self.steps_taken = []
        if self.extrapolate:
            self.Vprev = np.empty((n, r))
            self.D = np.empty((n, r))
            self.LD = np.empty((n, r))
            # the previous outer iteration's whole step and L times it (V's dtype: they are
            # checkpointed with V so that a resume continues bitwise)
            self.S = np.zeros((n, r), V.dtype)
            self.LS = np.zeros((n, r), V.dtype)
        self._residual()

    def _build_precond(self, precond):
        if precond.startswith("amg") and self.n_free > 0:
            A = sp.csr_matrix((self.A_off.data, self.A_off.indices, self.A_off.indptr),
                              shape=self.A_off.shape) + sp.diags(self.A_diag)
            self.M = AMGPreconditioner(A.tocsr(),
                                       smooth=None if precond == "amg-plain" else "jacobi")
        else:
            self.M = JacobiPreconditioner(self.A_diag)

    def _threads(self, fn, *args):
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads)
        try:
            return fn(*args)
        finally:
            numba.set_num_threads(previous)

    def _residual(self):
        """Exact R = -(L V)_U from the current V, with its by-products."""
        nf = self.n_free
        n_ch = max((nf + RB - 1) // RB, 1)
        pxr = np.zeros(n_ch)
        pg = np.zeros(n_ch)
        p = self.prep
        if nf:
            _neg_residual_rows(nf, p.indptr, p.indices, p.data, p.diag, self.V, self.X, self.R,
                               self.dinv, pxr, pg)
        self._xr = float(_colsum(pxr))
        self._gU = float(_colsum(pg))

    # -- one outer iteration ------------------------------------------------------------------
    def step(self, colour_order, rtol, maxiter):
        """Block solve of U, then the exact row updates of C in ``colour_order``.

        Returns (delta2, norm2, cg_iterations)."""
        return self._threads(self._step, colour_order, rtol, maxiter)

    def _step(self, colour_order, rtol, maxiter):
        nf = self.n_free
        V, p = self.V, self.prep
        n, r = V.shape
        if self.extrapolate:
            _save(V, self.Vprev)
        it = 0
        d2 = n2 = 0.0
        if nf:
            r0 = np.sqrt(np.einsum("ij,ij->j", self.R, self.R))
            it = block_pcg(self.A_off, self.A_diag, self.M, self.X, self.R, r0, rtol=rtol,
                           maxiter=maxiter, work=self.work)
            n_ch = (nf + RB - 1) // RB
            pn, pd = np.empty(n_ch), np.empty(n_ch)
            _copy_delta(self.X, self.Xold, V, pn, pd)
            n2, d2 = float(_colsum(pn)), float(_colsum(pd))
        delta2 = np.zeros(n)
        norm2 = np.zeros(n)
        for c in colour_order:
            rows = self.layout.rows_of(int(c))
            # the rows of a colour are independent: fixed units of CHUNK rows
            ptr = np.append(np.arange(0, rows.shape[0], CHUNK), rows.shape[0]).astype(np.int64)
            kernel = (sweep_units if self.n_threads > 1 and rows.shape[0] > 2 * CHUNK
                      else sweep_units_serial)
            kernel(rows, ptr, 0, p.indptr, p.indices, p.data, p.diag, p.cptr, p.cidx, p.csgn,
                   V, p.loss_code, p.gamma, p.bound, p.pmax, delta2, norm2)
        c = self.c_rows
        d2 += float(_canonical_sum(delta2[c]))
        n2 += float(_canonical_sum(norm2[c]))
        if self.extrapolate:
            d2, n2 = self._extrapolate(d2, n2)  # ends with the exact residual
        else:
            self._residual()
        self.cg_iterations.append(it)
        return d2, n2, it

    def _extrapolate(self, d2, n2):
        """Exact minimisation of the objective over V + s1 D + s2 S, D = this outer step and
        S = the previous outer iteration's whole step (a conjugate-gradient-like momentum);
        accepted only where it lowers the objective, so the fit stays monotone."""
        p, V = self.prep, self.V
        n = V.shape[0]
        n_ch = (n + RB - 1) // RB
        pa, pb = np.empty(n_ch), np.empty(n_ch)
        _direction_LD(p.indptr, p.indices, p.data, p.diag, V, self.Vprev, self.D, self.LD,
                      pa, pb)
        part = np.empty((n_ch, 3))
        _dots_S(V, self.LD, self.S, self.LS, part)
        tot = _colsum(part)
        a = np.array([float(_colsum(pa)), tot[0]])
        B = np.array([[float(_colsum(pb)), tot[1]], [tot[1], tot[2]]])
        m = p.pi.shape[0]
        coeffs = np.empty((m, 6))
        _pair_coeffs2(p.pi, p.pj, p.pt, V, self.D, self.S, coeffs)
        s1, s2, _ = subspace_search(a, B, coeffs, p.gamma, p.loss_code)
        self.steps_taken.append((s1, s2))
        part2 = np.empty((n_ch, 2))
        _subspace_step(V, self.D, self.LD, self.S, self.LS, s1, s2, part2)
        tot2 = _colsum(part2)
        nf = self.n_free
        if nf:
            if self.X.base is not V:
                self.X[...] = V[:nf]
            self.Xold[...] = self.X
        self._residual()
        return float(tot2[0]), float(tot2[1])

    def state_arrays(self):
        """Arrays beyond V that a checkpoint must hold to resume bitwise."""
        return [self.S, self.LS] if self.extrapolate else []

    def load_state_arrays(self, arrays):
        if self.extrapolate:
            self.S[...] = arrays[0]
            self.LS[...] = arrays[1]

    # -- by-products ----------------------------------------------------------------------------
    def objective_kkt(self):
        """(objective, kkt) of the current V, from the exact residual and the C rows."""
        return self._threads(self._objective_kkt)

    def _objective_kkt(self):
        p, V = self.prep, self.V
        c = self.c_rows
        sm = np.empty(c.shape[0])
        _rows_smooth(c, p.indptr, p.indices, p.data, p.diag, V, sm)
        pairs = np.empty(p.pi.shape[0])
        pair_terms(p.pi, p.pj, p.pt, V, p.loss_code, pairs)
        g = np.empty(c.shape[0])
        kkt_row_terms(c, p.indptr, p.indices, p.data, p.diag, p.cptr, p.cidx, p.csgn, V,
                      p.loss_code, p.gamma, p.bound, p.pmax, g)
        obj = -self._xr + float(_canonical_sum(sm)) + p.gamma * float(_canonical_sum(pairs))
        vn = float(_canonical_sum(np.einsum("ij,ij->i", V, V, dtype=np.float64)))
        num = self._gU + float(_canonical_sum(g))
        kkt = float(np.sqrt(num / vn)) if vn > 0 else float(np.sqrt(num))
        return obj, kkt

    def gather(self):
        return self.V

    def assign(self, V):
        """Replace V (internal order): a joint move. The momentum restarts (S = 0), the
        residual is recomputed exactly."""
        self.V[...] = V
        nf = self.n_free
        if nf:
            if self.X.base is not self.V:
                self.X[...] = self.V[:nf]
            self.Xold[...] = self.X
        if self.extrapolate:
            self.S[...] = 0
            self.LS[...] = 0
        self._threads(self._residual)

    def checkpoint_array(self):
        """V and the state arrays side by side: what a checkpoint stores."""
        return np.hstack([self.V] + self.state_arrays()) if self.extrapolate else self.V

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        W = self.checkpoint_array()
        for start in range(0, W.shape[0], row_block):
            store.write_V_block(ckpt_id, start, W[start:start + row_block])

    def close(self):
        pass
