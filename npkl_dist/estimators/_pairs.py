"""The inductive kernel as a learner supervised by pairs, in metric-learn's convention.

metric-learn (scikit-learn-contrib/metric-learn, ``base_metric.py``) fixed how learners of
pairs look in scikit-learn: ``fit(pairs, y)`` with pairs as an (m, 2, d) array of feature
rows, or (m, 2) indices plus a ``preprocessor`` (the array the indices point into, or a
callable returning the rows of given indices); y in {+1 (similar), -1 (dissimilar)};
``pair_distance`` / ``pair_score`` (= -distance), ``get_metric`` (a callable distance on two
1-D points), ``transform`` (the embedding), ``decision_function`` (= ``pair_score``),
``predict`` (+1 when the distance is at most ``threshold_``), ``calibrate_threshold`` and
``score`` (ROC AUC). :class:`InductiveKernel` follows it over :func:`npkl_dist.fit_inductive`
(inductive-lt-kernel-nips2010 §3.2): the fitted model is ``model_`` (an
``npkl_dist.InductiveKernel``), and the distance is the learned kernel's,
d_W(x, y) = sqrt(kappa_W(x,x) + kappa_W(y,y) - 2 kappa_W(x,y)).

Memory and time: the model holds r' x r' matrices and the r landmarks (r d); a fit costs the
landmark choice, the kernel rows of the points in pairs (O(p r d) for p such points) and the
r' x r' solve (docs/estimators.md); the training features are not kept, only the pairs'
(for ``partial_fit``: the rows of every pair seen so far, O(p d)).
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.metrics import roc_auc_score
from sklearn.utils.validation import check_is_fitted

from .._errors import ValidationError
from ..problem._constraints import Constraints
from ..solvers.inductive import fit_inductive
from ..solvers.inductive._fit import BASES, REGULARIZERS
from ._transductive import _bad, _choice, _int_param, _positive, seed_of

__all__ = ["InductiveKernel", "pair_indices"]

STRATEGIES = ("accuracy", "f_beta", "max_tpr", "max_tnr")


def pair_indices(pairs, preprocessor, *, name="pairs"):
    """Pairs as (X, idx): the feature rows X of the points they name and an (m, 2) index
    array into X. (m, 2, d) arrays: X holds the distinct rows (so a point in several pairs
    is one point); (m, 2) indices: X is ``preprocessor`` (an array) or its rows for the
    distinct indices (a callable)."""
    pairs = np.asarray(pairs)
    if pairs.ndim == 3 and pairs.shape[1] == 2:
        if pairs.dtype.kind not in "iuf":
            raise ValidationError(
                f"{name}: expected numeric feature rows, got dtype {pairs.dtype}"
            )
        rows = pairs.reshape(-1, pairs.shape[2]).astype(np.float64)
        if not np.all(np.isfinite(rows)):
            raise ValidationError(f"{name}: holds NaN or inf; give finite features")
        X, inverse = np.unique(rows, axis=0, return_inverse=True)
        return X, inverse.reshape(-1, 2)
    if pairs.ndim == 2 and pairs.shape[1] == 2 and pairs.dtype.kind in "iu":
        if preprocessor is None:
            raise ValidationError(
                f"{name}: (m, 2) indices need preprocessor= (the array they index, or a "
                f"callable returning rows); else pass (m, 2, n_features) feature rows"
            )
        if callable(preprocessor):
            uniq, inverse = np.unique(pairs, return_inverse=True)
            X = np.asarray(preprocessor(uniq), dtype=np.float64)
            if X.ndim != 2 or X.shape[0] != uniq.size:
                raise ValidationError(
                    f"preprocessor: returned shape {X.shape} for {uniq.size} indices; it must "
                    f"return one feature row per index"
                )
            return X, inverse.reshape(-1, 2)
        X = np.asarray(preprocessor, dtype=np.float64)
        if X.ndim != 2:
            raise ValidationError(
                f"preprocessor: expected a 2-D array (points x features) or a callable, got "
                f"shape {X.shape}"
            )
        if pairs.size and (pairs.min() < 0 or pairs.max() >= X.shape[0]):
            raise ValidationError(
                f"{name}: indices must be in [0, {X.shape[0]}) (the preprocessor's rows), got "
                f"[{pairs.min()}, {pairs.max()}]"
            )
        return X, pairs.astype(np.int64)
    raise ValidationError(
        f"{name}: expected (m, 2, n_features) feature rows or (m, 2) integer indices with a "
        f"preprocessor, got dtype {pairs.dtype} shape {pairs.shape}"
    )


def _pair_labels(y, m):
    y = np.asarray(y)
    if y.shape != (m,):
        raise ValidationError(f"y: expected shape ({m},), one label per pair, got {y.shape}")
    if y.dtype.kind not in "iuf" or not np.all(np.isin(y, (-1, 1))):
        bad = np.unique(y[~np.isin(y, (-1, 1))])[:5] if y.dtype.kind in "iuf" else y[:5]
        raise ValidationError(
            f"y: pair labels must be +1 (similar) or -1 (dissimilar), got {bad.tolist()}"
        )
    return y.astype(np.int64)


class InductiveKernel(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """The inductive kernel kappa_W = alpha kappa + psi' L psi learned from pairs, as a
    scikit-learn estimator with metric-learn's pairs convention.

    Parameters
    ----------
    regularizer : {'logdet', 'frobenius', 'trace'}, default='logdet'
    kernel : {'rbf', 'linear'}, default='rbf'
    bandwidth : float, 'median' or 'knn', default='median'
    landmarks : int or None, default=None
    basis : {'kmeans++', 'kmeans', 'random', 'clusters'}, default='kmeans++'
    gamma : float, default=1.0
    bounds : (u, l) or None, default=None
    tau : float, default=1e-3
    max_iter : int or None, default=None
    tol : float or None, default=None
    scale : {'none', 'standard'}, default='none'
    preprocessor : array (n, d), callable or None, default=None
        What (m, 2) index pairs (and 1-D index arrays given to ``transform``) point into.
    random_state : int, RandomState or None, default=0

    (:func:`npkl_dist.fit_inductive` documents each.)

    Attributes
    ----------
    model_ : npkl_dist.InductiveKernel
        The fitted kernel (``transform``, ``kernel``, ``save`` ...).
    threshold_ : float
        ``predict`` says similar (+1) when ``pair_distance`` <= threshold_; calibrated on
        the training pairs for accuracy, as metric-learn does.
    classes_ : ndarray [-1, 1]
    n_features_in_ : int
    """

    def __init__(
        self,
        regularizer="logdet",
        *,
        kernel="rbf",
        bandwidth="median",
        landmarks=None,
        basis="kmeans++",
        gamma=1.0,
        bounds=None,
        tau=1e-3,
        max_iter=None,
        tol=None,
        scale="none",
        preprocessor=None,
        random_state=0,
    ):
        self.regularizer = regularizer
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.landmarks = landmarks
        self.basis = basis
        self.gamma = gamma
        self.bounds = bounds
        self.tau = tau
        self.max_iter = max_iter
        self.tol = tol
        self.scale = scale
        self.preprocessor = preprocessor
        self.random_state = random_state

    # -- fitting ---------------------------------------------------------------------
    def _options(self) -> dict:
        bw = self.bandwidth
        if not (isinstance(bw, str) and bw in ("median", "knn")):
            if isinstance(bw, bool) or not isinstance(bw, Real) or not bw > 0:
                raise _bad(self, "bandwidth", bw, "a number > 0, 'median' or 'knn'")
        return {
            "regularizer": _choice(self, "regularizer", REGULARIZERS),
            "kernel": _choice(self, "kernel", ("rbf", "linear")),
            "bandwidth": bw,
            "landmarks": _int_param(self, "landmarks", 1, none_ok=True),
            "basis": _choice(self, "basis", BASES),
            "gamma": _positive(self, "gamma"),
            "bounds": self.bounds,
            "tau": _positive(self, "tau"),
            "max_iter": _int_param(self, "max_iter", 1, none_ok=True),
            "tol": _positive(self, "tol", none_ok=True),
            "scale": _choice(self, "scale", ("none", "standard")),
            "seed": seed_of(self),
        }

    def fit(self, pairs, y):
        """Learn the kernel from pairs; the threshold is then calibrated on them for
        accuracy (as metric-learn's learners of pairs do).

        Parameters
        ----------
        pairs : array, shape (m, 2, n_features), or (m, 2) indices into ``preprocessor``
        y : array, shape (m,)
            +1 similar (must-link), -1 dissimilar (cannot-link).

        Returns
        -------
        self
        """
        opts = self._options()
        X, idx = pair_indices(pairs, self.preprocessor)
        y = _pair_labels(y, idx.shape[0])
        landmarks = opts.pop("landmarks")
        if landmarks is not None:
            landmarks = min(landmarks, X.shape[0])
        cons = Constraints.from_arrays(idx[:, 0], idx[:, 1], y, X.shape[0])
        self.model_ = fit_inductive(X, cons, landmarks=landmarks, **opts)
        self.n_features_in_ = X.shape[1]
        self._n_features_out = self.model_.dim
        self.classes_ = np.array([-1, 1])
        self._seen = (np.asarray(pairs), y)
        dist = self._distance(X[idx[:, 0]], X[idx[:, 1]])
        self.threshold_ = _calibrate(-dist, y, "accuracy", None, 1.0)
        return self

    def partial_fit(self, pairs, y):
        """Add a batch of pairs: the model becomes ``fit`` on every pair seen so far (their
        union, in the order given; bitwise equal to that fit). Each call refits on all of
        them: the solver is not warm-started, so a call costs a fit on the pairs seen."""
        pairs = np.asarray(pairs)
        y = _pair_labels(y, pairs.shape[0] if pairs.ndim else 0)
        if hasattr(self, "_seen"):
            old, y_old = self._seen
            if pairs.ndim != old.ndim or pairs.shape[1:] != old.shape[1:]:
                raise ValidationError(
                    f"pairs: shape {pairs.shape} does not continue the pairs seen so far "
                    f"(shape {old.shape}); give pairs in the same form (m, "
                    f"{', '.join(map(str, old.shape[1:]))})"
                )
            pairs = np.concatenate([old, pairs])
            y = np.concatenate([y_old, y])
        return self.fit(pairs, y)

    # -- using the kernel ------------------------------------------------------------------
    def _distance(self, A, B):
        return np.sqrt(np.maximum(self.model_.pair_distance(A, B), 0.0))

    def _rows(self, X, name="X"):
        X = np.asarray(X)
        if X.ndim == 1 and X.dtype.kind in "iu" and self.preprocessor is not None:
            rows, idx = pair_indices(np.stack([X, X], axis=1), self.preprocessor, name=name)
            return rows[idx[:, 0]]
        if X.ndim != 2:
            raise ValidationError(
                f"{name}: expected a 2-D array (points x features), or 1-D indices with a "
                f"preprocessor, got shape {X.shape}"
            )
        if X.shape[1] != self.n_features_in_:
            raise ValidationError(
                f"{name}: X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )
        return X

    def transform(self, X):
        """z(X), shape (n, dim): z(x)'z(y) = kappa_W(x, y) up to the base kernel's part
        (``npkl_dist.InductiveKernel.transform``)."""
        check_is_fitted(self, "model_")
        return self.model_.transform(self._rows(X))

    def pair_distance(self, pairs):
        """The learned distance of each pair, d_W(x, y), shape (m,)."""
        check_is_fitted(self, "model_")
        X, idx = pair_indices(pairs, self.preprocessor)
        self._rows(X, "pairs")
        return self._distance(X[idx[:, 0]], X[idx[:, 1]])

    def pair_score(self, pairs):
        """-d_W(x, y): higher for more similar pairs."""
        return -self.pair_distance(pairs)

    def decision_function(self, pairs):
        """= :meth:`pair_score` (metric-learn's convention)."""
        return self.pair_score(pairs)

    def predict(self, pairs):
        """+1 (similar) where ``pair_distance`` <= ``threshold_``, else -1."""
        check_is_fitted(self, "threshold_")
        return np.where(self.pair_distance(pairs) <= self.threshold_, 1, -1)

    def score(self, pairs, y):
        """ROC AUC of :meth:`decision_function` against the pair labels y (+1 / -1)."""
        d = self.decision_function(pairs)
        return float(roc_auc_score(_pair_labels(y, d.shape[0]), d))

    def get_metric(self):
        """A function ``metric(u, v)`` of two 1-D feature rows returning d_W(u, v): usable as
        ``KNeighborsClassifier(metric=est.get_metric())`` (it calls it once per pair)."""
        check_is_fitted(self, "model_")

        def metric(u, v):
            u = np.asarray(u, dtype=np.float64).reshape(1, -1)
            v = np.asarray(v, dtype=np.float64).reshape(1, -1)
            return float(self._distance(u, v)[0])

        return metric

    def set_threshold(self, threshold):
        """Set ``threshold_`` (a distance) by hand. Returns self."""
        if isinstance(threshold, bool) or not isinstance(threshold, Real):
            raise ValidationError(f"threshold: expected a number, got {threshold!r}")
        self.threshold_ = float(threshold)
        return self

    def calibrate_threshold(
        self, pairs_valid, y_valid, strategy="accuracy", min_rate=None, beta=1.0
    ):
        """Choose ``threshold_`` on validation pairs (metric-learn's strategies): 'accuracy'
        (the most pairs right), 'f_beta' (the best F-beta of the similar class), 'max_tpr'
        (the most similar pairs found with a true-negative rate >= min_rate), 'max_tnr' (the
        most dissimilar pairs found with a true-positive rate >= min_rate). Returns self."""
        check_is_fitted(self, "model_")
        if strategy not in STRATEGIES:
            raise ValidationError(
                f"strategy: {strategy!r} is not one of {', '.join(map(repr, STRATEGIES))}"
            )
        if strategy in ("max_tpr", "max_tnr"):
            if (
                isinstance(min_rate, bool)
                or not isinstance(min_rate, Real)
                or not (0 <= min_rate <= 1)
            ):
                raise ValidationError(
                    f"min_rate: strategy={strategy!r} needs a rate in [0, 1], got {min_rate!r}"
                )
        if strategy == "f_beta" and (
            isinstance(beta, bool) or not isinstance(beta, Real) or not beta > 0
        ):
            raise ValidationError(f"beta: expected a number > 0, got {beta!r}")
        scores = self.decision_function(pairs_valid)
        y = _pair_labels(y_valid, scores.shape[0])
        self.threshold_ = _calibrate(scores, y, strategy, min_rate, beta)
        return self


def _calibrate(scores, y, strategy, min_rate, beta) -> float:
    """The distance threshold (-score) a strategy picks; a pair is accepted (similar) when
    its score is at least the threshold's score."""
    order = np.argsort(-scores, kind="stable")
    s = scores[order]
    pos = (y[order] == 1).astype(np.float64)
    # candidate cuts: accept the first j pairs (j = 0..m); only cuts between distinct scores
    tp = np.concatenate([[0.0], np.cumsum(pos)])
    fp = np.concatenate([[0.0], np.cumsum(1.0 - pos)])
    P, N = tp[-1], fp[-1]
    cut = np.concatenate([np.flatnonzero(np.diff(s) != 0) + 1, [s.size]])
    cut = np.concatenate([[0], cut])
    tp, fp = tp[cut], fp[cut]
    if strategy == "accuracy":
        value = tp + (N - fp)
    elif strategy == "f_beta":
        with np.errstate(divide="ignore", invalid="ignore"):
            precision = tp / (tp + fp)
            recall = tp / P if P else np.zeros_like(tp)
            value = (1 + beta**2) * precision * recall / (beta**2 * precision + recall)
        value[~np.isfinite(value)] = 0.0
    else:
        tpr = tp / P if P else np.zeros_like(tp)
        tnr = 1.0 - (fp / N if N else np.zeros_like(fp))
        ok = (tnr >= min_rate) if strategy == "max_tpr" else (tpr >= min_rate)
        value = np.where(ok, tpr if strategy == "max_tpr" else tnr, -np.inf)
    j = int(cut[int(np.argmax(value))])
    if j == 0:  # accept nothing: a threshold below every distance
        return float(-s[0] - 1.0) if s.size else 0.0
    return float(-s[j - 1])
