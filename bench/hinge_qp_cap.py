"""BCD with the hinge loss on the paper harness's inputs: fit time, objective, iterations and
Rand accuracy per repetition, one BLAS and one numba thread (the harness's options,
``bench.paper.run.bcd_options``). For an A/B of a solver change, run it once per tree with
PYTHONPATH at a worktree of each commit (the row QP's phase-1 cap: 30a7175 against its
parent), e.g.

    PYTHONPATH=<tree> python bench/hinge_qp_cap.py --reps 3 soybean iris glass heart
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench.*


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import numba
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper.run import bcd_options, task_inputs
    from npkl_dist.executors import InProcessExecutor

    threadpool_limits(1, "blas")
    numba.set_num_threads(1)
    ex = InProcessExecutor(1)
    print(f"npkl_dist: {os.path.dirname(nk.__file__)}")
    p0 = nk.NPKLProblem.build(*task_inputs("soybean", 0)[3:5], loss="hinge", seed=0)
    nk.fit_bcd(p0, **bcd_options(False, ex))  # compile / load the kernels, untimed
    print("| data set | rep | fit (s) | objective | iterations | Rand accuracy |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.datasets:
        for rep in range(args.reps):
            X, y, meta, L, cons, cons_diag = task_inputs(name, rep)
            k = int(np.unique(y).size)
            p = nk.NPKLProblem.build(L, cons, loss="hinge", seed=rep)
            t0 = time.perf_counter()
            res = nk.fit_bcd(p, **bcd_options(meta.get("knn", 5) == 50, ex))
            t = time.perf_counter() - t0
            acc = nk.clustering_metrics(y, nk.kernel_kmeans(res.V, k, seed=rep))
            print(f"| {name} | {rep} | {t:.3f} | {res.objective:.10g} | "
                  f"{len(res.objective_trace)} | {acc['rand_accuracy']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
