"""fit_bcd(trace=False): the per-sweep objective and KKT residual are skipped where nothing
reads them; the iterates must be bitwise those of a traced fit."""

from __future__ import annotations

import numpy as np
import pytest

from npkl_dist import NPKLProblem, fit_bcd, knn_graph, sample_constraints
from npkl_dist.executors import InProcessExecutor

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist._errors.ConvergenceWarning")


def _problem(loss, seed=0, n_per=50):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1, 2], n_per)
    X = rng.standard_normal((y.size, 4)) + 2.0 * y[:, None]
    L = knn_graph(X, 5, seed=seed, warn=False).laplacian(1e-3)
    return NPKLProblem.build(L, sample_constraints(y, seed=seed), loss=loss, seed=seed)


@pytest.mark.parametrize(
    "method, loss",
    [
        ("sweeps", "hinge"),
        ("sweeps", "squared_hinge"),
        ("sweeps", "square"),
        ("sweeps", "linear"),
        ("block", "hinge"),
        ("block", "squared_hinge"),
        ("block", "square"),
    ],
)
@pytest.mark.parametrize("extra", [{}, {"tol_kkt": 1e-3}, {"tol_objective": 1e-6}])
def test_untraced_fit_is_bitwise_the_traced_fit(method, loss, extra):
    p = _problem(loss)
    kw = dict(
        max_sweeps=150, tol=1e-6, executor=InProcessExecutor(n_threads=1), method=method, **extra
    )
    a = fit_bcd(p, trace=True, **kw)
    b = fit_bcd(p, trace=False, **kw)
    assert np.array_equal(a.V, b.V)
    assert b.n_sweeps == a.n_sweeps and b.converged == a.converged
    assert b.change_trace == a.change_trace
    assert b.joint_moves == a.joint_moves
    assert b.objective == a.objective  # the final objective, evaluated at the same V
    assert b.kkt == pytest.approx(a.kkt, rel=1e-6, abs=1e-12)
    assert b.method == a.method == method
    if loss != "hinge" and not extra:  # nothing needed the per-sweep values
        assert len(b.objective_trace) == 1 and b.kkt_trace == []
        assert len(b.objective_seconds) == 0
    if loss == "hinge" and not extra:  # the joint schedule reads the objective, not the KKT
        assert len(b.objective_trace) == b.n_sweeps and b.kkt_trace == []
    if "tol_kkt" in extra:
        assert b.kkt_trace == a.kkt_trace


def test_untraced_fit_still_calls_back_with_the_objective():
    p = _problem("square")
    seen = []
    res = fit_bcd(
        p,
        max_sweeps=20,
        tol=1e-6,
        executor=InProcessExecutor(n_threads=1),
        trace=False,
        callback=lambda s, obj, ch, sec: seen.append(obj),
    )
    assert len(seen) == res.n_sweeps and all(np.isfinite(seen))
    assert seen == res.objective_trace
