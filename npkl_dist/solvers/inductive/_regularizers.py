"""The r x r problems of the inductive kernel, one per regulariser (derivation:
docs/algorithms.md, "Inductive kernel").

Every constraint c is a difference vector q_c (the pair's difference in the orthonormalised
basis coordinates q(x) = F k_B(x)), an offset a_c = alpha * (the base distance the basis does
not capture, >= 0), a direction delta_c (+1 must-link: d <= b_c; -1 cannot-link: d >= b_c)
and a bound b_c. The learned squared distance of the pair is a_c + q_c' M q_c, M = alpha I +
G L G (G = (J'K_BB J)^{1/2}), and each regulariser is a spectral function of M:

- ``logdet``: f(M) = tr M - log det M (alpha = 1): ITML's problem in q-coordinates, solved by
  its Bregman projections with slack (gamma), one constraint at a time, the rank-one updates
  of a block of constraints applied to M with one BLAS product;
- ``frobenius``: f(M) = 1/2 ||M||_F^2 (alpha = 0), M PSD;
- ``trace``: f(M) = tr M + tau/2 ||M||_F^2 (alpha = 0), M PSD: low rank;

the last two with squared-hinge slack gamma/2 sum_c max(0, delta_c (a_c + q_c'Mq_c - b_c))^2,
minimised by accelerated proximal gradient (FISTA with backtracking; the prox of the trace
plus the PSD cone shrinks eigenvalues).
"""

from __future__ import annotations

import numba
import numpy as np

REGULARIZERS = ("logdet", "frobenius", "trace")
#: constraints whose rank-one updates are gathered before M is updated with BLAS: about r
#: (a projection inside a block costs O(block * r) for the block's earlier updates, the BLAS
#: products O(r^2) per constraint), within these bounds
ITML_BLOCK = (32, 256)
#: below this r the block products are too small to share between BLAS threads: one thread
#: (a second one only spins, and on a busy machine oversubscription made a pass several times
#: slower; docs/decisions/inductive.md, "BLAS threads in the ITML loop")
ITML_THREADED_MIN_R = 512


@numba.njit(cache=True, nogil=True)
def _itml_step(p, a, bhat, gamma):  # pragma: no cover - jit
    """The signed step y of one Bregman projection: the q'M'q + a = xi' equation with
    M' = (M^{-1} - y q q')^{-1} (so q'M'q = p / (1 - y p)) and the slack's 1/xi' = 1/xi + y/gamma:

        p / (1 - y p) + a = 1 / (1/xi + y/gamma)

    (a = 0: ITML's y = gamma/(gamma+1) (1/p - 1/xi)). The left side minus the right increases
    on the valid interval (1 - y p > 0, 1/xi + y/gamma in (0, 1/a)) from -inf to > 0: one root,
    the quadratic's root there; bisection if rounding puts it just outside."""
    c0 = 1.0 / bhat
    g = 0.0 if np.isinf(gamma) else 1.0 / gamma
    hi = 1.0 / p
    if a > 0.0 and g > 0.0:
        hi = min(hi, (1.0 / a - c0) / g)
    lo = -np.inf if g == 0.0 else -c0 / g
    A = a * p * g
    B = -p - a * g + a * p * c0 - p * g
    C = 1.0 - c0 * (a + p)
    y = np.nan
    if A == 0.0:
        if B != 0.0:
            y = -C / B
    else:
        disc = B * B - 4.0 * A * C
        if disc >= 0.0:
            # the cancellation-free pair of roots (a tiny offset makes A tiny)
            qq = -0.5 * (B + (np.sqrt(disc) if B >= 0.0 else -np.sqrt(disc)))
            for cand in (qq / A, C / qq if qq != 0.0 else np.nan):
                if lo < cand < hi:
                    y = cand
    if not (lo < y < hi):  # rounding at the interval's ends: bisect h(y)
        lo_b = lo if np.isfinite(lo) else min(-1.0, hi) * 1e6
        hi_b = hi
        for _ in range(200):
            mid = 0.5 * (lo_b + hi_b)
            s = c0 + mid * g
            h = p / (1.0 - mid * p) + a - (1.0 / s if s > 0 else np.inf)
            if h > 0:
                hi_b = mid
            else:
                lo_b = mid
        y = 0.5 * (lo_b + hi_b)
    return y


@numba.njit(cache=True, nogil=True)
def _itml_block(MQ, Q, delta, offset, lam, bhat, gamma, U, beta):  # pragma: no cover - jit
    """Bregman projections of one block of constraints (rows of Q, b x r), in order.

    MQ[t] = M0 q_t for the block's start M0; on return U[t] = M_t q_t (M_t: M before
    projection t) and beta[t], so that M_end = M0 + sum_t beta_t U_t U_t'. lam, bhat updated
    in place. A constraint reads delta_t (offset_t + q_t'Mq_t) <= delta_t xi_t."""
    b, r = Q.shape
    g = 0.0 if np.isinf(gamma) else 1.0 / gamma
    for t in range(b):
        # u = M_t q_t = M0 q_t + sum_{s<t} beta_s u_s (u_s' q_t)
        for k in range(r):
            U[t, k] = MQ[t, k]
        for s in range(t):
            if beta[s] != 0.0:
                dot = 0.0
                for k in range(r):
                    dot += U[s, k] * Q[t, k]
                c = beta[s] * dot
                for k in range(r):
                    U[t, k] += c * U[s, k]
        p = 0.0
        for k in range(r):
            p += Q[t, k] * U[t, k]
        if p <= 0.0:  # a pair the basis cannot tell apart: no projection moves it
            beta[t] = 0.0
            continue
        y = _itml_step(p, offset[t], bhat[t], gamma)
        # dual feasibility: the step in the constraint's direction is at most lambda
        a = min(lam[t], delta[t] * y)
        lam[t] -= a
        y = delta[t] * a
        beta[t] = y / (1.0 - y * p)
        bhat[t] = 1.0 / (1.0 / bhat[t] + y * g)


def itml(
    Q, delta, bounds, offsets=None, gamma=1.0, max_iter=1000, tol=1e-3, M0=None, progress=None
):
    """ITML (Davis et al. 2007) in q-coordinates with identity prior: the constraints are the
    columns of Q (r x m), bounds b_c, offsets a_c >= 0 (the pair's learned distance is
    a_c + q_c'Mq_c; the slack's divergence is on that whole distance, as in the n x n
    problem). Passes over the
    constraints in their order until the relative change of the dual variables is below tol
    (metric-learn's criterion). Returns (M, passes, converged)."""
    r, m = Q.shape
    M = np.eye(r) if M0 is None else np.array(M0, dtype=np.float64)
    lam = np.zeros(m)
    lam_old = np.zeros(m)
    bhat = np.asarray(bounds, dtype=np.float64).copy()
    delta = np.asarray(delta, dtype=np.int8)
    offsets = np.zeros(m) if offsets is None else np.asarray(offsets, dtype=np.float64)
    Qt = np.ascontiguousarray(Q.T)  # (m, r): a constraint's vector is a row
    block = int(min(max(r, ITML_BLOCK[0]), ITML_BLOCK[1]))
    if r < ITML_THREADED_MIN_R:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1, user_api="blas"):
            return _itml_passes(
                Qt, M, lam, lam_old, bhat, delta, offsets, gamma, block, max_iter, tol, progress
            )
    return _itml_passes(
        Qt, M, lam, lam_old, bhat, delta, offsets, gamma, block, max_iter, tol, progress
    )


def _itml_passes(Qt, M, lam, lam_old, bhat, delta, offsets, gamma, block, max_iter, tol, progress):
    m = Qt.shape[0]
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        for s in range(0, m, block):
            e = min(m, s + block)
            Qb = Qt[s:e]
            MQ = Qb @ M  # rows (M q_t)' (M symmetric)
            U = np.empty_like(MQ)
            beta = np.zeros(e - s)
            # lam, bhat: views of the block's entries, updated in place
            _itml_block(
                MQ, Qb, delta[s:e], offsets[s:e], lam[s:e], bhat[s:e], float(gamma), U, beta
            )
            M += U.T @ (U * beta[:, None])
        M = 0.5 * (M + M.T)
        normsum = np.linalg.norm(lam) + np.linalg.norm(lam_old)
        conv = np.inf if normsum == 0 else np.abs(lam_old - lam).sum() / normsum
        if progress is not None:
            progress(it, conv)
        if normsum == 0 or conv < tol:
            converged = True
            break
        lam_old = lam.copy()
    return M, it, converged


def _psd_prox(A, shrink):
    """argmin_{M PSD} 1/2 ||M - A||^2 + shrink * tr M: eigenvalues max(lambda - shrink, 0)."""
    w, V = np.linalg.eigh(0.5 * (A + A.T))
    w = np.maximum(w - shrink, 0.0)
    keep = w > 0
    V = V[:, keep]
    return (V * w[keep]) @ V.T


def objective(M, Q, delta, bounds, offsets, regularizer, gamma, tau):
    """The r x r problem's objective at M: f(M) minus f at M = alpha I (0 at the base
    kernel for logdet), plus the slack term at its best slack. logdet: tr M - log det M - r'
    + gamma sum D_ld(xi, b); frobenius / trace: the squared-hinge form."""
    # (M @ Q by BLAS: a three-operand einsum runs an unoptimised r^2 m loop)
    d = np.einsum("kc,kc->c", Q, M @ Q) + (0.0 if offsets is None else offsets)
    w = np.linalg.eigvalsh(0.5 * (M + M.T))
    if regularizer == "logdet":
        if w.min() <= 0:
            return np.inf
        f = float(np.sum(w - np.log(w) - 1.0))
        if np.isinf(gamma):  # hard constraints: no slack term
            return f
        xi = np.where(delta > 0, np.maximum(d, bounds), np.minimum(d, bounds))
        return f + gamma * float(np.sum(xi / bounds - np.log(xi / bounds) - 1.0))
    h = np.maximum(0.0, delta * (d - bounds))
    f = 0.5 * gamma * float(h @ h)
    if regularizer == "frobenius":
        return f + 0.5 * float(np.sum(w * w))
    return f + float(np.sum(w)) + 0.5 * tau * float(np.sum(w * w))


def penalised(
    Q, delta, bounds, regularizer, gamma=1.0, tau=1e-3, max_iter=5000, tol=1e-8, progress=None
):
    """min_{M PSD} f(M) + gamma/2 sum_c max(0, delta_c (q_c'Mq_c - b_c))^2 with f the Frobenius
    (1/2 ||M||^2) or trace (tr M + tau/2 ||M||^2) regulariser, by FISTA with backtracking and
    gradient restarts. Stops when the relative change of M in a step is below tol.
    Returns (M, iterations, converged)."""
    r, m = Q.shape
    delta = np.asarray(delta, dtype=np.float64)
    bounds = np.asarray(bounds, dtype=np.float64)
    mu = 1.0 if regularizer == "frobenius" else float(tau)
    shrink_w = 0.0 if regularizer == "frobenius" else 1.0
    Qf = np.ascontiguousarray(Q)

    def smooth(M, grad=True):
        d = np.einsum("kc,kc->c", Qf, M @ Qf)
        h = np.maximum(0.0, delta * (d - bounds))
        val = 0.5 * gamma * float(h @ h) + 0.5 * mu * float(np.sum(M * M))
        if not grad:  # a trial step of the line search needs the value only
            return val, None
        act = h > 0
        w = gamma * delta[act] * h[act]
        Qa = Qf[:, act]
        grad = (Qa * w) @ Qa.T + mu * M
        return val, grad

    M = np.zeros((r, r))
    Y, t = M.copy(), 1.0
    step = 1.0 / (mu + gamma * float(np.sum(np.einsum("kc,kc->c", Qf, Qf) ** 2)) + 1e-300)
    step = max(step, 1e-12)
    step *= 8.0  # backtracking brings it down as needed
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        fy, gy = smooth(Y)
        while True:
            Mn = _psd_prox(Y - step * gy, step * shrink_w)
            D = Mn - Y
            fn, _ = smooth(Mn, grad=False)
            if fn <= fy + float(np.sum(gy * D)) + 0.5 / step * float(np.sum(D * D)) + 1e-15 * abs(
                fy
            ):
                break
            step *= 0.5
        change = np.linalg.norm(Mn - M) / max(np.linalg.norm(Mn), 1e-300)
        # gradient-based restart keeps FISTA monotone in practice
        if float(np.sum((Y - Mn) * (Mn - M))) > 0:
            t = 1.0
        tn = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        Y = Mn + ((t - 1.0) / tn) * (Mn - M)
        M, t = Mn, tn
        if progress is not None:
            progress(it, change)
        if change < tol:
            converged = True
            break
    return 0.5 * (M + M.T), it, converged
