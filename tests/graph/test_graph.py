"""kNN graphs, graphs from edge lists, the shifted normalised Laplacian, feature validation."""

from __future__ import annotations

import math
import statistics
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from npkl_dist import (
    Graph,
    GraphError,
    GraphWarning,
    NpklWarning,
    ValidationError,
    graph_from_edges,
    knn_graph,
    laplacian,
)

HYP = settings(max_examples=50, deadline=None)


@pytest.fixture
def rng(global_random_seed):
    """Seeded generator; NPKL_TESTS_GLOBAL_RANDOM_SEED=all runs every test over 100 seeds."""
    return np.random.default_rng(global_random_seed)


# ---------------------------------------------------------------------------------------------
# brute-force references
# ---------------------------------------------------------------------------------------------


def pairwise_dist(X):
    return np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))


def knn_sets(X, k):
    """Boolean (n, n) matrix: A[i, j] is True when j is among the k nearest neighbours of i."""
    D = pairwise_dist(X)
    np.fill_diagonal(D, np.inf)
    n = X.shape[0]
    A = np.zeros((n, n), dtype=bool)
    for p in range(n):
        A[p, np.argsort(D[p], kind="stable")[:k]] = True
    return A


def components(adj):
    """Connected components of a dense symmetric boolean matrix by repeated BFS."""
    n = adj.shape[0]
    comp = -np.ones(n, dtype=int)
    c = 0
    for s in range(n):
        if comp[s] >= 0:
            continue
        frontier = [s]
        comp[s] = c
        while frontier:
            p = frontier.pop()
            for q in np.flatnonzero(adj[p]):
                if comp[q] < 0:
                    comp[q] = c
                    frontier.append(q)
        c += 1
    return c


def dense_laplacian(S, delta):
    S = np.asarray(S, dtype=np.float64)
    d = S.sum(1)
    dinv = np.zeros_like(d)
    dinv[d > 0] = 1.0 / np.sqrt(d[d > 0])
    return (1.0 + delta) * np.eye(S.shape[0]) - dinv[:, None] * S * dinv[None, :]


def two_blobs(rng, n_each=20, gap=50.0):
    return np.r_[rng.normal(size=(n_each, 3)), rng.normal(size=(n_each, 3)) + gap]


def check_graph_invariants(g):
    S = g.S
    assert isinstance(g, Graph)
    assert sp.issparse(S) and S.format == "csr"
    assert S.has_sorted_indices
    assert np.all(S.diagonal() == 0)
    assert np.all(S.data > 0)  # non-negative, and no explicit zeros kept
    if S.nnz:
        assert abs(S - S.T).max() == 0  # exactly symmetric


# ---------------------------------------------------------------------------------------------
# knn_graph
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, k", [(40, 1), (40, 3), (40, 5), (40, 12), (8, 3), (25, 10)])
def test_gaussian_knn_graph_matches_bruteforce(n, k, rng):
    X = rng.normal(size=(n, 4))
    g = knn_graph(X, k, warn=False)
    check_graph_invariants(g)
    D = pairwise_dist(X)
    Dsorted = np.sort(D, axis=1)[:, 1:]  # drop self (distance 0, continuous data: no ties)
    n_sigma = min(10, n - 1)
    sigma = 0.5 * Dsorted[:, :n_sigma].mean()
    assert g.sigma == pytest.approx(sigma, rel=1e-12)
    A = knn_sets(X, k)
    union = A | A.T
    expected = np.where(union, np.exp(-(D**2) / (2 * sigma**2)), 0.0)
    np.testing.assert_allclose(g.S.toarray(), expected, rtol=1e-10, atol=0)
    assert g.n_points == n


@pytest.mark.parametrize("k", [1, 2, 5])
def test_mutual_knn_graph_matches_bruteforce(k, rng):
    X = rng.normal(size=(50, 2))
    g = knn_graph(X, k, weighting="mutual", warn=False)
    check_graph_invariants(g)
    A = knn_sets(X, k)
    mutual = A & A.T
    assert np.array_equal(g.S.toarray(), mutual.astype(float))
    assert g.sigma is None
    assert g.n_isolated == int(np.sum(~mutual.any(1)))
    assert g.n_components == components(mutual)


def test_exact_and_auto_agree(rng):
    X = rng.normal(size=(60, 3))
    a = knn_graph(X, 5, method="exact")
    b = knn_graph(X, 5, method="auto")
    assert (a.S != b.S).nnz == 0
    assert a.sigma == b.sigma


def test_integer_features_accepted(rng):
    X = rng.integers(0, 1000, size=(30, 3))
    g = knn_graph(X, 4, warn=False)
    check_graph_invariants(g)
    g2 = knn_graph(X.astype(float), 4, warn=False)
    assert (g.S != g2.S).nnz == 0


def test_duplicate_rows_link_twins_with_weight_one(rng):
    X = rng.normal(size=(20, 2))
    X = np.r_[X, X[:3]]  # rows 20, 21, 22 duplicate rows 0, 1, 2
    g = knn_graph(X, 3, warn=False)
    check_graph_invariants(g)
    S = g.S.toarray()
    for a, b in [(0, 20), (1, 21), (2, 22)]:
        assert S[a, b] == 1.0 and S[b, a] == 1.0


def test_more_twins_than_neighbours(rng):
    """Six copies of one point with k=2: the search may not return a point itself among its
    k+1 hits; it still gets exactly k neighbours, all twins, and no self-loop."""
    X = np.r_[np.repeat([[0.5, 0.5]], 6, axis=0), rng.normal(size=(20, 2)) + 10]
    g = knn_graph(X, 2, warn=False)
    check_graph_invariants(g)
    S = g.S.toarray()
    for p in range(6):
        assert np.all(S[p, 6:] == 0)
        assert np.count_nonzero(S[p, :6]) >= 2
        assert np.all(S[p, :6][S[p, :6] > 0] == 1.0)


def test_all_points_identical_raises():
    with pytest.raises(GraphError, match="sigma = 0"):
        knn_graph(np.ones((6, 2)), 2)
    g = knn_graph(np.ones((6, 2)), 2, weighting="mutual", warn=False)  # mutual still works
    check_graph_invariants(g)


def test_graph_warning_several_components(rng):
    X = two_blobs(rng)
    A = knn_sets(X, 5)
    n_comp = components(A | A.T)
    assert n_comp >= 2  # the blobs are 50 apart: no kNN edge joins them
    with pytest.warns(GraphWarning, match=f"{n_comp} connected components and 0 isolated") as rec:
        g = knn_graph(X, 5)
    assert len(rec) == 1
    assert g.n_components == n_comp and g.n_isolated == 0


def test_graph_warning_isolated_points(rng):
    # an outlier's nearest neighbours are in the blob, but it is nobody's neighbour
    X = np.r_[rng.normal(size=(30, 2)), [[40.0, 40.0]], [[-40.0, 45.0]]]
    with pytest.warns(GraphWarning) as rec:
        g = knn_graph(X, 2, weighting="mutual")
    A = knn_sets(X, 2)
    mutual = A & A.T
    n_iso = int(np.sum(~mutual.any(1)))
    assert n_iso >= 2
    assert g.n_isolated == n_iso
    assert g.n_components == components(mutual)
    assert f"{g.n_components} connected components and {n_iso} isolated" in str(rec[0].message)
    assert np.all(np.diff(g.S.indptr)[[30, 31]] == 0)


def test_no_warning_when_connected_or_warn_false(rng):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpklWarning)
        # a jittered line: each point's 2 nearest neighbours are its predecessor/successor
        line = np.c_[np.arange(40.0), 0.01 * rng.normal(size=40)]
        g = knn_graph(line, 2)
        assert g.n_components == 1 and g.n_isolated == 0
        X = two_blobs(rng)
        g2 = knn_graph(X, 3, warn=False)
        A = knn_sets(X, 3)
        assert g2.n_components == components(A | A.T) >= 2


@pytest.mark.heavy
def test_pynndescent_recall_against_exact(rng):
    """One small approximate graph (pynndescent compiles for ~45 s on first use)."""
    n, k = 300, 5
    X = rng.normal(size=(n, 5))
    approx = knn_graph(X, k, method="pynndescent", seed=0, warn=False)
    exact = knn_graph(X, k, method="exact", warn=False)
    check_graph_invariants(approx)
    A = knn_sets(X, k)
    union = A | A.T
    found = approx.S.toarray() > 0
    recall = (found & union).sum() / union.sum()
    assert recall > 0.9
    assert approx.sigma == pytest.approx(exact.sigma, rel=0.05)


# ---------------------------------------------------------------------------------------------
# feature / parameter validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_rows_listed(bad, rng):
    X = rng.normal(size=(30, 3))
    X[4, 1] = bad
    X[17, 0] = bad
    X[17, 2] = bad
    with pytest.raises(ValidationError, match=r"X: 2 row\(s\) hold NaN or inf") as info:
        knn_graph(X, 3)
    assert "[4, 17]" in str(info.value)


def test_nonfinite_rows_listing_truncated(rng):
    X = rng.normal(size=(40, 2))
    X[5:30, 0] = np.nan
    with pytest.raises(ValidationError, match=r"25 row\(s\)") as info:
        knn_graph(X, 3)
    assert str(list(range(5, 15))) in str(info.value)


@pytest.mark.parametrize("X", [np.arange(10.0), np.zeros((2, 3, 4)), np.float64(3.0)])
def test_features_must_be_2d(X):
    with pytest.raises(ValidationError, match="X: expected a 2-D array"):
        knn_graph(X, 1)


def test_features_must_be_numeric():
    with pytest.raises(ValidationError, match="X: expected numeric"):
        knn_graph(np.array([["a", "b"], ["c", "d"], ["e", "f"]]), 1)


@pytest.mark.parametrize("k", [0, -1, 20, 21, True, 2.0, None])
def test_knn_out_of_range(k, rng):
    X = rng.normal(size=(20, 2))
    with pytest.raises(ValidationError, match=r"knn: expected an integer in \[1, 19\]"):
        knn_graph(X, k)


def test_knn_upper_limit_accepted(rng):
    X = rng.normal(size=(12, 2))
    g = knn_graph(X, 11)  # everybody's neighbour: the complete graph
    assert g.S.nnz == 12 * 11
    g = knn_graph(X, np.int64(2), warn=False)
    check_graph_invariants(g)


def test_bad_weighting_and_method(rng):
    X = rng.normal(size=(20, 2))
    with pytest.raises(ValidationError, match="weighting"):
        knn_graph(X, 3, weighting="binary")
    with pytest.raises(ValidationError, match="knn_method"):
        knn_graph(X, 3, method="annoy")


# ---------------------------------------------------------------------------------------------
# graph_from_edges
# ---------------------------------------------------------------------------------------------


def test_edges_unweighted():
    g = graph_from_edges(np.array([[0, 1], [2, 1], [2, 3]]))
    check_graph_invariants(g)
    expected = np.zeros((4, 4))
    for a, b in [(0, 1), (1, 2), (2, 3)]:
        expected[a, b] = expected[b, a] = 1.0
    assert np.array_equal(g.S.toarray(), expected)
    assert g.n_components == 1 and g.n_isolated == 0 and g.sigma is None


def test_edges_weighted_duplicates_keep_max_and_self_loops_dropped():
    E = np.array([[0, 1, 0.5], [1, 0, 2.0], [0, 1, 1.5], [1, 2, 0.25], [2, 2, 9.0], [2, 1, 0.125]])
    # what reading changed is said (issue 74): 1 loop; (0, 1) listed twice one way; three
    # listings (0.5, 1.5 of (0, 1); 0.125 of (1, 2)) below their pair's largest weight
    with pytest.warns(GraphWarning, match="dropped 1 self-loop.*merged 1 repeated.*3 listing"):
        g = graph_from_edges(E)
    check_graph_invariants(g)
    expected = np.array([[0, 2.0, 0], [2.0, 0, 0.25], [0, 0.25, 0]])
    assert np.array_equal(g.S.toarray(), expected)


def _dense_rule(rows, n, rule):
    """The reference: every unordered pair's listed weights, combined by ``rule``."""
    seen: dict = {}
    for a, b, w in rows:
        if a != b:
            seen.setdefault((min(a, b), max(a, b)), []).append(w)
    S = np.zeros((n, n))
    for (a, b), ws in seen.items():
        if rule == "error" and len(set(ws)) > 1:
            return None
        v = {"max": max, "error": max, "sum": math.fsum, "mean": statistics.fmean}[rule](ws)
        S[a, b] = S[b, a] = v
    return S


@HYP
@given(st.data(), st.sampled_from(["max", "sum", "mean", "error"]))
def test_edges_match_dense_reference_for_every_duplicates_rule(data, rule):
    n = data.draw(st.integers(2, 9))
    m = data.draw(st.integers(1, 25))
    node = st.integers(0, n - 1)
    weight = st.floats(0.01, 100.0, allow_nan=False)
    rows = data.draw(st.lists(st.tuples(node, node, weight), min_size=m, max_size=m))
    extra = data.draw(st.integers(0, 2))
    E = np.array(rows, dtype=np.float64)
    S = _dense_rule(rows, n + extra, rule)
    if S is None:
        with pytest.raises(GraphError, match="listed with different weights.*duplicates="):
            graph_from_edges(E, n + extra, duplicates=rule, warn=False)
        return
    g = graph_from_edges(E, n + extra, duplicates=rule, warn=False)
    check_graph_invariants(g)
    if rule in ("sum", "mean"):  # another summation order than math.fsum's
        np.testing.assert_allclose(g.S.toarray(), S, rtol=1e-13, atol=0)
    else:
        assert np.array_equal(g.S.toarray(), S)
    adj = S > 0
    assert g.n_isolated == int(np.sum(~adj.any(1)))
    assert g.n_components == components(adj)


def test_duplicates_rule_is_said_and_checked():
    E = np.array([[0, 1, 1.0], [1, 0, 3.0], [1, 2, 1.0]])
    with pytest.warns(GraphWarning, match="carried another weight than its largest: summed"):
        g = graph_from_edges(E, duplicates="sum")
    assert g.S[0, 1] == 4.0 and g.S[1, 2] == 1.0
    with pytest.warns(GraphWarning, match="kept their mean"):
        assert graph_from_edges(E, duplicates="mean").S[0, 1] == 2.0
    with pytest.raises(GraphError, match=r"1 pair\(s\).*\(0, 1\) 2 times, largest 3, mean 2"):
        graph_from_edges(E, duplicates="error")
    # the same weight twice is a repeat, not a conflict: 'error' accepts it
    assert graph_from_edges(np.array([[0, 1, 2.0], [1, 0, 2.0]]), duplicates="error").S[0, 1] == 2
    with pytest.raises(ValidationError, match="duplicates: expected one of 'max', 'sum'"):
        graph_from_edges(E, duplicates="min")


def test_edges_isolated_nodes_warn_with_counts():
    with pytest.warns(GraphWarning) as rec:
        g = graph_from_edges(np.array([[0, 1], [1, 2], [3, 3]]), n_points=5)
    assert "3 connected components and 2 isolated" in str(rec[1].message)
    assert g.n_points == 5
    assert g.n_components == 3 and g.n_isolated == 2  # node 3 only had a self-loop
    assert "dropped 1 self-loop" in str(rec[0].message)
    # the advice is for an edge list (there is no knn to raise)
    text = str(rec[1].message)
    assert "add edges between the components" in text and "knn" not in text


def test_edge_batches_warning_advises_edges_and_knn_graph_advises_knn(rng):
    from npkl_dist.graph._blocks import graph_from_edge_batches

    i, j = np.array([0, 2]), np.array([1, 3])  # two components of two nodes
    with pytest.warns(GraphWarning, match="2 connected components") as rec:
        graph_from_edge_batches([(i, j, None, 0)], 4)
    assert "add edges between the components" in str(rec[0].message)
    with pytest.warns(GraphWarning) as rec:
        knn_graph(two_blobs(rng), 5)
    # the blobs are 50 apart: no knn within the neighbours at hand joins them, and it says so
    assert "10 neighbours per point still leave them apart" in str(rec[0].message)
    assert "add edges" not in str(rec[0].message)


@pytest.mark.parametrize(
    "edges, match",
    [
        (np.array([[0, -1], [1, 2]]), "negative node index -1"),
        (np.array([[0.0, 1.0, np.nan]]), "NaN or inf"),
        (np.array([[0.0, np.inf]]), "NaN or inf"),
        (np.array([[0, 1, 0.0]]), "weights must be positive"),
        (np.array([[0, 1, -2.0], [1, 2, 1.0]]), "weights must be positive"),
        (np.array([[0.5, 1.0]]), "whole"),
        (np.array([0, 1, 2]), "expected shape"),
        (np.zeros((3, 4)), "expected shape"),
        (np.zeros((0, 2)), "empty"),
        (np.zeros((0, 3)), "empty"),
    ],
)
def test_edges_errors(edges, match):
    with pytest.raises(GraphError, match=match) as info:
        graph_from_edges(edges)
    assert str(info.value).startswith("edges:")


def test_edges_n_points_too_small():
    with pytest.raises(GraphError, match=r"n_points: 3 is smaller .* \(5\)"):
        graph_from_edges(np.array([[0, 4], [1, 2]]), n_points=3)


def test_graph_error_is_validation_error():
    assert issubclass(GraphError, ValidationError) and issubclass(GraphError, ValueError)
    assert issubclass(GraphWarning, NpklWarning)


# ---------------------------------------------------------------------------------------------
# laplacian
# ---------------------------------------------------------------------------------------------


def random_similarity(rng, n, density=0.3, n_isolated=0):
    W = rng.uniform(0.1, 2.0, size=(n, n)) * (rng.random((n, n)) < density)
    S = np.triu(W, 1)
    S = S + S.T
    if n_isolated:
        S[:n_isolated] = 0
        S[:, :n_isolated] = 0
    return S


@pytest.mark.parametrize("delta", [1e-3, 0.5, 2])
@pytest.mark.parametrize("n_isolated", [0, 3])
def test_laplacian_matches_dense_formula(delta, n_isolated, rng):
    S = random_similarity(rng, 15, n_isolated=n_isolated)
    L = laplacian(sp.csr_matrix(S), delta=delta)
    assert L.format == "csr" and L.dtype == np.float64 and L.has_sorted_indices
    np.testing.assert_allclose(L.toarray(), dense_laplacian(S, delta), rtol=1e-12, atol=1e-15)
    # explicit diagonal in every row, isolated rows are exactly (1 + delta) e_i
    for p in range(15):
        assert p in L.indices[L.indptr[p] : L.indptr[p + 1]]
    for p in range(n_isolated):
        row = L.getrow(p)
        assert row.nnz == 1 and row[0, p] == 1.0 + delta
    # dense input works the same way
    np.testing.assert_allclose(laplacian(S, delta=delta).toarray(), L.toarray(), rtol=0, atol=0)


def test_laplacian_float32(rng):
    S = random_similarity(rng, 10)
    L = laplacian(sp.csr_matrix(S), dtype=np.float32)
    assert L.dtype == np.float32
    np.testing.assert_allclose(L.toarray(), dense_laplacian(S, 1e-3), rtol=1e-6, atol=1e-7)


def test_laplacian_positive_definite(rng):
    X = two_blobs(rng, n_each=15)
    g = knn_graph(X, 3, warn=False)
    for delta in (1e-3, 0.1):
        L = g.laplacian(delta=delta)
        assert (L != laplacian(g.S, delta=delta)).nnz == 0
        eig = np.linalg.eigvalsh(L.toarray())
        assert eig[0] > 0
        # the normalised Laplacian has eigenvalues in [0, 2], with one 0 per component
        assert eig[0] == pytest.approx(delta, abs=1e-9)
        assert eig[-1] <= 2 + delta + 1e-9
        assert np.sum(np.abs(eig - delta) < 1e-9) == g.n_components


@pytest.mark.parametrize("delta", [0, 0.0, -1e-3, np.nan, np.inf, -np.inf, "0.1", None])
def test_laplacian_bad_delta(delta, rng):
    S = sp.csr_matrix(random_similarity(rng, 6))
    with pytest.raises(ValidationError, match="delta: expected a finite number > 0"):
        laplacian(S, delta=delta)


# ------------------------------------------------------------------ feature scaling
def test_feature_scale_standard_matches_scikit_learn(rng, monkeypatch):
    from sklearn.preprocessing import StandardScaler

    from npkl_dist.graph import _graph
    from npkl_dist.graph._graph import apply_feature_scale, feature_scale

    X = rng.normal(size=(1000, 6)) * [1e-3, 1.0, 10.0, 1e3, 1.0, 0.0] + [0, 1e9, -5, 0, 3, 7]
    monkeypatch.setattr(_graph, "_SCALE_ROWS", 97)  # several row blocks, a ragged last one
    p = feature_scale(X, "standard")
    ref = StandardScaler().fit(X)
    assert p["kind"] == "standard"
    np.testing.assert_allclose(p["mean"], ref.mean_, rtol=1e-12)
    # column 1 sits at 1e9: each block's deviations are taken about its own mean and merged
    # exactly, so its spread of about 1 is still found to ~1e-7 (a plain sum of squares
    # would lose it entirely)
    np.testing.assert_allclose(p["std"], np.sqrt(ref.var_), rtol=1e-6, atol=1e-12)
    Z = apply_feature_scale(X, p)
    np.testing.assert_allclose(Z[:, :5], ref.transform(X)[:, :5], rtol=1e-6, atol=1e-6)
    assert np.all(Z[:, 5] == 0.0)  # a constant column is centred, not divided by 0
    assert feature_scale(X, "none") is None and apply_feature_scale(X, None) is X


def test_apply_feature_scale_dtypes_and_errors():
    from npkl_dist.graph._graph import apply_feature_scale, feature_scale

    X = np.arange(12, dtype=np.int64).reshape(4, 3)
    p = feature_scale(X, "standard")
    assert apply_feature_scale(X, p).dtype == np.float64
    assert apply_feature_scale(X.astype(np.float32), p).dtype == np.float32
    with pytest.raises(ValidationError, match="2 columns, the scaling was fitted on 3"):
        apply_feature_scale(X[:, :2], p)
    with pytest.raises(ValidationError, match="scale: 'minmax' is not one of 'none', 'standard'"):
        feature_scale(X, "minmax")


def test_one_dominant_column_warns_with_the_fix():
    from sklearn.datasets import load_digits, load_wine

    from npkl_dist.graph._graph import apply_feature_scale, feature_scale, warn_feature_scales

    X, _ = load_wine(return_X_y=True)  # proline: hundreds of times the other columns' spread
    with pytest.warns(GraphWarning, match="column 12 has a standard deviation 38[0-9] times") as r:
        warn_feature_scales(X)
    assert "StandardScaler().fit_transform(X)" in str(r[0].message)  # Python's fix here
    from npkl_dist._errors import interface

    for name, fix in (("cli", "(--scale standard)"), ("toml", '([graph] scale = "standard")')):
        with interface(name), pytest.warns(GraphWarning) as r:
            warn_feature_scales(X)
        assert fix in str(r[0].message) and "StandardScaler" not in str(r[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphWarning)
        warn_feature_scales(apply_feature_scale(X, feature_scale(X, "standard")))
        warn_feature_scales(load_digits(return_X_y=True)[0])  # pixels (constant ones too)
        knn_graph(X, 5, warn=False)
    with pytest.warns(GraphWarning) as rec:
        knn_graph(X, 5)
    assert any("column 12" in str(w.message) for w in rec)


@pytest.mark.filterwarnings("ignore::npkl_dist.GraphWarning")
@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_the_job_builds_its_graph_from_the_scaled_columns():
    from sklearn.datasets import load_wine

    from npkl_dist.graph._graph import apply_feature_scale, feature_scale
    from npkl_dist.job._job import FitConfig, load_graph, run_fit

    X, y = load_wine(return_X_y=True)
    g, X_out = load_graph(FitConfig(X=X, y_constraints=y, scale="standard"))
    ref = knn_graph(apply_feature_scale(X, feature_scale(X, "standard")), 5, warn=False)
    assert X_out is X  # the features as given
    assert (g.S != ref.S).nnz == 0 and g.sigma == ref.sigma
    summary, _, _ = run_fit(FitConfig(X=X, y_constraints=y, y_eval=y, scale="standard"))
    assert summary["graph"]["scale"] == "standard"
    assert summary["metrics"]["rand_accuracy"] > 0.95  # 0.51 on the raw columns


def _chain_of_groups(rng, groups=4, size=8, gap=3.5):
    """Groups of points 1 apart on a line, 3.5 between groups (jittered by 0.01): with 3
    neighbours per point the groups stay apart, with 4 the ends of neighbouring groups meet."""
    x = np.concatenate([np.arange(size) + g * (size - 1 + gap) for g in range(groups)])
    return np.c_[x, np.zeros_like(x)] + 0.01 * rng.normal(size=(x.size, 2))


@pytest.mark.parametrize("weighting", ["gaussian", "mutual"])
def test_component_advice_works_when_followed(rng, weighting):
    """The warning's fix for a disconnected kNN graph is a call that, made, gives one
    connected graph without a warning (it suggested weighting='mutual' once, which gave
    more components and the same advice again)."""
    import re

    X = _chain_of_groups(rng)
    with pytest.warns(GraphWarning, match="Fix: knn_graph") as rec:
        knn_graph(X, 3, weighting=weighting)
    message = str(rec[0].message)
    if weighting == "gaussian":
        assert "weighting='mutual'" not in message
    call = re.search(r"Fix: knn_graph\(X, (k=\d+(?:, weighting='\w+')?)\)", message)
    assert call is not None, message
    kwargs = dict(
        (key, int(value) if value.isdigit() else value.strip("'"))
        for key, value in (part.split("=") for part in call.group(1).split(", "))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpklWarning)
        g = knn_graph(X, **{"weighting": weighting, **kwargs})
    assert g.n_components == 1 and g.n_isolated == 0


def test_component_advice_is_in_the_interface_syntax(rng):
    import re

    from npkl_dist._errors import interface

    X = _chain_of_groups(rng)
    for name, needle in (("cli", "Fix: --knn "), ("toml", "Fix: [graph] knn = ")):
        with interface(name), pytest.warns(GraphWarning) as rec:
            knn_graph(X, 3)
        assert needle in str(rec[0].message) and "knn_graph(" not in str(rec[0].message)
    with interface("cli"), pytest.warns(GraphWarning) as rec:
        knn_graph(X, 3, weighting="mutual")
    assert re.search(r"Fix: (--weighting gaussian )?--knn \d+ joins", str(rec[0].message))
    assert "knn_graph(" not in str(rec[0].message)
