"""KL-ADMM against slow references: dense objective, r x r solves, scipy, cvxpy's SDP."""

import numpy as np
import pytest
import scipy.optimize as so

import npkl_dist as nk
from npkl_dist.executors import InProcessExecutor
from npkl_dist.solvers.admm._fit import admm_objective, admm_objective_dense, fit_admm
from npkl_dist.solvers.admm._kernels import admm_row_norms, admm_rows

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")


@pytest.fixture
def seed():
    return 1234


def small_problem(seed, n=40, n_pairs=30, diagonal=True, rank=6, dtype="float64", k=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = (X[:, 0] > 0).astype(np.int64)
    g = nk.knn_graph(X, k, warn=False)
    c = nk.sample_constraints(y, n_pairs // 2, n_pairs // 2, seed=seed, diagonal=diagonal)
    return nk.NPKLProblem.build(
        g.laplacian(1e-2), c, loss="square", gamma=2.0, rank=rank, seed=seed, dtype=dtype
    ), y


def augmented_lagrangian_row(problem, i, X, Lam, rho, lam_sign, diagonal):
    """The part of the augmented Lagrangian (6) that depends on row i of the updated factor,
    written from the definition (ordered pairs of T, targets 1/0, diagonal target 1)."""
    L = problem.L.toarray()
    c = problem.constraints
    pairs = [(a, b, t) for a, b, t in zip(c.i, c.j, c.t)]
    partners = [(b if a == i else a, 1.0 if t > 0 else 0.0) for a, b, t in pairs if i in (a, b)]
    if diagonal:
        partners.append((i, 1.0))
    off = L[i] @ X  # (L X)_i including the diagonal term L_ii x_i

    def f(v):
        val = v @ off  # tr(V L U') picks v_i' (L U)_i
        val += 0.5 * problem.gamma * sum((v @ X[j] - tgt) ** 2 for j, tgt in partners)
        # Lam . (V - U) and rho/2 ||V - U||^2; for the U-step the sign of Lam flips
        val += -lam_sign * (Lam[i] @ v) + 0.5 * rho * np.sum((v - X[i]) ** 2)
        return val

    return f


@pytest.mark.parametrize("lam_sign", [-1.0, 1.0])
def test_half_step_rows_are_exact_minimisers(seed, lam_sign):
    problem, _ = small_problem(seed)
    plan = nk.make_plan(problem, relabel="none")
    prep = nk.prepare(problem, plan)
    rng = np.random.default_rng(seed + 1)
    n, r = problem.n_points, problem.rank
    X = rng.standard_normal((n, r))
    Lam = rng.standard_normal((n, r))
    rho = 3.0
    out = np.zeros((n, r))
    nrm = np.empty(n)
    admm_row_norms(X, nrm)
    admm_rows(
        0,
        n,
        prep.indptr,
        prep.indices,
        prep.data,
        prep.diag,
        prep.cptr,
        prep.cidx,
        prep.csgn,
        True,
        X,
        Lam,
        lam_sign,
        rho,
        problem.gamma,
        prep.pmax,
        out,
        np.empty(0),
        nrm,
    )
    eye = np.eye(r)
    for i in range(n):
        f = augmented_lagrangian_row(problem, i, X, Lam, rho, lam_sign, True)
        # f is a quadratic 1/2 v'Hv + b'v + c: recover H and b exactly from f itself
        # (polarisation), then solve densely -- no Woodbury, no knowledge of the kernel
        f0 = f(np.zeros(r))
        fe = np.array([f(eye[a]) for a in range(r)])
        b = (fe - np.array([f(-eye[a]) for a in range(r)])) / 2
        H = np.array(
            [[f(eye[a] + eye[c]) - fe[a] - fe[c] + f0 for c in range(r)] for a in range(r)]
        )
        ref = np.linalg.solve(H, -b)
        np.testing.assert_allclose(out[i], ref, rtol=1e-8, atol=1e-10)
        # and no general-purpose minimiser does better
        bfgs = so.minimize(f, np.zeros(r), method="BFGS", options={"gtol": 1e-12}).x
        assert f(out[i]) <= f(bfgs) + 1e-12 * abs(f(bfgs))


def test_objective_sparse_equals_dense(seed):
    problem, _ = small_problem(seed)
    V = np.random.default_rng(seed).standard_normal((problem.n_points, problem.rank))
    assert admm_objective(problem, V) == pytest.approx(
        admm_objective_dense(problem, V @ V.T), rel=1e-12
    )


def test_primal_residual_goes_to_zero(seed):
    problem, _ = small_problem(seed, n=150, n_pairs=120)
    res = fit_admm(problem, max_iter=800, tol=1e-7)
    vnorm = np.linalg.norm(res.V)
    assert res.primal_trace[-1] / vnorm < 1e-7
    assert res.primal_trace[-1] < 1e-3 * res.primal_trace[0]
    np.testing.assert_allclose(res.V, res.U, atol=1e-6 * vnorm)


def test_adaptive_rho_follows_eq15(seed):
    problem, _ = small_problem(seed, n=80)
    res = fit_admm(problem, max_iter=60, tol=0.0)
    p, d, rho = map(np.asarray, (res.primal_trace, res.dual_trace, res.rho_trace))
    for k in range(len(rho) - 1):
        if p[k] > 10 * d[k]:
            assert rho[k + 1] == 2 * rho[k]
        elif d[k] > 10 * p[k]:
            assert rho[k + 1] == max(rho[k] / 2, 10.0)
        else:
            assert rho[k + 1] == rho[k]


@pytest.mark.parametrize("diagonal", [True, False])
def test_reaches_sdp_optimum_on_tiny_problems(seed, diagonal):
    cp = pytest.importorskip("cvxpy")
    problem, _ = small_problem(seed, n=12, n_pairs=10, diagonal=diagonal, rank=12, k=3)
    c = problem.constraints
    n = problem.n_points
    K = cp.Variable((n, n), PSD=True)
    L = problem.L.toarray()
    tgt = (c.t > 0).astype(float)
    loss = problem.gamma * cp.sum_squares(K[c.i, c.j] - tgt)
    if diagonal:
        loss += 0.5 * problem.gamma * cp.sum_squares(cp.diag(K) - 1)
    sdp = cp.Problem(cp.Minimize(cp.trace(L @ K) + loss))
    sdp.solve(solver=cp.CLARABEL)
    f_sdp = sdp.value
    assert f_sdp == pytest.approx(admm_objective_dense(problem, K.value), rel=1e-6)
    res = fit_admm(problem, max_iter=3000, tol=1e-9)
    f = admm_objective(problem, res.V)
    assert f >= f_sdp - 1e-6 * abs(f_sdp)  # the SDP is a lower bound
    assert f <= f_sdp + 0.01 * abs(f_sdp)


def test_thread_count_does_not_change_the_result(seed):
    # above 2 chunks of rows so the parallel path runs
    problem, _ = small_problem(seed, n=3000, n_pairs=2000, rank=8, k=5)
    a = fit_admm(problem, max_iter=15, tol=0.0, executor=InProcessExecutor(1))
    b = fit_admm(problem, max_iter=15, tol=0.0, executor=InProcessExecutor(2))
    np.testing.assert_array_equal(a.V, b.V)
    assert a.objective_trace == b.objective_trace


_TRACES = ("objective_trace", "primal_trace", "dual_trace", "change_trace", "rho_trace")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "threads, n, diagonal", [(1, 300, True), (2, 3000, True), (1, 1200, False)]
)
def test_fused_loop_equals_the_reference_loop_bitwise(seed, dtype, threads, n, diagonal):
    """The compiled loop (``_kernels.admm_run``) against one ``session.iterate`` +
    ``session.objective`` per iteration: same V, U and every trace, bit for bit -- with
    adaptive rho (eq. 15) moving and the stopping test ending the run mid-call."""
    problem, _ = small_problem(
        seed, n=n, n_pairs=2 * n // 3, diagonal=diagonal, rank=8, dtype=dtype, k=5
    )
    kw = {"max_iter": 300, "tol": 1e-3, "executor": InProcessExecutor(threads)}
    ref = fit_admm(problem, fused=False, **kw)
    got = fit_admm(problem, **kw)
    assert len(set(ref.rho_trace)) > 1  # eq. (15) acted
    assert ref.converged and got.converged and got.n_sweeps == ref.n_sweeps < 300
    np.testing.assert_array_equal(got.V, ref.V)
    np.testing.assert_array_equal(got.U, ref.U)
    for key in _TRACES:
        assert getattr(got, key) == getattr(ref, key), key
    assert got.objective == ref.objective


@pytest.mark.parametrize("diagonal", [True, False])
@pytest.mark.parametrize("n_parts", [1, 2, 7, 16])
def test_admm_parts_cut_rows_into_runs_of_equal_cost(seed, diagonal, n_parts):
    """``admm_parts``: boundaries 0 < ... < n, and every run's cost (the docstring's model,
    recomputed here row by row) within one row's cost of total / n_parts."""
    from npkl_dist.solvers.admm._kernels import admm_parts

    rng = np.random.default_rng(seed)
    n, r = 500, 7
    deg = rng.integers(0, 60, n) * (rng.random(n) < 0.7)  # uneven degrees, some rows empty
    ncon = rng.integers(0, 9, n)
    indptr = np.concatenate(([0], np.cumsum(deg)))
    cptr = np.concatenate(([0], np.cumsum(ncon)))
    b = admm_parts(indptr, cptr, diagonal, r, n_parts)
    assert b.dtype == np.int64 and b[0] == 0 and b[-1] == n and np.all(np.diff(b) > 0)
    assert len(b) - 1 == n_parts
    p = ncon + (1 if diagonal else 0)
    cost = np.array([(deg[i] + p[i] * (p[i] + 3) / 2 + 4) * r for i in range(n)])
    run_costs = np.array([cost[b[k] : b[k + 1]].sum() for k in range(len(b) - 1)])
    assert np.all(np.abs(run_costs - cost.sum() / n_parts) <= cost.max())
    # more runs than rows: none empty; rows of equal cost get one run each
    few = admm_parts(indptr[:4], cptr[:4], diagonal, r, 10)
    assert few[0] == 0 and few[-1] == 3 and np.all(np.diff(few) > 0)
    same = np.arange(4) * 5
    assert np.array_equal(admm_parts(same, same, diagonal, r, 10), np.arange(4))


def test_fused_loop_is_bitwise_the_same_for_any_row_runs(seed, monkeypatch):
    """Rows are independent, so how ``admm_run``'s threads split them cannot change a bit:
    runs of one row, uneven runs and a single run against the balanced default."""

    problem, _ = small_problem(seed, n=2100, n_pairs=1400, rank=8, k=5)
    kw = {"max_iter": 60, "tol": 1e-3, "executor": InProcessExecutor(2)}
    ref = fit_admm(problem, **kw)
    n = problem.n_points
    for cuts in ([0, n], [0, 1, 2, 3, 1500, n], [0, 700, 701, n - 1, n]):
        monkeypatch.setattr(
            "npkl_dist.solvers.admm._local.admm_parts",
            lambda *a, cuts=cuts: np.array(cuts, np.int64),
        )
        got = fit_admm(problem, **kw)
        np.testing.assert_array_equal(got.V, ref.V)
        np.testing.assert_array_equal(got.U, ref.U)
        for key in _TRACES:
            assert getattr(got, key) == getattr(ref, key), key


def test_fused_loop_with_hooks_runs_one_iteration_per_call(seed):
    """With a callback or on_sweep every iteration is reported as it ends, with the values
    of the reference loop; without hooks the whole run is one call."""
    problem, _ = small_problem(seed, n=200, n_pairs=150, rank=8)
    seen_ref, seen, states = [], [], []
    ref = fit_admm(
        problem, max_iter=40, tol=0.0, fused=False, callback=lambda *a: seen_ref.append(a)
    )
    got = fit_admm(
        problem,
        max_iter=40,
        tol=0.0,
        callback=lambda *a: seen.append(a),
        on_sweep=lambda state, session: states.append(
            (state["sweep"], state["rho"], session.gather()[0].copy())
        ),
    )
    assert seen == seen_ref and len(seen) == 40
    assert [s[0] for s in states] == list(range(1, 41))
    # the state after iteration k carries the rho the reference uses for iteration k + 1
    assert [s[1] for s in states[:-1]] == ref.rho_trace[1:]
    np.testing.assert_array_equal(states[-1][2], got.V[got_plan_order(problem)])
    np.testing.assert_array_equal(got.V, ref.V)


def got_plan_order(problem):
    return nk.make_plan(problem, relabel="rcm").order


def test_half_step_smooth_by_product_equals_smooth_terms(seed):
    """The U-step's by-product x_i'(L X)_i is the objective's smooth term, bit for bit."""
    from npkl_dist.solvers.admm._kernels import admm_smooth_terms

    problem, _ = small_problem(seed, n=200, n_pairs=150, rank=8)
    plan = nk.make_plan(problem)
    prep = nk.prepare(problem, plan)
    rng = np.random.default_rng(seed)
    n, r = problem.n_points, problem.rank
    X, Lam = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    out, out_plain, sm, ref = np.empty((n, r)), np.empty((n, r)), np.empty(n), np.empty(n)
    args = (
        prep.indptr,
        prep.indices,
        prep.data,
        prep.diag,
        prep.cptr,
        prep.cidx,
        prep.csgn,
        True,
        X,
        Lam,
        1.0,
        7.0,
        problem.gamma,
        prep.pmax,
    )
    nrm = np.empty(n)
    admm_row_norms(X, nrm)
    admm_rows(0, n, *args, out, sm, nrm)
    admm_rows(0, n, *args, out_plain, np.empty(0), nrm)
    admm_smooth_terms(prep.indptr, prep.indices, prep.data, prep.diag, X, ref)
    np.testing.assert_array_equal(sm, ref)
    np.testing.assert_array_equal(out, out_plain)
    assert sm.sum() == pytest.approx(
        np.sum(X * (problem.L.toarray()[np.ix_(plan.order, plan.order)] @ X)), rel=1e-12
    )


def test_float32_agrees_with_float64(seed):
    """float32 and float64 agree to 1e-4 relative in V after 50 iterations (measured: ~1e-6)."""
    p64, _ = small_problem(seed, n=200, n_pairs=150, rank=8)
    p32, _ = small_problem(seed, n=200, n_pairs=150, rank=8, dtype="float32")
    a = fit_admm(p64, max_iter=50, tol=0.0)
    b = fit_admm(p32, max_iter=50, tol=0.0)
    assert b.V.dtype == np.float32
    rel = np.linalg.norm(a.V - b.V) / np.linalg.norm(a.V)
    assert rel < 1e-4
    assert b.objective == pytest.approx(a.objective, rel=1e-4)


def test_clusters_iris_like_the_paper():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    g = nk.knn_graph(X, 5, warn=False)
    c = nk.sample_constraints(y, seed=0, diagonal=True)
    problem = nk.NPKLProblem.build(g.laplacian(1e-3), c, loss="square")
    # Pataki bound over |T| as kl-admm Table 1 counts it: 2 * 180 + 150 = 510 -> r = 31
    assert problem.rank == 31
    res = fit_admm(problem, max_iter=500)
    acc = nk.clustering_metrics(y, nk.kernel_kmeans(res.V, 3))["rand_accuracy"]
    assert acc > 0.95  # kl-admm Table 2: 98.69 +- 1.08


@pytest.mark.parametrize(
    "kwargs, needle",
    [({"max_iter": 0}, "max_iter"), ({"rho": -1.0}, "rho"), ({"tol": float("nan")}, "tol")],
)
def test_errors(seed, kwargs, needle):
    problem, _ = small_problem(seed)
    with pytest.raises(nk.ValidationError, match=needle):
        fit_admm(problem, **kwargs)


def test_other_losses_refused(seed):
    problem, _ = small_problem(seed)
    hinge = nk.NPKLProblem.build(problem.L, problem.constraints, loss="hinge", rank=3)
    with pytest.raises(nk.ValidationError, match="square"):
        fit_admm(hinge)


def test_threaded_loop_from_its_threshold_is_bitwise_the_serial_fit(seed, monkeypatch):
    """From ADMM_PARALLEL_MIN_N rows a multi-thread executor runs ``admm_run`` on its
    threads (8 work items each), below it the serial compilation; the threaded fit is bitwise
    the one-thread fit: V, U and every trace, plain and with Anderson (whose extrapolation
    replaces U after the iteration that computed U's row norms)."""
    import numba

    from npkl_dist.solvers.admm import _local as _inprocess

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads")
    used = []
    for name in ("admm_run", "admm_run_serial"):
        real = getattr(_inprocess, name)
        monkeypatch.setattr(
            _inprocess,
            name,
            lambda *a, real=real, name=name: (used.append((name, len(a[24]) - 1)), real(*a))[1],
        )
    n = _inprocess.ADMM_PARALLEL_MIN_N
    problem, _ = small_problem(seed, n=n, n_pairs=n // 2, rank=7, k=5)
    for anderson in (0, 3):
        kw = {"max_iter": 60, "tol": 1e-6, "anderson": anderson}
        used.clear()
        ref = fit_admm(problem, executor=InProcessExecutor(1), **kw)
        assert used == [("admm_run_serial", 1)]
        used.clear()
        got = fit_admm(problem, executor=InProcessExecutor(2), **kw)
        assert used == [("admm_run", 16)]
        np.testing.assert_array_equal(got.V, ref.V)
        np.testing.assert_array_equal(got.U, ref.U)
        for key in _TRACES:
            assert getattr(got, key) == getattr(ref, key), key
    below, _ = small_problem(seed, n=n - 1, n_pairs=n // 2, rank=4, k=5)
    used.clear()
    fit_admm(below, max_iter=5, executor=InProcessExecutor(2))
    assert used == [("admm_run_serial", 1)]
