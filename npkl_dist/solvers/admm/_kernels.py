"""KL-ADMM's compiled kernels: the row half-steps (Woodbury solves), the pair and diagonal
terms, and the whole iteration loop with adaptive rho and Anderson acceleration."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ...linalg import _anderson  # noqa: E402
from ...linalg._rowops import (
    CHUNK,
    _add_row_products_fused,
    _block_total,
    _dot_row_vec_fused,
    _dot_rows_fused,
    serial_variant,
)
from ...linalg._simd import (
    _fma,
    _fmadd,
    _v4_add,
    _v4_div,
    _v4_fma,
    _v4_load,
    _v4_load1,
    _v4_mul,
    _v4_splat,
    _v4_store,
    _v4_store1,
    _v4_sub,
)
from ...linalg._smallqp import _cholesky_body
from ...problem._terms import _smooth_rows


@njit(nogil=True, cache=True, parallel=True)
def admm_smooth_terms(indptr, indices, data, diag, V, out):
    """``smooth_terms`` in KL-ADMM's arithmetic (fused multiply-adds, as ``admm_rows``)."""
    n = out.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    for ch in prange(n_chunks):
        _smooth_rows(
            ch * CHUNK,
            min((ch + 1) * CHUNK, n),
            indptr,
            indices,
            data,
            diag,
            V,
            out,
            np.empty(V.shape[1]),
            _fmadd,
            _dot_row_vec_fused,
        )


# --------------------------------------------------------------------------------------
# KL-ADMM (kl-admm-ijcai2013, Alg. 1). Targets T_ij = 1 (must-link), 0 (cannot-link) and,
# with the diagonal protocol, T_ii = 1. With the sum over ordered pairs of T and the
# augmented Lagrangian of eq. (6), setting the gradients (9)-(10) to zero gives
#   (rho I + gamma sum_{j in T_i} u_j u_j') v_i = gamma sum_j T_ij u_j - (L U)_i + rho u_i - Lam_i
#   (rho I + gamma sum_{j in T_i} v_j v_j') u_i = gamma sum_j T_ij v_j - (L V)_i + rho v_i + Lam_i
# (the paper's d_i writes v_i inside the sum: a typo; the derivative has v_j). Woodbury with
# W = [x_j] (r x p):  (rho I + gamma W W')^{-1} c = (c - W (rho/gamma I + W'W)^{-1} W'c) / rho.
# Every row depends only on the other factor, so a half-step is embarrassingly parallel.
# --------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def admm_rows(
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
    """Half-step of KL-ADMM for rows start..stop-1.

    X : (n, r) IN, the other factor (U for the V-step, V^{k+1} for the U-step).
    nrm : (n,) float64 IN, ||x_k||^2 by ``admm_row_norms`` for every row k the step reads
        (the diagonal of each row's Woodbury matrix: formed once per row of X rather than
        once for every constraint that reads it; the same value, so bitwise the same).
    Lam : (n, r) IN. lam_sign : -1 for the V-step, +1 for the U-step.
    out : (n, r) OUT at those rows.
    sm : (n,) float64 OUT at those rows, or length 0 (not wanted): x_i' (L X)_i, the row's
        term of tr(X' L X) with the arithmetic of ``admm_smooth_terms`` (so the U-step, whose X is
        the new V, hands the objective its smooth term for free).
    """
    r = X.shape[1]
    q4 = r - r % 4  # columns 0..q4-1 in 4-lane vectors, the rest one by one: every element
    # gets the same operations in the same order either way (bitwise the scalar loops)
    pm = pmax + 1
    want_sm = sm.shape[0] > 0
    c = np.empty(r)
    y = np.empty(r)
    M = np.empty((pm, pm))
    z = np.empty(pm)
    rows = np.empty(pm, np.int64)
    v_rho = _v4_splat(np.float64(rho))
    v_sign = _v4_splat(np.float64(lam_sign))
    v_gamma = _v4_splat(np.float64(gamma))
    for i in range(start, stop):
        # y = (L X)_i, formed as in admm_smooth_terms; then
        # c = rho x_i + lam_sign Lam_i - (L X)_i + gamma sum_j T_ij x_j
        dii = np.float64(diag[i])
        v_d = _v4_splat(dii)
        for q in range(0, q4, 4):
            _v4_store1(y, q, _v4_mul(v_d, _v4_load(X, i, q)))
        for q in range(q4, r):
            y[q] = dii * np.float64(X[i, q])
        _add_row_products_fused(i, indptr, indices, data, X, y, r)
        if want_sm:
            sm[i] = _dot_row_vec_fused(X, i, y, r)
        for q in range(0, q4, 4):
            _v4_store1(
                c,
                q,
                _v4_sub(
                    _v4_add(
                        _v4_mul(v_rho, _v4_load(X, i, q)), _v4_mul(v_sign, _v4_load(Lam, i, q))
                    ),
                    _v4_load1(y, q),
                ),
            )
        for q in range(q4, r):
            c[q] = rho * np.float64(X[i, q]) + lam_sign * np.float64(Lam[i, q]) - y[q]
        p_i = 0
        for s in range(cptr[i], cptr[i + 1]):
            k = cidx[s]
            rows[p_i] = k
            if csgn[s] > 0:  # must-link target 1; cannot-link target 0 adds nothing
                for q in range(0, q4, 4):
                    _v4_store1(c, q, _v4_add(_v4_load1(c, q), _v4_mul(v_gamma, _v4_load(X, k, q))))
                for q in range(q4, r):
                    c[q] += gamma * X[k, q]
            p_i += 1
        if diagonal:
            rows[p_i] = i
            for q in range(0, q4, 4):
                _v4_store1(c, q, _v4_add(_v4_load1(c, q), _v4_mul(v_gamma, _v4_load(X, i, q))))
            for q in range(q4, r):
                c[q] += gamma * X[i, q]
            p_i += 1
        if p_i == 0:
            for q in range(0, q4, 4):
                _v4_store(out, i, q, _v4_div(_v4_load1(c, q), v_rho))
            for q in range(q4, r):
                out[i, q] = c[q] / rho
            continue
        # the Woodbury matrix W W' + rho / gamma I and W c, W's rows read in place in X
        for a in range(p_i):
            ka = rows[a]
            z[a] = _dot_row_vec_fused(X, ka, c, r)
            for b in range(a):
                d = _dot_rows_fused(X, ka, X, rows[b], r)
                M[a, b] = d
                M[b, a] = d
            M[a, a] = nrm[ka] + rho / gamma
        _cholesky_body(M, z, p_i, True)  # SPD: rho / gamma > 0 on the diagonal
        # c - sum_a z_a w_a, subtracted in a's order for each q (as one running sum per q),
        # one vectorisable pass over c per a
        for a in range(p_i):
            za = -z[a]
            ka = rows[a]
            v_z = _v4_splat(za)
            for q in range(0, q4, 4):
                _v4_store1(c, q, _v4_fma(_v4_load(X, ka, q), v_z, _v4_load1(c, q)))
            for q in range(q4, r):
                c[q] = _fma(np.float64(X[ka, q]), za, c[q])
        for q in range(0, q4, 4):
            _v4_store(out, i, q, _v4_div(_v4_load1(c, q), v_rho))
        for q in range(q4, r):
            out[i, q] = c[q] / rho


@njit(nogil=True, cache=True, parallel=True)
def admm_row_norms(X, nrm):
    """nrm[k] = ||x_k||^2 for every row of X (float64, ``_dot_rows_fused``): the
    ``nrm`` input of ``admm_rows``.  OUT (X.shape[0],)."""
    n, r = X.shape
    for k in prange(n):
        nrm[k] = _dot_rows_fused(X, k, X, k, r)


@njit(nogil=True, cache=True, parallel=True)
def admm_half_step(
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
    """All rows of one KL-ADMM half-step, chunks spread over numba's threads (``nrm`` as
    for ``admm_rows``)."""
    n = X.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    for ch in prange(n_chunks):
        admm_rows(
            ch * CHUNK,
            min((ch + 1) * CHUNK, n),
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
        )


@njit(nogil=True, cache=True, inline="always")
def _admm_pair_loss(V, i, j, t, r):
    """(v_i'v_j - T)^2 with KL-ADMM's target T = 1 for t > 0 (must), 0 else (cannot)."""
    d = _dot_rows_fused(V, i, V, j, r)
    target = 1.0 if t > 0 else 0.0
    return (d - target) * (d - target)


@njit(nogil=True, cache=True, parallel=True)
def admm_pair_terms(pi, pj, pt, V, out):
    """out[k] = (v_i'v_j - T_k)^2 with KL-ADMM targets T = 1 (must) / 0 (cannot).  OUT (m,)."""
    m = pi.shape[0]
    r = V.shape[1]
    for k in prange(m):
        out[k] = _admm_pair_loss(V, pi[k], pj[k], pt[k], r)


@njit(nogil=True, cache=True, parallel=True)
def admm_diag_terms(V, out):
    """out[i] = (||v_i||^2 - 1)^2.  OUT (n,)."""
    n, r = V.shape
    for i in prange(n):
        d = 0.0
        for c in range(r):
            d += np.float64(V[i, c]) * np.float64(V[i, c])
        out[i] = (d - 1.0) * (d - 1.0)


def admm_parts(indptr, cptr, diagonal, r, n_parts):
    """Row boundaries (int64, ``n_parts`` + 1 of them at most, 0 first and n last) that cut
    KL-ADMM's rows into ``n_parts`` runs of about equal cost: a row's half-step costs about
    r (its graph degree + its Woodbury rows p (p + 3) / 2 + 4) multiply-adds, p its
    constraints (+ 1 with diagonal targets). Chunks of a fixed row count leave a thread idle
    when their count is odd or their rows' degrees differ. Runs of no rows are dropped."""
    n = indptr.shape[0] - 1
    p = np.diff(cptr).astype(np.float64) + (1.0 if diagonal else 0.0)
    cost = (np.diff(indptr) + p * (p + 3.0) / 2.0 + 4.0) * max(int(r), 1)
    cum = np.concatenate(([0.0], np.cumsum(cost)))
    k = max(int(n_parts), 1)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, k) / k, side="left")
    return np.unique(np.concatenate(([0], cuts, [n])).astype(np.int64))


@njit(nogil=True, cache=True, inline="always")
def _admm_row_norms_range(start, stop, X, out):
    """out[k] = ||x_k||^2 (``_dot_rows_fused``) for rows start..stop-1."""
    r = X.shape[1]
    for k in range(start, stop):
        out[k] = _dot_rows_fused(X, k, X, k, r)


@njit(nogil=True, cache=True, inline="always")
def _admm_dual_rows(start, stop, V, U, Lam, Vn, Un, rho, prow, srow, vrow, drow, qrow):
    """Rows start..stop-1 of the dual update Lam += rho (Vn - Un) (each increment rounded
    to Lam's dtype first), the copies V <- Vn, U <- Un, and the rows' terms of ||V - U||^2,
    ||Vn - V||^2, ||Vn||^2 and the diagonal loss (qrow zeroed for the pair terms)."""
    r = V.shape[1]
    inc = np.empty_like(Lam[0, :1])
    for i in range(start, stop):
        pr = 0.0
        st = 0.0
        vv = 0.0
        for q in range(r):
            vn = np.float64(Vn[i, q])
            d = vn - np.float64(Un[i, q])
            inc[0] = rho * d
            Lam[i, q] += inc[0]
            pr += d * d
            e = vn - np.float64(V[i, q])
            st += e * e
            vv += vn * vn
            V[i, q] = Vn[i, q]
            U[i, q] = Un[i, q]
        prow[i] = pr
        srow[i] = st
        vrow[i] = vv
        drow[i] = (vv - 1.0) * (vv - 1.0)
        qrow[i] = 0.0


@njit(nogil=True, cache=True, inline="always")
def _admm_pair_values(k0, k1, X, pi, pj, pt, pv):
    """pv[k] = ``_admm_pair_loss`` of pair k, for pairs k0..k1-1 (``admm_pair_terms``'s
    values over a range)."""
    r = X.shape[1]
    for k in range(k0, k1):
        pv[k] = _admm_pair_loss(X, pi[k], pj[k], pt[k], r)


@njit(nogil=True, cache=True, parallel=True)
def admm_run(
    indptr,
    indices,
    data,
    diag,
    cptr,
    cidx,
    csgn,
    diagonal,
    pmax,
    pi,
    pj,
    pt,
    V,
    U,
    Lam,
    Vn,
    Un,
    rho,
    rho_min,
    gamma,
    tol,
    adaptive,
    n_iter,
    trace,
    parts,
    aa_on,
    X,
    Fp,
    Gp,
    dF,
    dG,
    gram,
    order,
    ints,
    floats,
    bdot,
    Vsave,
    aa_block,
    fpart,
    bpart,
    coef,
):
    """Up to ``n_iter`` whole KL-ADMM iterations in one call (the in-process fast path).

    Each iteration is exactly the reference one (two ``admm_rows`` half-steps, the dual
    update Lam += rho (V - U) rounded to Lam's dtype, then V, U <- the new factors), followed
    by the quantities ``fit_admm`` reads: ||V - U||, ||V(k+1) - V(k)||, the objective of the
    new V (its smooth term is the U-step's by-product, pair and diagonal terms in O((m + n)
    r)), ||V||; then the stopping test and eq. (15) for rho, as in ``fit_admm``. Row sums
    run left to right and totals in ``block_sums`` partials, the executors' arithmetic, so
    every trace equals the session path's bit for bit.

    V, U, Lam : (n, r) IN/OUT. Vn, Un : (n, r) scratch. trace : (n_iter, 5) float64 OUT, per
    iteration done: primal residual, step, objective, rho used, ||V||.
    parts : int64 (k + 1,) row boundaries 0 = parts[0] < ... < parts[k] = n: the work items
    the half-steps and the dual update are spread over (``admm_parts``: of about equal cost,
    so that threads finish together). Rows are independent, so any boundaries give the same
    iterates bit for bit.
    aa_on: after each iteration, ``_anderson.anderson_after`` on the accelerator's memory
    (X ... Vsave, IN/OUT; dummies when off), as ``fit_admm``'s Python loop calls it.
    Returns (iterations done, rho for the next iteration, converged).
    """
    n, r = V.shape
    m = pi.shape[0]
    n_parts = parts.shape[0] - 1
    sm = np.empty(n)
    no_sm = np.empty(0)
    nrm_u = np.empty(n)  # ||u_k||^2, read by the V-step
    nrm_v = np.empty(n)  # ||v_k||^2 of the new V, read by the U-step
    prow = np.empty(n)
    srow = np.empty(n)
    vrow = np.empty(n)
    drow = np.empty(n)
    qrow = np.empty(n)
    pv = np.empty(m)
    done = 0
    converged = False
    for k in prange(n):
        nrm_u[k] = _dot_rows_fused(U, k, U, k, r)
    for it in range(n_iter):
        if n_parts == 1:
            # one work item (the serial compilation): separate passes, as before the fused
            # regions below (the same values; on one core a little faster;
            # docs/decisions/kl-admm.md)
            admm_rows(
                0,
                n,
                indptr,
                indices,
                data,
                diag,
                cptr,
                cidx,
                csgn,
                diagonal,
                U,
                Lam,
                -1.0,
                rho,
                gamma,
                pmax,
                Vn,
                no_sm,
                nrm_u,
            )
            _admm_row_norms_range(0, n, Vn, nrm_v)
            admm_rows(
                0,
                n,
                indptr,
                indices,
                data,
                diag,
                cptr,
                cidx,
                csgn,
                diagonal,
                Vn,
                Lam,
                1.0,
                rho,
                gamma,
                pmax,
                Un,
                sm,
                nrm_v,
            )
            _admm_dual_rows(0, n, V, U, Lam, Vn, Un, rho, prow, srow, vrow, drow, qrow)
            _admm_pair_values(0, m, V, pi, pj, pt, pv)
            _admm_row_norms_range(0, n, U, nrm_u)
        else:
            # two parallel regions per iteration (six until 2026-11-29): the V-step with its
            # rows' norms, then the U-step followed, on each work item's rows, by the dual
            # update, the copies and the norms of the next V-step, and by a slice of the
            # pair values of the new V. Each value is computed as in separate passes (a
            # row's norm from the same row, the pairs from Vn, which V then copies), so the
            # iterates are bitwise the same; fewer barriers, and a work item's rows stay in
            # its core's cache between the passes
            for ch in prange(n_parts):
                admm_rows(
                    parts[ch],
                    parts[ch + 1],
                    indptr,
                    indices,
                    data,
                    diag,
                    cptr,
                    cidx,
                    csgn,
                    diagonal,
                    U,
                    Lam,
                    -1.0,
                    rho,
                    gamma,
                    pmax,
                    Vn,
                    no_sm,
                    nrm_u,
                )
                _admm_row_norms_range(parts[ch], parts[ch + 1], Vn, nrm_v)
            for ch in prange(n_parts):
                admm_rows(
                    parts[ch],
                    parts[ch + 1],
                    indptr,
                    indices,
                    data,
                    diag,
                    cptr,
                    cidx,
                    csgn,
                    diagonal,
                    Vn,
                    Lam,
                    1.0,
                    rho,
                    gamma,
                    pmax,
                    Un,
                    sm,
                    nrm_v,
                )
                # the U-step reads Lam, V and U only at its own rows, so each row's update
                # and copies may follow its own step
                _admm_dual_rows(
                    parts[ch], parts[ch + 1], V, U, Lam, Vn, Un, rho, prow, srow, vrow, drow, qrow
                )
                _admm_row_norms_range(parts[ch], parts[ch + 1], U, nrm_u)
                _admm_pair_values(m * ch // n_parts, m * (ch + 1) // n_parts, Vn, pi, pj, pt, pv)
        for k in range(m):  # grouped by owner row in pair order, as np.bincount
            qrow[pi[k]] += pv[k]
        primal = np.sqrt(_block_total(prow, n))
        step = np.sqrt(_block_total(srow, n))
        obj = _block_total(sm, n) + gamma * _block_total(qrow, n)
        if diagonal:
            obj += 0.5 * gamma * _block_total(drow, n)
        vnorm = max(np.sqrt(_block_total(vrow, n)), 1e-300)
        trace[it, 0] = primal
        trace[it, 1] = step
        trace[it, 2] = obj
        trace[it, 3] = rho
        trace[it, 4] = vnorm
        done = it + 1
        converged = primal / vnorm < tol and step / vnorm < tol
        rho_next = rho
        if adaptive and not converged:  # eq. (15)
            dual = rho * step
            if primal > 10.0 * dual:
                rho_next = 2.0 * rho
            elif dual > 10.0 * primal:
                rho_next = max(rho / 2.0, rho_min)
        if aa_on:
            rho_next, converged = _anderson.anderson_after(
                obj,
                rho,
                rho_next,
                converged,
                tol,
                vnorm,
                V,
                U,
                Lam,
                X,
                Fp,
                Gp,
                dF,
                dG,
                gram,
                order,
                ints,
                floats,
                bdot,
                Vsave,
                aa_block,
                fpart,
                bpart,
                coef,
            )
            for k in prange(n):  # the accelerator may have replaced U
                nrm_u[k] = _dot_rows_fused(U, k, U, k, r)
        rho = rho_next
        if converged:
            break
    return done, rho, converged


admm_smooth_terms_serial = serial_variant(admm_smooth_terms)
admm_row_norms_serial = serial_variant(admm_row_norms)
admm_pair_terms_serial = serial_variant(admm_pair_terms)
admm_diag_terms_serial = serial_variant(admm_diag_terms)
admm_run_serial = serial_variant(admm_run)
