"""KL-ADMM with and without Anderson acceleration on the papers' data sets (the harness's
protocol: its graph, constraints with K_ii = 1, gamma = 1, r from the Pataki bound, IterMax
500 or 100 on adult, tol 1e-4), one BLAS and one numba thread.

For each data set and repetition: iterations, fit time (median of --runs), the objective
against a long accelerated reference (tol 1e-7, --ref-iters iterations), the Rand index of
kernel k-means on V, and when the accelerated fit first reached the plain fit's final
objective (iterations; time from a separate run whose callback timestamps each iteration,
so it includes the callback's overhead). Usage:

    python bench/admm_anderson.py [--datasets ...] [--reps R] [--runs K] [--memory M]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SMALL = ["soybean", "chessboard", "dbl-spiral", "iris", "wine", "sonar", "glass", "heart"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=SMALL)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory", type=int, default=5)
    ap.add_argument("--ref-iters", type=int, default=20000,
                    help="the reference fit's cap (tol 1e-7); the gap is to the lowest "
                         "objective of the three fits")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import numba
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper.report import machine
    from bench.paper.run import task_inputs
    from npkl_dist._admm import fit_admm
    from npkl_dist.executors import InProcessExecutor

    threadpool_limits(limits=1, user_api="blas")
    numba.set_num_threads(1)
    ex = InProcessExecutor(1)
    print(f"machine: {machine()}; command: python bench/admm_anderson.py "
          f"{' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print("| data set | rep | plain: its | AA: its (rejected) | plain: ms | AA: ms | speed-up "
          "| plain: gap | AA: gap | Rand plain / AA | AA to plain's objective: its, ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    speedups = []
    for name in args.datasets:
        for rep in range(args.reps):
            X, y, meta, L, cons, cons_diag = task_inputs(name, rep)
            k = int(np.unique(y).size)
            adult = meta.get("knn", 5) == 50
            kw = {"max_iter": 100 if adult else 500, "tol": 1e-4, "executor": ex}
            ref = fit_admm(nk.NPKLProblem.build(L, cons_diag, loss="square", seed=rep),
                           max_iter=args.ref_iters, tol=1e-7, executor=ex,
                           anderson=args.memory)
            out = {}
            for m in (0, args.memory):
                ts = []
                for _ in range(args.runs):
                    p = nk.NPKLProblem.build(L, cons_diag, loss="square", seed=rep)
                    t0 = time.perf_counter()
                    res = fit_admm(p, anderson=m, **kw)
                    ts.append(time.perf_counter() - t0)
                rand = nk.clustering_metrics(y, nk.kernel_kmeans(res.V, k, seed=rep))
                out[m] = (res, float(np.median(ts)), rand["rand_accuracy"])
            f = min(ref.objective, out[0][0].objective, out[args.memory][0].objective)
            (r0, t0_, a0), (r1, t1, a1) = out[0], out[args.memory]
            stamps = []
            p = nk.NPKLProblem.build(L, cons_diag, loss="square", seed=rep)
            tstart = time.perf_counter()
            fit_admm(p, anderson=args.memory, callback=lambda it, obj, *_: stamps.append(
                (it, obj, time.perf_counter() - tstart)), **kw)
            hit = next(((it, t) for it, obj, t in stamps if obj <= r0.objective), None)
            reach = "not reached" if hit is None else f"{hit[0]}, {hit[1] * 1e3:.1f}"
            speedups.append(t0_ / t1)
            print(f"| {name} | {rep} | {r0.n_sweeps}{'' if r0.converged else ' (cap)'} | "
                  f"{r1.n_sweeps}{'' if r1.converged else ' (cap)'} ({r1.anderson_rejected}) | "
                  f"{t0_ * 1e3:.1f} | {t1 * 1e3:.1f} | {t0_ / t1:.2f}x | "
                  f"{(r0.objective - f) / f:.1e} | {(r1.objective - f) / f:.1e} | "
                  f"{a0:.4f} / {a1:.4f} | {reach} |", flush=True)
    print(f"\nmedian speed-up {np.median(speedups):.2f}x over {len(speedups)} fits")


if __name__ == "__main__":
    main()
