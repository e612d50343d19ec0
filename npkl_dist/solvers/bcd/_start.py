"""BCD's starts (spectral, coarse, coarse-free, propagate, random, or a given V), each completed
to full numerical rank (docs/decisions/rank-deficient-starts.md)."""

from __future__ import annotations

import warnings

import numpy as np
import pyamg
from scipy.sparse.linalg import lobpcg

from ..._errors import ValidationError
from ...linalg._blas import _OneBlasThread
from ...linalg._rowops import take_rows
from ...problem._problem import NPKLProblem
from .._plan import _split
from ..block._layout import free_count
from ..block._precond import HIERARCHY_KEY, free_hierarchy, seeded_global_random
from ..block._session import PREFAULT_MIN_ENTRIES, Prefault, session_buffers
from ._coarse_start import (
    FREE_MIN_FRACTION,
    coarse_start,
    free_basis,
    free_start,
    start_scale,
)
from ._local import LocalBCD
from ._rank import complete_rank
from ._setup import _build, _resolve_method

STARTS = ("auto", "random", "propagate", "spectral", "coarse", "coarse-free")


def resolve_start(
    start: str, method: str, problem: NPKLProblem | None = None, n_free: int | None = None
) -> str:
    """start='auto' (fit_bcd's default): for block solves 'coarse-free' where at least
    ``_coarse_start.FREE_MIN_FRACTION`` of the points are in no pair (and at least 2 rank of
    them), else 'coarse'; 'random' (the paper's) for plain sweeps, whose replication runs
    keep bcdkl-tnnls2015's Alg. 1 (docs/decisions/coarse-start-and-c-passes.md). ``problem``:
    needed for block solves; ``n_free``: its number of points in no pair, if known (a block
    layout's)."""
    if start == "auto":
        if method != "block":
            return "random"

        if problem is not None:
            if n_free is None:
                n_free = free_count(problem)
            if n_free >= FREE_MIN_FRACTION * problem.n_points and n_free >= 2 * problem.rank:
                return "coarse-free"
        return "coarse"
    return start


def initial_V(
    problem: NPKLProblem, rng: np.random.Generator, start: str = "random", L_precond=None
) -> np.ndarray:
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
        (``npkl_dist.solvers.bcd._coarse_start``). The aggregation visits rows in order: here the
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
    by :func:`~npkl_dist.solvers.bcd._rank.complete_rank`, since no fit leaves its start's column span.
    """
    if start not in STARTS or start == "auto":
        raise ValidationError(
            f"start: {start!r} is not one of {', '.join(STARTS[1:])} ('auto' is resolved by "
            f"fit_bcd from its method)"
        )
    return full_rank_start(_initial_V(problem, rng, start, L_precond), problem)


def full_rank_start(V: np.ndarray, problem: NPKLProblem) -> np.ndarray:
    """V completed to numerical rank ``problem.rank`` (:func:`~npkl_dist.solvers.bcd._rank.complete_rank`;
    V itself where it has it), rows projected back on the linear loss's ball."""
    V, added = complete_rank(V, completion_seed(problem))
    if added and problem.loss == "linear":
        norms = np.linalg.norm(V, axis=1)
        over = norms > problem.bound
        V[over] *= (problem.bound / norms[over])[:, None].astype(V.dtype)
    return V


def completion_seed(problem: NPKLProblem) -> np.random.SeedSequence:
    """The seed of :func:`~npkl_dist.solvers.bcd._rank.complete_rank` for a start of ``problem``: its own
    stream, so that a start of full rank leaves ``problem.seed``'s draws as they were."""
    return np.random.SeedSequence([int(problem.seed), 72])


def _initial_V(
    problem: NPKLProblem, rng: np.random.Generator, start: str, L_precond=None
) -> np.ndarray:
    n, r = problem.n_points, problem.rank
    if start == "coarse-free":  # draws nothing from rng
        if problem.loss == "linear":
            raise ValidationError(
                "start: 'coarse-free' is a block fit's start, and block fits do not take the "
                "linear loss; use start='coarse'"
            )
        _, layout, prep = _build(problem, "block", LocalBCD(), "rcm", "blocks", None)
        V = _internal_free_start(problem, prep, layout, None)
        return take_rows(V, layout.rank_of, problem.dtype)
    if start == "coarse":  # draws nothing from rng
        off, diag = _split(problem.L.tocsr())
        c = problem.constraints
        V = coarse_start(
            off.indptr,
            off.indices,
            off.data,
            diag,
            c.i,
            c.j,
            c.t,
            rank=r,
            loss=problem.loss,
            gamma=problem.gamma,
            bound=problem.bound,
        )[0]
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
    L = problem.L.astype(np.float64).tocsr()
    n, r = X0.shape
    if n <= 5 * r:  # LOBPCG needs n >> r; a dense eigensolve is cheap here
        with _OneBlasThread():  # the thread count changes LAPACK's rounding (bottom_eigenpairs)
            E = np.linalg.eigh(L.toarray())[1][:, :r]
    else:
        with seeded_global_random():
            M = pyamg.smoothed_aggregation_solver(L, symmetry="hermitian").aspreconditioner()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # LOBPCG's own tolerance chatter
            _, E = lobpcg(L, X0, M=M, largest=False, tol=1e-4, maxiter=200)
    c = problem.constraints
    a = float(np.sum(E * (L @ E)))
    z = c.t * np.einsum("kr,kr->k", E[c.i], E[c.j])
    max_row2 = float(np.max(np.sum(E * E, axis=1))) if problem.loss == "linear" else 0.0
    s = start_scale(
        problem.loss,
        problem.gamma,
        problem.bound,
        a,
        z,
        max_row2,
        n,
        r,
        min_row=0.0,
        endpoint=False,
    )
    return E * np.sqrt(s)


def _internal_coarse_start(problem: NPKLProblem, prep, cache) -> np.ndarray:
    """start='coarse' in a fit's internal order, from its prepared L and pairs; the
    aggregation levels and eigenpairs are kept in a fit setup's cache for the next fit
    (they depend on L and the rank only)."""

    key = ("coarse start", int(problem.rank))
    V, basis = coarse_start(
        prep.indptr,
        prep.indices,
        prep.data,
        prep.diag,
        prep.pi,
        prep.pj,
        prep.pt,
        rank=problem.rank,
        loss=problem.loss,
        gamma=problem.gamma,
        bound=problem.bound,
        dtype=problem.dtype,
        basis=None if cache is None else cache.get(key),
    )
    if cache is not None:
        cache[key] = basis
    return V


def _start_prefault(
    problem: NPKLProblem, method: str, executor, extrapolate: bool, inner_maxiter: int
):
    """A :class:`~npkl_dist.solvers.block._session.Prefault` of the block session's work arrays, started
    before the set-up, for an in-process block fit with at least ``PREFAULT_MIN_ENTRIES``
    entries in V; else None. (``method`` is resolved as ``_build`` resolves it.)"""
    if not getattr(executor, "prefaults", False):
        return None
    if _resolve_method(problem, method, executor) != "block":
        return None

    n, r = problem.n_points, problem.rank
    if n * r < PREFAULT_MIN_ENTRIES:
        return None
    # first: the coarse-free start's E, which the start writes about a second into the
    # set-up (page faults there cost: docs/decisions/block-fit-at-1e6.md)
    specs = {START_BUFFER: ((n, r), np.dtype(np.float64))}
    specs.update(
        session_buffers(
            n, free_count(problem), r, problem.dtype, bool(extrapolate), int(inner_maxiter)
        )
    )
    # last: the fit's result V, written when the relabelling is undone at the very end (a
    # fresh array's page faults there: docs/decisions/block-fit-at-1e6.md).
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


def _internal_free_start(
    problem: NPKLProblem, prep, layout, cache, share: bool = False, out=None
) -> np.ndarray:
    """start='coarse-free' in a block fit's internal (U-first) order. ``cache``: a fit
    setup's or a standalone in-process fit's own; its basis is kept there for the next fit
    (it depends on L and the rank only), and with ``share`` (an in-process session follows)
    the hierarchy is left for the session's preconditioner (``_blocksolve.HIERARCHY_KEY``),
    which takes it. ``out``: an (n, rank) float64 array for the start's E (a prefaulted
    one), or None."""

    n_free = int(layout.n_free)
    if n_free < 1:
        raise ValidationError(
            "start: 'coarse-free' needs at least one point in no constraint pair (every point "
            "here is in one); use start='coarse'"
        )
    key = ("coarse-free start", int(problem.rank))
    basis = None if cache is None else cache.get(key)
    if basis is None:
        h = free_hierarchy(prep, n_free, cache)
        basis = free_basis(h, problem.rank)
        if cache is not None:
            cache[key] = basis
            if share:
                cache[HIERARCHY_KEY] = h
    return free_start(
        prep.indptr,
        prep.indices,
        prep.data,
        prep.diag,
        n_free,
        prep.pi,
        prep.pj,
        prep.pt,
        basis,
        rank=problem.rank,
        loss=problem.loss,
        gamma=problem.gamma,
        bound=problem.bound,
        dtype=problem.dtype,
        out=out,
    )
