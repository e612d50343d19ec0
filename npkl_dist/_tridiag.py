"""Top-k eigenpairs of a small dense symmetric matrix through its tridiagonal form.

This is the algorithm of LAPACK's ``dsyevr`` asked for eigenpairs n-k+1..n (which, for a
subset of the spectrum, does not use MRRR but bisection and inverse iteration):

1. Householder tridiagonalisation ``Q' M Q = T`` (``dsytrd``, blocked: the optimal work
   size is queried once per n; scipy's default work size, n, makes it unblocked);
2. the top k eigenvalues of T by Sturm-count bisection to full precision (``dstebz``'s
   method and tolerance), here compiled with numba, run for the k eigenvalues side by side
   and shortened by safeguarded Newton steps once an eigenvalue is isolated;
3. their eigenvectors by inverse iteration with reorthogonalisation within clusters
   (``dstein``);
4. back-transformation by the Householder reflectors (``dormqr`` on the trailing block,
   which is ``dormtr`` for the lower-triangle storage).

When T splits into blocks (an off-diagonal below ``dstebz``'s threshold: a zero matrix, or
data in disconnected pieces), step 2 is LAPACK's ``dstebz``, which tells ``dstein`` the
block of each eigenvalue; the route is then ``dsyevr``'s exactly.

Step 2 is the one replaced: LAPACK's ``dstebz`` runs the bisections one Sturm count after
another (a chain of dependent divisions), and on the small matrices of SimpleNPKL's dense
kernel steps it took longer than the tridiagonalisation itself (one BLAS thread, n = 100,
k = 15: dsytrd 0.11 ms, dstebz 0.38 ms, dstein 0.08 ms, dormqr 0.03 ms; bench/RESULTS.md).
Interleaving the k independent counts removes the dependency, and the Newton steps cut the
counts from ~52 to 15-21; the intervals and the stopping rule are ``dstebz``'s, so the
eigenvalues agree with it to rounding (tests/test_simplenpkl_fast.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.linalg import lapack

#: the optimal ``dsytrd`` work size per n (a workspace query costs as much as a small solve)
_LWORK: dict[int, int] = {}

_EPS = np.finfo(np.float64).eps
_SAFMIN = np.finfo(np.float64).tiny


@njit(nogil=True, cache=True)
def _sturm_newton(d, e2, x, pivmin, q, dq, count, S):  # OUT: count, S
    """For each x[j]: count[j] = number of eigenvalues of T below x[j] (negative pivots of
    the LDL' of T - x[j] I, ``dlaneg``'s recurrence with ``dstebz``'s guard |q| >= pivmin),
    and S[j] = p'(x)/p(x) for p(x) = det(T - x I) = prod q_i, from q_i' = -1 + e2_{i-1}
    q_{i-1}' / q_{i-1}^2. The j loop is innermost: the k recurrences are independent and
    run interleaved (one dependent chain of divisions each, LAPACK's dstebz runs them one
    after another)."""
    n = d.size
    k = x.size
    for j in range(k):
        qj = d[0] - x[j]
        if abs(qj) < pivmin:
            qj = -pivmin
        q[j] = qj
        dq[j] = -1.0
        S[j] = 0.0
        count[j] = 1 if qj < 0.0 else 0
    for i in range(1, n):
        di = d[i]
        ei = e2[i - 1]
        for j in range(k):
            r = 1.0 / q[j]
            t = dq[j] * r
            S[j] += t
            qj = (di - x[j]) - ei * r
            if abs(qj) < pivmin:
                qj = -pivmin
            q[j] = qj
            dq[j] = -1.0 + ei * t * r
            count[j] += 1 if qj < 0.0 else 0
    for j in range(k):
        S[j] += dq[j] / q[j]


@njit(nogil=True, cache=True)
def _bisect_top(d, e2, k, pivmin, abstol):
    """The k largest eigenvalues of the symmetric tridiagonal T = (d, sqrt(e2)), ascending.

    Bisection on the Sturm count from T's (widened) Gershgorin interval, ``dstebz``'s
    method and tolerance: eigenvalue j is found when its interval is narrower than abstol
    + 2 ulp max(|lo|, |hi|). Safeguarded Newton steps on det(T - x I) shorten it: once the
    interval holds eigenvalue j alone (the counts at its ends say so), the Newton point is
    taken instead of the midpoint if it lies inside and its step is under half the previous
    Newton step (else bisection); a Newton step below the tolerance ends the search. Every
    count, Newton or bisection, narrows the interval, so the result is within it. 15-21
    counts instead of bisection's ~52 (n = 47-1000; bench/RESULTS.md)."""
    n = d.size
    lo0 = d[0]
    hi0 = d[0]
    for i in range(n):
        r = 0.0
        if i > 0:
            r += np.sqrt(e2[i - 1])
        if i < n - 1:
            r += np.sqrt(e2[i])
        lo0 = min(lo0, d[i] - r)
        hi0 = max(hi0, d[i] + r)
    tnorm = max(abs(lo0), abs(hi0))
    pad = 2.1 * _EPS * tnorm * n + 2.1 * pivmin  # dstebz's widening
    lo = np.full(k, lo0 - pad)
    hi = np.full(k, hi0 + pad)
    count_lo = np.zeros(k, dtype=np.int64)
    count_hi = np.full(k, n, dtype=np.int64)
    last_step = np.full(k, np.inf)
    x = 0.5 * (lo + hi)
    out = np.empty(k)
    done = np.zeros(k, dtype=np.bool_)
    q = np.empty(k)
    dq = np.empty(k)
    S = np.empty(k)
    count = np.empty(k, dtype=np.int64)
    reltol = 2.0 * _EPS
    remaining = k
    for _ in range(300):  # bisection alone needs ~55 (2 tnorm down to 2 ulp tnorm)
        if remaining == 0:
            break
        _sturm_newton(d, e2, x, pivmin, q, dq, count, S)
        for j in range(k):
            if done[j]:
                continue
            idx = n - k + j  # ascending 0-based index of the wanted eigenvalue
            if count[j] > idx:
                hi[j] = x[j]
                count_hi[j] = count[j]
            else:
                lo[j] = x[j]
                count_lo[j] = count[j]
            tol = abstol + reltol * max(abs(lo[j]), abs(hi[j]))
            nxt = 0.5 * (lo[j] + hi[j])
            if hi[j] - lo[j] <= tol:
                done[j] = True
                out[j] = nxt
                remaining -= 1
                continue
            if count_lo[j] == idx and count_hi[j] == idx + 1 and np.isfinite(S[j]) \
                    and S[j] != 0.0:
                step = -1.0 / S[j]
                xn = x[j] + step
                if abs(step) <= tol and lo[j] <= xn <= hi[j]:
                    done[j] = True
                    out[j] = xn
                    remaining -= 1
                    continue
                if lo[j] < xn < hi[j] and abs(step) < 0.5 * last_step[j]:
                    nxt = xn
                    last_step[j] = abs(step)
                else:
                    last_step[j] = np.inf
            x[j] = nxt
    for j in range(k):
        if not done[j]:
            out[j] = 0.5 * (lo[j] + hi[j])
    return out


def tridiagonal_top_eigs(M, k: int):
    """Top-k eigenpairs of the symmetric (n, n) float64 M (lower triangle read, M kept),
    ascending. Returns (w (k,), Z (n, k), failure): ``failure`` is None, or a message for the
    caller's error when the input is not finite or inverse iteration did not converge."""
    n = M.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"tridiagonal_top_eigs: k={k} must be in 1..n={n}")
    lwork = _LWORK.get(n)
    if lwork is None:
        lwork = _LWORK[n] = max(1, int(lapack.dsytrd_lwork(n, lower=1)[0]))
    c, d, e, tau, info = lapack.dsytrd(M, lower=1, lwork=lwork)
    if info != 0 or not (np.all(np.isfinite(d)) and np.all(np.isfinite(e))):
        return None, None, f"dsytrd: info={info}, non-finite tridiagonal form"
    if n == 1:
        return d.copy(), np.ones((1, 1)), None
    e2 = e * e
    if np.any(e2 < np.abs(d[1:] * d[:-1]) * (_EPS * _EPS) + _SAFMIN):
        # T splits into blocks (dstebz's test): LAPACK's own bisection, which assigns each
        # eigenvalue to its block, as dstein needs (a zero matrix, disconnected data)
        m, w, block, split, info = lapack.dstebz(d, e, 2, 0.0, 0.0, n - k + 1, n, 0.0, "B")
        if info != 0 or m != k:
            return None, None, f"dstebz: info={info}, {m} of {k} eigenvalues"
        w = w[:k]
    else:
        pivmin = _SAFMIN * max(1.0, float(e2.max()))
        tnorm = float(np.max(np.abs(d)) + 2.0 * np.max(np.abs(e)))
        w = _bisect_top(d, e2, k, pivmin, _EPS * tnorm)
        block = np.ones(n, dtype=np.int32)
        split = np.zeros(n, dtype=np.int32)
        split[0] = n
    Z, info = lapack.dstein(d, e, w, block, split)
    if info != 0:
        return None, None, f"dstein: info={info} (inverse iteration did not converge)"
    order = np.argsort(w, kind="stable")  # dstebz orders by block, then ascending
    if np.any(order != np.arange(k)):
        w, Z = w[order], Z[:, order]
    Z = np.asfortranarray(Z)
    # Q = H(1) ... H(n-1), the reflectors stored below the subdiagonal of c: as a QR of
    # c[1:, :n-1], applied to rows 1.. of Z (LAPACK dormtr, lower, does exactly this)
    Zq, _, info = lapack.dormqr("L", "N", c[1:, : n - 1], tau, Z[1:], lwork=max(1, 64 * k),
                                overwrite_c=1)
    if info != 0:
        return None, None, f"dormqr: info={info}"
    Z[1:] = Zq
    return w, Z, None
