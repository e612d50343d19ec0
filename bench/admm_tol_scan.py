"""KL-ADMM's iteration count against its stopping tolerance, on the harness's inputs.

kl-admm-ijcai2013 stops at max(Delta_primal, Delta_dual) < epsilon or IterMax (500 on the
small sets) and does not print epsilon. Its Table 2 times chessboard at 3.08 s and dbl-spiral
at 0.74 s: the same n = 100, rank 25, constraint count and IterMax, so at the same cost per
iteration its dbl-spiral fit ran about 4.2x fewer iterations than its chessboard fit. This
runs ``fit_admm`` (the harness's settings: rho = 100, eq. 15, K_ii = 1 targets) without the
cap at each ``--tols`` value and prints, per data set and tolerance, the iteration counts,
the pairwise accuracy and the final objective, to show whether any one tolerance gives that
ratio between the two data sets.

``--paper-eps`` also applies the paper's own rule, max(||V - U||, rho ||V(k+1) - V(k)||) <
epsilon on the unscaled residuals, to the iterates of one run per repetition: the
iterates do not depend on the stopping rule, so each rule's stopping iteration is the first
one of that run's traces that meets it.

Usage::

    python bench/admm_tol_scan.py [--datasets chessboard dbl-spiral] [--tols 1e-4 3e-4 1e-3]
                                  [--reps 5] [--paper-eps 1 0.1 0.01]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _problem(name, rep):
    """(labels, KL-ADMM problem) of the harness's repetition ``rep`` of ``name``."""
    import npkl_dist as nk
    from bench.paper.run import task_inputs

    _, y, _, L, _, cons_diag = task_inputs(name, rep)
    return y, nk.NPKLProblem.build(L, cons_diag, loss="square", seed=rep)


def scan(name, tol, reps, max_iter):
    """[(iterations, rand accuracy, objective, seconds)] per repetition."""
    import npkl_dist as nk
    from npkl_dist._admm import fit_admm

    out = []
    for rep in range(reps):
        y, p = _problem(name, rep)
        t0 = time.perf_counter()
        res = fit_admm(p, max_iter=max_iter, tol=tol)
        sec = time.perf_counter() - t0
        labels = nk.kernel_kmeans(res.V, int(np.unique(y).size), seed=rep)
        out.append((res.n_sweeps, nk.clustering_metrics(y, labels)["rand_accuracy"],
                    res.objective, sec))
    return out


def paper_rule(name, eps_list, reps, max_iter):
    """{eps: [first iteration meeting max(primal, dual) < eps, or None]} over repetitions
    (1-based iteration counts, as ``n_sweeps``)."""
    from npkl_dist._admm import fit_admm

    out = {eps: [] for eps in eps_list}
    for rep in range(reps):
        res = fit_admm(_problem(name, rep)[1], max_iter=max_iter, tol=1e-300)  # to the cap: traces only
        worst = np.maximum(res.primal_trace, res.dual_trace)
        for eps in eps_list:
            hit = np.flatnonzero(worst < eps)
            out[eps].append(int(hit[0]) + 1 if hit.size else None)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["chessboard", "dbl-spiral"])
    ap.add_argument("--tols", nargs="+", type=float, default=[1e-4, 3e-4, 1e-3])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-iter", type=int, default=5000,
                    help="a cap far above the paper's 500, so the tolerance decides")
    ap.add_argument("--paper-eps", nargs="*", type=float, default=[],
                    help="epsilons of the paper's absolute rule to evaluate (runs to "
                         "--paper-max-iter iterations per repetition)")
    ap.add_argument("--paper-max-iter", type=int, default=2000)
    args = ap.parse_args(argv)
    if args.reps < 1 or args.max_iter < 1 or any(t <= 0 for t in args.tols):
        ap.error("--reps and --max-iter must be positive, --tols > 0")
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    warnings.simplefilter("ignore")
    rows = {}
    for name in args.datasets:
        for tol in args.tols:
            rows[(name, tol)] = scan(name, tol, args.reps, args.max_iter)
    print("| data set | tol | iterations per repetition | median | accuracy (%) | "
          "objective (median) | median ms |")
    print("|---|---|---|---:|---:|---:|---:|")
    for (name, tol), r in rows.items():
        its = [x[0] for x in r]
        print(f"| {name} | {tol:g} | {', '.join(map(str, its))} | {np.median(its):.0f} | "
              f"{100 * np.mean([x[1] for x in r]):.2f} | {np.median([x[2] for x in r]):.4g} | "
              f"{1e3 * np.median([x[3] for x in r]):.1f} |")
    for tol in args.tols:
        med = {n: np.median([x[0] for x in rows[(n, tol)]]) for n in args.datasets}
        if len(med) == 2:
            a, b = args.datasets
            print(f"\ntol {tol:g}: {a} / {b} median iterations = {med[a] / med[b]:.2f}")
    if args.paper_eps:
        print(f"\nThe paper's rule, max(||V - U||, rho ||dV||) < eps (first iteration; '>' = "
              f"not within {args.paper_max_iter}):\n")
        print("| data set | eps | iterations per repetition |")
        print("|---|---|---|")
        for name in args.datasets:
            hits = paper_rule(name, args.paper_eps, args.reps, args.paper_max_iter)
            for eps, its in hits.items():
                cells = [str(i) if i is not None else f">{args.paper_max_iter}" for i in its]
                print(f"| {name} | {eps:g} | {', '.join(cells)} |")


if __name__ == "__main__":
    main()
