"""Label-free choice of gamma: cross-validation on held-out pairwise constraints.

The loss weight gamma is not stated by the papers and the clustering accuracy depends
strongly on it (docs/decisions/gamma-selection.md). Choosing it by the accuracy against
the true labels would be tuning to the test; :func:`select_gamma` chooses it from the
constraints alone:

1. the constraint pairs are split into ``folds`` folds, must-links and cannot-links
   separately (each fold holds about ``1/folds`` of each type), by a permutation drawn from
   ``seed``;
2. for every fold and every gamma of the grid the problem is fitted on the *other* folds'
   pairs only (same Laplacian, loss, rank, bound, seed; diagonal targets kept);
3. the learned kernel is scored on the held-out pairs (see ``score`` below);
4. the gamma with the best mean score over the folds wins; ties go to the smaller gamma.

Labels are never read: the function receives only the Laplacian and the constraints.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import warnings
from numbers import Real

import numpy as np
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits  # a scikit-learn dependency

from ._errors import ConvergenceWarning, ValidationError, fix, fmt_value
from .evaluate import kernel_kmeans, unit_rows
from .problem._constraints import Constraints
from .problem._problem import NPKLProblem
from .solvers.admm._fit import fit_admm
from .solvers.bcd._fit import fit_bcd
from .solvers.bcd._setup import fit_setup
from .solvers.simplenpkl._fit import fit_simplenpkl

__all__ = ["select_gamma", "GammaSelection", "DEFAULT_GAMMAS", "SCORES"]

DEFAULT_GAMMAS = (0.1, 1.0, 10.0, 100.0)
SCORES = ("clusters", "auc")
_SOLVERS = ("bcd", "admm", "simplenpkl")
#: Solver options that belong to one problem and cannot be shared by the folds' fits.
_PER_PROBLEM_OPTIONS = ("plan", "resume", "on_sweep", "callback", "setup")
#: fit_bcd options that shape its set-up (passed on to fit_setup, once per fold).
_SETUP_OPTIONS = ("method", "executor", "relabel", "scheme")
#: Mean scores closer than this count as a tie (then the smaller gamma wins).
TIE_TOL = 1e-12
#: Up to this many points the score's k-means runs on one thread (see heldout_score).
_SINGLE_THREAD_KMEANS = 20_000


@dataclasses.dataclass
class GammaSelection:
    """The outcome of :func:`select_gamma`.

    Attributes
    ----------
    gamma : float
        The chosen gamma.
    problem : NPKLProblem
        The full problem (every constraint) with ``gamma`` set, ready to fit.
    gammas : tuple of float
        The grid, ascending.
    scores : ndarray, shape (folds, len(gammas))
        Held-out score of each fold (row) and gamma (column).
    score : str
        ``'clusters'`` or ``'auc'``.
    folds, seed : int
    heldout : list of ndarray
        Per fold, the indices (into ``problem.constraints.i/j/t``) of its held-out pairs.
    n_unconverged : ndarray of int, shape (folds, len(gammas))
        1 where that fit stopped at its iteration limit (a ConvergenceWarning was caught).
    seconds : float
        Wall time of the whole selection (all fits and scores).
    """

    gamma: float
    problem: NPKLProblem
    gammas: tuple
    scores: np.ndarray
    score: str
    folds: int
    seed: int
    heldout: list
    n_unconverged: np.ndarray
    seconds: float

    @property
    def mean_scores(self) -> np.ndarray:
        return self.scores.mean(axis=0)

    @property
    def std_scores(self) -> np.ndarray:
        if self.scores.shape[0] < 2:
            return np.zeros(self.scores.shape[1])
        return self.scores.std(axis=0, ddof=1)

    def table(self) -> str:
        """The CV score table as markdown (one row per gamma, the chosen one marked)."""
        head = (
            "| gamma | "
            + " | ".join(f"fold {f}" for f in range(self.folds))
            + " | mean | std | chosen |"
        )
        rows = [head, "|" + "---|" * (self.folds + 4)]
        for q, g in enumerate(self.gammas):
            cells = " | ".join(f"{s:.4f}" for s in self.scores[:, q])
            mark = "←" if g == self.gamma else ""
            rows.append(
                f"| {g:g} | {cells} | {self.mean_scores[q]:.4f} | "
                f"{self.std_scores[q]:.4f} | {mark} |"
            )
        return "\n".join(rows)

    def to_dict(self) -> dict:
        """JSON-ready summary (no arrays of pair indices)."""
        return {
            "gamma": self.gamma,
            "gammas": list(self.gammas),
            "score": self.score,
            "folds": self.folds,
            "seed": self.seed,
            "scores": self.scores.tolist(),
            "mean_scores": self.mean_scores.tolist(),
            "n_unconverged": int(self.n_unconverged.sum()),
            "seconds": self.seconds,
        }


def select_gamma(
    problem,
    gammas=DEFAULT_GAMMAS,
    *,
    folds: int = 3,
    seed: int = 0,
    solver: str = "bcd",
    n_clusters: int | None = None,
    score: str | None = None,
    fit_options: dict | None = None,
    normalize: bool = False,
) -> GammaSelection:
    """Choose gamma by cross-validation on held-out constraints (never on labels).

    Costs ``folds * len(gammas)`` fits plus one k-means each (BCD fits of a fold share a set-up).

    Parameters
    ----------
    problem : NPKLProblem or (L, Constraints)
        The problem to tune (its ``gamma`` ignored); a pair is built with
        :meth:`NPKLProblem.build` defaults (square loss).
    gammas : sequence of float
        The grid, finite and > 0, no duplicates (default 0.1, 1, 10, 100).
    folds : int
        Number of folds, >= 2, each with at least one pair of each type.
    seed : int
        Seed of the fold split and of the score's k-means (the fits use ``problem.seed``).
    solver : {'bcd', 'admm', 'simplenpkl'}
        :func:`~npkl_dist.fit_bcd`, :func:`~npkl_dist.fit_admm` or
        :func:`~npkl_dist.fit_simplenpkl`.
    n_clusters : int, optional
        K of the downstream kernel k-means; required by the ``'clusters'`` score.
    score : {'clusters', 'auc'}, optional
        The balanced fraction of held-out pairs that kernel k-means with K clusters
        satisfies (default with ``n_clusters``), or the ROC AUC of ``-||v_i - v_j||^2``.
    normalize : bool
        Score the cosine-normalised kernel (unit rows of V), as ``--normalize-kernel``.
    fit_options : dict, optional
        Keyword arguments of the solver; ``plan``, ``resume``, ``on_sweep``, ``callback``
        are refused.

    Returns
    -------
    GammaSelection
        ``gamma``, the full ``problem`` with it, the per-fold ``scores`` and ``table()``.

    Raises ``ValidationError`` on a bad grid, ``folds``, ``n_clusters``, solver, score or
    option; warns ``ConvergenceWarning`` once when some fits stopped at their iteration limit.

    References: docs/algorithms.md, "Choosing γ"; docs/decisions/gamma-selection.md.
    """
    t0 = time.perf_counter()
    problem = _as_problem(problem)
    grid = _check_gammas(gammas)
    folds = _check_int("folds", folds, 2, "use folds=3 (or any integer >= 2)")
    seed = _check_int("seed", seed, 0, "pass a non-negative integer")
    if solver not in _SOLVERS:
        raise ValidationError(f"solver: {solver!r} is not one of {', '.join(_SOLVERS)}")
    if not isinstance(normalize, (bool, np.bool_)):
        raise ValidationError(f"normalize: expected True or False, got {fmt_value(normalize)}")
    cons = problem.constraints
    n = problem.n_points
    if score is None:
        score = "clusters" if n_clusters is not None else "auc"
    if score not in SCORES:
        raise ValidationError(f"score: {score!r} is not one of {', '.join(SCORES)}")
    if score == "clusters":
        if n_clusters is None:
            raise ValidationError(
                "n_clusters: the 'clusters' score needs the number of clusters K; pass "
                "n_clusters=K or score='auc'"
            )
        if (
            isinstance(n_clusters, bool)
            or not isinstance(n_clusters, (int, np.integer))
            or not 2 <= n_clusters <= n
        ):
            raise ValidationError(
                f"n_clusters: expected an integer in [2, {n}], got {fmt_value(n_clusters)}"
            )
    fit = _solver_function(solver)
    options = _check_fit_options(fit, solver, fit_options)
    heldout = split_folds(cons, folds, seed)
    scores = np.empty((folds, len(grid)))
    unconverged = np.zeros((folds, len(grid)), dtype=np.int64)
    for f, out in enumerate(heldout):
        keep = np.ones(cons.m, dtype=bool)
        keep[out] = False
        train = Constraints.from_arrays(
            cons.i[keep], cons.j[keep], cons.t[keep], n, diagonal=cons.diagonal, warn=False
        )
        setup = {}  # BCD: one set-up per fold, shared by the grid's fits (bitwise the same)
        for q, g in enumerate(grid):
            p = NPKLProblem.build(
                problem.L,
                train,
                loss=problem.loss,
                gamma=g,
                rank=problem.rank,
                bound=problem.bound,
                seed=problem.seed,
                dtype=problem.dtype,
            )
            if solver == "bcd" and q == 0:
                setup = {
                    "setup": fit_setup(
                        p, **{k: options[k] for k in _SETUP_OPTIONS if k in options}
                    )
                }
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                V = fit(p, **options, **setup).V
            unconverged[f, q] = any(issubclass(w.category, ConvergenceWarning) for w in caught)
            for w in caught:  # pass on everything but the (summarised) convergence warnings
                if not issubclass(w.category, ConvergenceWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            scores[f, q] = heldout_score(
                V,
                cons.i[out],
                cons.j[out],
                cons.t[out],
                score=score,
                n_clusters=n_clusters,
                seed=seed,
                normalize=normalize,
            )
    mean = scores.mean(axis=0)
    best = int(np.flatnonzero(mean >= mean.max() - TIE_TOL)[0])  # ascending grid: ties -> smaller
    if unconverged.any():
        warnings.warn(
            f"select_gamma: {int(unconverged.sum())} of {unconverged.size} cross-validation "
            f"fits stopped at their iteration limit; raise "
            f"{fix('it in fit_options', '--max-sweeps', '[model] max_sweeps')} for steadier "
            f"scores",
            ConvergenceWarning,
            stacklevel=2,
        )
    chosen = NPKLProblem.build(
        problem.L,
        cons,
        loss=problem.loss,
        gamma=grid[best],
        rank=problem.rank,
        bound=problem.bound,
        seed=problem.seed,
        dtype=problem.dtype,
    )
    return GammaSelection(
        gamma=grid[best],
        problem=chosen,
        gammas=grid,
        scores=scores,
        score=score,
        folds=folds,
        seed=seed,
        heldout=heldout,
        n_unconverged=unconverged,
        seconds=time.perf_counter() - t0,
    )


def split_folds(constraints: Constraints, folds: int, seed: int) -> list:
    """Held-out pair indices of each fold, must-links and cannot-links dealt separately.

    Each type is permuted by ``numpy.random.default_rng(seed)`` and dealt round-robin, so
    fold sizes differ by at most one per type; every pair is held out exactly once.
    """
    rng = np.random.default_rng(seed)
    parts = [[] for _ in range(folds)]
    types = ((constraints.t > 0, "must-link"), (constraints.t < 0, "cannot-link"))
    for kind, name in types:
        have = int(np.count_nonzero(kind))
        if have < 2:
            raise ValidationError(
                f"constraints: {have} {name} pair(s); cross-validation needs at least 2 "
                f"of each type (one held out per fold, folds >= 2); add {name} constraints "
                f"or pass gamma yourself"
            )
    for kind, name in types:
        idx = np.flatnonzero(kind)
        if idx.size < folds:
            raise ValidationError(
                f"folds: {folds} folds need at least {folds} {name} pairs (one held out per "
                f"fold), the constraints have {idx.size}; lower folds to <= {idx.size} or "
                f"add {name} constraints"
            )
        perm = rng.permutation(idx)
        for f in range(folds):
            parts[f].append(perm[f::folds])
    return [np.sort(np.concatenate(p)) for p in parts]


def heldout_score(
    V,
    i,
    j,
    t,
    *,
    score: str = "clusters",
    n_clusters: int | None = None,
    seed: int = 0,
    normalize: bool = False,
) -> float:
    """Score a learned kernel ``K = V V'`` on pairs ``(i, j)`` of types ``t`` (+1 / -1).

    See :func:`select_gamma` for the two scores; both lie in [0, 1], higher is better.
    ``normalize``: score the cosine-normalised kernel (the unit rows of V) instead.
    """

    V = unit_rows(V) if normalize else np.asarray(V, dtype=np.float64)
    must = np.asarray(t) > 0
    if score == "clusters":
        # Small k-means runs are far faster on one thread (docs/decisions/small-fit-times.md)
        limit = 1 if V.shape[0] <= _SINGLE_THREAD_KMEANS else None
        with threadpool_limits(limit):
            labels = kernel_kmeans(V, n_clusters, seed=seed)
        same = labels[i] == labels[j]
        return 0.5 * (float(same[must].mean()) + float((~same[~must]).mean()))

    d2 = np.einsum("kr,kr->k", V[i] - V[j], V[i] - V[j])
    return float(roc_auc_score(must, -d2))


def _as_problem(problem) -> NPKLProblem:
    if isinstance(problem, NPKLProblem):
        return problem
    if isinstance(problem, tuple) and len(problem) == 2:
        return NPKLProblem.build(problem[0], problem[1])
    raise ValidationError(
        f"problem: expected an NPKLProblem or an (L, constraints) pair, got "
        f"{type(problem).__name__}; build one with NPKLProblem.build(L, constraints, loss=...)"
    )


def _check_gammas(gammas) -> tuple:
    try:
        grid = list(gammas)
    except TypeError:
        raise ValidationError(
            f"gammas: expected a sequence of numbers > 0, got {fmt_value(gammas)}; e.g. "
            f"gammas=(0.1, 1, 10, 100)"
        ) from None
    if not grid:
        raise ValidationError(
            "gammas: the grid is empty; pass at least one value, e.g. gammas=(0.1, 1, 10, 100)"
        )
    for g in grid:
        if isinstance(g, bool) or not isinstance(g, Real) or not np.isfinite(g) or g <= 0:
            raise ValidationError(
                f"gammas: every value must be a finite number > 0, got {fmt_value(g)} in "
                f"{fmt_value(grid)}; drop it or replace it by a positive value"
            )
    grid = sorted(float(g) for g in grid)
    dup = sorted({g for a, g in zip(grid, grid[1:]) if a == g})
    if dup:
        raise ValidationError(f"gammas: {dup} appear more than once; list each value once")
    return tuple(grid)


def _check_int(name, value, low, fix) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValidationError(
            f"{name}: expected an integer >= {low}, got {fmt_value(value)}; {fix}"
        )
    return int(value)


def _solver_function(solver):
    if solver == "admm":
        return fit_admm
    if solver == "simplenpkl":
        return fit_simplenpkl

    return fit_bcd


def _check_fit_options(fit, solver, fit_options) -> dict:
    options = dict(fit_options or {})
    allowed = set(inspect.signature(fit).parameters) - {"problem"}
    for key in options:
        if key in _PER_PROBLEM_OPTIONS:
            raise ValidationError(
                f"fit_options: {key!r} belongs to one problem and cannot be shared by the "
                f"cross-validation fits; remove it"
            )
        if key not in allowed:
            raise ValidationError(
                f"fit_options: {key!r} is not an option of solver {solver!r}; choose from "
                f"{', '.join(sorted(allowed - set(_PER_PROBLEM_OPTIONS)))}"
            )
    return options
