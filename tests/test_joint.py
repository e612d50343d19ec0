"""Joint moves of the hinge loss (npkl_dist._joint) against slow references.

* the direction's directional derivative equals -||W g*||^2 (finite differences of the
  objective, evaluated independently of the module);
* g* has the least W-norm in the subdifferential (no random multiplier vector beats it; the
  bounded least squares agrees with scipy's L-BFGS-B on the same problem);
* at a stall of the row updates the per-row KKT residual is ~0 while the joint one is not,
  and at the SDP optimum both vanish;
* the Dask executor takes the same moves as in-process (bitwise): tests/test_dask.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize as so

from npkl_dist import NPKLProblem, fit_bcd, make_plan, objective, prepare
from npkl_dist._joint import KINK_RTOL, hinge_joint_move, joint_kkt
from npkl_dist._kkt import kkt_residual
from npkl_dist.executors import InProcessExecutor

from test_reference import fit_tiny, solve_sdp, tiny_problem

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


def subgradient_parts(prep, V):
    """Dense reference: G (smooth + pairs inside the margin) and one column per kink pair."""
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
        if abs(z - 1) <= KINK_RTOL * max(1, abs(z)):
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
    ref = so.minimize(lambda a: 0.5 * np.sum((WG + WA @ a) ** 2), np.full(len(cols), 0.5),
                      jac=lambda a: WA.T @ (WG + WA @ a), method="L-BFGS-B",
                      bounds=[(0, 1)] * len(cols), options={"ftol": 1e-15, "gtol": 1e-12})
    best = np.linalg.norm(w[:, None] * gstar)
    assert best == pytest.approx(np.linalg.norm(WG + WA @ ref.x), rel=1e-7)
    rng = np.random.default_rng(0)
    for _ in range(200):
        assert np.linalg.norm(WG + WA @ rng.uniform(0, 1, len(cols))) >= best - 1e-12
    # the directional derivative of f along D is -||W g*||^2 (finite differences)
    f0 = f_internal(problem, plan, V)
    for h in (1e-5, 1e-6):
        fd = (f_internal(problem, plan, V + h * move.direction) - f0) / h
        assert fd == pytest.approx(-best**2, rel=1e-3)
    # the line search's decrease is the objective's
    f1 = f_internal(problem, plan, V + move.step * move.direction)
    assert move.step > 0 and f1 - f0 == pytest.approx(move.decrease, rel=1e-9, abs=1e-14)
    assert move.kkt == pytest.approx(best / np.linalg.norm(V), rel=1e-12)


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
    sq = NPKLProblem.build(problem.L, problem.constraints, loss="squared_hinge",
                           rank=problem.rank, seed=problem.seed)
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
