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

from ..._errors import ConvergenceWarning, ValidationError, fmt_value
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
#: has stalled, and fit_bcd warns. Measured at the papers' protocol (bench/RESULTS.md, "The
#: hinge's stalls"): 48 fits with the square loss and the squared hinge stopped at residuals of
#: 0.2-1.0 x tol; hinge fits stopped at up to 8,600 x tol, their objectives up to 15% above
#: those of fits of the same problem that reached a stationary point.
STALL_KKT_FACTOR = 100.0
#: ... but never below this: the joint KKT residual of a hinge fit at the SDP optimum (to 6e-10
#: in objective, 12 points, tol = 1e-12) was 3e-8 to 6e-8, its rounding floor.
STALL_KKT_MIN = 1e-6


#: Hinge loss: at most this many sweeps between two joint-move attempts (``joint``).
JOINT_MAX_WAIT = 16


def stall_bound(tol: float) -> float:
    """The KKT residual above which a fit stopped on the step-size rule ``tol`` has stalled
    (and below which the hinge's default stop needs its joint residual)."""
    return max(STALL_KKT_FACTOR * tol, STALL_KKT_MIN)


#: ``c_passes='auto'``: passes over the constrained rows per outer iteration of a block fit
#: where at most ``C_PASSES_MAX_FRACTION`` of the points are constrained, and
#: ``C_PASSES_DENSE`` where more than ``C_PASSES_DENSE_FRACTION`` are (the papers' protocol
#: pairs about 91%); 1 in between, where the passes cost more than they saved (10% on the
#: 1e5 mixture: 0.79-0.99x). bench/RESULTS.md, "more passes over the constrained rows".
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
        Sweeps (method 'block': outer iterations) at most. The default, 1000, lets 23 of 24
        fits at the papers' protocol (12 data sets, the square loss and the squared hinge,
        method 'auto') stop on ``tol``; dbl-spiral's squared hinge needs 2,115 sweeps
        (bench/RESULTS.md, "Fits that end inside their cap").
    tol : float
        Relative change ||V(t) - V(t-1)|| / ||V(t)|| below which the fit may stop.
    tol_objective : float, optional
        Relative objective change |f(t-1) - f(t)| / |f(t)| below which the fit may stop.
    tol_kkt : float, optional
        Scaled KKT residual (``npkl_dist.solvers._kkt``) below which the fit may stop.
        The fit stops when every criterion given holds (``tol`` always counts).
    executor : executor object, optional
        Default: :class:`~npkl_dist.executors.InProcessExecutor` with all threads.
    relabel : {'rcm', 'none'}
        Internal locality relabelling (undone on output).
    scheme : {'blocks', 'colours'}
        Sweep scheme of the plan made here (see :func:`~npkl_dist.make_plan`); ignored when
        ``plan`` is given.
    V0 : ndarray, shape (n, rank), optional
        Start in original order; default :func:`initial_V` from ``problem.seed`` and ``start``.
    callback : callable, optional
        ``callback(sweep, objective, change, seconds)`` after each sweep (progress display);
        returning ``True`` stops the fit there (not counted as converged).
    plan : SweepPlan, optional
        A plan made earlier for this problem (e.g. read back from a run store).
    setup : FitSetup, optional
        The set-up made by :func:`fit_setup` for this graph and these constraint pairs
        (another gamma, loss, rank or start may be fitted with it): skips relabelling,
        layout, permutation and, for in-process block solves, the AMG set-up and the work
        arrays' first touch. ``relabel``, ``scheme`` and ``plan`` are then the setup's.
    resume : (dict, ndarray), optional
        ``(state, V)`` from checkpoints: ``state`` as produced by ``on_sweep`` and V in
        internal order. A resumed fit equals an uninterrupted one bitwise.
    on_sweep : callable, optional
        ``on_sweep(state: dict, session)`` after each sweep (run-store checkpoints).
    method : {'sweeps', 'block', 'auto'}
        'sweeps': colour-ordered Gauss-Seidel sweeps (bcdkl-tnnls2015 Alg. 1).
        'block': the unconstrained rows solved together by preconditioned CG, alternated
        with exact updates of the constrained rows (``npkl_dist.solvers.block``).
        'auto': :func:`choose_method`.
    start : {'auto', 'random', 'propagate', 'spectral', 'coarse', 'coarse-free'}
        See :func:`initial_V`; 'auto' (default): :func:`resolve_start`, i.e. for block
        solves 'coarse-free' where at least half the points are in no pair (its AMG
        hierarchy is the preconditioner's, built once) and 'coarse' otherwise, and the
        paper's 'random' for plain sweeps. ``FitResult.start`` is the start taken.
    inner_rtol, inner_maxiter : float, int
        Method 'block': each outer iteration's CG stops when every column's residual fell by
        ``inner_rtol`` or after ``inner_maxiter`` iterations (inexact block solves: the
        constrained rows change the right-hand side at once anyway, and the subspace search
        of ``extrapolate`` carries the solve across outer iterations; at n = 2e4 one
        iteration per outer reached a 1e-4 gap in 33 outer iterations, three in 29, at
        twice the cost). With ``inner_maxiter=1`` the CG's direction is stored in float32
        and its step is exact along that rounded direction (``DIRECTION_FLOAT32`` in
        ``npkl_dist.solvers.block``): the product with L_UU, which gathers neighbour rows,
        reads half the bytes, about 10% of an outer iteration at n = 1e6.
    precond : {'amg-additive', 'amg-plain', 'amg', 'jacobi'}
        Method 'block': plain (unsmoothed) aggregation AMG, its finest level additive
        (default: Jacobi weights plus the coarse correction, no product with L_UU, so an
        outer iteration makes one pass over L_UU instead of three) or a full V-cycle
        ('amg-plain'); smoothed-aggregation AMG; or Jacobi. 'amg-additive' needs 10-15%
        more outer iterations and reached the 1e-4 gap 1.1-2.0x sooner than 'amg-plain' on
        every case of bench_block's n = 1e5 grid (0.1%, 1%, 10% constrained; square,
        squared hinge, hinge; bench/RESULTS.md). At n = 1e6 smoothed aggregation took 55 s
        to set up and 1.9 s per outer iteration, plain aggregation 8 s and 1.1 s, for about
        as many outer iterations (31 vs 33 at n = 2e4). On the Dask executor the preconditioner is
        block-Jacobi over its row blocks, each block with this preconditioner on its own
        part of L_UU (one block, or 'jacobi': the in-process iterates bitwise).
    extrapolate : bool
        Method 'block': after each outer iteration, the objective is minimised exactly over
        the plane spanned by this outer step and the previous one (a conjugate-gradient-like
        momentum, accepted only where it lowers the objective).
    c_passes : int or 'auto'
        Method 'block': passes of exact row updates over the constrained rows after each
        block solve (the colours in one order, repeated). More passes bring the constrained
        rows nearer their optimum for the current unconstrained block at the price of a
        pass each. 'auto': :data:`C_PASSES_AUTO` (3) while at most
        :data:`C_PASSES_MAX_FRACTION` (2%) of the points are constrained,
        :data:`C_PASSES_DENSE` (2) where more than half are (the papers' protocol), else 1
        (see :func:`resolve_c_passes`). More than 1 needs ``extrapolate`` (the step-size rule
        then measures the whole outer step). Measured (bench/RESULTS.md, "more passes over
        the constrained rows"): with 0.1% of the points paired, 3 passes took 20-25% fewer
        outer iterations and 1.14-1.24x less time; with 1%, 15 instead of 18 outer iterations
        at n = 1e6 (1.04x); with 10%, more passes cost more than they saved; at the protocol
        2 passes were 1.01-1.25x faster on the mixture, digits and adult-a1a..a3a.

    joint : bool
        Hinge loss: when the sweeps (or outer iterations) meet the stopping criteria, and on
        a cost-benefit schedule before, take a joint move of all rows along the least-norm
        subgradient with one multiplier per pair (``npkl_dist.solvers.bcd._joint``) wherever it lowers
        the objective; hinge row updates alone can stop at coordinatewise minima that are
        not stationary. The fit stops only where the joint move too changes V by less than
        ``tol`` (relative) and, with ``tol_kkt``, the joint KKT residual is below it. The
        final ``kkt`` of a hinge fit is the joint residual. Other losses ignore it.
    hinge_kkt : bool
        Hinge loss with ``joint`` and without ``tol_kkt``: also require the joint KKT
        residual below :func:`stall_bound` (``tol``), i.e. 100 x tol but at least 1e-6,
        before stopping (default). At the hinge's kinks the steps can shrink below ``tol``
        far from a stationary point: block fits of the papers' protocol stopped there at
        residuals of 2e-3 to 2.5e-2, their objectives up to 2.6% above the optimum, and
        plain sweeps 13-16% above (bench/RESULTS.md, "The hinge's stalls", "The hinge's
        default stop"). ``False``: the step-size rule alone (bcdkl-tnnls2015's stopping
        rule; a fit that stops where it stalled then warns).
    kink_ladder : tuple of float, optional
        Hinge loss with ``joint``: the kink tolerances whose least-norm subgradients each
        joint move tries, taking the best (default ``npkl_dist.solvers.bcd._joint.KINK_LADDER``,
        (1e-6, 1e-3, 1e-1)). ``(1e-6,)``: only the exact kink set, the move of fits before
        2026-11-27, which crept along the kinks from about 2,000 points (bench/RESULTS.md,
        "The hinge's joint move over a ladder of kink tolerances").
    trace : bool
        Method 'sweeps': evaluate the objective and the KKT residual after every sweep
        (``objective_trace``, ``kkt_trace``, ``objective_seconds``; default). Each costs about
        as much as a sweep. With ``trace=False`` they are evaluated only where a stopping
        rule, the hinge's joint-move schedule, ``callback`` or ``on_sweep`` needs them, and
        the final objective and KKT residual once at the end; the iterates (V, sweeps,
        convergence) are bitwise the same. Method 'block' likewise: its objective and KKT
        residual come together from the CG residual plus a pass over the constrained rows
        (with most points constrained, about as much as the rest of an outer iteration).

    Returns
    -------
    FitResult
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
    if resume is not None:
        state, V = resume
        if state.get("method", "sweeps") != method:
            raise ValidationError(
                f"resume: the checkpoint was written by method {state.get('method', 'sweeps')!r}, "
                f"this fit uses method {method!r}; resume with the run's own configuration"
            )
        V = np.ascontiguousarray(V, dtype=problem.dtype)
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
        library_start = V0 is None
        if V0 is None and start == "coarse":  # in the internal order, from the prepared L
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
                        # residual: 9.9e-3 after a move from below 1e-3, measured)

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
    # sweeps need hundreds (bench/RESULTS.md, "Plain sweeps vs block solves on real data"),
    # and on the hinge they end at an equal or lower objective ("The hinge's stalls")
    block_hint = (
        method == "sweeps"
        and problem.loss != "linear"
        and getattr(executor, "supports_block", False)
    )
    if not result.converged:
        hint = ", or try method='block' (npkl fit --method block)" if block_hint else ""
        warnings.warn(
            f"bcd: stopped after max_sweeps={max_sweeps} with relative change "
            f"{result.change_trace[-1]:.3g} (tol={tol:g}), KKT residual {result.kkt:.3g}"
            f"{'' if tol_kkt is None else f' (tol_kkt={tol_kkt:g})'}; raise max_sweeps "
            f"(npkl fit --max-sweeps, [model] max_sweeps) to converge further{hint}",
            ConvergenceWarning,
            stacklevel=2,
        )
    elif tol_kkt is None and tol > 0 and result.kkt > stall_bound(tol):
        hint = (
            " or try method='block' (npkl fit --method block; on the hinge it ends at an "
            "equal or lower objective)"
            if block_hint
            else ""
        )
        warnings.warn(
            f"bcd: stopped on the step-size rule (relative change < tol={tol:g}) with KKT "
            f"residual {result.kkt:.3g}, above {stall_bound(tol):.3g} ({STALL_KKT_FACTOR:g} x "
            f"tol, at least {STALL_KKT_MIN:g}): the fit stalled short of a stationary point "
            f"(coordinate steps can, at the hinge's kinks), and "
            f"its objective may be well above the optimum; pass tol_kkt (npkl fit --tol-kkt) "
            f"to also require a small residual{' (or hinge_kkt=True, the default)' if use_joint else ''}{hint}",
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
            f"start='random' (npkl fit --start random) or report this start as a bug",
            ConvergenceWarning,
            stacklevel=3,
        )


def _joint_step(session, prep, result, sweep, obj, ladder=None):
    """Hinge loss: take the joint move (``npkl_dist.solvers.bcd._joint``) if it lowers the objective by
    more than float64's rounding (the move and its decrease are computed in float64 for
    every dtype; with float32's epsilon, 1.2e-5 x |f|, the guard refused the tail's moves and
    float32 hinge fits stalled at KKT 2e-4: bench/RESULTS.md, "float32 block fits").
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
