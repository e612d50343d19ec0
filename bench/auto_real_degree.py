"""Companion of bench/auto_real.py: does the kNN graph's degree tell the problems where plain
sweeps are slow (digits) from those where they are fast (adult, the mixture)?

    python bench/auto_real_degree.py DATASET K    # DATASET: digits, mixture, or a paper set

One run of ``auto_real.measure`` at the papers' protocol with the square loss and a kNN graph
of K neighbours; prints iterations and seconds (iterations only) to the 1e-4 and 1e-5 gaps.
The mixture is bench_block's (2,000 points, 10 clusters in 8-D).
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist as nk  # noqa: E402
from bench import auto_real  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402


def features(which):
    if which == "digits":
        from sklearn.datasets import load_digits
        from sklearn.preprocessing import StandardScaler

        X, y = load_digits(return_X_y=True)
        return StandardScaler().fit_transform(X), y
    if which == "mixture":
        from sklearn.datasets import make_blobs

        return make_blobs(2000, n_features=8, centers=10, cluster_std=2.0, random_state=0)
    from bench.paper.run import prepare_data

    X, y, _ = prepare_data(which)
    return X, y


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit() or int(argv[1]) < 1:
        sys.exit(f"usage: python bench/auto_real_degree.py DATASET K (K a positive count), "
                 f"got {argv}")
    which, k = argv[0], int(argv[1])
    warnings.simplefilter("ignore")
    X, y = features(which)
    L = nk.knn_graph(X, k, seed=0, warn=False).laplacian(1e-3)
    P = nk.NPKLProblem.build(L, nk.sample_constraints(y, seed=0), loss="square", seed=0)
    gaps = (1e-4, 1e-5)
    out = auto_real.measure(P, InProcessExecutor(1), list(gaps), 1, 5000, 3000, 5000)
    deg = (L.nnz - L.shape[0]) / L.shape[0]
    parts = []
    for g in gaps:
        s, b = out[("sweeps", g, "t_steps")], out[("block", g, "t_steps")]
        parts.append(f"gap {g:g}: sweeps {out[('sweeps', g, 'iters')]} its {s:.3f} s, block "
                     f"{out[('block', g, 'iters')]} its {b:.3f} s, ratio {s / b:.2f}")
    print(f"{which} k={k} n={P.n_points} mean degree {deg:.1f} rank {P.rank}: "
          + "; ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
