"""Benchmark: plain sweeps vs block solves on fits that stop on the default rule (issue 6).

``bench/auto_real.py`` times both methods to fixed objective gaps. A user's fit does not stop
at a gap (f* is unknown); it stops on the step-size rule, ``tol = 1e-5`` by default. This
times whole fits with that rule (at most ``--max-iters``, default 5,000 iterations; a fit
stopped there is marked '>'), traced (``trace=True``, the default, and what ``npkl fit``
runs) and untraced, medians of ``--runs`` runs, one thread, at the papers' protocol with the
square loss (``--losses`` for the squared hinge and the hinge), with each method's final
objective and scaled KKT residual (the step-size rule can fire where a fit has stalled).

Problems: ``mixture-N`` is bench_block's (10-cluster mixture in 8-D, kNN k = 10, rank 16);
``digits`` is ``npkl demo``'s; other names are the paper harness's data sets (repetition 0).

    python bench/auto_default_fit.py mixture-1000 mixture-2000 adult-a1a digits
    python bench/auto_default_fit.py iris wine glass --losses square squared_hinge
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist as nk  # noqa: E402
from bench import auto_real  # noqa: E402
from bench.paper.datasets import canonical  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402


LOSSES = ("square", "squared_hinge", "hinge")


def problem(name, loss="square"):
    if name.startswith("mixture-"):
        from bench.bench_block import constraints_for, graph_for

        S, y, _ = graph_for(int(name.split("-", 1)[1]))
        return nk.NPKLProblem.build(nk.laplacian(S, 1e-3), constraints_for(y, "protocol"),
                                    loss=loss, gamma=1.0, rank=16, seed=0)
    L, C = auto_real.inputs(name)
    return nk.NPKLProblem.build(L, C, loss=loss, gamma=1.0, seed=0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--losses", nargs="+", default=["square"], choices=LOSSES,
                    help="losses to fit with (default: square)")
    ap.add_argument("--max-iters", type=int, default=5000,
                    help="iteration cap of every fit (default 5000); a fit that stops at it "
                         "is marked '>' and its time is a lower bound")
    ap.add_argument("--untraced-only", action="store_true",
                    help="skip the traced fits (the hinge's fits take seconds each)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs: expected a positive count, got {args.runs}")
    if args.max_iters < 1:
        ap.error(f"--max-iters: expected a positive count, got {args.max_iters}")
    for name in args.problems:
        if not (name.startswith("mixture-") and name.split("-", 1)[1].isdigit()):
            try:
                name == "digits" or canonical(name)
            except KeyError as exc:
                ap.error(f"problems: {exc.args[0]}, 'digits', or mixture-N")
    warnings.simplefilter("ignore", nk.ConvergenceWarning)
    ex = InProcessExecutor(1)
    print("| problem | n | rank | loss | fit | sweeps: its | s | block: its | s | sweeps / block "
          "| sweeps: objective | KKT | block: objective | KKT |")
    print("|:---|---:|---:|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.problems:
        for loss in args.losses:
            P = problem(name, loss)
            for trace in (False,) if args.untraced_only else (True, False):
                row = {}
                for m in ("sweeps", "block"):
                    fits = [nk.fit_bcd(P, method=m, max_sweeps=args.max_iters, tol=1e-5,
                                       trace=trace, executor=ex) for _ in range(args.runs)]
                    its = f"{'' if fits[0].converged else '>'}{fits[0].n_sweeps}"
                    row[m] = (its, float(np.median([f.fit_seconds for f in fits])),
                              fits[0].objective, fits[0].kkt)
                print(f"| {name} | {P.n_points:,} | {P.rank} | {loss} | "
                      f"{'traced' if trace else 'untraced'} | "
                      f"{row['sweeps'][0]} | {row['sweeps'][1]:.3f} | {row['block'][0]} | "
                      f"{row['block'][1]:.3f} | {row['sweeps'][1] / row['block'][1]:.2f}x | "
                      f"{row['sweeps'][2]:.6g} | {row['sweeps'][3]:.1e} | "
                      f"{row['block'][2]:.6g} | {row['block'][3]:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
