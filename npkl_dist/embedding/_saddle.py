"""The saddle-point iteration of simplenpkl-jmlr2011 §4.3 for the embeddings of §6.

Every §6 method is, in this package's form (docs/algorithms.md, "Embeddings")::

    min_K  -tr(A0 K) + penalty(c(K))   s.t.  K psd,  K 1 = 0,  ||K||_F^2 <= B        (E)

with A0 symmetric and ``A0 1 = 0`` (HYH, H K0 H, HWH), and ``c`` linear in the squared
distances ``d_pq(K) = K_pp + K_qq - 2 K_pq = tr(T_pq K)``, ``T_pq = (e_p - e_q)(e_p - e_q)'``.
Every ``T_pq`` annihilates 1, so with duals alpha the kernel sees

    A(alpha) = A0 + Lap(omega(alpha)),   Lap(omega) = sum_pq omega_pq T_pq            (A)

(the Laplacian of pair weights omega, linear in alpha; ``A(alpha) 1 = 0``), and the kernel
step (Prop. 1, p = 2, restricted to the centred subspace, where ``A 1 = 0`` makes it the plain
one) is ``K(alpha) = sqrt(B) A_+ / ||A_+||_F`` with ``min_K tr(-A K) = -sqrt(B) ||A_+||_F``:
simplenpkl's ``_kernel_step``. The eigenvector ``1/sqrt(n)`` has eigenvalue 0, so K is
centred. The dual ``J(alpha) = -sqrt(B) ||A(alpha)_+||_F + lin(alpha)`` is concave; its
gradient, with K = K(alpha) (Lemma 3), is method-specific (:mod:`._distance`, :mod:`._spe`).

This module holds what the methods share: centring, the dense kernel step on the full
spectrum (exact; the issue's small-graph path), the pair Laplacian, pair distances, the dual
maximisers (L-BFGS-B over free duals as SimpleNPKL's square loss; Alg. 1's projected ascent,
accelerated, over SPE's capped simplex), the result type, and argument checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .._errors import ValidationError, fmt_value
from ..solvers.simplenpkl._eigen import _dense_top_eigs
from ..solvers.simplenpkl._fit import _kernel_step


@dataclass(repr=False)
class EmbeddingResult:
    """Outcome of a §6 embedding.

    Attributes
    ----------
    embedding : ndarray, shape (n, dim)
        Coordinates: the top ``dim`` eigenvectors of K scaled by the square roots of their
        eigenvalues (rows are points; ``embedding @ embedding.T`` is K's best rank-dim part).
    kernel : ndarray, shape (n, n)
        The learned kernel K (psd, centred, ``||K||_F^2 <= B``).
    eigenvalues : ndarray, shape (n,)
        Eigenvalues of K, descending.
    objective : float
        Primal objective (E) of ``kernel`` (MVE: of its last inner problem).
    dual_objective : float
        J(alpha) at the returned duals; ``objective - dual_objective`` is the duality gap.
    alpha : ndarray
        Dual variables (one per pair; SPE: one per triplet in ``triplets`` order).
    iterations : int
        Dual iterations (MVE: summed over the outer iterations).
    converged : bool
        Relative duality gap ``(objective - dual_objective) / (|objective| + 1) <= sqrt(tol)``
        (MVE: for every inner problem, and the outer iteration stopped on ``outer_tol``).
    capacity_slack : bool
        The optimum lies inside the ball ``||K||_F^2 <= B``; the kernel then comes from the
        primal refinement (the dual has a kink at its maximiser there).
    method : str
    B, C : float
    dual_trace : list of float
        J after each dual iteration (MVE: of the last inner problem).
    outer_trace : list of float
        MVE: the MVE objective ``sum_{i<=d} lambda_i - sum_{i>d} lambda_i - penalty`` after each
        outer iteration (non-decreasing); empty for the other methods.
    fit_seconds : float
    """

    embedding: np.ndarray
    kernel: np.ndarray
    eigenvalues: np.ndarray
    objective: float
    dual_objective: float
    alpha: np.ndarray
    iterations: int
    converged: bool
    capacity_slack: bool
    method: str
    B: float
    C: float
    dual_trace: list = field(default_factory=list)
    outer_trace: list = field(default_factory=list)
    fit_seconds: float = 0.0

    @property
    def duality_gap(self) -> float:
        return float(self.objective - self.dual_objective)

    def __repr__(self) -> str:
        n, d = self.embedding.shape
        return (
            f"EmbeddingResult(method={self.method!r}, n={n}, dim={d}, "
            f"objective={self.objective:.6g}, gap={self.duality_gap:.3g}, "
            f"iterations={self.iterations}, converged={self.converged})"
        )


# ------------------------------------------------------------------------- linear algebra


def centre(M: np.ndarray) -> np.ndarray:
    """H M H with H = I - 11'/n, for symmetric M (no n x n H formed)."""
    M = M - M.mean(axis=0, keepdims=True)
    M -= M.mean(axis=1, keepdims=True)
    return 0.5 * (M + M.T)


def pair_laplacian(n: int, p, q, omega) -> np.ndarray:
    """Lap(omega) = sum_k omega_k T_{p_k q_k}, dense (n, n): the Laplacian of the pair
    weights (pairs may repeat; their weights add)."""
    flat = np.bincount(p * n + q, weights=omega, minlength=n * n).reshape(n, n)
    W = flat + flat.T
    out = -W
    out[np.diag_indices(n)] += W.sum(axis=1)
    return out


def pair_distances(K: np.ndarray, p, q) -> np.ndarray:
    """d_k = K_pp + K_qq - 2 K_pq = tr(T_{p_k q_k} K) for each pair."""
    dg = np.diag(K)
    return dg[p] + dg[q] - 2.0 * K[p, q]


def kernel_step(A: np.ndarray, B: float):
    """argmin { tr(-A K) : K psd, ||K||_F^2 <= B } for symmetric A with A 1 = 0 (so K 1 = 0).

    Returns (K, V, ||A_+||_F): ``K = V V'``, V (n, n) with descending columns
    ``P_i sqrt(sqrt(B) sigma_i+ / ||sigma_+||)`` (simplenpkl's kernel step on the whole
    spectrum: numpy's eigh through ``_dense_top_eigs``).
    """
    n = A.shape[0]
    sigma, P = _dense_top_eigs(np.array(A, dtype=np.float64), n, overwrite=True)
    V, norm = _kernel_step(sigma, P, B)
    return V @ V.T, V, norm


def coordinates(K: np.ndarray, dim: int):
    """(embedding (n, dim), eigenvalues (n,) descending) of the psd K."""
    w, Q = np.linalg.eigh(0.5 * (K + K.T))
    w, Q = w[::-1], Q[:, ::-1]
    return Q[:, :dim] * np.sqrt(np.maximum(w[:dim], 0.0)), w


# ------------------------------------------------------------------------- argument checks


def _is_number(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating))


def check_positive(name: str, value, hint: str) -> float:
    if not _is_number(value) or not np.isfinite(value) or value <= 0:
        raise ValidationError(
            f"{name}: expected a finite number > 0, got {fmt_value(value)}; {hint}"
        )
    return float(value)


def check_count(name: str, value, low: int, high: int | None = None, hint: str = "") -> int:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, np.integer))
        and value >= low
        and (high is None or value <= high)
    )
    if not ok:
        span = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValidationError(
            f"{name}: expected an integer {span}, got {fmt_value(value)}"
            + (f"; {hint}" if hint else "")
        )
    return int(value)


def check_tol(tol) -> float:
    if not _is_number(tol) or not np.isfinite(tol) or tol < 0:
        raise ValidationError(
            f"tol: expected a finite number >= 0, got {fmt_value(tol)}; pass e.g. tol=1e-6"
        )
    return float(tol)


def check_square_symmetric(name: str, M, what: str):
    """A finite symmetric n x n sparse matrix (CSR, canonical, float64) from sparse or dense
    input; n >= 3. ``what`` says what the entries mean (for the messages)."""
    if sp.issparse(M):
        S = sp.csr_matrix(M, dtype=np.float64, copy=True)
    else:
        try:
            arr = np.asarray(M, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValidationError(
                f"{name}: expected a square sparse or dense matrix of {what}, got "
                f"{type(M).__name__}"
            ) from None
        if arr.ndim != 2:
            raise ValidationError(
                f"{name}: expected a square matrix of {what}, got shape {arr.shape}"
            )
        S = sp.csr_matrix(arr)
    if S.shape[0] != S.shape[1] or S.shape[0] < 3:
        raise ValidationError(
            f"{name}: expected a square n x n matrix of {what} with n >= 3, got shape {S.shape}"
        )
    S.sum_duplicates()
    S.sort_indices()
    if not np.all(np.isfinite(S.data)):
        raise ValidationError(f"{name}: holds NaN or inf; pass finite {what}")
    if abs(S - S.T).max() > 1e-12 * max(abs(S).max(), 1.0) or (S != 0).sum() != (S.T != 0).sum():
        raise ValidationError(
            f"{name}: not symmetric; pass the symmetric matrix of {what}, e.g. M.maximum(M.T)"
        )
    if S.diagonal().any():
        i = int(np.flatnonzero(S.diagonal())[0])
        raise ValidationError(
            f"{name}: diagonal entry ({i}, {i}) is {S[i, i]:g}; {what} are between distinct "
            f"points, drop the self-loops (M.setdiag(0); M.eliminate_zeros())"
        )
    return S


# ------------------------------------------------------------------------- dual maximisers


def project_capped_simplex(a: np.ndarray, C: float) -> np.ndarray:
    """Euclidean projection on {a >= 0, sum(a) <= C}."""
    x = np.maximum(a, 0.0)
    if x.sum() <= C:
        return x
    # onto the simplex sum = C (Held et al.; Duchi et al. 2008): x = (a - theta)_+
    u = np.sort(a)[::-1]
    css = np.cumsum(u) - C
    k = np.arange(1, a.size + 1)
    rho = np.nonzero(u - css / k > 0)[0][-1]
    theta = css[rho] / (rho + 1.0)
    return np.maximum(a - theta, 0.0)


#: Stop the capped-simplex ascent after this many iterations without a rise of the best J.
STALL = 20


def ascend_capped_simplex(step, primal, x, C: float, max_iter: int, tol: float):
    """Accelerated projected gradient ascent of a concave dual J over the capped simplex
    {alpha >= 0, sum(alpha) <= C}, warm-started at ``x`` (SPE's dual, exact and at scale).

    ``step(alpha)`` returns ``(state, J, g)``: the kernel step's result, the dual value and its
    gradient (the triplets' violations); ``primal(state, g)`` the primal value there. Steps
    backtrack until the ascent inequality holds and grow back by 2 after each accepted one;
    momentum (FISTA) restarts when J falls. Stops when the gap P - J of the best point is at
    most ``tol (|P| + 1)``, when the best J has not risen by that much in :data:`STALL`
    iterations (restarts count: at the maximiser every step restarts), or after ``max_iter``.

    Returns ``((J, alpha, state, g), P, iterations, trace)``: the best point, its primal value,
    the iterations taken and the best J after each."""
    state, J, g = step(x)
    best = (J, x, state, g)
    trace = [J]
    if x.size == 0:
        return best, primal(state, g), 0, trace
    P = primal(state, g)
    if P - J <= tol * (abs(P) + 1.0):
        return best, P, 0, trace
    eta = C / max(float(np.max(np.abs(g))), 1e-300)  # a step that crosses the box
    y, Jy, gy = x, J, g
    tk = 1.0
    it = 0

    def stalled():
        return len(trace) > STALL and trace[-1] - trace[-1 - STALL] <= tol * (abs(P) + 1.0)

    while it < max_iter:
        it += 1
        for _ in range(60):  # backtrack until the ascent inequality holds
            z = project_capped_simplex(y + eta * gy, C)
            dz = z - y
            sz, Jz, gz = step(z)
            if Jz >= Jy + float(gy @ dz) - float(dz @ dz) / (2.0 * eta) - 1e-13 * (abs(Jy) + 1):
                break
            eta *= 0.5
        if Jz < J:  # function-value restart: drop the momentum, step from x
            y, Jy, gy, tk = x, J, g, 1.0
            trace.append(best[0])
            if stalled():
                break
            continue
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * tk * tk))
        y = project_capped_simplex(z + ((tk - 1.0) / t_new) * (z - x), C)
        x, J, g, state, tk = z, Jz, gz, sz, t_new
        _, Jy, gy = step(y) if tk > 1.0 else (state, J, g)
        if J > best[0]:
            best = (J, x, state, g)
        trace.append(best[0])
        P = primal(best[2], best[3])
        if P - best[0] <= tol * (abs(P) + 1.0):
            break
        if stalled():
            # J has stopped rising: where the cap sum(alpha) <= C is slack (xi* = 0) the
            # kernel step's tiny violations, times C, keep P above J (docs/algorithms.md)
            break
        eta *= 2.0  # let the step grow back
    return best, primal(best[2], best[3]), it, trace
