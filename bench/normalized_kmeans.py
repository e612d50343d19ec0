"""Kernel k-means on the learned kernel against the cosine-normalised kernel (issue 3).

``python bench/normalized_kmeans.py [--datasets ...] [--reps R] [--labelled F ...]
[--methods ...]``

For each data set of the paper harness and each repetition, the harness's own inputs
(``bench.paper.run.task_inputs``: data, kNN graph, constraints) with the labels of only a
fraction F of the points available to the constraint sampler (``--labelled``; 1.0 is the
papers' protocol, where about 9% of the points are still in no constraint), learn each
method's kernel with the harness's settings and cluster it twice with the true number of
classes and the harness's 10 restarts: kernel k-means on V (the papers' rule) and on the unit
rows of V (``kernel_kmeans(..., normalize=True)``). Prints pairwise (Rand) accuracy in %,
mean ± std, and the median row length of the points in no constraint over that of the
constrained points.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

METHODS = {"SimpleNPKL-linear": ("simplenpkl", "linear"),
           "SimpleNPKL-sqhinge": ("simplenpkl", "squared_hinge"),
           "BCD-square": ("bcd", "square"), "BCD-linear": ("bcd", "linear")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=[
        "soybean", "chessboard", "dbl-spiral", "iris", "wine", "sonar", "glass", "heart",
        "breast-cancer"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--labelled", type=float, nargs="+", default=[1.0])
    ap.add_argument("--methods", nargs="+", default=["SimpleNPKL-linear", "SimpleNPKL-sqhinge"],
                    choices=sorted(METHODS))
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper.run import task_inputs

    threadpool_limits(1, user_api="blas")
    warnings.simplefilter("ignore")
    print("| data set | labelled | method | in no constraint | row length, free / constrained "
          "| kernel k-means (%) | normalised (%) |")
    print("|:---|---:|:---|---:|---:|---:|---:|")
    for name in args.datasets:
        for frac in args.labelled:
            rows = {m: [] for m in args.methods}
            for rep in range(args.reps):
                X, y, meta, L, cons, _ = task_inputs(name, rep)
                k = int(np.unique(y).size)
                if frac < 1.0:
                    part = y.astype(np.int64).copy()
                    hide = np.random.default_rng(rep).choice(
                        y.size, int(round((1 - frac) * y.size)), replace=False)
                    part[hide] = -1
                    cons = nk.sample_constraints(part, seed=rep)
                free = np.ones(y.size, bool)
                free[cons.i] = False
                free[cons.j] = False
                for m in args.methods:
                    solver, loss = METHODS[m]
                    P = nk.NPKLProblem.build(L, cons, loss=loss, seed=rep)
                    if solver == "simplenpkl":
                        V = nk.fit_simplenpkl(P, B=100.0).V
                    else:
                        V = nk.fit_bcd(P, max_sweeps=1000, tol=1e-5, trace=False,
                                       method="sweeps").V
                    norms = np.linalg.norm(V, axis=1)
                    ratio = (np.median(norms[free]) / np.median(norms[~free])
                             if free.any() else np.nan)
                    acc = [nk.clustering_metrics(y, nk.kernel_kmeans(V, k, seed=rep,
                                                                     normalize=u))
                           ["rand_accuracy"] for u in (False, True)]
                    rows[m].append((free.mean(), ratio, *acc))
            for m, v in rows.items():
                v = np.array(v)
                print(f"| {name} | {frac:g} | {m} | {100 * v[:, 0].mean():.1f}% | "
                      f"{np.nanmean(v[:, 1]):.2f} | {100 * v[:, 2].mean():.2f} ± "
                      f"{100 * v[:, 2].std():.2f} | {100 * v[:, 3].mean():.2f} ± "
                      f"{100 * v[:, 3].std():.2f} |", flush=True)


if __name__ == "__main__":
    main()
