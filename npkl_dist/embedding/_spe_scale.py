"""Structure preserving embedding at scale: the rank-r, working-set saddle point (issue 77 item 2;
docs/algorithms.md, "SPE at scale").

The exact problem is :mod:`._spe`'s (S): with A0 = H W H, d_pq(K) = K_pp + K_qq - 2 K_pq and
v_ijk(K) = d_ik(K) - d_ij(K) for the triplets i, k in N_i, j not in N_i, j != i::

    P(K) = -tr(A0 K) + C max(0, max_ijk v_ijk(K))      over K psd, K 1 = 0, ||K||_F^2 <= B.

Two things change here, and nothing else:

1. **Rank.** K = V V' with V (n, r): the feasible set is cut to rank(K) <= r (a restriction:
   P_r* >= P*; equal when the exact optimum has rank <= r). For fixed duals alpha on the capped
   simplex {alpha >= 0, sum alpha <= C}, ``min tr(-A(alpha) K)`` over that set is, by von
   Neumann's trace inequality, the top-r positive eigenpairs of ``A(alpha) = A0 - sum alpha_t
   (T_ik - T_ij)`` scaled to ||K||_F = sqrt(B) (simplenpkl's kernel step with a rank cap), so
   ``J_r(alpha) = -sqrt(B) ||lambda_1..r(A(alpha))_+||`` is concave and, by weak duality on any
   set, ``J_r(alpha) <= P_r*``: the gap P(V V') - J_r certifies the rank-r problem. When
   lambda_{r+1}(A(alpha)) <= 0, J_r = J <= P* certifies the exact one (``rank_binding``).
   A(alpha) is never formed: W's CSR, the centring (two means) and the triplets with alpha > 0
   act on a vector (a LinearOperator), and Lanczos (ARPACK's ``eigsh``) finds the top r.

2. **Triplets.** The dual lives on a working set S of triplets (cutting planes), not on the
   Sum_i |N_i|(n - 1 - |N_i|) of them. Restricted to S the dual is exact (the ascent of
   :mod:`._spe`: projected, accelerated, backtracked), and it lower-bounds P_r* still. The
   slack's max splits per node: max_ijk v_ijk = max_i [max_{k in N_i} d_ik - min_{j not in
   N_i + i} d_ij]. The farthest neighbour is exact (O(|E| r) per sweep); the nearest
   non-neighbour is searched, per sweep, among a seeded sample (``triplets_per_node`` draws:
   neighbours of neighbours, the neighbours' current nearest non-neighbours, uniform nodes) and
   the node's best so far (NN-descent's idea): a lower bound on the exact slack, exact once the
   search finds each node's nearest non-neighbour. Each sweep adds every node's candidate
   triplet that is violated near the current maximum. ``triplets_per_node=None`` puts all
   triplets in S from the start (the small-graph reference path; no search).

Per dual iteration O((|E| + |S| + n) r) per Lanczos product; per sweep O((|E| + n t) r); memory
O(n (r + t) + |E| + |S|) with |S| = O(n). :func:`spe_objective` evaluates P exactly (O(n^2 r)
time, O(n r) memory): the tests' and the benchmark's measure of the searched slack.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from numba import njit
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

from .._errors import ConvergenceWarning, ValidationError, fix
from ..linalg._blas import _OneBlasThread
from ..solvers.simplenpkl._fit import _kernel_step
from ._saddle import (
    ascend_capped_simplex,
    check_count,
    check_positive,
    check_square_symmetric,
    check_tol,
)
from ._spe import _triplets

#: ARPACK's relative tolerance on the top-r eigenpairs (the dual gradient's accuracy).
_EIG_TOL = 1e-10

#: Stop after this many sweeps in a row whose search found nothing beyond the working set.
_IDLE = 3

#: A sweep adds the nodes' candidate triplets with v >= _BAND * (the working set's max).
_BAND = 0.5


@dataclass(repr=False)
class LowRankSPEResult:
    """Outcome of :func:`embed_spe_lowrank`.

    Attributes
    ----------
    embedding : ndarray, shape (n, dim)
        The first ``dim`` columns of ``factor`` (K's top eigenvectors times sqrt(eigenvalue)).
    factor : ndarray, shape (n, rank)
        V with K = V V' (orthogonal columns, descending norms, centred rows' mean 0).
    eigenvalues : ndarray, shape (rank,)
        K's eigenvalues (squared column norms of V), descending.
    objective : float
        P(V V') with the slack found by the search (exact with ``triplets_per_node=None``;
        otherwise a lower bound on :func:`spe_objective`, equal once the search is complete).
    dual_objective : float
        J_r(alpha) on the working set: a lower bound on the rank-r optimum, and on the exact
        optimum when ``rank_binding`` is False.
    xi : float
        The slack of ``objective``.
    alpha, triplets : ndarray, shapes (m,), (m, 3)
        The working set's duals and triplets (i, j, k).
    next_eigenvalue : float
        lambda_{r+1} of A(alpha) at the end.
    rank_binding : bool
        ``next_eigenvalue > 0``: a rank above r would lower the objective further.
    iterations, sweeps : int
        Dual iterations (Lanczos solves) and working-set sweeps.
    converged : bool
        Relative gap ``(objective - dual_objective) / (|objective| + 1) <= sqrt(tol)``.
    trace : list of tuple
        (sweep, objective, dual_objective, working-set size) after each sweep.
    fit_seconds : float
    """

    embedding: np.ndarray
    factor: np.ndarray
    eigenvalues: np.ndarray
    objective: float
    dual_objective: float
    xi: float
    alpha: np.ndarray
    triplets: np.ndarray
    next_eigenvalue: float
    rank_binding: bool
    iterations: int
    sweeps: int
    converged: bool
    B: float
    C: float
    trace: list = field(default_factory=list)
    fit_seconds: float = 0.0

    @property
    def duality_gap(self) -> float:
        return float(self.objective - self.dual_objective)

    def __repr__(self) -> str:
        n, d = self.embedding.shape
        return (
            f"LowRankSPEResult(n={n}, dim={d}, rank={self.factor.shape[1]}, "
            f"objective={self.objective:.6g}, gap={self.duality_gap:.3g}, "
            f"sweeps={self.sweeps}, iterations={self.iterations}, converged={self.converged})"
        )


# ------------------------------------------------------------------------- compiled kernels


@njit(cache=True, nogil=True)
def _apply_triplets(ti, tj, tk, alpha, x, y):
    """y -= sum_t alpha_t (T_ik - T_ij) x, T_pq x = (x_p - x_q)(e_p - e_q).
    # IN ti, tj, tk (m,) int64; alpha (m,); x (n,)   # OUT y (n,), accumulated"""
    for t in range(ti.shape[0]):
        a = alpha[t]
        i, j, k = ti[t], tj[t], tk[t]
        dk = a * (x[i] - x[k])
        dj = a * (x[i] - x[j])
        y[i] += dj - dk
        y[k] += dk
        y[j] -= dj


@njit(cache=True, nogil=True)
def _triplet_values(V, ti, tj, tk, out):
    """out_t = d_ik - d_ij of K = V V'.   # IN V (n, r); ti, tj, tk (m,)   # OUT out (m,)"""
    r = V.shape[1]
    for t in range(ti.shape[0]):
        i, j, k = ti[t], tj[t], tk[t]
        s = 0.0
        for c in range(r):
            a = V[i, c] - V[k, c]
            b = V[i, c] - V[j, c]
            s += a * a - b * b
        out[t] = s


@njit(cache=True, nogil=True)
def _sq(V, i, j):
    s = 0.0
    for c in range(V.shape[1]):
        d = V[i, c] - V[j, c]
        s += d * d
    return s


@njit(cache=True, nogil=True)
def _is_neighbour(indptr, indices, i, j):
    """j in N_i (indices sorted per row): binary search."""
    lo, hi = indptr[i], indptr[i + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < j:
            lo = mid + 1
        else:
            hi = mid
    return lo < indptr[i + 1] and indices[lo] == j


@njit(cache=True, nogil=True)
def _search(indptr, indices, V, best_old, draws, best_new, far, value):
    """One sweep of the slack's search: per node i, the farthest neighbour (exact) and the
    nearest non-neighbour among best_old[i] and the drawn candidates.

    # IN  indptr, indices: W's CSR pattern (rows sorted); V (n, r); best_old (n,) int64 (-1:
    #     none yet); draws (n, t, 2) uniform [0, 1)
    # OUT best_new (n,) int64, far (n,) int64, value (n,): d_i,far - d_i,best (-inf: none)
    """
    n = V.shape[0]
    t_draws = draws.shape[1]
    for i in range(n):
        lo, hi = indptr[i], indptr[i + 1]
        deg = hi - lo
        best_new[i] = -1
        far[i] = -1
        value[i] = -np.inf
        if deg == 0 or deg == n - 1:
            continue
        dk, kk = -1.0, -1
        for p in range(lo, hi):
            d = _sq(V, i, indices[p])
            if d > dk:
                dk, kk = d, indices[p]
        dj, jj = np.inf, -1
        b = best_old[i]
        if b >= 0:
            dj, jj = _sq(V, i, b), b
        for s in range(t_draws):
            u = indices[lo + min(int(draws[i, s, 0] * deg), deg - 1)]
            kind = s % 3
            if kind == 0:  # a neighbour of a neighbour
                du = indptr[u + 1] - indptr[u]
                w = indices[indptr[u] + min(int(draws[i, s, 1] * du), du - 1)]
            elif kind == 1:  # a neighbour's nearest non-neighbour so far
                w = best_old[u]
            else:  # a uniform node
                w = min(int(draws[i, s, 1] * n), n - 1)
            if w < 0 or w == i or w == jj or _is_neighbour(indptr, indices, i, w):
                continue
            d = _sq(V, i, w)
            if d < dj or (d == dj and w < jj):
                dj, jj = d, w
        if jj < 0:
            continue
        best_new[i] = jj
        far[i] = kk
        value[i] = dk - dj


@njit(cache=True, nogil=True)
def _exact_slack(indptr, indices, V, value):
    """Per node max_{k in N_i} d_ik - min_{j not in N_i, j != i} d_ij over all j (O(n^2 r)).
    # IN indptr, indices, V (n, r)   # OUT value (n,) (-inf: node with no triplet)"""
    n = V.shape[0]
    mark = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        lo, hi = indptr[i], indptr[i + 1]
        value[i] = -np.inf
        if hi == lo or hi - lo == n - 1:
            continue
        dk = 0.0
        for p in range(lo, hi):
            mark[indices[p]] = True
            dk = max(dk, _sq(V, i, indices[p]))
        mark[i] = True
        dj = np.inf
        for j in range(n):
            if not mark[j]:
                dj = min(dj, _sq(V, i, j))
        for p in range(lo, hi):
            mark[indices[p]] = False
        mark[i] = False
        value[i] = dk - dj


# ------------------------------------------------------------------------- the problem


def spe_objective(W, V, C: float = 1.0) -> float:
    """SPE's exact objective P(V V') = -tr(H W H V V') + C max(0, max_ijk d_ik - d_ij), every
    triplet (i, k in N_i, j not in N_i, j != i) checked: O(n^2 r) time, O(n (r + 1)) memory.

    Parameters
    ----------
    W : sparse matrix or array-like, shape (n, n)
        The connectivity (as :func:`embed_spe`).
    V : ndarray, shape (n, r)
        K = V V' (the rows are centred here: K 1 = 0 is part of the problem).
    C : float
        The slack's weight.
    """
    S = check_square_symmetric("W", W, "connectivity weights")
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or V.shape[0] != S.shape[0]:
        raise ValidationError(
            f"V: expected shape ({S.shape[0]}, r) for W's {S.shape[0]} nodes, got {V.shape}"
        )
    V = np.ascontiguousarray(V - V.mean(axis=0))
    value = np.empty(S.shape[0])
    _exact_slack(S.indptr.astype(np.int64), S.indices.astype(np.int64), V, value)
    xi = max(float(value.max()), 0.0)
    return -float(np.sum(V * (S @ V))) + float(C) * xi


class _Dual:
    """J_r on a working set of triplets: the kernel step by Lanczos on A(alpha)."""

    def __init__(self, S, rank, B, C, seed):
        self.W, self.n, self.rank, self.B, self.C = S, S.shape[0], rank, B, C
        self.sqB = np.sqrt(B)
        self.v0 = np.random.default_rng(seed).standard_normal(self.n)
        self.set_triplets(np.zeros((0, 3), dtype=np.int64))
        self.solves = 0

    def set_triplets(self, T):
        self.T = np.ascontiguousarray(T, dtype=np.int64)
        self.ti, self.tj, self.tk = (np.ascontiguousarray(c) for c in self.T.T)

    def operator(self, alpha):
        on = np.flatnonzero(alpha > 0.0)
        ti, tj, tk, a = self.ti[on], self.tj[on], self.tk[on], alpha[on]
        W = self.W

        def mv(x):
            x = np.ravel(x)
            xc = x - x.mean()
            y = W @ xc
            y -= y.mean()  # H W H x
            _apply_triplets(ti, tj, tk, a, xc, y)
            return y

        return LinearOperator((self.n, self.n), matvec=mv, dtype=np.float64)

    def eigs(self, alpha, k):
        """Top-k eigenpairs of A(alpha), descending (dense below 2k + 2 nodes)."""
        self.solves += 1
        n = self.n
        if n <= 2 * k + 2:
            Aop = self.operator(alpha)
            A = Aop.matmat(np.eye(n))
            w, P = np.linalg.eigh(0.5 * (A + A.T))
            return w[::-1][:k], P[:, ::-1][:, :k]
        try:
            w, P = eigsh(self.operator(alpha), k=k, which="LA", v0=self.v0, tol=_EIG_TOL)
        except ArpackNoConvergence as err:  # keep what converged, with a fresh start
            w, P = err.eigenvalues, err.eigenvectors
            if w.size < k:
                w, P = eigsh(
                    self.operator(alpha),
                    k=k,
                    which="LA",
                    v0=self.v0,
                    tol=_EIG_TOL,
                    ncv=min(n, 4 * k + 1),
                    maxiter=20 * n,
                )
        order = np.argsort(w)[::-1]
        w, P = w[order], P[:, order]
        s = P.sum(axis=1)
        if np.any(s):
            self.v0 = s  # warm start: the next A(alpha) is near this one
        return w, P

    def step(self, alpha):
        """(V, J_r, g): the kernel step's factor, the dual value, the triplets' values."""
        w, P = self.eigs(alpha, self.rank)
        V, norm = _kernel_step(w, P, self.B)
        V = np.ascontiguousarray(V - V.mean(axis=0))
        g = np.empty(self.ti.size)
        _triplet_values(V, self.ti, self.tj, self.tk, g)
        return V, -self.sqB * norm, g

    def trace_term(self, V) -> float:
        return float(np.sum(V * (self.W @ V)))

    def primal(self, V, g) -> float:
        xi = max(float(g.max()), 0.0) if g.size else 0.0
        return -self.trace_term(V) + self.C * xi


def _ascend(dual: _Dual, x, max_iter, tol):
    """The ascent of J_r over the capped simplex on the working set, warm-started at x
    (``ascend_capped_simplex``). Returns (J, alpha, V, g), iterations."""
    best, _, it, _ = ascend_capped_simplex(dual.step, dual.primal, x, dual.C, max_iter, tol)
    return best, it


def _key(T, n):
    return (T[:, 0] * n + T[:, 1]) * n + T[:, 2]


def embed_spe_lowrank(
    W,
    *,
    dim: int = 2,
    rank: int = 16,
    C: float = 1.0,
    B: float | None = None,
    triplets_per_node: int | None = 8,
    max_sweeps: int = 30,
    max_iter: int = 200,
    tol: float = 1e-6,
    seed: int = 0,
    callback=None,
    checkpoint=None,
    resume: dict | None = None,
) -> LowRankSPEResult:
    """Structure preserving embedding (simplenpkl-jmlr2011 §6.3) at scale: K = V V' of rank
    at most ``rank``, the triplets on a working set grown by a seeded search.

    Parameters
    ----------
    W : sparse matrix or array-like, shape (n, n)
        Symmetric connectivity, entries >= 0, zero diagonal, n >= 3 (as :func:`embed_spe`).
    dim : int
        Columns of ``embedding``, 1 <= dim <= rank.
    rank : int
        r, the rank cap of K; 1 <= r <= n - 2. ``rank_binding`` in the result says whether
        it restricted the answer.
    C : float
        Weight of the shared slack.
    B : float, optional
        Capacity ||K||_F^2 <= B; default n. K scales as sqrt(B).
    triplets_per_node : int or None
        Candidates drawn per node and sweep in the search for its nearest non-neighbour (>= 1);
        None: every triplet in the working set (small graphs, at most ``MAX_TRIPLETS``).
    max_sweeps : int
        Working-set sweeps, at most.
    max_iter : int
        Dual iterations per sweep, at most.
    tol : float
        Stop once the relative gap (P - J_r) / (|P| + 1) <= tol, P with the searched slack.
    seed : int
        Seeds the search's draws and Lanczos's first start; equal seeds give bitwise equal
        results.
    callback : callable, optional
        ``callback(sweep, objective, dual_objective, n_triplets)`` after each sweep.
    checkpoint : callable, optional
        ``checkpoint(state)`` after each sweep that another follows: ``state`` (a dict of
        arrays and plain values, :func:`spe_state_arrays` splits it for storage) holds all
        the fit needs to go on.
    resume : dict, optional
        Such a state: the fit continues after its sweep, and ends bitwise as the fit that
        wrote it would have (same W and parameters; ``max_sweeps`` may differ).

    Returns
    -------
    LowRankSPEResult

    Raises ``ValidationError`` on a bad argument; warns ``ConvergenceWarning`` when the
    relative gap is above sqrt(tol) at the end.
    """
    t0 = time.perf_counter()
    S = check_square_symmetric("W", W, "connectivity weights")
    if S.data.size and S.data.min() < 0:
        raise ValidationError(
            f"W: holds a negative weight ({S.data.min():g}); SPE's connectivity is >= 0 "
            f"(0/1 for an unweighted graph)"
        )
    if S.nnz == 0:
        raise ValidationError("W: has no edge; pass the graph's adjacency matrix")
    n = S.shape[0]
    rank = check_count(
        "rank", rank, 1, n - 2, "K = V V' on n nodes, centred, has rank <= n - 2 here"
    )
    dim = check_count("dim", dim, 1, rank, "the embedding takes the first dim of rank columns")
    C = check_positive("C", C, "the paper uses C = 1")
    B = float(n) if B is None else check_positive("B", B, f"the paper uses B = m n, e.g. {n}")
    if triplets_per_node is not None:
        triplets_per_node = check_count(
            "triplets_per_node",
            triplets_per_node,
            1,
            None,
            "e.g. 8, or None for every triplet (small graphs)",
        )
    max_sweeps = check_count("max_sweeps", max_sweeps, 1)
    max_iter = check_count("max_iter", max_iter, 1)
    tol = check_tol(tol)
    seed = check_count("seed", seed, 0, None, "pass a non-negative integer")
    if callback is not None and not callable(callback):
        raise ValidationError(
            f"callback: expected a callable or None, got {type(callback).__name__}"
        )
    if checkpoint is not None and not callable(checkpoint):
        raise ValidationError(
            f"checkpoint: expected a callable or None, got {type(checkpoint).__name__}"
        )
    params = {"n": n, "rank": rank, "C": C, "B": B, "triplets_per_node": triplets_per_node,
              "max_iter": max_iter, "tol": tol, "seed": seed}  # fmt: skip
    if resume is not None:
        got = {k: resume.get("params", {}).get(k) for k in params}
        if got != params:
            diff = ", ".join(f"{k}: state {got[k]!r}, call {v!r}" for k, v in params.items()
                             if got[k] != v)  # fmt: skip
            raise ValidationError(
                f"resume: the state was written by a fit with other parameters ({diff}); "
                "continue it with the same ones, or start over (resume=None)"
            )
    with _OneBlasThread():
        out = _fit(
            S, dim, rank, C, B, triplets_per_node, max_sweeps, max_iter, tol, seed, callback,
            checkpoint, resume, params,
        )  # fmt: skip
    out.fit_seconds = time.perf_counter() - t0
    if not out.converged:
        warnings.warn(
            f"spe_lowrank: relative gap {out.duality_gap / (abs(out.objective) + 1):.3g} > "
            f"sqrt(tol)={np.sqrt(tol):.3g} after {out.sweeps} sweep(s); raise "
            f"{fix('max_sweeps')} or {fix('max_iter')}",
            ConvergenceWarning,
            stacklevel=2,
        )
    return out


def spe_state_arrays(state: dict) -> tuple[dict, dict]:
    """(arrays, record): a :func:`embed_spe_lowrank` checkpoint state split into its numpy
    arrays (for an .npz) and the rest (plain values, for JSON); ``{**arrays, **record}``
    is the state again."""
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    return arrays, {k: v for k, v in state.items() if k not in arrays}


def _fit(
    S, dim, rank, C, B, tpn, max_sweeps, max_iter, tol, seed, callback, checkpoint, resume,
    params,
):  # fmt: skip
    n = S.shape[0]
    dual = _Dual(S, rank, B, C, seed)
    indptr, indices = S.indptr.astype(np.int64), S.indices.astype(np.int64)
    rng = np.random.default_rng([seed, 1])
    alpha = np.zeros(0)
    if tpn is None:  # the reference path: every triplet from the start
        dual.set_triplets(_triplets(S))
        alpha = np.zeros(dual.ti.size)
    best_j = np.full(n, -1, dtype=np.int64)
    best_new = np.empty(n, dtype=np.int64)
    far = np.empty(n, dtype=np.int64)
    value = np.empty(n)
    trace, its, sweeps, idle = [], 0, 0, 0
    state = None
    if resume is not None:
        r = resume
        dual.set_triplets(np.asarray(r["T"], dtype=np.int64).reshape(-1, 3))
        alpha = np.array(r["alpha"], dtype=np.float64)
        best_j = np.array(r["best_j"], dtype=np.int64)
        dual.v0 = np.array(r["v0"], dtype=np.float64)
        rng.bit_generator.state = r["rng"]
        trace = [tuple(t) for t in r["trace"]]
        its, sweeps, idle = int(r["iterations"]), int(r["sweeps"]), int(r["idle"])
        state = (np.array(r["V"]), float(r["J"]), float(r["P"]), float(r["xi"]))
    while resume is None or sweeps < max_sweeps:
        (J, alpha, V, g), k = _ascend(dual, alpha, max_iter, tol)
        its += k
        P_set = dual.primal(V, g)
        xi = max(float(g.max()), 0.0) if g.size else 0.0
        sweeps += 1
        if tpn is not None:  # search the slack beyond the working set
            draws = rng.random((n, tpn, 2))
            _search(indptr, indices, V, best_j, draws, best_new, far, value)
            best_j, best_new = best_new, best_j
            xi = max(xi, float(value.max()))
        P = -dual.trace_term(V) + C * xi
        trace.append((sweeps, P, J, int(alpha.size)))
        state = (V, J, P, xi)
        if callback is not None:
            callback(sweeps, P, J, int(alpha.size))
        if tpn is None or sweeps >= max_sweeps:
            break
        # a closed gap certifies the searched slack only: stop once the search has found
        # nothing beyond the working set for _IDLE sweeps in a row, with the ascent ended
        # by the gap or by its stall (not by max_iter)
        idle = idle + 1 if P - P_set <= tol * (abs(P) + 1.0) else 0
        if idle >= _IDLE and k < max_iter:
            break
        if P > P_set:  # some searched triplet beats the working set: add the near-maximal
            thresh = max(_BAND * xi, 0.0)
            pick = np.flatnonzero((value >= thresh) & (best_j >= 0))
            new = np.column_stack([pick, best_j[pick], far[pick]]).astype(np.int64)
            g_max = max(float(g.max()), 0.0) if g.size else 0.0
            keep = (alpha > 0) | (g >= _BAND * g_max)  # drop the idle, far-from-max ones
            T_old, a_old = dual.T[keep], alpha[keep]
            fresh = ~np.isin(_key(new, n), _key(T_old, n))
            dual.set_triplets(np.concatenate([T_old, new[fresh]]))
            alpha = np.concatenate([a_old, np.zeros(int(fresh.sum()))])
        # else: nothing beyond the working set; the ascent goes on from alpha (max_iter hit)
        if checkpoint is not None:
            V_, J_, P_, xi_ = state
            checkpoint(
                {
                    "params": params, "sweeps": sweeps, "iterations": its, "idle": idle,
                    "trace": [list(t) for t in trace], "rng": rng.bit_generator.state,
                    "J": J_, "P": P_, "xi": xi_, "V": V_, "alpha": alpha, "T": dual.T,
                    "best_j": best_j, "v0": dual.v0,
                }
            )  # fmt: skip
    V, J, P, xi = state
    w_next, _ = dual.eigs(alpha, rank + 1)
    next_eig = float(w_next[rank]) if w_next.size > rank else 0.0
    lam = np.einsum("nr,nr->r", V, V)
    order = np.argsort(-lam, kind="stable")
    V, lam = V[:, order], lam[order]
    return LowRankSPEResult(
        embedding=np.array(V[:, :dim]),
        factor=V,
        eigenvalues=lam,
        objective=P,
        dual_objective=J,
        xi=xi,
        alpha=alpha,
        triplets=dual.T,
        next_eigenvalue=next_eig,
        rank_binding=bool(next_eig > 1e-9 * max(abs(float(w_next[0])), 1.0)),
        iterations=its,
        sweeps=sweeps,
        converged=bool(P - J <= np.sqrt(tol) * (abs(P) + 1.0)),
        B=B,
        C=C,
        trace=trace,
    )


__all__ = ["LowRankSPEResult", "embed_spe_lowrank", "spe_objective", "spe_state_arrays"]
