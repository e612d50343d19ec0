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
            # the checkpoint's columns (block solves: V, S, L S, R), as npkl_dist.job._recovery
            # takes them
            W = (
                session.checkpoint_array()
                if hasattr(session, "checkpoint_array")
                else session.gather()
            )
            W = np.hstack(W) if isinstance(W, tuple) else W
            store[state["sweep"]] = (json.loads(json.dumps(state)), W.copy())

    return on_sweep


@pytest.mark.parametrize("method", ["auto", "sweeps", "block"])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "square", "linear"])
def test_bcd_resume_is_bitwise(global_random_seed, loss, method):
    if method == "block" and loss == "linear":
        pytest.skip("block solves do not take the linear loss (its row constraints)")
    p = problem(global_random_seed, loss)
    snaps = {}
    full = nk.fit_bcd(
        p, max_sweeps=12, tol=0.0, method=method, on_sweep=capture(snaps, {1, 5, 11})
    )
    assert len(snaps) == 3
    for k, snap in snaps.items():
        given = snap[1].copy()
        resumed = nk.fit_bcd(p, max_sweeps=12, tol=0.0, method=method, resume=snap)
        np.testing.assert_array_equal(resumed.V, full.V, err_msg=f"resumed after sweep {k}")
        assert np.array_equal(snap[1], given), "the fit wrote into the caller's checkpoint"
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


def test_block_resume_from_V_alone_is_refused(global_random_seed):
    """A block fit's state is V plus the outer steps' S, L S and R: V alone would resume a
    different fit, so it is refused with the fix named."""
    p = problem(global_random_seed, "square")
    snaps = {}
    nk.fit_bcd(p, max_sweeps=2, tol=0.0, method="block", on_sweep=capture(snaps, {1}))
    state, W = snaps[1]
    assert W.shape == (p.n_points, 4 * p.rank)
    with pytest.raises(nk.ValidationError, match="checkpoint_array"):
        nk.fit_bcd(p, method="block", resume=(state, W[:, : p.rank]))


def test_resume_with_a_wrong_shape_is_refused(global_random_seed):
    p = problem(global_random_seed)
    snaps = {}
    nk.fit_bcd(p, max_sweeps=2, tol=0.0, on_sweep=capture(snaps, {1}))
    state, V = snaps[1]
    with pytest.raises(nk.ValidationError, match="resume"):
        nk.fit_bcd(p, resume=(state, V[:, :3]))


def sparse_problem(seed, loss="square", n=3000, dtype="float64"):
    """Few constrained points: the block method's case."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] > 0).astype(np.int64)
    g = nk.knn_graph(X, 6, warn=False)
    pts = rng.choice(n, 60, replace=False)
    i, j = pts[::2], pts[1::2]
    c = nk.Constraints.from_arrays(i, j, np.where(y[i] == y[j], 1, -1), n)
    return nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss, rank=6, seed=seed, dtype=dtype)


def capture_all(store, at):
    def on_sweep(state, session):
        if state["sweep"] in at:
            store[state["sweep"]] = (
                json.loads(json.dumps(state)),
                session.checkpoint_array().copy(),
            )

    return on_sweep


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "square"])
def test_block_resume_is_bitwise(global_random_seed, loss):
    p = sparse_problem(global_random_seed, loss)
    snaps = {}
    full = nk.fit_bcd(
        p, method="block", max_sweeps=9, tol=0.0, on_sweep=capture_all(snaps, {1, 4, 8})
    )
    for k, snap in snaps.items():
        # V, previous step S, L S, residual R (carried from step to step, not recomputed)
        assert snap[1].shape == (p.n_points, 4 * p.rank)
        resumed = nk.fit_bcd(p, method="block", max_sweeps=9, tol=0.0, resume=snap)
        np.testing.assert_array_equal(resumed.V, full.V, err_msg=f"resumed after {k}")
        assert resumed.objective_trace == full.objective_trace
        assert resumed.kkt_trace == full.kkt_trace
        assert resumed.cg_iterations == full.cg_iterations
    with pytest.raises(nk.ValidationError, match="method"):
        nk.fit_bcd(p, method="sweeps", resume=snaps[1])


def test_block_resume_is_bitwise_float32():
    """float32 factors take the exact residual every outer iteration (the carried one would
    pick up V's rounding); their checkpoints resume bitwise too."""
    p = sparse_problem(7, "squared_hinge", dtype="float32")
    snaps = {}
    full = nk.fit_bcd(p, method="block", max_sweeps=8, tol=0.0, on_sweep=capture_all(snaps, {3}))
    assert full.V.dtype == np.float32
    resumed = nk.fit_bcd(p, method="block", max_sweeps=8, tol=0.0, resume=snaps[3])
    np.testing.assert_array_equal(resumed.V, full.V)
    assert resumed.objective_trace == full.objective_trace


def test_block_resume_from_a_checkpoint_without_the_residual():
    """Checkpoints written before R was stored (width 3 rank: V, S, L S) still resume: the
    residual is recomputed exactly, so the fit continues to the same objectives up to
    rounding (not bit for bit: the carried residual and the recomputed one differ in the
    last bits)."""
    p = sparse_problem(5, "square")
    snaps = {}
    full = nk.fit_bcd(p, method="block", max_sweeps=12, tol=0.0, on_sweep=capture_all(snaps, {4}))
    state, W = snaps[4]
    old = np.ascontiguousarray(W[:, : 3 * p.rank])
    resumed = nk.fit_bcd(p, method="block", max_sweeps=12, tol=0.0, resume=(state, old))
    np.testing.assert_allclose(resumed.objective_trace, full.objective_trace, rtol=1e-7)
    assert len(resumed.objective_trace) == 12


def test_block_run_store_crash_and_resume(tmp_path):
    """A block fit in a run store, crashed after sweep 4, resumes to the uninterrupted V."""
    from npkl_dist.job._job import FitConfig, run_fit_in_store

    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(c, 0.6, size=(1500, 3)) for c in (0, 1.5)])  # one component
    y = np.repeat([0, 1], 1500)
    yl = np.full(3000, -1)
    keep = rng.choice(3000, 60, replace=False)
    yl[keep] = y[keep]
    cfg = dict(
        X=X,
        y_constraints=yl,
        n_must=20,
        n_cannot=20,
        method="block",
        rank=5,
        max_sweeps=8,
        tol=0.0,
        clusters=2,
        knn=6,
    )
    ref, V_ref, _ = run_fit_in_store(FitConfig(**cfg), str(tmp_path / "ref"))
    assert ref["method"] == "block" and len(ref["kkt_trace"]) == 8

    class Crash(Exception):
        pass

    def crash(sweep, *_):
        if sweep == 4:
            raise Crash

    with pytest.raises(Crash):
        run_fit_in_store(FitConfig(**cfg), str(tmp_path / "run"), callback=crash)
    got, V, _ = run_fit_in_store(None, str(tmp_path / "run"), resume=True)
    np.testing.assert_array_equal(V, V_ref)
    assert got["objective_trace"] == ref["objective_trace"]


def _with_gamma(p, gamma):
    return nk.NPKLProblem.build(p.L, p.constraints, loss=p.loss, rank=p.rank, seed=p.seed,
                                gamma=gamma)  # fmt: skip


@pytest.mark.parametrize("method", ["sweeps", "block"])
def test_bcd_warm_start_from_a_checkpoint_is_the_V0_fit(global_random_seed, method):
    """`npkl resume --force-config` (issue 74): a checkpoint learned under gamma = 1 starts a
    new fit under gamma = 5 from its V: bitwise the fit given that V as V0 (its rows put
    back in the original order), with its own traces from sweep 1."""
    p1 = problem(global_random_seed)
    snaps = {}
    nk.fit_bcd(p1, max_sweeps=6, tol=0.0, method=method, on_sweep=capture(snaps, {5}))
    state, W = snaps[5]
    p5 = _with_gamma(p1, 5.0)
    warm = nk.fit_bcd(p5, max_sweeps=8, tol=0.0, method=method,
                      resume=({"warm_start": True, "sweep": 0, "method": state["method"]}, W))  # fmt: skip
    order = nk.fit_setup(p5, method=method).layout.order
    V0 = np.empty((p5.n_points, p5.rank))
    V0[order] = W[:, : p5.rank]
    cold = nk.fit_bcd(p5, max_sweeps=8, tol=0.0, method=method, V0=V0)
    np.testing.assert_array_equal(warm.V, cold.V)
    assert warm.objective_trace == cold.objective_trace and len(warm.objective_trace) == 8
    other = "block" if method == "sweeps" else "sweeps"
    with pytest.raises(nk.ValidationError, match=f"written by method '{method}'.*another order"):
        nk.fit_bcd(p5, max_sweeps=2, method=other,
                   resume=({"warm_start": True, "sweep": 0, "method": state["method"]}, W))  # fmt: skip


def test_admm_warm_start_from_a_checkpoint_is_the_V0_fit(global_random_seed):
    p1 = problem(global_random_seed, "square", diagonal=True)
    snaps = {}
    nk.fit_admm(p1, max_iter=6, tol=0.0, on_sweep=capture(snaps, {5}))
    _, W = snaps[5]
    p5 = _with_gamma(p1, 5.0)
    warm = nk.fit_admm(p5, max_iter=8, tol=0.0, resume=({"warm_start": True, "sweep": 0}, W))
    plan = nk.make_plan(p5)
    V0 = np.empty((p5.n_points, p5.rank))
    V0[plan.order] = W[:, : p5.rank]
    cold = nk.fit_admm(p5, max_iter=8, tol=0.0, V0=V0)
    np.testing.assert_array_equal(warm.V, cold.V)
    assert warm.rho_trace == cold.rho_trace
