"""A BCD fit's set-up (locality order, layout, permuted problem, block operators), reusable
across fits on one graph and constraint set, and the choice of method (sweeps or block)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..._errors import ValidationError
from ...problem._problem import NPKLProblem
from .._plan import LOSS_CODES, SCHEMES, make_plan, prepare, relabel_order
from ..block._layout import block_layout, check_method_loss
from ._local import LocalBCD


def _executor_kind(executor) -> type:
    """The executor class a setup belongs to. A class may declare in its own body that its
    setups are another's (``setup_kind``): the in-process executor's are BCD's own local
    execution's, which a fit without an executor runs on. Subclasses do not inherit it."""
    return type(executor).__dict__.get("setup_kind", type(executor))


#: method='auto' picks block solves from this many points on, for every loss but the linear
#: one (its row constraints), with an executor that runs them; the hinge at any size
#: (docs/decisions/auto-method.md, docs/decisions/hinge-stopping.md).
AUTO_SMALL_MIN_POINTS = 200
METHODS = ("auto", "sweeps", "block")


def choose_method(problem: NPKLProblem, executor=None) -> str:
    """method='auto': block solves where they were measured better.

    Plain sweeps move information one graph hop per sweep, so on graphs whose constrained
    points are sparse they need hundreds of sweeps; the block solve couples every
    unconstrained row at once. Block solves need a loss without row constraints (not
    'linear') and an executor that runs them (``supports_block``: the in-process and the
    Dask executors). The rule: block solves for the hinge at any size, and from
    ``AUTO_SMALL_MIN_POINTS`` points on for the square loss and the squared hinge; plain
    sweeps otherwise (docs/decisions/auto-method.md).
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
            layout, Lp = make_plan(problem, relabel=relabel, scheme=scheme, return_matrix=True)
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
    starts (block fits' default) their prolongators and eigenpairs: a third of a block fit
    at n = 1e6 (docs/decisions/block-fit-at-1e6.md). Passing the setup to
    ``fit_bcd(..., setup=...)`` skips all of it; the iterates are bitwise those of a fit
    that builds its own set-up (tests/solvers/bcd/test_fit_setup.py).

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
        self._executor_kind = _executor_kind(executor)
        #: the U-block operator, preconditioners and work arrays of in-process block solves;
        #: every fit through the setup marks it in use while it runs
        self.cache = {}

    def _same_graph(self, L) -> bool:
        if L is self._L:
            return True
        a, b = self._L, L
        if (
            a.shape != b.shape
            or a.nnz != b.nnz
            or a.format != b.format
            or a.format not in ("csr", "csc")
        ):
            return a.shape == b.shape and (abs(a - b)).nnz == 0
        return all(
            x is y or np.array_equal(x, y)
            for x, y in ((a.indptr, b.indptr), (a.indices, b.indices), (a.data, b.data))
        )

    def bind(self, problem: NPKLProblem, method: str, executor):
        """(method, layout, prepared problem) for ``problem``, which must have this setup's
        graph, constraints and dtype; gamma, the loss and its bound come from ``problem``."""

        if problem.n_points != self.n_points or np.dtype(problem.dtype) != self.dtype:
            raise ValidationError(
                f"setup: made for {self.n_points} points in {self.dtype}, the problem has "
                f"{problem.n_points} in {np.dtype(problem.dtype)}; make a setup for this "
                f"problem with fit_setup(problem)"
            )
        c = problem.constraints
        if not all(np.array_equal(x, y) for x, y in zip(self._pairs, (c.i, c.j, c.t))):
            raise ValidationError(
                "setup: made for other constraint pairs than the problem's (a setup fixes "
                "the pairs; only gamma, the loss, the rank and the start may change); make a "
                "setup for this problem with fit_setup(problem)"
            )
        if not self._same_graph(problem.L):
            raise ValidationError(
                "setup: made for another Laplacian than the problem's; make a setup for this "
                "problem with fit_setup(problem)"
            )
        resolved = _resolve_method(problem, method, executor)
        if resolved != self.method:
            raise ValidationError(
                f"method: the setup was made for method {self.method!r}, this fit resolves "
                f"to {resolved!r}; pass method={self.method!r} or make a setup for it"
            )
        if _executor_kind(executor) != self._executor_kind:
            raise ValidationError(
                f"executor: the setup was made for a {self._executor_kind.__name__}, this "
                f"fit runs on a {type(executor).__name__}; make the setup with the fit's "
                f"executor"
            )
        prep = dataclasses.replace(
            self.prep, loss_code=LOSS_CODES[problem.loss], gamma=problem.gamma, bound=problem.bound
        )
        return self.method, self.layout, prep


def fit_setup(
    problem: NPKLProblem,
    *,
    method: str = "auto",
    executor=None,
    relabel: str = "rcm",
    scheme: str = "blocks",
    plan=None,
) -> FitSetup:
    """Build a fit's set-up once, for several :func:`fit_bcd` calls on one graph and one
    constraint set that differ in gamma, the loss, the rank or the start (what
    :func:`~npkl_dist.select_gamma` does for each fold's grid). See :class:`FitSetup`.

    ``method``, ``executor``, ``relabel``, ``scheme`` and ``plan`` are those of the fits;
    ``method='auto'`` is resolved here and each fit must resolve to the same method.
    """
    if executor is None:
        executor = LocalBCD()
    method, layout, prep = _build(problem, method, executor, relabel, scheme, plan)
    return FitSetup(problem, method, layout, prep, executor)
