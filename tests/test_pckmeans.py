"""Constrained k-means (PCK-means) on the rows of V: the compiled run against its numpy
reference, the penalised objective, constraints honoured, no empty cluster, dtypes, centres,
bad input (npkl_dist.evaluate.pck_kmeans, npkl_dist._pckmeans)."""

import warnings

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist._pckmeans import (
    constraint_adjacency,
    pck_objective,
    pck_run,
    pck_run_reference,
)
from npkl_dist.evaluate import cluster_kernel


def _constraints(y, n_must, n_cannot, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nk.ConstraintWarning)
        return nk.sample_constraints(y, n_must, n_cannot, seed=seed)


def _problem(seed, n=None, k=None, r=None):
    rng = np.random.default_rng(seed)
    n = n or int(rng.integers(12, 60))
    k = k or int(rng.integers(2, 6))
    r = r or int(rng.integers(1, 5))
    y = rng.integers(0, k, n)
    X = rng.standard_normal((n, r)) + 0.8 * y[:, None]
    cons = _constraints(y, n // 3, n // 3, seed)
    return X, y, cons, k


@pytest.mark.parametrize("seed", range(12))
def test_compiled_run_equals_the_reference(seed):
    """Same labels, centres, objective and sweep count as the readable numpy form, from
    the same start and seed, for penalties from none to dominant."""
    X, _, cons, k = _problem(seed)
    rng = np.random.default_rng(100 + seed)
    C0 = X[rng.choice(X.shape[0], k, replace=False)]
    for w in (0.0, 0.7, 5.0):
        a = pck_run(np.ascontiguousarray(X), C0, constraint_adjacency(cons, X.shape[0]), w, seed)
        b = pck_run_reference(X, C0, cons, w, seed)
        assert np.array_equal(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-12)
        assert a[2] == pytest.approx(b[2], rel=1e-12)
        assert a[3] == b[3]
        # the objective returned is J written plainly, and the centres are the labels' means
        assert a[2] == pytest.approx(pck_objective(X, a[0], a[1], cons, w), rel=1e-12)
        for h in range(k):
            np.testing.assert_allclose(a[1][h], X[a[0] == h].mean(0), rtol=1e-12, atol=1e-12)


def test_empty_clusters_are_relocated_like_the_reference():
    """A start with centres far from every point leaves clusters empty after the first
    sweep: each takes a point (the farthest from its centre), in both forms, and no
    cluster ends empty."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    y = np.arange(40) % 4
    cons = _constraints(y, 10, 10, 0)
    C0 = np.array([[0.0, 0.0], [50.0, 50.0], [60.0, 60.0], [70.0, -70.0]])
    a = pck_run(np.ascontiguousarray(X), C0, constraint_adjacency(cons, 40), 0.5, 1)
    b = pck_run_reference(X, C0, cons, 0.5, 1)
    assert np.array_equal(a[0], b[0]) and a[2] == pytest.approx(b[2], rel=1e-12)
    assert np.bincount(a[0], minlength=4).min() >= 1


def test_no_empty_cluster_from_the_public_function():
    """More clusters than the data has groups, and many duplicate rows (PCKMeans's
    EmptyClustersException case): every cluster keeps at least one point."""
    X = np.repeat(np.eye(3), 20, axis=0)
    y = np.repeat(np.arange(3), 20)
    cons = _constraints(y, 15, 15, 0)
    labels = nk.pck_kmeans(X, 8, cons, seed=0)
    assert np.bincount(labels, minlength=8).min() >= 1


def test_dominant_penalty_honours_consistent_constraints():
    """Constraints from a labelling that disagrees with the geometry (two blobs, the
    classes cut across them), each point in at most one pair: with a dominant weight ICM
    satisfies every pair (a point's partner is labelled or not yet, and either way the point
    can agree with it; an agreeing pair is never broken again); with weight 0 it is plain
    k-means and about half are violated. On a denser constraint graph ICM is a local search
    (a point between two groups that were labelled apart can be stuck): there a dominant
    weight leaves fewer violations than none, not necessarily zero."""
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(0, 0.3, (30, 2)), rng.normal(3, 0.3, (30, 2))])
    y = np.arange(60) % 2  # classes cut across the blobs
    perm = rng.permutation(60)
    i, j = perm[:30], perm[30:]
    matching = nk.Constraints.from_arrays(i, j, np.where(y[i] == y[j], 1, -1), 60)
    dense = _constraints(y, 30, 30, 1)

    def violated(labels, cons):
        same = labels[cons.i] == labels[cons.j]
        return int(np.count_nonzero(same != (cons.t > 0)))

    assert violated(nk.pck_kmeans(X, 2, matching, seed=0, weight=0.0), matching) > 8
    assert violated(nk.pck_kmeans(X, 2, matching, seed=0, weight=100.0), matching) == 0
    free = violated(nk.pck_kmeans(X, 2, dense, seed=0, weight=0.0), dense)
    assert violated(nk.pck_kmeans(X, 2, dense, seed=0, weight=100.0), dense) < free / 2


def test_restarts_keep_the_lowest_objective():
    """n_init runs: the result's objective is the minimum over the runs (each run
    reproduced by hand from the public function's seeds)."""
    from sklearn.cluster import kmeans_plusplus

    from npkl_dist.evaluate import must_link_centres

    X, _, cons, k = _problem(3, n=80, k=4, r=3)
    labels, C = nk.pck_kmeans(X, k, cons, seed=5, n_init=4, return_centres=True)
    spread = ((X - X.mean(0)) ** 2).sum(1).mean()
    adj = constraint_adjacency(cons, X.shape[0])
    rng = np.random.default_rng(5)
    objs = []
    for run in range(4):
        s = int(rng.integers(2**31))
        C0 = (
            must_link_centres(X, cons, k, seed=s)
            if run == 0
            else kmeans_plusplus(X, k, random_state=s)[0]
        )
        objs.append(pck_run(np.ascontiguousarray(X), C0, adj, spread, s)[2])
    # then kernel k-means' clustering, as one more start and as it stands
    km, km_C = nk.kernel_kmeans(X, k, seed=5, constraints=cons, return_centres=True)
    s = int(rng.integers(2**31))
    objs.append(pck_run(np.ascontiguousarray(X), np.ascontiguousarray(km_C), adj, spread, s)[2])
    km_J = pck_objective(X, km, km_C, cons, spread)
    objs.append(km_J)
    got = pck_objective(X, labels, C, cons, spread)
    assert got == pytest.approx(min(objs), rel=1e-12)
    assert got <= km_J  # never above the clustering that ignores the pairs


def test_float32_input_gives_the_float64_result():
    X, _, cons, k = _problem(4, n=100, k=3, r=4)
    a = nk.pck_kmeans(X, k, cons, seed=0)
    b = nk.pck_kmeans(X.astype(np.float32).astype(np.float64), k, cons, seed=0)
    c = nk.pck_kmeans(X.astype(np.float32), k, cons, seed=0)
    assert np.array_equal(b, c)
    assert nk.clustering_metrics(a, c)["ari"] > 0.95  # float32 rounding of X only


def test_scale_free_weight():
    """The penalty is relative to the rows' spread: scaling V changes nothing."""
    X, _, cons, k = _problem(6, n=90, k=3, r=3)
    a = nk.pck_kmeans(X, k, cons, seed=1)
    b = nk.pck_kmeans(X * 1000.0, k, cons, seed=1)
    assert np.array_equal(a, b)


def test_centres_and_assign_clusters():
    """return_centres (both methods): the centres are the clusters' means, and
    assign_clusters puts each training row back in its own cluster when it is nearest to
    its centre (all of them for well-separated blobs); normalize measures unit rows."""
    rng = np.random.default_rng(2)
    centres = np.array([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 5.0]])
    y = np.repeat(np.arange(3), 30)
    V = centres[y] + 0.3 * rng.standard_normal((90, 3))
    cons = _constraints(y, 20, 20, 2)
    for labels, C in (
        nk.kernel_kmeans(V, 3, seed=0, return_centres=True),
        nk.pck_kmeans(V, 3, cons, seed=0, return_centres=True),
    ):
        for h in range(3):
            np.testing.assert_allclose(C[h], V[labels == h].mean(0), atol=1e-10)
        assert np.array_equal(nk.assign_clusters(V, C), labels)
    labels, C = nk.pck_kmeans(V, 3, cons, seed=0, normalize=True, return_centres=True)
    assert np.allclose(np.linalg.norm(C, axis=1), 1.0, atol=0.05)  # means of unit rows
    assert np.array_equal(nk.assign_clusters(10.0 * V, C, normalize=True), labels)
    assert nk.kernel_kmeans(V, 3, seed=0).shape == (90,)  # default: labels only, as before


def test_cluster_kernel_default_method():
    """cluster_kernel: pck when the constraints hold a pair, kernel k-means without."""
    X, _, cons, k = _problem(7, n=80, k=3, r=3)
    assert np.array_equal(
        cluster_kernel(X, k, seed=2, constraints=cons), nk.pck_kmeans(X, k, cons, seed=2)
    )
    assert np.array_equal(
        cluster_kernel(X, k, seed=2, constraints=cons, method="kmeans"),
        nk.kernel_kmeans(X, k, seed=2, constraints=cons),
    )
    assert np.array_equal(cluster_kernel(X, k, seed=2), nk.kernel_kmeans(X, k, seed=2))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"weight": -1.0}, r"weight: expected a finite number >= 0 .*got -1\.0"),
        ({"weight": float("nan")}, r"weight: expected a finite number >= 0"),
        ({"n_init": 0}, r"n_init: expected an integer >= 1, got 0"),
        ({"max_iter": 1.5}, r"max_iter: expected an integer >= 1, got 1\.5"),
    ],
)
def test_bad_options(kwargs, match):
    X, _, cons, k = _problem(8, n=30, k=2, r=2)
    with pytest.raises(nk.ValidationError, match=match):
        nk.pck_kmeans(X, k, cons, **kwargs)


def test_bad_inputs():
    X, _, cons, k = _problem(9, n=30, k=2, r=2)
    with pytest.raises(nk.ValidationError, match=r"constraints: expected a Constraints over 29"):
        nk.pck_kmeans(X[:-1], k, cons)
    with pytest.raises(nk.ValidationError, match=r"V: holds NaN or inf in row\(s\) \[0\]"):
        nk.pck_kmeans(np.where(np.arange(30)[:, None] == 0, np.nan, X), k, cons)
    with pytest.raises(nk.ValidationError, match=r"clusters: expected an integer in \[1, 30\]"):
        nk.pck_kmeans(X, 31, cons)
    with pytest.raises(nk.ValidationError, match=r"method: expected one of 'kmeans', 'pck'"):
        cluster_kernel(X, k, constraints=cons, method="pckmeans")
    with pytest.raises(nk.ValidationError, match=r"method: 'pck' clusters with the constraints"):
        cluster_kernel(X, k, method="pck")
    with pytest.raises(nk.ValidationError, match=r"V_new: expected rows of length 2"):
        nk.assign_clusters(np.ones((3, 4)), np.ones((2, 2)))
