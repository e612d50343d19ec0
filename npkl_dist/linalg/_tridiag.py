"""Top-k eigenpairs of a small dense symmetric matrix through its tridiagonal form.

This is the algorithm of LAPACK's ``dsyevr`` asked for eigenpairs n-k+1..n (which, for a
subset of the spectrum, does not use MRRR but bisection and inverse iteration):

1. Householder tridiagonalisation ``Q' M Q = T`` (``dsytrd``, blocked, with a panel width
   measured for these sizes, :func:`_dsytrd_block`; scipy's default work size, n, makes it
   unblocked, and LAPACK's optimal one asks for 32 columns, slower here);
2. the top k eigenvalues of T by Sturm-count bisection to full precision (``dstebz``'s
   method and tolerance), here compiled with numba, run for the k eigenvalues side by side
   and shortened by safeguarded Newton steps once an eigenvalue is isolated;
3. their eigenvectors by inverse iteration with reorthogonalisation within clusters
   (``dstein``'s algorithm, here compiled, and run for up to 8 eigenvalues side by side
   where they are not in one cluster);
4. back-transformation by the Householder reflectors (``dormqr`` on the trailing block,
   which is ``dormtr`` for the lower-triangle storage).

When T splits into blocks (an off-diagonal below ``dstebz``'s threshold: a zero matrix, or
data in disconnected pieces), steps 2 and 3 are LAPACK's ``dstebz`` (which assigns each
eigenvalue to its block) and ``dstein``: the route is then ``dsyevr``'s exactly.

Steps 2 and 3 are the ones replaced. LAPACK's ``dstebz`` runs the bisections one Sturm count
after another (a chain of dependent divisions), which on SimpleNPKL's small dense kernel
steps took longer than the tridiagonalisation itself. Interleaving the k independent counts
removes the dependency and Newton steps cut the counts; the intervals and the stopping rule
are ``dstebz``'s, so the eigenvalues agree with it to rounding. The compiled inverse
iteration uses reciprocal pivots (its chains multiply instead of divide) and is batched
(the same vectors bit for bit). tests/solvers/simplenpkl/test_simplenpkl_fast.py ties each
step to its LAPACK counterpart; figures: docs/decisions/simplenpkl-fast-paths.md.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.linalg import lapack


def _dsytrd_block(n: int) -> int:
    """``dsytrd``'s panel width for an n x n matrix, set through its work size (n x width).

    LAPACK's ``ilaenv`` answers 32 at every n; on these small matrices narrower panels are
    faster (docs/decisions/simplenpkl-fast-paths.md)."""
    return 6 if n < 190 else 16


_EPS = np.finfo(np.float64).eps
_SAFMIN = np.finfo(np.float64).tiny
# dsyevr's safe range for the largest entry (RMIN = sqrt(safmin / eps), RMAX =
# min(sqrt(1 / RMIN**2), 1 / sqrt(sqrt(safmin))))
_RMIN = float(np.sqrt(_SAFMIN / _EPS))
_RMAX = float(min(np.sqrt(1.0 / (_SAFMIN / _EPS)), 1.0 / np.sqrt(np.sqrt(_SAFMIN))))


@njit(nogil=True, cache=True)
def _inspect(d, e, e2):  # OUT: e2 = e**2
    """(all finite, T splits, pivmin, tnorm) of T = (d, e): the split test is ``dstebz``'s
    (e_i^2 < |d_i d_{i+1}| eps^2 + safmin), pivmin = safmin max(1, max e_i^2) and tnorm =
    max |d| + 2 max |e| (the bisection's absolute tolerance is eps tnorm)."""
    finite = True
    splits = False
    e2max = 0.0
    dmax = 0.0
    emax = 0.0
    for i in range(d.size):
        if not np.isfinite(d[i]):
            finite = False
        dmax = max(dmax, abs(d[i]))
    for i in range(e.size):
        if not np.isfinite(e[i]):
            finite = False
        q = e[i] * e[i]
        e2[i] = q
        e2max = max(e2max, q)
        emax = max(emax, abs(e[i]))
        if q < abs(d[i] * d[i + 1]) * (_EPS * _EPS) + _SAFMIN:
            splits = True
    return finite, splits, _SAFMIN * max(1.0, e2max), dmax + 2.0 * emax


# error_model="numpy": no zero-divisor check per division (q is kept away from 0 by the
# pivmin guard, so it could not fire), which lets LLVM vectorise the j loop
# (docs/decisions/simplenpkl-fast-paths.md)
@njit(nogil=True, cache=True, error_model="numpy")
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
    """The k largest eigenvalues of the symmetric tridiagonal T = (d, sqrt(e2)), ascending
    (:func:`_bisect_range` from index n - k)."""
    return _bisect_range(d, e2, d.size - k, k, pivmin, abstol)


@njit(nogil=True, cache=True)
def _bisect_range(d, e2, first, k, pivmin, abstol):
    """Eigenvalues first .. first + k - 1 (ascending, 0-based) of the symmetric tridiagonal
    T = (d, sqrt(e2)), ascending.

    Bisection on the Sturm count from T's (widened) Gershgorin interval, ``dstebz``'s
    method and tolerance: eigenvalue j is found when its interval is narrower than abstol
    + 2 ulp max(|lo|, |hi|). Safeguarded Newton steps on det(T - x I) shorten it: once the
    interval holds eigenvalue j alone (the counts at its ends say so), the Newton point is
    taken instead of the midpoint if it lies inside and its step is under half the previous
    Newton step (else bisection); a Newton step below the tolerance ends the search. Every
    count, Newton or bisection, narrows the interval, so the result is within it
    (docs/decisions/simplenpkl-fast-paths.md)."""
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
            idx = first + j  # ascending 0-based index of the wanted eigenvalue
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
            if count_lo[j] == idx and count_hi[j] == idx + 1 and np.isfinite(S[j]) and S[j] != 0.0:
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


@njit(nogil=True, cache=True)
def _dstein_setup(d, e, w):
    """What ``dstein`` fixes before its iterations, for T = (d, e) and eigenvalues w
    (ascending): (onenrm = ||T||_1, dtpcrt = sqrt(0.1 / n), tiny = the smallest pivot
    eps ||T||_1, xs = the shifts, each at least 10 eps |w_j| above the previous one,
    group = the first index of each shift's cluster: shifts within ORTOL = 1e-3 ||T||_1 of
    their predecessor share it)."""
    n = d.size
    k = w.size
    onenrm = 0.0
    for i in range(n):
        r = abs(d[i])
        if i > 0:
            r += abs(e[i - 1])
        if i < n - 1:
            r += abs(e[i])
        onenrm = max(onenrm, r)
    ortol = 1e-3 * onenrm
    tiny = _EPS * onenrm if onenrm > 0.0 else _SAFMIN
    xs = np.empty(k)
    group = np.empty(k, dtype=np.int64)
    g = 0
    xjm = 0.0
    for j in range(k):
        xj = w[j]
        if j > 0:
            pertol = 10.0 * abs(_EPS * xj)
            if xj - xjm < pertol:
                xj = xjm + pertol
            if abs(xj - xjm) > ortol:
                g = j
        xs[j] = xj
        group[j] = g
        xjm = xj
    return onenrm, np.sqrt(0.1 / n), tiny, xs, group


@njit(nogil=True, cache=True, inline="always")
def xorshift_uniform(state):
    """One step of the xorshift64* generator: (new state, a number in [-1, 1) from its top
    53 bits). ``state`` must not be 0 (the generator's fixed point)."""
    state ^= state >> np.uint64(12)
    state ^= state << np.uint64(25)
    state ^= state >> np.uint64(27)
    u = (state * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(11)
    return state, 2.0 * (float(u) / 9007199254740992.0) - 1.0


@njit(nogil=True, cache=True)
def _xorshift_starts(n, k, X):  # OUT: X (n, k)
    """Column j: the pseudo-random start in [-1, 1] of inverse iteration for the j-th
    eigenvalue (one xorshift64* stream, n draws per eigenvalue, in order: fixed and
    reproducible)."""
    state = np.uint64(0x9E3779B97F4A7C15)
    for j in range(k):
        for i in range(n):
            state, X[i, j] = xorshift_uniform(state)


@njit(nogil=True, cache=True)
def _store_vector(x, Z, j):  # OUT: Z[:, j]
    """Z[:, j] = x normalised, its largest entry (the first of equal ones) positive."""
    n = x.size
    norm = 0.0
    jmax = 0
    for i in range(n):
        norm += x[i] * x[i]
        if abs(x[i]) > abs(x[jmax]):
            jmax = i
    inv = 1.0 / np.sqrt(norm)
    if x[jmax] < 0.0:
        inv = -inv
    for i in range(n):
        Z[i, j] = x[i] * inv


@njit(nogil=True, cache=True)
def _inverse_iteration(d, e, w, Z):  # OUT: Z (n, k)
    """Eigenvectors of the unreduced symmetric tridiagonal T = (d, e) for its eigenvalues
    w (ascending), by inverse iteration: LAPACK ``dstein``'s algorithm for one block.

    For each w_j: T - w_j I factored by Gaussian elimination with partial pivoting (pivots
    below eps ||T||_1 raised to it, ``dlagtf``/``dlagts``'s perturbation); from a
    pseudo-random start in [-1, 1], up to 5 steps of scaling and solving, each followed by
    Gram-Schmidt against the vectors of earlier eigenvalues of its cluster (within 1e-3
    ||T||_1 of the previous one: ``dstein``'s ORTOL), until the solution's largest entry has
    exceeded sqrt(0.1 / n) three times; eigenvalues closer than 10 eps |w_j| are separated by
    that much first. Columns are normalised, largest entry positive. Returns the number of
    vectors that did not converge in 5 steps (``dstein``'s INFO)."""
    n = d.size
    k = w.size
    onenrm, dtpcrt, tiny, xs, group = _dstein_setup(d, e, w)
    starts = np.empty((n, k))
    _xorshift_starts(n, k, starts)
    diag = np.empty(n)
    rdiag = np.empty(n)
    up1 = np.empty(n)
    up2 = np.empty(n)
    low = np.empty(n)
    swap = np.zeros(n, dtype=np.bool_)
    x = np.empty(n)
    failed = 0
    for j in range(k):
        xj = xs[j]
        # T - xj I = P L U, U with two superdiagonals (LAPACK dgttrf's elimination)
        for i in range(n):
            diag[i] = d[i] - xj
        for i in range(n - 1):
            up1[i] = e[i]
            up2[i] = 0.0
        for i in range(n - 1):
            sub = e[i]
            if abs(diag[i]) >= abs(sub):
                swap[i] = False
                f = sub / diag[i] if diag[i] != 0.0 else 0.0
                low[i] = f
                diag[i + 1] -= f * up1[i]
            else:
                swap[i] = True
                f = diag[i] / sub
                diag[i] = sub
                low[i] = f
                t = up1[i]
                up1[i] = diag[i + 1]
                diag[i + 1] = t - f * diag[i + 1]
                if i < n - 2:
                    up2[i] = up1[i + 1]
                    up1[i + 1] = -f * up1[i + 1]
        for i in range(n):  # reciprocals: the solves' chains then multiply, not divide
            if abs(diag[i]) < tiny:
                diag[i] = tiny if diag[i] >= 0.0 else -tiny
            rdiag[i] = 1.0 / diag[i]
        for i in range(n):
            x[i] = starts[i, j]
        checks = 0
        converged = False
        for _ in range(5):
            asum = 0.0
            for i in range(n):
                asum += abs(x[i])
            scale = n * onenrm * max(_EPS, abs(diag[n - 1])) / asum
            for i in range(n):
                x[i] *= scale
            for i in range(n - 1):  # L^-1 P
                if swap[i]:
                    t = x[i]
                    x[i] = x[i + 1]
                    x[i + 1] = t - low[i] * x[i]
                else:
                    x[i + 1] -= low[i] * x[i]
            x[n - 1] *= rdiag[n - 1]  # U^-1
            if n > 1:
                x[n - 2] = (x[n - 2] - up1[n - 2] * x[n - 1]) * rdiag[n - 2]
            for i in range(n - 3, -1, -1):
                x[i] = (x[i] - up1[i] * x[i + 1] - up2[i] * x[i + 2]) * rdiag[i]
            for c in range(group[j], j):  # against the cluster's earlier vectors
                dot = 0.0
                for i in range(n):
                    dot += x[i] * Z[i, c]
                for i in range(n):
                    x[i] -= dot * Z[i, c]
            big = 0.0
            for i in range(n):
                big = max(big, abs(x[i]))
            if big < dtpcrt:
                continue
            checks += 1
            if checks >= 3:
                converged = True
                break
        if not converged:
            failed += 1
        _store_vector(x, Z, j)
    return failed


#: lanes of the batched inverse iteration (one AVX-512 register of float64)
_LANES = 8


# error_model="numpy": the lane loops divide without a zero check (the unselected branch of a
# pivot may divide by 0; only the selected value is kept), so LLVM can vectorise them
@njit(nogil=True, cache=True, error_model="numpy")
def _inverse_iteration_batched(d, e, w, Z):  # OUT: Z (n, k)
    """:func:`_inverse_iteration` with up to ``_LANES`` eigenvalues side by side.

    The same factorisation, start, steps, tests and normalisation per eigenvalue, so the
    same vectors bit for bit (tests/solvers/simplenpkl/test_simplenpkl_fast.py); what changes is the order of
    the work. Each eigenvalue's inverse iteration is a chain of dependent operations over
    the n rows of T (the elimination, the two triangular solves), so one eigenvalue at a
    time the core waits on each step's latency; consecutive eigenvalues are independent
    unless they share a cluster (within ``dstein``'s ORTOL, where a vector is
    orthogonalised against the cluster's earlier ones), so a batch is a run of up to
    ``_LANES`` eigenvalues each outside its predecessor's cluster, and its chains run
    interleaved, lane by lane (LLVM vectorises part of the lane loops). Pivoting choices differ
    per lane: both branches are computed and the pivot's selected. Returns the number of
    vectors that did not converge in 5 steps."""
    n = d.size
    k = w.size
    B = _LANES
    onenrm, dtpcrt, tiny, xs, group = _dstein_setup(d, e, w)
    starts = np.empty((n, k))
    _xorshift_starts(n, k, starts)
    diag = np.empty((n, B))
    rdiag = np.empty((n, B))
    up1 = np.empty((n, B))
    up2 = np.empty((n, B))
    low = np.empty((n, B))
    swap = np.empty((n, B))  # 1.0 where rows i, i+1 were interchanged
    x = np.empty((n, B))
    lam = np.empty(B)
    scale = np.empty(B)
    big = np.empty(B)
    asum = np.empty(B)
    checks = np.zeros(B, dtype=np.int64)
    active = np.zeros(B, dtype=np.bool_)
    failed = 0
    j0 = 0
    while j0 < k:
        # the batch: j0 .. j0 + nb - 1, each after the first outside its predecessor's cluster
        nb = 1
        while nb < B and j0 + nb < k and group[j0 + nb] == j0 + nb:
            nb += 1
        for q in range(B):
            lam[q] = xs[j0 + min(q, nb - 1)]  # idle lanes repeat the last eigenvalue
        for i in range(n):
            for q in range(B):
                diag[i, q] = d[i] - lam[q]
        for i in range(n - 1):
            for q in range(B):
                up1[i, q] = e[i]
                up2[i, q] = 0.0
        for i in range(n - 1):
            sub = e[i]
            for q in range(B):
                di = diag[i, q]
                u1 = up1[i, q]
                dn = diag[i + 1, q]
                keep = abs(di) >= abs(sub)
                fk = sub / di
                if di == 0.0:
                    fk = 0.0
                fs = di / sub
                low[i, q] = fk if keep else fs
                swap[i, q] = 0.0 if keep else 1.0
                diag[i, q] = di if keep else sub
                up1[i, q] = u1 if keep else dn
                diag[i + 1, q] = (dn - fk * u1) if keep else (u1 - fs * dn)
            if i < n - 2:
                for q in range(B):
                    s = swap[i, q] != 0.0
                    un = up1[i + 1, q]
                    up2[i, q] = un if s else 0.0
                    up1[i + 1, q] = -low[i, q] * un if s else un
        for i in range(n):
            for q in range(B):
                di = diag[i, q]
                if abs(di) < tiny:
                    di = tiny if di >= 0.0 else -tiny
                    diag[i, q] = di
                rdiag[i, q] = 1.0 / di
        for i in range(n):
            for q in range(B):
                x[i, q] = starts[i, j0 + min(q, nb - 1)]
        for q in range(B):
            checks[q] = 0
            active[q] = q < nb
        for _ in range(5):
            for q in range(B):
                asum[q] = 0.0
            for i in range(n):
                for q in range(B):
                    asum[q] += abs(x[i, q])
            for q in range(B):
                scale[q] = n * onenrm * max(_EPS, abs(diag[n - 1, q])) / asum[q]
            for i in range(n):
                for q in range(B):
                    x[i, q] *= scale[q]
            for i in range(n - 1):  # L^-1 P
                for q in range(B):
                    a = x[i, q]
                    b = x[i + 1, q]
                    s = swap[i, q] != 0.0
                    x[i, q] = b if s else a
                    x[i + 1, q] = (a - low[i, q] * b) if s else (b - low[i, q] * a)
            for q in range(B):  # U^-1
                x[n - 1, q] *= rdiag[n - 1, q]
            if n > 1:
                for q in range(B):
                    x[n - 2, q] = (x[n - 2, q] - up1[n - 2, q] * x[n - 1, q]) * rdiag[n - 2, q]
            for i in range(n - 3, -1, -1):
                for q in range(B):
                    x[i, q] = (
                        x[i, q] - up1[i, q] * x[i + 1, q] - up2[i, q] * x[i + 2, q]
                    ) * rdiag[i, q]
            for q in range(nb):  # against the cluster's earlier (finished) vectors
                j = j0 + q
                for c in range(group[j], j):
                    dot = 0.0
                    for i in range(n):
                        dot += x[i, q] * Z[i, c]
                    for i in range(n):
                        x[i, q] -= dot * Z[i, c]
            for q in range(B):
                big[q] = 0.0
            for i in range(n):
                for q in range(B):
                    big[q] = max(big[q], abs(x[i, q]))
            more = False
            for q in range(nb):
                if active[q] and big[q] >= dtpcrt:
                    checks[q] += 1
                    if checks[q] >= 3:
                        active[q] = False
                        _store_vector(x[:, q], Z, j0 + q)
                more = more or active[q]
            if not more:
                break
        for q in range(nb):
            if active[q]:  # not converged in 5 steps: its last iterate, as dstein
                failed += 1
                _store_vector(x[:, q], Z, j0 + q)
        j0 += nb
    return failed


def tridiagonal_top_eigs(M, k: int, overwrite: bool = False):
    """Top-k eigenpairs of the symmetric (n, n) float64 M, ascending. Returns (w (k,),
    Z (n, k), failure): ``failure`` is None, or a message for the caller's error when the
    input is not finite or inverse iteration did not converge.

    One triangle of M is read. M is kept, unless ``overwrite`` and M is C-contiguous: then
    ``dsytrd`` works in M's own buffer (as the Fortran-ordered M', whose lower triangle is M's
    upper one) instead of a copy, and M's upper triangle and diagonal are overwritten; its
    strict lower triangle is kept."""
    n = M.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"tridiagonal_top_eigs: k={k} must be in 1..n={n}")
    lwork = n * _dsytrd_block(n)
    # dsyevr's scaling: entries outside [RMIN, RMAX] in magnitude would underflow or
    # overflow in the squares and products below (and dstein's eps-based tests assume a
    # matrix in that range); eigenvalues scale back, eigenvectors are unchanged
    norm = max(float(M.max()), -float(M.min()))  # NaN: no scaling, caught after dsytrd
    scale = 1.0
    if 0.0 < norm < _RMIN:
        scale = _RMIN / norm
    elif norm > _RMAX:
        scale = _RMAX / norm
    if scale != 1.0:
        M = M * scale  # a copy of its own
        overwrite = True
    if overwrite and M.flags.c_contiguous and M.dtype == np.float64:
        # M' is M (symmetric) and Fortran-ordered: dsytrd needs no copy (one n x n array
        # less to write and read)
        c, d, e, tau, info = lapack.dsytrd(M.T, lower=1, lwork=lwork, overwrite_a=1)
    else:
        c, d, e, tau, info = lapack.dsytrd(M, lower=1, lwork=lwork)
    e2 = np.empty(n - 1)
    finite, splits, pivmin, tnorm = _inspect(d, e, e2)
    if info != 0 or not finite:
        return None, None, f"dsytrd: info={info}, non-finite tridiagonal form"
    if n == 1:
        return d.copy(), np.ones((1, 1)), None
    if splits:
        # T splits into blocks (dstebz's test): LAPACK's own bisection, which assigns each
        # eigenvalue to its block, as dstein needs (a zero matrix, disconnected data)
        m, w, block, split, info = lapack.dstebz(d, e, 2, 0.0, 0.0, n - k + 1, n, 0.0, "B")
        if info in (2, 3) or (info == 0 and m != k):
            # dstebz's documented cure for info 2/3 (a non-monotonic Sturm count, seen with
            # exactly repeated eigenvalues of a split T): all eigenvalues, then the top k,
            # grouped by block and ascending within each, as dstein reads them
            m, w, block, split, info = lapack.dstebz(d, e, 0, 0.0, 0.0, 0, 0, 0.0, "B")
            if info == 0 and m == n:
                top = np.argsort(w, kind="stable")[n - k :]
                top = top[np.lexsort((w[top], block[top]))]
                # dstein takes w and iblock at length n, reading the first m = k entries
                w[:k], block[:k], m = w[top], block[top], k
        if info != 0 or m != k:
            return None, None, f"dstebz: info={info}, {m} of {k} eigenvalues"
        w = w[:k]
        Z, info = lapack.dstein(d, e, w, block, split)
        if info != 0:
            return None, None, f"dstein: info={info} (inverse iteration did not converge)"
        order = np.argsort(w, kind="stable")  # dstebz orders by block, then ascending
        w, Z = w[order], np.asfortranarray(Z[:, order])
    else:
        w = _bisect_top(d, e2, k, pivmin, _EPS * tnorm)
        Z = np.empty((n, k), order="F")
        info = _inverse_iteration_batched(d, e, w, Z)
        if info != 0:
            return None, None, f"inverse iteration: {info} vectors did not converge"
    # Q = H(1) ... H(n-1), the reflectors stored below the subdiagonal of c: as a QR of
    # c[1:, :n-1], applied to rows 1.. of Z (LAPACK dormtr, lower, does exactly this)
    Zq, _, info = lapack.dormqr(
        "L", "N", c[1:, : n - 1], tau, Z[1:], lwork=max(1, 64 * k), overwrite_c=1
    )
    if info != 0:
        return None, None, f"dormqr: info={info}"
    Z[1:] = Zq
    if scale != 1.0:
        w = w / scale
    return w, Z, None
