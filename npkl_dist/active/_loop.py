"""The active learning loop: fit, select a batch, ask, add the answers, refit warm-started
from the previous V (issue 78 item 2; the run-store record and the CLI build on it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .._errors import ValidationError, fmt_value
from ..problem._constraints import Constraints
from ..problem._problem import NPKLProblem, default_rank
from ._select import STRATEGIES, _key, select_pairs


def labels_oracle(labels):
    """The simulated person: a pair's answer is +1 (must-link) when both points have the
    same label, -1 (cannot-link) when they differ, 0 (skip) when either is unlabelled (< 0)."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValidationError(f"labels: expected one label per point, got shape {y.shape}")

    def ask(pairs):
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        a, b = y[pairs[:, 0]], y[pairs[:, 1]]
        t = np.where(a == b, 1, -1).astype(np.int8)
        t[(a < 0) | (b < 0)] = 0
        return t

    return ask


@dataclass
class ActiveRound:
    """One round: the pairs asked and their answers (+1, -1, 0 = skipped), the constraint
    count after it, the refit's objective and sweeps, seconds to select and to refit, and the
    clustering metrics when evaluation labels were given (round 0: the initial fit)."""

    round: int
    queries: np.ndarray
    answers: np.ndarray
    n_constraints: int
    objective: float
    n_sweeps: int
    select_seconds: float
    fit_seconds: float
    metrics: dict | None = None

    def to_dict(self) -> dict:
        return {
            "round": self.round,
            "queries": self.queries.tolist(),
            "answers": self.answers.tolist(),
            "n_constraints": self.n_constraints,
            "objective": self.objective,
            "n_sweeps": self.n_sweeps,
            "select_seconds": self.select_seconds,
            "fit_seconds": self.fit_seconds,
            "metrics": self.metrics,
        }


@dataclass
class ActiveResult:
    """The loop's rounds (round 0 is the fit on the initial constraints), the final
    constraints and V."""

    rounds: list = field(default_factory=list)
    constraints: Constraints | None = None
    V: np.ndarray | None = None


def add_answers(constraints: Constraints, pairs, answers) -> Constraints:
    """``constraints`` with the answered pairs (answer +1 / -1; 0 = skipped) added."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    t = np.asarray(answers)
    keep = t != 0
    c = constraints
    return Constraints.from_arrays(
        np.concatenate([c.i, pairs[keep, 0]]),
        np.concatenate([c.j, pairs[keep, 1]]),
        np.concatenate([c.t, t[keep]]).astype(np.int8),
        c.n_points,
        diagonal=c.diagonal,
    )


def active_learning(
    L,
    constraints: Constraints,
    oracle,
    pool,
    *,
    rounds: int = 5,
    batch: int = 20,
    strategy: str = "min_abs_k",
    loss: str = "square",
    gamma: float = 1.0,
    rank: int | None = None,
    seed: int = 0,
    max_sweeps: int = 1000,
    tol: float = 1e-5,
    eval_labels=None,
    n_clusters: int | None = None,
    callback=None,
    distinct: bool = True,
) -> ActiveResult:
    """Run ``rounds`` rounds of active constraint selection with BCD in the loop.

    Parameters
    ----------
    L : sparse matrix
        The graph Laplacian (:func:`npkl_dist.laplacian`), the same every round.
    constraints : Constraints
        The pairs known before the first question.
    oracle : callable
        ``oracle(pairs (b, 2)) -> answers (b,)`` in {+1, -1, 0}; :func:`labels_oracle`
        simulates a person from labels.
    pool : ndarray (m, 2)
        Candidate pairs (:func:`candidate_pool`); pairs already constrained are skipped.
    rounds, batch : int
        Rounds of questions and pairs asked per round.
    strategy : {'random', 'min_abs_k', 'margin', 'minmax'}
        ``minmax`` (the square loss) re-solves the two rows of each of the 200 least-|K_kl|
        open pairs (``select_pairs``).
    rank : int, optional
        Fixed for every round (so each refit starts from the last V); default
        ``default_rank`` of the final constraint count.
    seed : int
        The fits' seed; round r's random strategy draws from ``[seed, r]``.
    eval_labels : array-like, optional
        Ground truth for the clustering metrics of each round (kernel k-means on V; not
        shown to the loop).
    callback : callable, optional
        ``callback(ActiveRound)`` after each round.
    distinct : bool
        No point in two pairs of one batch (``select_pairs``; not the random strategy).

    Returns
    -------
    ActiveResult
    """
    from ..evaluate import clustering_metrics, kernel_kmeans
    from ..solvers.bcd._fit import fit_bcd

    if strategy not in STRATEGIES:
        raise ValidationError(
            f"strategy: {strategy!r} is not one of {', '.join(map(repr, STRATEGIES))}"
        )
    for name, v in (("rounds", rounds), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValidationError(f"{name}: expected a positive integer, got {fmt_value(v)}")
    if strategy == "minmax" and loss != "square":
        raise ValidationError(
            f"strategy: 'minmax' is derived for the square loss, got loss={loss!r}; use "
            "loss='square' or another strategy"
        )
    if not callable(oracle):
        raise ValidationError(
            f"oracle: expected a callable pairs -> answers, got {type(oracle).__name__}; "
            "e.g. labels_oracle(y)"
        )
    n = constraints.n_points
    pool = np.asarray(pool, dtype=np.int64).reshape(-1, 2)
    if pool.size and (pool.min() < 0 or pool.max() >= n):
        raise ValidationError(
            f"pool: holds a point outside 0..{n - 1}; pass pairs of these points"
        )
    if rank is None:
        rank = default_rank(constraints.m + rounds * batch, n)
    y = None if eval_labels is None else np.asarray(eval_labels)
    k = n_clusters
    if k is None and y is not None:
        k = int(np.unique(y[y >= 0]).size)

    def fit(cons, V0):
        nonlocal problem
        problem = NPKLProblem.build(L, cons, loss=loss, gamma=gamma, rank=rank, seed=seed)
        t = time.perf_counter()
        res = fit_bcd(problem, max_sweeps=max_sweeps, tol=tol, V0=V0)
        return res, time.perf_counter() - t

    problem = None

    def metrics(V):
        if y is None or k is None:
            return None
        lab = kernel_kmeans(V, k, seed=seed)
        known = y >= 0
        return clustering_metrics(y[known], lab[known])

    out = ActiveResult()
    res, secs = fit(constraints, None)
    V = res.V
    empty = np.zeros((0, 2), np.int64)
    first = ActiveRound(0, empty, np.zeros(0, np.int8), constraints.m, float(res.objective),
                        int(res.n_sweeps), 0.0, secs, metrics(V))  # fmt: skip
    out.rounds.append(first)
    if callback is not None:
        callback(first)
    cons = constraints
    # the pool's pairs not asked yet: not the given constraints, then not a query of any
    # round, whether its answer became a constraint or was a skip
    pool_keys = _key(pool[:, 0], pool[:, 1], n)
    unasked = ~np.isin(pool_keys, _key(cons.i, cons.j, n))
    for r in range(1, int(rounds) + 1):
        t = time.perf_counter()
        open_idx = np.flatnonzero(unasked)
        open_pairs = pool[open_idx]
        if open_pairs.shape[0] == 0:
            break
        idx = select_pairs(
            V, open_pairs, batch, strategy, constraints=cons, seed=[seed, r], problem=problem,
            distinct=distinct,
        )  # fmt: skip
        queries = open_pairs[idx]
        unasked &= ~np.isin(pool_keys, _key(queries[:, 0], queries[:, 1], n))
        select_seconds = time.perf_counter() - t
        answers = np.asarray(oracle(queries))
        fix_ = "answer each pair with +1 (must-link), -1 (cannot-link) or 0 (skip)"
        if answers.shape != (queries.shape[0],):
            raise ValidationError(
                f"oracle: returned shape {answers.shape} for {queries.shape[0]} pairs; {fix_}"
            )
        bad = ~np.isin(answers, (-1, 0, 1))
        if bad.any():
            q = queries[bad][0]
            raise ValidationError(
                f"oracle: {int(bad.sum())} of {answers.size} answers are not +1, -1 or 0 (the "
                f"first: {answers[bad][0].item()!r} for pair ({q[0]}, {q[1]})); {fix_}"
            )
        answers = answers.astype(np.int8)
        cons = add_answers(cons, queries, answers)
        res, secs = fit(cons, V)
        V = res.V
        rec = ActiveRound(r, queries, answers, cons.m, float(res.objective),
                          int(res.n_sweeps), select_seconds, secs, metrics(V))  # fmt: skip
        out.rounds.append(rec)
        if callback is not None:
            callback(rec)
    out.constraints, out.V = cons, V
    return out
