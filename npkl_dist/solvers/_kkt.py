"""Optimality measure of an NPKL iterate: a scaled KKT residual.

The gradient of f(V) = tr(V'LV) + gamma sum_pairs loss(t v_i'v_j) with respect to row i is

    g_i = 2 (L V)_i + gamma sum_{j in pairs(i)} loss'(t_ij v_i'v_j) t_ij v_j .

For the hinge the loss has a kink at z = 1; there ``loss'`` may be any value in [-1, 0] and
the residual takes, per row, the value of smallest norm (a small box QP, the same solver the
sweeps use). For the linear loss rows live in the ball ||v_i|| <= b; on its boundary the
outward normal component of g_i is removed when it points outwards (the KKT multiplier).

The reported number is scale-free:

    kkt(V) = || (2 D)^{-1} G ||_F / || V ||_F ,    D = diag(L),

the relative length of the step a Jacobi update of the smooth part would take: it goes to
zero exactly at stationary points and is comparable with the sweeps' relative change.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ..linalg._reductions import chunked_sums, ordered_total
from ..linalg._rowops import CHUNK, _add_row_products, _gather, literal_arg
from ..linalg._simd import _madd
from ..linalg._smallqp import box_qp, gram_rows

__all__ = ["kkt_row_terms", "rows_lv", "lv_kkt_row_terms", "kkt_residual", "KINK_TOL"]

#: A hinge pair with |z - 1| <= KINK_TOL * max(1, |z|) counts as sitting on the kink.
KINK_TOL = 1e-7


@njit(nogil=True, cache=True)
def _row_kkt(
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
    g,
    A,
    H,
    qv,
    alpha,
    grad,
    M,
    wy,
    free,
):
    """||g_i / (2 L_ii)||^2 for row i (see the module docstring)."""
    _gather(i, indptr, indices, data, V, g)
    Lii = np.float64(diag[i])
    for c in range(V.shape[1]):
        g[c] = g[c] + Lii * V[i, c]  # (L V)_i
    return _row_kkt_lv(
        i, diag, cptr, cidx, csgn, V, loss, gamma, bound, g, A, H, qv, alpha, grad, M, wy, free
    )


@njit(nogil=True, cache=True)
def _row_kkt_lv(
    i, diag, cptr, cidx, csgn, V, loss, gamma, bound, g, A, H, qv, alpha, grad, M, wy, free
):
    """:func:`_row_kkt` with g holding (L V)_i (overwritten)."""
    r = V.shape[1]
    Lii = np.float64(diag[i])
    for c in range(r):
        g[c] = 2.0 * g[c]
    # an int64 from the start: numba types a counter started at the literal 0 first as
    # Literal[int](0) and compiles box_qp for that type too (docs/decisions/cold-start.md)
    nk = np.int64(0)
    for s in range(cptr[i], cptr[i + 1]):
        k = cidx[s]
        t = np.float64(csgn[s])
        z = 0.0
        for c in range(r):
            z += np.float64(V[i, c]) * V[k, c]
        z *= t
        if loss == 0:
            if abs(z - 1.0) <= KINK_TOL * max(1.0, abs(z)):
                for c in range(r):
                    A[nk, c] = t * V[k, c]
                nk += 1
                continue
            d = -1.0 if z < 1.0 else 0.0
        elif loss == 1:
            d = -2.0 * max(1.0 - z, 0.0)
        elif loss == 2:
            d = -2.0 * (1.0 - z)
        else:
            d = -1.0
        if d != 0.0:
            for c in range(r):
                g[c] += gamma * d * t * V[k, c]
    if nk > 0:
        _kink_min_norm(loss, nk, A, g, gamma, H, qv, alpha, grad, M, wy, free)
    if loss == 3:
        vn = 0.0
        gv = 0.0
        for c in range(r):
            vn += np.float64(V[i, c]) * V[i, c]
            gv += g[c] * V[i, c]
        if vn >= (bound * (1.0 - 1e-6)) ** 2 and gv < 0.0:
            mu = -gv / vn
            for c in range(r):
                g[c] += mu * V[i, c]
    out = 0.0
    for c in range(r):
        x = g[c] / (2.0 * Lii)
        out += x * x
    return out


def _kink_min_norm(loss, nk, A, g, gamma, H, qv, alpha, grad, M, wy, free):
    """_row_kkt_lv's hinge kink step (a typing-time stub: see _ol_kink_min_norm)."""


@overload(_kink_min_norm, prefer_literal=True, jit_options={"nogil": True})
def _ol_kink_min_norm(loss, nk, A, g, gamma, H, qv, alpha, grad, M, wy, free):
    """Nothing for a constant loss other than the hinge (no pair sits on a kink); else
    :func:`_kink_min_norm_impl`."""
    if isinstance(loss, types.IntegerLiteral) and loss.literal_value != 0:

        def nothing(loss, nk, A, g, gamma, H, qv, alpha, grad, M, wy, free):
            return None

        return nothing

    def hinge(loss, nk, A, g, gamma, H, qv, alpha, grad, M, wy, free):
        _kink_min_norm_impl(nk, A, g, gamma, H, qv, alpha, grad, M, wy, free)

    return hinge


@njit(nogil=True, cache=True)
def _kink_min_norm_impl(nk, A, g, gamma, H, qv, alpha, grad, M, wy, free):
    """g -= A' a for the a in [0, gamma]^nk minimising || g - A' a ||^2 (loss' = -a/gamma on
    the kink), A[:nk] holding the kink pairs' rows t v_k."""
    r = g.shape[0]
    # min over a in [0, gamma]^nk of || g - A' a ||^2  (loss' = -a/gamma on the kink)
    gram_rows(A, nk, 1.0, H)
    for s in range(nk):
        acc = 0.0
        for c in range(r):
            acc += A[s, c] * g[c]
        qv[s] = acc
    box_qp(H, qv, gamma, nk, alpha, grad, M, wy, free)
    for s in range(nk):  # the same running sum per c, one pass over g per s
        a_s = alpha[s]
        for c in range(r):
            g[c] -= a_s * A[s, c]


@njit(nogil=True, cache=True, inline="always")
def _kkt_scratch(pm, r):
    """A thread's work arrays for :func:`_row_kkt` (rows of at most ``pm`` pairs, rank r):
    g, A, H, qv, alpha, grad, M, wy, free."""
    return (
        np.empty(r),
        np.empty((pm, r)),
        np.empty((pm, pm)),
        np.empty(pm),
        np.empty(pm),
        np.empty(pm),
        np.empty((pm, pm)),
        np.empty(pm),
        np.empty(pm, np.int64),
    )


@njit(nogil=True, cache=True, parallel=True)
def _kkt_row_terms(
    rows, indptr, indices, data, diag, cptr, cidx, csgn, V, loss, gamma, bound, pmax, out
):
    """out[q] = ||g_i / (2 L_ii)||^2 for i = rows[q].  out : (len(rows),) float64 OUT."""
    n_rows = rows.shape[0]
    r = V.shape[1]
    pm = max(pmax, 1)
    n_chunks = (n_rows + CHUNK - 1) // CHUNK
    for ch in prange(n_chunks):
        g, A, H, qv, alpha, grad, M, wy, free = _kkt_scratch(pm, r)
        for q in range(ch * CHUNK, min((ch + 1) * CHUNK, n_rows)):
            out[q] = _row_kkt(
                rows[q],
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
                g,
                A,
                H,
                qv,
                alpha,
                grad,
                M,
                wy,
                free,
            )


@njit(nogil=True, cache=True, parallel=True)
def rows_lv(rows, indptr, indices, data, diag, V, LV):
    """LV[q] = (L V)_i for i = rows[q] in float64 arithmetic: the off-diagonal entries in
    stored order (``_gather``'s sums, bit for bit, for float64 V and L; float32 entries are
    multiplied in float64, so the objective v_i'(L V)_i keeps float64's resolution), plus
    L_ii v_i, as the KKT term forms it."""
    r = V.shape[1]
    for q in prange(rows.shape[0]):
        g = np.zeros(r)
        i = rows[q]
        _add_row_products(i, indptr, indices, data, V, g, r, 1.0, _madd)
        Lii = np.float64(diag[i])
        for c in range(r):
            LV[q, c] = g[c] + Lii * np.float64(V[i, c])


@njit(nogil=True, cache=True, parallel=True)
def _lv_kkt_row_terms(
    rows, LV, diag, cptr, cidx, csgn, V, loss, gamma, bound, pmax, with_kkt, sm, out
):
    """From (L V)_i = LV[q] for i = rows[q] (no read of the rows' neighbours): sm[q] =
    v_i'(L V)_i (float64, in column order) and, with ``with_kkt``, out[q] the KKT term of
    :func:`kkt_row_terms`."""
    n_rows = rows.shape[0]
    r = V.shape[1]
    pm = max(pmax, 1)
    n_chunks = (n_rows + CHUNK - 1) // CHUNK
    for ch in prange(n_chunks):
        g, A, H, qv, alpha, grad, M, wy, free = _kkt_scratch(pm, r)
        for q in range(ch * CHUNK, min((ch + 1) * CHUNK, n_rows)):
            i = rows[q]
            acc = 0.0
            for c in range(r):
                acc += np.float64(V[i, c]) * LV[q, c]
            sm[q] = acc
            if with_kkt:
                for c in range(r):
                    g[c] = LV[q, c]
                out[q] = _row_kkt_lv(
                    i,
                    diag,
                    cptr,
                    cidx,
                    csgn,
                    V,
                    loss,
                    gamma,
                    bound,
                    g,
                    A,
                    H,
                    qv,
                    alpha,
                    grad,
                    M,
                    wy,
                    free,
                )


# Called from Python with the loss a constant of each compile (literal_arg): only the hinge
# compiles the kink QP.
kkt_row_terms = literal_arg(_kkt_row_terms, "loss")
lv_kkt_row_terms = literal_arg(_lv_kkt_row_terms, "loss")


def kkt_residual(prep, V) -> float:
    """kkt(V) for V in the internal order of ``prep`` (a PreparedProblem)."""

    n = V.shape[0]
    rows = np.arange(n, dtype=np.int64)
    terms = np.empty(n)
    kkt_row_terms(
        rows,
        prep.indptr,
        prep.indices,
        prep.data,
        prep.diag,
        prep.cptr,
        prep.cidx,
        prep.csgn,
        V,
        prep.loss_code,
        prep.gamma,
        prep.bound,
        prep.pmax,
        terms,
    )
    num = ordered_total(chunked_sums(terms))
    den = ordered_total(chunked_sums(np.einsum("ij,ij->i", V, V, dtype=np.float64)))
    return float(np.sqrt(num / den)) if den > 0 else float(np.sqrt(num))
