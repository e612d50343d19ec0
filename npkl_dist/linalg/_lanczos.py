"""Top-k eigenpairs of a sparse symmetric matrix: Lanczos with partial reorthogonalisation.

SimpleNPKL's fast path above ``_FAST_DENSE_MAX_N`` points (the adult sets) needs the top
rank eigenpairs of the sparse A = sum w_p t_p E_p - L, once per kernel step. ARPACK
(``scipy.sparse.linalg.eigsh``, the reference) spends most of such a solve outside the
products with A: it keeps a basis of 1.5 rank + 1 vectors, orthogonalises every new vector
against all of them (two passes over the basis per step) and restarts. This is the other
classic design (Simon 1984; Larsen's PROPACK):

1. plain Lanczos, every vector kept (``Q``, one row per step), no restarts;
2. orthogonality monitored by Simon's recurrence for the inner products
   w_{j+1,k} ~ q_{j+1}' q_k (from the tridiagonal coefficients alone, O(j) per step, with a
   rounding term 0.5 sqrt(n) eps ||A|| per step); when some |w| passes eps^0.6, the new
   vector is orthogonalised (modified Gram-Schmidt, a second pass when the first cancels
   more than 1/sqrt(2) of it) against the rows whose |w| is above eps^(3/4) around the
   offending ones, and again at the next step. The basis then stays a little better than
   semi-orthogonal (|q_j' q_k| <= sqrt(eps) keeps the Ritz values of T accurate to
   rounding, Simon's theorem; the tighter eps^0.6 keeps the Ritz vectors accurate too, see
   ``_OMEGA_MAX``) at a fraction of full reorthogonalisation's cost;
3. convergence by ARPACK's test: the residual bound |beta_m s_{m,i}| of each wanted Ritz
   pair of the m x m tridiagonal T_m at most ``tol max(eps^(2/3), |theta_i|)``. It is
   first tested on the k-th largest Ritz value alone (the last to converge; one bisection
   and one inverse iteration on T_m, :mod:`npkl_dist.linalg._tridiag`), every 20% of the steps or
   sooner where the bound's geometric decrease predicts convergence (``_FIRST``), and
   then on all k;
4. the Ritz vectors Q_m' S, then Rayleigh-Ritz on their span (Cholesky QR, Y'AY, eigh),
   which restores orthonormality to rounding and gives the true residuals, checked against
   ``_VERIFY`` times the tolerance; where one is above, up to ``_REFINE`` Rayleigh-Ritz
   steps on span(Y, residuals) follow while each at least halves the worst excess.

Anything off (a non-finite value, no convergence within the row budget, a failed residual
check, a Krylov space that closes early, ``_BREAKDOWN``) returns a failure message and the
caller falls back to ARPACK. Like ARPACK, a single-vector Lanczos method sees one copy of an
exactly repeated eigenvalue; small or dense problems go through
:mod:`npkl_dist.linalg._tridiag`.

Reference: Simon 1984; docs/algorithms.md, "SimpleNPKL in detail";
docs/decisions/simplenpkl-fast-paths.md (figures).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit

from . import _tridiag

_EPS = float(np.finfo(np.float64).eps)
_EPS23 = _EPS ** (2.0 / 3.0)

#: Reorthogonalise when an estimated |q_{j+1}' q_k| passes this: Simon's sqrt(eps) keeps the
#: Ritz values exact but lets the reorthogonalisation terms reach the Ritz vectors; eps^0.6
#: keeps their true residuals within ARPACK's tolerance (docs/decisions/simplenpkl-fast-paths.md).
_OMEGA_MAX = _EPS**0.6

#: The true residual after Rayleigh-Ritz may exceed the Lanczos bound by this factor.
_VERIFY = 10.0

#: Rayleigh-Ritz rounds on span(Y, AY - Y theta) when a residual is above the check's limit:
#: at most _REFINE, and only while each round divides the worst residual-to-limit ratio by
#: at least _REFINE_GAIN (a round that does not has reached the rounding floor). The limit is
#: relative to |theta|, so a Ritz value near 0 asks for a residual far below the others'
#: (found by hypothesis; docs/decisions/simplenpkl-fast-paths.md).
_REFINE = 5
_REFINE_GAIN = 2.0

#: A step with beta <= this x ||A|| closes the Krylov space (to rounding): the start vector
#: lies in fewer than n eigenvectors' span, e.g. A has a repeated eigenvalue, of which
#: Lanczos sees one copy. The solver then reports failure.
_BREAKDOWN = float(np.sqrt(_EPS))

#: The basis Q holds at most max(this many bytes, 4x ARPACK's basis) (past that: failure,
#: and the caller's ARPACK).
_MAX_BYTES = 512 * 2**20


class SymUpper(NamedTuple):
    """A symmetric n x n matrix D + U + U' held as its strict upper triangle U (CSR arrays,
    unsigned: ``uptr`` uint64, ``uidx`` uint32) and its diagonal D: the form the products
    here read. :func:`lanczos_top_eigs` takes it as it is (a CSR matrix is converted by
    :func:`_upper_part` on every call)."""

    uptr: np.ndarray
    uidx: np.ndarray
    udata: np.ndarray
    diag: np.ndarray

    @property
    def shape(self):
        return (self.diag.size, self.diag.size)

    def tocsr(self) -> sp.csr_matrix:
        """The whole matrix as scipy CSR (for ARPACK; explicit zeros may be dropped)."""
        n = self.diag.size
        U = sp.csr_matrix(
            (self.udata, self.uidx.astype(np.int64), self.uptr.astype(np.int64)), shape=(n, n)
        )
        return (U + U.T + sp.diags(self.diag, format="csr")).tocsr()

    def toarray(self) -> np.ndarray:
        return self.tocsr().toarray()


@njit(nogil=True, cache=True)
def sym_upper_pattern(indptr, indices, data, pi, pj):
    """The upper form of -L + sum_p (pair terms at (i_p, j_p)) for the symmetric CSR L
    (sorted indices, no duplicates) and distinct pairs i_p < j_p: the union of L's strict
    upper pattern and the pairs, row by row in ascending columns.

    Returns (uptr, uidx, base, diag, pos): ``base`` -L's strict upper values on that pattern
    (+0.0 where L has no entry), ``diag`` -L's diagonal, ``pos[p]`` the slot of pair p. The
    values of A(w) are then ``base`` with ``w_p t_p / 2`` added at ``pos`` (as ``_SparseA``:
    one addition to -L_ij per entry)."""
    n = indptr.size - 1
    m = pi.size
    # the pairs by row (counting sort), then each row's columns in ascending order
    pstart = np.zeros(n + 1, dtype=np.int64)
    for p in range(m):
        pstart[pi[p] + 1] += 1
    for i in range(n):
        pstart[i + 1] += pstart[i]
    fill = pstart[:-1].copy()
    order = np.empty(m, dtype=np.int64)
    for p in range(m):
        order[fill[pi[p]]] = p
        fill[pi[p]] += 1
    for i in range(n):  # insertion sort by column (rows hold few pairs)
        for a in range(pstart[i] + 1, pstart[i + 1]):
            p = order[a]
            b = a - 1
            while b >= pstart[i] and pj[order[b]] > pj[p]:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = p
    # merge each row's strict upper L entries with its pairs, into arrays sized for the
    # case of no shared entry (all of L's entries plus the pairs), returned trimmed
    size = indptr[n] + m
    uptr = np.zeros(n + 1, dtype=np.uint64)
    uidx = np.empty(size, dtype=np.uint32)
    base = np.zeros(size)
    diag = np.zeros(n)
    pos = np.empty(m, dtype=np.int64)
    s = 0
    for i in range(n):
        a = indptr[i]
        while a < indptr[i + 1] and indices[a] <= i:
            if indices[a] == i:
                diag[i] = -data[a]
            a += 1
        c = pstart[i]
        while a < indptr[i + 1] or c < pstart[i + 1]:
            if c == pstart[i + 1] or (a < indptr[i + 1] and indices[a] < pj[order[c]]):
                uidx[s] = indices[a]
                base[s] = -data[a]
                a += 1
            elif a == indptr[i + 1] or pj[order[c]] < indices[a]:
                uidx[s] = pj[order[c]]
                pos[order[c]] = s
                c += 1
            else:
                uidx[s] = indices[a]
                base[s] = -data[a]
                pos[order[c]] = s
                a += 1
                c += 1
            s += 1
        uptr[i + 1] = s
    return uptr, uidx[:s], base[:s], diag, pos


@njit(nogil=True, cache=True)
def add_pair_slots(base, pos, w, t, out):  # OUT: out
    """out = base, then w_p t_p / 2 added at slot pos[p] (the upper form's A(w))."""
    for s in range(base.size):
        out[s] = base[s]
    for p in range(pos.size):
        out[pos[p]] += 0.5 * w[p] * t[p]


@njit(nogil=True, cache=True)
def sym_matmat(uptr, uidx, udata, diag, X):
    """A X for the upper form of A and X (n, k) C-contiguous (row by row)."""
    n, k = X.shape
    Y = np.zeros((n, k))
    for i in range(n):
        d = diag[i]
        for c in range(k):
            Y[i, c] += d * X[i, c]
        for p in range(uptr[i], uptr[i + 1]):
            j = uidx[p]
            v = udata[p]
            for c in range(k):
                Y[i, c] += v * X[j, c]
                Y[j, c] += v * X[i, c]
    return Y


@njit(nogil=True, cache=True)
def _upper_part(indptr, indices, data):
    """(indptr, indices, data) of the strict upper triangle of the CSR matrix, and its
    diagonal. ``indices`` come out unsigned: numba then skips the negative-index
    wrap-around test on x[indices[p]], which made a CSR product far slower than scipy's
    ``csr_matvec`` (docs/decisions/simplenpkl-fast-paths.md)."""
    n = indptr.size - 1
    count = 0
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] > i:
                count += 1
    uptr = np.zeros(n + 1, dtype=np.uint64)
    uidx = np.empty(count, dtype=np.uint32)
    udata = np.empty(count)
    diag = np.zeros(n)
    c = 0
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j > i:
                uidx[c] = j
                udata[c] = data[p]
                c += 1
            elif j == i:
                diag[i] += data[p]
        uptr[i + 1] = c
    return uptr, uidx, udata, diag


@njit(nogil=True, cache=True)
def _sym_matvec(uptr, uidx, udata, diag, x, y):  # OUT: y = A x
    """y = A x for the symmetric A = D + U + U' stored as its strict upper triangle U (CSR)
    and diagonal D: each stored entry is read once for both of its products."""
    for i in range(y.size):
        y[i] = 0.0
    for i in range(y.size):
        xi = x[i]
        s = diag[i] * xi
        for p in range(uptr[i], uptr[i + 1]):
            j = uidx[p]
            v = udata[p]
            s += v * x[j]
            y[j] += v * xi
        y[i] += s


#: The inner products of the steps and the reorthogonalisation may sum in any order (SIMD
#: lanes side by side): a serial sum is one dependent addition per entry, several times
#: slower (docs/decisions/simplenpkl-fast-paths.md). The rounding then depends on the
#: machine's vector width, as BLAS's does.
_DOT_FLAGS = {"reassoc", "contract"}


@njit(nogil=True, cache=True, fastmath=_DOT_FLAGS)
def _dot(x, y):
    s = 0.0
    for i in range(x.size):
        s += x[i] * y[i]
    return s


@njit(nogil=True, cache=True, fastmath=_DOT_FLAGS)
def _axpy_dot(alpha, x, r, z):  # OUT: r
    """r -= alpha x; returns z'r (of the updated r; z may be r itself)."""
    s = 0.0
    for i in range(r.size):
        r[i] -= alpha * x[i]
        s += z[i] * r[i]
    return s


@njit(nogil=True, cache=True)
def _orthogonalise(Q, r, sel, m):  # OUT: r
    """One modified Gram-Schmidt pass of r against the rows k < m of Q with sel[k]. Each
    row's update of r and the next row's product with the updated r are one pass over r
    (one pass per row instead of two)."""
    prev = -1
    s = 0.0
    for k in range(m):
        if sel[k]:
            if prev < 0:
                s = _dot(Q[k], r)
            else:
                s = _axpy_dot(s, Q[prev], r, Q[k])
            prev = k
    if prev >= 0:
        qk = Q[prev]
        for i in range(r.size):
            r[i] -= s * qk[i]


@njit(nogil=True, cache=True)
def _lanczos(uptr, uidx, udata, diag, Q, a, b, w_prev, w_cur, w_next, sel, j0, j1, state):
    """Lanczos steps j0 .. j1 - 1 (Q[j0] set; writes a[j], b[j], Q[j + 1]). Returns the
    step count reached (< j1 if an invariant subspace was found: b[j] <= _BREAKDOWN ||A||).

    ``state`` (in/out): [||A|| estimate, reorthogonalise at the next step (0/1), count of
    reorthogonalised steps, count of vector-vector orthogonalisations]. w_prev/w_cur hold
    the estimates w_{j-1,.}, w_{j,.}; ``sel`` the rows of the last reorthogonalisation."""
    n = Q.shape[1]
    r = np.empty(n)
    eta = _EPS**0.75
    noise = 0.5 * np.sqrt(n) * _EPS
    for j in range(j0, j1):
        q = Q[j]
        _sym_matvec(uptr, uidx, udata, diag, q, r)
        if j > 0:
            alpha = _axpy_dot(b[j - 1], Q[j - 1], r, q)  # r -= b_{j-1} q_{j-1}; q'r
        else:
            alpha = _dot(q, r)
        beta = np.sqrt(_axpy_dot(alpha, q, r, r))  # r -= alpha q; ||r||
        a[j] = alpha
        if not (np.isfinite(alpha) and np.isfinite(beta)):
            b[j] = np.nan
            return j + 1
        est = abs(alpha) + beta + (b[j - 1] if j > 0 else 0.0)
        if est > state[0]:
            state[0] = est
        anorm = state[0]
        reorth = False
        if j > 0 and beta > 0.0:
            # Simon's recurrence: b_j w_{j+1,k} = b_k w_{j,k+1} + (a_k - a_j) w_{j,k}
            #   + b_{k-1} w_{j,k-1} - b_{j-1} w_{j-1,k}, plus a rounding term of w's sign
            eps1 = noise * anorm
            inv = 1.0 / beta
            bj = b[j - 1]
            t = (a[0] - alpha) * w_cur[0] - bj * w_prev[0] + b[0] * w_cur[1]
            w_next[0] = (t + np.copysign(eps1, t)) * inv
            w_max = abs(w_next[0])
            for k in range(1, j):
                t = (
                    (a[k] - alpha) * w_cur[k]
                    - bj * w_prev[k]
                    + b[k] * w_cur[k + 1]
                    + b[k - 1] * w_cur[k - 1]
                )
                t = (t + np.copysign(eps1, t)) * inv
                w_next[k] = t
                w_max = max(w_max, abs(t))
            if state[1] > 0.0:
                # the step after a reorthogonalisation: the same rows and the newest two
                reorth = True
                sel[j - 1] = True
                sel[j] = True
                state[1] = 0.0
            elif w_max > _OMEGA_MAX:
                for k in range(j + 1):
                    sel[k] = False
                for k in range(j):
                    if abs(w_next[k]) > _OMEGA_MAX and not sel[k]:
                        reorth = True
                        sel[k] = True
                        lo = k - 1
                        while lo >= 0 and not sel[lo] and abs(w_next[lo]) > eta:
                            sel[lo] = True
                            lo -= 1
                        hi = k + 1
                        while hi < j and abs(w_next[hi]) > eta:
                            sel[hi] = True
                            hi += 1
                if reorth:
                    state[1] = 1.0
        if reorth:
            count = 0
            for k in range(j + 1):
                if sel[k]:
                    count += 1
            for _ in range(2):
                before = beta
                _orthogonalise(Q, r, sel, j + 1)
                beta = np.sqrt(_dot(r, r))
                state[3] += count
                if beta > 0.7071067811865476 * before:
                    break
            state[2] += 1
            for k in range(j):
                if sel[k]:
                    w_next[k] = _EPS
        b[j] = beta
        if beta <= _BREAKDOWN * anorm:  # an invariant subspace, to rounding: the caller stops
            return j + 1
        w_next[j] = _EPS * anorm / beta
        w_next[j + 1] = 1.0
        for k in range(j + 2):
            w_prev[k] = w_cur[k]
            w_cur[k] = w_next[k]
        inv = 1.0 / beta
        qn = Q[j + 1]
        for i in range(n):
            qn[i] = r[i] * inv
    return j1


@njit(nogil=True, cache=True)
def _ritz(a, b, m, k, first):
    """Ritz values (ascending) and eigenvectors of T_m = (a[:m], b[:m-1]) for the ascending
    indices first .. first + k - 1, and a status: 0, or _SPLIT if T_m splits (or is not
    finite), or _INVIT if inverse iteration did not converge."""
    d = a[:m].copy()
    e = b[: m - 1].copy()
    e2 = np.empty(m - 1)
    S = np.empty((k, m)).T  # Fortran order, as the inverse iterations write it
    finite, splits, pivmin, tnorm = _tridiag._inspect(d, e, e2)
    if not finite or splits:
        return np.empty(k), S, _SPLIT
    w = _tridiag._bisect_range(d, e2, first, k, pivmin, _EPS * tnorm)
    if k == 1:
        info = _tridiag._inverse_iteration(d, e, w, S)
    else:
        info = _tridiag._inverse_iteration_batched(d, e, w, S)
    return w, S, (0 if info == 0 else _INVIT)


# status codes of _run
_CONVERGED, _NONFINITE, _CLOSED, _SPLIT, _INVIT, _BUDGET, _FULL = 0, 1, 2, 3, 4, 5, 6


@njit(nogil=True, cache=True)
def _run(uptr, uidx, udata, diag, Q, k, tol, cap, state, first, growth):
    """Lanczos steps until the top k Ritz pairs pass the residual test (module docstring,
    step 3). Returns (status, steps m, Ritz values w ascending, vectors S (m, k) of T_m, Q).
    Q (rows + 1, n) holds the start vector in row 0 and grows (doubling, up to cap + 1
    rows) as the steps need. ``state``: see :func:`_lanczos`, then [4] the count of
    convergence checks."""
    n = Q.shape[1]
    a = np.zeros(cap)
    b = np.zeros(cap)
    w_prev = np.zeros(cap + 2)
    w_cur = np.zeros(cap + 2)
    w_cur[0] = 1.0
    w_next = np.zeros(cap + 2)
    sel = np.zeros(cap + 1, dtype=np.bool_)
    j = 0
    target = min(cap, int(first * k) + 10)
    m0, r0 = -1, 0.0  # the previous check's step and bound ratio
    while True:
        if target + 1 > Q.shape[0]:
            grown = np.empty((min(cap, max(target, 2 * (Q.shape[0] - 1))) + 1, n))
            grown[: j + 1] = Q[: j + 1]
            Q = grown
        stepped_to = _lanczos(
            uptr, uidx, udata, diag, Q, a, b, w_prev, w_cur, w_next, sel, j, target, state
        )
        j = stepped_to
        if not np.isfinite(b[j - 1]):
            return _NONFINITE, j, np.empty(k), np.empty((k, j)).T, Q
        if b[j - 1] <= _BREAKDOWN * state[0] and j < n:
            return _CLOSED, j, np.empty(k), np.empty((k, j)).T, Q
        exhausted = j >= cap
        state[4] += 1
        w1, S1, status = _ritz(a, b, j, 1, j - k)  # the k-th largest Ritz pair
        if status != 0:
            return status, j, w1, S1, Q
        ratio = abs(b[j - 1] * S1[j - 1, 0]) / (tol * max(_EPS23, abs(w1[0])))
        if ratio <= 1.0 or exhausted:
            w, S, status = _ritz(a, b, j, k, j - k)
            if status != 0:
                return status, j, w, S, Q
            worst = 0.0  # the largest bound ratio over all k (the k-th is not always last)
            for i in range(k):
                bound = abs(b[j - 1] * S[j - 1, i])
                worst = max(worst, bound / (tol * max(_EPS23, abs(w[i]))))
            if worst <= 1.0:
                return _CONVERGED, j, w, S, Q
            if exhausted:
                # n steps span the whole space, so the Ritz pairs hold the answer even where
                # the bounds, whose beta_m a semi-orthogonal basis leaves above rounding, do
                # not show it: the caller checks their true residuals (as after any
                # convergence), refines, and fails there if they are not good enough
                return (_FULL if j >= n else _BUDGET), j, w, S, Q
            # predict the next check from the laggard's bound (with the k-th's, which had
            # passed, the schedule took more steps than needed;
            # docs/decisions/simplenpkl-fast-paths.md)
            ratio = worst
        step = max(5, j // 10)
        if m0 >= 0 and ratio < r0:
            rate = np.log(r0 / ratio) / (j - m0)  # decrease of log(bound) per step
            step = int(np.ceil(_PREDICT * np.log(ratio) / rate)) + 1
        m0, r0 = j, ratio
        target = min(cap, j + min(max(step, 5), max(5, int(growth * j))))


#: Convergence checks: the first after _FIRST k + 10 steps, then every _GROWTH of the steps
#: so far (fewer, if the bound's decrease predicts convergence sooner). A check costs
#: O(m) (one bisection and one inverse iteration on T_m), a step O(nnz(A) + m n): on small
#: matrices a check costs as much as 5-10 steps and the first comes later. _FIRST[0] for
#: n < _CHECK_SMALL_N, _FIRST[1] above (docs/decisions/simplenpkl-fast-paths.md).
_FIRST = (4, 2)
_GROWTH = 0.2

#: The next check comes after this share of the steps that the bound's decrease so far
#: predicts: Lanczos converges faster than geometrically near the end, and the full
#: prediction overshot (docs/decisions/simplenpkl-fast-paths.md).
_PREDICT = 0.5
_CHECK_SMALL_N = 1000
_FAILURES = {
    _NONFINITE: "non-finite Lanczos coefficient",
    _CLOSED: "invariant subspace of dimension {m} < n={n} (repeated eigenvalues)",
    _SPLIT: "tridiagonal T_m splits",
    _INVIT: "inverse iteration on T_m did not converge",
    _BUDGET: "not converged in {m} steps (row budget {cap})",
}


@njit(nogil=True, cache=True)
def random_start(n, seed, draw):
    """A start vector: n pseudo-random numbers in [-1, 1), fixed by (seed, draw) (splitmix64
    of both as the state of one xorshift64* stream, :func:`_tridiag.xorshift_uniform`). For
    Lanczos any vector with a component along every wanted eigenvector will do, which a
    random one has with probability 1. Compiled, it is far cheaper than numpy's generator
    (a SimpleNPKL fit above 160 points needs one; docs/decisions/simplenpkl-fast-paths.md)."""
    z = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(draw + 1)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    state = z ^ (z >> np.uint64(31))
    if state == np.uint64(0):  # xorshift's one fixed point
        state = np.uint64(0x9E3779B97F4A7C15)
    x = np.empty(n)
    for i in range(n):
        state, x[i] = _tridiag.xorshift_uniform(state)
    return x


def lanczos_top_eigs(A, k: int, v0, tol: float, max_rows: int | None = None):
    """Top-k eigenpairs of the symmetric ``A`` (float64 CSR, or :class:`SymUpper`),
    descending, by Lanczos with partial reorthogonalisation (module docstring), started from
    ``v0`` (None: a seeded random vector).

    Returns ``(sigma (k,), P (n, k), stats, None)``, or ``(None, None, stats, failure)``
    when it could not certify the result (the caller then uses ARPACK). ``stats``: steps,
    reorthogonalised steps, vector orthogonalisations, convergence checks, refinements."""
    n = A.shape[0]
    stats = {"steps": 0, "reorth_steps": 0, "orth_vectors": 0, "checks": 0, "refinements": 0}
    if not 1 <= k < n:
        return None, None, stats, f"k={k} not in 1..n-1={n - 1}"
    if max_rows is None:
        max_rows = max(_MAX_BYTES // (8 * n), 4 * (3 * k // 2 + 1))
    cap = int(min(n, max_rows))
    if cap <= k:
        return None, None, stats, f"row budget {cap} <= k={k}"
    if v0 is None:  # as eigsh: a random start (seeded, for reproducible results)
        v0 = np.random.default_rng(0).standard_normal(n)
    v0 = np.asarray(v0, dtype=np.float64)
    norm0 = float(np.linalg.norm(v0))
    if not np.isfinite(norm0) or norm0 == 0.0:
        return None, None, stats, "start vector zero or not finite"
    if n >= 2**32:
        return None, None, stats, f"n={n} beyond 32-bit indices"
    if isinstance(A, SymUpper):
        upper = tuple(A)
    else:
        upper = _upper_part(A.indptr, A.indices, np.ascontiguousarray(A.data, dtype=np.float64))
    Q = np.empty((min(cap, 4 * k + 10) + 1, n))  # grows in _run (doubling)
    np.multiply(v0, 1.0 / norm0, out=Q[0])
    state = np.zeros(5)
    large = int(n >= _CHECK_SMALL_N)
    status, m, w, S, Q = _run(*upper, Q, k, tol, cap, state, _FIRST[large], _GROWTH)
    stats.update(
        steps=int(m), reorth_steps=int(state[2]), orth_vectors=int(state[3]), checks=int(state[4])
    )
    if status not in (_CONVERGED, _FULL):
        return None, None, stats, _FAILURES[status].format(m=m, n=n, cap=cap)
    ok, theta, Y, AY = _ritz_pairs(Q, S, m, *upper)
    if not ok:
        return None, None, stats, "Ritz vectors not independent"
    limit, residual, excess = _residual_check(Y, AY, theta, tol)
    while not np.all(excess <= 1.0) and stats["refinements"] < _REFINE:  # NaN fails too
        # Rayleigh-Ritz on span(Y, R) (a block Lanczos step from the Ritz vectors)
        stats["refinements"] += 1
        Z, _ = np.linalg.qr(np.hstack([Y, AY - Y * theta]))
        Z = np.ascontiguousarray(Z)
        theta, Y, AY = _rayleigh_ritz(Z, sym_matmat(*upper, Z), k)
        previous = excess.max()
        limit, residual, excess = _residual_check(Y, AY, theta, tol)
        if excess.max() * _REFINE_GAIN > previous:  # no longer converging: the rounding floor
            break
    if not np.all(excess <= 1.0):
        worst = int(np.argmax(np.nan_to_num(excess, nan=np.inf)))
        return (
            None,
            None,
            stats,
            (
                f"residual {residual[worst]:.3g} of Ritz value {theta[worst]:.6g} above "
                f"{limit[worst]:.3g} after Rayleigh-Ritz"
            ),
        )
    return theta[::-1].copy(), np.ascontiguousarray(Y[:, ::-1]), stats, None


def _residual_check(Y, AY, theta, tol):
    """The Ritz pairs' residual limits, true residuals and each residual over its limit
    (``_excess``); the check passes where every excess is <= 1. One compiled call
    (:func:`_residual_check_compiled`, the same values bit for bit): the numpy calls it
    replaces cost a small fit noticeably (docs/decisions/simplenpkl-fast-paths.md)."""
    return _residual_check_compiled(Y, AY, theta, float(tol), _VERIFY, _EPS23)


@njit(nogil=True, cache=True)
def _residual_check_compiled(Y, AY, theta, tol, verify, eps23):
    """:func:`_residual_check` compiled: limit = verify tol max(eps23, |theta|), the
    residual norms, and :func:`_excess` of the two."""
    k = theta.size
    limit = np.empty(k)
    scale = verify * tol
    for c in range(k):
        a = abs(theta[c])
        limit[c] = scale * (a if (a > eps23 or a != a) else eps23)  # np.maximum: NaN wins
    residual = _residual_norms(Y, AY, theta)
    return limit, residual, _excess(residual, limit)


@njit(nogil=True, cache=True)
def _excess(residual, limit):
    """Each residual over its limit (a zero limit: inf for a nonzero residual, else 0; NaN
    stays NaN); the check passes where every ratio is <= 1. Compiled, without a division
    warning (the numpy form, ``np.divide(residual, limit, out=np.where(residual > 0, inf,
    0), where=limit > 0)``, is the tests' reference)."""
    excess = np.empty(residual.size)
    for c in range(residual.size):
        if limit[c] > 0.0:
            excess[c] = residual[c] / limit[c]
        elif residual[c] > 0.0:
            excess[c] = np.inf
        else:
            excess[c] = 0.0
    return excess


@njit(nogil=True, cache=True)
def _ritz_pairs(Q, S, m, uptr, uidx, udata, diag):
    """The Ritz vectors Y = Q_m' S, then Rayleigh-Ritz on their span: Cholesky QR (a
    semi-orthogonal basis leaves Y orthonormal to about sqrt(eps) only), the k x k
    projection of A and its eigenpairs. Returns (ok, theta ascending, Y, AY); ok is False
    if Y'Y is not numerically positive definite. One compiled call: the dozen numpy and
    scipy calls it replaces cost a quarter of a small solve in Python."""
    Y = np.dot(Q[:m].T, S)
    G = np.dot(Y.T, Y)
    k = G.shape[0]
    theta = np.empty(k)
    try:
        C = np.linalg.cholesky(G)
    except Exception:  # noqa: BLE001 (numba raises LinAlgError; it cannot name it here)
        return False, theta, Y, Y
    Y = np.ascontiguousarray(np.dot(Y, np.linalg.inv(C).T))
    theta, Y, AY = _rayleigh_ritz(Y, sym_matmat(uptr, uidx, udata, diag, Y), k)
    return True, theta, Y, AY


@njit(nogil=True, cache=True)
def _residual_norms(Y, AY, theta):
    """||A y_i - theta_i y_i|| for each column i."""
    n, k = Y.shape
    out = np.zeros(k)
    for i in range(n):
        for c in range(k):
            d = AY[i, c] - theta[c] * Y[i, c]
            out[c] += d * d
    return np.sqrt(out)


@njit(nogil=True, cache=True)
def _rayleigh_ritz(Z, AZ, k):
    """The top k Ritz pairs of A on span(Z) (Z orthonormal, AZ = A Z): (theta ascending,
    Y, AY)."""
    H = np.dot(Z.T, AZ)
    theta, U = np.linalg.eigh(0.5 * (H + H.T))
    U = np.ascontiguousarray(U[:, U.shape[1] - k :])
    return theta[theta.size - k :].copy(), np.dot(Z, U), np.dot(AZ, U)
