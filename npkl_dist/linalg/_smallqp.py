"""Small dense solves: Cholesky (left- and right-looking, SIMD), Gram matrices of row sets, and
the exact box-constrained QP the hinge losses' row updates solve."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._simd import _fma, _v4_fma, _v4_load, _v4_splat, _v4_store

#: box QP: phase-1 coordinate-descent sweeps; phase-2 rounds (CD sweeps + one active-set step).
#: A dual that phase 1 has not settled in 100 sweeps is a degenerate one, for phase 2's exact
#: active-set steps (docs/decisions/hinge-stopping.md).
_QP_MAX_ITER = 100
_QP_ROUNDS = 50
_QP_CD_ITER = 200


@njit(nogil=True, cache=True, inline="always")
def _cholesky_body(M, y, p, by_reciprocal):
    """Solve M x = y in place (y <- x) for SPD M[:p, :p]; M is overwritten by its factor.
    ``by_reciprocal`` (a constant at each call site): keep 1 / L_jj on the diagonal and
    multiply by it, rather than divide by L_jj: one division per pivot instead of one per
    entry below it and two per solve (KL-ADMM's p <= 8 systems; each quotient then rounds
    twice; docs/decisions/kl-admm.md).

    Returns False when M is not numerically positive definite.
    """
    for j in range(p):
        s = M[j, j]
        for k in range(j):
            s -= M[j, k] * M[j, k]
        if not s > 0.0:
            return False
        d = np.sqrt(s)
        if by_reciprocal:
            d = 1.0 / d
        M[j, j] = d
        for i in range(j + 1, p):
            s = M[i, j]
            for k in range(j):
                s -= M[i, k] * M[j, k]
            M[i, j] = s * d if by_reciprocal else s / d
    for i in range(p):  # forward
        s = y[i]
        for k in range(i):
            s -= M[i, k] * y[k]
        y[i] = s * M[i, i] if by_reciprocal else s / M[i, i]
    for i in range(p - 1, -1, -1):  # backward
        s = y[i]
        for k in range(i + 1, p):
            s -= M[k, i] * y[k]
        y[i] = s * M[i, i] if by_reciprocal else s / M[i, i]
    return True


@njit(nogil=True, cache=True)
def _cholesky_solve(M, y, p):
    """``_cholesky_body`` dividing by the pivots (the BCD column updates)."""
    return _cholesky_body(M, y, p, False)


@njit(nogil=True, cache=True)
def _qp_value(H, q, alpha, p):
    val = 0.0
    for a in range(p):
        s = 0.0
        for b in range(p):
            s += H[a, b] * alpha[b]
        val += alpha[a] * (0.5 * s - q[a])
    return val


@njit(nogil=True, cache=True)
def _qp_refresh(H, q, alpha, p, grad, upper):
    """grad <- H alpha - q; returns the largest projected-gradient violation."""
    viol = 0.0
    for a in range(p):
        s = -q[a]
        for b in range(p):
            s += H[a, b] * alpha[b]
        grad[a] = s
        if alpha[a] <= 0.0:
            v = -s if s < 0.0 else 0.0
        elif alpha[a] >= upper:
            v = s if s > 0.0 else 0.0
        else:
            v = abs(s)
        viol = max(viol, v)
    return viol


@njit(nogil=True, cache=True, inline="always")
def _free_set(alpha, upper, p, free):
    """free[:nf] <- the variables strictly inside the box; returns nf."""
    nf = np.int64(0)  # not the literal 0: see _kkt._row_kkt_lv
    for j in range(p):
        if 0.0 < alpha[j] < upper:
            free[nf] = j
            nf += 1
    return nf


@njit(nogil=True, cache=True, inline="always")
def _free_system(H, q, alpha, upper, p, free, nf, work_M, work_y):
    """The QP restricted to the free variables (the others fixed at their bounds):
    work_M[:nf, :nf] = H_FF, work_y[:nf] = q_F - H_FB alpha_B."""
    for a in range(nf):
        ja = free[a]
        s = q[ja]
        for k in range(p):
            if not (0.0 < alpha[k] < upper):
                s -= H[ja, k] * alpha[k]
        work_y[a] = s
        for b in range(nf):
            work_M[a, b] = H[ja, free[b]]


@njit(nogil=True, cache=True)
def _free_solve(H, q, alpha, upper, p, free, nf, work_M, work_y):
    """work_y[:nf] <- minimiser of the QP over the free variables with the others fixed.

    Cholesky when H_FF is positive definite, else the minimum-norm solution through an
    eigendecomposition (dependent constraint vectors make H singular).
    """
    _free_system(H, q, alpha, upper, p, free, nf, work_M, work_y)
    rhs = work_y[:nf].copy()
    if _cholesky_solve(work_M, work_y, nf):
        return
    Hf = np.empty((nf, nf))
    for a in range(nf):
        for b in range(nf):
            Hf[a, b] = H[free[a], free[b]]
    w, Q = np.linalg.eigh(Hf)
    cut = 1e-12 * max(abs(w[-1]), 1e-300)
    for a in range(nf):
        work_y[a] = 0.0
    for e in range(nf):
        if w[e] > cut:
            c = 0.0
            for a in range(nf):
                c += Q[a, e] * rhs[a]
            c /= w[e]
            for a in range(nf):
                work_y[a] += c * Q[a, e]


@njit(nogil=True, cache=True, inline="always")
def _cd_pass(H, upper, p, alpha, grad):
    """One pass of dual coordinate descent over the box QP's variables (exact minimisation
    in each, clipped to [0, upper]), keeping grad = H alpha - q; returns the largest
    projected-gradient violation seen at the start of each coordinate's step."""
    viol = 0.0
    for j in range(p):
        gj = grad[j]
        a = alpha[j]
        if a <= 0.0:
            v = -gj if gj < 0.0 else 0.0
        elif a >= upper:
            v = gj if gj > 0.0 else 0.0
        else:
            v = abs(gj)
        viol = max(viol, v)
        hjj = H[j, j]
        if hjj > 0.0:
            new = a - gj / hjj
        else:
            new = upper if gj < 0.0 else (0.0 if gj > 0.0 else a)
        if new < 0.0:
            new = 0.0
        elif new > upper:
            new = upper
        d = new - a
        if d != 0.0:
            alpha[j] = new
            for k in range(p):
                grad[k] += d * H[k, j]
    return viol


@njit(nogil=True, cache=True, inline="always")
def gram_rows(A, p, div, H):
    """H[s, u] = (A_s . A_u) / div for the first p rows of A (symmetric, float64)."""
    r = A.shape[1]
    for s in range(p):
        for u in range(s + 1):
            d = 0.0
            for c in range(r):
                d += A[s, c] * A[u, c]
            H[s, u] = d / div
            H[u, s] = H[s, u]


@njit(nogil=True, cache=True, inline="always")
def _transpose_rows(A, p, AT):
    """AT[c, s] = A[s, c] for the first p rows of A."""
    r = A.shape[1]
    for s in range(p):
        for c in range(r):
            AT[c, s] = A[s, c]


@njit(nogil=True, cache=True, inline="always")
def gram_upper(A, p, r, N):
    """N[a, u] = sum_s A[s, a] A[s, u] over the first p rows of A, for a <= u < r: the upper
    triangle of A'A (pass the transpose of a row set for its A A'). Rank-one updates by rows
    of A in 4-lane fused multiply-adds, four rows per pass over N, contiguous in u, rather
    than r^2 / 2 dot products that are each a chain of dependent adds. Each row of N starts
    at the 4-block holding its diagonal, so a few entries left of the diagonal get values
    too: the lower triangle is workspace, never read."""
    for a in range(r):
        for u in range(a - a % 4, r):
            N[a, u] = 0.0
    p4 = p - p % 4
    for s in range(0, p4, 4):
        for a in range(r):
            u0 = a - a % 4
            r4 = r - (r - u0) % 4
            f0 = np.float64(A[s, a])
            f1 = np.float64(A[s + 1, a])
            f2 = np.float64(A[s + 2, a])
            f3 = np.float64(A[s + 3, a])
            v0 = _v4_splat(f0)
            v1 = _v4_splat(f1)
            v2 = _v4_splat(f2)
            v3 = _v4_splat(f3)
            for u in range(u0, r4, 4):
                h = _v4_fma(v0, _v4_load(A, s, u), _v4_load(N, a, u))
                h = _v4_fma(v1, _v4_load(A, s + 1, u), h)
                h = _v4_fma(v2, _v4_load(A, s + 2, u), h)
                _v4_store(N, a, u, _v4_fma(v3, _v4_load(A, s + 3, u), h))
            for u in range(r4, r):
                N[a, u] = _fma(
                    f3,
                    A[s + 3, u],
                    _fma(f2, A[s + 2, u], _fma(f1, A[s + 1, u], _fma(f0, A[s, u], N[a, u]))),
                )
    for s in range(p4, p):
        for a in range(r):
            u0 = a - a % 4
            r4 = r - (r - u0) % 4
            f = np.float64(A[s, a])
            fv = _v4_splat(f)
            for u in range(u0, r4, 4):
                _v4_store(N, a, u, _v4_fma(fv, _v4_load(A, s, u), _v4_load(N, a, u)))
            for u in range(r4, r):
                N[a, u] = _fma(f, A[s, u], N[a, u])


@njit(nogil=True, cache=True, inline="always")
def _cholesky_upper_solve(M, y, p):
    """Solve M x = y in place (y <- x) for SPD M[:p, :p] given by its upper triangle (C-
    contiguous), overwritten by U with M = U'U. Right-looking: every update is a row axpy
    in 4-lane fused multiply-adds (from the 4-block holding the diagonal; the lower
    triangle is workspace). Returns False when M is not numerically positive definite."""
    for j in range(p):
        s = M[j, j]
        if not s > 0.0:
            return False
        d = np.sqrt(s)
        M[j, j] = d
        for k in range(j + 1, p):
            M[j, k] /= d
        for i in range(j + 1, p):
            f = -M[j, i]
            fv = _v4_splat(f)
            k0 = i - i % 4
            p4 = p - (p - k0) % 4
            for k in range(k0, p4, 4):
                _v4_store(M, i, k, _v4_fma(fv, _v4_load(M, j, k), _v4_load(M, i, k)))
            for k in range(p4, p):
                M[i, k] = _fma(f, M[j, k], M[i, k])
    for i in range(p):  # U' z = y
        zi = y[i] / M[i, i]
        y[i] = zi
        for k in range(i + 1, p):
            y[k] -= M[i, k] * zi
    for i in range(p - 1, -1, -1):  # U x = z
        s = y[i]
        for k in range(i + 1, p):
            s -= M[i, k] * y[k]
        y[i] = s / M[i, i]
    return True


@njit(nogil=True, cache=True)
def box_qp(H, q, upper, p, alpha, grad, work_M, work_y, free):
    """Exact solution of  min 1/2 a'Ha - q'a  s.t. 0 <= a <= upper  (p small, H PSD).

    Rounds of dual coordinate descent alternate with active-set steps: the minimiser over
    the current free variables (Cholesky, or a minimum-norm eigen-solve when H is singular)
    is taken up to the first bound it would cross, and kept only if it does not increase the
    QP objective. Ends when the projected gradient vanishes to rounding. ``upper`` may be inf.

    alpha : (p,) OUT, grad : (p,) workspace (H a - q), work_M (p, p), work_y (p,), free (p,).
    """
    scale = 1.0
    hmax = 0.0
    for j in range(p):
        alpha[j] = 0.0
        grad[j] = -q[j]
        scale = max(scale, abs(q[j]))
        hmax = max(hmax, abs(H[j, j]))
    tol = 1e-15 * scale
    # Phase 1: coordinate descent to the tolerance, then an exact polish of the free set.
    # This settles every well-conditioned dual; degenerate ones (nearly dependent constraint
    # vectors, H singular) go on to phase 2.
    viol = 0.0
    for _ in range(_QP_MAX_ITER):
        viol = _cd_pass(H, upper, p, alpha, grad)
        if viol <= tol:
            break
    if viol <= tol:
        nf = _free_set(alpha, upper, p, free)
        if nf == 0:
            return
        _free_system(H, q, alpha, upper, p, free, nf, work_M, work_y)
        if _cholesky_solve(work_M, work_y, nf):
            inside = True
            for a in range(nf):
                if not (0.0 <= work_y[a] <= upper):
                    inside = False
            if inside:
                for a in range(nf):
                    alpha[free[a]] = work_y[a]
        return
    # Phase 2: rounds of coordinate descent and active-set steps.
    for _ in range(_QP_ROUNDS):
        viol = 0.0
        for _ in range(_QP_CD_ITER):
            viol = _cd_pass(H, upper, p, alpha, grad)
            if viol <= tol:
                break
        # active-set step on the free variables
        nf = _free_set(alpha, upper, p, free)
        if nf == 0:
            if viol <= tol:
                return
            continue
        _free_solve(H, q, alpha, upper, p, free, nf, work_M, work_y)
        t = 1.0  # ratio test: stay in the box
        for a in range(nf):
            d = work_y[a] - alpha[free[a]]
            if d < 0.0 and alpha[free[a]] + t * d < 0.0:
                t = alpha[free[a]] / -d
            elif d > 0.0 and alpha[free[a]] + t * d > upper:
                t = (upper - alpha[free[a]]) / d
        before = _qp_value(H, q, alpha, p)
        for a in range(nf):  # stash the current point in grad's tail? use work_M row 0
            work_M[0, a] = alpha[free[a]]
        for a in range(nf):
            ja = free[a]
            val = alpha[ja] + t * (work_y[a] - alpha[ja])
            alpha[ja] = min(max(val, 0.0), upper)
        if _qp_value(H, q, alpha, p) > before:
            for a in range(nf):  # no progress: undo
                alpha[free[a]] = work_M[0, a]
        viol = _qp_refresh(H, q, alpha, p, grad, upper)
        if viol <= tol:
            return
