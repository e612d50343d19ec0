"""InductiveKernel (the estimator): metric-learn's pairs convention over fit_inductive, and
the conformance checks check_estimator cannot run on pair input, in the spirit of
metric-learn's test_sklearn_compat.py: clone, get/set_params, pickling, Pipeline,
cross_val_score and GridSearchCV over gamma and the rank on index pairs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

import npkl_dist as nk
from npkl_dist.estimators import InductiveKernel
from npkl_dist.estimators._pairs import _calibrate


@pytest.fixture(scope="module")
def data():
    """Digits: 500 training points, 10 classes, 800 pairs among them; the rest held out."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    cons = nk.sample_constraints(y[:500], 400, 400, seed=0)
    pairs = np.column_stack([cons.i, cons.j])
    return X, y, cons, pairs, cons.t.astype(np.int64)


def test_index_pairs_equal_fit_inductive(data):
    X, _, cons, pairs, t = data
    est = InductiveKernel(landmarks=60, preprocessor=X[:500]).fit(pairs, t)
    model = nk.fit_inductive(X[:500], cons, landmarks=60)
    assert np.array_equal(est.transform(X[500:600]), model.transform(X[500:600]))
    d2 = model.pair_distance(X[pairs[:, 0]], X[pairs[:, 1]])
    np.testing.assert_array_equal(est.pair_distance(pairs), np.sqrt(np.maximum(d2, 0)))
    np.testing.assert_array_equal(est.pair_score(pairs), -est.pair_distance(pairs))
    assert np.array_equal(est.transform(np.arange(10)), est.transform(X[:10]))


def test_feature_pairs_and_callable_preprocessor(data):
    X, _, _, pairs, t = data
    rows = X[:500]
    covered = np.unique(pairs).size == 500  # every training point is in a pair
    a = InductiveKernel(landmarks=60, preprocessor=rows).fit(pairs, t)
    b = InductiveKernel(landmarks=60, preprocessor=lambda idx: rows[idx]).fit(pairs, t)
    if covered:
        assert np.array_equal(a.transform(X[500:520]), b.transform(X[500:520]))
    c = InductiveKernel(landmarks=60).fit(rows[pairs], t)  # (m, 2, d) feature rows
    assert c.score(rows[pairs], t) > 0.9
    np.testing.assert_array_equal(c.pair_distance(rows[pairs]), c.pair_distance(rows[pairs]))


def test_partial_fit_equals_fit_on_the_union(data):
    X, _, _, pairs, t = data
    rows = X[:500]
    est = InductiveKernel(landmarks=40)
    est.partial_fit(rows[pairs[:300]], t[:300]).partial_fit(rows[pairs[300:]], t[300:])
    whole = InductiveKernel(landmarks=40).fit(rows[pairs], t)
    assert np.array_equal(est.transform(X[500:540]), whole.transform(X[500:540]))
    assert est.threshold_ == whole.threshold_
    with pytest.raises(ValueError, match=r"does not continue the pairs seen so far"):
        est.partial_fit(pairs[:5], t[:5])


def brute_threshold(dist, y, strategy, min_rate=None, beta=1.0):
    """The best value a strategy can reach over every possible cut (slow reference)."""
    best = -np.inf
    for thr in np.concatenate([[dist.min() - 1], np.unique(dist)]):
        pred = dist <= thr
        tp, fp = np.sum(pred & (y == 1)), np.sum(pred & (y == -1))
        P, N = np.sum(y == 1), np.sum(y == -1)
        if strategy == "accuracy":
            v = (tp + N - fp) / y.size
        elif strategy == "f_beta":
            prec = tp / (tp + fp) if tp + fp else 0.0
            rec = tp / P
            v = (1 + beta**2) * prec * rec / (beta**2 * prec + rec) if prec + rec else 0.0
        elif strategy == "max_tpr":
            v = tp / P if 1 - fp / N >= min_rate else -np.inf
        else:
            v = 1 - fp / N if tp / P >= min_rate else -np.inf
        best = max(best, v)
    return best


@pytest.mark.parametrize(
    "strategy, min_rate, beta",
    [
        ("accuracy", None, 1.0),
        ("f_beta", None, 1.0),
        ("f_beta", None, 0.3),
        ("max_tpr", 0.9, 1.0),
        ("max_tnr", 0.8, 1.0),
    ],
)
def test_calibrated_threshold_reaches_the_best_cut(global_random_seed, strategy, min_rate, beta):
    rng = np.random.default_rng(global_random_seed)
    y = np.where(rng.random(300) < 0.4, 1, -1)
    dist = np.round(rng.gamma(2.0, 1.0, 300) + (y < 0) * rng.random(300), 1)  # with ties
    thr = _calibrate(-dist, y, strategy, min_rate, beta)
    pred = np.where(dist <= thr, 1, -1)
    tp, fp = np.sum((pred == 1) & (y == 1)), np.sum((pred == 1) & (y == -1))
    P, N = np.sum(y == 1), np.sum(y == -1)
    if strategy == "accuracy":
        got = np.mean(pred == y)
    elif strategy == "f_beta":
        prec, rec = tp / max(tp + fp, 1), tp / P
        got = (1 + beta**2) * prec * rec / (beta**2 * prec + rec) if prec + rec else 0.0
    elif strategy == "max_tpr":
        assert 1 - fp / N >= min_rate
        got = tp / P
    else:
        assert tp / P >= min_rate
        got = 1 - fp / N
    assert got == pytest.approx(brute_threshold(dist, y, strategy, min_rate, beta), abs=1e-12)


def test_predict_threshold_and_score(data):
    X, _, _, pairs, t = data
    est = InductiveKernel(landmarks=60, preprocessor=X).fit(pairs, t)
    d = est.pair_distance(pairs)
    assert np.array_equal(est.predict(pairs), np.where(d <= est.threshold_, 1, -1))
    assert np.mean(est.predict(pairs) == t) > 0.9
    assert est.score(pairs, t) == pytest.approx(
        __import__("sklearn.metrics").metrics.roc_auc_score(t, -d)
    )
    est.set_threshold(0.0)
    assert np.all(est.predict(pairs) == -1) or np.all(d[est.predict(pairs) == 1] <= 0)
    est.calibrate_threshold(pairs, t, strategy="max_tpr", min_rate=0.95)
    assert np.mean(est.predict(pairs)[t == -1] == -1) >= 0.95


def test_get_metric_in_kneighbors_classifier(data):
    X, y, _, pairs, t = data
    est = InductiveKernel(landmarks=60, preprocessor=X).fit(pairs, t)
    metric = est.get_metric()
    for a, b in pairs[:20]:
        assert metric(X[a], X[b]) == pytest.approx(est.pair_distance(np.array([[a, b]]))[0])
    # (a callable metric is called once per pair of points: a small neighbour search)
    train, test = slice(0, 100), slice(500, 520)
    knn = KNeighborsClassifier(3, metric=metric, algorithm="brute").fit(X[train], y[train])
    assert knn.score(X[test], y[test]) >= 0.8


def test_gridsearch_and_cross_val_score_on_index_pairs(data):
    X, _, cons, pairs, t = data
    est = InductiveKernel(preprocessor=X[:500])
    cv = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(est, pairs, t, cv=cv, scoring="accuracy")
    assert scores.shape == (3,) and np.all((scores > 0.6) & (scores <= 1))
    search = GridSearchCV(est, {"gamma": [0.1, 1.0, 10.0], "landmarks": [30, 90]}, cv=cv)
    search.fit(pairs, t)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    best = search.best_params_
    direct = nk.fit_inductive(X[:500], cons, gamma=best["gamma"], landmarks=best["landmarks"])
    got = search.best_estimator_.transform(X[500:520])
    assert np.array_equal(got, direct.transform(X[500:520]))


def test_pipeline_clone_pickle_params(data):
    X, _, _, pairs, t = data
    est = InductiveKernel(landmarks=50, preprocessor=X)
    pipe = make_pipeline(clone(est)).fit(pairs, t)
    est.fit(pairs, t)
    assert pipe.score(pairs, t) == est.score(pairs, t)
    assert clone(est).get_params()["landmarks"] == 50
    assert not hasattr(clone(est), "model_")
    back = pickle.loads(pickle.dumps(est))
    assert np.array_equal(back.predict(pairs), est.predict(pairs))
    assert est.set_params(gamma=5.0).get_params()["gamma"] == 5.0


@pytest.mark.parametrize(
    "kwargs, args, message",
    [
        ({}, "index-pairs", "pairs: (m, 2) indices need preprocessor="),
        (
            {"preprocessor": "X"},
            "bad-labels",
            "y: pair labels must be +1 (similar) or -1 (dissimilar), got [0]",
        ),
        ({"preprocessor": "X"}, "short-labels", "y: expected shape (800,), one label per pair"),
        (
            {"preprocessor": "X"},
            "bad-shape",
            "pairs: expected (m, 2, n_features) feature rows or (m, 2) integer indices",
        ),
        (
            {"preprocessor": "X", "regularizer": "l1"},
            "ok",
            "InductiveKernel(regularizer='l1'): expected one of",
        ),
        (
            {"preprocessor": "X", "gamma": 0},
            "ok",
            "InductiveKernel(gamma=0): expected a finite number > 0",
        ),
        (
            {"preprocessor": "X", "bandwidth": "auto"},
            "ok",
            "InductiveKernel(bandwidth='auto'): expected a number > 0, 'median' or 'knn'",
        ),
    ],
)
def test_bad_input_gets_one_line(data, kwargs, args, message):
    X, _, _, pairs, t = data
    kwargs = {k: (X if v == "X" else v) for k, v in kwargs.items()}
    fit_args = {
        "index-pairs": (pairs, t),
        "bad-labels": (pairs, np.where(t > 0, 1, 0)),
        "short-labels": (pairs, t[:-1]),
        "bad-shape": (pairs[:, :1], t),
        "ok": (pairs, t),
    }[args]
    with pytest.raises(ValueError) as info:
        InductiveKernel(**kwargs).fit(*fit_args)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_use_errors(data):
    X, _, _, pairs, t = data
    est = InductiveKernel(landmarks=30, preprocessor=X).fit(pairs, t)
    with pytest.raises(ValueError, match="X has 3 features, but InductiveKernel is expecting 64"):
        est.transform(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="strategy: 'best' is not one of"):
        est.calibrate_threshold(pairs, t, strategy="best")
    with pytest.raises(ValueError, match="min_rate: strategy='max_tpr' needs a rate in"):
        est.calibrate_threshold(pairs, t, strategy="max_tpr")
