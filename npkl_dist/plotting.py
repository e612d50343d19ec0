"""Pictures of a learned kernel K = V V': a 2-D layout of its rows and the objective's descent.

:func:`layout_2d` places the rows of V (or of the matrix that was clustered: the unit rows for
the cosine-normalised kernel) in two dimensions. The default is t-SNE (scikit-learn's
Barnes-Hut ``TSNE``, initialised by PCA, seeded, one thread) on a seeded subsample of at most
``max_points`` rows; ``method="pca"`` gives the top two kernel principal components, i.e. the
leading left singular vectors of the centred V scaled by their singular values. A kernel that
clusters ten classes almost perfectly still overlaps in its top two principal components,
because ten well-separated classes need about nine dimensions; t-SNE keeps each point's
neighbours, so the classes the metrics count as separate are drawn apart
(docs/decisions/pictures.md).

:func:`embedding_figure` draws that layout coloured by the evaluation labels when given (else
by the clusters), with a legend and the clustering metrics in the title;
:func:`objective_figure` draws the objective as its gap to the final value on a log axis.
Both return a matplotlib ``Figure`` (Agg backend; matplotlib and scikit-learn's manifold
module are imported only when a picture is made); :func:`save_figure` writes and closes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._errors import ValidationError
from .evaluate import unit_rows

__all__ = [
    "LAYOUT_METHODS",
    "layout_2d",
    "embedding_figure",
    "objective_figure",
    "save_figure",
    "pyplot",
    "metrics_text",
    "misclustered",
]

#: 2-D layouts of :func:`layout_2d` and the names the pictures give them
LAYOUT_METHODS = {"tsne": "t-SNE", "pca": "kernel PCA"}

#: rows drawn at most (a seeded subsample beyond): t-SNE's time grows as n log n
DEFAULT_MAX_POINTS = 3000

#: below this many rows t-SNE has too few neighbours to model; the layout is kernel PCA
_TSNE_MIN_POINTS = 30

#: classes named one by one in a legend; more get a colour bar
_LEGEND_MAX_CLASSES = 20


def _check_V(V, name: str = "V") -> np.ndarray:
    V = np.asarray(V)
    if V.ndim == 1:
        V = V[:, None]
    if V.ndim != 2 or V.shape[0] == 0:
        raise ValidationError(
            f"{name}: expected an (n_samples, rank) array with n_samples >= 1, got shape "
            f"{np.shape(V)}; pass the learned embedding (one row per point)"
        )
    V = V.astype(np.float64, copy=False)
    if not np.all(np.isfinite(V)):
        raise ValidationError(
            f"{name}: contains NaN or inf; pass a finite embedding (check the fit converged)"
        )
    return V


def subsample(n: int, max_points: int, seed=0) -> np.ndarray:
    """Sorted indices of at most ``max_points`` of ``n`` rows, drawn without replacement
    from a generator seeded by ``seed`` (all rows when ``n <= max_points``)."""
    if n <= max_points:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, max_points, replace=False))


def _pca_2d(V: np.ndarray) -> np.ndarray:
    """Top-2 kernel principal components of K = V V' (centred), from V alone: the leading
    left singular vectors of the centred V times their singular values (padded with zeros
    when V has rank below 2)."""
    Vc = V - V.mean(axis=0)
    U, s, _ = np.linalg.svd(Vc, full_matrices=False)
    Z = U[:, :2] * s[:2]
    # a sign per component, fixed by its largest entry: the same picture on every platform
    Z *= np.where(Z[np.argmax(np.abs(Z), axis=0), range(Z.shape[1])] < 0, -1.0, 1.0)
    if Z.shape[1] < 2:
        Z = np.column_stack([Z, np.zeros((Z.shape[0], 2 - Z.shape[1]))])
    return Z


def _tsne_2d(V: np.ndarray, seed) -> np.ndarray:
    from sklearn.manifold import TSNE  # lazy: only when a picture is made
    from threadpoolctl import threadpool_limits  # scikit-learn's own dependency

    if V.shape[1] < 2:  # PCA initialisation needs two columns
        V = np.column_stack([V, np.zeros(V.shape[0])])
    tsne = TSNE(
        n_components=2,
        init="pca",
        perplexity=min(30.0, (V.shape[0] - 1) / 3.0),
        learning_rate="auto",
        max_iter=500,
        angle=0.8,
        random_state=int(seed),
    )
    # one thread: the same picture whatever the core count, and no OpenMP threads spinning
    # on a busy machine (docs/decisions/pictures.md)
    with threadpool_limits(1):
        return tsne.fit_transform(V)


def layout_2d(
    V,
    *,
    method: str = "tsne",
    normalize: bool = False,
    max_points: int = DEFAULT_MAX_POINTS,
    seed=0,
) -> tuple[np.ndarray, np.ndarray, str]:
    """2-D coordinates of the rows of V for a picture.

    Parameters
    ----------
    V : array (n_samples, rank)
        The learned factor of K = V V' (one row per point).
    method : {"tsne", "pca"}
        t-SNE of the rows (default) or the top two kernel principal components.
    normalize : bool
        Lay out the unit rows of V (the cosine-normalised kernel, what kernel k-means
        clustered when it normalised) instead of V itself.
    max_points : int
        Rows drawn at most; a seeded subsample of that size is laid out beyond it.
    seed : int
        Seeds the subsample and t-SNE (run on one thread): the same arguments give the
        same coordinates.

    Returns
    -------
    Z : ndarray (m, 2), float64
        The coordinates of rows ``keep`` of V.
    keep : ndarray (m,), int
        Sorted indices of the rows laid out.
    name : str
        The layout's name for a picture ("t-SNE" or "kernel PCA"; kernel PCA also when
        t-SNE was asked for fewer than 30 rows, which it cannot model, or for rows that are
        all equal).
    """
    if method not in LAYOUT_METHODS:
        raise ValidationError(
            f"method: {method!r} is not a layout; use one of {', '.join(map(repr, LAYOUT_METHODS))}"
        )
    if isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer)):
        raise ValidationError(f"max_points: expected an int >= 2, got {max_points!r}")
    if max_points < 2:
        raise ValidationError(f"max_points: expected an int >= 2, got {max_points!r}")
    V = _check_V(V)
    keep = subsample(V.shape[0], int(max_points), seed)
    rows = V[keep]
    if normalize:
        rows = unit_rows(rows)
    # t-SNE of rows that are all equal is undefined (its PCA start divides by zero)
    if method == "tsne" and rows.shape[0] >= _TSNE_MIN_POINTS and np.ptp(rows, axis=0).any():
        return _tsne_2d(rows, seed), keep, LAYOUT_METHODS["tsne"]
    return _pca_2d(rows), keep, LAYOUT_METHODS["pca"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only, no display needed)."""
    import matplotlib  # lazy: only when a picture is made

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: only when a picture is made

    return plt


def metrics_text(metrics: dict | None) -> str:
    """'clusters vs true labels: pairwise accuracy 0.992, ARI 0.957, NMI 0.951' (empty
    without metrics)."""
    if not metrics:
        return ""
    return (
        f"clusters vs true labels: pairwise accuracy {metrics['rand_accuracy']:.3f}, "
        f"ARI {metrics['ari']:.3f}, NMI {metrics['nmi']:.3f}"
    )


def misclustered(labels, clusters) -> np.ndarray:
    """Which labelled points sit in a cluster matched to another class.

    Clusters are matched one to one to classes so that the most points agree (maximum-weight
    matching on the contingency table, ``scipy.optimize.linear_sum_assignment``); a point is
    misclustered when its label is not its cluster's class, or its cluster has no class
    (more clusters than classes). Unlabelled points (negative labels) are never flagged.

    Returns
    -------
    ndarray (n,), bool
    """
    from scipy.optimize import linear_sum_assignment  # lazy: only when a picture is made

    labels, clusters = np.asarray(labels), np.asarray(clusters)
    lab = labels >= 0 if labels.dtype.kind in "iuf" else np.ones(labels.size, bool)
    classes, yi = np.unique(labels[lab], return_inverse=True)
    cl, ci = np.unique(clusters[lab], return_inverse=True)
    table = np.zeros((cl.size, classes.size), dtype=np.int64)
    np.add.at(table, (ci, yi), 1)
    rows, cols = linear_sum_assignment(table, maximize=True)
    match = np.full(cl.size, -1)
    match[rows] = cols
    wrong = np.zeros(labels.size, dtype=bool)
    wrong[lab] = match[ci] != yi
    return wrong


def _dot_size(m: int) -> float:
    """Marker area for ``m`` points: 4 (pt^2) from 3,000 points up, larger for fewer (a
    34-node graph's dots were specks), at most 30."""
    return float(np.clip(12000.0 / max(m, 1), 4.0, 30.0))


def _draw_layout(ax, Z, colour, colour_name: str, fig, wrong=None):
    """Scatter ``Z`` coloured by the integer labels ``colour`` (negative: unlabelled, grey)
    with a legend naming each class, or a colour bar for many classes; the points of mask
    ``wrong`` get a black cross on top."""
    dot = _dot_size(Z.shape[0])
    if colour is None:
        ax.scatter(Z[:, 0], Z[:, 1], s=dot, color="tab:blue", linewidths=0)
        return
    colour = np.asarray(colour)
    classes = np.unique(colour[colour >= 0]) if colour.dtype.kind in "iuf" else np.unique(colour)
    missing = colour < 0 if colour.dtype.kind in "iuf" else np.zeros(colour.size, bool)
    if missing.any():
        ax.scatter(
            Z[missing, 0], Z[missing, 1], s=dot, color="0.8", linewidths=0, label="unlabelled"
        )
    plt = pyplot()
    if wrong is not None and wrong.any():
        # first in the legend, and under the classes' dots: each cross keeps its point's colour
        ax.scatter(
            Z[wrong, 0],
            Z[wrong, 1],
            s=max(18.0, 2 * dot),
            marker="x",
            color="0.2",
            linewidths=0.5,
            zorder=1,
            label=f"in another class's cluster ({int(wrong.sum())})",
        )
    if classes.size <= _LEGEND_MAX_CLASSES:
        cmap = plt.get_cmap("tab10" if classes.size <= 10 else "tab20")
        for i, c in enumerate(classes):
            sel = colour == c
            ax.scatter(
                Z[sel, 0],
                Z[sel, 1],
                s=1.25 * dot,
                color=cmap(i % cmap.N),
                linewidths=0,
                label=str(c),
                zorder=2,
            )
        ax.legend(
            title=colour_name,
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            markerscale=2,
            frameon=False,
            fontsize="small",
        )
    else:
        idx = np.searchsorted(classes, colour[~missing])
        sc = ax.scatter(Z[~missing, 0], Z[~missing, 1], s=dot, c=idx, cmap="turbo", linewidths=0)
        fig.colorbar(sc, ax=ax, label=f"{colour_name} ({classes.size} classes, by rank)")
        if missing.any() or (wrong is not None and wrong.any()):
            ax.legend(loc="upper right", markerscale=2, frameon=False, fontsize="small")


def embedding_figure(
    V,
    *,
    labels=None,
    clusters=None,
    metrics: dict | None = None,
    normalize: bool = False,
    method: str = "tsne",
    max_points: int = DEFAULT_MAX_POINTS,
    seed=0,
    title: str | None = None,
    rows_name: str | None = None,
    ax=None,
):
    """The rows of V laid out in 2-D (:func:`layout_2d`), coloured by ``labels`` (the
    evaluation labels, negative for unlabelled points) when given, else by ``clusters``.
    With both, the points in a cluster matched to another class (:func:`misclustered`) get
    a black cross: the errors the metrics count, where they are.

    The title names the layout, the points drawn, what the colours are and, with
    ``metrics`` (:func:`npkl_dist.clustering_metrics`' dict), the pairwise accuracy, ARI and
    NMI; ``title`` is a first line put above that; ``rows_name`` says what the rows are
    (default "rows of V", or "unit rows of V" with ``normalize``). With ``ax`` the picture is drawn there
    (its figure is returned); otherwise a new figure is made. Returns the ``Figure``.
    """
    V = _check_V(V)
    for name, arr in (("labels", labels), ("clusters", clusters)):
        if arr is not None and np.shape(arr) != (V.shape[0],):
            raise ValidationError(
                f"{name}: expected one label per row of V ({V.shape[0]}), got shape "
                f"{np.shape(arr)}; pass a 1-D array in the rows' order"
            )
    Z, keep, name = layout_2d(
        V, method=method, normalize=normalize, max_points=max_points, seed=seed
    )
    wrong = None
    if labels is not None:
        colour, colour_name = np.asarray(labels)[keep], "true label"
        if clusters is not None:
            wrong = misclustered(labels, clusters)[keep]
    elif clusters is not None:
        colour, colour_name = np.asarray(clusters)[keep], "cluster"
    else:
        colour, colour_name = None, ""
    if ax is None:
        fig, ax = pyplot().subplots(figsize=(7.5, 6), layout="constrained")
    else:
        fig = ax.figure
    _draw_layout(ax, Z, colour, colour_name, fig, wrong)
    rows = rows_name or ("unit rows of V" if normalize else "rows of V")
    drawn = f"all {V.shape[0]}" if keep.size == V.shape[0] else f"{keep.size} of {V.shape[0]}"
    lines = [title] if title else []
    lines.append(
        f"{name} of the {rows} ({drawn} points)"
        + (f", coloured by {colour_name}" if colour_name else "")
    )
    if metrics:
        lines.append(metrics_text(metrics))
    ax.set_title("\n".join(lines), fontsize="medium")
    ax.set_xticks([])
    ax.set_yticks([])
    return fig


def objective_figure(trace, *, xlabel: str = "iteration", title: str | None = None):
    """The objective's gap to its final value, |f_t - f_final| / |f_final| (relative; the
    absolute gap when f_final = 0), on a log axis against the iteration t = 1, 2, ....
    Iterations whose gap is exactly zero (the last one) have no place on a log axis and
    are left out. Returns the ``Figure``."""
    trace = np.asarray(trace, dtype=np.float64).ravel()
    if trace.size == 0 or not np.all(np.isfinite(trace)):
        raise ValidationError(
            f"trace: expected a non-empty finite objective trace, got {trace.size} values"
            + ("" if trace.size == 0 else " with NaN or inf")
            + "; pass the fit's objective_trace"
        )
    final = trace[-1]
    scale = abs(final) if final != 0 else 1.0
    gap = np.abs(trace - final) / scale
    it = np.arange(1, trace.size + 1)
    shown = gap > 0
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator  # lazy: only when a picture is made

    fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
    if shown.any():
        ax.plot(it[shown], gap[shown], marker=".", markersize=3, linewidth=1)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole
    ax.set_xlim(0.5, trace.size + 0.5)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("|objective − final| / |final|" if final != 0 else "|objective − final|")
    head = title or "objective"
    ax.set_title(f"{head}\ngap to the final value {final:.6g}", fontsize="medium")
    return fig


def save_figure(fig, path, dpi: int = 110) -> Path:
    """Write ``fig`` as a PNG at ``path`` and close it; returns the path."""
    path = Path(path)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
