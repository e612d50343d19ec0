"""scikit-learn estimators of the transductive kernel: :class:`NPKLClustering` and
:class:`NPKLEmbedding`.

Each ``fit`` is the library's own sequence of calls, in the order ``npkl fit`` makes them
(npkl_dist/job/_job.py ``run_fit``): :func:`knn_graph` on X -> ``graph.laplacian(delta)`` ->
the constraints (given index pairs, or :func:`sample_constraints` on partial labels y, -1
unlabelled) -> :meth:`NPKLProblem.build` -> ``fit_bcd`` / ``fit_admm`` / ``fit_simplenpkl``
-> (clustering) ``cluster_kernel``, the job's kernel k-means or PCK-means. New points go
through the out-of-sample extension of bcdkl §III-E (:func:`embed_new_points`). The
estimators hold no numerics of their own: a fit through them equals the calls above
bitwise (tests/estimators/test_transductive.py).

Memory and time (what grows with n points, d features, m pairs, r = rank; no n x n array
anywhere): the fitted estimator keeps the training features (n d), the graph (n k), the
embedding (n r) and the constraints (m); a fit costs what the solver costs
(docs/estimators.md); ``transform`` / ``predict`` of q new points cost a k-nearest-neighbour
query per point plus O(q k r).
"""

from __future__ import annotations

import inspect
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._errors import ValidationError, fmt_value
from ..evaluate import (
    CLUSTER_METHODS,
    choose_normalize,
    cluster_centres,
    cluster_kernel,
    clustering_metrics,
)
from ..graph._graph import knn_graph
from ..job._extend import embed_new_points
from ..problem._constraints import Constraints, sample_constraints
from ..problem._problem import LOSSES, NPKLProblem
from ..solvers.admm._fit import fit_admm
from ..solvers.bcd._fit import fit_bcd
from ..solvers.simplenpkl._fit import fit_simplenpkl

__all__ = ["NPKLClustering", "NPKLEmbedding"]

#: solver name -> (function, name of its iteration cap)
SOLVER_FUNCTIONS = {
    "bcd": (fit_bcd, "max_sweeps"),
    "admm": (fit_admm, "max_iter"),
    "simplenpkl": (fit_simplenpkl, "max_iter"),
}
#: arguments the estimator sets itself; ``solver_options`` may not pass them
_OWN = {"problem", "max_sweeps", "max_iter", "tol", "callback", "resume", "plan", "setup"}


def _bad(est, name, value, expected):
    """The one-line error of a bad constructor argument, in the estimator's own syntax."""
    return ValidationError(f"{type(est).__name__}({name}={fmt_value(value)}): expected {expected}")


def _int_param(est, name, lo, none_ok=False):
    v = getattr(est, name)
    if v is None and none_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, Integral) or v < lo:
        raise _bad(est, name, v, f"an integer >= {lo}" + (" or None" if none_ok else ""))
    return int(v)


def _positive(est, name, none_ok=False):
    v = getattr(est, name)
    if v is None and none_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, Real) or not np.isfinite(v) or v <= 0:
        raise _bad(est, name, v, "a finite number > 0" + (" or None" if none_ok else ""))
    return float(v)


def _choice(est, name, options, none_ok=False):
    v = getattr(est, name)
    if v is None and none_ok:
        return None
    if not isinstance(v, str) or v not in options:
        listed = ", ".join(map(repr, options)) + (" or None" if none_ok else "")
        raise _bad(est, name, v, f"one of {listed}")
    return v


def seed_of(est) -> int:
    """``random_state`` as the non-negative int seed the library takes: an int as given; a
    RandomState (or None: numpy's global one) draws one int."""
    rs = est.random_state
    if isinstance(rs, Integral) and not isinstance(rs, bool):
        if rs < 0:
            raise _bad(est, "random_state", rs, "a non-negative integer, a RandomState or None")
        return int(rs)
    if rs is None or isinstance(rs, np.random.RandomState):
        return int(check_random_state(rs).randint(np.iinfo(np.int32).max))
    raise _bad(est, "random_state", rs, "a non-negative integer, a RandomState or None")


def pair_constraints(pairs, pair_labels, n: int, *, diagonal: bool) -> Constraints:
    """Index pairs (m, 2) over the rows of X and their labels (+1 must-link, -1 cannot-link;
    metric-learn's convention) as :class:`Constraints`."""
    if pair_labels is None:
        raise ValidationError(
            "pair_labels: missing; give one label per row of pairs (+1 must-link, -1 cannot-link)"
        )
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ValidationError(
            f"pairs: expected an integer array of shape (m, 2) (row indices of X), got "
            f"dtype {pairs.dtype} shape {pairs.shape}"
        )
    t = np.asarray(pair_labels)
    if t.shape != (pairs.shape[0],):
        raise ValidationError(
            f"pair_labels: expected shape ({pairs.shape[0]},), one per pair, got {t.shape}"
        )
    return Constraints.from_arrays(pairs[:, 0], pairs[:, 1], t, n, diagonal=diagonal)


def label_codes(y) -> np.ndarray:
    """Partial labels y as the integer codes :func:`sample_constraints` takes: classes
    0..K-1 and -1 for unlabelled (scikit-learn's semi-supervised convention: the value -1
    marks an unlabelled point; any other value is a class)."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValidationError(
            f"y: expected a 1-D array of partial labels (-1 unlabelled), got shape {y.shape}"
        )
    if y.dtype.kind in "iuf":
        if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
            raise ValidationError("y: holds NaN or inf; give class labels, -1 for unlabelled")
        unlabelled = y == -1
    else:
        unlabelled = np.zeros(y.shape, dtype=bool)
    codes = np.full(y.shape, -1, dtype=np.int64)
    if (~unlabelled).any():
        _, codes[~unlabelled] = np.unique(y[~unlabelled], return_inverse=True)
    return codes


class _NPKLBase(BaseEstimator):
    """The transductive fit shared by the clustering and the embedding estimators."""

    def _checked(self) -> dict:
        """The constructor arguments validated (scikit-learn checks them in ``fit``)."""
        solver = _choice(self, "solver", tuple(SOLVER_FUNCTIONS))
        opts = self.solver_options
        if opts is None:
            opts = {}
        if not isinstance(opts, dict):
            raise _bad(self, "solver_options", opts, f"a dict of {solver}'s keyword arguments")
        fit, cap = SOLVER_FUNCTIONS[solver]
        params = inspect.signature(fit).parameters
        allowed = sorted(p for p in params if p not in _OWN)
        for key in opts:
            if key not in params or key in _OWN:
                raise _bad(
                    self,
                    "solver_options",
                    opts,
                    f"keywords of fit_{solver} other than the estimator's own; {key!r} is "
                    f"not one: use {', '.join(allowed)}",
                )
        dtype = self.dtype
        if dtype not in ("float32", "float64", np.float32, np.float64):
            raise _bad(self, "dtype", dtype, "'float32' or 'float64'")
        return {
            "solver": solver,
            "fit": fit,
            "cap": cap,
            "options": dict(opts),
            "loss": _choice(self, "loss", LOSSES),
            "gamma": _positive(self, "gamma"),
            "bound": _positive(self, "bound"),
            "delta": _positive(self, "delta"),
            "tol": _positive(self, "tol", none_ok=True),
            "rank": _int_param(self, "rank", 1, none_ok=True),
            "n_neighbors": _int_param(self, "n_neighbors", 1),
            "n_must": _int_param(self, "n_must", 0, none_ok=True),
            "n_cannot": _int_param(self, "n_cannot", 0, none_ok=True),
            "max_iter": _int_param(self, "max_iter", 1, none_ok=True),
            "weighting": _choice(self, "weighting", ("gaussian", "mutual")),
            "dtype": np.dtype(dtype).name,
            "seed": seed_of(self),
        }

    def _fit(self, X, y, pairs, pair_labels):
        p = self._checked()
        X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        n = X.shape[0]
        if p["n_neighbors"] >= n:
            raise _bad(
                self, "n_neighbors", p["n_neighbors"], f"at most n_samples - 1 = {n - 1} here"
            )
        diagonal = p["solver"] == "admm"  # KL-ADMM's protocol, as npkl fit's default
        if pairs is not None:
            if y is not None:
                raise ValidationError(
                    "fit: give either y (partial labels, pairs sampled from them) or pairs= "
                    "and pair_labels=, not both"
                )
            cons = pair_constraints(pairs, pair_labels, n, diagonal=diagonal)
        elif pair_labels is not None:
            raise ValidationError("pairs: missing; pair_labels= needs pairs= (m, 2) indices")
        elif y is not None:
            codes = label_codes(y)
            if codes.shape[0] != n:
                raise ValidationError(
                    f"y: {codes.shape[0]} labels for {n} rows of X; give one per row "
                    f"(-1 for unlabelled)"
                )
            cons = sample_constraints(
                codes, p["n_must"], p["n_cannot"], seed=p["seed"], diagonal=diagonal
            )
        else:
            cons = Constraints.from_arrays([], [], [], n, diagonal=diagonal)
        graph = knn_graph(X, p["n_neighbors"], weighting=p["weighting"], seed=p["seed"])
        problem = NPKLProblem.build(
            graph.laplacian(p["delta"], dtype=p["dtype"]),
            cons,
            loss=p["loss"],
            gamma=p["gamma"],
            rank=p["rank"],
            bound=p["bound"],
            seed=p["seed"],
            dtype=p["dtype"],
        )
        options = dict(p["options"])
        if p["max_iter"] is not None:
            options[p["cap"]] = p["max_iter"]
        if p["tol"] is not None:
            options["tol"] = p["tol"]
        result = p["fit"](problem, **options)
        self.X_fit_ = X
        self.graph_ = graph
        self.constraints_ = cons
        self.result_ = result
        self.embedding_ = result.V
        self.n_iter_ = int(getattr(result, "n_sweeps", getattr(result, "n_iter", 0)))
        self.objective_ = float(problem.objective(result.V))
        self._params = p
        return p

    def _extend(self, X, **kwargs):
        check_is_fitted(self, "embedding_")
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return embed_new_points(
            self.X_fit_,
            self.embedding_,
            self.graph_,
            X,
            k=self._params["n_neighbors"],
            delta=self._params["delta"],
            seed=self._params["seed"],
            **kwargs,
        )


_PARAMS_DOC = """
    solver : {'bcd', 'admm', 'simplenpkl'}, default='bcd'
        The learning algorithm: block coordinate descent (bcdkl-tnnls2015), KL-ADMM
        (kl-admm-ijcai2013; fits K_ii = 1 too) or SimpleNPKL (simplenpkl-jmlr2011).
    loss : {'hinge', 'sqhinge', 'square', 'linear'}, default='square'
        The loss on the constraints (SimpleNPKL: its own set; see docs/algorithms.md).
    gamma : float, default=1.0
        Weight of the constraints against the manifold term.
    rank : int or None, default=None
        r, the columns of the embedding; None: Pataki's bound from the pair count.
    bound : float, default=1.0
        The linear loss's row-norm bound b.
    n_neighbors : int, default=5
        k of the kNN graph.
    weighting : {'gaussian', 'mutual'}, default='gaussian'
        The kNN graph's weights (:func:`npkl_dist.knn_graph`).
    delta : float, default=1e-3
        L = (1 + delta) I - D^-1/2 S D^-1/2.
    n_must, n_cannot : int or None, default=None
        Pairs sampled from the partial labels y (0.6 n each when None; the papers'
        protocol, :func:`npkl_dist.sample_constraints`).
    max_iter : int or None, default=None
        The solver's iteration cap (fit_bcd's max_sweeps, the others' max_iter); None: its
        default.
    tol : float or None, default=None
        The solver's stopping tolerance; None: its default.
    dtype : {'float64', 'float32'}, default='float64'
    random_state : int, RandomState or None, default=0
        Seeds the graph, the pair sampling, the start and the clustering.
    solver_options : dict or None, default=None
        Further keyword arguments of ``fit_<solver>`` (e.g. ``{'method': 'sweeps'}`` for
        BCD, ``{'rho': 50.0}`` for ADMM)."""


class NPKLClustering(ClusterMixin, _NPKLBase):
    __doc__ = (
        """Cluster with a kernel learned from pairwise constraints and the data manifold.

    ``fit(X, y)`` with partial labels y (-1 unlabelled; pairs sampled from the labelled
    points by the papers' protocol) or ``fit(X, pairs=..., pair_labels=...)`` with index
    pairs; then ``labels_``: PCK-means (constrained k-means) on the learned embedding when
    there are pairs, kernel k-means otherwise (as ``npkl fit``). ``predict`` places new
    points by the out-of-sample extension and the nearest centre.

    Parameters
    ----------
    n_clusters : int, default=8"""
        + _PARAMS_DOC
        + """
    cluster_method : {'pck', 'kmeans'} or None, default=None
        None: 'pck' when there are pairs, else 'kmeans'.
    normalize : bool or None, default=None
        Cluster the unit rows (the cosine-normalised kernel); None: when the points in no
        pair got short rows (docs/decisions/normalised-kernel-clustering.md).

    Attributes
    ----------
    labels_ : ndarray of int64, shape (n_samples,)
    cluster_centers_ : ndarray, shape (n_clusters, rank)
        Means of the clusters' rows of ``embedding_`` (of the unit rows with normalize).
    embedding_ : ndarray, shape (n_samples, rank)
        V, the learned kernel being V V'.
    constraints_ : Constraints
    graph_ : Graph
    result_ : the solver's result (FitResult, ADMMResult or SimpleNPKLResult)
    objective_ : float
    n_iter_ : int
    n_features_in_ : int
    """
    )

    def __init__(
        self,
        n_clusters=8,
        *,
        solver="bcd",
        loss="square",
        gamma=1.0,
        rank=None,
        bound=1.0,
        n_neighbors=5,
        weighting="gaussian",
        delta=1e-3,
        n_must=None,
        n_cannot=None,
        max_iter=None,
        tol=None,
        cluster_method=None,
        normalize=None,
        dtype="float64",
        random_state=0,
        solver_options=None,
    ):
        self.n_clusters = n_clusters
        self.solver = solver
        self.loss = loss
        self.gamma = gamma
        self.rank = rank
        self.bound = bound
        self.n_neighbors = n_neighbors
        self.weighting = weighting
        self.delta = delta
        self.n_must = n_must
        self.n_cannot = n_cannot
        self.max_iter = max_iter
        self.tol = tol
        self.cluster_method = cluster_method
        self.normalize = normalize
        self.dtype = dtype
        self.random_state = random_state
        self.solver_options = solver_options

    def fit(self, X, y=None, *, pairs=None, pair_labels=None):
        """Learn the kernel and cluster.

        Parameters
        ----------
        X : array-like, shape (n_samples, n_features)
        y : array-like, shape (n_samples,), optional
            Partial labels, -1 for unlabelled points.
        pairs : array of int, shape (m, 2), optional
            Row indices of X; instead of y.
        pair_labels : array, shape (m,), optional
            +1 must-link, -1 cannot-link (or 'must' / 'cannot').

        Returns
        -------
        self
        """
        k = _int_param(self, "n_clusters", 1)
        method = _choice(self, "cluster_method", CLUSTER_METHODS, none_ok=True)
        if self.normalize is not None and not isinstance(self.normalize, (bool, np.bool_)):
            raise _bad(self, "normalize", self.normalize, "True, False or None")
        n = np.shape(X)[0] if hasattr(X, "__len__") else None
        if n is not None and k > n:
            raise _bad(self, "n_clusters", k, f"at most n_samples = {n}")
        p = self._fit(X, y, pairs, pair_labels)
        V, cons = self.embedding_, self.constraints_
        unit = choose_normalize(self.normalize, cons, V)
        self.labels_ = cluster_kernel(
            V,
            k,
            seed=p["seed"],
            normalize=unit,
            short_rows_of=cons,
            constraints=cons,
            solver=p["solver"],
            method=method,
        )
        self.normalize_ = unit
        self.cluster_centers_ = cluster_centres(V, self.labels_, normalize=unit)
        return self

    def predict(self, X):
        """The cluster of each new point: its row by the out-of-sample extension, then the
        nearest of ``cluster_centers_``; exact copies of training rows get their training
        row's label, and points far from the training data are counted in a warning
        (:func:`npkl_dist.embed_new_points`)."""
        check_is_fitted(self, "labels_")
        ext = self._extend(
            X, labels=self.labels_, centres=self.cluster_centers_, normalize=self.normalize_
        )
        return ext.clusters

    def score(self, X, y):
        """Pairwise (Rand) accuracy of ``predict(X)`` against the labels y on the points
        labelled in y (-1: unlabelled, left out); the papers' clustering measure."""
        codes = label_codes(y)
        pred = self.predict(X)
        if codes.shape[0] != pred.shape[0]:
            raise ValidationError(f"y: {codes.shape[0]} labels for {pred.shape[0]} rows of X")
        keep = codes >= 0
        if not keep.any():
            raise ValidationError("y: no labelled point (all -1); nothing to score against")
        return float(clustering_metrics(codes[keep], pred[keep])["rand_accuracy"])


class NPKLEmbedding(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _NPKLBase):
    __doc__ = (
        """Embed points with a kernel learned from pairwise constraints and the data manifold.

    ``fit_transform`` returns V (the training points' rows; the kernel is V V'), and
    ``transform`` embeds new points by the out-of-sample extension of bcdkl §III-E (exact
    copies of training rows get their training row; :func:`npkl_dist.embed_new_points`).

    Parameters
    ----------"""
        + _PARAMS_DOC
        + """

    Attributes
    ----------
    embedding_ : ndarray, shape (n_samples, rank)
    constraints_ : Constraints
    graph_ : Graph
    result_ : the solver's result
    objective_ : float
    n_iter_ : int
    n_features_in_ : int
    """
    )

    def __init__(
        self,
        *,
        solver="bcd",
        loss="square",
        gamma=1.0,
        rank=None,
        bound=1.0,
        n_neighbors=5,
        weighting="gaussian",
        delta=1e-3,
        n_must=None,
        n_cannot=None,
        max_iter=None,
        tol=None,
        dtype="float64",
        random_state=0,
        solver_options=None,
    ):
        self.solver = solver
        self.loss = loss
        self.gamma = gamma
        self.rank = rank
        self.bound = bound
        self.n_neighbors = n_neighbors
        self.weighting = weighting
        self.delta = delta
        self.n_must = n_must
        self.n_cannot = n_cannot
        self.max_iter = max_iter
        self.tol = tol
        self.dtype = dtype
        self.random_state = random_state
        self.solver_options = solver_options

    def fit(self, X, y=None, *, pairs=None, pair_labels=None):
        """Learn the kernel (parameters as :meth:`NPKLClustering.fit`). Returns self."""
        self._fit(X, y, pairs, pair_labels)
        self._n_features_out = self.embedding_.shape[1]
        return self

    def fit_transform(self, X, y=None, *, pairs=None, pair_labels=None):
        """Learn the kernel and return V, shape (n_samples, rank)."""
        return self.fit(X, y, pairs=pairs, pair_labels=pair_labels).embedding_

    def transform(self, X):
        """Rows of V for new points, shape (n, rank), by the out-of-sample extension."""
        return self._extend(X).V
