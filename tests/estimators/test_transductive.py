"""NPKLClustering / NPKLEmbedding: thin wrappers over the library's calls (bitwise equal to
them), scikit-learn composition (Pipeline, GridSearchCV, clone, pickle) and one-line errors
in the estimator's own syntax."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import npkl_dist as nk
from npkl_dist.estimators import NPKLClustering, NPKLEmbedding
from npkl_dist.evaluate import choose_normalize, cluster_kernel


@pytest.fixture(scope="module")
def digits():
    """600 digits, 10 classes, a quarter of the points labelled: many classes, few labels
    (a CV fold of 400 points still holds the 0.6 n pairs the protocol samples)."""
    X, y = load_digits(return_X_y=True)
    X, y = X[:600], y[:600]
    rng = np.random.default_rng(5)
    partial = np.where(rng.random(y.size) < 0.25, y, -1)
    return X, y, partial


def by_functions(X, partial, *, solver="bcd", gamma=1.0, seed=0, k=10, **options):
    """The same fit through the library's functions, as npkl fit composes them."""
    graph = nk.knn_graph(X, 5, seed=seed)
    cons = nk.sample_constraints(partial, seed=seed, diagonal=solver == "admm")
    problem = nk.NPKLProblem.build(graph.laplacian(1e-3), cons, gamma=gamma, seed=seed)
    fit = {"bcd": nk.fit_bcd, "admm": nk.fit_admm, "simplenpkl": nk.fit_simplenpkl}[solver]
    result = fit(problem, **options)
    unit = choose_normalize(None, cons, result.V)
    labels = cluster_kernel(
        result.V,
        k,
        seed=seed,
        normalize=unit,
        short_rows_of=cons,
        constraints=cons,
        solver=solver,
    )
    return result.V, labels


@pytest.mark.parametrize(
    "solver, kwargs, fn_kwargs",
    [
        ("bcd", {}, {}),
        ("admm", {"solver_options": {"anderson": 5}}, {"anderson": 5}),
        ("simplenpkl", {}, {}),
    ],
)
def test_fit_equals_the_function_calls_bitwise(digits, solver, kwargs, fn_kwargs):
    X, _, partial = digits
    est = NPKLClustering(10, solver=solver, random_state=3, **kwargs).fit(X, partial)
    V, labels = by_functions(X, partial, solver=solver, seed=3, **fn_kwargs)
    assert np.array_equal(est.embedding_, V)
    assert np.array_equal(est.labels_, labels)
    emb = NPKLEmbedding(solver=solver, random_state=3, **kwargs)
    assert np.array_equal(emb.fit_transform(X, partial), V)


def test_index_pairs_equal_the_same_constraints(digits):
    X, _, partial = digits
    cons = nk.sample_constraints(partial, seed=0)
    pairs = np.column_stack([cons.i, cons.j])
    est = NPKLEmbedding().fit(X, pairs=pairs, pair_labels=cons.t)
    assert np.array_equal(est.embedding_, NPKLEmbedding().fit(X, partial).embedding_)
    words = np.where(cons.t > 0, "must", "cannot")
    again = NPKLEmbedding().fit(X, pairs=pairs, pair_labels=words)
    assert np.array_equal(again.embedding_, est.embedding_)


def test_learned_kernel_beats_plain_kmeans_and_predict_extends(digits):
    X, y, partial = digits
    est = NPKLClustering(10).fit(X, partial)
    ours = nk.clustering_metrics(y, est.labels_)["rand_accuracy"]
    plain = nk.clustering_metrics(y, nk.kernel_kmeans(X, 10))["rand_accuracy"]
    assert ours > plain + 0.02
    # copies of training rows come back with their training cluster; new digits are placed
    assert np.array_equal(est.predict(X[:50]), est.labels_[:50])
    Xd, yd = load_digits(return_X_y=True)
    held = slice(1500, 1797)
    assert est.score(Xd[held], yd[held]) > plain


def test_transform_of_training_rows_is_their_embedding(digits):
    X, _, partial = digits
    emb = NPKLEmbedding().fit(X, partial)
    assert np.array_equal(emb.transform(X[::7]), emb.embedding_[::7])
    assert emb.get_feature_names_out()[0] == "npklembedding0"


def test_gridsearch_in_a_pipeline_equals_the_function_with_the_chosen_gamma(digits):
    X, _, partial = digits
    pipe = Pipeline([("scale", StandardScaler()), ("npkl", NPKLClustering(10))])
    search = GridSearchCV(
        pipe, {"npkl__gamma": [0.1, 1.0, 10.0]}, cv=KFold(3, shuffle=True, random_state=0)
    ).fit(X, partial)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    gamma = search.best_params_["npkl__gamma"]
    V, labels = by_functions(StandardScaler().fit_transform(X), partial, gamma=gamma)
    best = search.best_estimator_.named_steps["npkl"]
    assert np.array_equal(best.embedding_, V)
    assert np.array_equal(best.labels_, labels)


def test_clone_pickle_and_params(digits):
    X, _, partial = digits
    est = NPKLClustering(10, gamma=2.0, solver_options={"method": "sweeps"})
    c = clone(est)
    assert c.get_params() == est.get_params()
    est.fit(X, partial)
    back = pickle.loads(pickle.dumps(est))
    assert np.array_equal(back.predict(X[:40]), est.predict(X[:40]))
    assert est.set_params(gamma=3.0).gamma == 3.0


def test_float32_and_random_state_objects(digits):
    X, _, partial = digits
    e32 = NPKLEmbedding(dtype="float32").fit(X, partial)
    assert e32.embedding_.dtype == np.float32
    rs = np.random.RandomState(1)
    seed = np.random.RandomState(1).randint(np.iinfo(np.int32).max)
    a = NPKLEmbedding(random_state=rs).fit(X, partial).embedding_
    assert np.array_equal(a, NPKLEmbedding(random_state=int(seed)).fit(X, partial).embedding_)


@pytest.mark.parametrize(
    "make, kwargs, message",
    [
        (
            lambda: NPKLClustering(solver="lbfgs"),
            {},
            "NPKLClustering(solver='lbfgs'): expected one of 'bcd', 'admm', 'simplenpkl'",
        ),
        (
            lambda: NPKLEmbedding(gamma=-1),
            {},
            "NPKLEmbedding(gamma=-1): expected a finite number > 0",
        ),
        (lambda: NPKLEmbedding(solver_options={"rho": 5.0}), {}, "'rho' is not one"),
        (lambda: NPKLEmbedding(solver_options={"tol": 1.0}), {}, "'tol' is not one"),
        (
            lambda: NPKLEmbedding(n_neighbors=700),
            {},
            "NPKLEmbedding(n_neighbors=700): expected at most n_samples - 1 = 599",
        ),
        (
            lambda: NPKLClustering(n_clusters=601),
            {},
            "NPKLClustering(n_clusters=601): expected at most n_samples = 600",
        ),
        (
            lambda: NPKLClustering(cluster_method="spectral"),
            {},
            "NPKLClustering(cluster_method='spectral')",
        ),
        (lambda: NPKLEmbedding(random_state=-2), {}, "NPKLEmbedding(random_state=-2)"),
        (lambda: NPKLEmbedding(), {"pair_labels": [1]}, "pairs: missing"),
        (lambda: NPKLEmbedding(), {"pairs": [[0, 1]]}, "pair_labels: missing"),
        (
            lambda: NPKLEmbedding(),
            {"pairs": [[0, 1]], "pair_labels": [1], "y": "partial"},
            "give either y",
        ),
        (
            lambda: NPKLEmbedding(),
            {"pairs": [[0, 1.5]], "pair_labels": [1]},
            "pairs: expected an integer array of shape (m, 2)",
        ),
        (lambda: NPKLEmbedding(), {"pairs": [[0, 900]], "pair_labels": [1]}, "out of range"),
        (lambda: NPKLEmbedding(), {"y": np.zeros(5)}, "y: 5 labels for 600 rows of X"),
    ],
)
def test_bad_input_gets_one_line_naming_it(digits, make, kwargs, message):
    X, _, partial = digits
    if isinstance(kwargs.get("y"), str):
        kwargs = {**kwargs, "y": partial}
    with pytest.raises(ValueError) as info:
        make().fit(X, **kwargs)
    text = str(info.value)
    assert message in text
    assert "\n" not in text
