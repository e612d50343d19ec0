"""``npkl demo``: the main job end to end on scikit-learn's handwritten digits."""

from __future__ import annotations

import json
import sys

import numpy as np

from npkl_dist import clustering_metrics, kernel_kmeans, plotting
from npkl_dist._compile_watch import COMPILE_NOTICE, CompileWatch
from npkl_dist._precompile import background_compile
from npkl_dist.job._job import (
    FitConfig,
    ensure_out_dir,
    iterations_label,
    run_fit,
    write_outputs,
)


def run_demo(out_dir="demo_out", *, loss="square", seed=0, max_sweeps=500, method="auto"):
    from sklearn.datasets import load_digits  # lazy: only for the bundled datasets
    from sklearn.preprocessing import StandardScaler  # lazy: only for the bundled datasets

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    k = int(np.unique(y).size)
    out = ensure_out_dir(out_dir, "--out")
    print(f"digits: {X.shape[0]} points, {X.shape[1]} features, {k} classes", file=sys.stderr)

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

    def notice():
        print(COMPILE_NOTICE, file=sys.stderr, flush=True)

    # the whole job's compiles (baseline, graph, fit, clustering); the fit's own are also in
    # its summary (compile_seconds, included in fit_seconds)
    # a first run compiles on the idle core as well (npkl_dist._precompile)
    with background_compile(loss), CompileWatch(notice) as compiling:
        base = kernel_kmeans(X, k, seed=seed)
        base_metrics = clustering_metrics(y, base)
        summary, V, clusters = run_fit(cfg, callback=progress)
    if compiling.count:
        print(
            f"compiled numba kernels in {compiling.seconds:.1f}s (first run only; cached after)",
            file=sys.stderr,
        )
    write_outputs(out, V, clusters, summary)
    ours = summary["metrics"]

    # the same seeded 2-D layout for both panels, crosses on the points each clustering puts
    # with another class (docs/decisions/pictures.md)
    fig, axes = plotting.pyplot().subplots(1, 2, figsize=(15, 6.5), layout="constrained")
    plotting.embedding_figure(
        X,
        labels=y,
        clusters=base,
        metrics=base_metrics,
        seed=seed,
        ax=axes[0],
        title="input features, plain k-means",
        rows_name="standardised features",
    )
    plotting.embedding_figure(
        V,
        labels=y,
        clusters=clusters,
        metrics=ours,
        normalize=bool(summary.get("normalize_kernel")),
        seed=seed,
        ax=axes[1],
        title="learned kernel K = V'V, npkl + kernel k-means",
    )
    fig.suptitle(
        f"npkl-dist on digits: {summary['n_constraints']} pairwise constraints "
        f"({summary['n_must']} must-link, {summary['n_cannot']} cannot-link), "
        f"{loss} loss, rank {summary['rank']}"
    )
    png = plotting.save_figure(fig, out / "embedding.png")

    fit_compile = summary["compile_seconds"]
    report = {
        "kmeans": base_metrics,
        "npkl": ours,
        "fit_seconds": summary["fit_seconds"],
        "fit_compile_seconds": fit_compile,
        "compile_seconds": compiling.seconds,
        "kernels_compiled": compiling.count,
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
        f"({iterations_label(summary)}, {summary['fit_seconds'] - fit_compile:.2f}s"
        f"{f' + {fit_compile:.1f}s compiling' if fit_compile else ''}"
        f"{'' if summary['converged'] else ', not converged'})"
    )
    print(f"wrote {png}, {out / 'embedding.npy'}, {out / 'clusters.npy'}, {out / 'demo.json'}")
    return report
