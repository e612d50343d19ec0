"""Downstream tasks on an embedding Z (n x d, one row per node): node classification, friend
suggestion, and the k-NN protocol of simplenpkl-jmlr2011 Table 8 (issue 77 item 5).

* **Node classification** (the graph-embedding literature's protocol, Tang & Liu; DeepWalk):
  for each fraction f of the labelled nodes and each seeded repeat, a uniform random f of
  them trains one-vs-rest logistic regression on their rows of Z, the rest are predicted.
  Single-label targets predict the class of largest decision value; multi-label targets
  predict for each test node its t highest-scoring labels, t its true label count (the
  protocol's convention: the count is given, the labels are not). Micro- and Macro-F1 of
  the test nodes (Macro over the labels that occur in the test nodes or the predictions).
* **Friend suggestion** (§7.5: "rank the other users U_j according to ... K_ij"): a seeded
  fraction of the edges is held out before embedding (:func:`split_edges`; a random spanning
  forest is never held out, so each connected component stays connected) with as many
  uniform non-edges. Pairs are scored by the learned kernel k(i, j) = <z_i, z_j> or by
  -||z_i - z_j||^2. ROC AUC of held-out edges against the non-edges; precision@k per node:
  of the k best-scored nodes that are neither i nor a training neighbour of i, the share that
  are held-out neighbours of i, averaged over the nodes with a held-out edge.
* **Table 8's k-NN accuracy**: 100 points drawn at random from the two largest classes
  (:func:`table8_points`; the caller embeds them in 2-D), split 60:20:20 at random into
  train / validation / test; k is chosen on the validation set (train as the reference), the
  test accuracy of k-NN on the training set is reported, over seeded repeats (mean and std).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import minimum_spanning_tree

from .._errors import ValidationError, fmt_value
from ._groups import first_distinct
from ._saddle import check_count

__all__ = [
    "EdgeSplit",
    "FriendSuggestionScores",
    "KnnScores",
    "NodeClassificationScores",
    "TRAIN_FRACTIONS",
    "friend_suggestion",
    "knn_accuracy",
    "node_classification",
    "pair_scores",
    "split_edges",
    "table8_points",
]

#: Labelled fractions of the node-classification protocol: 10% .. 90%.
TRAIN_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

#: Candidate k of Table 8's protocol (chosen on the validation set; the paper gives none).
KNN_K = (1, 3, 5, 7, 9, 11, 13, 15)

#: Entries of one block of the score matrix in precision@k (float64: 64 MiB).
_BLOCK_ENTRIES = 1 << 23


# ------------------------------------------------------------------------------ validation
def _check_embedding(Z, name: str = "Z") -> np.ndarray:
    try:
        Z = np.asarray(Z, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(
            f"{name}: expected a numeric (n, d) array, got {type(Z).__name__}; pass one row per "
            f"node"
        ) from None
    if Z.ndim != 2 or Z.shape[0] < 2 or Z.shape[1] < 1:
        raise ValidationError(
            f"{name}: expected a 2-D array (n, d) with n >= 2 and d >= 1, got shape {Z.shape}; "
            f"pass one row per node"
        )
    if not np.all(np.isfinite(Z)):
        row = int(np.flatnonzero(~np.all(np.isfinite(Z), axis=1))[0])
        raise ValidationError(
            f"{name}: row {row} holds NaN or inf; pass a finite embedding (check the fit)"
        )
    return Z


def _check_fraction(name, value, hint) -> float:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float, np.integer, np.floating))
        and 0.0 < float(value) < 1.0
    )
    if not ok:
        raise ValidationError(
            f"{name}: expected a fraction in (0, 1), got {fmt_value(value)}; {hint}"
        )
    return float(value)


def _check_labels(labels, n: int):
    """(Y, multilabel, labelled): Y an (n_labelled, c) 0/1 indicator (CSR) or (n_labelled,)
    class codes; labelled the indices of the labelled nodes."""
    if sp.issparse(labels) or (np.ndim(labels) == 2):
        Y = sp.csr_matrix(labels)
        if Y.shape[0] != n:
            raise ValidationError(
                f"labels: {Y.shape[0]} rows for {n} embedded nodes; pass one row per node (a "
                f"row of zeros for an unlabelled node)"
            )
        Y.eliminate_zeros()
        if Y.nnz and not np.all(Y.data == 1):
            raise ValidationError(
                f"labels: indicator entries must be 0 or 1, got {fmt_value(np.unique(Y.data)[:5].tolist())}; "
                f"pass a 0/1 node x label matrix (group_labels)"
            )
        labelled = np.flatnonzero(np.diff(Y.indptr) > 0)
        Y = Y[labelled].astype(np.int8)
        cols = np.flatnonzero(np.diff(Y.tocsc().indptr) > 0)  # labels that occur
        return Y[:, cols].tocsr(), True, labelled
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != n or y.dtype.kind not in "iu":
        raise ValidationError(
            f"labels: expected {n} integer class labels (negative = unlabelled) or an (n, c) 0/1 "
            f"indicator, got dtype {y.dtype} shape {y.shape}; encode classes as 0..K-1"
        )
    labelled = np.flatnonzero(y >= 0)
    return y[labelled].astype(np.int64), False, labelled


# ------------------------------------------------------------------------------ classification
@dataclass(frozen=True)
class NodeClassificationScores:
    """Micro- and Macro-F1 of node classification per labelled fraction and repeat.

    Attributes
    ----------
    train_fractions : ndarray, shape (f,)
    micro_f1, macro_f1 : ndarray, shape (f, n_repeats)
    n_labelled : int
        Nodes with at least one label (the others are never used).
    multilabel : bool
    """

    train_fractions: np.ndarray
    micro_f1: np.ndarray
    macro_f1: np.ndarray
    n_labelled: int
    multilabel: bool

    @property
    def micro_mean(self) -> np.ndarray:
        return self.micro_f1.mean(axis=1)

    @property
    def micro_std(self) -> np.ndarray:
        return self.micro_f1.std(axis=1)

    @property
    def macro_mean(self) -> np.ndarray:
        return self.macro_f1.mean(axis=1)

    @property
    def macro_std(self) -> np.ndarray:
        return self.macro_f1.std(axis=1)

    def to_dict(self) -> dict:
        """Plain lists for JSON: per fraction, the mean and std of both scores."""
        return {
            "train_fractions": self.train_fractions.tolist(),
            "micro_f1_mean": self.micro_mean.tolist(),
            "micro_f1_std": self.micro_std.tolist(),
            "macro_f1_mean": self.macro_mean.tolist(),
            "macro_f1_std": self.macro_std.tolist(),
            "n_labelled": self.n_labelled,
            "multilabel": self.multilabel,
        }


def node_classification(
    Z,
    labels,
    *,
    train_fractions=TRAIN_FRACTIONS,
    n_repeats: int = 10,
    seed=0,
    C: float = 1.0,
    max_iter: int = 1000,
) -> NodeClassificationScores:
    """One-vs-rest logistic regression on the rows of Z with a fraction of the nodes labelled.

    Parameters
    ----------
    Z : array-like of float, shape (n, d)
        The embedding, one row per node.
    labels : array-like of int, shape (n,), or 0/1 matrix (dense or sparse), shape (n, c)
        One class per node (negative: unlabelled), or a multi-label indicator (a row of
        zeros: unlabelled), e.g. :func:`~npkl_dist.embedding.group_labels`.
    train_fractions : sequence of float in (0, 1)
        Shares of the labelled nodes that train; default 0.1, 0.2, ..., 0.9.
    n_repeats : int
        Seeded random splits per fraction.
    seed : int or numpy.random.Generator
    C : float
        Inverse regularisation of scikit-learn's ``LogisticRegression`` (lbfgs).
    max_iter : int
        Iterations of each logistic regression, at most.

    Returns
    -------
    NodeClassificationScores
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.multiclass import OneVsRestClassifier

    Z = _check_embedding(Z)
    Y, multilabel, labelled = _check_labels(labels, Z.shape[0])
    fractions = np.atleast_1d(np.asarray(train_fractions, dtype=object))
    if fractions.ndim != 1 or fractions.size == 0:
        raise ValidationError(
            f"train_fractions: expected a non-empty sequence of fractions, got "
            f"{fmt_value(train_fractions)}; pass e.g. (0.1, 0.5, 0.9)"
        )
    fractions = np.array(
        [
            _check_fraction("train_fractions", f, "pass shares of the labelled nodes, e.g. 0.1")
            for f in fractions
        ]
    )
    n_repeats = check_count("n_repeats", n_repeats, 1, hint="pass e.g. n_repeats=10")
    max_iter = check_count("max_iter", max_iter, 1, hint="pass e.g. max_iter=1000")
    if isinstance(C, bool) or not isinstance(C, (int, float)) or not np.isfinite(C) or C <= 0:
        raise ValidationError(f"C: expected a finite number > 0, got {fmt_value(C)}; pass C=1.0")
    nl = labelled.shape[0]
    if nl < 2:
        raise ValidationError(
            f"labels: {nl} labelled node(s); classification needs at least 2 (label more nodes)"
        )
    X = Z[labelled]
    n_classes = Y.shape[1] if multilabel else np.unique(Y).shape[0]
    if n_classes < 2:
        raise ValidationError(
            "labels: the labelled nodes hold a single class; classification needs at least 2 "
            "(pass labels with two or more classes)"
        )
    rng = np.random.default_rng(seed)
    micro = np.empty((fractions.size, n_repeats))
    macro = np.empty_like(micro)
    for r in range(n_repeats):
        for f, frac in enumerate(fractions):
            perm = rng.permutation(nl)
            n_train = min(max(int(round(frac * nl)), 1), nl - 1)
            tr, te = perm[:n_train], perm[n_train:]
            y_true, y_pred = _fit_predict(
                X[tr], Y[tr], X[te], Y[te], multilabel, C, max_iter, LogisticRegression,
                OneVsRestClassifier,
            )  # fmt: skip
            present = _present_labels(y_true, y_pred, multilabel)
            micro[f, r] = f1_score(
                y_true, y_pred, average="micro", labels=present, zero_division=0
            )
            macro[f, r] = f1_score(
                y_true, y_pred, average="macro", labels=present, zero_division=0
            )
    return NodeClassificationScores(fractions, micro, macro, int(nl), bool(multilabel))


def _fit_predict(Xtr, Ytr, Xte, Yte, multilabel, C, max_iter, LogReg, OvR):
    """True and predicted targets of the test rows (module docstring)."""
    if not multilabel:
        classes = np.unique(Ytr)
        if classes.size == 1:  # one class seen: it is every prediction
            return Yte, np.full(Yte.shape[0], classes[0])
        clf = OvR(LogReg(C=C, max_iter=max_iter)).fit(Xtr, Ytr)
        return Yte, clf.predict(Xte)
    Ytr = Ytr.toarray()
    seen = np.flatnonzero(Ytr.any(axis=0) & ~Ytr.all(axis=0))  # both outcomes in training
    scores = np.full((Xte.shape[0], Ytr.shape[1]), -np.inf)
    if seen.size:
        clf = OvR(LogReg(C=C, max_iter=max_iter)).fit(Xtr, Ytr[:, seen])
        scores[:, seen] = clf.decision_function(Xte).reshape(Xte.shape[0], -1)
    always = np.flatnonzero(Ytr.all(axis=0))
    scores[:, always] = np.inf  # every training node has it
    # each test node gets its t best labels, t its true count; ties: the lower label
    t = np.diff(Yte.indptr)
    order = np.argsort(-scores, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(scores.shape[1])[None, :], axis=1)
    pred = (rank < t[:, None]).astype(np.int8)
    return Yte.toarray(), pred


def _present_labels(y_true, y_pred, multilabel):
    if multilabel:
        return np.flatnonzero(y_true.any(axis=0) | y_pred.any(axis=0))
    return np.union1d(y_true, y_pred)


# ------------------------------------------------------------------------------ friend suggestion
@dataclass(frozen=True, eq=False)
class EdgeSplit:
    """Training graph and held-out pairs of :func:`split_edges`.

    Attributes
    ----------
    train : scipy.sparse.csr_matrix, shape (n, n)
        The graph without the held-out edges (symmetric, same weights).
    pos : ndarray of int64, shape (h, 2)
        Held-out edges, i < j, sorted.
    neg : ndarray of int64, shape (h, 2)
        Node pairs that are not edges of the input graph, i < j, distinct, sorted.
    """

    train: sp.csr_matrix
    pos: np.ndarray
    neg: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.train.shape[0])


def _check_graph(S) -> sp.csr_matrix:
    S = getattr(S, "S", S)  # an npkl_dist.Graph
    if not sp.issparse(S):
        try:
            S = np.asarray(S, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValidationError(
                f"S: expected a sparse symmetric adjacency matrix, got {type(S).__name__}; pass "
                f"graph_from_edges(...).S or a scipy.sparse matrix"
            ) from None
        if S.ndim != 2:
            raise ValidationError(
                f"S: expected a square adjacency matrix, got shape {S.shape}; pass an n x n matrix"
            )
    S = sp.csr_matrix(S, dtype=np.float64)
    if S.shape[0] != S.shape[1] or S.shape[0] < 3:
        raise ValidationError(
            f"S: expected a square n x n adjacency matrix with n >= 3, got shape {S.shape}"
        )
    S.sum_duplicates()
    S.eliminate_zeros()
    if S.nnz and not np.all(np.isfinite(S.data)):
        raise ValidationError("S: holds NaN or inf; pass finite edge weights")
    if S.diagonal().any():
        raise ValidationError(
            "S: has self-loops (non-zero diagonal); pass S with S.setdiag(0) and "
            "S.eliminate_zeros() applied"
        )
    if (S != S.T).nnz:
        raise ValidationError("S: is not symmetric; pass an undirected graph, e.g. S.maximum(S.T)")
    return S


def split_edges(S, fraction: float = 0.1, seed=0) -> EdgeSplit:
    """Hold out a seeded fraction of a graph's edges, and as many non-edges.

    A random spanning forest of S (the minimum spanning forest under uniform random edge
    weights) is kept; ``round(fraction * m)`` of the other edges are held out, uniformly.
    Every connected component of S thus stays connected in the training graph. The
    non-edges are uniform among the pairs i < j that are not edges of S (rejection sampling,
    never n^2 pairs).

    Parameters
    ----------
    S : scipy.sparse matrix or npkl_dist.Graph, shape (n, n)
        Symmetric adjacency (weights kept), zero diagonal.
    fraction : float in (0, 1)
        Share of the m edges (unordered pairs) held out.
    seed : int or numpy.random.Generator

    Returns
    -------
    EdgeSplit
    """
    S = _check_graph(S)
    fraction = _check_fraction(
        "fraction", fraction, "pass the share of edges to hold out, e.g. fraction=0.1"
    )
    n = S.shape[0]
    rng = np.random.default_rng(seed)
    U = sp.triu(S, k=1, format="csr")
    U.sort_indices()
    ei, ej = U.nonzero()
    m = ei.shape[0]
    h = int(round(fraction * m))
    if h == 0:
        raise ValidationError(
            f"fraction: {fraction} of {m} edges holds out none; pass a larger fraction"
        )
    # random spanning forest: the minimum one under i.i.d. uniform weights in (0, 1]
    R = sp.csr_matrix((1.0 - rng.random(m), (ei, ej)), shape=(n, n))
    F = minimum_spanning_tree(R).tocoo()
    fkeys = np.minimum(F.row, F.col).astype(np.int64) * n + np.maximum(F.row, F.col)
    ekeys = ei.astype(np.int64) * n + ej
    fkeys.sort()
    at = np.minimum(np.searchsorted(fkeys, ekeys), max(fkeys.shape[0] - 1, 0))
    in_forest = (fkeys[at] == ekeys) if fkeys.shape[0] else np.zeros(m, dtype=bool)
    free = np.flatnonzero(~in_forest)
    if h > free.shape[0]:
        top = free.shape[0] / m
        raise ValidationError(
            f"fraction: {fraction} of {m} edges is {h}, more than the {free.shape[0]} that can go "
            f"without disconnecting a component; pass fraction <= {np.floor(top * 1000) / 1000:g}"
        )
    held = np.sort(rng.choice(free, size=h, replace=False))
    pos = np.column_stack([ei[held], ej[held]]).astype(np.int64)
    keep = np.ones(m, dtype=bool)
    keep[held] = False
    Ut = sp.csr_matrix((U.data[keep], (ei[keep], ej[keep])), shape=(n, n))
    train = (Ut + Ut.T).tocsr()
    n_pairs = n * (n - 1) // 2
    if n_pairs - m < h:
        raise ValidationError(
            f"fraction: {h} held-out edges need as many non-edges, but the graph has only "
            f"{n_pairs - m}; pass a smaller fraction"
        )
    neg = _sample_non_edges(ekeys, n, h, rng)
    return EdgeSplit(train, pos, neg)


def _sample_non_edges(ekeys_sorted, n, h, rng) -> np.ndarray:
    """h distinct uniform pairs i < j whose code i * n + j is not in ``ekeys_sorted``."""
    keys = np.empty(0, np.int64)
    while keys.shape[0] < h:
        k = max(2 * (h - keys.shape[0]), 1024)
        a = rng.integers(0, n, k)
        b = rng.integers(0, n, k)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        code = lo * n + hi
        pos = np.minimum(np.searchsorted(ekeys_sorted, code), ekeys_sorted.shape[0] - 1)
        ok = (a != b) & (ekeys_sorted[pos] != code)
        keys = first_distinct(keys, code[ok], h)
    keys = np.sort(keys)
    return np.column_stack(np.divmod(keys, n))


@dataclass(frozen=True)
class FriendSuggestionScores:
    """Friend suggestion on held-out edges.

    Attributes
    ----------
    auc : float
        ROC AUC of the held-out edges against the sampled non-edges.
    precision_at_k : float
        Mean over the evaluated nodes of precision@k.
    k : int
    n_evaluated : int
        Nodes with a held-out edge that precision@k averaged over.
    score : str
    """

    auc: float
    precision_at_k: float
    k: int
    n_evaluated: int
    score: str

    def to_dict(self) -> dict:
        return {
            "auc": self.auc,
            f"precision_at_{self.k}": self.precision_at_k,
            "n_evaluated": self.n_evaluated,
            "score": self.score,
        }


def pair_scores(Z, pairs, score: str = "kernel") -> np.ndarray:
    """Scores of node pairs: <z_i, z_j> (``"kernel"``) or -||z_i - z_j||^2
    (``"distance"``), shape (len(pairs),)."""
    a, b = Z[pairs[:, 0]], Z[pairs[:, 1]]
    if score == "kernel":
        return np.einsum("ij,ij->i", a, b)
    return -np.einsum("ij,ij->i", a - b, a - b)


def friend_suggestion(
    Z,
    split: EdgeSplit,
    *,
    score: str = "kernel",
    k: int = 10,
    max_nodes: int | None = 1000,
    seed=0,
) -> FriendSuggestionScores:
    """ROC AUC and precision@k of held-out edges ranked by the embedding (module docstring).

    Parameters
    ----------
    Z : array-like of float, shape (n, d)
        Embedding learned on ``split.train``.
    split : EdgeSplit
        From :func:`split_edges`.
    score : {"kernel", "distance"}
        k(i, j) = <z_i, z_j>, or -||z_i - z_j||^2.
    k : int
        Suggestions per node.
    max_nodes : int or None
        Evaluate precision@k on a seeded uniform sample of this many of the nodes with a
        held-out edge (each costs O(n d)); None: all of them.
    seed : int or numpy.random.Generator
        For the sample of nodes only.

    Returns
    -------
    FriendSuggestionScores
        Precision@k divides by k; ties in score are broken by the lower node number.
    """
    from sklearn.metrics import roc_auc_score

    Z = _check_embedding(Z)
    if not isinstance(split, EdgeSplit):
        raise ValidationError(
            f"split: expected an EdgeSplit, got {type(split).__name__}; pass "
            f"split_edges(S, fraction, seed)"
        )
    n = split.n_nodes
    if Z.shape[0] != n:
        raise ValidationError(
            f"Z: {Z.shape[0]} rows for a graph of {n} nodes; embed split.train (one row per node)"
        )
    if score not in ("kernel", "distance"):
        raise ValidationError(
            f"score: expected 'kernel' or 'distance', got {fmt_value(score)}; pass score='kernel'"
        )
    k = check_count("k", k, 1, n - 1, hint="pass e.g. k=10")
    if max_nodes is not None:
        max_nodes = check_count("max_nodes", max_nodes, 1, hint="pass e.g. 1000, or None for all")
    ps, ns = pair_scores(Z, split.pos, score), pair_scores(Z, split.neg, score)
    y = np.r_[np.ones(ps.shape[0]), np.zeros(ns.shape[0])]
    auc = float(roc_auc_score(y, np.r_[ps, ns]))
    # held-out neighbours per node, both directions (CSR)
    P = sp.csr_matrix(
        (
            np.ones(2 * split.pos.shape[0], np.int8),
            (np.r_[split.pos[:, 0], split.pos[:, 1]], np.r_[split.pos[:, 1], split.pos[:, 0]]),
        ),
        shape=(n, n),
    )
    nodes = np.flatnonzero(np.diff(P.indptr) > 0)
    if max_nodes is not None and nodes.shape[0] > max_nodes:
        rng = np.random.default_rng(seed)
        nodes = np.sort(rng.choice(nodes, size=max_nodes, replace=False))
    prec = _precision_at_k(Z, split.train, P, nodes, k, score)
    return FriendSuggestionScores(auc, float(prec.mean()), k, int(nodes.shape[0]), score)


def _precision_at_k(Z, train, P, nodes, k, score) -> np.ndarray:
    """Precision@k of each of ``nodes``, blocks of rows of the score matrix at a time."""
    n = Z.shape[0]
    sq = np.einsum("ij,ij->i", Z, Z)
    out = np.empty(nodes.shape[0])
    block = max(1, _BLOCK_ENTRIES // n)
    for s in range(0, nodes.shape[0], block):
        rows = nodes[s : s + block]
        B = Z[rows] @ Z.T
        if score == "distance":
            B = 2.0 * B - sq[rows][:, None] - sq[None, :]
        # exclude i itself and its training neighbours
        T = train[rows]
        B[np.repeat(np.arange(rows.shape[0]), np.diff(T.indptr)), T.indices] = -np.inf
        B[np.arange(rows.shape[0]), rows] = -np.inf
        top = np.argpartition(-B, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(B, top, axis=1).min(axis=1)
        above = (B > kth[:, None]).sum(axis=1)
        at = (B == kth[:, None]).sum(axis=1)
        Ph = P[rows]
        for r in range(rows.shape[0]):  # the rows of this block (<= max_nodes in all)
            if above[r] + at[r] > k:  # a tie at the k-th score: the lower node numbers
                ties = np.flatnonzero(B[r] == kth[r])[: k - above[r]]
                chosen = np.r_[np.flatnonzero(B[r] > kth[r]), ties]
            else:
                chosen = top[r]
            held = Ph.indices[Ph.indptr[r] : Ph.indptr[r + 1]]
            out[s + r] = np.isin(chosen, held).sum() / k
    return out


# ------------------------------------------------------------------------------ Table 8
def table8_points(labels, n_points: int = 100, seed=0) -> np.ndarray:
    """Table 8's sample: ``n_points`` indices drawn uniformly without replacement from the
    points of the two largest classes (equal counts: the lower label first), sorted.

    simplenpkl-jmlr2011 §7.5.2: "we randomly choose 100 points from the largest two classes"
    (read as 100 in all, not per class). Embed ``X[idx]``, then call :func:`knn_accuracy`
    with ``labels[idx]``. Fewer than ``n_points`` in the two classes: all of them.
    """
    y = np.asarray(labels)
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise ValidationError(
            f"labels: expected a 1-D integer array, got dtype {y.dtype} shape {y.shape}; encode "
            f"classes as 0..K-1"
        )
    n_points = check_count("n_points", n_points, 2, hint="pass n_points=100 (the paper's)")
    classes, counts = np.unique(y[y >= 0], return_counts=True)
    if classes.size < 2:
        raise ValidationError(
            f"labels: {classes.size} class(es); Table 8's protocol needs two (pass class labels)"
        )
    two = classes[np.lexsort((classes, -counts))[:2]]
    pool = np.flatnonzero(np.isin(y, two))
    rng = np.random.default_rng(seed)
    if pool.shape[0] <= n_points:
        return pool
    return np.sort(rng.choice(pool, size=n_points, replace=False))


@dataclass(frozen=True)
class KnnScores:
    """Table 8's k-NN test accuracies.

    Attributes
    ----------
    accuracy : ndarray, shape (n_repeats,)
        Test accuracy of each random split.
    k : ndarray of int, shape (n_repeats,)
        The k chosen on each split's validation set.
    validation : ndarray, shape (n_repeats,)
        Each split's validation accuracy at that k (for choosing an embedding's own settings
        on the same validation sets; never the test accuracy).
    """

    accuracy: np.ndarray
    k: np.ndarray
    validation: np.ndarray | None = None

    @property
    def mean(self) -> float:
        return float(self.accuracy.mean())

    @property
    def std(self) -> float:
        return float(self.accuracy.std())

    def to_dict(self) -> dict:
        return {"accuracy_mean": self.mean, "accuracy_std": self.std, "k": self.k.tolist()}


def knn_accuracy(
    Z, labels, *, k_values=KNN_K, n_repeats: int = 20, seed=0, ratios=(0.6, 0.2, 0.2)
) -> KnnScores:
    """k-NN accuracy on an embedding by simplenpkl-jmlr2011 Table 8's protocol.

    Each repeat splits the points at random 60:20:20 into train / validation / test, picks k
    from ``k_values`` by validation accuracy (k-NN on the training points; ties: the smaller
    k) and reports the test accuracy of that k-NN on the training points. Euclidean distance,
    majority vote (vote ties: the lower class, scikit-learn's rule). Exact, by sorted
    distances to every training point: O(n^2) time, blocks of O(n) memory (Table 8 has
    n = 100).

    Parameters
    ----------
    Z : array-like of float, shape (n, d)
        The embedding (d = 2 in Table 8) of the points, e.g. of :func:`table8_points`.
    labels : array-like of int, shape (n,)
    k_values : sequence of int
        Candidates; those above the training-set size are skipped.
    n_repeats : int
    seed : int or numpy.random.Generator
    ratios : (float, float, float)
        Train, validation, test shares (they sum to 1).

    Returns
    -------
    KnnScores
    """
    Z = _check_embedding(Z)
    y = np.asarray(labels)
    n = Z.shape[0]
    if y.ndim != 1 or y.shape[0] != n or y.dtype.kind not in "iu":
        raise ValidationError(
            f"labels: expected {n} integer class labels, got dtype {y.dtype} shape {y.shape}; "
            f"pass one class per embedded point"
        )
    ratios = tuple(float(r) for r in ratios)
    if len(ratios) != 3 or min(ratios) <= 0 or abs(sum(ratios) - 1.0) > 1e-9:
        raise ValidationError(
            f"ratios: expected three positive shares summing to 1, got {fmt_value(ratios)}; pass "
            f"ratios=(0.6, 0.2, 0.2)"
        )
    n_train = int(round(ratios[0] * n))
    n_val = int(round(ratios[1] * n))
    if n_train < 1 or n_val < 1 or n - n_train - n_val < 1:
        raise ValidationError(
            f"Z: {n} points leave an empty train, validation or test set at ratios {ratios}; "
            f"pass at least 5 points"
        )
    ks = sorted(
        {check_count("k_values", int(k) if isinstance(k, np.integer) else k, 1) for k in k_values}
    )
    ks = [k for k in ks if k <= n_train]
    if not ks:
        raise ValidationError(
            f"k_values: none is <= the {n_train} training points; pass smaller k (e.g. (1, 3, 5))"
        )
    n_repeats = check_count("n_repeats", n_repeats, 1, hint="pass e.g. n_repeats=20")
    classes, codes = np.unique(y, return_inverse=True)
    rng = np.random.default_rng(seed)
    acc = np.empty(n_repeats)
    chosen = np.empty(n_repeats, dtype=np.int64)
    val = np.empty(n_repeats)
    kmax = ks[-1]
    for r in range(n_repeats):
        perm = rng.permutation(n)
        tr, va, te = perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]
        votes_va = _knn_votes(Z[tr], codes[tr], Z[va], kmax, classes.shape[0])
        va_acc = [np.mean(votes_va[:, k - 1].argmax(axis=1) == codes[va]) for k in ks]
        best_k = ks[int(np.argmax(va_acc))]  # the first best: the smaller k
        val[r] = float(max(va_acc))
        votes_te = _knn_votes(Z[tr], codes[tr], Z[te], best_k, classes.shape[0])
        acc[r] = float(np.mean(votes_te[:, best_k - 1].argmax(axis=1) == codes[te]))
        chosen[r] = best_k
    return KnnScores(acc, chosen, val)


def _knn_votes(Zr, yr, Zq, kmax, n_classes) -> np.ndarray:
    """votes[q, k - 1, c]: class-c points among the k nearest reference rows of query q
    (squared Euclidean distance; equal distances: the earlier reference row), k <= kmax.
    ``votes[:, k - 1].argmax(1)`` is the k-NN vote, ties going to the lower class."""
    out = np.empty((Zq.shape[0], kmax, n_classes), dtype=np.int64)
    block = max(1, _BLOCK_ENTRIES // max(Zr.shape[0], 1))
    sq = np.einsum("ij,ij->i", Zr, Zr)
    for s in range(0, Zq.shape[0], block):
        Q = Zq[s : s + block]
        d = sq[None, :] - 2.0 * (Q @ Zr.T) + np.einsum("ij,ij->i", Q, Q)[:, None]
        near = np.argsort(d, axis=1, kind="stable")[:, :kmax]
        onehot = yr[near][:, :, None] == np.arange(n_classes)[None, None, :]
        np.cumsum(onehot, axis=1, out=out[s : s + block])
    return out
