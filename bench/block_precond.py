"""Block solves with precond='amg-plain' (a full V-cycle) against 'amg-additive' (the finest
level additive): outer iterations and seconds to the 1e-4 gap on bench_block's problems.

``python bench/block_precond.py N THREADS FRACTIONS LOSSES MAX_OUTER``, e.g.
``python bench/block_precond.py 100000 2 0.001,0.01,0.1 square,squared_hinge,hinge 400``

Each case fits with both preconditioners to a scaled KKT residual of 1e-7 (or MAX_OUTER
outer iterations); f* is the lower of the two final objectives; the time to the gap counts
from the call of fit_bcd (set-up included), as bench_block does. Prints a markdown table.
"""

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist  # noqa: E402
from bench.bench_block import constraints_for, graph_for, iters_to_gap, time_to_gap  # noqa: E402
from npkl_dist import NPKLProblem, fit_bcd  # noqa: E402


def main(argv):
    n, threads = int(argv[0]), int(argv[1])
    fractions, losses, max_outer = argv[2].split(","), argv[3].split(","), int(argv[4])
    warnings.simplefilter("ignore")
    S, y, _ = graph_for(n)
    L = npkl_dist.laplacian(S, 1e-3)
    ex = npkl_dist.executors.InProcessExecutor(threads)
    warm = NPKLProblem.build(L, constraints_for(y, "0.01"), loss="square", rank=16, seed=0)
    for pre in ("amg-plain", "amg-additive"):  # compile
        fit_bcd(warm, method="block", precond=pre, max_sweeps=1, executor=ex)
    print(f"n = {n:,}, {threads} thread(s), gap 1e-4")
    print("| fraction | loss | amg-plain: outer, s to gap | amg-additive: outer, s to gap "
          "| ratio |")
    print("|---|---|---|---|---|")
    for frac in fractions:
        for loss in losses:
            P = NPKLProblem.build(L, constraints_for(y, frac), loss=loss, gamma=1.0, rank=16,
                                  seed=0)
            runs = {pre: fit_bcd(P, method="block", precond=pre, max_sweeps=max_outer,
                                 tol=1.0, tol_kkt=1e-7, executor=ex)
                    for pre in ("amg-plain", "amg-additive")}
            f_star = min(min(r.objective_trace) for r in runs.values())
            cells = [(iters_to_gap(r, f_star, 1e-4), time_to_gap(r, f_star, 1e-4))
                     for r in runs.values()]
            (ia, ta), (ib, tb) = cells
            ratio = f"{ta / tb:.2f}" if ta and tb else "-"
            fmt = lambda t: "-" if t is None else f"{t:.2f}"  # noqa: E731
            print(f"| {frac} | {loss} | {ia}, {fmt(ta)} | {ib}, {fmt(tb)} | {ratio} |",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
