"""SimpleNPKL when most points are in no constraint: the free points' row length, and
kernel k-means on the normalised kernel at several gamma and at gamma by cross-validation.

``python bench/simplenpkl_free_points.py [--gammas G ...]``

Cases: five Gaussian blobs in 10-D (scikit-learn's ``make_blobs``, cluster_std 4) of 3000,
5000 and 20000 points with 10%, 5% and 5% of the labels available to the constraint sampler,
and wine and iris (raw features) with 50% and 25%. Constraints: ``sample_constraints``
(0.6n + 0.6n pairs from the labelled points, seed 0); graph: 5-NN, delta 1e-3; SimpleNPKL
with the linear loss. Prints, for each gamma, the share of points in no constraint, the median
row length of the free points over the constrained points', and the ARI of kernel k-means on
the unit rows of V (``kernel_kmeans(V, k, normalize=True)``, seed 0) against the true classes;
last, the gamma that ``select_gamma`` picks (the job's ``gamma="cv"`` with ``normalize_kernel``,
3 folds, grid 0.1, 1, 10, 100) and its ARI.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cases():
    from sklearn.datasets import load_iris, load_wine, make_blobs

    for n, frac in ((3000, 0.1), (5000, 0.05), (20000, 0.05)):
        X, y = make_blobs(n, n_features=10, centers=5, cluster_std=4, random_state=0)
        yield f"blobs-{n}", X, y, frac
    for name, load in (("wine", load_wine), ("iris", load_iris)):
        X, y = load(return_X_y=True)
        for frac in (0.5, 0.25):
            yield name, X, y, frac


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gammas", type=float, nargs="+", default=[1.0, 0.1, 0.01])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import npkl_dist as nk
    from bench.paper.report import machine
    from npkl_dist._job import FitConfig, run_fit

    print(f"machine: {machine()}; command: python bench/simplenpkl_free_points.py "
          f"{' '.join(argv if argv is not None else sys.argv[1:])}\n")
    head = " | ".join(f"gamma {g:g}: row ratio, ARI" for g in args.gammas)
    print(f"| case | labelled | free | {head} | gamma by CV: gamma, ARI (s) |")
    print("|---|---:|---:|" + "---|" * len(args.gammas) + "---|")
    for name, X, y, frac in cases():
        part = y.copy()
        part[np.random.default_rng(0).random(y.size) > frac] = -1
        k = int(np.unique(y).size)
        cons = nk.sample_constraints(part, seed=0)
        L = nk.knn_graph(X, 5, warn=False).laplacian(1e-3)
        free = np.ones(y.size, dtype=bool)
        free[cons.i] = False
        free[cons.j] = False
        cells = []
        for g in args.gammas:
            V = nk.fit_simplenpkl(nk.NPKLProblem.build(L, cons, loss="linear", gamma=g)).V
            norms = np.linalg.norm(V, axis=1)
            ratio = float(np.median(norms[free]) / np.median(norms[~free]))
            ari = nk.clustering_metrics(y, nk.kernel_kmeans(V, k, seed=0, normalize=True))["ari"]
            cells.append(f"{ratio:.3g}, {ari:.3f}")
        t0 = time.perf_counter()
        s, _, _ = run_fit(FitConfig(X=X, y_constraints=part, y_eval=y, solver="simplenpkl",
                                    loss="linear", gamma="cv", normalize_kernel=True,
                                    clusters=k))
        cells.append(f"{s['gamma']:g}, {s['metrics']['ari']:.3f} ({time.perf_counter() - t0:.1f})")
        print(f"| {name} | {frac:g} | {free.mean():.2f} | " + " | ".join(cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()
