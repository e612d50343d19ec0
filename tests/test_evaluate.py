"""kernel_kmeans's must-link seeding (npkl_dist.evaluate)."""

import warnings

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist.evaluate import must_link_centres


def inertia(X, labels):
    return sum(((X[labels == c] - X[labels == c].mean(0)) ** 2).sum() for c in np.unique(labels))


def blobs(k=30, per=40, dim=8, spread=0.2, seed=0):
    """k Gaussian blobs whose centres are close enough for k-means++ to merge some."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, dim))
    y = np.repeat(np.arange(k), per)
    return centres[y] + spread * rng.normal(size=(y.size, dim)), y


def label_constraints(y, per_class, seed=0):
    rng = np.random.default_rng(seed)
    part = np.full(y.size, -1)
    for c in np.unique(y):
        idx = rng.choice(np.flatnonzero(y == c), per_class, replace=False)
        part[idx] = c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nk.ConstraintWarning)  # few labels: all pairs
        return nk.sample_constraints(part, seed=seed), part


def test_centres_are_the_must_link_groups_means():
    X, y = blobs(k=5, per=20)
    cons, part = label_constraints(y, 4)
    C = must_link_centres(X, cons, 5)
    ref = np.stack([X[part == c].mean(0) for c in range(5)])
    # same set of rows, in some order
    assert C.shape == (5, X.shape[1])
    d = ((C[:, None, :] - ref[None, :, :]) ** 2).sum(-1)
    assert np.allclose(d.min(axis=1), 0.0, atol=1e-20)
    assert sorted(d.argmin(axis=1)) == list(range(5))


def test_largest_groups_first_and_completion():
    X, y = blobs(k=4, per=10)
    n = X.shape[0]
    # a chain of 5 points (group A), a pair (group B), cannot-links elsewhere
    i = np.array([0, 1, 2, 3, 10, 20])
    j = np.array([1, 2, 3, 4, 11, 30])
    t = np.array([1, 1, 1, 1, 1, -1])
    cons = nk.Constraints.from_arrays(i, j, t, n)
    one = must_link_centres(X, cons, 1)
    assert np.allclose(one, X[:5].mean(0, keepdims=True))
    four = must_link_centres(X, cons, 4, seed=3)
    assert four.shape == (4, X.shape[1])
    assert np.allclose(four[:2], np.stack([X[:5].mean(0), X[10:12].mean(0)]))
    # the completion picks data points (D^2 sampling), seeded
    assert all(np.any(np.all(X == c, axis=1)) for c in four[2:])
    assert np.array_equal(four, must_link_centres(X, cons, 4, seed=3))
    no_ml = nk.Constraints.from_arrays(np.array([0]), np.array([39]), np.array([-1]), n)
    assert must_link_centres(X, no_ml, 4) is None


def test_seeded_run_joins_the_restarts_and_wins_on_many_clusters():
    X, y = blobs()
    cons, _ = label_constraints(y, 3)
    plain = nk.kernel_kmeans(X, 30, seed=0, n_init=3)
    seeded = nk.kernel_kmeans(X, 30, seed=0, n_init=3, constraints=cons)
    assert inertia(X, seeded) < 0.95 * inertia(X, plain)
    assert nk.clustering_metrics(y, seeded)["ari"] > 0.999
    # unseeded restarts are stuck in a local minimum here: the problem is not a friendly one
    assert nk.clustering_metrics(y, plain)["ari"] < 0.97
    # the seeded run replaces the restarts' best only when its inertia is lower: from a
    # single must-link pair (one group, k-means++ for the other 29) it never makes it worse
    few = nk.Constraints.from_arrays(np.array([0]), np.array([1]), np.array([1]), X.shape[0])
    with_few = nk.kernel_kmeans(X, 30, seed=0, n_init=3, constraints=few)
    assert inertia(X, with_few) <= inertia(X, plain)


def test_constraints_over_other_points_are_refused():
    X, y = blobs(k=3, per=10)
    cons, _ = label_constraints(np.r_[y, y], 2)
    with pytest.raises(nk.ValidationError, match="constraints: expected a Constraints over 30"):
        nk.kernel_kmeans(X, 3, constraints=cons)


def test_results_print_as_one_readable_line():
    """print(result) shows what was fitted and how it ended on one line, not V and every
    trace (issue 75: the README's print(result) flooded the console)."""
    import npkl_dist as nk

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    problem = nk.NPKLProblem.build(
        nk.knn_graph(X, 5, warn=False).laplacian(), nk.sample_constraints(y, seed=0)
    )
    for result in (
        nk.fit_bcd(problem, max_sweeps=3000),
        nk.fit_admm(problem, max_iter=3000),
    ):
        text = repr(result)
        assert "\n" not in text and len(text) < 300, text
        assert f"V=60x{problem.rank}" in text and "objective=" in text
