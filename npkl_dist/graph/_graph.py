"""Manifold graphs: kNN graphs from features, given graphs from edge lists, the Laplacian.

L = (1 + delta) I - D^{-1/2} S D^{-1/2}   (bcdkl-tnnls2015 eq. 1), always sparse CSR.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from numbers import Real

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from sklearn.neighbors import NearestNeighbors

from .._errors import GraphError, GraphWarning, ValidationError, fix, fmt_value

__all__ = ["Graph", "knn_graph", "graph_from_edges", "laplacian", "EXACT_KNN_MAX_POINTS"]

#: Above this many points the kNN graph is built approximately with pynndescent; at or
#: below it, exactly (scikit-learn's tree / brute-force search): pynndescent's numba
#: compilation per process is dearer than an exact search at this size
#: (docs/decisions/pipeline-orchestration.md).
EXACT_KNN_MAX_POINTS = 50_000

#: sigma = half the mean distance from each point to its SIGMA_NEIGHBOURS nearest neighbours
SIGMA_NEIGHBOURS = 10


@dataclass(frozen=True)
class Graph:
    """A symmetric sparse similarity graph S with its diagnostics.

    Attributes
    ----------
    S : scipy.sparse.csr_matrix, shape (n, n)
        Symmetric, non-negative, zero diagonal.
    n_components : int
    n_isolated : int
    sigma : float or None
        Gaussian bandwidth, when the weights are Gaussian.
    length : float or None
        The neighbourhood length of a kNN graph: half the mean distance of the points to their
        10 nearest neighbours (sigma, for Gaussian weights); the out-of-sample extension
        flags new points farther than a few lengths from the data.
    """

    S: sp.csr_matrix
    n_components: int
    n_isolated: int
    sigma: float | None = None
    length: float | None = None

    @property
    def n_points(self) -> int:
        return int(self.S.shape[0])

    def laplacian(self, delta: float = 1e-3, dtype=np.float64) -> sp.csr_matrix:
        return laplacian(self.S, delta=delta, dtype=dtype)


def _finish(S: sp.spmatrix, sigma=None, warn=True, given=False, length=None, advice=None):
    """The Graph of the symmetric weights S; warns on several components or isolated points,
    with ``advice(n_components, isolated_rows)`` (a kNN graph's, checked), or the advice for
    a given edge list (``given``)."""
    S = sp.csr_matrix(S)
    S.setdiag(0)
    S.eliminate_zeros()
    S.sort_indices()
    n_comp, _ = connected_components(S, directed=False)
    deg = np.diff(S.indptr)
    n_iso = int(np.count_nonzero(deg == 0))
    if warn and (n_comp > 1 or n_iso):
        if given:
            advice = (
                "The edge list leaves them apart: add edges between the components, "
                "and to the isolated nodes (nodes up to n_points - 1 that no edge "
                "names, or that had only self-loops), or drop those nodes"
            )
        elif advice is not None:
            advice = advice(int(n_comp), np.flatnonzero(deg == 0))
        else:
            advice = "A larger knn joins nearby components"
        warnings.warn(
            f"graph: {n_comp} connected components and {n_iso} isolated point(s); kernel "
            f"learning still runs (L stays positive definite through delta) but constraints "
            f"cannot propagate between components. {advice}",
            GraphWarning,
            stacklevel=3,
        )
    return Graph(S, int(n_comp), n_iso, sigma, length)


def _check_features(X) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValidationError(
            f"X: expected a 2-D array (n_samples, n_features), got shape {X.shape}; reshape "
            f"a single feature with X.reshape(-1, 1)"
        )
    if X.dtype.kind not in "fiu":
        raise ValidationError(f"X: expected numeric features, got dtype {X.dtype}")
    X = X.astype(np.float64, copy=False) if X.dtype.kind != "f" else X
    if not np.all(np.isfinite(X)):
        rows = np.flatnonzero(~np.all(np.isfinite(X), axis=1))
        raise ValidationError(
            f"X: {rows.size} row(s) hold NaN or inf, e.g. rows {rows[:10].tolist()}; impute or "
            f"drop them before learning a kernel"
        )
    return X


#: Feature scalings the jobs apply before the kNN graph (``[graph] scale``, ``--scale``).
SCALES = ("none", "standard")

#: Warn when the widest column's standard deviation is this many times the median column's.
SCALE_SPREAD_WARN = 100.0

_SCALE_ROWS = 65536  # rows per pass of the column moments: no n x d float64 temporary


def _column_moments(X) -> tuple[np.ndarray, np.ndarray]:
    """Column means and (population) standard deviations of X (n x d) in float64, one row
    block at a time: each block's mean and squared deviations about it, merged exactly as in
    Chan, Golub & LeVeque's pairwise update (no cancellation for columns far from 0, no
    n x d float64 temporary)."""
    n, d = X.shape
    mean = np.zeros(d)
    m2 = np.zeros(d)
    seen = 0
    for a in range(0, n, _SCALE_ROWS):
        B = np.asarray(X[a : a + _SCALE_ROWS], dtype=np.float64)
        nb = B.shape[0]
        mb = B.mean(axis=0)
        B = B - mb
        m2b = np.einsum("ij,ij->j", B, B)
        delta = mb - mean
        total = seen + nb
        mean += delta * (nb / total)
        m2 += m2b + delta * delta * (seen * nb / total)
        seen = total
    return mean, np.sqrt(m2 / n)


def feature_scale(X, scale: str = "none") -> dict | None:
    """The parameters of feature scaling ``scale`` on X (n x d), JSON-ready, or None for
    ``'none'``. ``'standard'``: each column centred and divided by its standard deviation
    (constant columns only centred), as scikit-learn's StandardScaler. The jobs store them
    with the graph so that new points (``npkl extend``) are scaled the same way."""
    if scale not in SCALES:
        raise ValidationError(
            f"scale: {scale!r} is not one of {', '.join(repr(s) for s in SCALES)}; 'standard' "
            f"centres each feature column and divides it by its standard deviation"
        )
    if scale == "none":
        return None
    mean, std = _column_moments(X)
    return {"kind": "standard", "mean": mean.tolist(), "std": std.tolist()}


def apply_feature_scale(X, params: dict | None) -> np.ndarray:
    """X scaled by ``feature_scale``'s parameters (X itself for None), in X's float dtype
    (float64 for integer X)."""
    if params is None:
        return X
    X = np.asarray(X)
    dtype = X.dtype if X.dtype.kind == "f" else np.float64
    mean = np.asarray(params["mean"], dtype=np.float64)
    std = np.asarray(params["std"], dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != mean.size:
        raise ValidationError(
            f"features: {X.shape[-1] if X.ndim else 0} columns, the scaling was fitted on "
            f"{mean.size}; pass rows with the same columns"
        )
    out = np.empty(X.shape, dtype=dtype)
    inv = 1.0 / np.where(std > 0, std, 1.0)
    for a in range(0, X.shape[0], _SCALE_ROWS):
        out[a : a + _SCALE_ROWS] = (
            np.asarray(X[a : a + _SCALE_ROWS], dtype=np.float64) - mean
        ) * inv
    return out


def scale_fix() -> str:
    """Standardising the features, in the syntax of the interface in use."""
    return fix(
        "X = sklearn.preprocessing.StandardScaler().fit_transform(X) before knn_graph",
        "--scale standard",
        '[graph] scale = "standard"',
    )


def warn_feature_scales(X, stacklevel: int = 2) -> None:
    """Warn when one feature column varies so much more than the others that it alone
    decides the kNN distances (raw wine: proline, 388 times the median column's standard
    deviation; clustering with npkl fell from 0.99 to 0.51 pairwise accuracy)."""
    if X.shape[1] < 2 or X.shape[0] < 2:
        return
    _, std = _column_moments(X)
    varying = std[std > 0]
    if varying.size < 2:
        return
    med = float(np.median(varying))
    j = int(np.argmax(std))
    ratio = float(std[j]) / med
    if ratio > SCALE_SPREAD_WARN:
        warnings.warn(
            f"features: column {j} has a standard deviation {ratio:.0f} times the median "
            f"column's ({std[j]:.3g} against {med:.3g}), so it alone decides the kNN "
            f"distances; if the columns are on different scales, standardise them first "
            f"({scale_fix()})",
            GraphWarning,
            stacklevel=stacklevel + 1,
        )


def knn_neighbours(X, k: int, *, method: str = "auto", seed=0):
    """Indices and distances of the k nearest neighbours of each row (self excluded).

    Returns
    -------
    idx : ndarray of int64, shape (n, k)
    dist : ndarray of float64, shape (n, k), ascending
    """
    n = X.shape[0]
    if method == "auto":
        method = "exact" if n <= EXACT_KNN_MAX_POINTS else "pynndescent"
    if method == "exact":
        nn = NearestNeighbors(n_neighbors=k + 1).fit(X)
        dist, idx = nn.kneighbors(X)
    elif method == "pynndescent":
        from pynndescent import (
            NNDescent,  # lazy: importing it compiles numba code (seconds)
        )

        index = NNDescent(X, n_neighbors=k + 1, random_state=_int_seed(seed), n_jobs=None)
        idx, dist = index.neighbor_graph
    else:
        raise ValidationError(
            f"knn_method: {method!r} is not one of 'auto', 'exact', 'pynndescent'"
        )
    # Drop each point itself. Duplicate points can put a twin first, so remove by identity.
    idx = np.asarray(idx, dtype=np.int64)
    dist = np.asarray(dist, dtype=np.float64)
    is_self = idx == np.arange(n)[:, None]
    no_self = ~is_self.any(axis=1)
    is_self[no_self, -1] = True  # self not returned (ties): drop the farthest instead
    keep = ~is_self
    return idx[keep].reshape(n, k), dist[keep].reshape(n, k)


def _int_seed(seed):
    if isinstance(seed, (int, np.integer)):
        return int(seed)
    return int(np.random.default_rng(seed).integers(2**31 - 1))


def knn_graph(
    X, k: int = 5, *, weighting: str = "gaussian", method: str = "auto", seed=0, warn=True
) -> Graph:
    """Symmetrised kNN graph of the rows of X.

    Parameters
    ----------
    X : array-like, shape (n_samples, n_features)
    k : int
        Neighbours per point (the papers use 5, or 50 on adult).
    weighting : {'gaussian', 'mutual'}
        ``'gaussian'``: S_ij = exp(-||x_i - x_j||^2 / (2 sigma^2)) on the union of both kNN
        directions, sigma = half the mean distance to the 10 nearest neighbours.
        ``'mutual'``: S_ij = 1 when i and j are each in the other's kNN.
    method : {'auto', 'exact', 'pynndescent'}
        'auto' is exact up to ``EXACT_KNN_MAX_POINTS`` points. 'exact' is scikit-learn's
        brute-force search, which orders equidistant neighbours by its own rounding; that
        rounding follows how it splits the work among OpenMP threads. On data with many
        tied distances (one-hot or categorical features) the graph therefore depends on the
        thread count: on adult-a1a (k = 50), 23,128 of the Laplacian's 117,849 entries
        differ between 1 and 2 threads. For a graph that repeats on a machine whatever its
        core count, build it inside ``threadpoolctl.threadpool_limits(1, user_api="openmp")``
        (as ``npkl bench paper`` does).
    warn : bool
        Warn (:class:`GraphWarning`) when the graph has several components or isolated
        points, and when one feature column's spread dwarfs the others' (it alone would
        decide the distances: standardise the columns first, :func:`warn_feature_scales`).

    Returns
    -------
    Graph
    """
    X = _check_features(X)
    n = X.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < n:
        raise ValidationError(
            f"knn: expected an integer in [1, {n - 1}] for {n} points, got {fmt_value(k)}"
        )
    if weighting not in ("gaussian", "mutual"):
        raise ValidationError(f"weighting: {weighting!r} is not one of 'gaussian', 'mutual'")
    if warn:
        warn_feature_scales(X, stacklevel=2)
    kq = max(k, min(SIGMA_NEIGHBOURS, n - 1))
    idx, dist = knn_neighbours(X, kq, method=method, seed=seed)
    return graph_from_neighbours(idx, dist, k, weighting=weighting, warn=warn)


def graph_from_neighbours(idx, dist, k: int, *, weighting: str = "gaussian", warn=True) -> Graph:
    """The symmetric kNN graph from each point's neighbours (self excluded, ascending).

    Parameters
    ----------
    idx, dist : ndarray, shape (n, kq), kq >= k
        Neighbour indices and distances; sigma uses the first min(10, kq) columns.
    """
    n, kq = idx.shape
    sigma = None
    length = 0.5 * float(dist[:, : min(SIGMA_NEIGHBOURS, kq)].mean()) if dist.size else None
    if weighting == "gaussian":
        sigma = length
        if sigma <= 0:
            raise GraphError(
                "X: all points coincide with their neighbours (sigma = 0); remove duplicate "
                "rows or use "
                + fix("weighting='mutual'", "--weighting mutual", '[graph] weighting = "mutual"')
            )
    S = _knn_weights(idx, dist, k, weighting, sigma)

    def advice(n_comp, isolated):
        return _knn_advice(idx, dist, k, weighting, sigma, n_comp, isolated)

    return _finish(S, sigma, warn=warn, length=length, advice=advice)


def _knn_weights(idx, dist, k: int, weighting: str, sigma) -> sp.csr_matrix:
    """The symmetric weights of the kNN graph on the first k columns of idx / dist."""
    n = idx.shape[0]
    rows = np.repeat(np.arange(n), k)
    cols = idx[:, :k].ravel()
    if weighting == "gaussian":
        # cheap form in the loop (squared distance), exp once
        w = np.exp(-(dist[:, :k].ravel() ** 2) / (2.0 * sigma * sigma))
        A = sp.csr_matrix((w, (rows, cols)), shape=(n, n))
        S = A.maximum(A.T)
    else:
        A = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
        S = A.minimum(A.T)
    S.eliminate_zeros()  # underflowed Gaussian weights are no edge
    return S


def _groups(S) -> tuple[int, int]:
    """(components that are not single isolated points, isolated points) of S."""
    n_comp, _ = connected_components(S, directed=False)
    n_iso = int(np.count_nonzero(np.diff(S.tocsr().indptr) == 0))
    return int(n_comp) - n_iso, n_iso


def _knn_advice(idx, dist, k, weighting, sigma, n_comp, isolated) -> str:
    """What joins a disconnected kNN graph, checked on the neighbours at hand (the columns of
    idx): the smallest knn that leaves one group apart from isolated points, or for binary
    ('mutual') weights, which keep only pairs that are each other's neighbours, the smallest
    that does so with one group and no isolated point, else the Gaussian weights (every
    point keeps its k edges). Isolated points under Gaussian weights are named: no knn
    joins them."""
    kq = idx.shape[1]
    parts = []
    groups = n_comp - isolated.size

    def joins(kk, wt, strict):
        sig = (
            sigma
            if sigma is not None
            else 0.5 * float(dist[:, : min(SIGMA_NEIGHBOURS, kq)].mean())
        )
        left, iso = _groups(_knn_weights(idx, dist, kk, wt, sig))
        return left <= 1 and (iso == 0 or not strict)

    what = f"the {groups} groups" + (
        f" and the {isolated.size} isolated point(s)"
        if weighting == "mutual" and isolated.size
        else ""
    )
    found = None
    if groups > 1 or weighting == "mutual":
        strict = weighting == "mutual"  # binary weights: no isolated point either
        found = next((kk for kk in range(k + 1, kq + 1) if joins(kk, weighting, strict)), None)
        if found is not None:
            keyword = "" if weighting == "gaussian" else f", weighting={weighting!r}"
            parts.append(
                fix(
                    f"knn_graph(X, k={found}{keyword})", f"--knn {found}", f"[graph] knn = {found}"
                )
                + f" joins {what} into one"
            )
    if found is None and weighting == "mutual":
        found = next((kk for kk in range(k, kq + 1) if joins(kk, "gaussian", True)), None)
        if found is not None:
            parts.append(
                fix(
                    f"knn_graph(X, k={found}, weighting='gaussian')",
                    f"--weighting gaussian --knn {found}",
                    f'[graph] weighting = "gaussian" and knn = {found}',
                )
                + f" joins {what} into one (mutual weights keep only the pairs that are "
                f"each other's neighbours)"
            )
    if found is None and (groups > 1 or weighting == "mutual"):
        parts.append(
            f"{kq} neighbours per point still leave them apart: the data has separate groups "
            f"(if its columns are on different scales, standardise them first: {scale_fix()})"
        )
    if isolated.size and weighting == "gaussian":
        parts.append(
            f"the isolated point(s) {isolated[:10].tolist()}"
            f"{' ...' if isolated.size > 10 else ''} are so far from their neighbours that "
            f"their Gaussian weights are 0: outliers, to remove"
        )
    return "Fix: " + "; ".join(parts)


def graph_from_edges(
    edges, n_points: int | None = None, *, duplicates: str = "max", warn=True
) -> Graph:
    """A given graph (e.g. a social network) from an edge list.

    Parameters
    ----------
    edges : ndarray, shape (m, 2) or (m, 3)
        Rows ``i, j`` or ``i, j, w`` (0-based, undirected; weights positive, default 1).
        Self-loops are dropped (with a warning).
    n_points : int, optional
        Number of nodes; default ``max index + 1``.
    duplicates : {'max', 'sum', 'mean', 'error'}
        How the weights of a pair listed more than once (either direction) combine: the
        largest (default), their sum (a multigraph's counts; a list giving every edge both
        ways then doubles it), their mean; 'error' refuses a pair listed with two weights.
    """
    check_duplicates(duplicates)
    E = np.asarray(edges)
    if E.ndim != 2 or E.shape[1] not in (2, 3):
        raise GraphError(
            f"edges: expected shape (m, 2) or (m, 3) with columns i, j[, w], got {E.shape}"
        )
    if E.shape[0] == 0:
        raise GraphError("edges: the edge list is empty; pass at least one edge")
    if not np.all(np.isfinite(E.astype(np.float64))):
        raise GraphError("edges: NaN or inf in the edge list; drop or fix those rows")
    ij = E[:, :2]
    if np.any(ij != np.round(ij)):
        raise GraphError("edges: columns i, j must hold whole 0-based node numbers")
    i = ij[:, 0].astype(np.int64)
    j = ij[:, 1].astype(np.int64)
    w = E[:, 2].astype(np.float64) if E.shape[1] == 3 else np.ones(i.size)
    if (i.min() < 0) or (j.min() < 0):
        raise GraphError(
            f"edges: negative node index {int(min(i.min(), j.min()))}; nodes are 0-based"
        )
    top = int(max(i.max(), j.max())) + 1
    n_points = _n_points(n_points, top)
    if np.any(w <= 0):
        bad = w[w <= 0][:5].tolist()
        raise GraphError(f"edges: weights must be positive, got e.g. {bad}; drop those edges")
    # a coo -> csr conversion would sum repeated edges; combine them as asked instead
    counts = {"loops": int(np.count_nonzero(i == j)), "duplicates": 0, "conflicts": 0}
    keep = i != j
    A = merge_duplicates(
        dedup_pairs(i[keep], j[keep], w[keep], counts), n_points, duplicates, counts
    )
    if warn:
        warn_edge_cleanup(counts, duplicates, stacklevel=3)
    S = A.maximum(A.T)
    return _finish(S, None, warn=warn, given=True)


#: How the weights of a pair listed more than once combine (``graph_from_edges``).
DUPLICATE_RULES = ("max", "sum", "mean", "error")
_KEPT = {"max": "kept the largest", "sum": "summed them", "mean": "kept their mean"}


def check_duplicates(duplicates) -> None:
    """Refuse a ``duplicates`` rule that is not one of :data:`DUPLICATE_RULES`."""
    if not isinstance(duplicates, str) or duplicates not in DUPLICATE_RULES:
        raise ValidationError(
            f"duplicates: expected one of {', '.join(map(repr, DUPLICATE_RULES))} (how the "
            f"weights of a pair listed more than once combine), got {fmt_value(duplicates)}"
        )


def warn_edge_cleanup(counts: dict, duplicates: str = "max", stacklevel: int = 2) -> None:
    """A GraphWarning saying what reading an edge list changed: self-loops dropped, repeated
    edges (either direction) merged, and how many of those had another weight (combined by
    the ``duplicates`` rule)."""
    parts = []
    if counts["loops"]:
        parts.append(f"dropped {counts['loops']} self-loop(s) (a node's edge to itself)")
    if counts["duplicates"]:
        parts.append(
            f"merged {counts['duplicates']} repeated edge(s) (a pair listed again in the "
            f"same direction)"
        )
    if counts["conflicts"]:
        parts.append(
            f"{counts['conflicts']} listing(s) of a pair carried another weight than its "
            f"largest: {_KEPT[duplicates]} (the duplicates option chooses: max, sum, mean, error)"
        )
    if parts:
        warnings.warn(
            "edges: " + "; ".join(parts) + "; clean the edge list to silence this",
            GraphWarning,
            stacklevel=stacklevel + 1,
        )


def _n_points(n_points, top: int) -> int:
    """The node count: given (checked against the largest index + 1 = ``top``) or ``top``."""
    if n_points is None:
        return top
    if n_points < top:
        raise GraphError(
            f"n_points: {n_points} is smaller than the largest node index + 1 ({top}); pass "
            f"n_points >= {top} or fix the edge list"
        )
    return n_points


def merge_duplicates(merged, n, duplicates="max", counts=None):
    """Upper-triangular CSR of the pairs of :func:`dedup_pairs`'s ``merged`` output (its
    last merge), each pair's listings' weights combined by the ``duplicates`` rule;
    ``counts["conflicts"]`` is then set: the listings whose weight was below their pair's
    largest."""
    lo, hi, top, _mask, cnt, at_max, wsum = merged
    conflict = cnt != at_max
    if counts is not None:
        counts["conflicts"] = int((cnt - at_max).sum())
    if duplicates == "error" and conflict.any():
        k = int(np.flatnonzero(conflict)[0])
        raise GraphError(
            f"edges: {int(conflict.sum())} pair(s) are listed with different weights, e.g. "
            f"({int(lo[k])}, {int(hi[k])}) {int(cnt[k])} times, largest {top[k]:.6g}, mean "
            f"{wsum[k] / cnt[k]:.6g}; fix the edge list or say how to combine them: "
            f"duplicates='max', 'sum' or 'mean'"
        )
    w = wsum if duplicates == "sum" else wsum / cnt if duplicates == "mean" else top
    return sp.csr_matrix((w, (lo, hi)), shape=(n, n))


def dedup_pairs(i, j, w, counts=None, mask=None, cnt=None, at_max=None, wsum=None):
    """Each unordered pair once: ``(lo, hi, w, mask, cnt, at_max, wsum)``, ``w`` its largest
    weight and ``wsum`` the sum of its listings' weights.

    ``mask`` records the directions a pair was listed in (1: i < j, 2: i > j), ``cnt`` how
    many listings it stands for and ``at_max`` how many of them had its largest weight (given
    for pairs merged before, with ``wsum``, else from one listing each), so that merging in
    batches gives what one merge of the whole list gives. ``counts["duplicates"]`` (a dict)
    adds the repeats this merge drops, a pair listed once each way being an undirected edge,
    not a repeat."""
    if mask is None:
        mask = np.where(i < j, 1, 2).astype(np.int8)
        cnt = np.ones(i.size, np.int64)
        at_max = np.ones(i.size, np.int64)
        wsum = w
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    order = np.lexsort((-w, hi, lo))
    lo, hi, w = lo[order], hi[order], w[order]
    mask, cnt, at_max, wsum = mask[order], cnt[order], at_max[order], wsum[order]
    first = np.r_[True, (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])] if lo.size else lo > 0
    run = np.cumsum(first) - 1
    k = int(first.sum())
    merged = np.zeros(k, np.int8)
    np.bitwise_or.at(merged, run, mask)
    if counts is not None and not first.all():
        per_bit = sum(np.bincount(run, weights=(mask & b) > 0, minlength=k) for b in (1, 2))
        seen = (merged & 1 > 0).astype(int) + (merged & 2 > 0)
        counts["duplicates"] += int(per_bit.sum() - seen.sum())
    top = w[first][run]
    new_cnt = np.bincount(run, weights=cnt, minlength=k).astype(np.int64)
    new_at_max = np.bincount(run, weights=at_max * (w == top), minlength=k).astype(np.int64)
    new_sum = np.bincount(run, weights=wsum, minlength=k)
    return lo[first], hi[first], w[first], merged, new_cnt, new_at_max, new_sum


def normalized_adjacency(S) -> sp.csr_matrix:
    """D^{-1/2} S D^{-1/2} in float64 (rows and columns of isolated points stay empty): the
    operator of :func:`laplacian` and of the spectral embedding (``npkl embed --manifold
    spectral``)."""
    S = sp.csr_matrix(S, dtype=np.float64)
    d = np.asarray(S.sum(axis=1)).ravel()
    with np.errstate(divide="ignore"):
        dinv = np.where(d > 0, 1.0 / np.sqrt(d), 0.0)
    return sp.diags(dinv) @ S @ sp.diags(dinv)


def laplacian(S, delta: float = 1e-3, dtype=np.float64) -> sp.csr_matrix:
    """Normalised, shifted Laplacian L = (1 + delta) I - D^{-1/2} S D^{-1/2}.

    Isolated points (zero degree) get L_ii = 1 + delta and no off-diagonal entries.

    Parameters
    ----------
    S : sparse matrix, shape (n, n), symmetric non-negative
    delta : float > 0
    dtype : float32 or float64

    Returns
    -------
    scipy.sparse.csr_matrix, shape (n, n), sorted indices, explicit diagonal
    """
    if isinstance(delta, bool) or not (
        isinstance(delta, Real) and np.isfinite(delta) and delta > 0
    ):
        raise ValidationError(
            f"delta: expected a finite number > 0 (it keeps L positive definite), got "
            f"{fmt_value(delta)}; the papers use small values such as 1e-3"
        )
    N = normalized_adjacency(S)
    L = sp.identity(N.shape[0], format="csr") * (1.0 + delta) - N
    L = sp.csr_matrix(L, dtype=dtype)
    L.sort_indices()
    return L
