"""Block coordinate descent for NPKL (bcdkl-tnnls2015 Alg. 1), colour-ordered.

Each sweep visits the colours (steps) of the plan in a seeded random order; within a colour
the units (the colour's rows in one block, see ``_plan``) run concurrently, each row by row.
Every column gets its exact minimiser (see ``_kernels``), so the objective never increases.
Method 'block' (``_blocksolve``) solves the unconstrained rows together instead.
Stopping: ||V(t) - V(t-1)||_F / ||V(t)||_F < tol, or ``max_sweeps``.
"""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import dataclass, field
from numbers import Real

import numpy as np

from ._errors import ConvergenceWarning, ValidationError, fmt_value
from ._kernels import take_rows
from ._plan import SCHEMES, make_plan, prepare, relabel_order
from ._problem import NPKLProblem
from ._rank import CERTIFICATE_TOL, complete_rank, descent_certificate, numerical_rank

__all__ = ["FitResult", "FitSetup", "fit_bcd", "fit_setup", "initial_V", "choose_method",
           "METHODS", "STARTS"]


#: method='auto' picks block solves from this many points on, for every loss but the linear
#: one (its row constraints), with an executor that runs them.
#:
#: * The square loss and the squared hinge. Measured in bench/RESULTS.md (bench_block.py):
#:   they reach the 1e-4 gap faster by block solves at every constrained fraction tried, the
#:   papers' protocol (~91% of the points constrained) included, at n = 2e4 (1.4x, 2.7x),
#:   1e5 (2.7x, 3.4x) and 1e6 (square, > 1.2x). From 1e3 to 1e4 ("auto below 20,000 points",
#:   medians of 3) block solves are 4-22x faster at 1% and 10% constrained and 3.0-4.4x for
#:   the squared hinge at the protocol. The square loss at the protocol reaches the 1e-4 gap
#:   0.5-1.2x as fast by block solves, but a fit stops on the step-size rule, not at a gap.
#:   To that rule (tol = 1e-5) block solves were faster on all 8 problems measured from 1,000
#:   points, 1.3-4.2x traced and 1.2-3.2x untraced ("The square loss at the protocol: fits to
#:   the stopping rule"). From 200 to 1,000 points (sonar, glass, heart, breast cancer and the
#:   500-point mixture, both losses, medians of 3) traced fits to that rule were 1.01-2.85x
#:   faster on all 10 problems, untraced ones 0.69-2.46x, and block fits needed 50-966
#:   iterations against 151 to more than 5,000 sweeps ("Fits that end inside their cap").
#:   Below 200 points sweeps were faster in most fits.
#: * The hinge. At the protocol, plain sweeps stop on the step-size rule where they stall:
#:   on the mixture at n = 500 to 2e4 their objective ends 13-15% above the block fit's (KKT
#:   residuals 4-5e-2), and on the paper sets from 200 points it ends equal or up to 4% above.
#:   Sweeps / block time to their stops: 0.2-2.1x, the sweeps' stop being the stall ("The
#:   hinge's stalls"). (Measured to the 1e-4 gap with tol = 0 instead, so that neither
#:   method stopped, sweeps had reached the gap first at n = 2e4 and block solves at 1e5.)
#:   With the hinge's default stop (``hinge_kkt``: a small joint KKT residual too), block
#:   solves at any size: below 200 points (soybean, dbl-spiral, iris, wine, chessboard) block
#:   fits stopped on the rule within 1,000 outer iterations on 4 of 5, plain sweeps on 1 (the
#:   other four at the cap, iris 3.2e-4 and dbl-spiral 4.6e-5 in residual) ("The hinge's
#:   default stop"). With the joint move over the kink ladder (``kink_ladder``), block fits
#:   stop on the rule on 5 of 5 there, plain sweeps on 4 (dbl-spiral at the cap); over 13
#:   problems up to 5,000 points block fits stop on the rule on 12, sweeps on 9, in 0.4-1.5x
#:   the sweeps' time where both stop ("The hinge's joint move over a ladder of kink
#:   tolerances").
AUTO_SMALL_MIN_POINTS = 200
METHODS = ("auto", "sweeps", "block")
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
STARTS = ("auto", "random", "propagate", "spectral", "coarse", "coarse-free")


def resolve_start(start: str, method: str, problem: NPKLProblem | None = None,
                  n_free: int | None = None) -> str:
    """start='auto' (fit_bcd's default): for block solves 'coarse-free' where at least
    ``_coarse_start.FREE_MIN_FRACTION`` of the points are in no pair (and at least 2 rank of
    them), else 'coarse'; 'random' (the paper's) for plain sweeps, whose replication runs
    keep bcdkl-tnnls2015's Alg. 1. At n = 1e6 (1% constrained) 'coarse' saved 10 of 28 outer
    iterations, and 'coarse-free' needs the same 18 without a hierarchy of its own
    (bench/RESULTS.md, "A coarse spectral start for block fits" and "The coarse start from
    the block solver's own hierarchy"). ``problem``: needed for block solves; ``n_free``:
    its number of points in no pair, if known (a block layout's)."""
    if start == "auto":
        if method != "block":
            return "random"
        from ._blocksolve import free_count
        from ._coarse_start import FREE_MIN_FRACTION

        if problem is not None:
            if n_free is None:
                n_free = free_count(problem)
            if n_free >= FREE_MIN_FRACTION * problem.n_points and n_free >= 2 * problem.rank:
                return "coarse-free"
        return "coarse"
    return start


def stall_bound(tol: float) -> float:
    """The KKT residual above which a fit stopped on the step-size rule ``tol`` has stalled
    (and below which the hinge's default stop needs its joint residual)."""
    return max(STALL_KKT_FACTOR * tol, STALL_KKT_MIN)


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
        Objective after each sweep (method 'block': after each outer iteration). Hinge loss:
        before that sweep's joint move, if it took one (the stopping rules and the moves'
        schedule read it so); the last entry is always that of the returned V.
    change_trace : list of float
        ||V(t) - V(t-1)|| / ||V(t)|| after each sweep.
    kkt_trace : list of float
        Scaled KKT residual after each sweep (see ``npkl_dist._kkt``); empty where the
        executor does not compute it per sweep (the final value is in ``kkt``).
    kkt : float
        KKT residual of the returned V.
    sweep_seconds : list of float
        Wall time of each sweep (the colour steps only; the objective is timed apart).
    objective_seconds : list of float
    cg_iterations : list of int
        Method 'block': conjugate-gradient iterations of each outer iteration.
    joint_moves : list of int
        Hinge loss: the sweeps after which a joint move (``npkl_dist._joint``) was taken.
    fit_seconds : float
        Whole fit, including relabelling, colouring and set-up.
    converged : bool
    n_colours : int
        Colours (steps) of a sweep.
    method : {'sweeps', 'block'}
    start : str
    numerical_rank : int
        Singular values of V above ``_rank.RANK_RTOL`` times the largest.
    descent_curvature : float
        Where ``numerical_rank`` is below half the rank: the smallest Rayleigh quotient u'Su
        found for S = grad_K f (``_rank.descent_certificate``); negative proves that V is a
        rank-deficient saddle, not the optimum (a ConvergenceWarning says so). NaN otherwise.
    """

    V: np.ndarray
    objective: float
    objective_initial: float
    objective_trace: list = field(default_factory=list)
    change_trace: list = field(default_factory=list)
    sweep_seconds: list = field(default_factory=list)
    objective_seconds: list = field(default_factory=list)
    kkt_trace: list = field(default_factory=list)
    cg_iterations: list = field(default_factory=list)
    joint_moves: list = field(default_factory=list)
    kkt: float = float("nan")
    fit_seconds: float = 0.0
    setup_seconds: float = 0.0
    converged: bool = False
    n_colours: int = 0
    solver: str = "bcd"
    method: str = "sweeps"
    start: str = "random"
    numerical_rank: int = -1
    descent_curvature: float = float("nan")

    @property
    def n_sweeps(self) -> int:
        # fit_bcd(trace=False) keeps only the final objective; change_trace has every sweep
        return max(len(self.objective_trace), len(self.change_trace))


def initial_V(problem: NPKLProblem, rng: np.random.Generator, start: str = "random",
              L_precond=None) -> np.ndarray:
    """Starting factor in original order.

    start='random' (the paper's): N(0, 1/r) entries, rows of norm about 1.
    start='propagate': the same random rows at constrained points and zero elsewhere; the
        first block solve then propagates them over the graph (their harmonic extension).
    start='spectral': the r bottom eigenvectors of L (LOBPCG, preconditioned by
        smoothed-aggregation AMG), scaled by the factor that minimises the objective along
        them (a convex one-dimensional problem in the squared scale).
    start='coarse': the r bottom eigenvectors of L's Galerkin operator on a coarse level of a
        plain-aggregation hierarchy (at most ``_coarse_start.MAX_COARSE`` aggregates),
        prolongated (a smoothed candidate's shape on each aggregate), scaled as the spectral start
        (``npkl_dist._coarse_start``). The aggregation visits rows in order: here the
        original order, in :func:`fit_bcd` the fit's internal order. The scale is at least
        that of a mean row norm 0.1 (V = 0 is a saddle no step leaves).

    start='coarse-free': the r bottom eigenvectors of L_UU's Galerkin operator on the coarsest
        level with at least 2r rows of the block solver's own AMG hierarchy (U: the points in no pair), prolongated,
        the constrained rows filled by one Jacobi step on L V = 0 from the others, scaled as
        'coarse'. Computed in the internal order of a default block fit (reverse
        Cuthill-McKee, constrained rows last), where a block fit shares the hierarchy with
        its preconditioner; needs at least one unconstrained point.

    For the linear loss rows are projected on the ball ||v_i|| <= b.

    Every start has numerical rank ``problem.rank``: one of lower rank (a coarse level with
    fewer aggregates than the rank, 'propagate' with fewer constrained points) is completed
    by :func:`~npkl_dist._rank.complete_rank`, since no fit leaves its start's column span.
    """
    if start not in STARTS or start == "auto":
        raise ValidationError(
            f"start: {start!r} is not one of {', '.join(STARTS[1:])} ('auto' is resolved by "
            f"fit_bcd from its method)")
    return full_rank_start(_initial_V(problem, rng, start, L_precond), problem)


def full_rank_start(V: np.ndarray, problem: NPKLProblem) -> np.ndarray:
    """V completed to numerical rank ``problem.rank`` (:func:`~npkl_dist._rank.complete_rank`;
    V itself where it has it), rows projected back on the linear loss's ball."""
    V, added = complete_rank(V, completion_seed(problem))
    if added and problem.loss == "linear":
        norms = np.linalg.norm(V, axis=1)
        over = norms > problem.bound
        V[over] *= (problem.bound / norms[over])[:, None].astype(V.dtype)
    return V


def completion_seed(problem: NPKLProblem) -> np.random.SeedSequence:
    """The seed of :func:`~npkl_dist._rank.complete_rank` for a start of ``problem``: its own
    stream, so that a start of full rank leaves ``problem.seed``'s draws as they were."""
    return np.random.SeedSequence([int(problem.seed), 72])


def _initial_V(problem: NPKLProblem, rng: np.random.Generator, start: str,
               L_precond=None) -> np.ndarray:
    n, r = problem.n_points, problem.rank
    if start == "coarse-free":  # draws nothing from rng
        from .executors import InProcessExecutor

        if problem.loss == "linear":
            raise ValidationError(
                "start: 'coarse-free' is a block fit's start, and block fits do not take the "
                "linear loss; use start='coarse'")
        _, layout, prep = _build(problem, "block", InProcessExecutor(), "rcm", "blocks", None)
        V = _internal_free_start(problem, prep, layout, None)
        return take_rows(V, layout.rank_of, problem.dtype)
    if start == "coarse":  # draws nothing from rng
        from ._coarse_start import coarse_start
        from ._plan import _split

        off, diag = _split(problem.L.tocsr())
        c = problem.constraints
        V = coarse_start(off.indptr, off.indices, off.data, diag, c.i, c.j, c.t, rank=r,
                         loss=problem.loss, gamma=problem.gamma, bound=problem.bound)[0]
        return V.astype(problem.dtype, copy=False)
    V = rng.standard_normal((n, r))
    V /= np.sqrt(r)  # in place: at n = 1e6 each (n, r) temporary is 128 MB of fresh pages
    if start == "propagate":
        keep = np.zeros(n, bool)
        keep[problem.constraints.i] = True
        keep[problem.constraints.j] = True
        V[~keep] = 0.0
    elif start == "spectral":
        V = _spectral_start(problem, V)
    if problem.loss == "linear":
        norms = np.linalg.norm(V, axis=1)
        over = norms > problem.bound
        V[over] *= (problem.bound / norms[over])[:, None]
    return V.astype(problem.dtype, copy=False)


def _spectral_start(problem: NPKLProblem, X0: np.ndarray) -> np.ndarray:
    import pyamg
    from scipy.sparse.linalg import lobpcg

    from ._coarse_start import start_scale

    L = problem.L.astype(np.float64).tocsr()
    n, r = X0.shape
    if n <= 5 * r:  # LOBPCG needs n >> r; a dense eigensolve is cheap here
        E = np.linalg.eigh(L.toarray())[1][:, :r]
    else:
        from ._blocksolve import seeded_global_random

        with seeded_global_random():
            M = pyamg.smoothed_aggregation_solver(L, symmetry="hermitian").aspreconditioner()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # LOBPCG's own tolerance chatter
            _, E = lobpcg(L, X0, M=M, largest=False, tol=1e-4, maxiter=200)
    c = problem.constraints
    a = float(np.sum(E * (L @ E)))
    z = c.t * np.einsum("kr,kr->k", E[c.i], E[c.j])
    max_row2 = float(np.max(np.sum(E * E, axis=1))) if problem.loss == "linear" else 0.0
    s = start_scale(problem.loss, problem.gamma, problem.bound, a, z, max_row2, n, r,
                    min_row=0.0, endpoint=False)
    return E * np.sqrt(s)


def _internal_coarse_start(problem: NPKLProblem, prep, cache) -> np.ndarray:
    """start='coarse' in a fit's internal order, from its prepared L and pairs; the
    aggregation levels and eigenpairs are kept in a fit setup's cache for the next fit
    (they depend on L and the rank only)."""
    from ._coarse_start import coarse_start

    key = ("coarse start", int(problem.rank))
    V, basis = coarse_start(prep.indptr, prep.indices, prep.data, prep.diag, prep.pi,
                            prep.pj, prep.pt, rank=problem.rank, loss=problem.loss,
                            gamma=problem.gamma, bound=problem.bound, dtype=problem.dtype,
                            basis=None if cache is None else cache.get(key))
    if cache is not None:
        cache[key] = basis
    return V


#: ``c_passes='auto'``: passes over the constrained rows per outer iteration of a block fit
#: where at most ``C_PASSES_MAX_FRACTION`` of the points are constrained, and
#: ``C_PASSES_DENSE`` where more than ``C_PASSES_DENSE_FRACTION`` are (the papers' protocol
#: pairs about 91%); 1 in between, where the passes cost more than they saved (10% on the
#: 1e5 mixture: 0.79-0.99x). bench/RESULTS.md, "more passes over the constrained rows".
C_PASSES_AUTO = 3
C_PASSES_MAX_FRACTION = 0.02
C_PASSES_DENSE = 2
C_PASSES_DENSE_FRACTION = 0.5


def resolve_c_passes(c_passes, problem: NPKLProblem, extrapolate: bool = True,
                     n_free: int | None = None) -> int:
    """``c_passes`` of :func:`fit_bcd` as an int (checked; 'auto' resolved). ``n_free``: the
    problem's number of points in no pair, if known (a block layout's)."""
    if isinstance(c_passes, str) and c_passes == "auto":
        if not extrapolate:
            return 1
        if n_free is None:
            from ._blocksolve import free_count

            n_free = free_count(problem)
        n = problem.n_points
        paired = n - int(n_free)
        if paired <= C_PASSES_MAX_FRACTION * n:
            return C_PASSES_AUTO
        return C_PASSES_DENSE if paired > C_PASSES_DENSE_FRACTION * n else 1
    if isinstance(c_passes, bool) or not isinstance(c_passes, (int, np.integer)) \
            or c_passes < 1:
        raise ValidationError(
            f"c_passes: expected a positive integer or 'auto', got {fmt_value(c_passes)}")
    if c_passes > 1 and not extrapolate:
        raise ValidationError(
            f"c_passes: {int(c_passes)} passes need extrapolate=True (the step-size rule then "
            f"measures the whole outer step); pass c_passes=1 or extrapolate=True")
    return int(c_passes)


def _start_prefault(problem: NPKLProblem, method: str, executor, extrapolate: bool,
                    inner_maxiter: int):
    """A :class:`~npkl_dist._blocksolve.Prefault` of the block session's work arrays, started
    before the set-up, for an in-process block fit with at least ``PREFAULT_MIN_ENTRIES``
    entries in V; else None. (``method`` is resolved as ``_build`` resolves it.)"""
    if not getattr(executor, "prefaults", False):
        return None
    if _resolve_method(problem, method, executor) != "block":
        return None
    from ._blocksolve import PREFAULT_MIN_ENTRIES, Prefault, free_count, session_buffers

    n, r = problem.n_points, problem.rank
    if n * r < PREFAULT_MIN_ENTRIES:
        return None
    # first: the coarse-free start's E, which the start writes about a second into the
    # set-up (a fresh 128 MB array there cost 0.14-0.17 s of page faults at n = 1e6)
    specs = {START_BUFFER: ((n, r), np.dtype(np.float64))}
    specs.update(session_buffers(n, free_count(problem), r, problem.dtype, bool(extrapolate),
                                 int(inner_maxiter)))
    # last: the fit's result V, written when the relabelling is undone at the very end (a
    # fresh 128 MB array there cost 0.17 s at n = 1e6 against 0.02 s with its pages touched).
    # With extrapolation the session's S, dead by then and of V's shape and dtype, takes it
    # (``_result_buffer``): one array fewer to fault in.
    if not extrapolate:
        specs[RESULT_BUFFER] = ((n, r), np.dtype(problem.dtype))
    return Prefault(specs)


def _result_buffer(own_cache, prefault, shape, dtype):
    """An array with touched pages for the fit's result V, or None (a fresh one then): the
    session's S where the fit's cache is its own (a standalone in-process block fit: the
    cache dies with the fit, and S, the last outer step, is not read after the last one),
    else the prefault's ``RESULT_BUFFER``."""
    if own_cache is not None:
        S = own_cache.pop(("buffer", "S"), None)
        if S is not None and S.shape == tuple(shape) and S.dtype == np.dtype(dtype):
            return S
    if prefault is not None:
        return prefault.take(RESULT_BUFFER, shape, dtype)
    return None


#: the Prefault's name for a block fit's result V (in the points' order)
RESULT_BUFFER = "result V"

#: the Prefault's name for the coarse-free start's E (float64, the internal order)
START_BUFFER = "start E"


def _internal_free_start(problem: NPKLProblem, prep, layout, cache, share: bool = False,
                         out=None) -> np.ndarray:
    """start='coarse-free' in a block fit's internal (U-first) order. ``cache``: a fit
    setup's or a standalone in-process fit's own; its basis is kept there for the next fit
    (it depends on L and the rank only), and with ``share`` (an in-process session follows)
    the hierarchy is left for the session's preconditioner (``_blocksolve.HIERARCHY_KEY``),
    which takes it. ``out``: an (n, rank) float64 array for the start's E (a prefaulted
    one), or None."""
    from ._blocksolve import HIERARCHY_KEY, free_hierarchy
    from ._coarse_start import free_basis, free_start

    n_free = int(layout.n_free)
    if n_free < 1:
        raise ValidationError(
            "start: 'coarse-free' needs at least one point in no constraint pair (every point "
            "here is in one); use start='coarse'")
    key = ("coarse-free start", int(problem.rank))
    basis = None if cache is None else cache.get(key)
    if basis is None:
        h = free_hierarchy(prep, n_free, cache)
        basis = free_basis(h, problem.rank)
        if cache is not None:
            cache[key] = basis
            if share:
                cache[HIERARCHY_KEY] = h
    return free_start(prep.indptr, prep.indices, prep.data, prep.diag, n_free, prep.pi,
                      prep.pj, prep.pt, basis, rank=problem.rank, loss=problem.loss,
                      gamma=problem.gamma, bound=problem.bound, dtype=problem.dtype, out=out)


def choose_method(problem: NPKLProblem, executor=None) -> str:
    """method='auto': block solves where they were measured better (see
    ``AUTO_SMALL_MIN_POINTS`` for the measurements).

    Plain sweeps move information one graph hop per sweep, so on graphs whose constrained
    points are sparse they need hundreds of sweeps; the block solve couples every
    unconstrained row at once. Block solves need a loss without row constraints (not
    'linear') and an executor that runs them (``supports_block``: the in-process and the
    Dask executors). The rule: block solves for the hinge at any size, and from
    ``AUTO_SMALL_MIN_POINTS`` points on for the square loss and the squared hinge; plain
    sweeps otherwise. (With the hinge's default stop, which needs a small joint KKT residual,
    block fits of the paper sets below 200 points reached it within 1,000 outer iterations
    on 4 of 5, plain sweeps on 1: bench/RESULTS.md, "The hinge's default stop".)
    """
    n, loss = problem.n_points, problem.loss
    if loss == "linear" or (n < AUTO_SMALL_MIN_POINTS and loss != "hinge"):
        return "sweeps"
    if executor is not None and not getattr(executor, "supports_block", False):
        return "sweeps"
    return "block"


#: key of a FitSetup's cache marking a fit in progress
_IN_USE = "in use"


def _resolve_method(problem: NPKLProblem, method: str, executor) -> str:
    """``method`` with 'auto' resolved, checked against the loss and the executor."""
    if method not in METHODS:
        raise ValidationError(f"method: {method!r} is not one of {', '.join(METHODS)}")
    if method == "auto":
        method = choose_method(problem, executor)
    if method == "block":
        from ._blocksolve import check_method_loss

        check_method_loss(problem.loss)
        if not getattr(executor, "supports_block", False):
            raise ValidationError(
                f"method: the {getattr(executor, 'name', type(executor).__name__)} executor "
                f"does not run block solves; use method='sweeps' with it"
            )
    return method


def _build(problem: NPKLProblem, method: str, executor, relabel: str, scheme: str, plan):
    """The set-up of a fit: (method, layout, prepared problem). A sweep fit's layout is its
    plan (colours and blocks); a block fit's is the U-first order of the plan's locality
    order, with L permuted once for both."""
    method = _resolve_method(problem, method, executor)
    if scheme not in SCHEMES:  # checked here too: a block solve makes no sweep plan
        raise ValidationError(f"scheme: {scheme!r} is not one of {SCHEMES}")
    if method == "block":
        from ._blocksolve import block_layout

        # a block solve needs the plan's locality order only (not its blocks and colours),
        # and L permuted once into the U-first order
        order = plan.order if plan is not None else relabel_order(problem, relabel)
        layout, Lp = block_layout(problem, order, return_matrix=True)
        prep = prepare(problem, layout, Lp)
        del Lp
    else:
        if plan is not None:
            layout, Lp = plan, None
        else:  # L permuted once for the plan and prepare
            layout, Lp = make_plan(problem, relabel=relabel, scheme=scheme,
                                   return_matrix=True)
        prep = prepare(problem, layout, Lp)
        del Lp
    return method, layout, prep


class FitSetup:
    """What :func:`fit_bcd` builds before its first sweep, kept for more fits of one graph and
    one constraint set (:func:`fit_setup`).

    A fit's set-up depends on the Laplacian and the constraint pairs only, not on gamma, the
    loss's parameters, the rank or the start: the locality order (reverse Cuthill-McKee), the
    layout (sweeps: blocks and colours; block solves: U-first order and the colours of the
    constrained rows), L and the pairs in that order, and for in-process block solves the
    U-block operator, the AMG hierarchy on L_UU and the fit's work arrays, and for the coarse
    starts (block fits' default) their prolongators and eigenpairs. At n = 1e6 that
    is about 2.5 s, a third of a block fit (bench/RESULTS.md). Passing the setup to
    ``fit_bcd(..., setup=...)`` skips all of it; the iterates are bitwise those of a fit
    that builds its own set-up (tests/test_fit_setup.py).

    One setup serves one fit at a time (the work arrays are reused, not copied): fits that
    share it must run one after another. It holds the permuted graph, the hierarchy and,
    after a block fit, about eight n x r arrays: drop it when done. The Dask executor reuses
    the plan and the permuted problem; its workers build their own preconditioners.
    """

    def __init__(self, problem: NPKLProblem, method: str, layout, prep, executor):
        self.method = method
        self.layout = layout
        self.prep = prep
        self.n_points = problem.n_points
        self.dtype = np.dtype(problem.dtype)
        self._L = problem.L
        c = problem.constraints
        self._pairs = (c.i.copy(), c.j.copy(), c.t.copy())
        self._executor_kind = type(executor)
        #: the U-block operator, preconditioners and work arrays of in-process block solves;
        #: every fit through the setup marks it in use while it runs
        self.cache = {}

    def _same_graph(self, L) -> bool:
        if L is self._L:
            return True
        a, b = self._L, L
        if a.shape != b.shape or a.nnz != b.nnz or a.format != b.format \
                or a.format not in ("csr", "csc"):
            return a.shape == b.shape and (abs(a - b)).nnz == 0
        return all(x is y or np.array_equal(x, y) for x, y in
                   ((a.indptr, b.indptr), (a.indices, b.indices), (a.data, b.data)))

    def bind(self, problem: NPKLProblem, method: str, executor):
        """(method, layout, prepared problem) for ``problem``, which must have this setup's
        graph, constraints and dtype; gamma, the loss and its bound come from ``problem``."""
        import dataclasses

        from ._plan import LOSS_CODES

        if problem.n_points != self.n_points or np.dtype(problem.dtype) != self.dtype:
            raise ValidationError(
                f"setup: made for {self.n_points} points in {self.dtype}, the problem has "
                f"{problem.n_points} in {np.dtype(problem.dtype)}; make a setup for this "
                f"problem with fit_setup(problem)")
        c = problem.constraints
        if not all(np.array_equal(x, y) for x, y in zip(self._pairs, (c.i, c.j, c.t))):
            raise ValidationError(
                "setup: made for other constraint pairs than the problem's (a setup fixes "
                "the pairs; only gamma, the loss, the rank and the start may change); make a "
                "setup for this problem with fit_setup(problem)")
        if not self._same_graph(problem.L):
            raise ValidationError(
                "setup: made for another Laplacian than the problem's; make a setup for this "
                "problem with fit_setup(problem)")
        resolved = _resolve_method(problem, method, executor)
        if resolved != self.method:
            raise ValidationError(
                f"method: the setup was made for method {self.method!r}, this fit resolves "
                f"to {resolved!r}; pass method={self.method!r} or make a setup for it")
        if type(executor) is not self._executor_kind:
            raise ValidationError(
                f"executor: the setup was made for a {self._executor_kind.__name__}, this "
                f"fit runs on a {type(executor).__name__}; make the setup with the fit's "
                f"executor")
        prep = dataclasses.replace(self.prep, loss_code=LOSS_CODES[problem.loss],
                                   gamma=problem.gamma, bound=problem.bound)
        return self.method, self.layout, prep


def fit_setup(problem: NPKLProblem, *, method: str = "auto", executor=None,
              relabel: str = "rcm", scheme: str = "blocks", plan=None) -> FitSetup:
    """Build a fit's set-up once, for several :func:`fit_bcd` calls on one graph and one
    constraint set that differ in gamma, the loss, the rank or the start (what
    :func:`~npkl_dist.select_gamma` does for each fold's grid). See :class:`FitSetup`.

    ``method``, ``executor``, ``relabel``, ``scheme`` and ``plan`` are those of the fits;
    ``method='auto'`` is resolved here and each fit must resolve to the same method.
    """
    if executor is None:
        from .executors import InProcessExecutor

        executor = InProcessExecutor()
    method, layout, prep = _build(problem, method, executor, relabel, scheme, plan)
    return FitSetup(problem, method, layout, prep, executor)


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
    if (not vals or any(isinstance(e, bool) or not isinstance(e, Real) or not np.isfinite(e)
                        or not 0 < e < 1 for e in vals)):
        raise ValidationError(
            f"kink_ladder: expected a non-empty sequence of kink tolerances in (0, 1), e.g. "
            f"(1e-6, 1e-3, 1e-1), got {fmt_value(ladder)}")
    return tuple(float(e) for e in vals)


def _small_fits_on_one_thread(fit):
    """``fit`` (fit_bcd) inside its executor's ``fit_threads`` scope, where it has one (the
    in-process executor: one thread for a small fit). The executor is resolved here as in
    ``fit``."""

    @functools.wraps(fit)
    def wrapper(problem, *args, executor=None, **kwargs):
        if executor is None:
            from .executors import InProcessExecutor

            executor = InProcessExecutor()
        scope = getattr(executor, "fit_threads", None)
        if scope is None:
            return fit(problem, *args, executor=executor, **kwargs)
        with scope(getattr(problem, "n_points", None)):
            return fit(problem, *args, executor=executor, **kwargs)

    return wrapper


@_small_fits_on_one_thread
def fit_bcd(problem: NPKLProblem, *, max_sweeps: int = 1000, tol: float = 1e-5,
            executor=None, relabel: str = "rcm", V0=None, callback=None, plan=None,
            resume=None, on_sweep=None, method: str = "auto", start: str = "auto",
            tol_objective: float | None = None, tol_kkt: float | None = None,
            precond: str = "amg-additive", inner_rtol: float = 0.01, inner_maxiter: int = 1,
            extrapolate: bool = True, scheme: str = "blocks", setup: FitSetup | None = None,
            joint: bool = True, hinge_kkt: bool = True, kink_ladder: tuple | None = None,
            trace: bool = True, c_passes: int | str = "auto") -> FitResult:
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
        Scaled KKT residual (``npkl_dist._kkt``) below which the fit may stop.
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
        with exact updates of the constrained rows (``npkl_dist._blocksolve``).
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
        ``npkl_dist._blocksolve``): the product with L_UU, which gathers neighbour rows,
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
        subgradient with one multiplier per pair (``npkl_dist._joint``) wherever it lowers
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
        joint move tries, taking the best (default ``npkl_dist._joint.KINK_LADDER``,
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
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, (int, np.integer)) or max_sweeps < 1:
        raise ValidationError(f"max_sweeps: expected a positive integer, got {fmt_value(max_sweeps)}")
    _check_tol("tol", tol, allow_none=False)
    _check_tol("tol_objective", tol_objective)
    _check_tol("tol_kkt", tol_kkt)
    if method not in METHODS:
        raise ValidationError(f"method: {method!r} is not one of {', '.join(METHODS)}")
    if start not in STARTS:
        raise ValidationError(f"start: {start!r} is not one of {', '.join(STARTS)}")
    if isinstance(inner_maxiter, bool) or not isinstance(inner_maxiter, (int, np.integer)) \
            or inner_maxiter < 1:
        raise ValidationError(
            f"inner_maxiter: expected a positive integer, got {fmt_value(inner_maxiter)}")
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
        from .executors import InProcessExecutor

        executor = InProcessExecutor()
    if setup is not None:
        if not isinstance(setup, FitSetup):
            raise ValidationError(
                f"setup: expected a FitSetup from fit_setup(problem), got {fmt_value(setup)}")
        if plan is not None:
            raise ValidationError(
                "plan: pass either plan= or setup= (a FitSetup holds its own plan), not both")
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
    start = resolve_start(start, method, problem,
                          n_free=layout.n_free if method == "block" else None)
    if method == "block":  # 'auto' from the layout's count of points in no pair
        c_passes = resolve_c_passes(c_passes, problem, extrapolate, n_free=layout.n_free)
    from .executors import InProcessExecutor

    own_cache = None
    if cache is None and method == "block" and isinstance(executor, InProcessExecutor):
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
        if (method == "block" and width > problem.rank and V.ndim == 2
                and V.shape[1] in (width, 3 * problem.rank)):
            V, extra = (np.ascontiguousarray(V[:, :problem.rank]),
                        np.split(V[:, problem.rank:], V.shape[1] // problem.rank - 1, axis=1))
        elif method == "block" and width > problem.rank and V.shape == (problem.n_points,
                                                                          problem.rank):
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
        result = FitResult(V=V, objective=state["objective_initial"],
                           objective_initial=state["objective_initial"],
                           n_colours=layout.n_colours, method=method, start=start)
        for key in ("objective_trace", "change_trace", "sweep_seconds", "objective_seconds",
                    "kkt_trace", "cg_iterations", "joint_moves"):
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
                    "method='block'); use start='coarse' with plain sweeps")
            out = (None if prefault is None else
                   prefault.take(START_BUFFER, (problem.n_points, problem.rank), np.float64))
            V = _internal_free_start(problem, prep, layout, cache,
                                     share=isinstance(executor, InProcessExecutor), out=out)
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
        if library_start:  # no start of ours may cap the rank (npkl_dist._rank)
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
                "fit_setup(problem)")
        cache[_IN_USE] = True
    try:
        if method == "block":
            opts = {"cache": cache} if cache is not None else {}
            if prefault is not None:
                opts["prefault"] = prefault
            session = executor.block_session(prep, layout, V, precond=precond,
                                             extrapolate=extrapolate,
                                             inner_maxiter=inner_maxiter, **opts)
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
    joint_floor = (stall_bound(tol) if use_joint and hinge_kkt and tol_kkt is None and tol > 0
                   else None)

    def small(k):  # a joint residual the stop accepts
        return (tol_kkt is None or k < tol_kkt) and (joint_floor is None or k < joint_floor)
    # the objective after each sweep: always traced, unless trace=False and nothing reads it
    track_obj = (bool(trace) or tol_objective is not None or use_joint
                 or callback is not None or on_sweep is not None)
    # a block session gives the objective and the KKT residual together (objective_kkt;
    # the KKT part only where it is read: an untraced hinge fit needs the objective alone)
    track_kkt = hasattr(session, "kkt") or method == "block"
    track_kkt = track_kkt and (bool(trace) or tol_kkt is not None)
    # joint-move schedule (hinge); checkpointed so that a resumed fit takes the same moves
    joint_wait, joint_next = (1, 0) if resume is None else (
        int(resume[0].get("joint_wait", 1)), int(resume[0].get("joint_next", 0)))
    try:
        if result is None:
            obj0 = (session.objective_kkt(with_kkt=False)[0] if method == "block"
                    else session.objective())  # the start's objective alone
            result = FitResult(V=V, objective=obj0, objective_initial=obj0,
                               n_colours=layout.n_colours, method=method, start=start)
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
                evaluated = (session.objective_kkt(with_kkt=track_kkt)
                             if track_obj or track_kkt else None)
                obj, kkt = evaluated if evaluated is not None else (None, None)
                obj = obj if track_obj else None
            else:
                obj = session.objective() if track_obj else None
                kkt = session.kkt() if track_kkt else None
            t2 = time.perf_counter()
            change = float(np.sqrt(delta2 / norm2)) if norm2 > 0 else 0.0
            prev = result.objective_trace[-1] if result.objective_trace else result.objective_initial
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
                gain, rel, jkkt = _joint_step(session, prep, result, sweep, obj,
                                              kink_ladder)
                if ok:  # converged only if the joint move changes V by less than tol too
                    ok = rel < tol and small(jkkt)
                    if ok and gain > 0.0 and (tol_kkt is not None or joint_floor is not None):
                        # the residual where the fit would stop: after the move (a tiny move
                        # can change which pairs sit on their kinks, and with them the
                        # residual: 9.9e-3 after a move from below 1e-3, measured)
                        from ._joint import joint_kkt

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
            result.objective_trace[-1] = (session.objective_kkt(with_kkt=False)[0]
                                          if method == "block" else session.objective())
        if not track_obj and result.change_trace:  # trace=False: the final objective, once
            if method == "block":
                # the last iteration's evaluation where tol_kkt made one (the same V)
                obj, final_kkt = evaluated if evaluated is not None else session.objective_kkt()
                result.objective_trace.append(obj)
            else:
                result.objective_trace.append(session.objective())
        V = session.gather()
        if use_joint:
            from ._joint import joint_kkt

            result.kkt = joint_kkt(prep, V)
        elif final_kkt is not None:
            result.kkt = final_kkt
        elif result.kkt_trace:
            result.kkt = result.kkt_trace[-1]
        else:
            from ._kkt import kkt_residual

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
    block_hint = (method == "sweeps" and problem.loss != "linear"
                  and getattr(executor, "supports_block", False))
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
        hint = (" or try method='block' (npkl fit --method block; on the hinge it ends at an "
                "equal or lower objective)" if block_hint else "")
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
    result.objective = result.objective_trace[-1] if result.objective_trace else result.objective_initial
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
            ConvergenceWarning, stacklevel=3)


def _joint_step(session, prep, result, sweep, obj, ladder=None):
    """Hinge loss: take the joint move (``npkl_dist._joint``) if it lowers the objective by
    more than float64's rounding (the move and its decrease are computed in float64 for
    every dtype; with float32's epsilon, 1.2e-5 x |f|, the guard refused the tail's moves and
    float32 hinge fits stalled at KKT 2e-4: bench/RESULTS.md, "float32 block fits").
    Returns (decrease of the objective, relative change ||V' - V|| / ||V|| of the move,
    joint KKT residual before it); zeros for a move not taken."""
    from ._joint import hinge_joint_move

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
