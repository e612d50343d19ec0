"""``npkl demo``: the main job end to end on scikit-learn's handwritten digits."""

from __future__ import annotations

import json
import sys

import numpy as np

from npkl_dist import clustering_metrics, kernel_kmeans
from npkl_dist.job._job import (
    FitConfig,
    ensure_out_dir,
    iterations_label,
    run_fit,
    write_outputs,
)


def _kernel_pca_2d(V):
    """Top-2 kernel principal components of K = V V' (centred), from V alone."""
    Vc = V - V.mean(axis=0)
    U, s, _ = np.linalg.svd(Vc, full_matrices=False)
    return U[:, :2] * s[:2]


def run_demo(out_dir="demo_out", *, loss="square", seed=0, max_sweeps=500, method="auto"):
    import matplotlib  # lazy: only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: only when a figure is drawn
    from sklearn.datasets import load_digits  # lazy: only for the bundled datasets
    from sklearn.preprocessing import StandardScaler  # lazy: only for the bundled datasets

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    k = int(np.unique(y).size)
    out = ensure_out_dir(out_dir, "--out")
    print(f"digits: {X.shape[0]} points, {X.shape[1]} features, {k} classes", file=sys.stderr)

    base = kernel_kmeans(X, k, seed=seed)
    base_metrics = clustering_metrics(y, base)

    def progress(sweep, obj, change, seconds):
        if sweep % 20 == 0 or sweep == 1:
            print(
                f"  iteration {sweep:>4}  objective {obj:.6g}  change {change:.2e}",
                file=sys.stderr,
            )

    cfg = FitConfig(
        X=X,
        y_constraints=y,
        y_eval=y,
        loss=loss,
        seed=seed,
        max_sweeps=max_sweeps,
        knn=5,
        clusters=k,
        method=method,
    )
    summary, V, clusters = run_fit(cfg, callback=progress)
    write_outputs(out, V, clusters, summary)
    ours = summary["metrics"]

    fig, axes = plt.subplots(1, 2, figsize=(12, 6), layout="constrained")
    for ax, Z, title in (
        (
            axes[0],
            _kernel_pca_2d(X),
            f"input features (PCA)\nk-means pairwise accuracy {base_metrics['rand_accuracy']:.3f}",
        ),
        (
            axes[1],
            _kernel_pca_2d(V),
            f"learned kernel K = V'V (kernel PCA)\nnpkl + kernel "
            f"k-means pairwise accuracy {ours['rand_accuracy']:.3f}",
        ),
    ):
        sc = ax.scatter(Z[:, 0], Z[:, 1], c=y, cmap="tab10", s=6)
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(sc, ax=axes, label="true digit", ticks=range(10))
    fig.suptitle(
        f"npkl-dist on digits: {summary['n_constraints']} pairwise constraints "
        f"({summary['n_must']} must-link, {summary['n_cannot']} cannot-link), "
        f"{loss} loss, rank {summary['rank']}"
    )
    png = out / "embedding.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)

    report = {
        "kmeans": base_metrics,
        "npkl": ours,
        "fit_seconds": summary["fit_seconds"],
        "n_sweeps": summary["n_sweeps"],
        "rank": summary["rank"],
        "method": summary["method"],
        "converged": summary["converged"],
    }
    (out / "demo.json").write_text(json.dumps(report, indent=2))
    print(
        f"plain k-means   pairwise accuracy {base_metrics['rand_accuracy']:.4f}  "
        f"ARI {base_metrics['ari']:.4f}  NMI {base_metrics['nmi']:.4f}"
    )
    how = "block solves" if summary["method"] == "block" else "plain sweeps"
    print(
        f"npkl (BCD {how}, {loss}) pairwise accuracy {ours['rand_accuracy']:.4f}  "
        f"ARI {ours['ari']:.4f}  NMI {ours['nmi']:.4f}  "
        f"({iterations_label(summary)}, {summary['fit_seconds']:.2f}s"
        f"{'' if summary['converged'] else ', not converged'})"
    )
    print(f"wrote {png}, {out / 'embedding.npy'}, {out / 'clusters.npy'}, {out / 'demo.json'}")
    return report
