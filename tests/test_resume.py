"""A fit resumed from any sweep's state equals the uninterrupted fit bitwise."""

import json

import numpy as np
import pytest

import npkl_dist as nk

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")


def problem(seed, loss="square", diagonal=False, n=600):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0)
    g = nk.knn_graph(X, 6, warn=False)
    c = nk.sample_constraints(y, seed=seed, diagonal=diagonal)
    return nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss, rank=8, seed=seed)


def capture(store, at):
    def on_sweep(state, session):
        if state["sweep"] in at:
            W = session.gather()
            W = np.hstack(W) if isinstance(W, tuple) else W
            store[state["sweep"]] = (json.loads(json.dumps(state)), W.copy())
    return on_sweep


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "square", "linear"])
def test_bcd_resume_is_bitwise(global_random_seed, loss):
    p = problem(global_random_seed, loss)
    snaps = {}
    full = nk.fit_bcd(p, max_sweeps=12, tol=0.0, on_sweep=capture(snaps, {1, 5, 11}))
    for k, snap in snaps.items():
        resumed = nk.fit_bcd(p, max_sweeps=12, tol=0.0, resume=snap)
        np.testing.assert_array_equal(resumed.V, full.V, err_msg=f"resumed after sweep {k}")
        assert resumed.objective_trace == full.objective_trace
        assert resumed.change_trace == full.change_trace


def test_admm_resume_is_bitwise(global_random_seed):
    p = problem(global_random_seed, "square", diagonal=True)
    snaps = {}
    full = nk.fit_admm(p, max_iter=15, tol=0.0, on_sweep=capture(snaps, {1, 7, 14}))
    for k, snap in snaps.items():
        resumed = nk.fit_admm(p, max_iter=15, tol=0.0, resume=snap)
        np.testing.assert_array_equal(resumed.V, full.V, err_msg=f"resumed after iteration {k}")
        assert resumed.rho_trace == full.rho_trace
        assert resumed.primal_trace == full.primal_trace


def test_resume_with_a_wrong_shape_is_refused(global_random_seed):
    p = problem(global_random_seed)
    snaps = {}
    nk.fit_bcd(p, max_sweeps=2, tol=0.0, on_sweep=capture(snaps, {1}))
    state, V = snaps[1]
    with pytest.raises(nk.ValidationError, match="resume"):
        nk.fit_bcd(p, resume=(state, V[:, :3]))
