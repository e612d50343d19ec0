"""KL-ADMM with Anderson acceleration (``fit_admm(anderson=m)``): the extrapolation is the
least-squares combination, the safeguard undoes what it must, both loops agree bit for bit,
a resumed fit equals the uninterrupted one, and the optimum is the plain method's."""

import json

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist.executors import InProcessExecutor
from npkl_dist.linalg._anderson import AA_REG, Anderson, anderson_after, anderson_reset
from npkl_dist.solvers.admm._fit import admm_objective, fit_admm

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")

_TRACES = ("objective_trace", "primal_trace", "dual_trace", "change_trace", "rho_trace")


def problem(seed, n=300, gamma=2.0, dtype="float64", rank=8, diagonal=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = (X[:, 0] > 0).astype(np.int64) + 2 * (X[:, 1] > 0)
    g = nk.knn_graph(X, 5, warn=False)
    c = nk.sample_constraints(y, n // 3, n // 3, seed=seed, diagonal=diagonal)
    return nk.NPKLProblem.build(
        g.laplacian(1e-2), c, loss="square", gamma=gamma, rank=rank, seed=seed, dtype=dtype
    )


def _state(aa):
    n, r = aa.n, aa.r
    return aa.mem.X[: n * r].reshape(n, r), aa.mem.X[n * r :].reshape(n, r)


def test_extrapolation_is_the_least_squares_combination(global_random_seed):
    """After several maps, x+ = g - dG c with c the (lightly regularised) least-squares
    coefficients of f on dF, checked against numpy's lstsq on the stored differences."""
    rng = np.random.default_rng(global_random_seed)
    n, r, m, rho = 30, 4, 3, 7.0
    V = rng.standard_normal((n, r))
    U = rng.standard_normal((n, r))
    Lam = rng.standard_normal((n, r))
    aa = Anderson(n, r, m)
    anderson_reset(U, Lam, rho, aa.mem.X, aa.ints)
    args = aa.kernel_args()
    obj = 100.0
    for step in range(6):
        # a "map": some new U, Lam (what an ADMM iteration would write)
        U[...] = 0.5 * U + 0.1 * rng.standard_normal((n, r))
        Lam[...] = 0.5 * Lam + 0.1 * rng.standard_normal((n, r))
        g = np.concatenate([U.ravel(), (Lam * (1.0 / rho)).ravel()])
        f = g - aa.mem.X
        obj -= 1.0
        rho_next, conv = anderson_after(obj, rho, rho, False, 0.0, 1.0, V, U, Lam, *args)
        assert rho_next == rho and not conv
        k = int(aa.ints[0])
        assert k == min(step, m)
        if k == 0:
            np.testing.assert_array_equal(aa.mem.X, g)  # the plain step
            continue
        idx = aa.order[:k]
        dF, dG = aa.mem.dF[idx].T, aa.mem.dG[idx].T
        np.testing.assert_allclose(aa.mem.Fp, f, rtol=0, atol=1e-15)
        A = dF.T @ dF
        A[np.diag_indices_from(A)] += AA_REG * np.trace(A)
        c = np.linalg.solve(A, dF.T @ f)
        c_ls = np.linalg.lstsq(dF, f, rcond=None)[0]
        np.testing.assert_allclose(c, c_ls, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(aa.mem.X, g - dG @ c, rtol=1e-10, atol=1e-12)
        Ux, Lx = _state(aa)
        np.testing.assert_array_equal(U, Ux)  # the state written back is the one recorded
        np.testing.assert_allclose(Lam, Lx * rho, rtol=1e-15)
        assert aa.ints[2] == 1 and aa.floats[0] == obj


def test_safeguard_undoes_an_iteration_that_raised_the_objective(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    n, r, rho = 20, 3, 5.0
    V = rng.standard_normal((n, r))
    U = rng.standard_normal((n, r))
    Lam = rng.standard_normal((n, r))
    aa = Anderson(n, r, 2)
    anderson_reset(U, Lam, rho, aa.mem.X, aa.ints)
    args = aa.kernel_args()
    for obj in (10.0, 9.0, 8.0):
        U[...] = 0.7 * U + 0.05 * rng.standard_normal((n, r))
        Lam[...] = 0.7 * Lam + 0.05 * rng.standard_normal((n, r))
        V[...] = rng.standard_normal((n, r))
        anderson_after(obj, rho, rho, False, 0.0, 1.0, V, U, Lam, *args)
    assert aa.ints[2] == 1  # the last step extrapolated
    V_kept, g = aa.mem.Vsave.copy(), aa.mem.Gp.copy()
    # the iteration from the extrapolated state ends higher, and even "converged": undone
    V[...] = 0.0
    rho_next, conv = anderson_after(8.5, rho, 2 * rho, True, 1.0, 1e9, V, U, Lam, *args)
    assert (rho_next, conv) == (rho, False)
    np.testing.assert_array_equal(V, V_kept)
    np.testing.assert_array_equal(U.ravel(), g[: n * r])  # (U, Lam) <- the plain result
    np.testing.assert_allclose(Lam.ravel(), rho * g[n * r :], rtol=1e-15, atol=0)
    assert list(aa.ints[:4]) == [0, 0, 0, 2] and aa.ints[4] == 1
    assert aa.floats[1] == 8.0  # the objective of the V kept
    # rho changes: the memory is cleared, the state is the current one
    U[...] += 0.01
    rho_next, conv = anderson_after(7.0, rho, 2 * rho, False, 0.0, 1.0, V, U, Lam, *args)
    assert rho_next == 2 * rho and aa.ints[0] == 0 and aa.ints[1] == 0
    np.testing.assert_array_equal(
        aa.mem.X, np.concatenate([U.ravel(), (Lam * (1.0 / (2 * rho))).ravel()])
    )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("gamma", [0.1, 2.0])
def test_fused_loop_equals_the_reference_loop_bitwise(global_random_seed, dtype, gamma):
    p = problem(global_random_seed, gamma=gamma, dtype=dtype)
    kw = {"max_iter": 400, "tol": 1e-5, "executor": InProcessExecutor(1), "anderson": 4}
    ref = fit_admm(p, fused=False, **kw)
    got = fit_admm(p, **kw)
    assert ref.anderson_steps > 0
    assert got.n_sweeps == ref.n_sweeps
    np.testing.assert_array_equal(got.V, ref.V)
    np.testing.assert_array_equal(got.U, ref.U)
    for key in _TRACES:
        assert getattr(got, key) == getattr(ref, key), key
    assert (got.objective, got.anderson_steps, got.anderson_rejected) == (
        ref.objective,
        ref.anderson_steps,
        ref.anderson_rejected,
    )
    # the reported objective is the kept V's (also after a rejected last iteration)
    assert got.objective == pytest.approx(
        admm_objective(p, got.V), rel=1e-5 if dtype == "float32" else 1e-10
    )


def test_reaches_the_plain_optimum_in_fewer_iterations(global_random_seed):
    """To the same tolerance, the accelerated fit stops in fewer iterations and no higher
    than the plain one; a tighter accelerated fit goes lower still, and the plain fit never
    ends below it (the same optimum, approached from above)."""
    p = problem(global_random_seed)
    plain = fit_admm(p, max_iter=20000, tol=1e-6)
    acc = fit_admm(p, max_iter=20000, tol=1e-6, anderson=5)
    tight = fit_admm(p, max_iter=5000, tol=1e-10, anderson=5)
    assert acc.converged
    assert acc.n_sweeps < plain.n_sweeps
    f = tight.objective
    assert acc.objective <= plain.objective + 1e-9 * abs(f)
    assert f <= acc.objective + 1e-9 * abs(f)
    assert plain.objective >= f - 1e-9 * abs(f)
    assert acc.objective - f <= 1e-5 * abs(f)


def test_objective_trace_of_kept_iterates_never_has_a_worse_accepted_step():
    """Every extrapolated step that was kept ended at or below the objective it started
    from: a fit with rejections still ends at the lowest-objective side of the safeguard."""
    p = problem(7, gamma=0.1)
    res = fit_admm(p, max_iter=600, tol=1e-6, anderson=5)
    assert res.anderson_rejected > 0  # this problem does trigger the safeguard
    assert res.objective == pytest.approx(admm_objective(p, res.V), rel=1e-10)
    plain = fit_admm(p, max_iter=600, tol=1e-6)
    assert res.objective <= plain.objective * (1 + 1e-6)


def capture(store, at):
    def on_sweep(state, session):
        if state["sweep"] in at:
            W = session.checkpoint_array()
            store[state["sweep"]] = (json.loads(json.dumps(state)), np.array(W, copy=True))

    return on_sweep


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_resume_is_bitwise(global_random_seed, dtype):
    p = problem(global_random_seed, gamma=0.1, dtype=dtype)
    snaps = {}
    kw = {"max_iter": 60, "tol": 0.0, "anderson": 3}
    full = fit_admm(p, on_sweep=capture(snaps, {2, 9, 25, 41}), **kw)
    assert full.anderson_steps > 0
    for k, snap in snaps.items():
        assert snap[1].shape == (p.n_points, 3 * p.rank + Anderson.width(p.rank, 3))
        resumed = fit_admm(p, resume=snap, **kw)
        np.testing.assert_array_equal(resumed.V, full.V, err_msg=f"resumed after {k}")
        for key in _TRACES:
            assert getattr(resumed, key) == getattr(full, key), key
        assert resumed.anderson_steps == full.anderson_steps
    # a plain checkpoint does not resume an accelerated fit, nor the reverse
    state, W = snaps[9]
    with pytest.raises(nk.ValidationError, match="anderson=0"):
        fit_admm(p, resume=(state, W), max_iter=60, tol=0.0)
    with pytest.raises(nk.ValidationError, match="anderson=3"):
        fit_admm(
            p,
            resume=({k: v for k, v in state.items() if k != "anderson"}, W[:, : 3 * p.rank]),
            **kw,
        )


@pytest.mark.parametrize("bad", [-1, 1.5, True, "5"])
def test_bad_memory(bad):
    with pytest.raises(nk.ValidationError, match="anderson"):
        fit_admm(problem(0, n=60), anderson=bad)


def test_executors_without_in_process_arrays_are_refused():
    """The accelerator works on the session's V, U, Lam; an executor that keeps them
    elsewhere (Dask) is refused with the fix named."""

    class Remote:
        closed = False

        def objective(self, *a):
            return 0.0

        def close(self):
            Remote.closed = True

    class RemoteExecutor:
        def admm_session(self, prep, V, U, Lam):
            return Remote()

    with pytest.raises(nk.ValidationError, match="anderson=0"):
        fit_admm(problem(0, n=60), anderson=5, executor=RemoteExecutor())
    assert Remote.closed


def test_fit_config_refuses_anderson_for_other_solvers():
    from npkl_dist.job._job import FitConfig

    with pytest.raises(nk.ValidationError, match="anderson: 5 accelerates solver='admm' only"):
        FitConfig(solver="bcd", anderson=5)
    assert FitConfig(solver="admm", anderson=5).anderson == 5


def test_unconverged_plain_fit_names_the_acceleration():
    p = problem(0, n=60)
    with pytest.warns(nk.ConvergenceWarning, match=r"accelerate the iteration with anderson=5$"):
        fit_admm(p, max_iter=3, tol=1e-12)
    with pytest.warns(nk.ConvergenceWarning) as rec:
        fit_admm(p, max_iter=3, tol=1e-12, anderson=5)
    assert all("anderson=5" not in str(w.message) for w in rec)
