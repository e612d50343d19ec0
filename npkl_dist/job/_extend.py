"""Out-of-sample extension (bcdkl-tnnls2015 §III-E): embed new points without retraining.

The learned rows V_I of the n training points are kept fixed. A new point o joins the
training graph through its k nearest training points N(o) with the training graph's
weighting (Gaussian with the training sigma, or binary), carries no constraint, and its row
minimises the manifold term of eq. (10) over the joint graph I ∪ {o}:

    min_{v_o} tr([V_I; v_o]^T L' [V_I; v_o]),   L' = (1 + delta) I - D'^{-1/2} S' D'^{-1/2}.

Only the terms with v_o matter: L'_oo ||v_o||^2 + 2 v_o^T sum_k L'_ok v_k, with no edge from o to
itself so L'_oo = 1 + delta, and L'_ok = -s_ok / sqrt(d'_o d'_k), d'_o = sum_k s_ok,
d'_k = d_k + s_ok (the training degree plus the new edge). The minimiser is the paper's
update (13) for an unconstrained column:

    v_o = -(1/L'_oo) sum_k L'_ok v_k = 1/(1 + delta) * sum_{k in N(o)} s_ok / sqrt(d'_o d'_k) v_k.

Each new point is embedded as if it arrived alone (new points are not linked to each other),
so a point's row does not depend on which other points are extended with it: extending in
batches, in any order or on several workers gives the same rows. Cost O(m k r).

Three rules keep the extension from failing silently (docs/decisions/extension.md):

- **Relative weights.** The Gaussian weights are taken relative to the new point's nearest
  training neighbour, s_ok = exp(-(d_ok^2 - d_o1^2) / (2 sigma^2)), so the nearest one weighs 1
  and no weight underflows. The paper's weights differ from these by the factor
  c = exp(-d_o1^2 / (2 sigma^2)), which shrinks the row by about sqrt(c) and, beyond ~40 sigma,
  to exactly zero (the row's direction, which clustering reads, is the same up to that
  factor's small effect on d'_k).
- **Copies.** A new point equal to a training row gets that row (and its cluster): the
  kernel is a function of the point.
- **Far points.** A point whose nearest training row is farther than ``FAR_LENGTHS`` times
  the graph's neighbourhood length (sigma: half the mean distance of the training points to
  their 10 nearest neighbours) is flagged, and one warning gives the count: its row is
  extrapolated from neighbours that are not near it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from numba import njit

from .._errors import GraphWarning, ValidationError, fmt_value
from ..evaluate import assign_clusters, cluster_centres
from ..graph._graph import _check_features, laplacian

__all__ = [
    "Extension",
    "embed_new_points",
    "extension_weights",
    "extend_embedding",
    "extend_embedding_dense",
]

#: A new point is far from the training data when its nearest training row is more than this
#: many neighbourhood lengths (the graph's sigma) away: with the paper's Gaussian weights its
#: strongest edge would weigh less than exp(-8), about 3e-4 of a point lying on the data.
FAR_LENGTHS = 4.0


def extension_weights(
    dist, *, sigma=None, weighting: str = "gaussian", relative: bool = True
) -> np.ndarray:
    """Similarities s_ok of new points to their training neighbours.

    Parameters
    ----------
    dist : ndarray, shape (m, k)
        Distances to the k nearest training points.
    sigma : float
        The training graph's Gaussian bandwidth (``weighting='gaussian'``).
    weighting : {'gaussian', 'mutual'}
        'mutual' graphs have binary weights; a new point's edges are weight 1.
    relative : bool
        Gaussian weights relative to each point's nearest neighbour (the first column of
        ``dist``, ascending): exp(-(d^2 - d_1^2) / (2 sigma^2)), which never underflow (module
        docstring); False gives the paper's exp(-d^2 / (2 sigma^2)).
    """
    dist = np.asarray(dist, np.float64)
    if weighting == "gaussian":
        if sigma is None or not np.isfinite(sigma) or sigma <= 0:
            raise ValidationError(
                f"sigma: expected the training graph's bandwidth (> 0), got {fmt_value(sigma)}; "
                f"extend a run whose graph was built from features with gaussian weights"
            )
        d2 = dist**2
        if relative and d2.size:
            d2 = d2 - d2.min(axis=1, keepdims=True)
        return np.exp(-d2 / (2.0 * sigma * sigma))
    if weighting == "mutual":
        return np.ones_like(dist)
    raise ValidationError(f"weighting: {weighting!r} is not one of 'gaussian', 'mutual'")


def extend_embedding(V, degrees, idx, weights, *, delta: float = 1e-3) -> np.ndarray:
    """Rows of V for new points from their training neighbours (closed form, see module).

    Parameters
    ----------
    V : ndarray, shape (n, r)
        Learned rows of the training points (original order).
    degrees : ndarray, shape (n,)
        Row sums of the training similarity S.
    idx : ndarray of int, shape (m, k)
        Training neighbours of each new point.
    weights : ndarray, shape (m, k)
        Similarities s_ok >= 0 (:func:`extension_weights`).
    delta : float
        The delta of the training Laplacian.

    Returns
    -------
    V_new : ndarray, shape (m, r), dtype of V
    """
    V = np.asarray(V)
    n, r = V.shape
    idx = np.asarray(idx)
    w = np.asarray(weights, np.float64)
    d = np.asarray(degrees, np.float64)
    if idx.shape != w.shape or idx.ndim != 2:
        raise ValidationError(
            f"idx, weights: expected two (m, k) arrays of the same shape, got {idx.shape} and "
            f"{w.shape}"
        )
    if d.shape != (n,):
        raise ValidationError(f"degrees: expected shape ({n},), got {d.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValidationError(
            f"idx: neighbour indices must lie in [0, {n}), got range [{idx.min()}, {idx.max()}]"
        )
    if np.any(~np.isfinite(w)) or np.any(w < 0):
        raise ValidationError("weights: expected finite similarities >= 0")
    d_o = w.sum(axis=1)
    alone = d_o <= 0
    if alone.any():
        warnings.warn(
            f"extend: {int(alone.sum())} new point(s) have zero similarity to all their "
            f"training neighbours (e.g. rows {np.flatnonzero(alone)[:5].tolist()}): they lie far "
            f"beyond sigma and get the zero row; they are outliers of the training data",
            GraphWarning,
            stacklevel=2,
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = w / np.sqrt(d_o[:, None] * (d[idx] + w))
    coef[alone] = 0.0
    coef /= 1.0 + delta
    # v_o = sum_k coef_ok v_k, accumulated over the k neighbours (m x r work per neighbour)
    out = np.zeros((idx.shape[0], r), np.float64)
    for t in range(idx.shape[1]):
        out += coef[:, t : t + 1] * V[idx[:, t]]
    return out.astype(V.dtype, copy=False)


def extend_embedding_dense(S, V, idx, weights, *, delta: float = 1e-3) -> np.ndarray:
    """Slow readable reference: for each new point, the dense joint Laplacian L' of
    I ∪ {o} and the minimiser of tr(W L' W^T) over o's row, solved as L'_oo v = -L'_oI V_I.
    Tests only (forms (n+1) x (n+1) matrices)."""

    S = np.asarray(S.toarray() if hasattr(S, "toarray") else S, np.float64)
    n = S.shape[0]
    out = []
    for o in range(idx.shape[0]):
        J = np.zeros((n + 1, n + 1))
        J[:n, :n] = S
        for k, s in zip(idx[o], weights[o]):
            J[n, k] = J[k, n] = max(J[n, k], s)
        L = laplacian(J, delta).toarray()
        v = np.linalg.solve(L[n:, n:], -L[n:, :n] @ np.asarray(V, np.float64))
        out.append(v[0])
    return np.array(out)


# ------------------------------------------------------------------ approximate neighbours
def _search_kernels():
    """Compiled lazily (numba); cached on disk after the first compilation."""

    @njit(cache=True, nogil=True)
    def _sqdist(X, i, q):
        s = 0.0
        for t in range(q.shape[0]):
            z = X[i, t] - q[t]
            s += z * z
        return s

    @njit(cache=True, nogil=True)
    def _heap_push(hd, hi, size, d, i):
        # min-heap on hd
        pos = size
        hd[pos] = d
        hi[pos] = i
        while pos > 0:
            parent = (pos - 1) // 2
            if hd[parent] <= hd[pos]:
                break
            hd[parent], hd[pos] = hd[pos], hd[parent]
            hi[parent], hi[pos] = hi[pos], hi[parent]
            pos = parent
        return size + 1

    @njit(cache=True, nogil=True)
    def _heap_pop(hd, hi, size):
        d, i = hd[0], hi[0]
        size -= 1
        hd[0], hi[0] = hd[size], hi[size]
        pos = 0
        while True:
            a = 2 * pos + 1
            if a >= size:
                break
            b = a + 1
            m = b if (b < size and hd[b] < hd[a]) else a
            if hd[pos] <= hd[m]:
                break
            hd[pos], hd[m] = hd[m], hd[pos]
            hi[pos], hi[m] = hi[m], hi[pos]
            pos = m
        return d, i, size

    @njit(cache=True, nogil=True)
    def _insert(wd, wi, wsize, ef, d, i):
        # insert (d, i) into the ascending result list of at most ef entries
        p = wsize
        while p > 0 and wd[p - 1] > d:
            wd[p] = wd[p - 1]
            wi[p] = wi[p - 1]
            p -= 1
        wd[p] = d
        wi[p] = i
        return wsize + 1 if wsize < ef else wsize

    @njit(cache=True, nogil=True)
    def graph_search(X, indptr, indices, Q, entries, k, ef, out_idx, out_d2):
        # IN: X (n, d) training rows; indptr/indices the training graph (CSR, symmetric);
        # Q (m, d) queries; entries (m, e) start points. OUT: out_idx, out_d2 (m, k).
        n = X.shape[0]
        stamp = np.zeros(n, np.int64)
        cap = n + 1
        cd = np.empty(cap, np.float64)  # candidates: min-heap
        ci = np.empty(cap, np.int64)
        wd = np.empty(ef + 1, np.float64)  # results: sorted ascending, at most ef
        wi = np.empty(ef + 1, np.int64)
        for qi in range(Q.shape[0]):
            q = Q[qi]
            tag = qi + 1
            csize = 0
            wsize = 0
            for e in range(entries.shape[1]):
                s = entries[qi, e]
                if stamp[s] == tag:
                    continue
                stamp[s] = tag
                d = _sqdist(X, s, q)
                csize = _heap_push(cd, ci, csize, d, s)
                wsize = _insert(wd, wi, wsize, ef, d, s)
            while csize > 0:
                d, c, csize = _heap_pop(cd, ci, csize)
                if wsize == ef and d > wd[wsize - 1]:
                    break
                for t in range(indptr[c], indptr[c + 1]):
                    nb = indices[t]
                    if stamp[nb] == tag:
                        continue
                    stamp[nb] = tag
                    dn = _sqdist(X, nb, q)
                    if wsize < ef or dn < wd[wsize - 1]:
                        csize = _heap_push(cd, ci, csize, dn, nb)
                        wsize = _insert(wd, wi, wsize, ef, dn, nb)
            for t in range(k):
                out_idx[qi, t] = wi[t]
                out_d2[qi, t] = wd[t]

    return graph_search


_GRAPH_SEARCH = None


def graph_knn(X, S, Q, k: int, *, ef: int | None = None, n_entries: int = 256, seed=0):
    """Approximate k nearest training rows of new points by best-first search on the
    training graph (the kNN graph S), from the nearest of ``n_entries`` random training rows.

    O(m * ef * degree * d) work and no index beyond S, so it suits large n where an exact
    search costs O(m n d). Tested against the exact neighbours (recall bound).

    Returns
    -------
    idx : ndarray of int64, shape (m, k); dist : ndarray of float64, shape (m, k), ascending
    """
    global _GRAPH_SEARCH
    if _GRAPH_SEARCH is None:
        _GRAPH_SEARCH = _search_kernels()
    X = np.ascontiguousarray(X, np.float64)
    Q = np.ascontiguousarray(Q, np.float64)
    n = X.shape[0]
    if not 1 <= k <= n:
        raise ValidationError(f"knn: expected an integer in [1, {n}], got {fmt_value(k)}")
    ef = max(int(ef or 0), 4 * k, 40)
    ef = min(ef, n)
    rng = np.random.default_rng(seed)
    piv = np.sort(rng.choice(n, min(n, n_entries), replace=False))
    P = X[piv]
    d2 = (Q**2).sum(1)[:, None] - 2 * Q @ P.T + (P**2).sum(1)[None, :]
    ne = min(4, piv.size)
    entries = piv[np.argsort(d2, axis=1)[:, :ne]].astype(np.int64)
    S = S.tocsr()
    out_idx = np.empty((Q.shape[0], k), np.int64)
    out_d2 = np.empty((Q.shape[0], k), np.float64)
    _GRAPH_SEARCH(
        X,
        S.indptr.astype(np.int64),
        S.indices.astype(np.int64),
        Q,
        entries,
        k,
        ef,
        out_idx,
        out_d2,
    )
    return out_idx, np.sqrt(np.maximum(out_d2, 0.0))


# ------------------------------------------------------------------ placing new points
@dataclass
class Extension:
    """New points placed in a learned embedding (:func:`embed_new_points`).

    Attributes
    ----------
    V : ndarray, shape (m, r)
        Their rows of V, in the order given.
    nearest : ndarray of int64, shape (m,)
        Each point's nearest training row.
    distance : ndarray of float64, shape (m,)
        The distance to it, in the graph's feature space (after the training scaling).
    far : ndarray of bool, shape (m,)
        Farther than ``FAR_LENGTHS`` neighbourhood lengths from the training data: the row is
        extrapolated from neighbours that are not near the point.
    copy : ndarray of bool, shape (m,)
        Exact copies of a training row (they get its row and cluster).
    clusters : ndarray of int64, shape (m,), or None
        Each point's cluster (the nearest centre), when the training clusters were given.
    length : float or None
        The neighbourhood length the far test used (the graph's sigma).
    """

    V: np.ndarray
    nearest: np.ndarray
    distance: np.ndarray
    far: np.ndarray
    copy: np.ndarray
    clusters: np.ndarray | None = None
    length: float | None = None

    def __repr__(self) -> str:
        m, r = self.V.shape
        out = f"Extension({m} points x rank {r}, {int(self.far.sum())} far, "
        out += f"{int(self.copy.sum())} copies of training rows"
        if self.clusters is not None:
            out += f", clusters {np.bincount(self.clusters).tolist()}"
        return out + ")"


def place_new_points(
    V,
    degrees,
    X,
    Q,
    idx,
    dist,
    *,
    sigma=None,
    length=None,
    weighting: str = "gaussian",
    delta: float = 1e-3,
    labels=None,
    centres=None,
    normalize: bool = False,
    advice: str = "pass new points scaled exactly as the training features",
    stacklevel: int = 2,
) -> Extension:
    """New points ``Q`` (scaled as the training features ``X``) with their k nearest
    training rows ``idx``/``dist`` (ascending) placed by :func:`extend_embedding` with the
    rules of the module docstring (relative weights, copies, far flags with one warning
    ending in ``advice``). ``labels`` (the training clusters) and ``centres`` (k x r; the
    mean rows of ``labels`` when not given) assign clusters: the nearest centre, of the unit
    rows with ``normalize``; a copy takes its training row's label."""
    V = np.asarray(V)
    idx = np.asarray(idx, dtype=np.int64)
    m = idx.shape[0]
    near = idx[:, 0] if m else np.zeros(0, np.int64)
    # the exact distance to the nearest row (the search's may carry rounding of
    # |x|^2 + |q|^2 - 2 x.q, which is not zero for a copy)
    diff = np.asarray(Q, np.float64) - np.asarray(X[near], np.float64)
    d1 = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    copy = d1 == 0.0
    w = extension_weights(dist, sigma=sigma, weighting=weighting)
    V_new = extend_embedding(V, degrees, idx, w, delta=delta)
    V_new[copy] = V[near[copy]]
    far = d1 > FAR_LENGTHS * length if length else np.zeros(m, dtype=bool)
    if far.any():
        rows = np.flatnonzero(far)
        span = d1[far] / length
        warnings.warn(
            f"extend: {rows.size} of {m} new point(s) lie farther from the training data "
            f"than {FAR_LENGTHS:g} neighbourhood lengths (nearest training row "
            f"{span.min():.3g} to {span.max():.3g} lengths away; rows "
            f"{rows[:5].tolist()}{' ...' if rows.size > 5 else ''}), so their rows are "
            f"extrapolated and flagged 'far'; {advice}",
            GraphWarning,
            stacklevel=stacklevel + 1,
        )
    clusters = None
    if labels is not None or centres is not None:
        if centres is None:
            centres = cluster_centres(V, labels, normalize=normalize)
        clusters = assign_clusters(V_new, centres, normalize=normalize)
        if labels is not None:
            clusters[copy] = np.asarray(labels, np.int64)[near[copy]]
    return Extension(V_new, near, d1, far, copy, clusters, length)


def embed_new_points(
    X,
    V,
    graph,
    X_new,
    *,
    k: int = 5,
    delta: float = 1e-3,
    labels=None,
    centres=None,
    normalize: bool = False,
    method: str = "auto",
    seed=0,
) -> Extension:
    """Embed new points in a learned kernel without retraining (bcdkl-tnnls2015 §III-E),
    and assign them to clusters.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        The training features the graph was built from (scaled as they were).
    V : ndarray, shape (n, r)
        The learned factor (``result.V``).
    graph : Graph
        The training graph (``knn_graph(X, k)``): its degrees, weighting and sigma.
    X_new : ndarray, shape (m, d)
        New points, scaled exactly as ``X`` (e.g. by the same fitted scaler).
    k : int
        Training neighbours per new point: the graph's k.
    delta : float
        The delta of the training Laplacian (``graph.laplacian(delta)``).
    labels : ndarray of int, shape (n,), optional
        The training clusters (``kernel_kmeans(V, n_clusters)``); new points get the nearest
        cluster centre (``centres``, or the mean rows of each cluster).
    normalize : bool
        The clusters were found on the normalised kernel (``kernel_kmeans(...,
        normalize=True)``).
    method : {'auto', 'exact', 'graph'}
        Neighbour search: exact, or best-first search on the training graph (:func:`graph_knn`)
        for large n; 'auto' is exact up to ``EXACT_KNN_MAX_POINTS`` training points.

    Returns
    -------
    Extension
        Rows, nearest training rows and distances, far flags (one warning gives their
        count), copies of training rows, clusters.
    """
    from ..graph._blocks import EXACT_KNN_MAX_POINTS, build_knn_index

    V = np.asarray(V)
    X = _check_features(X)
    X_new = _check_features(np.asarray(X_new))
    n = X.shape[0]
    if V.ndim != 2 or V.shape[0] != n:
        raise ValidationError(
            f"V: expected the factor of the {n} training points (n x r), got shape "
            f"{np.shape(V)}; pass result.V of the fit on X"
        )
    if graph.S.shape != (n, n):
        raise ValidationError(
            f"graph: over {graph.S.shape[0]} points, X has {n} rows; pass the graph built from X"
        )
    if X_new.shape[1] != X.shape[1]:
        raise ValidationError(
            f"X_new: {X_new.shape[1]} features, the training points have {X.shape[1]}; pass "
            f"rows with the same columns, scaled as X"
        )
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ValidationError(f"k: expected an integer in [1, {n}], got {fmt_value(k)}")
    if method not in ("auto", "exact", "graph"):
        raise ValidationError(f"method: {method!r} is not one of 'auto', 'exact', 'graph'")
    if method == "auto":
        method = "exact" if n <= EXACT_KNN_MAX_POINTS else "graph"
    if method == "exact":
        idx, dist = build_knn_index(X, k, method="exact", seed=seed).query(X_new, k)
    else:
        idx, dist = graph_knn(X, graph.S, X_new, k, seed=seed)
    degrees = np.asarray(graph.S.sum(axis=1)).ravel()
    return place_new_points(
        V,
        degrees,
        X,
        X_new,
        idx,
        dist,
        sigma=graph.sigma,
        length=graph_length(graph),
        weighting="gaussian" if graph.sigma is not None else "mutual",
        delta=delta,
        labels=labels,
        centres=centres,
        normalize=normalize,
        advice="pass X_new scaled exactly as X",
        stacklevel=2,
    )


def graph_length(graph) -> float | None:
    """The graph's neighbourhood length: its sigma (half the mean distance of the training
    points to their 10 nearest neighbours), also kept for binary ('mutual') weights."""
    return graph.sigma if graph.sigma is not None else getattr(graph, "length", None)
