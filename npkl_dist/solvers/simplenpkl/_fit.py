"""SimpleNPKL (simplenpkl-jmlr2011 §4-5) with the capacity constraint tr(K^2) <= B (p = 2).

Formulation, in this package's conventions (one term per unordered pair, loss weight gamma,
the losses of :func:`npkl_dist.problem._objective.loss_fn`)::

    min_{K psd, ||K||_F^2 <= B}  P(K) = tr(L K) + gamma * sum_{pairs p=(i,j)} loss(t_p K_ij)   (*)

Only the feasible set differs from the NPKL objective: the capacity replaces the free factor
(and the linear loss's row-norm bound). The paper's C is gamma for the linear and hinge
losses and 2 gamma for the squared hinge and square losses.

Kernel step (Prop. 1, p = 2). With ``E_p = (e_i e_j' + e_j e_i') / 2`` and weights ``w``,
``A(w) = sum_p w_p t_p E_p - L``; ``argmin { tr(-A(w) K) : K psd, ||K||_F^2 <= B }`` is
``K = sqrt(B) A_+ / ||A_+||_F`` (0 if A has no positive eigenvalue); with a rank cap r the
top-r positive eigenpairs give the minimiser over rank(K) <= r (von Neumann), so
``V = P_r diag(sqrt(lambda))`` with ``lambda = sqrt(B) sigma_+ / ||sigma_+||``.

* Linear loss: one kernel step with ``w = gamma`` (closed form).
* Squared hinge / square / hinge: the saddle-point problem of §4.3-4.5 with duals alpha,

      J(alpha) = -sqrt(B) ||A(alpha)_+||_F + sum_p alpha_p - sum_p alpha_p^2 / (4 gamma)

  (hinge: no quadratic term, 0 <= alpha <= gamma), maximised from ``alpha_0 = gamma`` by
  L-BFGS-B (``dual='lbfgs'``, default) or by Alg. 1's projected gradient ascent with the
  local Lipschitz step of Lemma 5 / Prop. 6 (``dual='alg1'``, the reference). Where the
  optimum lies inside the capacity ball, or the gap stays open, the kernel is refined in the
  span of the current eigenvectors (§5.4); ``converged`` is the certificate
  ``(P - J) / (|P| + 1) <= sqrt(tol)``.

Rank: ``problem.rank`` eigenpairs (override with ``rank=``); default Pataki's bound (Prop. 4),
capped at ``RANK_CAP``. Eigensolver: ``eigensolver='arpack'`` (eigsh on CSR, the reference)
or ``'fast'`` (dense ``_tridiag`` route up to ``_FAST_DENSE_MAX_N`` points, Lanczos with
partial reorthogonalisation above, positive eigenpairs only between slack checks, one BLAS
thread while the basis is small); the iterates agree with the reference to eigsh's accuracy
(tests/solvers/simplenpkl/test_simplenpkl_fast.py).

Reference: simplenpkl-jmlr2011; docs/algorithms.md, "SimpleNPKL" (the step size, stopping
rules, refinement, eigensolver routes and the paper's typos);
docs/decisions/simplenpkl-fast-paths.md (why L-BFGS-B and these eigensolvers, with figures)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..._errors import ConvergenceWarning, ValidationError, fix, fmt_value
from ...linalg._blas import _OneBlasThread
from ...linalg._csr import (
    gram_square_sums,
    pair_dots,
)
from ...linalg._lanczos import (
    random_start,
)
from ...linalg._lbfgsb import minimize_box
from ...problem._objective import loss_fn
from ...problem._problem import NPKLProblem
from ...problem._result import FitResult
from ...problem._terms import LOSS_CODES, pair_terms_serial, smooth_terms_serial
from ._eigen import (
    _EIGENSOLVERS,
    _ONE_THREAD_MAX_BASIS,
    _SPARSE_LANCZOS,
    EIGENSOLVER,
    _dense_solve,
    _DenseA,
    _fast_dense,
    _SparseA,
    _SymA,
    _top_eigs,
    _top_eigs_positive,
)

#: Default capacity B of tr(K^2) <= B (bcdkl-tnnls2015 §IV: 100, and 100 n on adult).
DEFAULT_B = 100.0

#: Relative slack of the capacity test in :func:`simplenpkl_objective`.
_CAPACITY_RTOL = 1e-5

_MAX_BACKTRACK = 40

#: Fast path: eigenpairs computed beyond the positive count of the previous kernel step
#: (at least; 10% of rank if more).
_POSITIVE_MARGIN = 4

#: Every this many iterations of Alg. 1, test whether the capacity is slack (and refine).
_SLACK_CHECK = 10

#: Dual solver of :func:`fit_simplenpkl` when ``dual=None`` ('lbfgs' or 'alg1').
DUAL = "lbfgs"
_DUALS = ("lbfgs", "alg1")

#: L-BFGS-B memory (pairs of correction vectors) of the dual solver.
_LBFGS_MEMORY = 20


@dataclass(repr=False)  # FitResult's one-line repr
class SimpleNPKLResult(FitResult):
    """FitResult plus the SimpleNPKL quantities.

    Attributes
    ----------
    alpha : ndarray, shape (m,)
        Final dual variables, one per pair in ``problem.constraints`` order (linear loss:
        the constant weight gamma).
    eigenvalues : ndarray, shape (rank,)
        Top ``rank`` eigenvalues of the final A(alpha), descending (some may be <= 0).
    B : float
        Capacity used, ``tr(K^2) <= B``.
    dual_trace : list of float
        J(alpha) after each iteration (non-decreasing; rank-truncated eigenvalues).
    step_trace : list of float
        Accepted step size eta of each iteration of Alg. 1 (empty for ``dual='lbfgs'``).
    n_eigsolves : int
        Number of eigendecompositions (iterations, backtracking trials, dual certificates;
        with ``eigensolver='fast'`` also the final full re-solve after a positive-only step,
        and a positive-only attempt that found too few eigenpairs counts once).
    capacity_slope : float or None
        d/ds P(s K) at s = 1 for the last kernel of Alg. 1 tested (>= 0: capacity slack).
    polished : bool
        The returned kernel comes from the subspace refinement, not from Alg. 1.
    polish_iterations : int
        FISTA iterations of all refinements.
    polish_seconds : float
    duality_gap : float
        ``objective - J(alpha)`` at the end (>= 0 up to rounding and rank truncation);
        ``converged`` means ``duality_gap <= sqrt(tol) * (|objective| + 1)``.
    """

    alpha: np.ndarray | None = None
    eigenvalues: np.ndarray | None = None
    B: float = DEFAULT_B
    dual_trace: list = field(default_factory=list)
    step_trace: list = field(default_factory=list)
    n_eigsolves: int = 0
    capacity_slope: float | None = None
    polished: bool = False
    polish_iterations: int = 0
    polish_seconds: float = 0.0
    duality_gap: float | None = None


def _check_B(B) -> float:
    if (
        isinstance(B, bool)
        or not isinstance(B, (int, float, np.integer, np.floating))
        or not np.isfinite(B)
        or B <= 0
    ):
        raise ValidationError(
            f"B: expected a finite number > 0 (the capacity tr(K^2) <= B), got {fmt_value(B)}; "
            f"the papers use B = 100 (100 n on the adult data sets)"
        )
    return float(B)


def _check_problem(problem):
    if not isinstance(problem, NPKLProblem):
        raise ValidationError(
            f"problem: expected an NPKLProblem, got {type(problem).__name__}; build one with "
            f"NPKLProblem.build(L, constraints, ...)"
        )
    if problem.constraints.diagonal:
        raise ValidationError(
            "constraints: diagonal targets (K_ii = 1) are KL-ADMM's protocol and not part of "
            "the SimpleNPKL formulation; sample constraints with diagonal=False for solver "
            "'simplenpkl'"
        )


def _pair_values(V, c) -> np.ndarray:
    """K_ij = v_i'v_j for every pair, shape (m,) (compiled; the reference is
    ``np.einsum('kr,kr->k', V[c.i], V[c.j])``)."""
    out = np.empty(c.m)
    pair_dots(V, c.i, c.j, out)
    return out


def simplenpkl_objective(problem: NPKLProblem, V, B) -> float:
    """SimpleNPKL objective (*) of K = V V', +inf outside the capacity set.

    Parameters
    ----------
    problem : NPKLProblem
        Supplies L, the pairs, ``loss`` and ``gamma`` (``bound`` is not used).
    V : array-like, shape (n, r)
        Factor in original point order, any r >= 1.
    B : float
        Capacity: the objective is finite only if ``tr(K^2) = ||V'V||_F^2 <= B`` (relative
        slack 1e-5 for rounding).

    Returns
    -------
    float
        ``tr(V'LV) + gamma * sum_pairs loss(t_p v_i'v_j)`` computed in O(nnz(L) r + m r +
        n r^2), or ``inf`` if ``tr(K^2) > B``.
    """
    _check_problem(problem)
    B = _check_B(B)
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or V.shape[0] != problem.n_points or V.shape[1] < 1:
        raise ValidationError(
            f"V: expected shape ({problem.n_points}, r) with r >= 1, got {V.shape}"
        )
    if not np.all(np.isfinite(V)):
        raise ValidationError("V: holds NaN or inf; pass a finite factor")
    G = V.T @ V
    if float(np.sum(G * G)) > B * (1.0 + _CAPACITY_RTOL):
        return float("inf")
    c = problem.constraints
    smooth = float(np.sum(V * (problem.L.astype(np.float64) @ V)))
    z = c.t * _pair_values(V, c)
    return smooth + problem.gamma * float(np.sum(loss_fn(problem.loss)(z)))


def _kernel_step(sigma, P, B):
    """Closed form (14), p = 2, on the top eigenpairs. Returns (V, ||sigma_+||)."""
    sp_ = np.maximum(sigma, 0.0)
    norm = float(np.linalg.norm(sp_))
    if norm == 0.0:
        return np.zeros_like(P), 0.0
    lam = np.sqrt(B) * sp_ / norm
    return P * np.sqrt(lam), norm


def _column_sq_norms(V):
    """Eigenvalues of K = V V' carried by the orthogonal columns of V (squared norms)."""
    return np.einsum("nr,nr->r", V, V)


def _k_change(V_new, V_old) -> float:
    """||V1V1' - V2V2'||_F / ||V1V1'||_F in O(n r^2) (sign/rotation invariant); the Gram
    terms in one compiled pass (:func:`gram_square_sums`)."""
    a, b, cross = gram_square_sums(V_new, V_old)
    diff2 = max(a + b - 2.0 * cross, 0.0)
    denom = np.sqrt(a) if a > 0 else (np.sqrt(b) if b > 0 else 1.0)
    return float(np.sqrt(diff2) / denom)


def _v0_from(P, seed, n):
    """Lanczos's start: the sum of the previous kernel step's eigenvectors (the new ones are
    near them), else a random vector fixed by ``seed`` (:func:`random_start`; draw 1 where
    the sum is zero, so that a first solve and a fallback never share a start)."""
    v0 = P.sum(axis=1) if P is not None else random_start(n, seed, 0)
    if not np.any(v0):
        v0 = random_start(n, seed, 1)
    return v0


def _surrogate(loss: str, mu: float = 0.0):
    """Smooth loss of z used by the refinement: (value, derivative, curvature bound).

    The squared hinge and square losses are themselves smooth (curvature 2); the hinge is
    replaced by its Huber smoothing of width mu (curvature 1/mu, within mu/2 of the hinge).
    """
    if loss == "squared_hinge":
        return (
            lambda z: np.maximum(1.0 - z, 0.0) ** 2,
            lambda z: -2.0 * np.maximum(1.0 - z, 0.0),
            2.0,
        )
    if loss == "square":
        return lambda z: (1.0 - z) ** 2, lambda z: -2.0 * (1.0 - z), 2.0
    if loss == "hinge":

        def value(z):
            u = 1.0 - z
            return np.where(u >= mu, u - 0.5 * mu, np.maximum(u, 0.0) ** 2 / (2.0 * mu))

        return value, lambda z: -np.clip((1.0 - z) / mu, 0.0, 1.0), 1.0 / mu
    raise ValueError(loss)  # pragma: no cover


def _duals_from_kernel(loss: str, z, gamma: float, mu: float):
    """Duals that a kernel with pair values z (= t_p K_p) attains: -gamma * loss'(z)."""
    return -gamma * _surrogate(loss, mu)[1](z)


def _ray_slope(problem, V, LV) -> float:
    """Left derivative of s -> P(s K) at s = 1, K = V V'; >= 0 means the capacity is slack."""
    c = problem.constraints
    z = c.t * _pair_values(V, c)
    if problem.loss == "hinge":
        dz = -(z <= 1.0).astype(np.float64)
    else:
        dz = _surrogate(problem.loss)[1](z)
    return float(np.sum(V * LV)) + problem.gamma * float(np.sum(dz * z))


def _project_psd_ball(S, sqB):
    """Projection on {S psd, ||S||_F <= sqrt(B)}: clip the spectrum, then shrink radially."""
    w, Q = np.linalg.eigh(0.5 * (S + S.T))
    w = np.maximum(w, 0.0)
    nw = float(np.linalg.norm(w))
    if nw > sqB:
        w *= sqB / nw
    return (Q * w) @ Q.T


#: Huber widths of the hinge refinement (continuation, warm-started).
_HINGE_MUS = (1e-1, 1e-2, 1e-3, 1e-4)


def _polish(problem, P, S0, B, L64, *, max_iter=500, tol=1e-7):
    """Subspace refinement (§5.4): min P(P S P') over S psd, ||S||_F^2 <= B.

    Parameters
    ----------
    P : ndarray, shape (n, r)
        Orthonormal basis (the final eigenvectors).
    S0 : ndarray, shape (r, r)
        Start (Alg. 1's kernel in this basis).

    Returns
    -------
    S : ndarray, shape (r, r)
        Best iterate under the true loss.
    value : float
    iterations : int
    mu : float
        Huber width of the last stage (0 for the smooth losses).

    FISTA with function-value restart (monotone) and step 1/Lip, Lip = gamma * curvature * the
    largest eigenvalue of D -> sum_p (p_i'D p_j) sym(p_i p_j') (power iteration), projecting
    on the psd ball in r x r. O(m r^2 + r^3) per iteration.
    """
    c = problem.constraints
    gamma = problem.gamma
    t = c.t.astype(np.float64)
    M = P.T @ (L64 @ P)
    M = 0.5 * (M + M.T)
    Pi, Pj = P[c.i], P[c.j]
    true_loss = loss_fn(problem.loss)
    sqB = np.sqrt(B)

    def pair_z(S):
        return t * np.einsum("kr,kr->k", Pi @ S, Pj)

    def f_true(S):
        return float(np.sum(M * S)) + gamma * float(np.sum(true_loss(pair_z(S))))

    def sym_pairs(w):
        G = Pi.T @ (w[:, None] * Pj)
        return 0.5 * (G + G.T)

    r = P.shape[1]
    # the start is built from P itself (the identity and the pair matrix sum_p t_p
    # sym(p_i p_j')), so that the estimate does not depend on P's basis: the eigensolvers
    # leave the signs of its columns arbitrary, and with a fixed random start the 1e-4
    # stopping tolerance moved FISTA's step with the solver's sign choices
    D = sym_pairs(t)
    nd = float(np.linalg.norm(D))
    D = np.eye(r) + (D / nd if nd > 0.0 else 0.0)
    h = 0.0
    for _ in range(100):  # power iteration on the pair Gram operator (psd)
        nd = float(np.linalg.norm(D))
        if nd == 0.0:
            break
        D = sym_pairs(np.einsum("kr,kr->k", Pi @ (D / nd), Pj))
        new = float(np.linalg.norm(D))
        done = abs(new - h) <= 1e-4 * new
        h = new
        if done:
            break
    h = 1.1 * h + 1e-12  # power iteration approaches from below

    best = _project_psd_ball(S0, sqB)
    f_best = f_true(best)
    total = 0
    mus = _HINGE_MUS if problem.loss == "hinge" else (0.0,)
    x = best.copy()
    for mu in mus:
        value, dvalue, curv = _surrogate(problem.loss, mu)
        lip = gamma * curv * h

        # f and its gradient read S only through the pair values pz = t (P S P')_p, which
        # are linear in S: the momentum point's come from its two parents' (one m x r x r
        # product per iteration instead of two)
        def f(S, pz):
            return float(np.sum(M * S)) + gamma * float(np.sum(value(pz)))

        def grad(pz):
            return M + sym_pairs(gamma * dvalue(pz) * t)

        zx = pair_z(x)
        fx = f(x, zx)
        y, zy, tk = x.copy(), zx, 1.0
        for _ in range(max_iter):
            total += 1
            z = _project_psd_ball(y - grad(zy) / lip, sqB)
            step = float(np.linalg.norm(z - y))
            zz = pair_z(z)
            fz = f(z, zz)
            if fz > fx:  # adaptive restart (O'Donoghue & Candes 2015): drop the momentum
                y, zy, tk = x.copy(), zx, 1.0
                continue
            t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * tk * tk))
            beta = (tk - 1.0) / t_new
            y = z + beta * (z - x)
            zy = zz + beta * (zz - zx)
            x, zx, fx, tk = z, zz, fz, t_new
            if step <= tol * max(float(np.linalg.norm(z)), 1e-300):
                break
        fx_true = f_true(x)
        if fx_true < f_best:
            best, f_best = x.copy(), fx_true
    return best, f_best, total, mus[-1]


def fit_simplenpkl(
    problem: NPKLProblem,
    *,
    B: float | None = None,
    max_iter: int = 200,
    tol: float = 1e-5,
    rank: int | None = None,
    callback=None,
    eigensolver: str | None = None,
    dual: str | None = None,
) -> SimpleNPKLResult:
    """Fit SimpleNPKL: min P(K) over K psd, tr(K^2) <= B (p = 2), K = V V'.

    Parameters
    ----------
    problem : NPKLProblem
        ``loss``: ``'linear'`` in closed form (Prop. 1), the others by the dual (Alg. 1).
        ``bound`` is ignored (B replaces it); diagonal targets are rejected.
    B : float, optional
        Capacity ``tr(K^2) <= B``; default :data:`DEFAULT_B` = 100 (bcdkl §IV; the adult
        experiments used 100 n).
    max_iter : int
        Maximum number of saddle-point iterations (unused for the linear loss).
    tol : float
        Relative change or relative duality gap at which to stop; converged when the gap is
        <= sqrt(tol) at the end.
    rank : int, optional
        Eigenpairs kept per kernel step, 1 <= rank <= n; default ``problem.rank``.
    callback : callable, optional
        ``callback(iteration, objective, change, seconds)`` after each iteration.
    eigensolver : {'fast', 'arpack'}, optional
        ``'arpack'``: eigsh at every kernel step (the reference); ``'fast'`` (default,
        :data:`EIGENSOLVER`): the same iterates up to the eigensolver's accuracy, faster.
    dual : {'lbfgs', 'alg1'}, optional
        The dual's maximiser: L-BFGS-B (default, :data:`DUAL`) or the paper's projected
        gradient ascent (the reference); the same kernel steps and stopping rules.

    Returns
    -------
    SimpleNPKLResult
        ``V`` (n, rank), original order, ``K = V V'`` the lowest-objective kernel seen (zero
        columns where A has fewer than ``rank`` positive eigenvalues); ``objective`` the
        final :func:`simplenpkl_objective`; per-iteration traces (not the refinement).

    Raises ``ValidationError`` on a bad ``problem``, ``B``, ``max_iter``, ``tol``, ``rank``,
    ``callback``, ``eigensolver``, ``dual`` or diagonal targets; warns ``ConvergenceWarning``
    when the duality gap is still above sqrt(tol) relative.

    References: simplenpkl-jmlr2011 §4-5; docs/algorithms.md, "SimpleNPKL".
    """
    t_start = time.perf_counter()
    _check_problem(problem)
    B = DEFAULT_B if B is None else _check_B(B)
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValidationError(f"max_iter: expected a positive integer, got {fmt_value(max_iter)}")
    if (
        isinstance(tol, bool)
        or not isinstance(tol, (int, float, np.integer, np.floating))
        or not np.isfinite(tol)
        or tol < 0
    ):
        raise ValidationError(f"tol: expected a finite number >= 0, got {fmt_value(tol)}")
    n = problem.n_points
    if rank is None:
        rank = problem.rank
    elif isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 1 <= rank <= n:
        raise ValidationError(
            f"rank: expected an integer in [1, {n}] (eigenpairs kept per kernel step), got "
            f"{fmt_value(rank)}"
        )
    rank = int(rank)
    if callback is not None and not callable(callback):
        raise ValidationError(
            f"callback: expected a callable or None, got {type(callback).__name__}"
        )
    if eigensolver is None:
        eigensolver = EIGENSOLVER
    if not isinstance(eigensolver, str) or eigensolver not in _EIGENSOLVERS:
        raise ValidationError(
            f"eigensolver: expected one of {', '.join(map(repr, _EIGENSOLVERS))}, got "
            f"{fmt_value(eigensolver)}"
        )
    if dual is None:
        dual = DUAL
    if not isinstance(dual, str) or dual not in _DUALS:
        raise ValidationError(
            f"dual: expected one of {', '.join(map(repr, _DUALS))}, got {fmt_value(dual)}"
        )
    args = (problem, B, max_iter, tol, rank, callback, eigensolver == "fast", dual, t_start)
    if eigensolver == "arpack" or n * (2 * rank + 1) > _ONE_THREAD_MAX_BASIS:
        return _fit(*args)
    # small n x rank blocks and ARPACK's level-2 steps on a basis that stays in cache: BLAS
    # threads gain little and, on a busy machine, contend
    # (docs/decisions/simplenpkl-fast-paths.md)
    with _OneBlasThread():
        return _fit(*args)


def _fit(problem, B, max_iter, tol, rank, callback, fast, dual, t_start):
    """Body of :func:`fit_simplenpkl` on validated arguments."""
    n = problem.n_points

    loss = problem.loss
    gamma = problem.gamma
    c = problem.constraints
    # the linear loss's one kernel step: A assembled in -L's own array
    if _fast_dense(n, fast):
        Aop = _DenseA(problem, single=loss == "linear")
    elif fast and _SPARSE_LANCZOS:
        Aop = _SymA(problem)  # the upper form Lanczos reads (a CSR only for ARPACK)
    else:
        Aop = _SparseA(problem)
    dense = _dense_solve(n, rank, fast)  # every kernel step's eigensolve is dense
    L64 = problem.L
    if not (isinstance(L64, sp.csr_matrix) and L64.dtype == np.float64):
        L64 = sp.csr_matrix(L64, dtype=np.float64)
    sqB = np.sqrt(B)
    quad = 0.0 if loss in ("hinge", "linear") else 1.0 / (4.0 * gamma)

    def project(a):
        if loss == "squared_hinge":
            return np.maximum(a, 0.0)
        if loss == "hinge":
            return np.clip(a, 0.0, gamma)
        return a

    state = {"complete": True, "n_pos": None}

    def solve(a, P_prev, full=True):
        """Kernel step at a. ``full=False`` (fast path): the positive eigenpairs suffice."""
        A = Aop.set(a)  # a fresh A, the eigensolve may overwrite it
        v0 = None if dense else _v0_from(P_prev, problem.seed, n)  # Lanczos's (or ARPACK's)
        if not fast:
            sigma, P = _top_eigs(A, rank, v0)
            complete = True
        elif full or state["n_pos"] is None:
            sigma, P = _top_eigs(A, rank, v0, fast=True, overwrite=True)
            complete = True
        else:
            k_try = state["n_pos"] + max(_POSITIVE_MARGIN, int(np.ceil(0.1 * rank)))
            sigma, P, complete = _top_eigs_positive(A, rank, v0, k_try, overwrite=True)
        state["n_pos"] = int(np.count_nonzero(sigma > 0.0))
        V, norm = _kernel_step(sigma, P, B)
        J = -float(sqB) * norm
        if loss != "linear":
            J += float(np.sum(a)) - quad * float(a @ a)
        return sigma, P, V, norm, J, complete

    # the objective's compiled terms (as the BCD objective's): tr(V'LV) row by row over L's
    # CSR arrays (its diagonal among them, so the separate diagonal is 0), the pair losses
    no_diag, rows_out, pairs_out = np.zeros(n), np.empty(n), np.empty(c.m)
    loss_code = LOSS_CODES[loss]

    def primal(V):
        smooth_terms_serial(L64.indptr, L64.indices, L64.data, no_diag, V, rows_out)
        pair_terms_serial(c.i, c.j, c.t, V, loss_code, pairs_out)
        return float(np.sum(rows_out)) + gamma * float(np.sum(pairs_out))

    def refine(V, P):
        """Subspace refinement of K = V V' in span(P); (V, objective, duals) or None."""
        S, f_s, its, mu = _polish(
            problem, P, np.diag(_column_sq_norms(V)), B, L64, tol=min(tol, 1e-7)
        )
        res.polish_iterations += its
        if not f_s < primal(V):
            return None
        w, Q = np.linalg.eigh(S)
        order = np.argsort(w)[::-1]
        V = (P @ Q[:, order]) * np.sqrt(np.maximum(w[order], 0.0))
        a_k = project(_duals_from_kernel(loss, c.t * _pair_values(V, c), gamma, mu))
        return V, primal(V), a_k

    def refine_dual(V, P, J):
        """Refine in span(P), keep the lowest refined kernel in ``best``; return (alpha,
        kernel step) of the refinement's duals if they raise J, else None."""
        nonlocal best
        t0 = time.perf_counter()
        better = None
        out_r = refine(V, P)
        if out_r is not None:
            if best is None or out_r[1] < best[1]:
                best = out_r[:2]
            new = solve(out_r[2], P)
            res.n_eigsolves += 1
            if new[4] > J:
                better = out_r[2], new
        res.polish_seconds += time.perf_counter() - t0
        return better

    def certified(J):
        return best is not None and best[1] - J <= np.sqrt(tol) * (abs(best[1]) + 1.0)

    def is_slack(V, norm, obj):
        res.capacity_slope = _ray_slope(problem, V, L64 @ V)
        return norm == 0.0 or res.capacity_slope > -1e-9 * (abs(obj) + 1.0)

    alpha = np.full(c.m, gamma)  # the linear-loss weights: K(alpha_0) is its closed form
    res = SimpleNPKLResult(
        V=np.zeros((n, rank)), objective=0.0, objective_initial=0.0, solver="simplenpkl", B=B
    )
    res.setup_seconds = time.perf_counter() - t_start
    t0 = time.perf_counter()
    sigma, P, V, norm, J, complete = solve(alpha, None)
    res.n_eigsolves = 1
    t1 = time.perf_counter()
    obj = primal(V)
    res.objective_initial = obj
    best = None  # best refined (V, objective)
    # lowest-objective iterate: every kernel step is feasible, but the primal objective of a
    # dual method's iterates need not decrease (L-BFGS-B's early steps can rise above the
    # start), so the fit returns the lowest one seen
    lowest = [V, obj]
    slack = False
    refined_at = -1  # iteration of the last refinement
    it = 0
    if loss == "linear":
        res.objective_trace.append(obj)
        res.change_trace.append(0.0)
        res.sweep_seconds.append(t1 - t0)
        res.objective_seconds.append(time.perf_counter() - t1)
        res.dual_trace.append(J)
        if callback is not None:
            callback(1, obj, 0.0, t1 - t0)
    elif dual == "alg1":
        for it in range(1, max_iter + 1):
            t0 = time.perf_counter()
            g = 1.0 - c.t * _pair_values(V, c) - 2.0 * quad * alpha
            lip = (sqB / (2.0 * norm) if norm > 0 else 0.0) + 2.0 * quad
            if lip > 0:
                eta = 1.0 / lip
            else:  # hinge with A_+ = 0: J is linear here; a step that crosses the box
                eta = gamma / max(float(np.max(np.abs(g), initial=0.0)), 1e-300)
            if res.step_trace:  # after backtracking, do not restart far above the last step
                eta = min(eta, 2.0 * res.step_trace[-1])
            # the slack check (and refinement) at this iteration works in span(P): all of P
            full = it % _SLACK_CHECK == 0
            for _ in range(_MAX_BACKTRACK):
                a_new = project(alpha + eta * g)
                d = a_new - alpha
                out = solve(a_new, P, full)
                res.n_eigsolves += 1
                if out[4] >= J + float(g @ d) - float(d @ d) / (2.0 * eta) - 1e-12 * (abs(J) + 1):
                    break
                eta *= 0.5
            sigma, P, V_new, norm, J, complete = out
            a_norm = float(np.linalg.norm(a_new))
            change = max(
                _k_change(V_new, V), float(np.linalg.norm(d)) / a_norm if a_norm > 0 else 0.0
            )
            alpha, V = a_new, V_new
            t1 = time.perf_counter()
            obj = primal(V)
            t2 = time.perf_counter()
            if obj < lowest[1]:
                lowest[:] = [V, obj]
            res.objective_trace.append(obj)
            res.change_trace.append(change)
            res.sweep_seconds.append(t1 - t0)
            res.objective_seconds.append(t2 - t1)
            res.dual_trace.append(J)
            res.step_trace.append(float(eta))
            if callback is not None:
                callback(it, obj, change, t1 - t0)
            if change < tol or obj - J <= tol * (abs(obj) + 1.0):
                break
            if it % _SLACK_CHECK == 0 and is_slack(V, norm, obj):
                # Alg. 1 stalls on a slack capacity: refine, and stop once certified
                slack = True
                refined_at = it
                better = refine_dual(V, P, J)
                if better is not None:  # a better dual point: continue Alg. 1 from it
                    alpha, (sigma, P, V, norm, J, complete) = better
                if certified(J):
                    break
    else:
        # L-BFGS-B on -J over the loss's box; each evaluation is one kernel step at the trial
        # point (positive eigenpairs only: every evaluation may be followed by a step), each
        # accepted point one iteration with the traces, callback and stopping rules of Alg. 1
        trial = {"a": alpha.copy(), "out": (sigma, P, V, norm, J, complete)}
        acc = {"a": alpha, "out": trial["out"], "it": 0, "J_check": J, "t": time.perf_counter()}

        def kernel_step_at(a):
            """The kernel step at a (that of the last evaluation if a is its point)."""
            if not np.array_equal(a, trial["a"]):
                trial["out"] = solve(a, trial["out"][1], False)
                trial["a"] = a.copy()
                res.n_eigsolves += 1
            return trial["out"]

        def neg_dual(a):
            out = kernel_step_at(a)
            return -out[4], -(1.0 - c.t * _pair_values(out[2], c) - 2.0 * quad * a)

        def record(a):
            """One iteration at the accepted point a: traces, callback, stopping rules."""
            a = np.array(a, dtype=np.float64)
            out = kernel_step_at(a)  # the last point evaluated, but check
            a_norm = float(np.linalg.norm(a))
            change = max(
                _k_change(out[2], acc["out"][2]),
                float(np.linalg.norm(a - acc["a"])) / a_norm if a_norm > 0 else 0.0,
            )
            t1 = time.perf_counter()
            obj_a = primal(out[2])
            t2 = time.perf_counter()
            if obj_a < lowest[1]:
                lowest[:] = [out[2], obj_a]
            acc.update(a=a, out=out, it=acc["it"] + 1)
            res.objective_trace.append(obj_a)
            res.change_trace.append(change)
            res.sweep_seconds.append(t1 - acc["t"])
            res.objective_seconds.append(t2 - t1)
            res.dual_trace.append(out[4])
            if callback is not None:
                callback(acc["it"], obj_a, change, t1 - acc["t"])
            acc["t"] = time.perf_counter()
            if change < tol or obj_a - out[4] <= tol * (abs(obj_a) + 1.0):
                acc["stop"] = "done"
            elif acc["it"] % _SLACK_CHECK == 0:
                if is_slack(out[2], out[3], obj_a):
                    acc["stop"] = "slack"
                elif out[4] - acc["J_check"] <= tol * (abs(obj_a) + 1.0):
                    # J has stopped rising while the kernel steps do not close the gap
                    # (degenerate eigenvalues at the rank cap): the refinement's case
                    acc["stop"] = "stalled"
                acc["J_check"] = out[4]
            if acc["stop"] or acc["it"] >= max_iter:
                raise StopIteration

        # the loss's box (L-BFGS-B through scipy's compiled routine without minimize's
        # per-call set-up; the same iterates: _lbfgsb; docs/decisions/simplenpkl-fast-paths.md)
        lower = np.full(c.m, -np.inf if loss == "square" else 0.0)
        upper = np.full(c.m, gamma if loss == "hinge" else np.inf)
        while True:
            acc["stop"] = None
            minimize_box(
                neg_dual,
                acc["a"],
                lower,
                upper,
                callback=record,
                maxiter=max_iter - acc["it"],
                maxfun=2 * (max_iter - acc["it"]) + 10,
                maxcor=_LBFGS_MEMORY,
            )
            if acc["it"] == 0:
                # L-BFGS-B stopped before a step (the start satisfies the bounds' KKT
                # conditions): record the start as the one iteration
                try:
                    record(acc["a"])
                except StopIteration:
                    pass
            if acc["stop"] != "slack":
                break
            # as in Alg. 1: the capacity is slack, refine in span(P) (all rank eigenpairs),
            # stop once certified, else go on from the refinement's duals if they are better
            slack = True
            refined_at = acc["it"]
            if not acc["out"][5]:
                acc["out"] = solve(acc["a"], acc["out"][1])
                res.n_eigsolves += 1
            better = refine_dual(acc["out"][2], acc["out"][1], acc["out"][4])
            if better is not None:
                acc.update(a=better[0], out=better[1])
            trial.update(a=acc["a"].copy(), out=acc["out"])
            acc["t"] = time.perf_counter()
            if certified(acc["out"][4]) or acc["it"] >= max_iter:
                break
        it, alpha = acc["it"], acc["a"]
        sigma, P, V, norm, J, complete = acc["out"]
    if not complete:
        # the last kernel step kept only the positive eigenpairs: the refinement works in
        # span(P) and the result reports all rank eigenvalues, so solve it in full (the
        # kernel step, V and J are those of the partial solve up to eigsh's accuracy)
        sigma, P, V, norm, J, complete = solve(alpha, P)
        res.n_eigsolves += 1
    if loss != "linear":  # the linear loss's V is its one kernel step, obj its objective
        obj = primal(V)
    scale = abs(obj) + 1.0
    if loss != "linear":
        if not slack:
            slack = is_slack(V, norm, obj)
        if refined_at != it and (slack or obj - J > tol * scale):
            better = refine_dual(V, P, J)
            if better is not None:
                alpha, sigma, J = better[0], better[1][0], better[1][4]
    if lowest[1] < obj and (best is None or lowest[1] < best[1]):
        V, obj = lowest  # an earlier iterate of the dual method
    elif best is not None and best[1] < obj:
        V, obj = best
        res.polished = True
    res.objective = obj
    scale = abs(obj) + 1.0
    res.duality_gap = float(obj - J)
    res.converged = bool(res.duality_gap <= np.sqrt(tol) * scale)
    if not res.converged:
        hint = (
            "the capacity tr(K^2) <= B is slack at the solution, where Alg. 1 (whose "
            f"kernels all have tr(K^2) = B) stalls; lower "
            f"{fix('B', '--capacity', '[model] capacity')} or raise "
            f"{fix('max_iter', '--max-sweeps', '[model] max_sweeps')}"
            if slack
            else f"raise {fix('max_iter', '--max-sweeps', '[model] max_sweeps')}"
        )
        warnings.warn(
            f"simplenpkl: relative duality gap {res.duality_gap / scale:.3g} > sqrt(tol)="
            f"{np.sqrt(tol):.3g} after {res.n_sweeps} iteration(s) (B={B:g}); {hint}",
            ConvergenceWarning,
            stacklevel=3,
        )
    res.V = V.astype(problem.dtype)
    res.alpha = alpha
    res.eigenvalues = sigma
    res.fit_seconds = time.perf_counter() - t_start
    return res
