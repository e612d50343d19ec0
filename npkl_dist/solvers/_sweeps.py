"""BCD's exact row updates (bcdkl-tnnls2015 Alg. 1) and the compiled Gauss-Seidel sweeps over
the units of a colour step: the closed forms of every loss, the square loss's Woodbury
solve and the hinge losses' dual box QP.

Per-column subproblem (bcdkl-tnnls2015 eq. 11, multiplied by 2): with g = sum_{k != i} L_ik v_k,
a_j = T_ij v_j for j in T(i) and A = [a_j] (r x p),

    phi(v) = L_ii ||v||^2 + 2 g'v + gamma * sum_j loss(a_j'v)

whose exact minimisers are
    none      v = -g / L_ii                                  (eq. 13)
    square    (L_ii I + gamma A A') v = gamma A 1 - g        (Woodbury: a p x p system)
    hinge     dual  min 1/2 a'Ha - q'a,  0 <= a <= gamma,  H = A'A / (2 L_ii),
              q = 1 + A'g / L_ii,  v = (A a / 2 - g) / L_ii  (eq. 21-23, scaled by 2)
    sq.hinge  as hinge with H += I / (2 gamma) and a >= 0    (eq. 25)
    linear    v = (gamma/2 A 1 - g) / L_ii projected on ||v|| <= b  (eq. 31; the ball
              constraint holds for every column, constrained or not)"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ..linalg._rowops import SUM_BLOCK, _dot_row_vec, _gather, literal_arg
from ..linalg._simd import _madd
from ..linalg._smallqp import (
    _cholesky_upper_solve,
    _transpose_rows,
    box_qp,
    gram_upper,
)
from ..problem._terms import loss_value


@njit(nogil=True, cache=True)
def update_column(
    i,
    indptr,
    indices,
    data,
    diag,
    cptr,
    cidx,
    csgn,
    V,
    loss,
    gamma,
    bound,
    out,
    g,
    A,
    H,
    M,
    qv,
    alpha,
    grad,
    wy,
    free,
):
    """Exact minimiser of the column-i subproblem given the other columns of V.

    out : (r,) float64 OUT. Returns nothing; V is not modified.
    Workspaces: g (r,), A (pmax, r), H, M (max(pmax, r), pmax), qv, alpha, grad, wy
    (pmax,), free (pmax,) int64.
    """
    r = V.shape[1]
    if H.shape[0] < r or M.shape[0] < r:  # they hold A's transpose (r x p) as well
        raise ValueError("update_column: workspaces H and M need max(pmax, r) rows")
    Lii = diag[i]
    _gather(i, indptr, indices, data, V, g)
    p = cptr[i + 1] - cptr[i]
    if p == 0 or loss == 3:
        if loss == 3:
            # linear: v~ = (gamma/2 sum_j a_j - g) / L_ii
            for c in range(r):
                out[c] = -g[c]
            for s in range(p):
                k = cidx[cptr[i] + s]
                t = csgn[cptr[i] + s]
                for c in range(r):
                    out[c] += 0.5 * gamma * t * V[k, c]
            nrm = 0.0
            for c in range(r):
                out[c] /= Lii
                nrm += out[c] * out[c]
            nrm = np.sqrt(nrm)
            if nrm > bound:
                f = bound / nrm
                for c in range(r):
                    out[c] *= f
        else:
            for c in range(r):
                out[c] = -g[c] / Lii
        return
    # A = [t_j v_j]
    for s in range(p):
        k = cidx[cptr[i] + s]
        t = csgn[cptr[i] + s]
        for c in range(r):
            A[s, c] = t * V[k, c]
    if loss == 2:
        # square: v = (b - A (L/gamma I + A'A)^{-1} A'b) / L,  b = gamma A 1 - g
        # (loops over s outside: the same running sum per c, one vectorisable pass per s)
        for c in range(r):
            out[c] = -g[c]
        for s in range(p):
            for c in range(r):
                out[c] += gamma * A[s, c]
        if p > r:
            # more pairs than columns: the r x r primal system is the smaller one,
            # (L/gamma I + A'A) v = b / gamma
            gram_upper(A, p, r, M)  # A'A
            for c in range(r):
                M[c, c] += Lii / gamma
                qv[c] = out[c] / gamma
            _cholesky_upper_solve(M, qv, r)
            for c in range(r):
                out[c] = qv[c]
            return
        _transpose_rows(A, p, H)
        gram_upper(H, r, p, M)  # A A'
        for s in range(p):
            qv[s] = _dot_row_vec(A, s, out, r, _madd)
            M[s, s] += Lii / gamma
        _cholesky_upper_solve(M, qv, p)
        for s in range(p):
            qs = qv[s]
            for c in range(r):
                out[c] -= A[s, c] * qs
        for c in range(r):
            out[c] = out[c] / Lii
        return
    # hinge (0) / squared hinge (1): dual box QP (compiled only for them when the loss is a
    # constant of the kernel: literal_arg, docs/decisions/cold-start.md)
    _hinge_column(i, V, loss, gamma, Lii, p, out, g, A, H, M, qv, alpha, grad, wy, free)


def _hinge_column(i, V, loss, gamma, Lii, p, out, g, A, H, M, qv, alpha, grad, wy, free):
    """update_column's hinge branch (a typing-time stub: see _ol_hinge_column)."""


@overload(_hinge_column, prefer_literal=True, jit_options={"nogil": True})
def _ol_hinge_column(i, V, loss, gamma, Lii, p, out, g, A, H, M, qv, alpha, grad, wy, free):
    """Nothing for a constant loss other than the hinges; else :func:`_hinge_column_impl`."""
    if isinstance(loss, types.IntegerLiteral) and loss.literal_value not in (0, 1):

        def nothing(i, V, loss, gamma, Lii, p, out, g, A, H, M, qv, alpha, grad, wy, free):
            return None

        return nothing

    def hinge(i, V, loss, gamma, Lii, p, out, g, A, H, M, qv, alpha, grad, wy, free):
        _hinge_column_impl(i, V, loss, gamma, Lii, p, out, g, A, H, M, qv, alpha, grad, wy, free)

    return hinge


@njit(nogil=True, cache=True)
def _hinge_column_impl(i, V, loss, gamma, Lii, p, out, g, A, H, M, qv, alpha, grad, wy, free):
    """Column i's minimiser for the hinge (0) and squared hinge (1) through their dual box QP,
    A[:p] holding the rows a_j and g the neighbour sum (update_column's workspaces)."""
    r = V.shape[1]
    _transpose_rows(A, p, M)
    gram_upper(M, r, p, H)  # A A'
    div = 2.0 * Lii
    for s in range(p):
        for u in range(s, p):
            H[s, u] = H[s, u] / div
            H[u, s] = H[s, u]
    for s in range(p):
        ag = 0.0
        for c in range(r):
            ag += A[s, c] * g[c]
        qv[s] = 1.0 + ag / Lii
        if loss == 1:
            H[s, s] += 1.0 / (2.0 * gamma)
    upper = gamma if loss == 0 else np.inf
    box_qp(H, qv, upper, p, alpha, grad, M, wy, free)
    for c in range(r):
        out[c] = -g[c]
    for s in range(p):
        ha = 0.5 * alpha[s]
        for c in range(r):
            out[c] += ha * A[s, c]
    for c in range(r):
        out[c] = out[c] / Lii
    # Safeguard: keep the current column if a degenerate dual left the new one clearly worse,
    # so that a sweep never increases the objective. Not at rounding level: phi is flat at
    # its minimum (an error of 1e-8 in v moves phi by ~1e-16), so a tighter test would
    # freeze rows short of their minimiser.
    phi_old = _column_phi_row(V, i, g, A, p, Lii, gamma, loss)
    if _column_phi(out, g, A, p, Lii, gamma, loss) > phi_old + 1e-12 * max(1.0, abs(phi_old)):
        for c in range(r):
            out[c] = V[i, c]


@njit(nogil=True, cache=True)
def _column_phi(v, g, A, p, Lii, gamma, loss):
    """phi(v) = L_ii ||v||^2 + 2 g'v + gamma sum_j loss(a_j'v) for a float64 vector v."""
    r = v.shape[0]
    val = 0.0
    for c in range(r):
        val += v[c] * (Lii * v[c] + 2.0 * g[c])
    for s in range(p):
        z = 0.0
        for c in range(r):
            z += A[s, c] * v[c]
        val += gamma * loss_value(z, loss)
    return val


@njit(nogil=True, cache=True)
def _column_phi_row(V, i, g, A, p, Lii, gamma, loss):
    """phi at the current row i of V."""
    r = V.shape[1]
    val = 0.0
    for c in range(r):
        x = np.float64(V[i, c])
        val += x * (Lii * x + 2.0 * g[c])
    for s in range(p):
        z = 0.0
        for c in range(r):
            z += A[s, c] * V[i, c]
        val += gamma * loss_value(z, loss)
    return val


@njit(nogil=True, cache=True)
def sweep_rows(
    rows,
    start,
    stop,
    base,
    indptr,
    indices,
    data,
    diag,
    cptr,
    cidx,
    csgn,
    V,
    loss,
    gamma,
    bound,
    pmax,
    delta2,
    norm2,
):
    """Update rows[start:stop] one after the other (Gauss-Seidel, in that order), in place.

    The rows are one *unit* of a sweep step (see ``_plan``): ascending, updated sequentially,
    each from the current values of all other rows.

    V : (n, r) IN/OUT. delta2, norm2 : (n,) float64 OUT at those rows. The change
    ||v_new - v_old||^2 and ||v_new||^2 are accumulated per column over a *run* -- the
    consecutive rows of the unit that lie in one chunk of SUM_BLOCK row indices -- and the
    run's totals are stored at its last row, zeros at its other rows. Per-column sums are
    element-wise (no r-long add chain per row); runs are fixed by the plan, so the sums are
    the same on any thread count and any executor whose row blocks start at multiples of
    SUM_BLOCK. ``base`` is the global index of local row 0 (a Dask block's offset).

    Unconstrained rows of the non-linear losses take the closed form v = -g / L_ii inline;
    it is the same arithmetic as ``update_column`` (bitwise), without the call. The other
    rows go through ``_update_row``, out of the hot loop.
    """
    r = V.shape[1]
    pm = max(pmax, 1)
    out = np.empty(r)
    g = np.empty(r)
    A = np.empty((pm, r))
    H = np.empty((max(pm, r), pm))  # also A[:p].T for the square loss
    M = np.empty((max(pm, r), pm))  # also A[:p].T for the hinge losses
    qv = np.empty(pm)
    alpha = np.empty(pm)
    grad = np.empty(pm)
    wy = np.empty(pm)
    free = np.empty(pm, np.int64)
    dacc = np.zeros(r)
    nacc = np.zeros(r)
    for q in range(start, stop):
        i = rows[q]
        if loss == 3 or cptr[i + 1] != cptr[i]:
            _update_row(
                i,
                indptr,
                indices,
                data,
                diag,
                cptr,
                cidx,
                csgn,
                V,
                loss,
                gamma,
                bound,
                out,
                g,
                A,
                H,
                M,
                qv,
                alpha,
                grad,
                wy,
                free,
                dacc,
                nacc,
            )
        else:
            _gather(i, indptr, indices, data, V, g)
            Lii = diag[i]
            for c in range(r):
                old = np.float64(V[i, c])
                V[i, c] = -g[c] / Lii  # rounds to V's dtype
                new = np.float64(V[i, c])
                dacc[c] += (new - old) * (new - old)
                nacc[c] += new * new
        if q + 1 == stop or (rows[q + 1] + base) // SUM_BLOCK != (i + base) // SUM_BLOCK:
            d2 = 0.0
            n2 = 0.0
            for c in range(r):
                d2 += dacc[c]
                n2 += nacc[c]
                dacc[c] = 0.0
                nacc[c] = 0.0
            delta2[i] = d2
            norm2[i] = n2
        else:
            delta2[i] = 0.0
            norm2[i] = 0.0


@njit(nogil=True, cache=True)
def _update_row(
    i,
    indptr,
    indices,
    data,
    diag,
    cptr,
    cidx,
    csgn,
    V,
    loss,
    gamma,
    bound,
    out,
    g,
    A,
    H,
    M,
    qv,
    alpha,
    grad,
    wy,
    free,
    dacc,
    nacc,
):
    """v_i <- update_column(i); dacc += (v_new - v_old)^2, nacc += v_new^2 per column."""
    update_column(
        i,
        indptr,
        indices,
        data,
        diag,
        cptr,
        cidx,
        csgn,
        V,
        loss,
        gamma,
        bound,
        out,
        g,
        A,
        H,
        M,
        qv,
        alpha,
        grad,
        wy,
        free,
    )
    for c in range(V.shape[1]):
        old = np.float64(V[i, c])
        V[i, c] = out[c]  # rounds to V's dtype
        new = np.float64(V[i, c])
        dacc[c] += (new - old) * (new - old)
        nacc[c] += new * new


@njit(nogil=True, cache=True, parallel=True)
def _sweep_units(
    rows,
    ptr,
    base,
    indptr,
    indices,
    data,
    diag,
    cptr,
    cidx,
    csgn,
    V,
    loss,
    gamma,
    bound,
    pmax,
    delta2,
    norm2,
):
    """One sweep step: units ``rows[ptr[u]:ptr[u + 1]]`` spread over numba's threads.

    The units of a step are mutually independent (no row of one is coupled to a row of
    another), so they may run in any order or concurrently; each is sequential inside."""
    for u in prange(ptr.shape[0] - 1):
        sweep_rows(
            rows,
            ptr[u],
            ptr[u + 1],
            base,
            indptr,
            indices,
            data,
            diag,
            cptr,
            cidx,
            csgn,
            V,
            loss,
            gamma,
            bound,
            pmax,
            delta2,
            norm2,
        )


@njit(nogil=True, cache=True)
def _sweep_units_serial(
    rows,
    ptr,
    base,
    indptr,
    indices,
    data,
    diag,
    cptr,
    cidx,
    csgn,
    V,
    loss,
    gamma,
    bound,
    pmax,
    delta2,
    norm2,
):
    """The same step on the calling thread: identical results (the units are independent)."""
    for u in range(ptr.shape[0] - 1):
        sweep_rows(
            rows,
            ptr[u],
            ptr[u + 1],
            base,
            indptr,
            indices,
            data,
            diag,
            cptr,
            cidx,
            csgn,
            V,
            loss,
            gamma,
            bound,
            pmax,
            delta2,
            norm2,
        )


# Called from Python with the loss a constant of each compile (literal_arg): a square-loss
# run compiles no hinge QP.
sweep_units = literal_arg(_sweep_units, "loss")
sweep_units_serial = literal_arg(_sweep_units_serial, "loss")
