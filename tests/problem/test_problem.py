"""NPKLProblem.build validation, default_rank, fit_bcd argument errors, kernel k-means."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from npkl_dist import (
    LOSSES,
    RANK_CAP,
    Constraints,
    ConvergenceWarning,
    NPKLProblem,
    NpklWarning,
    ValidationError,
    clustering_metrics,
    default_rank,
    fit_bcd,
    kernel_kmeans,
    knn_graph,
    laplacian,
    objective,
    sample_constraints,
)
from npkl_dist.evaluate import pairwise_accuracy_bruteforce
from npkl_dist.executors import InProcessExecutor
from npkl_dist.solvers.bcd._fit import STALL_KKT_FACTOR
from npkl_dist.solvers.bcd._joint import KINK_RTOL

N = 12


@pytest.fixture
def rng(global_random_seed):
    """Seeded generator; NPKL_TESTS_GLOBAL_RANDOM_SEED=all runs every test over 100 seeds."""
    return np.random.default_rng(global_random_seed)


@pytest.fixture
def chain_L():
    """Laplacian of a 12-node path graph."""
    S = sp.diags([np.ones(N - 1), np.ones(N - 1)], [-1, 1], shape=(N, N), format="csr")
    return laplacian(S, delta=0.01)


@pytest.fixture
def cons():
    return Constraints.from_arrays([0, 1, 2, 5, 7], [3, 4, 9, 6, 11], [1, 1, -1, -1, 1], N)


@pytest.fixture
def problem(chain_L, cons):
    return NPKLProblem.build(chain_L, cons, loss="square", gamma=2.0, rank=3, seed=4)


# ---------------------------------------------------------------------------------------------
# NPKLProblem.build: the happy path
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("dtype", ["float32", "float64", np.float32, np.dtype(np.float64)])
def test_build_valid(chain_L, cons, loss, dtype):
    p = NPKLProblem.build(
        chain_L, cons, loss=loss, gamma=3, rank=2, bound=0.5, seed=7, dtype=dtype
    )
    assert p.loss == loss and p.rank == 2 and p.seed == 7
    assert p.gamma == 3.0 and isinstance(p.gamma, float)
    assert p.bound == 0.5
    assert p.dtype == np.dtype(dtype)
    assert p.L.format == "csr" and p.L.dtype == np.dtype(dtype) and p.L.has_sorted_indices
    assert p.n_points == N
    np.testing.assert_allclose(p.L.toarray(), chain_L.toarray(), rtol=1e-6)


def test_build_default_rank_and_other_sparse_formats(chain_L, cons):
    p = NPKLProblem.build(chain_L.tocoo(), cons)
    assert p.rank == default_rank(cons.m, N) == 2  # 2*3/2 = 3 <= 5 < 3*4/2
    assert p.loss == "square" and p.gamma == 1.0 and p.bound == 1.0 and p.seed == 0
    assert p.L.format == "csr"


def test_problem_objective_matches_definition(problem, rng):
    V = rng.standard_normal((N, 3))
    L = problem.L.toarray()
    c = problem.constraints
    z = c.t * np.sum(V[c.i] * V[c.j], axis=1)
    expected = np.trace(V.T @ L @ V) + 2.0 * np.sum((1 - z) ** 2)
    assert problem.objective(V) == pytest.approx(expected, rel=1e-12)
    assert objective(problem, V) == problem.objective(V)


# ---------------------------------------------------------------------------------------------
# NPKLProblem.build: error paths
# ---------------------------------------------------------------------------------------------


def _nan_L(L):
    L = L.tolil(copy=True)
    L[2, 3] = L[3, 2] = np.nan
    return L.tocsr()


def _asym_L(L):
    L = L.tolil(copy=True)
    L[0, 5] = -0.3
    return L.tocsr()


def _nonpositive_diag_L(L):
    L = L.tolil(copy=True)
    L[4, 4] = 0.0
    L[8, 8] = -1.0
    return L.tocsr()


def _zero_diag_L(L):
    L = L.tolil(copy=True)
    L[6, 6] = 0.0  # removes the entry: a structurally missing diagonal
    return L.tocsr()


@pytest.mark.parametrize(
    "make_L, kwargs, name, match",
    [
        pytest.param(
            lambda L: L.toarray(), {}, "L", "expected a square scipy sparse matrix", id="L-dense"
        ),
        pytest.param(
            lambda L: L[:, :-1], {}, "L", "expected a square scipy sparse matrix", id="L-nonsquare"
        ),
        pytest.param(
            lambda L: "L", {}, "L", "expected a square scipy sparse matrix", id="L-string"
        ),
        pytest.param(
            lambda L: L,
            {"loss": "logistic"},
            "loss",
            "'logistic' is not one of",
            id="loss-unknown",
        ),
        pytest.param(lambda L: L, {"loss": "Square"}, "loss", "not one of", id="loss-case"),
        pytest.param(lambda L: L, {"gamma": 0}, "gamma", "finite number > 0", id="gamma-zero"),
        pytest.param(
            lambda L: L, {"gamma": -1.0}, "gamma", "finite number > 0", id="gamma-negative"
        ),
        pytest.param(lambda L: L, {"gamma": np.nan}, "gamma", "finite number > 0", id="gamma-nan"),
        pytest.param(lambda L: L, {"gamma": np.inf}, "gamma", "finite number > 0", id="gamma-inf"),
        pytest.param(lambda L: L, {"gamma": True}, "gamma", "finite number > 0", id="gamma-bool"),
        pytest.param(lambda L: L, {"gamma": "1"}, "gamma", "finite number > 0", id="gamma-str"),
        pytest.param(lambda L: L, {"bound": 0.0}, "bound", "finite number > 0", id="bound-zero"),
        pytest.param(
            lambda L: L, {"bound": -2}, "bound", "finite number > 0", id="bound-negative"
        ),
        pytest.param(lambda L: L, {"bound": np.nan}, "bound", "finite number > 0", id="bound-nan"),
        pytest.param(
            lambda L: L, {"dtype": "int32"}, "dtype", "'float32' or 'float64'", id="dtype-int32"
        ),
        pytest.param(
            lambda L: L,
            {"dtype": "float16"},
            "dtype",
            "'float32' or 'float64'",
            id="dtype-float16",
        ),
        pytest.param(
            lambda L: L,
            {"dtype": "banana"},
            "dtype",
            "expected 'float32' or 'float64'",
            id="dtype-unparseable",
        ),
        pytest.param(lambda L: L, {"rank": 0}, "rank", "positive integer", id="rank-zero"),
        pytest.param(lambda L: L, {"rank": -3}, "rank", "positive integer", id="rank-negative"),
        pytest.param(lambda L: L, {"rank": 2.0}, "rank", "positive integer", id="rank-float"),
        pytest.param(lambda L: L, {"rank": True}, "rank", "positive integer", id="rank-bool"),
        pytest.param(
            lambda L: L, {"rank": N + 1}, "rank", "larger than possible", id="rank-above-n"
        ),
        pytest.param(
            lambda L: L, {"seed": -1}, "seed", "non-negative integer", id="seed-negative"
        ),
        pytest.param(lambda L: L, {"seed": 1.5}, "seed", "non-negative integer", id="seed-float"),
        pytest.param(lambda L: L, {"seed": None}, "seed", "non-negative integer", id="seed-none"),
        pytest.param(_nan_L, {}, "L", "NaN or inf", id="L-nan"),
        pytest.param(_asym_L, {}, "L", "not symmetric", id="L-nonsymmetric"),
        pytest.param(
            _nonpositive_diag_L, {}, "L", r"rows \[4, 8\] are", id="L-nonpositive-diagonal"
        ),
        pytest.param(
            _zero_diag_L,
            {},
            "L",
            r"diagonal entries must be > 0 .* rows \[6\]",
            id="L-zero-diagonal",
        ),
    ],
)
def test_build_errors_name_the_argument(chain_L, cons, make_L, kwargs, name, match):
    with pytest.raises(ValidationError, match=match) as info:
        NPKLProblem.build(make_L(chain_L), cons, **kwargs)
    assert str(info.value).startswith(f"{name}:")


def test_build_rank_equal_to_n_accepted(chain_L, cons):
    assert NPKLProblem.build(chain_L, cons, rank=N).rank == N
    assert NPKLProblem.build(chain_L, cons, rank=np.int64(4)).rank == 4


def test_build_constraints_for_other_n(chain_L):
    other = Constraints.from_arrays([0], [1], [1], N + 1)
    with pytest.raises(ValidationError, match=f"built for {N + 1} points but L has {N}") as info:
        NPKLProblem.build(chain_L, other)
    assert str(info.value).startswith("constraints:")
    with pytest.raises(ValidationError, match="expected a Constraints object") as info:
        NPKLProblem.build(chain_L, np.array([[0, 1, 1]]))
    assert str(info.value).startswith("constraints:")


def test_build_symmetry_tolerance(chain_L, cons):
    L = chain_L.tolil(copy=True)
    L[0, 1] += 1e-9  # far below 1e-6 * max|L|: accepted as symmetric
    NPKLProblem.build(L.tocsr(), cons)


# ---------------------------------------------------------------------------------------------
# default_rank
# ---------------------------------------------------------------------------------------------


def test_default_rank_bruteforce_all_small_m():
    ms = np.arange(20000)
    # largest r with r(r+1)/2 <= m, by counting triangular numbers <= m
    tri = np.arange(1, 400) * np.arange(2, 401) // 2
    r_brute = np.searchsorted(tri, ms, side="right")
    for n in (1, 5, 37, 150, 10**6):
        expected = np.maximum(1, np.minimum(np.minimum(r_brute, RANK_CAP), n))
        got = np.array([default_rank(int(m), n) for m in ms[::7]])
        assert np.array_equal(got, expected[::7]), n
    uncapped = np.array([default_rank(int(m), 10**6, cap=10**6) for m in ms[3::5]])
    assert np.array_equal(uncapped, np.maximum(1, r_brute[3::5]))
    for m in (0, 1, 2, 3, 5, 6, 9, 10, 8255, 8256, 8257, 19999):
        r = next(r for r in range(200, -1, -1) if r * (r + 1) // 2 <= m)
        assert default_rank(m, 10**6) == max(1, min(r, RANK_CAP))


def test_default_rank_cap_boundary():
    assert RANK_CAP == 128
    assert default_rank(128 * 129 // 2 - 1, 10**6) == 127
    assert default_rank(128 * 129 // 2, 10**6) == 128
    assert default_rank(10**9, 10**6) == 128
    assert default_rank(10**9, 50) == 50
    assert default_rank(0, 50) == 1
    assert default_rank(10, 10**6, cap=3) == 3


HUGE = 10**40


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10**20), st.sampled_from(["first", "last", "any"]), st.data())
def test_default_rank_large_m_exact(r0, where, data):
    """The float sqrt is guarded: exact where float64 rounds sqrt(8m + 1) either way.

    m is drawn at (or near) the edges T(r) and T(r + 1) - 1 of a rank's range of m, where
    the float rounding matters.
    """
    offset = {"first": 0, "last": r0, "any": data.draw(st.integers(0, r0))}[where]
    m = r0 * (r0 + 1) // 2 + offset
    r = (math.isqrt(8 * m + 1) - 1) // 2
    assert r == r0
    assert r * (r + 1) // 2 <= m < (r + 1) * (r + 2) // 2
    assert default_rank(m, HUGE, cap=HUGE) == max(1, r)


@pytest.mark.parametrize(
    "r", [10**8, 10**12 + 7, 10**15 + 3, 2**53 + 1, 10**17 + 1, 10**18 + 1, 10**20 + 1]
)
def test_default_rank_at_triangular_boundaries(r):
    tri = r * (r + 1) // 2
    assert default_rank(tri - 1, HUGE, cap=HUGE) == r - 1
    assert default_rank(tri, HUGE, cap=HUGE) == r
    assert default_rank(tri + r, HUGE, cap=HUGE) == r  # T(r + 1) - 1


# ---------------------------------------------------------------------------------------------
# fit_bcd argument errors and the convergence warning
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_sweeps", [0, -1, 2.0, True, None])
def test_fit_bad_max_sweeps(problem, max_sweeps):
    with pytest.raises(ValidationError, match="max_sweeps: expected a positive integer"):
        fit_bcd(problem, max_sweeps=max_sweeps)


@pytest.mark.parametrize("tol", [np.nan, np.inf, -1e-3, "1e-5", None])
def test_fit_bad_tol(problem, tol):
    with pytest.raises(ValidationError, match="tol: expected a finite number >= 0"):
        fit_bcd(problem, tol=tol)


@pytest.mark.parametrize("shape", [(N, 2), (N - 1, 3), (N * 3,), (3, N)])
def test_fit_V0_wrong_shape(problem, shape):
    with pytest.raises(ValidationError, match=r"V0: expected shape \(12, 3\)"):
        fit_bcd(problem, V0=np.zeros(shape))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_fit_V0_nonfinite(problem, rng, bad):
    V0 = rng.standard_normal((N, 3))
    V0[5, 1] = bad
    with pytest.raises(ValidationError, match="V0: holds NaN or inf"):
        fit_bcd(problem, V0=V0)


def test_fit_rejects_diagonal_constraints(chain_L):
    c = Constraints.from_arrays([0, 2], [1, 3], [1, -1], N, diagonal=True)
    p = NPKLProblem.build(chain_L, c, rank=2)
    with pytest.raises(ValidationError, match="diagonal") as info:
        fit_bcd(p)
    assert str(info.value).startswith("constraints:")


def test_fit_convergence_warning_at_max_sweeps(problem):
    with pytest.warns(ConvergenceWarning, match="max_sweeps=2") as rec:
        r = fit_bcd(problem, max_sweeps=2, tol=0.0)
    assert len(rec) == 1
    assert not r.converged and r.n_sweeps == 2
    assert len(r.change_trace) == 2 and r.change_trace[-1] > 0


def test_convergence_warning_suggests_block_solves_only_where_they_apply(problem):
    """A sweep fit that runs out of sweeps names method='block' when the loss and the
    executor allow it; a block fit, the linear loss or an executor without block solves
    get no such hint."""

    def message(p, **kw):
        with pytest.warns(ConvergenceWarning) as rec:
            fit_bcd(p, max_sweeps=2, tol=0.0, **kw)
        return str(rec[0].message)

    text = message(problem, method="sweeps")
    # the fix in the interface's syntax: Python keywords here, flags under `npkl fit`
    assert text.endswith("or try method='block'")
    assert "raise max_sweeps to converge further" in text
    assert "method='block'" not in message(problem, method="block")
    lin = NPKLProblem.build(problem.L, problem.constraints, loss="linear", rank=problem.rank)
    assert "method='block'" not in message(lin, method="sweeps")

    class NoBlock(InProcessExecutor):
        supports_block = False

    assert "method='block'" not in message(problem, method="sweeps", executor=NoBlock())


def _stalling_hinge_problem(loss="hinge"):
    """100 points whose hinge fit by plain sweeps stops on the step-size rule at a joint
    KKT residual of 1.2e-2 (measured; the smooth losses stop at about tol)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 3))
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0)
    g = knn_graph(X, 6, warn=False)
    return NPKLProblem.build(
        g.laplacian(1e-3), sample_constraints(y, seed=0), loss=loss, rank=8, seed=0
    )


#: The joint move of the exact kink set alone: the move that let hinge fits stall here
EXACT_KINKS = (KINK_RTOL,)


def test_a_stalled_fit_is_reported():
    """The step-size rule can fire where hinge sweeps stall far from a stationary point: with
    that rule alone (hinge_kkt=False) and joint moves of the exact kink set only, the fit says
    so (the residual, the factor, tol_kkt, hinge_kkt and the block hint), while the smooth
    losses on the same graph stop at a residual near tol and say nothing."""
    p = _stalling_hinge_problem()
    with pytest.warns(ConvergenceWarning, match="stalled") as rec:
        r = fit_bcd(
            p, method="sweeps", max_sweeps=3000, tol=1e-5, hinge_kkt=False, kink_ladder=EXACT_KINKS
        )
    assert r.converged and r.kkt > STALL_KKT_FACTOR * 1e-5
    msg = str(rec[0].message)
    assert f"{r.kkt:.3g}" in msg and "tol_kkt" in msg and "method='block'" in msg
    assert "hinge_kkt=True" in msg
    # with tol_kkt the fit keeps going instead (and warns at its cap if it never gets there)
    with pytest.warns(ConvergenceWarning, match="max_sweeps=30") as rec:
        fit_bcd(p, method="sweeps", max_sweeps=30, tol=1e-5, tol_kkt=1e-4)
    assert not any("stalled" in str(w.message) for w in rec)
    for loss in ("square", "squared_hinge"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", NpklWarning)
            s = fit_bcd(_stalling_hinge_problem(loss), method="sweeps", max_sweeps=3000, tol=1e-5)
        assert s.converged and s.kkt < 2e-5


def test_hinge_default_stop_goes_on_to_a_stationary_point():
    """The hinge's default stop also needs the joint KKT residual below STALL_KKT_FACTOR x
    tol: where the step-size rule alone stops at a stall (both methods, residuals 1.2e-2 and
    8e-3 here), the default fit goes on, ends at a residual near tol without a warning, and
    at a lower objective; the two methods, which stalled at different points, then agree.
    (With the joint moves of the exact kink set: the default ladder leaves these stalls even
    under the step-size rule alone, test_kink_ladder_moves_leave_the_stall.) The stalls are
    those of the random start, which both methods take here (block fits default to the
    coarse start, from which this instance does not stall), with one pass over the
    constrained rows per outer iteration (c_passes=1: with the two passes that 'auto' takes
    at this density the block fit does not stall either)."""
    p = _stalling_hinge_problem()
    ends = []
    for method in ("sweeps", "block"):
        with pytest.warns(ConvergenceWarning, match="stalled"):
            stalled = fit_bcd(
                p,
                method=method,
                max_sweeps=3000,
                tol=1e-5,
                hinge_kkt=False,
                kink_ladder=EXACT_KINKS,
                start="random",
                c_passes=1,
            )
        with warnings.catch_warnings():
            warnings.simplefilter("error", NpklWarning)
            r = fit_bcd(
                p,
                method=method,
                max_sweeps=3000,
                tol=1e-5,
                kink_ladder=EXACT_KINKS,
                start="random",
                c_passes=1,
            )
        assert r.converged and r.kkt < 1e-5 < STALL_KKT_FACTOR * 1e-5 < stalled.kkt
        assert len(r.change_trace) > len(stalled.change_trace)
        assert r.objective < stalled.objective - 1e-2
        ends.append((stalled.objective, r.objective))
    assert abs(ends[0][0] - ends[1][0]) > 1e-2  # two different stalls
    assert ends[0][1] == pytest.approx(ends[1][1], rel=1e-7)  # one optimum
    # an explicit tol_kkt replaces the default bound (a loose one lets the stall pass)
    loose = fit_bcd(
        p, method="sweeps", max_sweeps=3000, tol=1e-5, tol_kkt=1.0, kink_ladder=EXACT_KINKS
    )
    assert loose.converged and loose.kkt > STALL_KKT_FACTOR * 1e-5


def test_kink_ladder_moves_leave_the_stall():
    """With the default ladder of kink tolerances, the joint moves leave the stall that the
    exact kink set's moves stop at: even the step-size rule alone (hinge_kkt=False) ends at a
    stationary point (residuals 6.4e-6 and 4.1e-6 measured, against 1.2e-2 and 7.8e-3), the
    default stop's optimum, in fewer iterations than the exact moves' default stop needs."""
    p = _stalling_hinge_problem()
    for method in ("sweeps", "block"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", NpklWarning)
            rule = fit_bcd(p, method=method, max_sweeps=3000, tol=1e-5, hinge_kkt=False)
            exact = fit_bcd(p, method=method, max_sweeps=3000, tol=1e-5, kink_ladder=EXACT_KINKS)
        assert rule.converged and rule.kkt < 1e-5
        assert rule.objective == pytest.approx(exact.objective, rel=1e-7)
        assert len(rule.change_trace) < len(exact.change_trace)
        trace = np.array([rule.objective_initial] + rule.objective_trace)
        assert np.all(np.diff(trace) <= 1e-12 * np.abs(trace[1:]))


@pytest.mark.parametrize(
    "ladder", [(), (0.0,), (1e-3, 1.0), (float("nan"),), "1e-3", 1e-3, (True,)]
)
def test_kink_ladder_bad(ladder):
    p = _stalling_hinge_problem()
    with pytest.raises(ValidationError, match=r"kink_ladder: expected a non-empty sequence"):
        fit_bcd(p, max_sweeps=1, kink_ladder=ladder)


def test_fit_no_warning_when_converged(problem):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpklWarning)
        r = fit_bcd(problem, max_sweeps=5000, tol=1e-6)
    assert r.converged and r.change_trace[-1] < 1e-6
    assert r.objective <= r.objective_initial


# ---------------------------------------------------------------------------------------------
# kernel k-means and clustering metrics
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -1, 31, 2.0, True, None])
def test_kernel_kmeans_bad_clusters(k, rng):
    V = rng.standard_normal((30, 3))
    with pytest.raises(ValidationError, match=r"clusters: expected an integer in \[1, 30\]"):
        kernel_kmeans(V, k)


@pytest.mark.parametrize(
    "V, match",
    [
        (
            np.ones(5),
            r"V: expected a 2-D numeric array \(n_points, rank\), got float64 of shape "
            r"\(5,\)",
        ),
        (np.zeros((0, 2)), r"V: expected a 2-D .* shape \(0, 2\)"),
        (np.array([["a", "b"]]), r"V: expected a 2-D numeric array"),
        (
            np.array([[1.0, 2.0], [np.nan, 0.0], [0.0, np.inf]]),
            r"V: holds NaN or inf in row\(s\) "
            r"\[1, 2\]; cluster a finite",
        ),
    ],
)
def test_kernel_kmeans_bad_factor(V, match):
    """The factor is checked by name before scikit-learn sees it (its own messages name X)."""
    with pytest.raises(ValidationError, match=match):
        kernel_kmeans(V, 1)


def test_kernel_kmeans_labels(rng):
    centres = np.array([[0, 0, 0], [10, 0, 0], [0, 10, 0]], float)
    truth = np.repeat([0, 1, 2], 15)
    V = centres[truth] + 0.1 * rng.standard_normal((45, 3))
    labels = kernel_kmeans(V, 3, seed=0)
    assert labels.shape == (45,) and labels.dtype == np.int64
    assert set(labels.tolist()) == {0, 1, 2}
    m = clustering_metrics(truth, labels)
    assert m["rand_accuracy"] == 1.0 and m["ari"] == pytest.approx(1.0)
    assert m["nmi"] == pytest.approx(1.0)
    assert np.array_equal(kernel_kmeans(V, 3, seed=0), labels)
    assert np.array_equal(kernel_kmeans(V, np.int32(1)), np.zeros(45, np.int64))
    assert np.unique(kernel_kmeans(V, 45)).size == 45


def test_kernel_kmeans_normalized_clusters_by_direction(rng):
    """normalize=True is k-means on the unit rows (the cosine-normalised kernel): three
    directions whose rows have lengths from 0.01 to 10 are found exactly, where k-means on V
    splits them by length; a zero row stays zero; a non-boolean flag is refused by name."""
    from npkl_dist.evaluate import unit_rows

    dirs = np.eye(3)
    truth = np.repeat([0, 1, 2], 20)
    lengths = np.tile(np.geomspace(0.01, 10.0, 20), 3)
    V = (dirs[truth] + 0.05 * rng.standard_normal((60, 3))) * lengths[:, None]
    unit = kernel_kmeans(V, 3, seed=0, normalize=True)
    assert clustering_metrics(truth, unit)["rand_accuracy"] == 1.0
    assert clustering_metrics(truth, kernel_kmeans(V, 3, seed=0))["rand_accuracy"] < 0.8
    W = unit_rows(np.r_[V, np.zeros((1, 3))])
    assert np.allclose(np.linalg.norm(W[:-1], axis=1), 1.0) and not W[-1].any()
    assert np.array_equal(kernel_kmeans(W[:-1], 3, seed=0), unit)
    with pytest.raises(ValidationError, match="normalize: expected True or False"):
        kernel_kmeans(V, 3, normalize="yes")
    # new points (the extend stage): scaled copies of training rows join their clusters when
    # clustered normalised; by plain distance the short ones go wherever the centres lie
    from npkl_dist.evaluate import nearest_centre

    new = V[::2] * rng.uniform(0.01, 0.2, 30)[:, None]
    assert np.array_equal(nearest_centre(V, unit, new, normalize=True), unit[::2])
    plain = nearest_centre(V, unit, new)
    assert not np.array_equal(plain, unit[::2])
    centres = np.array([V[unit == c].mean(axis=0) for c in range(3)])
    assert np.array_equal(plain, np.argmin(((new[:, None] - centres) ** 2).sum(-1), axis=1))


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")  # accuracy, not convergence
def test_kernel_kmeans_on_learned_kernel(rng):
    X = np.r_[rng.normal(size=(25, 2)), rng.normal(size=(25, 2)) + 6]
    truth = np.repeat([0, 1], 25)
    g = knn_graph(X, 5, warn=False)
    c = sample_constraints(truth, seed=2)
    p = NPKLProblem.build(g.laplacian(), c, gamma=5.0, seed=1)
    r = fit_bcd(p, max_sweeps=200, tol=1e-5)
    labels = kernel_kmeans(r.V, 2, seed=0)
    assert labels.shape == (50,)
    assert clustering_metrics(truth, labels)["rand_accuracy"] > 0.9


def test_clustering_metrics_shape_mismatch():
    with pytest.raises(ValidationError, match="eval labels: 4 labels for 3 points"):
        clustering_metrics([0, 1, 0, 1], [0, 1, 1])


def test_clustering_metrics_rand_matches_bruteforce(rng):
    a = rng.integers(0, 3, size=40)
    b = rng.integers(0, 4, size=40)
    m = clustering_metrics(a, b)
    assert m["rand_accuracy"] == pytest.approx(pairwise_accuracy_bruteforce(a, b), abs=1e-12)
    assert 0 <= m["rand_accuracy"] <= 1 and -1 <= m["ari"] <= 1 and 0 <= m["nmi"] <= 1


@given(
    n=st.integers(1, 30),
    density=st.floats(0.0, 0.5),
    sym=st.booleans(),
    dup=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=80, deadline=None)
def test_csr_laplacian_stats_equal_numpy_and_scipy(n, density, sym, dup, seed):
    """The compiled checks of NPKLProblem.build against numpy/scipy on random sparse
    patterns (symmetric, nearly symmetric, entries whose mirror is not stored, explicit
    zeros, duplicates summed first as build does, a NaN, diagonals stored or not):
    finiteness, diagonal > 0, max |M_ij| and scipy's abs(M - M.T).max()."""
    from npkl_dist.linalg._csr import csr_laplacian_stats

    rng = np.random.default_rng(seed)
    M = sp.random(n, n, density=density, random_state=rng, format="coo")
    if sym:
        M = M + M.T
        if M.nnz:  # a rounding-sized asymmetry in one entry
            M = M.tocsr()
            M.data[rng.integers(M.nnz)] *= 1.0 + 1e-9 * rng.uniform(-1, 1)
    if dup and M.nnz:
        M = M.tocoo()
        M = sp.coo_matrix(
            (
                np.r_[M.data, M.data[:1], 0.0],
                (np.r_[M.row, M.row[:1], M.row[:1]], np.r_[M.col, M.col[:1], M.col[:1]]),
            ),
            shape=(n, n),
        )
    M = sp.csr_matrix(M)
    M.sum_duplicates()
    if seed % 3 == 0:  # a positive diagonal, stored
        M = sp.csr_matrix(M + sp.eye(n) * (1.0 + abs(M).sum()))
    diff = abs(M - M.T)
    finite, diag_positive, biggest, asym = csr_laplacian_stats(M.indptr, M.indices, M.data)
    assert finite
    assert diag_positive == bool(np.all(M.diagonal() > 0))
    assert biggest == (abs(M.data).max() if M.nnz else 0.0)
    assert asym == (diff.max() if diff.nnz else 0.0)
    if M.nnz:
        M.data[seed % M.nnz] = np.nan
        assert not csr_laplacian_stats(M.indptr, M.indices, M.data)[0]


def test_build_sums_duplicate_laplacian_entries(chain_L, cons):
    """Duplicate stored entries are one entry, their sum (scipy's meaning), in the symmetry
    check and in the problem: an entry stored as two halves passes and is summed."""
    L = sp.csr_matrix(chain_L)
    L.sum_duplicates()
    # row 0's first off-diagonal entry stored twice, each half of it
    p0 = next(p for p in range(L.indptr[0], L.indptr[1]) if L.indices[p] != 0)
    data = np.insert(L.data, p0 + 1, 0.5 * L.data[p0])
    data[p0] *= 0.5
    indices = np.insert(L.indices, p0 + 1, L.indices[p0])
    indptr = L.indptr.copy()
    indptr[1:] += 1
    Ldup = sp.csr_matrix((data, indices, indptr), shape=L.shape)
    assert Ldup.nnz == L.nnz + 1 and not Ldup.has_canonical_format
    p = NPKLProblem.build(Ldup, cons)
    assert p.L.nnz == L.nnz and abs(p.L - L).max() < 1e-15
