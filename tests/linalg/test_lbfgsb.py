"""The direct L-BFGS-B driver (``npkl_dist.linalg._lbfgsb``) against ``scipy.optimize.minimize``.

The driver runs scipy's own compiled routine, so the reference is exact: the same points
evaluated, the same iterates handed to the callback, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npkl_dist as nk
from npkl_dist.linalg import _lbfgsb
from npkl_dist.solvers.simplenpkl._fit import fit_simplenpkl


def _recorded(run, fun, x0, lower, upper, stop_after=None, **kw):
    """Points evaluated and iterates seen by the callback of one run."""
    evals, iterates = [], []

    def f(x):
        evals.append(x.copy())
        return fun(x)

    def cb(x):
        iterates.append(x.copy())
        if stop_after is not None and len(iterates) >= stop_after:
            raise StopIteration

    nit = run(f, x0, lower, upper, callback=cb, **kw)
    return nit, evals, iterates


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_the_direct_driver_is_in_use_with_this_scipy():
    """If scipy's private routine changed, the driver falls back to minimize (correct but
    0.5 ms slower per small SimpleNPKL fit): this says so rather than hiding it."""
    assert _lbfgsb._probe(), "scipy's setulb no longer matches; _lbfgsb uses minimize"


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 30),
    kinds=st.lists(st.sampled_from(["free", "lower", "upper", "both"]), min_size=30, max_size=30),
    maxcor=st.integers(1, 12),
    maxiter=st.integers(1, 40),
    stop_after=st.one_of(st.none(), st.integers(1, 10)),
)
def test_direct_driver_equals_minimize(seed, n, kinds, maxcor, maxiter, stop_after):
    """A quartic-plus-quadratic (non-quadratic, so line searches backtrack) over a box with
    every kind of bound: the same evaluations, iterates and iteration count."""
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((n, n))
    H = Q @ Q.T / n + 0.1 * np.eye(n)
    b = rng.standard_normal(n) * 3.0
    c4 = rng.uniform(0.0, 0.5, n)
    kinds = kinds[:n]
    lo = np.array([rng.uniform(-1, 0) if k in ("lower", "both") else -np.inf for k in kinds])
    up = np.array([rng.uniform(0, 1) if k in ("upper", "both") else np.inf for k in kinds])
    x0 = rng.standard_normal(n) * 2.0  # partly outside the box: both clip it

    def fun(x):
        Hx = H @ x
        return float(0.5 * x @ Hx - b @ x + np.sum(c4 * x**4)), Hx - b + 4.0 * c4 * x**3

    kw = {"maxiter": maxiter, "maxfun": 2 * maxiter + 10, "maxcor": maxcor}
    got = _recorded(_lbfgsb._minimize_direct, fun, x0, lo, up, stop_after, **kw)
    ref = _recorded(_lbfgsb.minimize_box_reference, fun, x0, lo, up, stop_after, **kw)
    assert got[0] == ref[0]
    assert _same(got[1], ref[1])
    assert _same(got[2], ref[2])
    assert len(got[1]) >= 1  # at least the start was evaluated


def test_direct_driver_stops_at_maxfun_as_minimize():
    """maxfun is checked after an iteration, as scipy does (here 1 evaluation allowed)."""
    rng = np.random.default_rng(3)
    H = np.diag(rng.uniform(1, 100, 8))

    def fun(x):
        return float(0.5 * x @ H @ x - x.sum()), H @ x - 1.0

    lo, up = np.zeros(8), np.full(8, np.inf)
    got = _recorded(_lbfgsb._minimize_direct, fun, np.ones(8), lo, up, maxiter=50, maxfun=1)
    ref = _recorded(_lbfgsb.minimize_box_reference, fun, np.ones(8), lo, up, maxiter=50, maxfun=1)
    assert got[0] == ref[0] == 1
    assert _same(got[1], ref[1]) and _same(got[2], ref[2])


def test_falls_back_to_minimize_when_the_routine_is_unusable(monkeypatch):
    """A probe that fails (here: setulb raising) sends every call through minimize."""
    from scipy.optimize import _lbfgsb as scipy_lbfgsb

    def broken(*args):
        raise TypeError("setulb() takes 18 arguments")

    monkeypatch.setattr(_lbfgsb, "_DIRECT_OK", None)
    monkeypatch.setattr(scipy_lbfgsb, "setulb", broken)
    assert _lbfgsb._probe() is False
    calls = []
    monkeypatch.setattr(_lbfgsb, "minimize_box_reference", lambda *a, **k: calls.append(1) or 0)
    _lbfgsb.minimize_box(
        lambda x: (0.0, 0.0 * x), np.zeros(3), np.zeros(3), np.ones(3), maxiter=5, maxfun=5
    )
    assert calls == [1] and _lbfgsb._DIRECT_OK is False


@pytest.mark.parametrize("loss", ["squared_hinge", "square", "hinge"])
def test_simplenpkl_fit_is_the_same_through_either_driver(global_random_seed, loss, monkeypatch):
    """The whole dual fit, direct driver against minimize: identical traces and kernel."""
    rng = np.random.default_rng(global_random_seed)
    X = np.r_[rng.normal(0, 1, (30, 2)), rng.normal(4, 1, (30, 2))]
    y = np.r_[np.zeros(30, int), np.ones(30, int)]
    g = nk.knn_graph(X, 5, warn=False)
    c = nk.sample_constraints(y, 20, 20, seed=global_random_seed)
    p = nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss, seed=global_random_seed)
    monkeypatch.setattr(_lbfgsb, "_DIRECT_OK", True)
    fast = fit_simplenpkl(p, B=100.0)
    monkeypatch.setattr(_lbfgsb, "_DIRECT_OK", False)
    ref = fit_simplenpkl(p, B=100.0)
    assert fast.n_sweeps == ref.n_sweeps >= 1
    assert fast.n_eigsolves == ref.n_eigsolves
    assert fast.objective_trace == ref.objective_trace
    assert fast.dual_trace == ref.dual_trace
    np.testing.assert_array_equal(fast.V, ref.V)
