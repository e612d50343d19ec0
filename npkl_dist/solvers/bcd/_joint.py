"""Joint moves for the hinge loss: leaving coordinatewise minima that are not stationary.

With the hinge loss f(V) = tr(V'LV) + gamma sum_p max(0, 1 - t_p v_i'v_j) is nonsmooth where
a pair sits on its kink (t_p v_i'v_j = 1). Exact row updates can then stop at a point where
every row is optimal with the others fixed, yet f decreases when two rows move together: row i
and row j each choose their own multiplier in [0, 1] for the shared pair p, while
stationarity needs one multiplier per pair (tests/solvers/bcd/test_reference.py;
docs/decisions/hinge-stopping.md).

The joint move takes the whole subdifferential at once. With W = diag(1 / (2 L_ii)) (the
metric of the KKT residual in ``npkl_dist.solvers._kkt``), the gradient of the smooth part plus the
pairs strictly inside the margin, G, and one column a_p = -gamma t_p (e_i v_j' + e_j v_i') per
kink pair, it solves the box-constrained least-squares problem

    alpha* = argmin_{alpha in [0, 1]^K} || W (G + sum_p alpha_p a_p) ||_F ,

a small bounded least-squares problem. It is solved through its K x K Gram matrix
Q = A'A (sparse: two kink pairs interact only through a shared point; on the adult benchmarks
it is well conditioned) as the box QP min 1/2 a'Qa - c'a, c = A'b, by accelerated projected
gradient followed by a solve on the identified free set (sparse LU when small, CG when
large), accepted only after a KKT check (``_box_qp``); where that check fails, scipy
``lsq_linear`` on A itself (the previous path, kept as ``_box_lsq_reference``) decides. g* = G + sum alpha*_p a_p is
the subgradient of least W-norm, so ||W g*|| / ||V|| is the joint (honest) KKT residual, and
D = -W^2 g* is a descent direction: the directional derivative of f along D is
max_{g in subdifferential} <g, D> <= -||W g*||^2 < 0 (the min-norm point's variational
inequality). An exact line search along D (``_blocksolve.line_search``: the smooth part is
quadratic in the step and each pair's margin is a quadratic) then gives the move. Row sweeps
resume from there. Alternating the two converges to the SDP optimum on the instances where
sweeps alone stall (tests/solvers/bcd/test_joint.py).

The kink set is taken at a ladder of tolerances (``KINK_LADDER``): with pairs within eps of
their kink counted as on it, g* is the least-norm element of an epsilon-subdifferential, and
its direction stays a descent direction past the pairs that sit a little off their kinks.
Each candidate gets its exact line search and the move is the best; the reported residual
is always the exact one (``KINK_RTOL``). Why the ladder: docs/decisions/hinge-stopping.md.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numba import njit, prange
from scipy.optimize import lsq_linear

from ..block._kernels import _csr_mm
from ..block._search import line_search

__all__ = ["JointMove", "hinge_joint_move", "joint_kkt", "KINK_RTOL", "KINK_LADDER"]

#: A pair with |z - 1| <= KINK_RTOL * max(1, |z|) is on the kink: its multiplier is free.
KINK_RTOL = 1e-6

#: Kink tolerances of the joint move's candidate directions (``hinge_joint_move``): with
#: KINK_RTOL alone, pairs a little off their kink stop the line search early
#: (docs/decisions/hinge-stopping.md).
KINK_LADDER = (KINK_RTOL, 1e-3, 1e-1)

#: Kink pairs up to which the bounded least squares runs dense (BVLS, exact active set).
_DENSE_MAX = 400

#: Iteration cap of the accelerated projected gradient of ``_box_qp``.
_BOX_QP_MAX_ITER = 5000

#: Free sets up to which ``_box_qp`` solves Q_FF exactly by sparse LU; larger ones by
#: Jacobi-preconditioned CG from the projected-gradient point: kink pairs couple like a random
#: graph, so LU fill explodes, and Q_FF is well conditioned (docs/decisions/hinge-stopping.md).
_DIRECT_MAX = 5000


@dataclass
class JointMove:
    """A joint move from V (internal order).

    Attributes
    ----------
    direction : (n, r) float64 array
        D = -W^2 g*, the descent direction of the whole subdifferential.
    kkt : float
        ||W g*||_F / ||V||_F, the KKT residual with one multiplier per pair.
    step : float
        Exact line-search step along ``direction`` (0 when f does not decrease).
    decrease : float
        f(V + step D) - f(V) <= 0, evaluated in float64.
    n_kink : int
        Pairs taken as on the kink for ``direction``.
    kink_rtol : float
        The kink tolerance of ``direction`` (a step of :data:`KINK_LADDER`).
    """

    direction: np.ndarray
    kkt: float
    step: float
    decrease: float
    n_kink: int
    kink_rtol: float = KINK_RTOL

    def apply(self, V: np.ndarray) -> np.ndarray:
        """V + step D in V's dtype."""
        return (V.astype(np.float64) + self.step * self.direction).astype(V.dtype, copy=False)


def _L_times(prep, X):
    """L X in float64 (rows in parallel threads)."""

    out = prep.diag.astype(np.float64)[:, None] * X
    _csr_mm(prep.indptr, prep.indices, prep.data, X, out, True)
    return out


def _box_lsq_reference(A, b):
    """argmin_{alpha in [0,1]^K} ||A alpha - b|| by scipy ``lsq_linear`` on A (dense BVLS up to
    ``_DENSE_MAX`` columns, else the trust-region reflective method). Slow on the adult
    benchmarks (seconds per call at K ~ 1000); the reference and fallback of ``_box_qp``."""

    if A.shape[1] <= _DENSE_MAX:
        sol = lsq_linear(A.toarray(), b, bounds=(0.0, 1.0), method="bvls", tol=1e-14)
    else:
        sol = lsq_linear(
            A, b, bounds=(0.0, 1.0), method="trf", lsmr_tol="auto", tol=1e-12, max_iter=200
        )
    return np.clip(sol.x, 0.0, 1.0)


def _box_qp(Q, c, *, tol=1e-13, max_iter=_BOX_QP_MAX_ITER):
    """argmin_{alpha in [0,1]^K} 1/2 alpha'Q alpha - c'alpha for sparse PSD Q; None when not
    certified (then the caller falls back to ``_box_lsq_reference``).

    Accelerated projected gradient (step 1/Lip with Lip the largest absolute row sum of Q,
    restarted whenever the momentum goes uphill) until the projected-gradient residual is
    below ``tol`` (relative to ||c||_inf); then the free set F = {0 < alpha < 1} is solved
    exactly, Q_FF alpha_F = c_F - Q_FU 1 (sparse LU), and that point is returned if it is
    feasible and satisfies the KKT sign conditions on the bounds (the exact optimum, to
    rounding). Otherwise the converged iterate is returned; None if it did not converge.
    """

    Q = sp.csr_matrix(Q)
    m = c.size
    d = Q.diagonal()
    lip = float(abs(Q).sum(axis=1).max()) if m else 0.0
    scale = max(float(np.abs(c).max()) if m else 0.0, 1e-300)
    if m == 0 or lip == 0.0:
        return np.zeros(m)
    if np.any(d <= 0):  # an all-zero column (no effect on g*): fix its multiplier at 0
        live = d > 0
        out = np.zeros(m)
        sub = _box_qp(Q[live][:, live], c[live], tol=tol, max_iter=max_iter)
        if sub is None:
            return None
        out[live] = sub
        return out
    a = np.clip(c / d, 0.0, 1.0)
    if not _apg_box(
        Q.indptr.astype(np.int64),
        Q.indices.astype(np.int64),
        Q.data,
        np.asarray(c, dtype=np.float64),
        lip,
        tol * scale,
        int(max_iter),
        a,
    ):
        return None
    lo, hi = a <= 0.0, a >= 1.0
    free = ~(lo | hi)
    ap = np.zeros(m)
    ap[hi] = 1.0
    if free.any():
        QF = Q[free]
        rhs = c[free] - QF[:, hi] @ np.ones(int(hi.sum()))
        QFF = QF[:, free]
        if QFF.shape[0] <= _DIRECT_MAX:
            with warnings.catch_warnings():  # singular Q_FF: non-finite values, refused below
                warnings.simplefilter("ignore", spla.MatrixRankWarning)
                sol = spla.spsolve(QFF.tocsc(), rhs)
        else:
            dF = QFF.diagonal()
            M = spla.LinearOperator(QFF.shape, matvec=lambda x: x / dF, dtype=np.float64)
            sol, _ = spla.cg(QFF, rhs, x0=a[free], rtol=0.0, atol=1e-13 * scale, maxiter=500, M=M)
        ap[free] = np.atleast_1d(sol)
    g = Q @ ap - c
    ktol = 1e-12 * scale
    if (
        np.all(np.isfinite(ap))
        and ap.min() >= 0.0
        and ap.max() <= 1.0
        and np.all(g[lo] >= -ktol)
        and np.all(g[hi] <= ktol)
        and (not free.any() or np.abs(g[free]).max() <= ktol)
    ):
        return ap
    return a


@njit(nogil=True, cache=True)
def _apg_box(indptr, indices, data, c, lip, atol, max_iter, a):
    """The accelerated projected gradient of :func:`_box_qp` on Q (CSR) from ``a``:
    step 1 / lip, restarted when the momentum goes uphill, the projected-gradient residual
    (times lip) tested every 10th iteration against ``atol``. a : IN the start, OUT the
    last iterate. Returns whether the test passed. (One compiled loop: the numpy form's
    per-call overhead dominated small fits; docs/decisions/hinge-stopping.md.)"""
    m = c.shape[0]
    y = a.copy()
    g = np.empty(m)
    an = np.empty(m)
    tk = 1.0
    for it in range(max_iter):
        for i in range(m):
            acc = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                acc += data[p] * y[indices[p]]
            g[i] = acc - c[i]
            an[i] = min(max(y[i] - g[i] / lip, 0.0), 1.0)
        if it % 10 == 0:
            res = 0.0
            for i in range(m):
                acc = 0.0
                for p in range(indptr[i], indptr[i + 1]):
                    acc += data[p] * an[indices[p]]
                ga = acc - c[i]
                res = max(res, abs(an[i] - min(max(an[i] - ga / lip, 0.0), 1.0)))
            if res * lip <= atol:
                a[:] = an
                return True
        tn = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * tk * tk))
        up = 0.0
        for i in range(m):
            up += g[i] * (an[i] - a[i])
        if up > 0:  # momentum uphill: restart
            tn = 1.0
            y[:] = an
        else:
            w = (tk - 1.0) / tn
            for i in range(m):
                y[i] = an[i] + w * (an[i] - a[i])
        a[:] = an
        tk = tn
    return False


def _box_qp_reference_loop(Q, c, a, lip, atol, max_iter):
    """The numpy form of :func:`_apg_box` (the same iteration), kept as its reference."""
    y = a.copy()
    tk = 1.0
    for it in range(max_iter):
        g = Q @ y - c
        an = np.clip(y - g / lip, 0.0, 1.0)
        if it % 10 == 0:
            ga = Q @ an - c
            if np.abs(an - np.clip(an - ga / lip, 0.0, 1.0)).max() * lip <= atol:
                return an, True
        tn = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * tk * tk))
        if np.vdot(g, an - a) > 0:  # momentum uphill: restart
            tn = 1.0
            y = an.copy()
        else:
            y = an + ((tk - 1.0) / tn) * (an - a)
        a, tk = an, tn
    return a, False


def _min_norm_multipliers(Q, c, lsq_problem):
    """argmin_{alpha in [0,1]^K} ||A alpha - b|| given Q = A'A and c = A'b: ``_box_qp``,
    else the reference ``_box_lsq_reference`` on the (A, b) that ``lsq_problem()`` builds."""
    alpha = _box_qp(Q, c)
    if alpha is None:
        alpha = _box_lsq_reference(*lsq_problem())
    return alpha


@njit(nogil=True, cache=True)
def _scatter_pairs(G, pi, pj, coef, V):
    """G[pi_k] -= coef_k V[pj_k] for every k, then G[pj_k] -= coef_k V[pi_k]: the pairs'
    subgradient terms, in numpy ``add.at``'s order (the i rows first), so the sums are
    those of ``np.add.at(G, pi, -coef V[pj]); np.add.at(G, pj, -coef V[pi])``."""
    r = V.shape[1]
    for k in range(pi.shape[0]):
        a, b, t = pi[k], pj[k], coef[k]
        for c in range(r):
            G[a, c] += -t * V[b, c]
    for k in range(pi.shape[0]):
        a, b, t = pi[k], pj[k], coef[k]
        for c in range(r):
            G[b, c] += -t * V[a, c]


@njit(nogil=True, cache=True, parallel=True)
def _kink_gram_entries(bounds, pair, other, ends, V, w2, coef, start, rows, cols, vals):
    """Q's entries point by point: at point s = ends[e], for kink pairs p, q through s
    (``bounds[e]:bounds[e+1]`` of ``pair``/``other``, ``other`` = the pair's other point),
    w_s^2 coef_p coef_q <v_other(p), v_other(q)>, written from ``start[e]`` on (COO; pairs
    sharing both points get one entry per point, summed when the matrix is formed)."""
    r = V.shape[1]
    for e in prange(ends.shape[0]):
        s = ends[e]
        lo, hi = bounds[e], bounds[e + 1]
        pos = start[e]
        for x in range(lo, hi):
            p, op = pair[x], other[x]
            for y in range(lo, hi):
                q, oq = pair[y], other[y]
                d = 0.0
                for c in range(r):
                    d += V[op, c] * V[oq, c]
                rows[pos] = p
                cols[pos] = q
                vals[pos] = w2[s] * coef[p] * coef[q] * d
                pos += 1


@njit(nogil=True, cache=True, parallel=True)
def _kink_rhs(ki, kj, V, G, w2, coef, out):
    """c_p = -coef_p (w_i^2 <v_j, G_i> + w_j^2 <v_i, G_j>) for kink pair p = (i, j)."""
    r = V.shape[1]
    for p in prange(ki.shape[0]):
        i, j = ki[p], kj[p]
        a = 0.0
        b = 0.0
        for c in range(r):
            a += V[j, c] * G[i, c]
            b += V[i, c] * G[j, c]
        out[p] = -coef[p] * (w2[i] * a + w2[j] * b)


def _kink_matrix(V, G, w, ki, kj, coef):
    """The bounded least-squares problem of the joint move in its original form: A (one
    column a_q = W (coef_q (e_i v_j' + e_j v_i')) per kink pair, restricted to the rows the
    kink pairs touch, flattened row-major) and b = -W G on those rows. The reference of
    :func:`_kink_gram` (Q = A'A, c = A'b) and the input of the fallback
    ``_box_lsq_reference``."""
    r = V.shape[1]
    K = ki.size
    rows = np.unique(np.concatenate([ki, kj]))
    pos = np.searchsorted(rows, np.concatenate([ki, kj]))
    vals = np.concatenate(
        [coef[:, None] * V[kj] * w[ki][:, None], coef[:, None] * V[ki] * w[kj][:, None]]
    )
    ridx = (pos[:, None] * r + np.arange(r)[None, :]).ravel()
    cidx = np.repeat(np.concatenate([np.arange(K), np.arange(K)]), r)
    A = sp.csr_matrix((vals.ravel(), (ridx, cidx)), shape=(rows.size * r, K))
    b = -(w[rows][:, None] * G[rows]).ravel()
    return A, b


def _kink_gram(V, G, w, ki, kj, coef):
    """Q = A'A (CSR) and c = A'b of :func:`_kink_matrix` without forming A: two kink pairs
    interact only at a shared point s, through w_s^2 coef_p coef_q <v_other(p), v_other(q)>
    (at 1e6 points, the papers' protocol, A has 28M entries for 879k kink pairs, and
    building it and A'A took most of a joint move)."""
    K = ki.size
    pts = np.concatenate([ki, kj])
    order = np.argsort(pts, kind="stable")
    pair = np.concatenate([np.arange(K), np.arange(K)])[order]
    other = np.concatenate([kj, ki])[order]
    ends, counts = np.unique(pts[order], return_counts=True)
    counts = counts.astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    start = np.concatenate([[0], np.cumsum(counts * counts)])
    m = int(start[-1])
    rows = np.empty(m, dtype=np.int64)
    cols = np.empty(m, dtype=np.int64)
    vals = np.empty(m)
    w2 = w * w
    _kink_gram_entries(
        bounds,
        pair.astype(np.int64),
        other.astype(np.int64),
        ends.astype(np.int64),
        V,
        w2,
        coef,
        start,
        rows,
        cols,
        vals,
    )
    Q = sp.csr_matrix((vals, (rows, cols)), shape=(K, K))
    c = np.empty(K)
    _kink_rhs(ki.astype(np.int64), kj.astype(np.int64), V, G, w2, coef, c)
    return Q, c


def _kink_mask(z, kink_rtol):
    """The pairs with |z - 1| <= kink_rtol * max(1, |z|): on their kink (free multipliers)."""
    return np.abs(z - 1.0) <= kink_rtol * np.maximum(1.0, np.abs(z))


def _pair_state(prep, V):
    """(LV, z) at V (float64): the products every joint move and residual start from."""
    t = prep.pt.astype(np.float64)
    return _L_times(prep, V), t * np.einsum("ij,ij->i", V[prep.pi], V[prep.pj])


def _subgradient(prep, V, kink_rtol, state=None, kink=None):
    """(LV, z, kink mask, min-W-norm subgradient g*, W) of the hinge objective at V (float64)
    with the pairs within ``kink_rtol`` of their kink taken as on it (free multipliers).
    ``state``: (LV, z) of V from :func:`_pair_state`, ``kink``: :func:`_kink_mask` of z, if
    already computed."""
    gamma = float(prep.gamma)
    pi, pj = prep.pi, prep.pj
    t = prep.pt.astype(np.float64)
    LV, z = _pair_state(prep, V) if state is None else state
    G = 2.0 * LV
    kink = _kink_mask(z, kink_rtol) if kink is None else kink
    inside = (z < 1.0) & ~kink
    w = 1.0 / (2.0 * prep.diag.astype(np.float64))
    if inside.any():
        _scatter_pairs(G, pi[inside], pj[inside], gamma * t[inside], V)
    K = np.flatnonzero(kink)
    if K.size:
        ki, kj = pi[K], pj[K]
        coef = -gamma * t[K]
        Q, c = _kink_gram(V, G, w, ki, kj, coef)
        alpha = _min_norm_multipliers(Q, c, lambda: _kink_matrix(V, G, w, ki, kj, coef))
        _scatter_pairs(G, ki, kj, gamma * t[K] * alpha, V)
    return LV, z, kink, G, w


def joint_kkt(prep, V, kink_rtol: float = KINK_RTOL) -> float:
    """||W g*||_F / ||V||_F for the hinge loss: the KKT residual with one multiplier per pair
    (the per-row residual of ``npkl_dist.solvers._kkt`` lets the two rows of a kink pair disagree)."""
    V = np.asarray(V, dtype=np.float64)
    _, _, _, G, w = _subgradient(prep, V, kink_rtol)
    vn = float(np.linalg.norm(V))
    res = float(np.linalg.norm(w[:, None] * G))
    return res / vn if vn > 0 else res


def hinge_joint_move(
    prep, V, kink_rtol: float = KINK_RTOL, ladder: tuple | None = None
) -> JointMove:
    """The joint move from V (internal order of ``prep``; hinge loss). See the module doc.

    ``ladder``: the kink tolerances whose directions are tried (default
    :data:`KINK_LADDER`; those below ``kink_rtol`` are skipped, ``kink_rtol`` itself always
    tried). Each gives the least-norm subgradient with the pairs within it of their kink
    taken as on it (an epsilon-subdifferential), and its exact line search; the move is the
    one that lowers f the most. ``kkt`` is always that of ``kink_rtol``. A kink tolerance
    that adds no pair repeats the previous direction and is skipped.
    """
    if prep.loss_code != 0:
        raise ValueError("hinge_joint_move: the problem's loss is not the hinge")
    V = np.asarray(V, dtype=np.float64)
    ladder = KINK_LADDER if ladder is None else ladder
    tols = [kink_rtol] + sorted(float(e) for e in ladder if float(e) > kink_rtol)
    state = _pair_state(prep, V)
    vn = float(np.linalg.norm(V))
    best = None
    n_kink = -1
    for e in tols:
        kink = _kink_mask(state[1], e)
        count = int(np.count_nonzero(kink))
        if best is not None and count == n_kink:
            continue  # the same pairs on the kink (the sets are nested): the same direction
        n_kink = count
        LV, z, kink, G, w = _subgradient(prep, V, e, state, kink)
        WG = w[:, None] * G
        res = float(np.linalg.norm(WG))
        D = -(w[:, None] * WG)
        if best is None:
            kkt = res / vn if vn > 0 else res
            if res == 0.0:  # stationary: no move
                return JointMove(D, kkt, 0.0, 0.0, n_kink)
        elif res == 0.0:
            continue
        s, dec = _exact_step(prep, V, LV, z, D)
        if best is None or dec < best.decrease:
            best = JointMove(D, kkt, s, dec, n_kink, e)
    return best


def _exact_step(prep, V, LV, z, D):
    """(s, f(V + s D) - f(V)) of the exact line search along D."""

    pi, pj = prep.pi, prep.pj
    t = prep.pt.astype(np.float64)
    a = float(np.vdot(LV, D))
    b = float(np.vdot(D, _L_times(prep, D)))
    c1 = t * (np.einsum("ij,ij->i", V[pi], D[pj]) + np.einsum("ij,ij->i", D[pi], V[pj]))
    c2 = t * np.einsum("ij,ij->i", D[pi], D[pj])
    s, dec = line_search(a, b, z, c1, c2, float(prep.gamma), 0)
    return float(s), float(dec)
