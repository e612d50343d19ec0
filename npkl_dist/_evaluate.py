"""Downstream use of the learned kernel: kernel k-means and clustering metrics.

Kernel k-means with K = V V' is ordinary k-means on the rows of V, so it scales with n.
The pairwise (Rand) accuracy is computed from the contingency table by scikit-learn's
``rand_score`` (pair confusion matrix), never over the n^2 pairs.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, rand_score

from ._errors import ValidationError, fmt_value

__all__ = ["kernel_kmeans", "clustering_metrics", "pairwise_accuracy_bruteforce"]


def kernel_kmeans(V, n_clusters: int, *, seed=0, n_init: int = 10) -> np.ndarray:
    """Kernel k-means on K = V V' (k-means on the rows of V).

    Returns
    -------
    labels : ndarray of int64, shape (n_points,)
    """
    V = np.asarray(V)
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, (int, np.integer)) or not (
        1 <= n_clusters <= V.shape[0]
    ):
        raise ValidationError(
            f"clusters: expected an integer in [1, {V.shape[0]}], got {fmt_value(n_clusters)}"
        )
    km = KMeans(n_clusters=int(n_clusters), n_init=n_init, random_state=seed)
    return km.fit_predict(V.astype(np.float64, copy=False)).astype(np.int64)


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
