"""Block coordinate descent for NPKL (bcdkl-tnnls2015 Alg. 1), colour-ordered.

Each sweep visits the colours (steps) of the plan in a seeded random order; within a colour
the units (the colour's rows in one block, see ``_plan``) run concurrently, each row by row.
Every column gets its exact minimiser (see ``_kernels``), so the objective never increases.
Stopping: ||V(t) - V(t-1)||_F / ||V(t)||_F < tol, or ``max_sweeps``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from numbers import Real

import numpy as np

from ._errors import ConvergenceWarning, ValidationError, fmt_value
from ._plan import make_plan, prepare
from ._problem import NPKLProblem

__all__ = ["FitResult", "fit_bcd", "initial_V"]


@dataclass
class FitResult:
    """Outcome of a fit.

    Attributes
    ----------
    V : ndarray, shape (n_points, rank)
        Learned factor in original point order; the kernel is K = V V'.
    objective : float
        Final objective.
    objective_initial : float
    objective_trace : list of float
        Objective after each sweep.
    change_trace : list of float
        ||V(t) - V(t-1)|| / ||V(t)|| after each sweep.
    sweep_seconds : list of float
        Wall time of each sweep (the colour steps only; the objective is timed apart).
    objective_seconds : list of float
    fit_seconds : float
        Whole fit, including relabelling, colouring and set-up.
    converged : bool
    n_colours : int
        Colours (steps) of a sweep.
    """

    V: np.ndarray
    objective: float
    objective_initial: float
    objective_trace: list = field(default_factory=list)
    change_trace: list = field(default_factory=list)
    sweep_seconds: list = field(default_factory=list)
    objective_seconds: list = field(default_factory=list)
    fit_seconds: float = 0.0
    setup_seconds: float = 0.0
    converged: bool = False
    n_colours: int = 0
    solver: str = "bcd"

    @property
    def n_sweeps(self) -> int:
        return len(self.objective_trace)


def initial_V(problem: NPKLProblem, rng: np.random.Generator) -> np.ndarray:
    """The paper's random start: N(0, 1/r) entries (rows of norm about 1), original order.

    For the linear loss rows are projected on the ball ||v_i|| <= b.
    """
    n, r = problem.n_points, problem.rank
    V = rng.standard_normal((n, r)) / np.sqrt(r)
    if problem.loss == "linear":
        norms = np.linalg.norm(V, axis=1)
        over = norms > problem.bound
        V[over] *= (problem.bound / norms[over])[:, None]
    return V.astype(problem.dtype)


def fit_bcd(problem: NPKLProblem, *, max_sweeps: int = 100, tol: float = 1e-5,
            executor=None, relabel: str = "rcm", V0=None, callback=None, plan=None,
            resume=None, on_sweep=None, scheme: str = "blocks") -> FitResult:
    """Fit an NPKL problem by colour-ordered block coordinate descent.

    Parameters
    ----------
    problem : NPKLProblem
    max_sweeps : int
    tol : float
        Relative change ||V(t) - V(t-1)|| / ||V(t)|| that stops the iteration.
    executor : executor object, optional
        Default: :class:`~npkl_dist.executors.InProcessExecutor` with all threads.
    relabel : {'rcm', 'none'}
        Internal locality relabelling (undone on output).
    scheme : {'blocks', 'colours'}
        Sweep scheme of the plan made here (see :func:`~npkl_dist.make_plan`); ignored when
        ``plan`` is given.
    V0 : ndarray, shape (n, rank), optional
        Start in original order; default :func:`initial_V` from ``problem.seed``.
    callback : callable, optional
        ``callback(sweep, objective, change, seconds)`` after each sweep (progress display).
    plan : SweepPlan, optional
        A plan made earlier for this problem (e.g. read back from a run store).
    resume : (dict, ndarray), optional
        ``(state, V)`` from :meth:`FitState` checkpoints: ``state`` as produced by
        ``on_sweep`` (sweep, RNG state, traces) and V in internal order. The fit continues
        exactly where that state left off: a resumed fit equals an uninterrupted one bitwise.
    on_sweep : callable, optional
        ``on_sweep(state: dict, session)`` after each sweep; ``state`` is JSON-able and
        ``session.write_checkpoint_blocks(store, ckpt_id, row_block)`` writes V. Used by the
        run store to checkpoint.

    Returns
    -------
    FitResult
    """
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, (int, np.integer)) or max_sweeps < 1:
        raise ValidationError(f"max_sweeps: expected a positive integer, got {fmt_value(max_sweeps)}")
    if isinstance(tol, bool) or not (isinstance(tol, Real) and np.isfinite(tol) and tol >= 0):
        raise ValidationError(f"tol: expected a finite number >= 0, got {fmt_value(tol)}")
    if problem.constraints.diagonal:
        raise ValidationError(
            "constraints: diagonal targets (K_ii = 1) are KL-ADMM's protocol and not part of the "
            "BCD objective; sample constraints with diagonal=False for solver 'bcd'"
        )
    t_start = time.perf_counter()
    if executor is None:
        from .executors import InProcessExecutor

        executor = InProcessExecutor()
    rng = np.random.default_rng(problem.seed)
    if plan is None:
        plan = make_plan(problem, relabel=relabel, scheme=scheme)
    prep = prepare(problem, plan)
    if resume is not None:
        state, V = resume
        V = np.ascontiguousarray(V, dtype=problem.dtype)
        if V.shape != (problem.n_points, problem.rank):
            raise ValidationError(
                f"resume: checkpoint V has shape {V.shape}, the problem needs "
                f"{(problem.n_points, problem.rank)}; resume with the run's own configuration"
            )
        rng.bit_generator.state = state["rng_state"]
        result = FitResult(V=V, objective=state["objective_initial"],
                           objective_initial=state["objective_initial"],
                           n_colours=plan.n_colours)
        for key in ("objective_trace", "change_trace", "sweep_seconds", "objective_seconds"):
            getattr(result, key).extend(state[key])
        result.converged = bool(state.get("converged", False))
        first = int(state["sweep"]) + 1
    else:
        if V0 is None:
            V0 = initial_V(problem, rng)
        else:
            V0 = np.asarray(V0)
            if V0.shape != (problem.n_points, problem.rank):
                raise ValidationError(
                    f"V0: expected shape {(problem.n_points, problem.rank)}, got {V0.shape}"
                )
            if not np.all(np.isfinite(V0)):
                raise ValidationError("V0: holds NaN or inf; pass a finite start")
        V = np.ascontiguousarray(V0[plan.order], dtype=problem.dtype)
        result = None
        first = 1
    session = executor.bcd_session(prep, plan, V)
    try:
        if result is None:
            obj0 = session.objective()
            result = FitResult(V=V, objective=obj0, objective_initial=obj0,
                               n_colours=plan.n_colours)
        result.setup_seconds = time.perf_counter() - t_start
        sweep = first - 1
        while not result.converged and sweep < max_sweeps:
            sweep += 1
            order = plan.colour_order(rng)
            t0 = time.perf_counter()
            delta2, norm2 = session.sweep(order)
            t1 = time.perf_counter()
            obj = session.objective()
            t2 = time.perf_counter()
            change = float(np.sqrt(delta2 / norm2)) if norm2 > 0 else 0.0
            result.objective_trace.append(obj)
            result.change_trace.append(change)
            result.sweep_seconds.append(t1 - t0)
            result.objective_seconds.append(t2 - t1)
            result.converged = bool(change < tol)
            if callback is not None:
                callback(sweep, obj, change, t1 - t0)
            if on_sweep is not None:
                on_sweep(_state(result, sweep, rng), session)
        V = session.gather()
    finally:
        session.close()
    if not result.converged:
        warnings.warn(
            f"bcd: stopped after max_sweeps={max_sweeps} with relative change "
            f"{result.change_trace[-1]:.3g} >= tol={tol:g}; raise max_sweeps to converge further",
            ConvergenceWarning,
            stacklevel=2,
        )
    out = np.empty_like(V)
    out[plan.order] = V  # undo the relabelling
    result.V = out
    result.objective = result.objective_trace[-1]
    result.fit_seconds = time.perf_counter() - t_start
    return result


def _state(result: FitResult, sweep: int, rng: np.random.Generator) -> dict:
    """Everything but V needed to resume after ``sweep`` (JSON-able)."""
    return {
        "solver": "bcd",
        "sweep": sweep,
        "rng_state": rng.bit_generator.state,
        "objective": result.objective_trace[-1],
        "objective_initial": result.objective_initial,
        "objective_trace": list(result.objective_trace),
        "change_trace": list(result.change_trace),
        "sweep_seconds": list(result.sweep_seconds),
        "objective_seconds": list(result.objective_seconds),
        "converged": bool(result.converged),
    }
