"""The inductive kernel against its references: the paper's n x n problems (Theorem 1 with
J = I, Theorem 2 with landmarks / cluster indicators) solved by cvxpy on tiny problems, for
each regulariser; the feature map against the exact kernel."""

import cvxpy as cp
import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist.solvers.inductive import _kernels as K
from npkl_dist.solvers.inductive import fit_inductive
from npkl_dist.solvers.inductive._fit import choose_basis

N = 9


def tiny(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, 3))
    y = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    cons = nk.sample_constraints(y, 5, 6, seed=seed)
    return X, cons


def _sqrtm_inv(K):
    w, U = np.linalg.eigh(K)
    return (U / np.sqrt(w)) @ U.T, (U * np.sqrt(w)) @ U.T


def objective_nxn(S, X, cons, regularizer, sigma, bounds, gamma, tau):
    """The paper's n x n objective at K_W = alpha K + K S K (S n x n), slack minimised out:
    f(K^{-1/2} K_W K^{-1/2}) + the slack term, in numpy (the common yardstick)."""
    Kx = K.kernel_block("rbf", sigma, X, X)
    _, Kh = _sqrtm_inv(Kx)
    n = Kx.shape[0]
    alpha = 1.0 if regularizer == "logdet" else 0.0
    inner = alpha * np.eye(n) + Kh @ S @ Kh
    w = np.linalg.eigvalsh(0.5 * (inner + inner.T))
    KW = alpha * Kx + Kx @ S @ Kx
    d = KW[cons.i, cons.i] + KW[cons.j, cons.j] - 2 * KW[cons.i, cons.j]
    b = np.where(cons.t > 0, bounds[0], bounds[1])
    if regularizer == "logdet":
        # ITML's slack: xi >= d (must-link) / xi <= d (cannot-link), gamma D_ld(xi, b); the
        # best xi is b where b is feasible, else d
        xi = np.where(cons.t > 0, np.maximum(d, b), np.minimum(d, b))
        return float(np.sum(w - np.log(w))) + gamma * float(np.sum(xi / b - np.log(xi / b) - 1))
    h = np.maximum(0.0, cons.t * (d - b))
    f = 0.5 * gamma * float(h @ h)
    if regularizer == "frobenius":
        return f + 0.5 * float(np.sum(w * w))
    return f + float(np.sum(w)) + 0.5 * tau * float(np.sum(w * w))


def cvx_reference(X, cons, regularizer, sigma, bounds, gamma, tau, J=None):
    """The n x n problem: K_W = alpha K + K J L J' K (J = I: S = L free, Theorem 1), the
    regulariser f(K^{-1/2} K_W K^{-1/2}) with the problem's slack; returns S = J L J'."""
    Kx = K.kernel_block("rbf", sigma, X, X)
    _, Kh = _sqrtm_inv(Kx)
    n = Kx.shape[0]
    J = np.eye(n) if J is None else J
    r = J.shape[1]
    Lv = cp.Variable((r, r), symmetric=True)
    alpha = 1.0 if regularizer == "logdet" else 0.0
    inner = alpha * np.eye(n) + (Kh @ J) @ Lv @ (J.T @ Kh)  # K^{-1/2} K_W K^{-1/2}
    inner = 0.5 * (inner + inner.T)
    KW = alpha * Kx + (Kx @ J) @ Lv @ (J.T @ Kx)
    u, l = bounds
    d = [KW[i, i] + KW[j, j] - 2 * KW[i, j] for i, j in zip(cons.i, cons.j)]
    b = np.where(cons.t > 0, u, l)
    cstr = []
    if regularizer == "logdet":
        xi = cp.Variable(cons.m)
        obj = cp.trace(inner) - cp.log_det(inner)
        obj += gamma * cp.sum(xi / b - cp.log(xi) + np.log(b) - 1)
        for c in range(cons.m):
            cstr.append(d[c] <= xi[c] if cons.t[c] > 0 else d[c] >= xi[c])
    else:
        h = cp.hstack([cp.pos((d[c] - b[c]) * float(cons.t[c])) for c in range(cons.m)])
        obj = 0.5 * gamma * cp.sum_squares(h)
        if regularizer == "frobenius":
            obj += 0.5 * cp.sum_squares(inner)
        else:
            obj += cp.trace(inner) + 0.5 * tau * cp.sum_squares(inner)
        cstr.append(inner >> 0)
    prob = cp.Problem(cp.Minimize(obj), cstr)
    try:
        prob.solve(solver=cp.CLARABEL)
    except cp.error.SolverError:  # Clarabel gives up on some of these: SCS, run long
        prob.solve(solver=cp.SCS, eps=1e-10, max_iters=200000)
    assert prob.status in ("optimal", "optimal_inaccurate"), prob.status
    return J @ Lv.value @ J.T


def check_against_reference(m, X, cons, regularizer, kw, J=None, rows=None):
    """Our objective is not above cvxpy's (the sharp check: the problem is strongly convex in
    K^{-1/2} K_W K^{-1/2}, so the optimal value fixes the solution), and our kernel equals
    cvxpy's within what an interior-point solution at its default tolerances is accurate to
    on these ill-conditioned kernels (frobenius / trace differ from it by up to ~2e-3 of the
    largest entry while their objectives are lower than cvxpy's)."""
    n = X.shape[0]
    args = (X, cons, regularizer, m.bandwidth, (0.3, 1.2), kw["gamma"], kw.get("tau", 0.0))
    S_ref = cvx_reference(*args, J=J)
    S = np.zeros((n, n))
    rows = np.arange(n) if rows is None else rows
    S[np.ix_(rows, rows)] = m.L
    ours, ref = objective_nxn(S, *args), objective_nxn(S_ref, *args)
    assert ours <= ref + 1e-7 * abs(ref), (ours, ref)
    # the objective the fit reports is the r x r one: the n x n one minus f at alpha I
    constant = n if regularizer == "logdet" else 0.0
    np.testing.assert_allclose(m.info["objective"] + constant, ours, rtol=1e-9)
    Kx = K.kernel_block("rbf", m.bandwidth, X, X)
    alpha = m.alpha
    KW_ref = alpha * Kx + Kx @ S_ref @ Kx
    tol = 1e-4 if regularizer == "logdet" else 3e-3
    np.testing.assert_allclose(m.kernel(X), KW_ref, atol=tol * np.abs(KW_ref).max())


SETTINGS = {
    "logdet": dict(gamma=1.0, tol=1e-12, max_iter=200000),
    "frobenius": dict(gamma=10.0, tol=1e-12, max_iter=200000),
    "trace": dict(gamma=10.0, tau=0.1, tol=1e-12, max_iter=200000),
}


@pytest.mark.parametrize("regularizer", ["logdet", "frobenius", "trace"])
def test_theorem1_full_problem_equals_fit_with_J_identity(regularizer):
    """J = I over the training points (basis = all of them): the fitted kernel on the training
    points is the solution of the paper's n x n problem (1)."""
    X, cons = tiny(1)
    kw = SETTINGS[regularizer]
    m = fit_inductive(X, cons, regularizer=regularizer, basis_points=X, bounds=(0.3, 1.2), **kw)
    assert m.info["converged"]
    check_against_reference(m, X, cons, regularizer, kw)
    # the feature map is exact here (the basis spans the training points)
    Z, got = m.transform(X), m.kernel(X)
    np.testing.assert_allclose(Z @ Z.T, got, atol=1e-8 * np.abs(got).max())


@pytest.mark.parametrize("regularizer", ["logdet", "frobenius", "trace"])
@pytest.mark.parametrize("basis", ["random", "clusters"])
def test_theorem2_reduced_problem_equals_cvxpy(regularizer, basis):
    """A given J (r = 4 < n: landmarks chosen at random, or cluster indicators): the r x r
    solve equals the n x n problem (6) with K_W = alpha K + K J L J' K, solved by cvxpy over L."""
    X, cons = tiny(2)
    kw = SETTINGS[regularizer]
    m = fit_inductive(
        X, cons, regularizer=regularizer, landmarks=4, basis=basis, bounds=(0.3, 1.2), **kw
    )
    assert m.info["converged"]
    # J over the training points: the basis is training rows (random: J selects them) or the
    # sample, here every point, with cluster indicator columns (the fit's own choice, same seed)
    B, Jb = choose_basis(X, 4, basis, 0)
    np.testing.assert_array_equal(B, m.basis)
    rows = [np.flatnonzero(np.all(X == b, axis=1))[0] for b in B]
    J = np.zeros((N, 4 if Jb is None else Jb.shape[1]))
    J[rows] = np.eye(4) if Jb is None else Jb
    check_against_reference(m, X, cons, regularizer, kw, J=J, rows=rows)


def test_feature_map_is_exact_on_the_learned_part_and_nystroem_on_alpha():
    """z(x)'z(y) = kappa_W(x, y) - alpha (kappa(x, y) - q(x)'q(y)): exact for the learned part,
    the alpha part through the basis (Nystroem with landmarks)."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 4))
    y = (X[:, 0] > 0).astype(int)
    cons = nk.sample_constraints(y, 60, 60, seed=5)
    m = fit_inductive(X, cons, landmarks=40, seed=5)
    Xn = rng.standard_normal((50, 4)) * 1.5
    Z, Q = m.transform(Xn), m.coordinates(Xn)
    exact = m.kernel(Xn)
    base = K.kernel_block("rbf", m.bandwidth, Xn, Xn)
    np.testing.assert_allclose(Z @ Z.T, exact - (base - Q @ Q.T), atol=1e-10)
    # and pair_distance is the exact kernel's distance
    i, j = rng.integers(0, 50, 30), rng.integers(0, 50, 30)
    dd = exact[i, i] + exact[j, j] - 2 * exact[i, j]
    np.testing.assert_allclose(m.pair_distance(Xn[i], Xn[j]), dd, atol=1e-10)
