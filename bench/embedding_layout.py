"""Benchmark: does the picture's 2-D layout show the cluster structure the metrics report?

``npkl demo`` fits digits (1797 points, 10 classes) to a kernel whose clusters score a
pairwise accuracy of 0.99; its picture used to be the top two kernel principal components,
where the classes overlap. This fits the demo's problem exactly as the demo does, then lays
the rows that were clustered out in 2-D by each method of ``npkl_dist.plotting.layout_2d``
(and scikit-learn's spectral embedding, the other cheap candidate) and measures how well
each 2-D picture keeps the classes apart:

* ``knn_acc``: 10-nearest-neighbour accuracy of the true labels in the layout (5-fold);
* ``silhouette``: the silhouette of the true labels in the layout;
* wall and CPU seconds of the layout.

The reference, in the same run: the same two measures in the rank-r rows themselves (what
kernel k-means saw), and the clustering metrics. A last row times t-SNE at its subsample
cap (``--cap-n`` rows of a 10-class Gaussian mixture, ``max_points`` drawn).

Usage::

    python bench/embedding_layout.py

Prints the table and writes ``bench/results/embedding_layout.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import _results  # noqa: E402


def _measure(Z, y):
    from sklearn.metrics import silhouette_score
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    acc = cross_val_score(KNeighborsClassifier(10), Z, y, cv=5).mean()
    return round(float(acc), 4), round(float(silhouette_score(Z, y)), 4)


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, round(time.perf_counter() - t, 2), round(time.process_time() - c, 2)


def _figure(layouts, y, table, png):
    """The candidate layouts side by side, coloured by the true digit (what the numbers
    alone do not show: whether the classes are spread out enough to see)."""
    from npkl_dist import plotting

    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, len(layouts), figsize=(5 * len(layouts), 5), layout="constrained")
    scores = {r["layout"]: r for r in table}
    for ax, (name, Z) in zip(axes, layouts.items()):
        ax.scatter(Z[:, 0], Z[:, 1], c=y, cmap="tab10", s=3, linewidths=0)
        r = scores[name]
        ax.set_title(f"{name}\n10-NN acc {r['knn_acc']:.3f}, silhouette {r['silhouette']:.3f}")
        ax.set_xticks([])
        ax.set_yticks([])
    plotting.save_figure(fig, png, dpi=80)
    print(f"wrote {png}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cap-n", type=int, default=20_000)
    ap.add_argument("--json", default=None, help="output path (default bench/results/)")
    args = ap.parse_args(argv)

    from sklearn.datasets import load_digits, make_blobs
    from sklearn.manifold import SpectralEmbedding
    from sklearn.preprocessing import StandardScaler

    from npkl_dist import plotting
    from npkl_dist.evaluate import unit_rows
    from npkl_dist.job._job import FitConfig, run_fit

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary, V, _ = run_fit(  # the demo's fit (flows/_demo.py)
            FitConfig(
                X=X,
                y_constraints=y,
                y_eval=y,
                loss="square",
                seed=args.seed,
                max_sweeps=500,
                knn=5,
                clusters=10,
                method="auto",
            )
        )
    unit = bool(summary["normalize_kernel"])
    rows = unit_rows(V) if unit else np.asarray(V, dtype=np.float64)
    m = summary["metrics"]
    knn_ref, sil_ref = _measure(rows, y)
    table = [
        {
            "layout": f"none: the rank-{V.shape[1]} {'unit ' if unit else ''}rows themselves",
            "n": int(V.shape[0]),
            "knn_acc": knn_ref,
            "silhouette": sil_ref,
            "wall_s": None,
            "cpu_s": None,
        }
    ]
    candidates = [
        (
            "kernel PCA (the old picture)",
            lambda: plotting.layout_2d(V, method="pca", normalize=unit, seed=args.seed)[0],
        ),
        (
            "t-SNE (layout_2d's default)",
            lambda: plotting.layout_2d(V, normalize=unit, seed=args.seed)[0],
        ),
        (
            "spectral embedding, 15-NN",
            lambda: SpectralEmbedding(2, n_neighbors=15, random_state=args.seed).fit_transform(
                rows
            ),
        ),
    ]
    layouts = {}
    for name, fn in candidates:
        Z, wall, cpu = _timed(fn)
        layouts[name] = Z
        acc, sil = _measure(Z, y)
        table.append(
            {
                "layout": name,
                "n": int(V.shape[0]),
                "knn_acc": acc,
                "silhouette": sil,
                "wall_s": wall,
                "cpu_s": cpu,
            }
        )
        print(table[-1], flush=True)
    # the demo's left panel: the same layout of the input features
    Z, wall, cpu = _timed(lambda: plotting.layout_2d(X, seed=args.seed)[0])
    acc, sil = _measure(Z, y)
    knn_x, sil_x = _measure(X, y)
    table.append(
        {
            "layout": "t-SNE of the standardised features (demo's left panel)",
            "n": int(X.shape[0]),
            "knn_acc": acc,
            "silhouette": sil,
            "wall_s": wall,
            "cpu_s": cpu,
        }
    )
    print(table[-1], flush=True)
    B, yb = make_blobs(args.cap_n, n_features=32, centers=10, random_state=args.seed)
    (Z, keep, _), wall, cpu = _timed(lambda: plotting.layout_2d(B, seed=args.seed))
    acc, sil = _measure(Z, yb[keep])
    table.append(
        {
            "layout": f"t-SNE at its cap ({keep.size} of a 10-class mixture)",
            "n": int(args.cap_n),
            "knn_acc": acc,
            "silhouette": sil,
            "wall_s": wall,
            "cpu_s": cpu,
        }
    )
    print(table[-1], flush=True)
    path = _results.write(
        "embedding_layout",
        title="2-D layouts of the learned kernel for pictures (digits, the demo's fit)",
        measures="how well each 2-D layout keeps the true classes apart (10-NN accuracy, "
        "silhouette) and its seconds",
        reference=f"the same measures in the rows kernel k-means clustered; the clusters' "
        f"pairwise accuracy {m['rand_accuracy']:.4f}, ARI {m['ari']:.4f}, NMI {m['nmi']:.4f}",
        command=_results.command("bench/embedding_layout.py", argv),
        columns=[
            ("layout", "layout"),
            ("n", "n"),
            ("knn_acc", "10-NN acc"),
            ("silhouette", "silhouette"),
            ("wall_s", "wall s"),
            ("cpu_s", "CPU s"),
        ],
        rows=table,
        notes=[
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end of "
            "the run: wall seconds include waiting for other processes; the t-SNE runs on "
            "one thread, so its CPU seconds are its wall time on an idle core",
            "picture of the three layouts: bench/results/embedding_layout.png; "
            "why t-SNE: docs/decisions/pictures.md",
        ],
        args=vars(args),
        path=args.json,
        extra={
            "fit": {"metrics": m, "rank": summary["rank"], "normalize_kernel": unit},
            "features": {"knn_acc": knn_x, "silhouette": sil_x},
        },
    )
    _figure(layouts, y, table, path.with_suffix(".png"))


if __name__ == "__main__":
    main()
