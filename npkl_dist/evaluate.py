"""Downstream use of the learned kernel: kernel k-means and clustering metrics.

Kernel k-means with K = V V' is ordinary k-means on the rows of V, so it scales with n.
The pairwise (Rand) accuracy is computed from the contingency table by scikit-learn's
``rand_score`` (pair confusion matrix), never over the n^2 pairs.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import (
    adjusted_rand_score,
    normalized_mutual_info_score,
    rand_score,
)

from ._errors import ValidationError, fmt_value
from .solvers.simplenpkl._fit import warn_short_free_rows

__all__ = ["kernel_kmeans", "clustering_metrics", "pairwise_accuracy_bruteforce"]


def kernel_kmeans(
    V, n_clusters: int, *, seed=0, n_init: int = 10, normalize: bool = False
) -> np.ndarray:
    """Kernel k-means on K = V V' (k-means on the rows of V).

    Parameters
    ----------
    normalize : bool
        Cluster with the cosine-normalised kernel K_ij / sqrt(K_ii K_jj) instead: k-means
        on the rows of V scaled to unit length (rows that are exactly zero stay zero). Points
        in no constraint get short rows from SimpleNPKL (its kernel concentrates on the
        constrained points), and k-means on V then lumps them together. Where nearly all
        points are free, normalising alone may not separate them; a smaller gamma
        (``select_gamma``, ``npkl fit --gamma cv``) does
        (docs/decisions/normalised-kernel-clustering.md).

    Returns
    -------
    labels : ndarray of int64, shape (n_points,)
    """
    V = np.asarray(V)
    if V.ndim != 2 or V.shape[0] < 1 or V.dtype.kind not in "fiu":
        raise ValidationError(
            f"V: expected a 2-D numeric array (n_points, rank), got {V.dtype} of shape "
            f"{V.shape}; pass a fit's factor (result.V)"
        )
    if not np.all(np.isfinite(V)):
        rows = np.flatnonzero(~np.all(np.isfinite(V), axis=1))
        raise ValidationError(
            f"V: holds NaN or inf in row(s) {rows[:10].tolist()}; cluster a finite factor "
            f"(a fit that diverged or a corrupted file cannot be clustered)"
        )
    if not isinstance(normalize, (bool, np.bool_)):
        raise ValidationError(f"normalize: expected True or False, got {fmt_value(normalize)}")
    if (
        isinstance(n_clusters, bool)
        or not isinstance(n_clusters, (int, np.integer))
        or not (1 <= n_clusters <= V.shape[0])
    ):
        raise ValidationError(
            f"clusters: expected an integer in [1, {V.shape[0]}], got {fmt_value(n_clusters)}"
        )
    X = V.astype(np.float64, copy=False)
    if normalize:
        X = unit_rows(X)
    km = KMeans(n_clusters=int(n_clusters), n_init=n_init, random_state=seed)
    return km.fit_predict(X).astype(np.int64)


def cluster_kernel(
    V,
    n_clusters: int,
    *,
    seed=0,
    normalize: bool = False,
    short_rows_of=None,
    gamma_cv: bool = False,
) -> np.ndarray:
    """The downstream clustering of a fit (the job and the pipeline's evaluate stage):
    :func:`kernel_kmeans`, after :func:`~npkl_dist.solvers.simplenpkl._fit.warn_short_free_rows` on the
    constraints ``short_rows_of`` (SimpleNPKL's) when clustering without ``normalize``
    (``gamma_cv``: gamma was chosen by cross-validation, which the warning then does not
    advise)."""
    if short_rows_of is not None and not normalize:
        warn_short_free_rows(short_rows_of, V, stacklevel=3, gamma_cv=gamma_cv)
    return kernel_kmeans(V, n_clusters, seed=seed, normalize=normalize)


def nearest_centre(V, labels, V_new, *, normalize: bool = False) -> np.ndarray:
    """Clusters of new rows ``V_new`` (out-of-sample points): the nearest centre, a centre
    being the mean of the rows of V in a cluster of ``labels`` (as k-means assigns). With
    ``normalize`` (clusters found by ``kernel_kmeans(..., normalize=True)``), of the unit
    rows, and the new rows are scaled to unit length too."""
    labels = np.asarray(labels, dtype=np.int64)
    W, W_new = (
        (unit_rows(V), unit_rows(V_new))
        if normalize
        else (np.asarray(V, dtype=np.float64), np.asarray(V_new, dtype=np.float64))
    )
    k = int(labels.max()) + 1
    C = np.zeros((k, W.shape[1]))
    np.add.at(C, labels, W)
    C /= np.maximum(np.bincount(labels, minlength=k), 1)[:, None]
    d2 = ((W_new[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return np.argmin(d2, axis=1).astype(np.int64)


def unit_rows(V) -> np.ndarray:
    """The rows of V scaled to unit length (float64; zero rows stay zero): the factor of the
    cosine-normalised kernel K_ij / sqrt(K_ii K_jj)."""
    V = np.asarray(V, dtype=np.float64)
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    return np.divide(V, norms, out=np.zeros_like(V), where=norms > 0)


def clustering_metrics(labels_true, labels_pred) -> dict:
    """Pairwise (Rand) accuracy as a fraction in [0, 1], ARI and NMI."""
    labels_true = np.asarray(labels_true)
    labels_pred = np.asarray(labels_pred)
    if labels_true.shape != labels_pred.shape:
        raise ValidationError(
            f"eval labels: {labels_true.shape[0]} labels for {labels_pred.shape[0]} points; "
            f"pass one label per point"
        )
    return {
        "rand_accuracy": float(rand_score(labels_true, labels_pred)),
        "ari": float(adjusted_rand_score(labels_true, labels_pred)),
        "nmi": float(normalized_mutual_info_score(labels_true, labels_pred)),
    }


def pairwise_accuracy_bruteforce(labels_true, labels_pred) -> float:
    """Readable O(n^2) reference of the papers' pairwise accuracy (tests only)."""
    a = np.asarray(labels_true)
    b = np.asarray(labels_pred)
    same_a = a[:, None] == a[None, :]
    same_b = b[:, None] == b[None, :]
    iu = np.triu_indices(a.size, 1)
    return float(np.mean(same_a[iu] == same_b[iu]))
