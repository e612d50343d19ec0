"""Block coordinate descent for NPKL (bcdkl-tnnls2015 Alg. 1), colour-ordered.

Each sweep visits the colours (steps) of the plan in a seeded random order; within a colour
the units (the colour's rows in one block, see ``_plan``) run concurrently, each row by row.
Every column gets its exact minimiser (see ``_kernels``), so the objective never increases.
Method 'block' (``_blocksolve``) solves the unconstrained rows together instead.
Stopping: ||V(t) - V(t-1)||_F / ||V(t)||_F < tol, or ``max_sweeps``."""

from __future__ import annotations

import functools
import time
import warnings
from numbers import Real

import numpy as np

from ..._errors import ConvergenceWarning, ValidationError, fix, fmt_value
from ...linalg._rowops import take_rows
from ...problem._problem import NPKLProblem
from ...problem._result import FitResult
from .._kkt import kkt_residual
from ..block._layout import free_count
from ._joint import hinge_joint_move, joint_kkt
from ._local import LocalBCD
from ._rank import CERTIFICATE_TOL, descent_certificate, numerical_rank
from ._setup import _IN_USE, METHODS, FitSetup, _build
from ._start import (
    START_BUFFER,
    STARTS,
    _internal_coarse_start,
    _internal_free_start,
    _result_buffer,
    _start_prefault,
    full_rank_start,
    initial_V,
    resolve_start,
)

#: A fit that stops on the step-size rule with its KKT residual above this many times ``tol``
#: has stalled, and fit_bcd warns (docs/decisions/hinge-stopping.md).
STALL_KKT_FACTOR = 100.0
#: ... but never below this, above the hinge's rounding floor at the SDP optimum (same record).
STALL_KKT_MIN = 1e-6


#: Hinge loss: at most this many sweeps between two joint-move attempts (``joint``).
JOINT_MAX_WAIT = 16


def _random_start_fix() -> str:
    """A random start, in the syntax of the interface in use."""
    return fix("start='random'", "--start random", '[model] start = "random"')


def _block_fix() -> str:
    """The block method, in the syntax of the interface in use."""
    return fix("method='block'", "--method block", '[model] method = "block"')


def stall_bound(tol: float) -> float:
    """The KKT residual above which a fit stopped on the step-size rule ``tol`` has stalled
    (and below which the hinge's default stop needs its joint residual)."""
    return max(STALL_KKT_FACTOR * tol, STALL_KKT_MIN)


#: ``c_passes='auto'``: passes over the constrained rows per outer iteration of a block fit
#: where at most ``C_PASSES_MAX_FRACTION`` of the points are constrained, and
#: ``C_PASSES_DENSE`` where more than ``C_PASSES_DENSE_FRACTION`` are (the papers' protocol
#: pairs about 91%); 1 in between, where the passes cost more than they saved
#: (docs/decisions/coarse-start-and-c-passes.md).
C_PASSES_AUTO = 3
C_PASSES_MAX_FRACTION = 0.02
C_PASSES_DENSE = 2
C_PASSES_DENSE_FRACTION = 0.5


def resolve_c_passes(
    c_passes, problem: NPKLProblem, extrapolate: bool = True, n_free: int | None = None
) -> int:
    """``c_passes`` of :func:`fit_bcd` as an int (checked; 'auto' resolved). ``n_free``: the
    problem's number of points in no pair, if known (a block layout's)."""
    if isinstance(c_passes, str) and c_passes == "auto":
        if not extrapolate:
            return 1
        if n_free is None:
            n_free = free_count(problem)
        n = problem.n_points
        paired = n - int(n_free)
        if paired <= C_PASSES_MAX_FRACTION * n:
            return C_PASSES_AUTO
        return C_PASSES_DENSE if paired > C_PASSES_DENSE_FRACTION * n else 1
    if isinstance(c_passes, bool) or not isinstance(c_passes, (int, np.integer)) or c_passes < 1:
        raise ValidationError(
            f"c_passes: expected a positive integer or 'auto', got {fmt_value(c_passes)}"
        )
    if c_passes > 1 and not extrapolate:
        raise ValidationError(
            f"c_passes: {int(c_passes)} passes need extrapolate=True (the step-size rule then "
            f"measures the whole outer step); pass c_passes=1 or extrapolate=True"
        )
    return int(c_passes)


def checkpoint_width(rank: int, method: str, extrapolate: bool = True) -> int:
    """Columns of a BCD checkpoint: V, plus (method 'block' with extrapolation) the previous
    outer step S, L S and the residual R, so that a resumed fit continues bitwise.
    (Checkpoints of width 3 rank, from before R was stored, still resume.)"""
    return 4 * rank if method == "block" and extrapolate else rank


def _check_tol(name, val, allow_none=True):
    if val is None and allow_none:
        return
    if isinstance(val, bool) or not (isinstance(val, Real) and np.isfinite(val) and val >= 0):
        raise ValidationError(f"{name}: expected a finite number >= 0, got {fmt_value(val)}")


def _check_ladder(ladder):
    """kink_ladder as a tuple of floats in (0, 1), or a ValidationError naming it."""
    try:
        vals = tuple(ladder)
    except TypeError:
        vals = None
    if not vals or any(
        isinstance(e, bool) or not isinstance(e, Real) or not np.isfinite(e) or not 0 < e < 1
        for e in vals
    ):
        raise ValidationError(
            f"kink_ladder: expected a non-empty sequence of kink tolerances in (0, 1), e.g. "
            f"(1e-6, 1e-3, 1e-1), got {fmt_value(ladder)}"
        )
    return tuple(float(e) for e in vals)


def _small_fits_on_one_thread(fit):
    """``fit`` (fit_bcd) inside its executor's ``fit_threads`` scope, where it has one (the
    in-process executor: one thread for a small fit). The executor is resolved here as in
    ``fit``."""

    @functools.wraps(fit)
    def wrapper(problem, *args, executor=None, **kwargs):
        if executor is None:
            executor = LocalBCD()
        scope = getattr(executor, "fit_threads", None)
        if scope is None:
            return fit(problem, *args, executor=executor, **kwargs)
        with scope(getattr(problem, "n_points", None)):
            return fit(problem, *args, executor=executor, **kwargs)

    return wrapper


def _warm_start(problem, resume, method):
    """The V of a checkpoint ``(state, W)`` marked ``warm_start`` (learned under other
    parameters; npkl_dist.store.StoreCheckpointer.load), in internal order, as a start."""
    state, W = resume
    if state.get("method") is not None and state["method"] != method:
        raise ValidationError(
            f"resume: the checkpoint was written by method {state['method']!r}, this fit uses "
            f"method {method!r}: its rows are in another order; start a new run"
        )
    V = np.asarray(W)[:, : problem.rank]
    if V.shape != (problem.n_points, problem.rank):
        raise ValidationError(
            f"resume: checkpoint V has shape {V.shape}, the problem needs "
            f"{(problem.n_points, problem.rank)}; start a new run"
        )
    return np.array(V, dtype=problem.dtype, order="C")  # a copy: the caller's W stays as given


@_small_fits_on_one_thread
def fit_bcd(
    problem: NPKLProblem,
    *,
    max_sweeps: int = 1000,
    tol: float = 1e-5,
    executor=None,
    relabel: str = "rcm",
    V0=None,
    callback=None,
    plan=None,
    resume=None,
    on_sweep=None,
    method: str = "auto",
    start: str = "auto",
    tol_objective: float | None = None,
    tol_kkt: float | None = None,
    precond: str = "amg-additive",
    inner_rtol: float = 0.01,
    inner_maxiter: int = 1,
    extrapolate: bool = True,
    scheme: str = "blocks",
    setup: FitSetup | None = None,
    joint: bool = True,
    hinge_kkt: bool = True,
    kink_ladder: tuple | None = None,
    trace: bool = True,
    c_passes: int | str = "auto",
) -> FitResult:
    """Fit an NPKL problem by block coordinate descent.

    Parameters
    ----------
    problem : NPKLProblem
    max_sweeps : int
        Sweeps (method 'block': outer iterations) at most (docs/decisions/auto-method.md).
    tol, tol_objective, tol_kkt : float
        Stop when ||V(t) - V(t-1)|| / ||V(t)|| < ``tol`` and, if given, the relative
        objective change < ``tol_objective`` and the scaled KKT residual < ``tol_kkt``.
    executor : executor object, optional
        Default: :class:`~npkl_dist.executors.InProcessExecutor` with all threads.
    relabel, scheme : {'rcm', 'none'}, {'blocks', 'colours'}
        Locality relabelling (undone on output) and sweep scheme of the plan made here.
    V0 : ndarray, shape (n, rank), optional
        Start in original order; default :func:`initial_V` from ``problem.seed`` and ``start``.
    callback, on_sweep : callable, optional
        ``callback(sweep, objective, change, seconds)`` (``True`` stops) and
        ``on_sweep(state, session)`` (run-store checkpoints), after each sweep.
    plan, setup, resume : SweepPlan, FitSetup, (dict, ndarray), optional
        A plan made earlier; the :func:`fit_setup` of this graph and these pairs (then
        ``relabel``, ``scheme``, ``plan`` are its); checkpointed ``(state, V)`` to resume.
    method : {'sweeps', 'block', 'auto'}
        Plain sweeps (Alg. 1), block solves of the unconstrained rows, or :func:`choose_method`.
    start : {'auto', 'random', 'propagate', 'spectral', 'coarse', 'coarse-free'}
        See :func:`initial_V` and :func:`resolve_start`; ``FitResult.start`` is the one taken.
    inner_rtol, inner_maxiter, precond, extrapolate, c_passes
        Method 'block': the inner CG's stop and preconditioner
        ({'amg-additive', 'amg-plain', 'amg', 'jacobi'}), the plane search over the last
        two outer steps, and passes over the constrained rows (:func:`resolve_c_passes`).
    joint, hinge_kkt, kink_ladder : bool, bool, tuple of float
        Hinge loss: joint moves, the joint KKT residual below :func:`stall_bound` before
        stopping, and the moves' kink tolerances. Other losses ignore them.
    trace : bool
        Objective and KKT residual after every sweep (else only where needed; same iterates).

    Returns
    -------
    FitResult

    References: bcdkl-tnnls2015 Alg. 1; docs/algorithms.md, "BCD"; docs/decisions/
    hinge-stopping.md, coarse-start-and-c-passes.md, block-outer-iteration.md.
    """
    if (
        isinstance(max_sweeps, bool)
        or not isinstance(max_sweeps, (int, np.integer))
        or max_sweeps < 1
    ):
        raise ValidationError(
            f"max_sweeps: expected a positive integer, got {fmt_value(max_sweeps)}"
        )
    _check_tol("tol", tol, allow_none=False)
    _check_tol("tol_objective", tol_objective)
    _check_tol("tol_kkt", tol_kkt)
    if method not in METHODS:
        raise ValidationError(f"method: {method!r} is not one of {', '.join(METHODS)}")
    if start not in STARTS:
        raise ValidationError(f"start: {start!r} is not one of {', '.join(STARTS)}")
    if (
        isinstance(inner_maxiter, bool)
        or not isinstance(inner_maxiter, (int, np.integer))
        or inner_maxiter < 1
    ):
        raise ValidationError(
            f"inner_maxiter: expected a positive integer, got {fmt_value(inner_maxiter)}"
        )
    _check_tol("inner_rtol", inner_rtol, allow_none=False)
    if not (isinstance(c_passes, str) and c_passes == "auto"):  # checked before the set-up
        c_passes = resolve_c_passes(c_passes, problem, extrapolate)
    if kink_ladder is not None:
        kink_ladder = _check_ladder(kink_ladder)
    if problem.constraints.diagonal:
        raise ValidationError(
            "constraints: diagonal targets (K_ii = 1) are KL-ADMM's protocol and not part of the "
            "BCD objective; sample constraints with diagonal=False for solver 'bcd'"
        )
    t_start = time.perf_counter()
    if executor is None:
        executor = LocalBCD()
    if setup is not None:
        if not isinstance(setup, FitSetup):
            raise ValidationError(
                f"setup: expected a FitSetup from fit_setup(problem), got {fmt_value(setup)}"
            )
        if plan is not None:
            raise ValidationError(
                "plan: pass either plan= or setup= (a FitSetup holds its own plan), not both"
            )
        method, layout, prep = setup.bind(problem, method, executor)
        cache = setup.cache
        prefault = None
    else:
        prefault = _start_prefault(problem, method, executor, extrapolate, inner_maxiter)
        try:
            method, layout, prep = _build(problem, method, executor, relabel, scheme, plan)
        except BaseException:
            if prefault is not None:
                prefault.close()
            raise
        cache = None
    plan = layout if method == "sweeps" else None
    start = resolve_start(
        start, method, problem, n_free=layout.n_free if method == "block" else None
    )
    if method == "block":  # 'auto' from the layout's count of points in no pair
        c_passes = resolve_c_passes(c_passes, problem, extrapolate, n_free=layout.n_free)
    own_cache = None
    if cache is None and method == "block" and isinstance(executor, LocalBCD):
        # a standalone in-process block fit's own cache: what its start builds on the way
        # (the U-block operator, the AMG hierarchy) goes on to its session
        cache = own_cache = {}
    rng = np.random.default_rng(problem.seed)
    extra = None
    warm = None
    if resume is not None and resume[0].get("warm_start"):
        # a checkpoint's V (internal order) starts a new fit (npkl resume --force-config)
        warm, resume = _warm_start(problem, resume, method), None
    if resume is not None:
        state, V = resume
        if state.get("method", "sweeps") != method:
            raise ValidationError(
                f"resume: the checkpoint was written by method {state.get('method', 'sweeps')!r}, "
                f"this fit uses method {method!r}; resume with the run's own configuration"
            )
        V = np.array(V, dtype=problem.dtype, order="C")  # a copy: the caller's W stays
        width = checkpoint_width(problem.rank, method, extrapolate)
        # block checkpoints: 4r columns (V, S, L S, R), or 3r from before R was stored
        if (
            method == "block"
            and width > problem.rank
            and V.ndim == 2
            and V.shape[1] in (width, 3 * problem.rank)
        ):
            V, extra = (
                np.ascontiguousarray(V[:, : problem.rank]),
                np.split(V[:, problem.rank :], V.shape[1] // problem.rank - 1, axis=1),
            )
        elif (
            method == "block"
            and width > problem.rank
            and V.shape == (problem.n_points, problem.rank)
        ):
            # V alone would restart the outer steps' momentum: not the fit it claims to resume
            raise ValidationError(
                f"resume: a block-solve checkpoint holds V, S, L S and R ({width} columns, "
                f"4 x rank), got V alone ({V.shape[1]} columns); take it from the session's "
                f"checkpoint_array() as the run store's checkpoints do, or start a new fit from "
                f"this V with V0= (original point order)"
            )
        if V.shape != (problem.n_points, problem.rank):
            raise ValidationError(
                f"resume: checkpoint V has shape {V.shape}, the problem needs "
                f"{(problem.n_points, problem.rank)}; resume with the run's own configuration"
            )
        rng.bit_generator.state = state["rng_state"]
        result = FitResult(
            V=V,
            objective=state["objective_initial"],
            objective_initial=state["objective_initial"],
            n_colours=layout.n_colours,
            method=method,
            start=start,
        )
        for key in (
            "objective_trace",
            "change_trace",
            "sweep_seconds",
            "objective_seconds",
            "kkt_trace",
            "cg_iterations",
            "joint_moves",
        ):
            getattr(result, key).extend(state.get(key, []))
        result.converged = bool(state.get("converged", False))
        first = int(state["sweep"]) + 1
    else:
        library_start = V0 is None and warm is None
        if warm is not None:
            V = warm
        elif V0 is None and start == "coarse":  # in the internal order, from the prepared L
            V = _internal_coarse_start(problem, prep, cache)
        elif V0 is None and start == "coarse-free":
            if method != "block":
                raise ValidationError(
                    "start: 'coarse-free' is a block fit's start (it uses the U-first layout of "
                    "method='block'); use start='coarse' with plain sweeps"
                )
            out = (
                None
                if prefault is None
                else prefault.take(START_BUFFER, (problem.n_points, problem.rank), np.float64)
            )
            V = _internal_free_start(
                problem, prep, layout, cache, share=isinstance(executor, LocalBCD), out=out
            )
        else:
            if V0 is None:
                V0 = initial_V(problem, rng, start)
            else:
                V0 = np.asarray(V0)
                if V0.shape != (problem.n_points, problem.rank):
                    raise ValidationError(
                        f"V0: expected shape {(problem.n_points, problem.rank)}, got {V0.shape}"
                    )
                if not np.all(np.isfinite(V0)):
                    raise ValidationError("V0: holds NaN or inf; pass a finite start")
            V = take_rows(V0, layout.order, problem.dtype)
        if library_start:  # no start of ours may cap the rank (npkl_dist.solvers.bcd._rank)
            V = full_rank_start(V, problem)
        result = None
        first = 1
    if prefault is not None:  # another start than 'coarse-free', or a resumed fit
        prefault.drop(START_BUFFER)
    if cache is not None:  # the setup's work arrays serve one fit at a time
        if cache.get(_IN_USE):
            raise ValidationError(
                "setup: another fit is running with this setup (its work arrays serve one "
                "fit at a time); wait for it, or give each concurrent fit its own "
                "fit_setup(problem)"
            )
        cache[_IN_USE] = True
    try:
        if method == "block":
            opts = {"cache": cache} if cache is not None else {}
            if prefault is not None:
                opts["prefault"] = prefault
            session = executor.block_session(
                prep,
                layout,
                V,
                precond=precond,
                extrapolate=extrapolate,
                inner_maxiter=inner_maxiter,
                **opts,
            )
            if extra is not None:
                session.load_state_arrays(extra)
        else:
            session = executor.bcd_session(prep, plan, V)
    except BaseException:
        if cache is not None:
            cache[_IN_USE] = False
        if prefault is not None:
            prefault.close()
        raise
    use_joint = bool(joint) and problem.loss == "hinge"
    # the hinge's default stop: the step-size rule and a joint residual within the stall bound
    joint_floor = (
        stall_bound(tol) if use_joint and hinge_kkt and tol_kkt is None and tol > 0 else None
    )

    def small(k):  # a joint residual the stop accepts
        return (tol_kkt is None or k < tol_kkt) and (joint_floor is None or k < joint_floor)

    # the objective after each sweep: always traced, unless trace=False and nothing reads it
    track_obj = (
        bool(trace)
        or tol_objective is not None
        or use_joint
        or callback is not None
        or on_sweep is not None
    )
    # a block session gives the objective and the KKT residual together (objective_kkt;
    # the KKT part only where it is read: an untraced hinge fit needs the objective alone)
    track_kkt = hasattr(session, "kkt") or method == "block"
    track_kkt = track_kkt and (bool(trace) or tol_kkt is not None)
    # joint-move schedule (hinge); checkpointed so that a resumed fit takes the same moves
    joint_wait, joint_next = (
        (1, 0)
        if resume is None
        else (int(resume[0].get("joint_wait", 1)), int(resume[0].get("joint_next", 0)))
    )
    try:
        if result is None:
            obj0 = (
                session.objective_kkt(with_kkt=False)[0]
                if method == "block"
                else session.objective()
            )  # the start's objective alone
            result = FitResult(
                V=V,
                objective=obj0,
                objective_initial=obj0,
                n_colours=layout.n_colours,
                method=method,
                start=start,
            )
        result.setup_seconds = time.perf_counter() - t_start
        sweep = first - 1
        evaluated = None  # a block session's (objective, kkt) of the current V, if taken
        while not result.converged and sweep < max_sweeps:
            sweep += 1
            order = layout.colour_order(rng)
            t0 = time.perf_counter()
            if method == "block":
                if c_passes > 1:
                    order = np.tile(order, c_passes)
                delta2, norm2, its = session.step(order, inner_rtol, inner_maxiter)
                result.cg_iterations.append(int(its))
            else:
                delta2, norm2 = session.sweep(order)
            t1 = time.perf_counter()
            if method == "block":
                # the pair is of the current V; kept whole for the end of an untraced fit
                evaluated = (
                    session.objective_kkt(with_kkt=track_kkt) if track_obj or track_kkt else None
                )
                obj, kkt = evaluated if evaluated is not None else (None, None)
                obj = obj if track_obj else None
            else:
                obj = session.objective() if track_obj else None
                kkt = session.kkt() if track_kkt else None
            t2 = time.perf_counter()
            change = float(np.sqrt(delta2 / norm2)) if norm2 > 0 else 0.0
            prev = (
                result.objective_trace[-1] if result.objective_trace else result.objective_initial
            )
            if obj is not None:
                result.objective_trace.append(obj)
                result.objective_seconds.append(t2 - t1)
            result.change_trace.append(change)
            if kkt is not None:
                result.kkt_trace.append(kkt)
            result.sweep_seconds.append(t1 - t0)
            ok = change < tol
            if tol_objective is not None:
                ok = ok and abs(prev - obj) <= tol_objective * max(abs(obj), 1e-300)
            if tol_kkt is not None:
                ok = ok and kkt is not None and kkt < tol_kkt
            if use_joint and (ok or sweep >= joint_next):
                gain, rel, jkkt = _joint_step(session, prep, result, sweep, obj, kink_ladder)
                if ok:  # converged only if the joint move changes V by less than tol too
                    ok = rel < tol and small(jkkt)
                    if ok and gain > 0.0 and (tol_kkt is not None or joint_floor is not None):
                        # the residual where the fit would stop: after the move (a tiny move
                        # can change which pairs sit on their kinks, and with them the
                        # residual; docs/decisions/hinge-stopping.md)

                        ok = small(joint_kkt(prep, session.gather()))
                # cost-benefit schedule (a move costs about a sweep plus a small QP): try
                # again after the next sweep while a move gains more than a sweep did, else
                # wait twice as long as last time (at most JOINT_MAX_WAIT sweeps)
                joint_wait = 1 if gain > prev - obj else min(2 * joint_wait, JOINT_MAX_WAIT)
                joint_next = sweep + joint_wait
            result.converged = bool(ok)
            stop = callback is not None and callback(sweep, obj, change, t1 - t0) is True
            if on_sweep is not None:
                state = _state(result, sweep, rng)
                state.update(joint_wait=joint_wait, joint_next=joint_next)
                on_sweep(state, session)
            if stop:
                break
        final_kkt = None
        if result.joint_moves and result.joint_moves[-1] == sweep and result.objective_trace:
            # the trace holds each sweep's objective before its joint move (the schedule and
            # the stopping rules read it so, and resumed fits replay it); the fit's objective
            # is that of the V it returns (before, a last sweep's move went unreported)
            result.objective_trace[-1] = (
                session.objective_kkt(with_kkt=False)[0]
                if method == "block"
                else session.objective()
            )
        if not track_obj and result.change_trace:  # trace=False: the final objective, once
            if method == "block":
                # the last iteration's evaluation where tol_kkt made one (the same V)
                obj, final_kkt = evaluated if evaluated is not None else session.objective_kkt()
                result.objective_trace.append(obj)
            else:
                result.objective_trace.append(session.objective())
        V = session.gather()
        if use_joint:
            result.kkt = joint_kkt(prep, V)
        elif final_kkt is not None:
            result.kkt = final_kkt
        elif result.kkt_trace:
            result.kkt = result.kkt_trace[-1]
        else:
            result.kkt = kkt_residual(prep, V)
    finally:
        session.close()
        if cache is not None:
            cache[_IN_USE] = False
        out_V = None
        if prefault is not None:
            out_V = _result_buffer(own_cache, prefault, V.shape, V.dtype)
            prefault.close()
    # plain sweeps where block solves apply: those converge in far fewer iterations when
    # sweeps need hundreds, and on the hinge they end at an equal or lower objective
    # (docs/decisions/auto-method.md, docs/decisions/hinge-stopping.md)
    block_hint = (
        method == "sweeps"
        and problem.loss != "linear"
        and getattr(executor, "supports_block", False)
    )
    if not result.converged:
        hint = f", or try {_block_fix()}" if block_hint else ""
        warnings.warn(
            f"bcd: stopped after max_sweeps={max_sweeps} with relative change "
            f"{result.change_trace[-1]:.3g} (tol={tol:g}), KKT residual {result.kkt:.3g}"
            f"{'' if tol_kkt is None else f' (tol_kkt={tol_kkt:g})'}; raise "
            f"{fix('max_sweeps', '--max-sweeps', '[model] max_sweeps')} to converge "
            f"further{hint}",
            ConvergenceWarning,
            stacklevel=2,
        )
    elif tol_kkt is None and tol > 0 and result.kkt > stall_bound(tol):
        hint = (
            f" or try {_block_fix()} (on the hinge it ends at an equal or lower objective)"
            if block_hint
            else ""
        )
        joint = fix(" (or hinge_kkt=True, the default)", "", "") if use_joint else ""
        warnings.warn(
            f"bcd: stopped on the step-size rule (relative change < tol={tol:g}) with KKT "
            f"residual {result.kkt:.3g}, above {stall_bound(tol):.3g} ({STALL_KKT_FACTOR:g} x "
            f"tol, at least {STALL_KKT_MIN:g}): the fit stalled short of a stationary point "
            f"(coordinate steps can, at the hinge's kinks), and "
            f"its objective may be well above the optimum; pass "
            f"{fix('tol_kkt', '--tol-kkt', '[model] tol_kkt')} to also require a small "
            f"residual{joint}{hint}",
            ConvergenceWarning,
            stacklevel=2,
        )
    result.V = take_rows(V, layout.rank_of, out=out_V)  # undo the relabelling
    check_rank(result, problem, "bcd")
    result.objective = (
        result.objective_trace[-1] if result.objective_trace else result.objective_initial
    )
    result.fit_seconds = time.perf_counter() - t_start
    return result


#: A fit whose numerical rank is below this fraction of its rank checks whether it is a
#: rank-deficient saddle (``_rank.descent_certificate``, one Lanczos run on S).
RANK_CHECK_FRACTION = 0.5


def check_rank(result, problem: NPKLProblem, solver: str) -> None:
    """Sets ``result.numerical_rank`` and, where it is below ``RANK_CHECK_FRACTION`` of the
    rank, ``result.descent_curvature``; warns where that proves V is not optimal."""
    result.numerical_rank = numerical_rank(result.V)
    if result.numerical_rank >= RANK_CHECK_FRACTION * problem.rank or problem.loss == "linear":
        return
    lam, _ = descent_certificate(problem, result.V)
    result.descent_curvature = lam
    if lam < -CERTIFICATE_TOL:
        warnings.warn(
            f"{solver}: the learned V has numerical rank {result.numerical_rank} of "
            f"rank={problem.rank} and is not optimal: the kernel's gradient has curvature "
            f"{lam:.3g} < 0 along a direction outside V's span, which no row update can "
            f"reach (a rank-deficient start traps the fit in its span); refit from "
            f"{_random_start_fix()} or "
            f"report this start as a bug",
            ConvergenceWarning,
            stacklevel=3,
        )


def _joint_step(session, prep, result, sweep, obj, ladder=None):
    """Hinge loss: take the joint move (``npkl_dist.solvers.bcd._joint``) if it lowers the objective by
    more than float64's rounding (the move and its decrease are computed in float64 for
    every dtype; float32's epsilon as the guard stalled float32 hinge fits:
    docs/decisions/float32.md).
    Returns (decrease of the objective, relative change ||V' - V|| / ||V|| of the move,
    joint KKT residual before it); zeros for a move not taken."""

    V = session.gather()
    move = hinge_joint_move(prep, V, ladder=ladder)
    eps = float(np.finfo(np.float64).eps)
    if -move.decrease <= 100.0 * eps * max(abs(obj), 1e-300):
        return 0.0, 0.0, move.kkt
    session.assign(move.apply(V))
    result.joint_moves.append(int(sweep))
    vn = float(np.linalg.norm(V))
    rel = move.step * float(np.linalg.norm(move.direction)) / vn if vn > 0 else np.inf
    return -move.decrease, rel, move.kkt


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
        "kkt_trace": list(result.kkt_trace),
        "cg_iterations": list(result.cg_iterations),
        "joint_moves": list(result.joint_moves),
        "method": result.method,
        "converged": bool(result.converged),
    }
