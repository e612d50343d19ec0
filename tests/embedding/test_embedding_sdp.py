"""SimpleNPKL's embeddings (simplenpkl-jmlr2011 §6) against their own SDPs solved by cvxpy.

Each oracle is written from the formulation (docs/algorithms.md, "Embeddings (SimpleNPKL
§6)"), densely and without the module's operators:

- colored MVU: min -tr(HKHY) + C/2 sum_N (D_pq - d_pq(K))^2,
- MVE's inner problem: min -tr(K K0) + C/2 sum_N (D_pq - d_pq(K))^2, K0 = 2 P_d P_d' - I from
  the previous kernel's top-d eigenvectors,
- SPE: min -tr(KW) + C xi, d_ij >= d_ik - xi for k in N_i, j not in N_i, j != i, xi >= 0,

all over K psd, K 1 = 0, ||K||_F <= sqrt(B). Tolerances: objectives to 1e-6
relative (ours: duality gap 1e-10 to 1e-8; Clarabel's ~1e-8), kernels to 1e-3 of the largest
entry (Clarabel ends 'optimal_inaccurate' on some of these SDPs; the measured differences are
1e-5 to 1e-4).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import npkl_dist as nk
from npkl_dist import ConvergenceWarning, ValidationError
from npkl_dist.embedding import _spe as spe_module
from npkl_dist.embedding import (
    edge_distances,
    embed_cmvu,
    embed_mve,
    embed_spe,
    spe_triplets,
)

cp = pytest.importorskip("cvxpy")

OBJ_RTOL = 1e-6
KERNEL_TOL = 1e-3


def solve(prob):
    """cvxpy's optimum, with the solver fallbacks of the simplenpkl tests."""
    for solver, opts in (
        ("CLARABEL", {}),
        ("CLARABEL", {"tol_gap_abs": 1e-7, "tol_gap_rel": 1e-7, "tol_feas": 1e-7}),
        ("SCS", {"eps": 1e-9, "max_iters": 200_000}),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            prob.solve(solver=solver, **opts)
        if prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            return float(prob.value)
    raise AssertionError(f"cvxpy could not solve the reference SDP: {prob.status}")


def sq_dist(K, i, j):
    return cp.diag(K)[i] + cp.diag(K)[j] - 2 * K[i, j]


def upper_pairs(Dm):
    U = sp.triu(sp.csr_matrix(Dm), 1).tocoo()
    return U.row, U.col, U.data


def sdp_distance(target, Dm, C, B):
    """min -tr(target K) + C/2 sum (D - d(K))^2 over the centred psd ball (target: HYH's
    H K H Y is passed as a callable of K)."""
    n = Dm.shape[0]
    i, j, D = upper_pairs(Dm)
    K = cp.Variable((n, n), PSD=True)
    obj = -target(K) + C / 2 * cp.sum_squares(D - sq_dist(K, i, j))
    prob = cp.Problem(cp.Minimize(obj), [K @ np.ones(n) == 0, cp.norm(K, "fro") <= np.sqrt(B)])
    return solve(prob), K.value


def sdp_cmvu(Dm, y, C, B):
    n = Dm.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    Y = (y[:, None] == y[None, :]).astype(float)
    return sdp_distance(lambda K: cp.trace(H @ K @ H @ Y), Dm, C, B)


def sdp_spe(W, C, B):
    n = W.shape[0]
    adj = W != 0
    trip = [
        (i, j, k)
        for i in range(n)
        for k in range(n)
        if adj[i, k]
        for j in range(n)
        if j != i and not adj[i, j]
    ]
    i, j, k = np.array(trip).T
    K = cp.Variable((n, n), PSD=True)
    xi = cp.Variable(nonneg=True)
    cons = [
        sq_dist(K, i, j) >= sq_dist(K, i, k) - xi,
        K @ np.ones(n) == 0,
        cp.norm(K, "fro") <= np.sqrt(B),
    ]
    prob = cp.Problem(cp.Minimize(-cp.trace(W @ K) + C * xi), cons)
    return solve(prob), K.value, len(trip)


def assert_matches(res, value, K_ref, converged=True, rtol=OBJ_RTOL):
    scale = abs(value) + 1.0
    assert abs(res.objective - value) <= rtol * scale, (res.objective, value)
    # weak duality: J is a lower bound of the SDP's optimum (up to cvxpy's accuracy)
    assert res.dual_objective <= value + rtol * scale
    assert res.converged == converged
    assert res.duality_gap <= np.sqrt(1e-10) * scale
    if K_ref is not None:
        err = np.abs(res.kernel - K_ref).max() / np.abs(K_ref).max()
        assert err <= KERNEL_TOL, err


def assert_feasible(res):
    K = res.kernel
    w = np.linalg.eigvalsh(K)
    assert w.min() >= -1e-9 * w.max()
    assert np.abs(K.sum(axis=0)).max() <= 1e-9 * np.abs(K).max() * K.shape[0]
    assert np.sum(K * K) <= res.B * (1 + 1e-9)
    # the coordinates are K's top-dim part
    E = res.embedding
    assert np.allclose(np.linalg.eigvalsh(E.T @ E)[::-1], res.eigenvalues[: E.shape[1]])


def points(seed, n=24, k=4):
    """Two noisy arcs in 3-D (two classes) and their kNN graph's squared edge lengths."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, np.pi, n)
    y = (np.arange(n) % 2).astype(np.int64)
    X = np.column_stack([np.cos(t) + y, np.sin(t) - 0.5 * y, 0.2 * rng.standard_normal(n)])
    g = nk.knn_graph(X, k, warn=False)
    return X, y, edge_distances(X, g.S)


def karate():
    nx = pytest.importorskip("networkx")
    G = nx.karate_club_graph()
    W = nx.to_numpy_array(G, weight=None)
    y = np.array([G.nodes[v]["club"] == "Mr. Hi" for v in G], dtype=np.int64)
    return W, y


# ---------------------------------------------------------------------------- colored MVU


@pytest.mark.parametrize("B_per_point", [0.1, 1.0, 10.0])
def test_cmvu_matches_its_sdp(global_random_seed, B_per_point):
    X, y, Dm = points(global_random_seed)
    n = X.shape[0]
    res = embed_cmvu(Dm, y, dim=2, C=1.0, B=B_per_point * n)
    value, K_ref = sdp_cmvu(Dm.toarray(), y, 1.0, B_per_point * n)
    assert_matches(res, value, K_ref)
    assert_feasible(res)
    assert not res.capacity_slack
    assert np.sum(res.kernel**2) == pytest.approx(res.B, rel=1e-9)  # the capacity binds


def test_cmvu_on_the_karate_club_with_unit_edges():
    W, y = karate()
    Dm = sp.csr_matrix(W)  # unit edge lengths: every edge's squared length is 1
    res = embed_cmvu(Dm, y, dim=2)
    value, K_ref = sdp_cmvu(W, y, 1.0, 34.0)
    assert_matches(res, value, K_ref)
    assert_feasible(res)


def test_cmvu_slack_capacity_is_refined_to_the_interior_optimum():
    """B far above what the data ask for (C = 100 on the connected karate club, where the
    distances bound K): the dual's kink, the refinement; the objective equals the SDP's (the
    kernel is not unique there, so it is not compared)."""
    W, y = karate()
    res = embed_cmvu(sp.csr_matrix(W), y, C=100.0, B=1e4 * 34)
    value, _ = sdp_cmvu(W, y, 100.0, 1e4 * 34)
    assert res.capacity_slack and res.converged
    assert_feasible(res)
    assert np.sum(res.kernel**2) < 0.1 * res.B
    # the interior optimum: our kernel at least as good as Clarabel's (which stops at ~1e-6
    # relative at this scale), and Clarabel's value within our certificate
    scale = abs(value) + 1.0
    assert res.objective <= value + OBJ_RTOL * scale
    assert res.dual_objective <= value + OBJ_RTOL * scale
    assert res.duality_gap <= 1e-5 * scale


def test_cmvu_real_labels_are_y_y_transposed(global_random_seed):
    X, y, Dm = points(global_random_seed, n=16)
    a = embed_cmvu(Dm, y)
    # classes {0, 1}: [y_i = y_j] = (1 + s_i s_j) / 2 with s = 2y - 1, and the constant 1/2
    # vanishes under H: HYH for labels s / sqrt(2) is the same matrix
    b = embed_cmvu(Dm, (2.0 * y - 1.0)[:, None] / np.sqrt(2.0))
    assert np.allclose(a.kernel, b.kernel, atol=1e-7 * np.abs(a.kernel).max())


# ---------------------------------------------------------------------------- MVE


def mve_K0(K, d):
    w, Q = np.linalg.eigh(K)
    P = Q[:, np.argsort(w)[::-1][:d]]
    return 2 * P @ P.T - np.eye(K.shape[0])


def test_mve_outer_iterations_match_the_sdp_chain(global_random_seed):
    """Three outer steps, ours and cvxpy's chain (K0 from cvxpy's previous kernel; the
    first step is MVU, K0 = I); the MVE objective never decreases."""
    X, y, Dm = points(global_random_seed, n=24, k=5)
    n = X.shape[0]
    res = embed_mve(Dm, dim=2, max_outer=3, outer_tol=0.0)
    K0 = np.eye(n)
    for _ in range(3):
        value, K_ref = sdp_distance(lambda K, K0=K0: cp.trace(K @ K0), Dm.toarray(), 1.0, n)
        K0 = mve_K0(K_ref, 2)
    # max_outer before outer_tol = 0; each of cvxpy's steps starts from its previous kernel,
    # accurate to ~1e-6, so the chain's third objective agrees to 1e-5 (measured: <= 2e-6)
    assert_matches(res, value, K_ref, converged=False, rtol=1e-5)
    assert_feasible(res)
    F = np.array(res.outer_trace)
    assert F.size == 3 and np.all(np.diff(F) >= -1e-7 * np.abs(F).max())


def test_mve_from_a_given_kernel_and_to_convergence(global_random_seed):
    X, y, Dm = points(global_random_seed, n=20, k=5)
    n = X.shape[0]
    Xc = X - X.mean(axis=0)
    res = embed_mve(Dm, dim=2, K_init=Xc @ Xc.T, max_outer=1)
    value, K_ref = sdp_distance(lambda K: cp.trace(K @ mve_K0(Xc @ Xc.T, 2)), Dm.toarray(), 1.0, n)
    assert_matches(res, value, K_ref, converged=False)
    full = embed_mve(Dm, dim=2, max_outer=100, outer_tol=1e-2)
    assert full.converged and len(full.outer_trace) < 100
    # MVE's point: the spectrum collapses onto the top d = 2 eigenvalues (MVU's does not)
    mvu = embed_mve(Dm, dim=2, max_outer=1)
    assert mvu.eigenvalues[2] > 0.1 * mvu.eigenvalues[0]
    assert full.eigenvalues[2] <= 1e-6 * full.eigenvalues[0]


# ---------------------------------------------------------------------------- SPE


def test_spe_on_the_karate_club_matches_its_sdp():
    W, _ = karate()
    res = embed_spe(W, dim=2)
    value, K_ref, m = sdp_spe(W, 1.0, 34.0)
    assert res.alpha.size == m == len(spe_triplets(W))
    assert_matches(res, value, K_ref)
    assert_feasible(res)
    assert res.alpha.min() >= 0 and res.alpha.sum() <= res.C * (1 + 1e-12)


@pytest.mark.parametrize("C", [0.1, 10.0])
def test_spe_matches_its_sdp_on_a_random_graph(global_random_seed, C):
    rng = np.random.default_rng(global_random_seed)
    n = 20
    A = np.triu((rng.random((n, n)) < 0.2).astype(float), 1)
    W = A + A.T
    res = embed_spe(sp.csr_matrix(W), C=C, B=float(n))
    value, K_ref, _ = sdp_spe(W, C, float(n))
    assert_matches(res, value, K_ref)


def test_spe_is_homogeneous_in_the_capacity():
    W, _ = karate()
    a, b = embed_spe(W, B=1.0), embed_spe(W, B=100.0)
    assert np.allclose(b.kernel, 10.0 * a.kernel, atol=1e-4 * np.abs(b.kernel).max())
    assert b.objective == pytest.approx(10.0 * a.objective, rel=1e-6)


def test_spe_triplets_are_neighbour_versus_non_neighbour():
    W = np.zeros((4, 4))
    W[0, 1] = W[1, 0] = W[1, 2] = W[2, 1] = 1.0  # path 0-1-2, node 3 isolated
    T = {tuple(t) for t in spe_triplets(W)}
    assert (0, 2, 1) in T and (0, 3, 1) in T and (2, 0, 1) in T
    assert (1, 3, 0) in T and (1, 3, 2) in T
    assert all(j != i and W[i, k] and not W[i, j] for i, j, k in T)
    assert len(T) == 2 + 2 + 2  # nodes 0 and 2: 2 each; node 1: 1 x 2; node 3: none


# ---------------------------------------------------------------------------- bad input


def _err(fn, *a, **kw):
    with pytest.raises(ValidationError) as info:
        fn(*a, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_bad_input_errors_name_the_argument_value_and_fix():
    X, y, Dm = points(0, n=12)
    n = 12
    D = Dm.toarray()
    bad_sym = D.copy()
    bad_sym[0, 5] += 1.0 if bad_sym[0, 5] else 0.0
    bad_sym[0, 5] = bad_sym[0, 5] or 1.0
    assert "distances: not symmetric" in _err(embed_cmvu, bad_sym, y)
    neg = D.copy()
    i, j = np.argwhere(D > 0)[0]
    neg[i, j] = neg[j, i] = -1.0
    assert "distances: holds a negative" in _err(embed_cmvu, neg, y)
    nan = D.copy()
    nan[i, j] = nan[j, i] = np.nan
    assert "distances: holds NaN" in _err(embed_mve, nan)
    diag = D.copy()
    diag[3, 3] = 1.0
    assert "distances: diagonal entry (3, 3)" in _err(embed_mve, diag)
    assert "distances: stores no pair" in _err(embed_mve, np.zeros((n, n)))
    assert "distances: expected a square" in _err(embed_mve, np.zeros((n, n - 1)))
    assert "labels: expected shape (12,)" in _err(embed_cmvu, Dm, y[:-1])
    assert "at least two classes" in _err(embed_cmvu, Dm, np.zeros(n))
    assert "dim: expected an integer in [1, 11], got 12" in _err(embed_cmvu, Dm, y, dim=n)
    assert "dim: " in _err(embed_spe, sp.csr_matrix(D > 0), dim=0)
    assert "C: expected a finite number > 0, got -1" in _err(embed_cmvu, Dm, y, C=-1)
    assert "B: expected a finite number > 0, got inf" in _err(embed_mve, Dm, B=np.inf)
    assert "max_iter: expected an integer >= 1, got 0" in _err(embed_spe, D > 0, max_iter=0)
    assert "tol: " in _err(embed_cmvu, Dm, y, tol=-1.0)
    assert "max_outer: " in _err(embed_mve, Dm, max_outer=0)
    assert "K_init: expected shape (12, 12)" in _err(embed_mve, Dm, K_init=np.eye(3))
    asym = np.eye(n)
    asym[0, 1] = 1.0
    assert "K_init: not a finite symmetric" in _err(embed_mve, Dm, K_init=asym)
    negW = (D > 0).astype(float)
    negW[i, j] = negW[j, i] = -1.0
    assert "W: holds a negative weight" in _err(embed_spe, negW)
    assert "W: has no edge" in _err(embed_spe, np.zeros((n, n)))
    assert "X: expected shape (12, n_features)" in _err(edge_distances, X[:5], D > 0)


def test_spe_refuses_more_triplets_than_the_exact_path_keeps(monkeypatch):
    W, _ = karate()
    monkeypatch.setattr(spe_module, "MAX_TRIPLETS", 100)
    assert "W: the exact SPE has 3936 triplets" in _err(embed_spe, W)


def test_an_open_gap_warns():
    W, _ = karate()
    with pytest.warns(ConvergenceWarning, match="spe: relative duality gap .* max_iter"):
        res = embed_spe(W, max_iter=1)
    assert not res.converged


def test_capped_simplex_ascent_stops_when_j_stalls_and_finds_the_maximiser():
    """SPE's dual ascent (exact and at scale share it): on J(alpha) = -||alpha - a||^2 with a
    primal that never closes the gap (P = J + 1), only the stall test can stop it, and it
    must, restarts counted (at the maximiser every step restarts; the exact path once ran
    to max_iter there). The best point is the projection of a on the capped simplex."""
    from npkl_dist.embedding._saddle import STALL, ascend_capped_simplex, project_capped_simplex

    rng = np.random.default_rng(0)
    a = rng.normal(0.3, 1.0, 40)
    C = 2.0

    def step(alpha):
        return alpha.copy(), -float(np.sum((alpha - a) ** 2)), -2.0 * (alpha - a)

    (J, alpha, _, _), P, its, trace = ascend_capped_simplex(
        step, lambda s, g: -float(np.sum((s - a) ** 2)) + 1.0, np.zeros(40), C, 5000, 1e-9
    )
    ref = project_capped_simplex(a, C)
    np.testing.assert_allclose(alpha, ref, atol=1e-6)
    assert its < 500 and len(trace) > STALL
    assert P == pytest.approx(J + 1.0)
    assert all(b >= c for b, c in zip(trace[1:], trace[:-1]))  # the best J never falls
