"""SimpleNPKL (simplenpkl-jmlr2011 §4-5, p = 2) against cvxpy's SDP and dense references.

The formulation under test, written here from the paper (conventions of this package: one
term per unordered pair, losses of ``npkl_dist.problem._objective.loss_fn``, weight gamma):

    min  tr(L K) + gamma * sum_pairs loss(t_ij K_ij)   s.t.  K psd,  ||K||_F^2 = tr(K^2) <= B.

The oracles build K, L and T densely from the problem's arrays, never from the module's
sparse operator.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import npkl_dist as nk
from npkl_dist import ConvergenceWarning, ValidationError
from npkl_dist.solvers.simplenpkl import _eigen as snp_eigen
from npkl_dist.solvers.simplenpkl import _fit as snp_fit
from npkl_dist.solvers.simplenpkl._fit import fit_simplenpkl, simplenpkl_objective

cp = pytest.importorskip("cvxpy")


def tiny_problem(
    seed,
    loss="linear",
    n=12,
    n_pairs=6,
    gamma=1.0,
    rank="n",
    k=4,
    delta=1e-2,
    dtype="float64",
    diagonal=False,
):
    """Connected kNN graph on random 2-D points; rank n unless given (None: Pataki)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = (X[:, 0] > 0).astype(np.int64)
    if y.min() == y.max():  # both classes, so that both pair types exist
        y[0] = 1 - y[0]
    g = nk.knn_graph(X, k, warn=False)
    c = nk.sample_constraints(y, n_pairs // 2, n_pairs // 2, seed=seed, diagonal=diagonal)
    return nk.NPKLProblem.build(
        g.laplacian(delta),
        c,
        loss=loss,
        gamma=gamma,
        rank=n if rank == "n" else rank,
        seed=seed,
        dtype=dtype,
    )


def dense_T(problem):
    c = problem.constraints
    T = np.zeros((problem.n_points,) * 2)
    T[c.i, c.j] = c.t
    T[c.j, c.i] = c.t
    return T


def sdp_reference(problem, B):
    """cvxpy: min tr(LK) + gamma sum loss(t K_ij) over K psd, ||K||_F <= sqrt(B)."""
    n = problem.n_points
    c = problem.constraints
    K = cp.Variable((n, n), PSD=True)
    z = cp.multiply(c.t.astype(np.float64), K[c.i, c.j])
    loss = {
        "linear": -cp.sum(z),
        "hinge": cp.sum(cp.pos(1 - z)),
        "squared_hinge": cp.sum_squares(cp.pos(1 - z)),
        "square": cp.sum_squares(1 - z),
    }[problem.loss]
    prob = cp.Problem(
        cp.Minimize(cp.trace(problem.L.toarray() @ K) + problem.gamma * loss),
        [cp.norm(K, "fro") <= np.sqrt(B)],
    )
    # CLARABEL's default stopping sometimes ends 'optimal_inaccurate' on these tiny SDPs
    for solver, opts in (
        ("CLARABEL", {}),
        ("CLARABEL", {"tol_gap_abs": 1e-7, "tol_gap_rel": 1e-7, "tol_feas": 1e-7}),
        ("SCS", {"eps": 1e-9, "max_iters": 200_000}),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            prob.solve(solver=solver, **opts)
        if prob.status == cp.OPTIMAL:
            return float(prob.value), K.value
    raise AssertionError(f"cvxpy could not solve the reference SDP: {prob.status}")


def quiet_fit(problem, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit_simplenpkl(problem, **kw)


# ---------------------------------------------------------------- the sparse matrix A


def test_sparse_A_is_gamma_T_over_2_minus_L(global_random_seed):
    p = tiny_problem(global_random_seed, n=14, n_pairs=10, gamma=1.7)
    op = snp_eigen._SparseA(p)
    A = op.set(np.full(p.constraints.m, p.gamma))
    assert sp.issparse(A)
    np.testing.assert_allclose(A.toarray(), p.gamma * dense_T(p) / 2 - p.L.toarray(), atol=1e-15)
    # tr(A K) = gamma sum_pairs t K_ij - tr(LK): the linear objective is -tr(AK)
    rng = np.random.default_rng(global_random_seed)
    V = rng.standard_normal((p.n_points, 3))
    lin = p.objective(V)
    assert np.isclose(-np.sum(A.toarray() * (V @ V.T)), lin, rtol=1e-12)
    w = rng.standard_normal(p.constraints.m)
    T_w = np.zeros((p.n_points,) * 2)
    T_w[p.constraints.i, p.constraints.j] = w * p.constraints.t
    T_w[p.constraints.j, p.constraints.i] = w * p.constraints.t
    np.testing.assert_allclose(op.set(w).toarray(), T_w / 2 - p.L.toarray(), atol=1e-15)


# ------------------------------------------------------------ linear loss, closed form


@pytest.mark.parametrize("B", [1.0, 100.0])
@pytest.mark.parametrize("n", [10, 14])
def test_linear_closed_form_is_the_sdp_optimum(global_random_seed, n, B):
    p = tiny_problem(global_random_seed, "linear", n=n, n_pairs=n // 2 + 2)
    res = fit_simplenpkl(p, B=B)
    val, K_ref = sdp_reference(p, B)
    K = res.V @ res.V.T
    assert res.solver == "simplenpkl" and res.converged
    assert res.V.shape == (n, n)
    assert abs(res.objective - val) <= 1e-5 * abs(val)
    assert np.max(np.abs(K - K_ref)) <= 1e-3 * max(1.0, np.abs(K_ref).max())
    # Prop. 1 by hand: K = sqrt(B) A_+ / ||A_+||_F, value -sqrt(B) ||A_+||_F
    w, Q = np.linalg.eigh(p.gamma * dense_T(p) / 2 - p.L.toarray())
    wp = np.maximum(w, 0.0)
    np.testing.assert_allclose(K, np.sqrt(B) * (Q * wp) @ Q.T / np.linalg.norm(wp), atol=1e-10)
    assert np.isclose(res.objective, -np.sqrt(B) * np.linalg.norm(wp), rtol=1e-10)
    assert np.isclose(np.sum(K * K), B, rtol=1e-10)
    assert np.isclose(res.objective, simplenpkl_objective(p, res.V, B), rtol=1e-12)


def test_linear_rank_cap_is_the_best_rank_r_kernel(global_random_seed):
    """rank < n: the top-r positive eigenpairs renormalised (eigsh path, n > 2r + 1)."""
    p = tiny_problem(global_random_seed, "linear", n=60, n_pairs=30, gamma=3.0, rank=4, k=5)
    assert not snp_eigen._use_dense(60, 4)
    res = fit_simplenpkl(p, B=100.0)
    w, Q = np.linalg.eigh(p.gamma * dense_T(p) / 2 - p.L.toarray())
    w, Q = w[::-1][:4], Q[:, ::-1][:, :4]
    wp = np.maximum(w, 0.0)
    K_ref = 10.0 * (Q * wp) @ Q.T / np.linalg.norm(wp)
    np.testing.assert_allclose(res.V @ res.V.T, K_ref, atol=1e-8)
    np.testing.assert_allclose(res.eigenvalues, w, atol=1e-9)
    assert res.V.shape == (60, 4)


def test_linear_kernel_is_zero_when_A_is_negative_definite(global_random_seed):
    p = tiny_problem(global_random_seed, "linear", gamma=1e-4)
    res = fit_simplenpkl(p, B=100.0)
    assert np.all(res.V == 0.0) and res.objective == 0.0 and res.converged
    val, _ = sdp_reference(p, 100.0)
    assert abs(val) < 1e-6


# ---------------------------------------------------- saddle point (Alg. 1), three losses


@pytest.mark.parametrize("dual", ["alg1", "lbfgs"])
@pytest.mark.parametrize("loss", ["squared_hinge", "square", "hinge"])
@pytest.mark.parametrize("B", [10.0, 100.0])
def test_saddle_point_reaches_the_sdp_optimum(global_random_seed, loss, B, dual):
    p = tiny_problem(global_random_seed, loss, n=12, n_pairs=6)
    res = quiet_fit(p, B=B, dual=dual)
    val, _ = sdp_reference(p, B)
    # the duals read off a refined hinge kernel may not certify the gap (the dual has a kink
    # at its maximiser when the capacity is slack), the objective is still checked below
    assert res.converged or (loss == "hinge" and res.polished)
    assert res.objective <= val + 0.01 * abs(val)
    assert res.objective >= val - 1e-6 * abs(val)  # feasible, so never below the optimum
    assert np.isclose(res.objective, simplenpkl_objective(p, res.V, B), rtol=1e-10)
    # weak duality and Prop. 6: J(alpha_t) never decreases and stays below the optimum
    d = np.asarray(res.dual_trace)
    assert np.all(np.diff(d) >= -1e-9 * (1 + abs(d[-1])))
    assert np.all(d <= val + 1e-6 * abs(val))
    assert np.sum((res.V.T @ res.V) ** 2) <= B * (1 + 1e-8)


@pytest.mark.parametrize("loss", ["squared_hinge", "square"])
def test_alg1_alone_converges_when_the_capacity_is_active(global_random_seed, loss):
    """B = 10 binds on these problems: Alg. 1 itself certifies a small gap (no refinement)."""
    p = tiny_problem(global_random_seed, loss, n=12, n_pairs=6)
    res = fit_simplenpkl(p, B=10.0, tol=1e-8, max_iter=500, dual="alg1")
    val, K_ref = sdp_reference(p, 10.0)
    assert not res.polished and res.converged
    assert res.capacity_slope < 0
    assert abs(res.objective - val) <= 1e-6 * abs(val)
    np.testing.assert_allclose(res.V @ res.V.T, K_ref, atol=1e-3)
    # every iterate of Alg. 1 sits on the capacity sphere
    assert np.isclose(np.sum((res.V.T @ res.V) ** 2), 10.0, rtol=1e-8)
    # L-BFGS-B on the same dual: the same optimum, certified without refinement, in fewer
    # kernel steps (each one eigendecomposition)
    lb = fit_simplenpkl(p, B=10.0, tol=1e-8, max_iter=500, dual="lbfgs")
    assert not lb.polished and lb.converged
    assert abs(lb.objective - val) <= 1e-6 * abs(val)
    assert lb.duality_gap <= 1e-8 * (abs(lb.objective) + 1)
    np.testing.assert_allclose(lb.V @ lb.V.T, K_ref, atol=1e-3)
    assert np.isclose(np.sum((lb.V.T @ lb.V) ** 2), 10.0, rtol=1e-8)
    assert lb.n_eigsolves < res.n_eigsolves
    assert lb.step_trace == [] and len(res.step_trace) == res.n_sweeps


def test_lbfgs_stops_at_once_when_the_start_is_optimal(global_random_seed):
    """Hinge, alpha_0 = gamma at the box's upper bound with every gradient pointing out of
    the box: L-BFGS-B takes no step; the start is recorded as the one iteration."""
    p = tiny_problem(global_random_seed, "hinge", n=12, n_pairs=6, gamma=1e-3)
    res = fit_simplenpkl(p, B=10.0, dual="lbfgs")
    assert np.all(res.alpha == p.gamma)
    assert res.n_sweeps == 1 and res.change_trace == [0.0] and res.converged
    val, _ = sdp_reference(p, 10.0)
    assert abs(res.objective - val) <= 1e-6 * abs(val) + 1e-9


def test_slack_capacity_is_refined_to_the_interior_optimum(global_random_seed):
    """B = 1e4 is far above what the data ask for: the SDP optimum is inside the ball."""
    p = tiny_problem(global_random_seed, "squared_hinge", n=12, n_pairs=6)
    val, K_ref = sdp_reference(p, 1e4)
    assert np.sum(K_ref**2) < 0.5e4
    for dual in ("alg1", "lbfgs"):
        res = fit_simplenpkl(p, B=1e4, dual=dual)
        assert res.polished
        if dual == "alg1":
            assert res.capacity_slope > 0
        else:  # L-BFGS-B's steps may end exactly on A(alpha)_+ = 0: kernel 0, slope 0
            assert res.capacity_slope > 0 or (
                res.capacity_slope == 0 and res.objective_trace[-1] == p.gamma * 6
            )
        assert res.objective_trace[-1] > val * 1.01  # the sphere kernels are far off
        assert abs(res.objective - val) <= 1e-4 * abs(val)


def _grad_and_J(p, op, alpha, B):
    sigma, P = snp_eigen._top_eigs(op.set(alpha), p.rank, None)
    V, norm = snp_fit._kernel_step(sigma, P, B)
    c = p.constraints
    Kp = np.einsum("kr,kr->k", V[c.i], V[c.j])
    g = 1.0 - c.t * Kp - alpha / (2 * p.gamma)
    J = -np.sqrt(B) * norm + alpha.sum() - alpha @ alpha / (4 * p.gamma)
    return g, J, norm


def _stored_zero_variants(L0):
    """L0 with a stored zero pair added off its pattern: (canonical CSR, the same with row
    0's entries reversed, i.e. not canonical)."""
    L = L0.tolil()
    n = L0.shape[0]
    a, b = next((a, b) for a in range(n) for b in range(a + 1, n) if L[a, b] == 0)
    coo = L0.tocoo()
    rows, cols, vals = np.r_[coo.row, a, b], np.r_[coo.col, b, a], np.r_[coo.data, 0.0, 0.0]
    canonical = sp.csr_matrix((vals, (rows, cols)), shape=L0.shape)
    assert canonical.has_canonical_format and canonical.nnz == L0.nnz + 2
    lo, hi = canonical.indptr[0], canonical.indptr[1]
    unsorted = sp.csr_matrix(
        (
            np.r_[canonical.data[lo:hi][::-1], canonical.data[hi:]],
            np.r_[canonical.indices[lo:hi][::-1], canonical.indices[hi:]],
            canonical.indptr,
        ),
        shape=L0.shape,
    )
    assert hi - lo > 1 and not unsorted.has_canonical_format
    return canonical, unsorted


@pytest.mark.parametrize("single", [False, True])  # single: the pairs added to -L in place
@pytest.mark.parametrize("loss", ["linear", "squared_hinge"])
def test_dense_A_equals_the_sparse_one(global_random_seed, loss, single):
    """The fast path's dense assembly of A(w) (``_DenseA``) is entry for entry the sparse
    A(w) densified, for any weights, and each call returns a fresh array."""
    p = tiny_problem(global_random_seed, loss, n=14, n_pairs=10, gamma=1.7)
    sparse_op, dense_op = snp_eigen._SparseA(p), snp_eigen._DenseA(p, single=single)
    rng = np.random.default_rng(global_random_seed)
    for w in (np.full(p.constraints.m, p.gamma), rng.standard_normal(p.constraints.m)):
        M = dense_op.set(w)
        np.testing.assert_array_equal(M, sparse_op.set(w).toarray())
        # signed zeros too: LAPACK's eigensolvers read the sign of zero entries
        np.testing.assert_array_equal(np.signbit(M), np.signbit(sparse_op.set(w).toarray()))
        M[:] = 0.0  # the solver overwrites it: the next call must not see that
        np.testing.assert_array_equal(dense_op.set(w), sparse_op.set(w).toarray())
    # a stored zero in L (+0.0 in A, as outside the pattern), in canonical CSR (the direct
    # fill) and with a row's entries out of order (scipy's conversion)
    import dataclasses

    for L_variant in _stored_zero_variants(p.L):
        q = dataclasses.replace(p, L=L_variant)
        w = rng.standard_normal(q.constraints.m)
        M = snp_eigen._DenseA(q, single=single).set(w)
        np.testing.assert_array_equal(M, snp_eigen._SparseA(q).set(w).toarray())
        np.testing.assert_array_equal(
            np.signbit(M), np.signbit(snp_eigen._SparseA(q).set(w).toarray())
        )


def test_upper_form_of_A_equals_the_sparse_one(global_random_seed):
    """The fast path's Lanczos input (``_SymA``: the upper form, assembled by one compiled
    merge) is, array for array, what Lanczos made of the sparse A(w) before
    (``_upper_part`` of ``_SparseA``), for any weights, for L with a stored zero and with a
    row out of order; each call returns fresh values."""
    import dataclasses

    from npkl_dist.linalg import _lanczos as lz

    p = tiny_problem(global_random_seed, "squared_hinge", n=14, n_pairs=10, gamma=1.7)
    rng = np.random.default_rng(global_random_seed)
    for L_variant in (p.L, *_stored_zero_variants(p.L)):
        q = dataclasses.replace(p, L=L_variant)
        op = snp_eigen._SymA(q)
        for w in (np.full(q.constraints.m, q.gamma), rng.standard_normal(q.constraints.m)):
            A = snp_eigen._SparseA(q).set(w)
            want = lz._upper_part(A.indptr, A.indices, A.data)
            got = op.set(w)
            assert isinstance(got, lz.SymUpper) and got.shape == A.shape
            for x, y in zip(got, want):
                np.testing.assert_array_equal(x, y)
                assert x.dtype == y.dtype
            np.testing.assert_array_equal(np.signbit(got.udata), np.signbit(want[2]))
            got.udata[:] = 0.0  # a later call must not see that
            np.testing.assert_array_equal(op.set(w).udata, want[2])


def test_dual_gradient_and_local_lipschitz_bound(global_random_seed):
    """grad J = 1 - t K_ij - alpha/(2 gamma) (finite differences) and
    ||grad J(a) - grad J(a')|| <= (sqrt(B)/(2||A_+||) + 1/(2 gamma)) ||a - a'|| locally."""
    p = tiny_problem(global_random_seed, "squared_hinge", n=14, n_pairs=10, gamma=2.0)
    op = snp_eigen._SparseA(p)
    B = 10.0
    rng = np.random.default_rng(global_random_seed)
    alpha = p.gamma * (1.0 + rng.random(p.constraints.m))
    g, J, norm = _grad_and_J(p, op, alpha, B)
    assert norm > 0
    h = 1e-6
    fd = np.array(
        [
            (_grad_and_J(p, op, alpha + h * e, B)[1] - _grad_and_J(p, op, alpha - h * e, B)[1])
            / (2 * h)
            for e in np.eye(p.constraints.m)
        ]
    )
    np.testing.assert_allclose(fd, g, atol=1e-6)
    lip = np.sqrt(B) / (2 * norm) + 1 / (2 * p.gamma)
    for _ in range(20):
        d = rng.standard_normal(p.constraints.m)
        d *= 1e-5 / np.linalg.norm(d)
        g2 = _grad_and_J(p, op, alpha + d, B)[0]
        assert np.linalg.norm(g2 - g) <= lip * np.linalg.norm(d) * (1 + 1e-3)


# ------------------------------------------------------------ eigsh path vs dense path


@pytest.mark.parametrize("loss", ["linear", "squared_hinge"])
def test_lanczos_path_matches_dense_path(global_random_seed, loss, monkeypatch):
    p = tiny_problem(global_random_seed, loss, n=40, n_pairs=30, gamma=4.0, rank=5, k=5)
    assert not snp_eigen._use_dense(40, 5)
    monkeypatch.setattr(snp_fit, "_polish", lambda problem, P, S0, *a, **k: (S0, np.inf, 0, 0.0))
    a = quiet_fit(p, B=10.0, tol=1e-12, max_iter=8)
    monkeypatch.setattr(snp_eigen, "_use_dense", lambda n, k: True)
    b = quiet_fit(p, B=10.0, tol=1e-12, max_iter=8)
    assert a.n_sweeps == b.n_sweeps
    np.testing.assert_allclose(a.objective_trace, b.objective_trace, rtol=1e-9)
    np.testing.assert_allclose(a.dual_trace, b.dual_trace, rtol=1e-9)
    np.testing.assert_allclose(a.V @ a.V.T, b.V @ b.V.T, atol=1e-7)


# --------------------------------------------------------- large n: the sparse path only


def _forbid_dense(monkeypatch):
    def boom(*args, **kw):
        raise AssertionError("an n x n matrix was densified")

    for cls in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.csr_array, sp.coo_array):
        monkeypatch.setattr(cls, "toarray", boom)
        monkeypatch.setattr(cls, "todense", boom)


def _large_problem(n, n_pairs, loss):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 2))
    y = (X[:, 0] > 0).astype(np.int64)
    g = nk.knn_graph(X, 5, warn=False)
    c = nk.sample_constraints(y, n_pairs // 2, n_pairs // 2, seed=0)
    return nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss)


def test_linear_on_20000_points_never_densifies(monkeypatch):
    import tracemalloc

    p = _large_problem(20_000, 20, "linear")  # Pataki rank 5
    _forbid_dense(monkeypatch)
    tracemalloc.start()
    try:
        res = fit_simplenpkl(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200e6  # a dense 20000 x 20000 float64 matrix is 3.2 GB
    assert res.V.shape == (20_000, p.rank) == (20_000, 5)
    assert np.all(np.isfinite(res.V)) and res.converged
    assert np.isclose(np.sum((res.V.T @ res.V) ** 2), snp_fit.DEFAULT_B, rtol=1e-8)
    assert np.isclose(
        res.objective,
        -np.sqrt(snp_fit.DEFAULT_B) * np.linalg.norm(np.maximum(res.eigenvalues, 0)),
        rtol=1e-8,
    )


@pytest.mark.heavy
@pytest.mark.parametrize("loss", ["linear", "squared_hinge", "hinge"])
def test_large_sparse_run(monkeypatch, loss):
    p = _large_problem(20_000, 200, loss)  # Pataki rank 19
    _forbid_dense(monkeypatch)
    res = quiet_fit(p, max_iter=5)
    assert res.V.shape == (20_000, 19)
    assert np.all(np.isfinite(res.V))
    assert res.objective <= res.objective_initial + 1e-9 * abs(res.objective_initial)


# ----------------------------------------------------------------- result contract


def test_result_contract_and_callback(global_random_seed):
    p = tiny_problem(global_random_seed, "squared_hinge", n=14, n_pairs=8, rank=4, dtype="float32")
    calls = []
    res = fit_simplenpkl(p, B=10.0, callback=lambda *a: calls.append(a))
    assert isinstance(res, nk.FitResult) and res.solver == "simplenpkl"
    assert res.V.shape == (14, 4) and res.V.dtype == np.float32
    k = res.n_sweeps
    assert k >= 1 and len(calls) == k
    assert len(res.sweep_seconds) == len(res.change_trace) == len(res.dual_trace) == k
    assert [c[0] for c in calls] == list(range(1, k + 1))
    assert res.fit_seconds >= sum(res.sweep_seconds) > 0
    assert res.objective == pytest.approx(simplenpkl_objective(p, res.V, 10.0), rel=1e-5)
    assert res.alpha.shape == (p.constraints.m,) and np.all(res.alpha >= 0)
    again = fit_simplenpkl(p, B=10.0)
    np.testing.assert_array_equal(res.V, again.V)  # deterministic


@pytest.mark.parametrize("dual", ["alg1", "lbfgs"])
@pytest.mark.parametrize("max_iter", [1, 3, 5])
def test_returned_kernel_is_the_lowest_iterate(global_random_seed, dual, max_iter, monkeypatch):
    """The dual method's iterates are all feasible but their objective need not decrease
    (L-BFGS-B's first steps can rise above the start): the fit returns the lowest one."""
    monkeypatch.setattr(snp_fit, "_polish", lambda problem, P, S0, *a, **k: (S0, np.inf, 0, 0.0))
    p = tiny_problem(global_random_seed, "squared_hinge", n=40, n_pairs=30, rank=5, k=5)
    res = quiet_fit(p, B=100.0 * p.n_points, max_iter=max_iter, tol=0.0, dual=dual)
    seen = [res.objective_initial, *res.objective_trace]
    assert res.objective == pytest.approx(min(seen), rel=1e-9, abs=1e-12)
    assert np.isclose(res.objective, simplenpkl_objective(p, res.V, 100.0 * p.n_points), rtol=1e-6)


def test_default_B_and_rank(global_random_seed):
    p = tiny_problem(global_random_seed, "linear", n=40, n_pairs=12, rank=None, k=5)
    assert p.rank == 4  # Pataki: 4*5/2 = 10 <= 12 < 15
    res = fit_simplenpkl(p)
    assert res.B == snp_fit.DEFAULT_B == 100.0 and res.V.shape == (40, 4)
    assert np.isclose(np.sum((res.V.T @ res.V) ** 2), 100.0, rtol=1e-8)
    assert fit_simplenpkl(p, rank=2).V.shape == (40, 2)


def test_objective_is_infinite_outside_the_capacity(global_random_seed):
    p = tiny_problem(global_random_seed, "hinge")
    rng = np.random.default_rng(global_random_seed)
    V = rng.standard_normal((p.n_points, 3))
    V *= (4.0 / np.sum((V.T @ V) ** 2)) ** 0.25  # tr(K^2) = 4
    assert np.isclose(simplenpkl_objective(p, V, 4.0), nk.objective_dense(p, V @ V.T))
    assert simplenpkl_objective(p, V, 3.9) == np.inf


@pytest.mark.parametrize("dual", ["alg1", "lbfgs"])
def test_unconverged_fit_warns(global_random_seed, monkeypatch, dual):
    p = tiny_problem(global_random_seed, "squared_hinge")
    # without the subspace refinement, two iterations leave a duality gap
    monkeypatch.setattr(snp_fit, "_polish", lambda problem, P, S0, *a, **k: (S0, np.inf, 0, 0.0))
    with pytest.warns(ConvergenceWarning, match="duality gap"):
        res = fit_simplenpkl(p, B=10.0, max_iter=2, tol=1e-10, dual=dual)
    assert not res.converged and res.n_sweeps == 2 and not res.polished
    assert res.duality_gap > 1e-5 * abs(res.objective)


# ----------------------------------------------------------------- input validation


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"B": 0.0}, r"B: .*> 0.*got 0\.0"),
        ({"B": -5}, r"B: .*got -5"),
        ({"B": float("nan")}, "B: "),
        ({"B": True}, "B: "),
        ({"B": "100"}, "B: "),
        ({"max_iter": 0}, "max_iter: .*positive integer"),
        ({"max_iter": 2.5}, "max_iter: "),
        ({"tol": -1e-3}, "tol: .*>= 0"),
        ({"tol": float("inf")}, "tol: "),
        ({"rank": 0}, r"rank: .*\[1, 12\]"),
        ({"rank": 13}, r"rank: .*\[1, 12\].*13"),
        ({"rank": 2.0}, "rank: "),
        ({"callback": 3}, "callback: .*callable"),
        ({"dual": "newton"}, "dual: .*'lbfgs', 'alg1'.*newton"),
        ({"dual": 1}, "dual: "),
    ],
)
def test_validation_errors(kw, match):
    p = tiny_problem(0, "linear")
    with pytest.raises(ValidationError, match=match):
        fit_simplenpkl(p, **kw)


def test_validation_problem_and_objective_arguments():
    with pytest.raises(ValidationError, match="problem: expected an NPKLProblem"):
        fit_simplenpkl("not a problem")
    p = tiny_problem(0, "square", diagonal=True)
    with pytest.raises(ValidationError, match="diagonal=False"):
        fit_simplenpkl(p)
    p = tiny_problem(0, "square")
    with pytest.raises(ValidationError, match=r"V: expected shape \(12, r\)"):
        simplenpkl_objective(p, np.zeros((11, 2)), 1.0)
    with pytest.raises(ValidationError, match="V: holds NaN"):
        simplenpkl_objective(p, np.full((12, 2), np.nan), 1.0)
    with pytest.raises(ValidationError, match="B: "):
        simplenpkl_objective(p, np.zeros((12, 2)), 0)


@pytest.mark.filterwarnings("ignore::npkl_dist.GraphWarning")  # wine's raw features: 2 parts
def test_short_rows_of_unconstrained_points_are_reported():
    """With half of wine's points in no constraint, SimpleNPKL's kernel gives them rows about
    a quarter as long as the constrained points', and kernel k-means on V lumps them
    together: clustering it unnormalised warns and names the fix. At the papers' protocol
    (about 9% of the points free) it stays silent, and so does the fit itself."""
    import warnings

    from sklearn.datasets import load_wine

    from npkl_dist.evaluate import warn_short_free_rows
    from npkl_dist.job._job import FitConfig, run_fit

    X, y = load_wine(return_X_y=True)
    L = nk.knn_graph(X, 5, warn=False).laplacian(1e-3)
    part = y.copy()
    part[np.random.default_rng(0).choice(y.size, y.size // 2, replace=False)] = -1
    for loss in ("linear", "squared_hinge"):
        for labels, warns in ((part, True), (y, False)):
            cons = nk.sample_constraints(labels, seed=0)
            with warnings.catch_warnings():
                warnings.simplefilter("error", nk.ConstraintWarning)
                V = nk.fit_simplenpkl(nk.NPKLProblem.build(L, cons, loss=loss)).V
                if not warns:
                    warn_short_free_rows(cons, V)
            if warns:
                with pytest.warns(nk.ConstraintWarning, match=r"in no constraint.*normalize"):
                    warn_short_free_rows(cons, V)
    # the job path warns when it clusters unnormalised, not when it normalises
    cfg = dict(X=X, y_constraints=part, y_eval=y, solver="simplenpkl", loss="linear")
    with pytest.warns(nk.ConstraintWarning, match=r"kernel_kmeans\(V, k, normalize=True\)"):
        run_fit(FitConfig(**cfg, normalize_kernel=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error", nk.ConstraintWarning)
        run_fit(FitConfig(**cfg, normalize_kernel=True))
    # gamma already chosen by cross-validation: the advice keeps the normalised kernel and
    # no longer tells the user to do what they did
    cons = nk.sample_constraints(part, seed=0)
    V = nk.fit_simplenpkl(nk.NPKLProblem.build(L, cons, loss="linear")).V
    for gamma_cv in (False, True):
        with pytest.warns(
            nk.ConstraintWarning, match=r"kernel_kmeans\(V, k, normalize=True\)"
        ) as rec:
            warn_short_free_rows(cons, V, gamma_cv=gamma_cv)
        assert ("(select_gamma)" in str(rec[0].message)) is not gamma_cv


@pytest.mark.filterwarnings("ignore::npkl_dist.GraphWarning")  # iris's raw features: 2 parts
def test_the_job_tells_the_short_rows_warning_whether_gamma_was_cross_validated(monkeypatch):
    from sklearn.datasets import load_iris

    from npkl_dist.job._job import FitConfig, run_fit

    seen = []
    monkeypatch.setattr(
        "npkl_dist.evaluate.warn_short_free_rows",
        lambda cons, V, stacklevel=2, gamma_cv=False, solver=None: seen.append(gamma_cv),
    )
    X, y = load_iris(return_X_y=True)
    for gamma in (1.0, "cv"):
        run_fit(
            FitConfig(
                X=X, y_constraints=y, y_eval=y, solver="simplenpkl", loss="linear", gamma=gamma
            )
        )
    assert seen == [False, True]


def test_short_rows_advice_works_where_normalising_alone_does_not():
    """Five blobs, 3000 points, 10% labelled: at gamma = 1 SimpleNPKL's linear kernel gives
    the free points rows 0.03 times as long as the constrained ones, and even the normalised
    kernel clusters them at ARI 0.07. The warning's fix, the normalised kernel with gamma by
    cross-validation, picks 0.1 and reaches ARI 0.89 (bench/RESULTS.md, "SimpleNPKL with
    most points in no constraint")."""
    from sklearn.datasets import make_blobs

    from npkl_dist.job._job import FitConfig, run_fit

    X, y = make_blobs(3000, n_features=10, centers=5, cluster_std=4, random_state=0)
    part = y.copy()
    part[np.random.default_rng(0).random(y.size) > 0.1] = -1
    # kernel k-means, which the warning's figures are about (pck, the default with pairs, is
    # tested in tests/test_pckmeans.py)
    cfg = dict(
        X=X,
        y_constraints=part,
        y_eval=y,
        solver="simplenpkl",
        loss="linear",
        clusters=5,
        cluster_method="kmeans",
    )
    with pytest.warns(nk.ConstraintWarning, match=r"normalize=True.*\(select_gamma\)"):
        plain, _, _ = run_fit(FitConfig(**cfg, normalize_kernel=False))
    alone, _, _ = run_fit(FitConfig(**cfg, normalize_kernel=True))
    cv, _, _ = run_fit(FitConfig(**cfg, normalize_kernel=True, gamma="cv"))
    assert plain["metrics"]["ari"] < 0.1 and alone["metrics"]["ari"] < 0.2
    assert cv["gamma"] < 1.0 and cv["metrics"]["ari"] > 0.8
