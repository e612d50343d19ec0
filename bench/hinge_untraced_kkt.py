"""Untraced hinge block fits without the per-iteration KKT terms (issue 6).

``python bench/hinge_untraced_kkt.py PROBLEM [PROBLEM ...] [--runs R]``

An untraced block fit of the hinge still evaluates the objective after every outer
iteration (the joint moves' cost-benefit schedule reads it), and until commit a6bfa4e it
computed the scaled KKT residual with it: the per-row box QPs of the hinge. A traced fit
(``trace=True``) still does, and its iterates are bitwise those of the untraced fit
(``tests/test_fit_trace.py``), so the two modes, alternated in one process, measure what
skipping those terms saves. Medians of ``--runs``; one thread; default stop and cap.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    import numba
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.auto_default_fit import problem
    from npkl_dist.executors import InProcessExecutor

    numba.set_num_threads(1)
    threadpool_limits(1, user_api="blas")
    warnings.simplefilter("ignore")
    print("| problem | n | outer its | untraced (s) | traced, KKT each iteration (s) | ratio |")
    print("|:---|---:|---:|---:|---:|---:|")
    for name in args.problems:
        P = problem(name, "hinge")
        ex = InProcessExecutor(n_threads=1)
        nk.fit_bcd(P, method="block", max_sweeps=3, executor=ex)  # compile, warm up
        times = {False: [], True: []}
        res = {}
        for _ in range(args.runs):
            for traced in (False, True):
                t = time.perf_counter()
                res[traced] = nk.fit_bcd(P, method="block", trace=traced, executor=ex)
                times[traced].append(time.perf_counter() - t)
        if not np.array_equal(res[False].V, res[True].V):
            raise SystemExit(f"{name}: traced and untraced iterates differ")
        a, b = np.median(times[False]), np.median(times[True])
        print(f"| {name} | {P.n_points:,} | {res[False].n_sweeps} | {a:.2f} | {b:.2f} | "
              f"{b / a:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
