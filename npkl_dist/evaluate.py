"""Downstream use of the learned kernel: kernel k-means and clustering metrics.

Kernel k-means with K = V V' is ordinary k-means on the rows of V, so it scales with n.
The pairwise (Rand) accuracy is computed from the contingency table by scikit-learn's
``rand_score`` (pair confusion matrix), never over the n^2 pairs.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from sklearn.cluster import KMeans
from sklearn.metrics import (
    adjusted_rand_score,
    normalized_mutual_info_score,
    rand_score,
)
from sklearn.metrics.pairwise import euclidean_distances

from ._errors import ConstraintWarning, ValidationError, fix, fmt_value

__all__ = [
    "assign_clusters",
    "clustering_metrics",
    "kernel_kmeans",
    "pairwise_accuracy_bruteforce",
    "pck_kmeans",
]


def kernel_kmeans(
    V,
    n_clusters: int,
    *,
    seed=0,
    n_init: int = 10,
    normalize: bool = False,
    constraints=None,
    return_centres: bool = False,
):
    """Kernel k-means on K = V V' (k-means on the rows of V).

    Parameters
    ----------
    n_init : int
        Restarts from k-means++ (seeded by ``seed``); the lowest-inertia run wins.
    normalize : bool
        Cluster with the cosine-normalised kernel K_ij / sqrt(K_ii K_jj) instead: k-means
        on the rows of V scaled to unit length (rows that are exactly zero stay zero). Points
        in no constraint get short rows from SimpleNPKL (its kernel concentrates on the
        constrained points), and k-means on V then lumps them together. Where nearly all
        points are free, normalising alone may not separate them; a smaller gamma
        (``select_gamma``, ``npkl fit --gamma cv``) does
        (docs/decisions/normalised-kernel-clustering.md).

    constraints : Constraints, optional
        The fit's constraints: one more run starts from the centroids of the must-link
        groups (:func:`must_link_centres`, "seeded k-means", Basu et al. 2002) and joins
        the restarts, the lowest inertia winning; labels are never looked at, and the
        k-means objective reached is never worse than without
        (docs/decisions/normalised-kernel-clustering.md).

    return_centres : bool
        Also return the centres, to assign new rows later (:func:`assign_clusters`).

    Returns
    -------
    labels : ndarray of int64, shape (n_points,)
    centres : ndarray of float64, shape (n_clusters, rank)
        Only with ``return_centres``: the means of the clusters' rows (of the unit rows with
        ``normalize``), the space :func:`assign_clusters` measures in.
    """
    X = _check_factor(V, n_clusters, normalize)
    if constraints is not None and getattr(constraints, "n_points", None) != X.shape[0]:
        raise ValidationError(
            f"constraints: expected a Constraints over {X.shape[0]} points (V's rows), got "
            f"{fmt_value(constraints)}; pass the fit's own constraints (problem.constraints)"
        )
    km = KMeans(n_clusters=int(n_clusters), n_init=n_init, random_state=seed).fit(X)
    if constraints is not None:
        C = must_link_centres(X, constraints, int(n_clusters), seed=seed)
        if C is not None:
            seeded = KMeans(n_clusters=int(n_clusters), init=C, n_init=1).fit(X)
            if seeded.inertia_ < km.inertia_:
                km = seeded
    labels = km.labels_.astype(np.int64)
    if return_centres:
        return labels, np.asarray(km.cluster_centers_, dtype=np.float64)
    return labels


def _check_factor(V, n_clusters, normalize) -> np.ndarray:
    """V validated as a clustering input: the rows to cluster (float64; unit rows with
    ``normalize``)."""
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
    return unit_rows(X) if normalize else X


def must_link_centres(X, constraints, n_clusters: int, *, seed=0) -> np.ndarray | None:
    """Initial k-means centres from the must-link groups: the means of the rows of X over
    the connected components of the must-link graph (its points only), the largest
    ``n_clusters`` of them; fewer groups are completed by k-means++'s D^2 sampling (seeded
    by ``seed``). None when there is no must-link pair."""
    ml = constraints.t > 0
    if not np.any(ml):
        return None
    n = X.shape[0]
    i, j = constraints.i[ml], constraints.j[ml]
    _, comp = connected_components(
        sp.coo_matrix((np.ones(i.size), (i, j)), shape=(n, n)), directed=False
    )
    inside = np.zeros(n, dtype=bool)
    inside[i] = inside[j] = True
    ids, sizes = np.unique(comp[inside], return_counts=True)
    keep = np.sort(ids[np.lexsort((ids, -sizes))[:n_clusters]])  # largest, ties by id
    rows = np.flatnonzero(inside & np.isin(comp, keep))
    group = np.searchsorted(keep, comp[rows])
    C = np.zeros((keep.size, X.shape[1]))
    np.add.at(C, group, X[rows])
    C /= np.bincount(group, minlength=keep.size)[:, None]
    if keep.size < n_clusters:
        rng = np.random.default_rng(seed)
        d2 = euclidean_distances(X, C, squared=True).min(axis=1)
        extra = []
        for _ in range(n_clusters - keep.size):
            total = d2.sum()
            pick = int(rng.integers(n)) if total <= 0 else int(rng.choice(n, p=d2 / total))
            extra.append(X[pick])
            d2 = np.minimum(d2, euclidean_distances(X, X[pick][None], squared=True)[:, 0])
        C = np.vstack([C, np.asarray(extra)])
    return C


#: Cluster methods of :func:`cluster_kernel` (``npkl fit --cluster-method``).
CLUSTER_METHODS = ("kmeans", "pck")
#: Default penalty of a violated constraint in :func:`pck_kmeans`, in units of the mean
#: squared distance of the clustered rows to their mean
#: (docs/decisions/constrained-clustering.md).
PCK_WEIGHT = 1.0
#: Default of :func:`pck_kmeans`'s ``closure``: penalise the constraints' transitive closure
#: (PCKMeans's) instead of the pairs as given (docs/decisions/constrained-clustering.md).
PCK_CLOSURE = False


def pck_kmeans(
    V,
    n_clusters: int,
    constraints,
    *,
    seed=0,
    n_init: int = 10,
    normalize: bool = False,
    weight: float = PCK_WEIGHT,
    closure: bool = PCK_CLOSURE,
    max_iter: int = 100,
    return_centres: bool = False,
):
    """Pairwise-constrained k-means (PCK-means, Basu, Banerjee & Mooney 2004) on the rows
    of V: k-means inertia plus a penalty w for every violated must-link and cannot-link (each
    given pair once, or with ``closure`` every pair of their transitive closure), minimised
    by ICM assignment sweeps in seeded random orders and mean updates (compiled;
    npkl_dist/_pckmeans.py states the algorithm). No cluster is ever left empty.

    Parameters
    ----------
    V : array (n_points, rank), float32 or float64
    n_clusters : int
    constraints : Constraints over the rows of V (pairs (i, i) are ignored)
    seed : int
        Seeds the starts and the sweep orders.
    n_init : int
        Runs: the first from the must-link groups' centroids (PCKMeans's start,
        :func:`must_link_centres`; k-means++ when there is no must-link), the others from
        k-means++; then :func:`kernel_kmeans`'s clustering, as it stands and as one more
        start. The lowest penalised objective wins, so it is never above kernel k-means'.
    normalize : bool
        Cluster the unit rows (the cosine-normalised kernel), as :func:`kernel_kmeans`.
    weight : float
        w as a multiple of the mean squared distance of the clustered rows to their mean, so
        the result does not depend on V's scale (docs/decisions/constrained-clustering.md).
    closure : bool
        Penalise the transitive closure of the constraints, as PCKMeans does: every pair
        inside a must-link component, and every pair across two components that a
        cannot-link joins, costs w when violated (counted per component, O(k) per point and
        sweep; npkl_dist/_pckmeans.py). False: each given pair once. Raises ConstraintError
        for a cannot-link inside a must-link component (``Constraints`` refuses those).
    max_iter : int
        Sweeps per run at most.
    return_centres : bool
        Also return the centres (the means of the clusters' rows; of the unit rows with
        ``normalize``) for :func:`assign_clusters`.

    Returns
    -------
    labels : ndarray of int64, shape (n_points,)
    centres : ndarray of float64, shape (n_clusters, rank), only with ``return_centres``
    """
    from sklearn.cluster import kmeans_plusplus

    from ._pckmeans import (
        constraint_adjacency,
        constraint_closure,
        pck_objective,
        pck_run,
        run_objective,
    )

    X = np.ascontiguousarray(_check_factor(V, n_clusters, normalize))
    if getattr(constraints, "n_points", None) != X.shape[0]:
        raise ValidationError(
            f"constraints: expected a Constraints over {X.shape[0]} points (V's rows), got "
            f"{fmt_value(constraints)}; pass the fit's own constraints (problem.constraints)"
        )
    for name, val, lo in (("n_init", n_init, 1), ("max_iter", max_iter, 1)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
            raise ValidationError(f"{name}: expected an integer >= {lo}, got {fmt_value(val)}")
    if (
        isinstance(weight, bool)
        or not isinstance(weight, (int, float, np.floating, np.integer))
        or not np.isfinite(weight)
        or weight < 0
    ):
        raise ValidationError(
            f"weight: expected a finite number >= 0 (the penalty of a violated constraint "
            f"in units of the rows' mean squared distance to their mean), got "
            f"{fmt_value(weight)}"
        )
    if not isinstance(closure, (bool, np.bool_)):
        raise ValidationError(f"closure: expected True or False, got {fmt_value(closure)}")
    k = int(n_clusters)
    spread = float(((X - X.mean(axis=0)) ** 2).sum(axis=1).mean())
    w = float(weight) * (spread if spread > 0 else 1.0)
    if closure:
        adjacency = constraint_closure(constraints, X.shape[0])
    else:
        adjacency = constraint_adjacency(constraints, X.shape[0])
    rng = np.random.default_rng(seed)
    best = None
    for run in range(int(n_init)):
        run_seed = int(rng.integers(2**31))
        C0 = must_link_centres(X, constraints, k, seed=run_seed) if run == 0 else None
        if C0 is None:
            C0 = kmeans_plusplus(X, k, random_state=run_seed)[0]
        out = pck_run(X, C0, adjacency, w, run_seed, max_iter)
        if best is None or out[2] < best[2]:
            best = out
    # kernel k-means' clustering competes on the same objective, as it stands and as one
    # more start: ICM from k-means++ starts can end above it (iris, SimpleNPKL's kernel), and
    # this way the result's objective is never above the clustering that ignores the pairs
    km_labels, km_centres = kernel_kmeans(
        X, k, seed=seed, constraints=constraints, return_centres=True
    )
    km_centres = np.ascontiguousarray(km_centres, dtype=np.float64)
    polished = pck_run(X, km_centres, adjacency, w, int(rng.integers(2**31)), max_iter)
    if polished[2] < best[2]:
        best = polished
    if closure:  # from the closure's counts; pck_objective would list its pairs
        km_J = run_objective(X, km_labels, km_centres, adjacency, w)
    else:
        km_J = pck_objective(X, km_labels, km_centres, constraints, w)
    if km_J < best[2]:
        best = (km_labels, km_centres, km_J, 0)
    labels, centres = best[0], best[1]
    return (labels, centres) if return_centres else labels


def assign_clusters(V_new, centres, *, normalize: bool = False) -> np.ndarray:
    """Clusters of new rows (out-of-sample points): the nearest of ``centres`` (from
    ``kernel_kmeans(..., return_centres=True)`` or :func:`pck_kmeans`), the new rows scaled
    to unit length first when the centres were found with ``normalize``. Returns int64
    labels, shape (n_new,)."""
    C = np.asarray(centres, dtype=np.float64)
    W = unit_rows(V_new) if normalize else np.asarray(V_new, dtype=np.float64)
    if W.ndim != 2 or C.ndim != 2 or W.shape[1] != C.shape[1]:
        raise ValidationError(
            f"V_new: expected rows of length {C.shape[-1]} (the centres' rank), got shape "
            f"{W.shape}; embed the new points with the same fit"
        )
    return np.argmin(euclidean_distances(W, C, squared=True), axis=1).astype(np.int64)


#: Share of points in no constraint from which clustering a kernel without normalising
#: checks their rows' length (``warn_short_free_rows``).
FREE_SHARE_WARN = 0.2
#: ... and warns when their median row is shorter than this fraction of the constrained
#: points' (docs/decisions/normalised-kernel-clustering.md).
FREE_ROW_RATIO_WARN = 0.5


def short_free_rows(constraints, V):
    """``(share, ratio)`` when at least :data:`FREE_SHARE_WARN` of the points are in no
    constraint and their median row of V is shorter than :data:`FREE_ROW_RATIO_WARN` times
    the constrained points' (k-means on V would lump them together), else None."""
    c = constraints
    free = np.ones(np.shape(V)[0], dtype=bool)
    free[c.i] = False
    free[c.j] = False
    share = float(free.mean())
    if share < FREE_SHARE_WARN or free.all():
        return None
    norms = np.linalg.norm(np.asarray(V, dtype=np.float64), axis=1)
    top = float(np.median(norms[~free]))
    if top <= 0.0:
        return None
    ratio = float(np.median(norms[free])) / top
    return (share, ratio) if ratio < FREE_ROW_RATIO_WARN else None


def choose_normalize(normalize, constraints, V) -> bool:
    """``normalize`` as given, or for None (automatic: ``npkl fit`` without
    ``--[no-]normalize-kernel``) whether :func:`short_free_rows` finds the free points' rows
    short, when the unit rows cluster them and V's rows do not
    (docs/decisions/normalised-kernel-clustering.md)."""
    if normalize is not None:
        return bool(normalize)
    return constraints is not None and short_free_rows(constraints, V) is not None


def warn_short_free_rows(
    constraints, V, stacklevel: int = 2, gamma_cv: bool = False, solver: str = "simplenpkl"
) -> None:
    """Before kernel k-means on a learned V (n x r) without normalising: warn when many
    points are in no constraint and the kernel made their rows short, since k-means on V
    then puts them together whatever their neighbours. SimpleNPKL's kernel concentrates on
    the constrained points; any solver's does on a graph where few points are labelled and
    the free rows decay away from them (a planted-partition graph with 1% labelled). The job
    and the pipeline's evaluate stage call it; a fit alone has no clustering to warn about.
    ``gamma_cv``: gamma was already chosen by cross-validation, so the advice leaves that
    step out."""
    short = short_free_rows(constraints, V)
    if short is not None:
        share, ratio = short
        warnings.warn(
            f"{solver}: {100 * share:.0f}% of the points are in no constraint, and the "
            f"learned kernel gives them rows {ratio:.2g} times as long as the constrained "
            f"points' (medians), so kernel k-means on V lumps them together; cluster with "
            f"the normalised kernel ("
            + fix(
                "kernel_kmeans(V, k, normalize=True)",
                "--normalize-kernel",
                "[output] normalize_kernel = true",
            )
            + ")"
            + (
                ""
                if gamma_cv
                else " and choose gamma by cross-validation ("
                + fix("select_gamma", "--gamma cv", '[model] gamma = "cv"')
                + "), since normalising alone does not always separate them"
            )
            + (
                "; or fit with " + fix("fit_bcd", "--solver bcd", '[model] solver = "bcd"')
                if solver == "simplenpkl"
                else ""
            ),
            ConstraintWarning,
            stacklevel=stacklevel + 1,
        )


def cluster_kernel(
    V,
    n_clusters: int,
    *,
    seed=0,
    normalize: bool = False,
    short_rows_of=None,
    gamma_cv: bool = False,
    constraints=None,
    solver: str = "simplenpkl",
    method: str | None = None,
) -> np.ndarray:
    """The downstream clustering of a fit (the job and the pipeline's evaluate stage):
    :func:`kernel_kmeans` or :func:`pck_kmeans`, after :func:`warn_short_free_rows` (for
    ``solver``) on the constraints ``short_rows_of`` when clustering without ``normalize``
    (``gamma_cv``: gamma was chosen by cross-validation, which the warning then does not
    advise). ``method``: "pck" (constrained k-means on ``constraints``), "kmeans" (kernel
    k-means; ``constraints`` seed one more run), or None: "pck" when ``constraints`` holds
    a pair between two points, else "kmeans" (docs/decisions/constrained-clustering.md)."""
    method = resolve_cluster_method(method, constraints)
    if short_rows_of is not None and not normalize:
        warn_short_free_rows(short_rows_of, V, stacklevel=3, gamma_cv=gamma_cv, solver=solver)
    if method == "pck":
        return pck_kmeans(V, n_clusters, constraints, seed=seed, normalize=normalize)
    return kernel_kmeans(V, n_clusters, seed=seed, normalize=normalize, constraints=constraints)


def resolve_cluster_method(method, constraints) -> str:
    """``method`` checked ("kmeans" or "pck"), or for None the default: "pck" when
    ``constraints`` holds a pair of two distinct points, else "kmeans"."""
    if method is None:
        has_pairs = constraints is not None and bool(np.any(constraints.i != constraints.j))
        return "pck" if has_pairs else "kmeans"
    if method not in CLUSTER_METHODS:
        raise ValidationError(
            f"method: expected one of {', '.join(map(repr, CLUSTER_METHODS))}, got "
            f"{fmt_value(method)}"
        )
    if method == "pck" and constraints is None:
        raise ValidationError(
            "method: 'pck' clusters with the constraints, and none were given; pass "
            "constraints=problem.constraints or method='kmeans'"
        )
    return method


def nearest_centre(V, labels, V_new, *, normalize: bool = False) -> np.ndarray:
    """Clusters of new rows ``V_new`` (out-of-sample points): the nearest centre, a centre
    being the mean of the rows of V in a cluster of ``labels`` (as k-means assigns). With
    ``normalize`` (clusters found by ``kernel_kmeans(..., normalize=True)``), of the unit
    rows, and the new rows are scaled to unit length too."""
    return assign_clusters(
        V_new, cluster_centres(V, labels, normalize=normalize), normalize=normalize
    )


def cluster_centres(V, labels, *, normalize: bool = False) -> np.ndarray:
    """The centre of each cluster of ``labels``: the mean of its rows of V (of the unit rows
    with ``normalize``), as k-means ends; shape (k, r), k = labels.max() + 1."""
    labels = np.asarray(labels, dtype=np.int64)
    W = unit_rows(V) if normalize else np.asarray(V, dtype=np.float64)
    k = int(labels.max()) + 1
    C = np.zeros((k, W.shape[1]))
    np.add.at(C, labels, W)
    return C / np.maximum(np.bincount(labels, minlength=k), 1)[:, None]


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
