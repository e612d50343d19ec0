"""Out-of-sample extension (bcdkl-tnnls2015 §III-E) against the dense joint-Laplacian reference."""

from __future__ import annotations

import numpy as np
import pytest

from npkl_dist import GraphWarning, ValidationError, knn_graph
from npkl_dist.graph._blocks import build_knn_index
from npkl_dist.graph._graph import laplacian
from npkl_dist.job._extend import extend_embedding, extend_embedding_dense, extension_weights


def _setup(seed, n=60, m=7, d=3, r=4, k=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Q = rng.normal(size=(m, d))
    g = knn_graph(X, k)
    V = rng.normal(size=(n, r))
    index = build_knn_index(X, k, method="exact")
    idx, dist = index.query(Q, k)
    w = extension_weights(dist, sigma=g.sigma)
    return g, V, idx, w


@pytest.mark.parametrize("delta", [1e-3, 0.5])
def test_matches_dense_reference(global_random_seed, delta):
    g, V, idx, w = _setup(global_random_seed)
    deg = np.asarray(g.S.sum(axis=1)).ravel()
    fast = extend_embedding(V, deg, idx, w, delta=delta)
    ref = extend_embedding_dense(g.S, V, idx, w, delta=delta)
    np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=1e-14)


def test_row_minimises_the_joint_objective(global_random_seed):
    g, V, idx, w = _setup(global_random_seed, m=1)
    deg = np.asarray(g.S.sum(axis=1)).ravel()
    v = extend_embedding(V, deg, idx, w)[0]
    n = V.shape[0]
    J = np.zeros((n + 1, n + 1))
    J[:n, :n] = g.S.toarray()
    J[n, idx[0]] = J[idx[0], n] = w[0]
    L = laplacian(J, 1e-3).toarray()

    def f(row):
        W = np.vstack([V, row])
        return np.trace(W.T @ L @ W)

    rng = np.random.default_rng(global_random_seed)
    base = f(v)
    for _ in range(10):
        assert f(v + 1e-3 * rng.normal(size=v.shape)) > base


def test_batch_independent_and_dtype():
    g, V, idx, w = _setup(3, m=9)
    deg = np.asarray(g.S.sum(axis=1)).ravel()
    whole = extend_embedding(V, deg, idx, w)
    parts = np.vstack(
        [extend_embedding(V, deg, idx[a : a + 2], w[a : a + 2]) for a in range(0, 9, 2)]
    )
    np.testing.assert_array_equal(whole, parts)
    f32 = extend_embedding(V.astype(np.float32), deg, idx, w)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, whole, rtol=1e-5, atol=1e-6)


def test_isolated_new_point_warns_and_gets_zero_row():
    g, V, idx, w = _setup(1, m=2)
    w[1] = 0.0
    deg = np.asarray(g.S.sum(axis=1)).ravel()
    with pytest.warns(GraphWarning, match="zero similarity"):
        out = extend_embedding(V, deg, idx, w)
    assert np.all(out[1] == 0) and np.any(out[0] != 0)


def test_bad_input_names_argument():
    g, V, idx, w = _setup(0)
    deg = np.asarray(g.S.sum(axis=1)).ravel()
    with pytest.raises(ValidationError, match="idx: neighbour indices"):
        extend_embedding(V, deg, idx + 1000, w)
    with pytest.raises(ValidationError, match="sigma"):
        extension_weights(np.ones((2, 3)), sigma=None)


def test_graph_search_recall_against_exact(global_random_seed):
    from npkl_dist.job._extend import graph_knn

    rng = np.random.default_rng(global_random_seed)
    centres = rng.normal(scale=3, size=(5, 8))
    lab = rng.integers(0, 5, 3000)
    X = centres[lab] + rng.normal(size=(3000, 8))
    Q = centres[rng.integers(0, 5, 200)] + rng.normal(size=(200, 8))
    g = knn_graph(X, 10, method="exact")
    idx, dist = graph_knn(X, g.S, Q, 10, seed=global_random_seed)
    ex_idx, ex_dist = build_knn_index(X, 10, method="exact").query(Q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(idx, ex_idx)])
    assert recall >= 0.95, recall
    assert np.all(np.diff(dist, axis=1) >= 0)
    # distances are true distances of the returned rows
    np.testing.assert_allclose(dist, np.linalg.norm(X[idx] - Q[:, None, :], axis=2), rtol=1e-10)


# ------------------------------------------------------------------ placing new points
def _blobs(seed, n=240, d=4, k=3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=6.0, size=(k, d))
    y = rng.integers(k, size=n)
    return centres[y] + rng.normal(size=(n, d)), y, centres


def test_relative_weights_are_the_papers_up_to_one_factor_per_point(global_random_seed):
    """Relative weights = the paper's divided by the nearest neighbour's weight; where the
    paper's underflow to zero (a point 60 sigma away) the relative ones still do not."""
    rng = np.random.default_rng(global_random_seed)
    dist = np.sort(rng.uniform(0.1, 3.0, size=(6, 5)), axis=1)
    paper = extension_weights(dist, sigma=1.0, relative=False)
    rel = extension_weights(dist, sigma=1.0)
    np.testing.assert_allclose(rel, paper / paper[:, :1], rtol=1e-12)
    far = np.array([[60.0, 60.5, 61.0]])
    assert np.all(extension_weights(far, sigma=1.0, relative=False) == 0.0)
    w = extension_weights(far, sigma=1.0)
    assert w[0, 0] == 1.0 and np.all(w > 0)


def test_copies_of_training_rows_get_their_rows_and_clusters(global_random_seed):
    from npkl_dist import kernel_kmeans
    from npkl_dist.job._extend import embed_new_points

    X, _, _ = _blobs(global_random_seed)
    g = knn_graph(X, 5, warn=False)  # (separate blobs: several components)
    V = np.random.default_rng(global_random_seed).normal(size=(X.shape[0], 3))
    labels = kernel_kmeans(V, 4, seed=global_random_seed)
    pick = np.array([0, 17, 101, 239])
    ext = embed_new_points(X, V, g, X[pick], labels=labels)
    assert ext.copy.all() and not ext.far.any()
    np.testing.assert_array_equal(ext.V, V[pick])
    np.testing.assert_array_equal(ext.clusters, labels[pick])
    np.testing.assert_array_equal(ext.nearest, pick)


def test_far_points_are_flagged_with_one_warning_and_keep_usable_rows(global_random_seed):
    """Points moved 50 neighbourhood lengths away: flagged per point, one warning with the
    count; their rows are not underflowed zeros (the paper's weights give exactly zero
    there) and they still land in the cluster of their nearest training points."""
    from npkl_dist.job._extend import FAR_LENGTHS, embed_new_points

    X, y, centres = _blobs(global_random_seed)
    g = knn_graph(X, 5, warn=False)  # (separate blobs: several components)
    # a V that separates the three blobs (one-hot plus noise), clustered by y
    rng = np.random.default_rng(global_random_seed)
    V = np.eye(3)[y] + 0.05 * rng.normal(size=(X.shape[0], 3))
    near = centres[[0, 1, 2]] + rng.normal(size=(3, X.shape[1]))
    direction = rng.normal(size=X.shape[1])
    direction /= np.linalg.norm(direction)
    far = near + 50.0 * g.length * direction
    with pytest.warns(GraphWarning, match=r"extend: 3 of 6 new point\(s\) lie farther") as rec:
        ext = embed_new_points(X, V, g, np.vstack([near, far]), labels=y)
    assert len(rec) == 1
    np.testing.assert_array_equal(ext.far, [False] * 3 + [True] * 3)
    assert np.all(ext.distance[3:] > FAR_LENGTHS * g.length)
    assert np.all(np.linalg.norm(ext.V, axis=1) > 0.1)
    # the far points' nearest training rows are in some blob, and they take its cluster
    np.testing.assert_array_equal(ext.clusters, y[ext.nearest])


def test_embed_new_points_names_bad_arguments():
    from npkl_dist.job._extend import embed_new_points

    X, _, _ = _blobs(0, n=50)
    g = knn_graph(X, 5, warn=False)  # (separate blobs: several components)
    V = np.ones((50, 2))
    with pytest.raises(ValidationError, match=r"X_new: 3 features, the training points have 4"):
        embed_new_points(X, V, g, np.ones((2, 3)))
    with pytest.raises(ValidationError, match=r"V: expected the factor of the 50 training"):
        embed_new_points(X, V[:10], g, X[:2])
    with pytest.raises(ValidationError, match=r"k: expected an integer in \[1, 50\], got 0"):
        embed_new_points(X, V, g, X[:2], k=0)
