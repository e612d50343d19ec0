"""Development set for pck_kmeans's defaults (issue 75, item 9): scikit-learn's digits.

The defaults of ``npkl_dist.pck_kmeans`` (the weight, and whether to penalise the
constraints' transitive closure) are checked here, on a data set that is not among the ten
of ``bench/pck_clustering.py``, never on those. Protocol (the paper harness's, on digits):
features scaled to [-1, 1] per column, kNN graph k = 5 (``knn_graph(..., seed=rep)``,
Laplacian with delta = 1e-3), 0.6n must-link + 0.6n cannot-link random pairs
(``sample_constraints(y, seed=rep)``), BCD with the linear loss (``--loss``: square is the
loss ``npkl fit`` learns by default) at gamma = 1 and the harness's options
(``bench.paper.run.bcd_options``); each repetition clusters its V with kernel k-means
and with pck at every weight, on the pairs as given and on their closure, with the kernel
``npkl fit`` would cluster (``choose_normalize``). Pairwise (Rand) accuracy, mean +- std over
the repetitions.

Usage::

    python bench/pck_dev.py --reps 5 --weights 0 0.25 0.5 1 2 4 8

writes ``bench/results/pck_dev.json`` (``pck_dev_square.json`` with ``--loss square``) (data, not a table of docs/performance.md: the figures
are in docs/decisions/constrained-clustering.md). It rebuilds the script the record cited as
``f2ea881:bench/pck_weight_dev.py``, a commit that did not reach the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VARIANTS = ("pairs", "closure")


def digits_inputs(rep):
    """Repetition ``rep``'s (X, y, L, constraints) at the harness's protocol."""
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import MinMaxScaler
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk

    X, y = load_digits(return_X_y=True)
    X = MinMaxScaler((-1, 1)).fit_transform(X)
    with threadpool_limits(limits=1, user_api="openmp"):  # as bench.paper.run.task_inputs
        graph = nk.knn_graph(X, 5, seed=rep, warn=False)
    return X, y, graph.laplacian(1e-3), nk.sample_constraints(y, seed=rep)


def one_rep(rep, weights, variants=VARIANTS, loss="linear"):
    """Repetition ``rep``: {"kmeans": acc, "pairs": {weight: acc}, "closure": {...},
    "fit_seconds", "normalize"}."""
    import numba
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper.run import bcd_options
    from npkl_dist.evaluate import choose_normalize

    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    warnings.simplefilter("ignore")
    X, y, L, cons = digits_inputs(rep)
    k = int(np.unique(y).size)
    t0 = time.perf_counter()
    p = nk.NPKLProblem.build(L, cons, loss=loss, seed=rep)
    V = nk.fit_bcd(p, **bcd_options(False)).V
    out = {"fit_seconds": time.perf_counter() - t0}
    unit = choose_normalize(None, cons, V)
    out["normalize"] = bool(unit)

    def acc(labels):
        return nk.clustering_metrics(y, labels)["rand_accuracy"]

    out["kmeans"] = acc(nk.kernel_kmeans(V, k, seed=rep, normalize=unit))
    for variant in variants:
        out[variant] = {}
        for wt in weights:
            t0 = time.perf_counter()
            labels = nk.pck_kmeans(
                V, k, cons, seed=rep, normalize=unit, weight=wt, closure=variant == "closure"
            )
            out[variant][str(wt)] = (acc(labels), time.perf_counter() - t0)
    return rep, out


def _ms(values):
    v = 100 * np.asarray(values, dtype=float)
    return f"{v.mean():.2f} ± {v.std():.2f}"


def main(argv=None):
    from bench import _results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--weights", type=float, nargs="+", default=[1.0])
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--loss",
        choices=("linear", "square"),
        default="linear",
        help="BCD's loss (linear: the recorded run; square: npkl fit's default kernel)",
    )
    ap.add_argument("--json", default=None, help="output path (default bench/results/)")
    args = ap.parse_args(argv)
    per = {}
    with ProcessPoolExecutor(args.workers) as pool:
        futs = [
            pool.submit(one_rep, r, args.weights, args.variants, args.loss)
            for r in range(args.reps)
        ]
        for f in futs:
            rep, out = f.result()
            per[rep] = out
            print(rep, out, file=sys.stderr, flush=True)
    reps = sorted(per)
    rows = [
        {"method": "kmeans", "weight": None, "accuracy": _ms([per[r]["kmeans"] for r in reps])}
    ]
    for variant in args.variants:
        for wt in args.weights:
            cell = [per[r][variant][str(wt)] for r in reps]
            rows.append(
                {
                    "method": f"pck ({variant})",
                    "weight": wt,
                    "accuracy": _ms([c[0] for c in cell]),
                    "seconds": float(np.mean([c[1] for c in cell])),
                }
            )
    for row in rows:
        print(row)
    _results.write(
        "pck_dev" if args.loss == "linear" else f"pck_dev_{args.loss}",
        title="pck_kmeans defaults on the development set (digits)",
        measures="pairwise (Rand) accuracy in %, mean ± std over repetitions",
        reference="kernel k-means on the same V",
        command=_results.command("bench/pck_dev.py", argv),
        columns=[],  # data only: the figures are in docs/decisions/constrained-clustering.md
        rows=rows,
        args=vars(args),
        path=args.json,
        extra={"per_rep": {str(r): per[r] for r in reps}},
    )


if __name__ == "__main__":
    main()
