"""Joint moves of the hinge loss (npkl_dist.solvers.bcd._joint) against slow references.

* the direction's directional derivative equals -||W g*||^2 (finite differences of the
  objective, evaluated independently of the module);
* g* has the least W-norm in the subdifferential (no random multiplier vector beats it; the
  bounded least squares agrees with scipy's L-BFGS-B on the same problem);
* at a stall of the row updates the per-row KKT residual is ~0 while the joint one is not,
  and at the SDP optimum both vanish;
* the Dask executor takes the same moves as in-process (bitwise): tests/executors/test_dask.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize as so
from test_reference import fit_tiny, solve_sdp, tiny_problem

from npkl_dist import (
    NPKLProblem,
    fit_bcd,
    knn_graph,
    make_plan,
    objective,
    prepare,
    sample_constraints,
)
from npkl_dist.executors import InProcessExecutor
from npkl_dist.solvers._kkt import kkt_residual
from npkl_dist.solvers.bcd._joint import KINK_LADDER, KINK_RTOL, hinge_joint_move, joint_kkt

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist._errors.ConvergenceWarning")


def stalled(seed=10, n=12):
    """The pinned instance where hinge row updates stop 3.2% above the SDP optimum."""
    problem = tiny_problem(seed, "hinge", n=n)
    res = fit_tiny(problem, joint=False)
    plan = make_plan(problem)
    prep = prepare(problem, plan)
    return problem, plan, prep, res.V[plan.order].astype(np.float64)


def f_internal(problem, plan, V):
    out = np.empty_like(V)
    out[plan.order] = V
    return objective(problem, out)


def subgradient_parts(prep, V, kink_rtol=KINK_RTOL):
    """Dense reference: G (smooth + pairs inside the margin) and one column per kink pair
    (the pairs within ``kink_rtol`` of their kink)."""
    n, r = V.shape
    off = np.zeros((n, n))
    for i in range(n):
        for s in range(prep.indptr[i], prep.indptr[i + 1]):
            off[i, prep.indices[s]] = prep.data[s]
    L = off + np.diag(prep.diag)
    G = 2 * L @ V
    cols = []
    for i, j, t in zip(prep.pi, prep.pj, prep.pt.astype(float)):
        z = t * V[i] @ V[j]
        a = np.zeros((n, r))
        a[i] -= prep.gamma * t * V[j]
        a[j] -= prep.gamma * t * V[i]
        if abs(z - 1) <= kink_rtol * max(1, abs(z)):
            cols.append(a)
        elif z < 1:
            G += a
    return G, cols, 1 / (2 * prep.diag)


def test_direction_is_steepest_descent_of_the_subdifferential():
    problem, plan, prep, V = stalled()
    move = hinge_joint_move(prep, V)
    assert move.n_kink >= 1
    G, cols, w = subgradient_parts(prep, V)
    # g* = -W^-2 D lies in the subdifferential: G + sum alpha_p a_p with alpha in [0, 1]
    gstar = -move.direction / w[:, None] ** 2
    A = np.stack([c.ravel() for c in cols], axis=1)
    alpha, *_ = np.linalg.lstsq(A, (gstar - G).ravel(), rcond=None)
    assert np.allclose(A @ alpha, (gstar - G).ravel(), atol=1e-10)
    assert np.all(alpha >= -1e-8) and np.all(alpha <= 1 + 1e-8)
    # least W-norm: L-BFGS-B on the same bounded least squares, and random multipliers
    WA = (w[:, None, None] * np.stack(cols, axis=-1)).reshape(-1, len(cols))
    WG = (w[:, None] * G).ravel()
    ref = so.minimize(
        lambda a: 0.5 * np.sum((WG + WA @ a) ** 2),
        np.full(len(cols), 0.5),
        jac=lambda a: WA.T @ (WG + WA @ a),
        method="L-BFGS-B",
        bounds=[(0, 1)] * len(cols),
        options={"ftol": 1e-15, "gtol": 1e-12},
    )
    best = np.linalg.norm(w[:, None] * gstar)
    assert best == pytest.approx(np.linalg.norm(WG + WA @ ref.x), rel=1e-7)
    rng = np.random.default_rng(0)
    for _ in range(200):
        assert np.linalg.norm(WG + WA @ rng.uniform(0, 1, len(cols))) >= best - 1e-12
    # the directional derivative of f along D is -||W g*||^2 (finite differences)
    f0 = f_internal(problem, plan, V)
    for h in (1e-5, 1e-6):
        fd = (f_internal(problem, plan, V + h * move.direction) - f0) / h
        assert fd == pytest.approx(-(best**2), rel=1e-3)
    # the line search's decrease is the objective's
    f1 = f_internal(problem, plan, V + move.step * move.direction)
    assert move.step > 0 and f1 - f0 == pytest.approx(move.decrease, rel=1e-9, abs=1e-14)
    assert move.kkt == pytest.approx(best / np.linalg.norm(V), rel=1e-12)


def creeping(n=300, sweeps=200):
    """A point where hinge sweeps with the exact kink set's joint moves creep: after 200
    sweeps of 300 points, that move lowers f by 1.8e-4 and the ladder's by 0.25 (measured)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0)
    problem = NPKLProblem.build(
        knn_graph(X, 6, warn=False).laplacian(1e-3),
        sample_constraints(y, seed=0),
        loss="hinge",
        rank=8,
        seed=0,
    )
    plan = make_plan(problem)
    res = fit_bcd(
        problem,
        method="sweeps",
        max_sweeps=sweeps,
        kink_ladder=(KINK_RTOL,),
        hinge_kkt=False,
        plan=plan,
    )
    return problem, plan, prepare(problem, plan), res.V[plan.order].astype(np.float64)


def test_kink_ladder_move_is_the_best_of_its_epsilon_directions():
    problem, plan, prep, V = creeping()
    exact = hinge_joint_move(prep, V, ladder=(KINK_RTOL,))
    move = hinge_joint_move(prep, V)
    # the reported residual is the exact kink set's, whatever direction is taken
    assert move.kkt == exact.kkt == pytest.approx(joint_kkt(prep, V), rel=1e-12)
    # the ladder's move: a wider kink set, and far more decrease than the exact one's
    assert move.kink_rtol > KINK_RTOL and move.n_kink > exact.n_kink
    assert move.decrease < 100 * exact.decrease < 0
    # it is the best of the ladder's candidates, each taken alone
    each = [hinge_joint_move(prep, V, kink_rtol=e, ladder=()) for e in KINK_LADDER]
    assert move.decrease == min(m.decrease for m in each)
    # its decrease is the objective's (evaluated independently)
    f0 = f_internal(problem, plan, V)
    f1 = f_internal(problem, plan, V + move.step * move.direction)
    assert f1 - f0 == pytest.approx(move.decrease, rel=1e-9)
    # its direction is -W^2 g* for the least-W-norm g* of the epsilon-subdifferential
    G, cols, w = subgradient_parts(prep, V, move.kink_rtol)
    assert len(cols) == move.n_kink
    WA = (w[:, None, None] * np.stack(cols, axis=-1)).reshape(-1, len(cols))
    WG = (w[:, None] * G).ravel()
    ref = so.minimize(
        lambda a: 0.5 * np.sum((WG + WA @ a) ** 2),
        np.full(len(cols), 0.5),
        jac=lambda a: WA.T @ (WG + WA @ a),
        method="L-BFGS-B",
        bounds=[(0, 1)] * len(cols),
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000},
    )
    gstar = -move.direction / w[:, None] ** 2
    assert np.linalg.norm(w[:, None] * gstar) == pytest.approx(
        np.linalg.norm(WG + WA @ ref.x), rel=1e-6
    )
    A = np.stack([c.ravel() for c in cols], axis=1)
    alpha, *_ = np.linalg.lstsq(A, (gstar - G).ravel(), rcond=None)
    assert np.allclose(A @ alpha, (gstar - G).ravel(), atol=1e-9)


def test_joint_kkt_detects_the_stall_and_vanishes_at_the_optimum():
    problem, plan, prep, V = stalled()
    assert kkt_residual(prep, V) < 1e-6  # every row is its own exact minimiser
    assert joint_kkt(prep, V) > 1e-2  # yet V is not stationary
    res = fit_tiny(problem)  # joint moves on
    assert res.kkt < 1e-5 and res.kkt == pytest.approx(joint_kkt(prep, res.V[plan.order]))
    f_sdp, K = solve_sdp(problem)
    w, U = np.linalg.eigh((K + K.T) / 2)
    V_sdp = (U * np.sqrt(np.maximum(w, 0)))[plan.order]
    assert joint_kkt(prep, V_sdp) < 1e-3  # the SDP solver's accuracy


def test_fit_takes_moves_only_where_they_lower_the_objective():
    problem, plan, prep, V = stalled()
    res = fit_tiny(problem)
    trace = np.array([res.objective_initial] + res.objective_trace)
    assert np.all(np.diff(trace) <= 1e-12 * np.abs(trace[1:]))
    assert res.joint_moves == sorted(set(res.joint_moves)) and len(res.joint_moves) >= 3
    # smooth losses never move jointly
    sq = NPKLProblem.build(
        problem.L, problem.constraints, loss="squared_hinge", rank=problem.rank, seed=problem.seed
    )
    assert fit_tiny(sq).joint_moves == []


def test_joint_move_refuses_other_losses():
    problem = tiny_problem(0, "square")
    prep = prepare(problem, make_plan(problem))
    with pytest.raises(ValueError, match="hinge"):
        hinge_joint_move(prep, np.ones((problem.n_points, problem.rank)))


def test_block_method_with_joint_moves_reaches_the_sdp_optimum(global_random_seed):
    """Method 'block' with the hinge, joint moves on: within 1% of the SDP optimum (seeds
    0-19 measured: every gap below 2e-8; without joint moves up to 5.2%), monotone."""
    n = 10 + global_random_seed % 5
    problem = tiny_problem(global_random_seed, "hinge", n=n)
    f_sdp, _ = solve_sdp(problem)
    res = fit_tiny(problem, method="block", max_sweeps=400)
    assert res.method == "block"
    assert f_sdp - 1e-6 * abs(f_sdp) <= res.objective <= f_sdp + 0.01 * abs(f_sdp) + 1e-9
    trace = np.array([res.objective_initial] + res.objective_trace)
    assert np.all(np.diff(trace) <= 1e-12 * np.abs(trace[1:]))


def _pair_lsq(seed, n=60, r=5, n_pairs=80, scale_b=1.0):
    """A box least-squares problem shaped like the joint move's: column p has r entries on
    row block i_p and r on row block j_p (random pairs on n points)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    V = rng.standard_normal((n, r)) * rng.uniform(0.3, 3.0, (n, 1))
    pi = rng.integers(0, n, n_pairs)
    pj = (pi + rng.integers(1, n, n_pairs)) % n
    vals = np.concatenate([V[pj], V[pi]]).ravel()
    ridx = (np.concatenate([pi, pj])[:, None] * r + np.arange(r)).ravel()
    cidx = np.repeat(np.concatenate([np.arange(n_pairs)] * 2), r)
    A = sp.csr_matrix((vals, (ridx, cidx)), shape=(n * r, n_pairs))
    # b = A alpha0 + noise with alpha0 partly outside the box: lower, upper and free optima
    alpha0 = rng.uniform(-1.0, 2.0, n_pairs)
    b = A @ alpha0 + scale_b * rng.standard_normal(n * r)
    return A, b


@pytest.mark.parametrize("n_pairs", [5, 80, 300])
def test_box_qp_equals_the_bvls_reference(n_pairs, global_random_seed):
    """The fast multipliers (projected gradient + exact free-set solve on A'A) give the same
    least-norm point A alpha - b as scipy's dense BVLS on A (the previous path), to
    rounding; the problems have multipliers at 0, at 1 and strictly inside."""
    from scipy.optimize import lsq_linear

    from npkl_dist.solvers.bcd._joint import _box_qp, _min_norm_multipliers

    A, b = _pair_lsq(global_random_seed, n_pairs=n_pairs)
    ref = lsq_linear(A.toarray(), b, bounds=(0.0, 1.0), method="bvls", tol=1e-14).x
    alpha = _box_qp((A.T @ A).tocsr(), A.T @ b)
    assert alpha is not None  # certified, no fallback
    assert np.all((alpha >= 0) & (alpha <= 1))
    g_ref, g = A @ ref - b, A @ alpha - b
    assert np.abs(g - g_ref).max() <= 1e-10 * np.abs(b).max()
    assert np.linalg.norm(g) <= np.linalg.norm(g_ref) * (1 + 1e-12)
    if n_pairs >= 80:  # all three kinds of multipliers occur
        assert (alpha == 0).any() and (alpha == 1).any() and ((alpha > 0) & (alpha < 1)).any()
    assert np.array_equal(_min_norm_multipliers((A.T @ A).tocsr(), A.T @ b, None), alpha)


@pytest.mark.parametrize("n_pairs", [5, 80, 300])
def test_compiled_projected_gradient_equals_its_numpy_form(n_pairs, global_random_seed):
    """_apg_box (one compiled loop) runs the iteration of its numpy reference: the same
    stopping iteration (converged or not at each cap) and the same iterate to rounding (the
    momentum test's dot is summed in another order)."""
    from npkl_dist.solvers.bcd._joint import _apg_box, _box_qp_reference_loop

    A, b = _pair_lsq(global_random_seed, n_pairs=n_pairs)
    Q, c = (A.T @ A).tocsr(), A.T @ b
    lip = float(abs(Q).sum(axis=1).max())
    start = np.clip(c / Q.diagonal(), 0.0, 1.0)
    atol = 1e-13 * np.abs(c).max()
    for cap in (1, 7, 30, 5000):
        ref, ok_ref = _box_qp_reference_loop(Q, c, start.copy(), lip, atol, cap)
        a = start.copy()
        ok = _apg_box(
            Q.indptr.astype(np.int64), Q.indices.astype(np.int64), Q.data, c, lip, atol, cap, a
        )
        assert ok == ok_ref
        assert np.abs(a - ref).max() <= 1e-9
    assert ok  # the last cap is the default's, and it converges


@pytest.mark.parametrize("n_pairs", [80, 300])
def test_box_qp_free_set_by_cg_reaches_the_bvls_optimum(n_pairs, global_random_seed, monkeypatch):
    """Large free sets are solved by Jacobi-PCG instead of sparse LU (whose fill explodes at
    1e6 points). Forced here on small problems from a rough projected-gradient point
    (tol=1e-6, which alone is 1e-5 off): CG runs and reaches the least-norm point of scipy's
    dense BVLS, with the exact optimum's free residual."""
    import scipy.sparse.linalg as spla
    from scipy.optimize import lsq_linear

    from npkl_dist.solvers.bcd import _joint

    A, b = _pair_lsq(global_random_seed, n_pairs=n_pairs)
    Q, c = (A.T @ A).tocsr(), A.T @ b
    ref = lsq_linear(A.toarray(), b, bounds=(0.0, 1.0), method="bvls", tol=1e-14).x
    calls = []
    real = spla.cg
    monkeypatch.setattr(spla, "cg", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(_joint, "_DIRECT_MAX", 0)
    alpha = _joint._box_qp(Q, c, tol=1e-6)
    assert calls == [1]
    assert alpha is not None and np.all((alpha >= 0) & (alpha <= 1))
    free = (alpha > 0) & (alpha < 1)
    assert free.sum() >= 5
    assert np.abs((A @ alpha - b) - (A @ ref - b)).max() <= 1e-10 * np.abs(b).max()
    assert np.abs((Q @ alpha - c)[free]).max() <= 1e-12 * np.abs(c).max()


def test_kink_gram_equals_the_products_of_the_kink_matrix(global_random_seed):
    """Q and c built point by point equal A'A and A'b of the joint move's least-squares
    matrix, with repeated pairs (sharing both points) and points in several kink pairs."""
    from npkl_dist.solvers.bcd._joint import _kink_gram, _kink_matrix

    rng = np.random.default_rng(global_random_seed)
    n, r, K = 40, 6, 90
    V = rng.standard_normal((n, r))
    G = rng.standard_normal((n, r))
    w = rng.uniform(0.1, 2.0, n)
    ki = rng.integers(0, n, K)
    kj = (ki + rng.integers(1, n, K)) % n
    ki[-3:], kj[-3:] = ki[0], kj[0]  # the first pair three more times
    kj[-1], ki[-1] = ki[0], kj[0]  # once with its ends swapped
    coef = rng.choice([-1.0, 1.0], K) * rng.uniform(0.5, 2.0, K)
    A, b = _kink_matrix(V, G, w, ki, kj, coef)
    Q, c = _kink_gram(V, G, w, ki, kj, coef)
    Qref = (A.T @ A).toarray()
    assert np.abs(Q.toarray() - Qref).max() <= 1e-12 * np.abs(Qref).max()
    cref = A.T @ b
    assert np.abs(c - cref).max() <= 1e-12 * np.abs(cref).max()
    assert np.bincount(np.r_[ki, kj]).max() >= 5


def test_scatter_pairs_is_numpy_add_at_bitwise(global_random_seed):
    from npkl_dist.solvers.bcd._joint import _scatter_pairs

    rng = np.random.default_rng(global_random_seed)
    n, r, m = 30, 5, 200
    V = rng.standard_normal((n, r))
    G = rng.standard_normal((n, r))
    pi = rng.integers(0, n, m)
    pj = (pi + rng.integers(1, n, m)) % n
    coef = rng.standard_normal(m)
    ref = G.copy()
    np.add.at(ref, pi, -coef[:, None] * V[pj])
    np.add.at(ref, pj, -coef[:, None] * V[pi])
    _scatter_pairs(G, pi, pj, coef, V)
    assert np.array_equal(G, ref)


def test_box_qp_declines_when_not_converged_and_the_reference_decides(monkeypatch):
    from npkl_dist.solvers.bcd import _joint

    A, b = _pair_lsq(3, n_pairs=120)
    assert _joint._box_qp((A.T @ A).tocsr(), A.T @ b, max_iter=1) is None
    monkeypatch.setattr(_joint, "_BOX_QP_MAX_ITER", 1)
    monkeypatch.setattr(_joint._box_qp, "__kwdefaults__", {"tol": 1e-13, "max_iter": 1})
    calls = []
    real = _joint._box_lsq_reference
    monkeypatch.setattr(
        _joint, "_box_lsq_reference", lambda A_, b_: calls.append(1) or real(A_, b_)
    )
    alpha = _joint._min_norm_multipliers((A.T @ A).tocsr(), A.T @ b, lambda: (A, b))
    assert calls == [1]
    assert np.array_equal(alpha, real(A, b))


def test_box_qp_zero_columns():
    import scipy.sparse as sp

    from npkl_dist.solvers.bcd._joint import _box_qp

    A, b = _pair_lsq(5, n_pairs=30)
    A = sp.hstack([A, sp.csr_matrix((A.shape[0], 2))]).tocsr()  # two all-zero columns
    alpha = _box_qp((A.T @ A).tocsr(), A.T @ b)
    assert alpha is not None and np.all(alpha[-2:] == 0)
    assert _box_qp(sp.csr_matrix((0, 0)), np.zeros(0)).size == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_joint_move_fast_multipliers_equal_the_reference_path(seed, monkeypatch):
    """On a stalled hinge fit of 150 points with dozens of kink pairs, the joint move (KKT
    residual, direction, step, decrease) is the same with the fast multipliers as with
    scipy's lsq_linear on A (forced by making _box_qp decline)."""
    from npkl_dist import knn_graph, sample_constraints
    from npkl_dist.solvers.bcd import _joint

    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1, 2], 50)
    X = rng.standard_normal((150, 4)) + 2.0 * y[:, None]
    L = knn_graph(X, 5, seed=seed, warn=False).laplacian(1e-3)
    cons = sample_constraints(y, seed=seed)
    problem = NPKLProblem.build(L, cons, loss="hinge", seed=seed)
    res = fit_bcd(
        problem, max_sweeps=300, tol=1e-9, joint=False, executor=InProcessExecutor(n_threads=1)
    )
    plan = make_plan(problem)
    prep = prepare(problem, plan)
    V = res.V[plan.order].astype(np.float64)
    fast = hinge_joint_move(prep, V)
    assert fast.n_kink >= 20
    monkeypatch.setattr(_joint, "_box_qp", lambda Q, c, **kw: None)
    ref = hinge_joint_move(prep, V)
    assert ref.n_kink == fast.n_kink
    assert fast.kkt <= ref.kkt * (1 + 1e-9)  # the least W-norm: never above the reference
    assert fast.kkt == pytest.approx(ref.kkt, rel=1e-7)
    scale = np.abs(ref.direction).max()
    assert np.abs(fast.direction - ref.direction).max() <= 1e-7 * scale
    assert fast.step == pytest.approx(ref.step, rel=1e-6)
    assert fast.decrease == pytest.approx(ref.decrease, rel=1e-6)
