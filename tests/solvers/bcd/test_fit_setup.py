"""fit_setup: one set-up (layout, permuted problem, AMG hierarchy, work arrays) shared by
several fits of one graph and one constraint set. Reference: the same fits each building
their own set-up; every fit must be bitwise the same."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_blocksolve import sparse_constrained_problem

import npkl_dist as nk
from npkl_dist import ConvergenceWarning, NPKLProblem, ValidationError, fit_bcd, fit_setup
from npkl_dist.executors import InProcessExecutor
from npkl_dist.model_selection import heldout_score


def _fit(problem, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit_bcd(problem, **kw)


def _variant(problem, **changes):
    """The problem with other gamma / loss / rank (same Laplacian and pairs)."""
    kw = dict(
        loss=problem.loss,
        gamma=problem.gamma,
        rank=problem.rank,
        seed=problem.seed,
        dtype=problem.dtype,
        bound=problem.bound,
    )
    kw.update(changes)
    return NPKLProblem.build(problem.L, problem.constraints, **kw)


def _same(a, b):
    assert np.array_equal(a.V, b.V)
    assert a.objective_trace == b.objective_trace
    assert a.kkt_trace == b.kkt_trace
    assert a.cg_iterations == b.cg_iterations
    assert a.method == b.method


# a sequence of fits through one setup: the second and later fits run on the arrays the
# earlier ones left behind (other gamma, loss, rank), so any state leaking from one fit into
# the next shows up as a difference from the fit that builds its own set-up
SEQUENCE = [
    dict(gamma=1.0),
    dict(gamma=10.0, loss="squared_hinge"),
    dict(gamma=0.3, rank=5),
    dict(gamma=1.0),
]


@pytest.mark.parametrize(
    "method,precond,extrapolate,dtype",
    [
        ("block", "amg-additive", True, "float64"),
        ("block", "amg-plain", True, "float64"),
        ("block", "amg", False, "float64"),
        ("block", "jacobi", True, "float64"),
        ("block", "amg-additive", True, "float32"),
        ("sweeps", None, True, "float64"),
    ],
)
def test_fits_through_one_setup_are_bitwise_those_without(
    method, precond, extrapolate, dtype, global_random_seed
):
    base = sparse_constrained_problem(global_random_seed, "square", n=600, frac=0.05, dtype=dtype)
    ex = InProcessExecutor(2)
    kw = dict(method=method, max_sweeps=6, tol=0, executor=ex)
    if method == "block":
        kw.update(precond=precond, extrapolate=extrapolate, inner_maxiter=2)
    setup = fit_setup(base, method=method, executor=ex)
    for change in SEQUENCE:
        p = _variant(base, **change)
        _same(_fit(p, setup=setup, **kw), _fit(p, **kw))
    if method == "block":
        held = {k for k in setup.cache if isinstance(k, tuple) and k[0] == "buffer"}
        assert {("buffer", "R"), ("buffer", "Z"), ("buffer", "Q")} <= held
        assert any(isinstance(k, tuple) and k[0] == "precond" for k in setup.cache)


def test_setup_reuses_the_hierarchy_and_the_work_arrays(global_random_seed):
    base = sparse_constrained_problem(global_random_seed, "square", n=600, frac=0.05)
    setup = fit_setup(base, method="block")
    _fit(base, setup=setup, method="block", max_sweeps=3, tol=0)
    M = setup.cache[("precond", "amg-additive", False)]
    R = setup.cache[("buffer", "R")]
    _fit(_variant(base, gamma=5.0), setup=setup, method="block", max_sweeps=3, tol=0)
    assert setup.cache[("precond", "amg-additive", False)] is M
    assert setup.cache[("buffer", "R")] is R


def test_resume_through_a_setup_is_bitwise(global_random_seed):
    p = sparse_constrained_problem(global_random_seed, "squared_hinge", n=600, frac=0.05)
    kw = dict(method="block", max_sweeps=6, tol=0)
    full = _fit(p, **kw)
    states = {}

    def on_sweep(state, session):
        states[state["sweep"]] = (state, session.checkpoint_array().copy())

    setup = fit_setup(p, method="block")
    _fit(p, setup=setup, on_sweep=on_sweep, **{**kw, "max_sweeps": 3})
    _same(_fit(p, setup=setup, resume=states[3], **kw), full)


def test_select_gamma_with_block_fits_equals_fits_without_a_setup():
    """select_gamma shares one set-up per fold: its scores are those of independent fits."""
    p = sparse_constrained_problem(4, "square", n=600, frac=0.1)
    opts = {"method": "block", "max_sweeps": 15, "tol": 1e-6}
    grid = (0.3, 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sel = nk.select_gamma(p, grid, folds=2, seed=1, score="auc", fit_options=opts)
    c = p.constraints
    for f, out in enumerate(sel.heldout):
        keep = np.ones(c.m, bool)
        keep[out] = False
        train = nk.Constraints.from_arrays(c.i[keep], c.j[keep], c.t[keep], p.n_points, warn=False)
        for q, g in enumerate(grid):
            fp = NPKLProblem.build(p.L, train, loss=p.loss, gamma=g, rank=p.rank, seed=p.seed)
            V = _fit(fp, **opts).V
            want = heldout_score(V, c.i[out], c.j[out], c.t[out], score="auc")
            assert sel.scores[f, q] == want


def test_setup_refuses_another_problem(global_random_seed):
    p = sparse_constrained_problem(global_random_seed, "square", n=400, frac=0.05)
    setup = fit_setup(p, method="block")
    other = sparse_constrained_problem(global_random_seed + 1, "square", n=400, frac=0.05)
    c = p.constraints
    flipped = nk.Constraints.from_arrays(c.i, c.j, -c.t, p.n_points, warn=False)
    L2 = p.L.copy()
    L2.data = L2.data * 1.5
    cases = [
        (
            NPKLProblem.build(p.L, other.constraints, loss="square", rank=p.rank),
            "other constraint pairs",
        ),
        (NPKLProblem.build(p.L, flipped, loss="square", rank=p.rank), "other constraint pairs"),
        (NPKLProblem.build(L2, c, loss="square", rank=p.rank), "another Laplacian"),
        (_variant(p, dtype="float32"), "float64"),
    ]
    for problem, match in cases:
        with pytest.raises(ValidationError, match=match):
            fit_bcd(problem, setup=setup, method="block", max_sweeps=1)
    with pytest.raises(ValidationError, match="method: the setup was made for method 'block'"):
        fit_bcd(p, setup=setup, method="sweeps", max_sweeps=1)
    with pytest.raises(ValidationError, match="plan: pass either"):
        fit_bcd(p, setup=setup, plan=nk.make_plan(p), max_sweeps=1)
    with pytest.raises(ValidationError, match="setup: expected a FitSetup"):
        fit_bcd(p, setup={"layout": None}, max_sweeps=1)
    with pytest.raises(ValidationError, match="setup"):
        nk.select_gamma(p, (1.0,), folds=2, score="auc", fit_options={"setup": setup})
    # an equal copy of the Laplacian is the same graph
    same = NPKLProblem.build(p.L.copy(), c, loss="square", rank=p.rank, seed=p.seed)
    _same(
        _fit(same, setup=setup, method="block", max_sweeps=2, tol=0),
        _fit(p, method="block", max_sweeps=2, tol=0),
    )


def test_setup_refuses_another_executor(global_random_seed):
    p = sparse_constrained_problem(global_random_seed, "square", n=400, frac=0.05)
    setup = fit_setup(p, method="sweeps")

    class Other(InProcessExecutor):
        pass

    with pytest.raises(ValidationError, match="executor: the setup was made for"):
        fit_bcd(p, setup=setup, method="sweeps", executor=Other(), max_sweeps=1)


@pytest.mark.parametrize("method", ["block", "sweeps"])
def test_one_fit_at_a_time_and_released_after_a_failure(method, global_random_seed):
    p = sparse_constrained_problem(global_random_seed, "square", n=400, frac=0.05)
    setup = fit_setup(p, method=method)
    seen = []

    def nested(state, session):  # a second fit through the setup while the first runs
        with pytest.raises(ValidationError, match="another fit is running with this setup"):
            fit_bcd(p, setup=setup, method=method, max_sweeps=1)
        seen.append(state["sweep"])
        raise KeyboardInterrupt  # the first fit dies mid-run

    with pytest.raises(KeyboardInterrupt):
        fit_bcd(p, setup=setup, method=method, max_sweeps=3, tol=0, on_sweep=nested)
    assert seen == [1]
    # released: the next fit runs, and equals one without the setup
    _same(
        _fit(p, setup=setup, method=method, max_sweeps=3, tol=0),
        _fit(p, method=method, max_sweeps=3, tol=0),
    )
