"""SimpleNPKL's fast path: dense eigh vs ARPACK on small data sets (the _FAST_DENSE_MAX_N choice).

For each data set (bench/paper/run.py repetition 0, kNN k = 5, B = 100), whole
``fit_simplenpkl`` fits with the linear and squared hinge losses, with the fast path's dense
threshold set to 0 (ARPACK always) and to ``--dense-max-n`` (dense eigh up to that many
points); median of ``--runs`` after a warm-up. Prints one line per data set.

Usage::

    python bench/simplenpkl_dense_threshold.py soybean chessboard iris wine sonar glass heart
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist as nk  # noqa: E402
from bench.paper.run import prepare_data  # noqa: E402
from npkl_dist import _simplenpkl as snp  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--dense-max-n", type=int, default=400)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    for name in args.datasets:
        X, y, meta = prepare_data(name)
        g = nk.knn_graph(X, 5, seed=0, warn=False)
        cons = nk.sample_constraints(y, seed=0)
        L = g.laplacian(1e-3)
        out = []
        for loss in ("linear", "squared_hinge"):
            p = nk.NPKLProblem.build(L, cons, loss=loss, seed=0)
            for thr in (0, args.dense_max_n):
                snp._FAST_DENSE_MAX_N = thr
                snp.fit_simplenpkl(p, B=100.0)
                ts = []
                for _ in range(args.runs):
                    t0 = time.perf_counter()
                    r = snp.fit_simplenpkl(p, B=100.0)
                    ts.append(time.perf_counter() - t0)
                out.append(f"{loss} dense<={thr}: {np.median(ts) * 1e3:.1f} ms "
                           f"({r.n_sweeps} it)")
        print(name, X.shape[0], " | ".join(out), flush=True)


if __name__ == "__main__":
    main()
