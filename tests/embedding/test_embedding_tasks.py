"""Downstream tasks on an embedding (npkl_dist.embedding._tasks): node classification against
planted and random embeddings and a per-label reference, split_edges' invariants, friend
suggestion on an SBM graph (igraph) with a spectral embedding of the training graph, AUC and
precision@k against brute-force references, and Table 8's k-NN protocol against a numpy
re-implementation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from threadpoolctl import threadpool_limits

import npkl_dist as nk
from npkl_dist import ValidationError
from npkl_dist.embedding import (
    EdgeSplit,
    friend_suggestion,
    knn_accuracy,
    node_classification,
    pair_scores,
    split_edges,
    table8_points,
)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with threadpool_limits(1, user_api="blas"):
        yield


# ------------------------------------------------------------------------------ classification
def planted(rng, n, k, sep, d=8):
    y = rng.integers(0, k, n)
    centres = rng.normal(size=(k, d)) * sep
    return centres[y] + rng.normal(size=(n, d)), y


def test_separable_classes_score_one_and_random_chance(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    Z, y = planted(rng, 400, 4, sep=20.0)
    s = node_classification(Z, y, train_fractions=(0.1, 0.5, 0.9), n_repeats=2, seed=1)
    assert s.micro_f1.shape == (3, 2) and not s.multilabel and s.n_labelled == 400
    assert s.micro_f1.min() > 0.99 and s.macro_f1.min() > 0.99
    noise = rng.normal(size=Z.shape)
    r = node_classification(noise, y, train_fractions=(0.5,), n_repeats=4, seed=1)
    assert abs(r.micro_mean[0] - 0.25) < 0.1 and r.macro_mean[0] < 0.4
    d = s.to_dict()
    assert d["train_fractions"] == [0.1, 0.5, 0.9] and len(d["macro_f1_std"]) == 3


def test_unlabelled_nodes_are_left_out():
    rng = np.random.default_rng(0)
    Z, y = planted(rng, 300, 3, sep=20.0)
    y2 = y.copy()
    y2[:100] = -1
    Z2 = Z.copy()
    Z2[:100] = rng.normal(size=(100, Z.shape[1])) * 100  # junk rows of unlabelled nodes
    a = node_classification(Z2, y2, train_fractions=(0.3,), n_repeats=2, seed=5)
    b = node_classification(Z[100:], y[100:], train_fractions=(0.3,), n_repeats=2, seed=5)
    assert a.n_labelled == 200
    np.testing.assert_array_equal(a.micro_f1, b.micro_f1)
    again = node_classification(Z2, y2, train_fractions=(0.3,), n_repeats=2, seed=5)
    np.testing.assert_array_equal(a.macro_f1, again.macro_f1)


def multilabel_planted(rng, n, c, sep):
    Y = (rng.random((n, c)) < 0.25).astype(np.int8)
    Y[np.arange(n), rng.integers(0, c, n)] = 1  # every node has a label
    Z = sep * Y + rng.normal(size=(n, c))
    return Z, Y


def test_multilabel_planted_and_random():
    rng = np.random.default_rng(2)
    Z, Y = multilabel_planted(rng, 500, 5, sep=8.0)
    s = node_classification(Z, sp.csr_matrix(Y), train_fractions=(0.2, 0.8), n_repeats=2)
    assert s.multilabel and s.micro_f1.min() > 0.97 and s.macro_f1.min() > 0.97
    r = node_classification(
        rng.normal(size=Z.shape), Y, train_fractions=(0.5,), n_repeats=3, seed=0
    )
    # chance: each node's t predictions hit a label with probability ~ its share, 0.4 here
    assert r.micro_mean[0] < 0.55


def reference_f1(Z, Y, fraction, seed, C=1.0):
    """One split of the multi-label protocol written out: a logistic regression per label,
    each test node's t best labels by a Python sort, F1 counted by hand."""
    from sklearn.linear_model import LogisticRegression

    labelled = np.flatnonzero(Y.sum(axis=1) > 0)
    X, Y = Z[labelled], Y[labelled][:, Y[labelled].any(axis=0)]
    perm = np.random.default_rng(seed).permutation(labelled.size)
    n_train = int(round(fraction * labelled.size))
    tr, te = perm[:n_train], perm[n_train:]
    scores = np.zeros((te.size, Y.shape[1]))
    for c in range(Y.shape[1]):
        clf = LogisticRegression(C=C, max_iter=1000).fit(X[tr], Y[tr, c])
        scores[:, c] = clf.decision_function(X[te])
    pred = np.zeros((te.size, Y.shape[1]), dtype=int)
    for r in range(te.size):
        t = int(Y[te[r]].sum())
        best = sorted(range(Y.shape[1]), key=lambda c: (-scores[r, c], c))[:t]
        pred[r, best] = 1
    true = Y[te]
    tp, fp, fn = ((true & pred).sum(0), ((1 - true) & pred).sum(0), (true & (1 - pred)).sum(0))
    micro = 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum())
    present = (true.sum(0) + pred.sum(0)) > 0
    per = np.where(present, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0)
    return micro, per[present].mean()


def test_multilabel_matches_reference():
    rng = np.random.default_rng(4)
    Z, Y = multilabel_planted(rng, 200, 4, sep=1.5)  # overlapping: F1 well below 1
    Y[:10] = 0  # unlabelled
    s = node_classification(Z, Y, train_fractions=(0.4,), n_repeats=1, seed=11)
    micro, macro = reference_f1(Z, Y, 0.4, 11)
    assert 0.4 < micro < 0.95
    np.testing.assert_allclose([s.micro_f1[0, 0], s.macro_f1[0, 0]], [micro, macro], atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"Z": np.zeros(5)}, r"^Z: expected a 2-D array"),
        ({"Z": np.full((5, 2), np.nan)}, r"^Z: row 0 holds NaN or inf"),
        ({"labels": np.zeros(4, int)}, r"^labels: expected 5 integer class labels"),
        ({"labels": np.zeros(5, int)}, r"^labels: the labelled nodes hold a single class"),
        ({"train_fractions": (0.5, 1.0)}, r"^train_fractions: expected a fraction in \(0, 1\)"),
        ({"n_repeats": 0}, r"^n_repeats: expected an integer >= 1"),
        ({"C": -1.0}, r"^C: expected a finite number > 0"),
    ],
)
def test_classification_bad_input_one_line(kwargs, match):
    args = {"Z": np.arange(10.0).reshape(5, 2), "labels": np.array([0, 1, 0, 1, 0])}
    args.update(kwargs)
    with pytest.raises(ValidationError, match=match) as err:
        node_classification(args.pop("Z"), args.pop("labels"), **args)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------ split_edges
def sbm(n=400, groups=4, degree=20.0, mix=0.1, seed=0):
    pytest.importorskip("igraph")
    edges, labels = nk.planted_partition(n, groups, degree=degree, mix=mix, seed=seed)
    S = sp.coo_matrix((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])), shape=(n, n))
    return (S + S.T).tocsr(), labels


def test_split_edges_invariants(global_random_seed):
    S, _ = sbm(seed=global_random_seed)
    rng = np.random.default_rng(global_random_seed)
    S = S.multiply(sp.csr_matrix((rng.random(S.nnz) + 1, S.indices, S.indptr), S.shape))
    S = S.maximum(S.T).tocsr()  # weighted, symmetric
    m = S.nnz // 2
    sp_ = split_edges(S, 0.3, seed=global_random_seed)
    h = round(0.3 * m)
    assert sp_.pos.shape == sp_.neg.shape == (h, 2)
    for P in (sp_.pos, sp_.neg):
        assert np.all(P[:, 0] < P[:, 1])
        assert np.unique(P, axis=0).shape[0] == h
    dense = S.toarray()
    assert np.all(dense[sp_.pos[:, 0], sp_.pos[:, 1]] > 0)  # held-out pairs are edges
    assert np.all(dense[sp_.neg[:, 0], sp_.neg[:, 1]] == 0)  # non-edges are not
    expect = dense.copy()
    expect[sp_.pos[:, 0], sp_.pos[:, 1]] = 0
    expect[sp_.pos[:, 1], sp_.pos[:, 0]] = 0
    np.testing.assert_array_equal(sp_.train.toarray(), expect)  # the rest, same weights
    assert connected_components(sp_.train)[0] == connected_components(S)[0]
    again = split_edges(S, 0.3, seed=global_random_seed)
    np.testing.assert_array_equal(again.pos, sp_.pos)
    np.testing.assert_array_equal(again.neg, sp_.neg)


def test_split_edges_keeps_components_and_refuses_too_much():
    # two triangles joined by nothing, plus a path 6-7-8: 3 + 3 + 2 edges, forest 2 + 2 + 2
    i = [0, 1, 0, 3, 4, 3, 6, 7]
    j = [1, 2, 2, 4, 5, 5, 7, 8]
    S = sp.coo_matrix((np.ones(8), (i, j)), shape=(9, 9))
    S = (S + S.T).tocsr()
    s = split_edges(S, 0.25, seed=0)  # 2 edges: one from each triangle's cycle
    assert connected_components(s.train)[0] == 3
    with pytest.raises(ValidationError, match=r"^fraction: 0.5 of 8 edges is 4, more than the 2"):
        split_edges(S, 0.5)
    with pytest.raises(ValidationError, match=r"^S: is not symmetric"):
        split_edges(sp.triu(S).tocsr(), 0.1)
    with pytest.raises(ValidationError, match=r"^fraction: expected a fraction in \(0, 1\)"):
        split_edges(S, 1.5)


# ------------------------------------------------------------------------------ friend suggestion
def spectral(A, d):
    """Top-d eigenvectors of the normalised adjacency (a peer of issue 77's benchmark)."""
    from scipy.sparse.linalg import eigsh

    deg = np.asarray(A.sum(axis=1)).ravel()
    inv = 1.0 / np.sqrt(np.maximum(deg, 1e-12))
    N = sp.diags(inv) @ A @ sp.diags(inv)
    vals, vecs = eigsh(N, k=d, which="LA", v0=np.ones(A.shape[0]))
    return vecs * inv[:, None]


def brute_auc(ps, ns):
    """Mann-Whitney over all (positive, negative) pairs, ties count half."""
    diff = ps[:, None] - ns[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def brute_precision(Z, split: EdgeSplit, k, score):
    n = Z.shape[0]
    G = Z @ Z.T
    if score == "distance":
        sq = np.diag(G)
        G = 2 * G - sq[:, None] - sq[None, :]
    T = split.train.toarray() != 0
    held = [set() for _ in range(n)]
    for a, b in split.pos.tolist():
        held[a].add(b)
        held[b].add(a)
    out = []
    for i in range(n):
        if not held[i]:
            continue
        cand = [j for j in range(n) if j != i and not T[i, j]]
        top = sorted(cand, key=lambda j: (-G[i, j], j))[:k]
        out.append(len(held[i].intersection(top)) / k)
    return float(np.mean(out))


@pytest.mark.parametrize("score", ["kernel", "distance"])
def test_friend_suggestion_sbm(score):
    S, labels = sbm(n=400, groups=4, degree=20.0, mix=0.1, seed=3)
    split = split_edges(S, 0.2, seed=3)
    Z = spectral(split.train, 4)
    fs = friend_suggestion(Z, split, score=score, k=10, max_nodes=None)
    assert fs.auc > 0.8  # within-community edges: 90% of them
    assert fs.precision_at_k > 0.04  # random: ~8 held-out of ~380 candidates, ~0.02
    np.testing.assert_allclose(
        fs.auc, brute_auc(pair_scores(Z, split.pos, score), pair_scores(Z, split.neg, score))
    )
    np.testing.assert_allclose(fs.precision_at_k, brute_precision(Z, split, 10, score))
    rnd = friend_suggestion(np.random.default_rng(0).normal(size=Z.shape), split, score=score)
    assert abs(rnd.auc - 0.5) < 0.06


def test_precision_ties_and_sampling():
    S, _ = sbm(n=120, groups=3, degree=12.0, mix=0.2, seed=1)
    split = split_edges(S, 0.2, seed=1)
    Z = np.random.default_rng(1).integers(0, 2, size=(120, 2)).astype(float)  # many ties
    for score in ("kernel", "distance"):
        fs = friend_suggestion(Z, split, score=score, k=10, max_nodes=None)
        np.testing.assert_allclose(fs.precision_at_k, brute_precision(Z, split, 10, score))
    few = friend_suggestion(Z, split, max_nodes=5, seed=2)
    assert few.n_evaluated == 5
    same = friend_suggestion(Z, split, max_nodes=5, seed=2)
    assert few == same
    with pytest.raises(ValidationError, match=r"^Z: 7 rows for a graph of 120 nodes"):
        friend_suggestion(Z[:7], split)
    with pytest.raises(ValidationError, match=r"^score: expected 'kernel' or 'distance'"):
        friend_suggestion(Z, split, score="cosine")


# ------------------------------------------------------------------------------ Table 8
def test_table8_points():
    y = np.r_[np.zeros(30, int), np.ones(80, int), np.full(60, 2), np.full(5, 3)]
    idx = table8_points(y, seed=0)
    assert idx.shape == (100,) and np.unique(idx).size == 100
    assert set(np.unique(y[idx]).tolist()) == {1, 2}  # the two largest classes only
    np.testing.assert_array_equal(idx, table8_points(y, seed=0))
    assert not np.array_equal(idx, table8_points(y, seed=1))
    small = table8_points(np.r_[np.zeros(20, int), np.ones(30, int)], seed=0)
    np.testing.assert_array_equal(small, np.arange(50))  # fewer than 100: all of them


def reference_knn(Z, y, ks, n_repeats, seed):
    """Table 8's protocol with scikit-learn's KNeighborsClassifier: 60:20:20 splits, k by
    validation accuracy (first best), test accuracy on the training points."""
    from sklearn.neighbors import KNeighborsClassifier

    n = Z.shape[0]
    rng = np.random.default_rng(seed)
    n_tr, n_va = round(0.6 * n), round(0.2 * n)

    def accuracy(tr, q, k):
        clf = KNeighborsClassifier(n_neighbors=k, algorithm="brute").fit(Z[tr], y[tr])
        return np.mean(clf.predict(Z[q]) == y[q])

    accs, chosen, vals = [], [], []
    for _ in range(n_repeats):
        p = rng.permutation(n)
        tr, va, te = p[:n_tr], p[n_tr : n_tr + n_va], p[n_tr + n_va :]
        va_acc = [accuracy(tr, va, k) for k in ks]
        k = ks[int(np.argmax(va_acc))]
        chosen.append(k)
        vals.append(max(va_acc))
        accs.append(accuracy(tr, te, k))
    return np.array(accs), np.array(chosen), np.array(vals)


def test_knn_accuracy_matches_reference(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    y = rng.integers(0, 3, 100)  # three classes: vote ties possible at even k
    Z = rng.normal(size=(100, 2)) + 1.2 * y[:, None]  # overlapping: accuracy well below 1
    ks = [1, 2, 3, 4, 5, 7, 9, 11, 13, 15]
    s = knn_accuracy(Z, y, k_values=ks, n_repeats=5, seed=global_random_seed)
    acc, k, val = reference_knn(Z, y, ks, 5, global_random_seed)
    np.testing.assert_array_equal(s.k, k)
    np.testing.assert_allclose(s.accuracy, acc)
    np.testing.assert_allclose(s.validation, val)  # what a setting is chosen on
    assert 0.55 < s.mean < 0.95 and s.std > 0


def test_knn_accuracy_separable_and_random():
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(50, int), np.ones(50, int)]
    Z = rng.normal(size=(100, 2)) * 0.1 + 10 * y[:, None]
    assert knn_accuracy(Z, y, seed=0).mean == 1.0
    chance = knn_accuracy(rng.normal(size=(100, 2)), y, n_repeats=50, seed=0)
    assert abs(chance.mean - 0.5) < 0.1
    with pytest.raises(ValidationError, match=r"^ratios: expected three positive shares"):
        knn_accuracy(Z, y, ratios=(0.5, 0.5, 0.5))
    with pytest.raises(ValidationError, match=r"^k_values: none is <= the 60 training points"):
        knn_accuracy(Z, y, k_values=(61,))


@pytest.mark.heavy
def test_split_and_suggest_at_a_million_nodes():
    """10^6 nodes, ~10^7 random edges: split_edges (random spanning forest, 10^6 held out,
    as many non-edges) measured 17.8 s, friend_suggestion on 200 nodes 10.1 s (2 shared
    cores); a random embedding scores AUC ~ 0.5."""
    rng = np.random.default_rng(0)
    n, m = 1_000_000, 10_000_000
    i, j = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = i != j
    S = sp.coo_matrix((np.ones(keep.sum()), (i[keep], j[keep])), shape=(n, n)).tocsr()
    S = S.maximum(S.T).tocsr()
    split = split_edges(S, 0.1, seed=0)
    assert split.pos.shape == split.neg.shape == (round(0.1 * (S.nnz // 2)), 2)
    assert connected_components(split.train)[0] == connected_components(S)[0]
    fs = friend_suggestion(rng.normal(size=(n, 16)), split, max_nodes=200)
    assert fs.n_evaluated == 200 and abs(fs.auc - 0.5) < 0.01
