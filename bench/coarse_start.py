"""Outer iterations and time to the 1e-4 gap from the random start and from the coarse
spectral start (``start='coarse'``), on bench_block's mixture problems.

``python bench/coarse_start.py [--n N ...] [--fractions F ...] [--losses L ...]
[--starts S ...] [--method block|auto] [--threads T] [--ref-iters K]``

For every (n, fraction, loss): a reference run (block solves from the random start until
the KKT residual is below 1e-9 or ``--ref-iters`` outer iterations; f* is the lowest
objective it or any timed fit reached), then one fit per start, each stopped by its callback
at the first objective within ``--gap`` of f*. Prints a markdown table: outer iterations
(sweeps for a sweep fit) to the gap, the time to it from the call of ``fit_bcd``, its
set-up, and the start's objective gap.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist  # noqa: E402
from bench.bench_block import constraints_for, graph_for  # noqa: E402
from npkl_dist import NPKLProblem, fit_bcd  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000])
    ap.add_argument("--fractions", nargs="+", default=["0.001", "0.01", "0.1", "protocol"])
    ap.add_argument("--losses", nargs="+", default=["square", "squared_hinge", "hinge"])
    ap.add_argument("--starts", nargs="+", default=["random", "coarse"])
    ap.add_argument("--method", default="block", choices=["block", "auto", "sweeps"])
    ap.add_argument("--gap", type=float, default=1e-4)
    ap.add_argument("--max-outer", type=int, default=400)
    ap.add_argument("--ref-iters", type=int, default=400)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cost", type=int, default=0, metavar="RUNS",
                    help="instead: time the two starts themselves (1% constrained, square "
                         "loss), RUNS alternations at each --n")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    if args.cost:
        return start_cost(args, ex)
    rows = []
    print(f"command: python bench/coarse_start.py {' '.join(argv or sys.argv[1:])}", flush=True)
    for n in args.n:
        S, y, _ = graph_for(n)
        L = npkl_dist.laplacian(S, 1e-3)
        for frac in args.fractions:
            C = constraints_for(y, frac)
            for loss in args.losses:
                P = NPKLProblem.build(L, C, loss=loss, gamma=1.0, rank=16, seed=0)
                fit_bcd(P, method=args.method, max_sweeps=1, tol=0, executor=ex,
                        start="coarse")  # compile
                ref = fit_bcd(P, method="block", max_sweeps=args.ref_iters, tol=1.0,
                              tol_kkt=1e-9, executor=ex, trace=False)
                f_star = ref.objective
                fits = {}
                for start in args.starts:
                    objs = []

                    def cb(s, obj, ch, sec, objs=objs):
                        objs.append(obj)
                        return False

                    t0 = time.perf_counter()
                    res = fit_bcd(P, method=args.method, max_sweeps=args.max_outer, tol=0,
                                  executor=ex, start=start, callback=cb)
                    fits[start] = (res, np.array(objs), time.perf_counter() - t0)
                    f_star = min(f_star, float(np.min(objs)))
                for start, (res, objs, total) in fits.items():
                    gaps = (objs - f_star) / abs(f_star)
                    hit = np.flatnonzero(gaps <= args.gap)
                    k = int(hit[0]) + 1 if hit.size else None
                    secs = (res.setup_seconds + float(np.sum(res.sweep_seconds[:k]))
                            + float(np.sum(res.objective_seconds[:k]))) if k else None
                    g0 = (res.objective_initial - f_star) / abs(f_star)
                    rows.append((n, frac, loss, start, res.method, k, secs, res.setup_seconds,
                                 g0))
                    print(f"n={n} {frac} {loss} {start}: {res.method} "
                          f"{k if k else '-'} its, "
                          f"{f'{secs:.2f}' if secs else '-'} s (set-up {res.setup_seconds:.2f}),"
                          f" start gap {g0:.2e}, f* {f_star:.9g}", flush=True)
    print("\n| n | constrained | loss | start | method | its to the gap | s to the gap | set-up s "
          "| start's gap |\n|---:|:---|:---|:---|:---|---:|---:|---:|---:|")
    for n, frac, loss, start, meth, k, secs, setup, g0 in rows:
        print(f"| {n:,} | {frac} | {loss} | {start} | {meth} | {k if k else '-'} | "
              f"{f'{secs:.2f}' if secs else '-'} | {setup:.2f} | {g0:.2e} |")


def start_cost(args, ex):
    """The random start (drawn, then relabelled into the fit's order) against the coarse
    start (computed in the fit's order from the prepared L), alternating in one process."""
    from npkl_dist._bcd import _build, _internal_coarse_start, initial_V
    from npkl_dist._kernels import take_rows

    for n in args.n:
        S, y, _ = graph_for(n)
        P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                              loss="square", gamma=1.0, rank=16, seed=0)
        _, layout, prep = _build(P, "block", ex, "rcm", "blocks", None)
        times = {"random": [], "coarse": []}
        _internal_coarse_start(P, prep, None)  # compile
        for _ in range(args.cost):
            t0 = time.perf_counter()
            take_rows(initial_V(P, np.random.default_rng(0), "random"), layout.order)
            t1 = time.perf_counter()
            _internal_coarse_start(P, prep, None)
            t2 = time.perf_counter()
            times["random"].append(t1 - t0)
            times["coarse"].append(t2 - t1)
        r, c = (float(np.median(times[k])) for k in ("random", "coarse"))
        print(f"n={n}: random start {r:.3f} s, coarse start {c:.3f} s (medians of {args.cost}),"
              f" coarse / random {c / r:.2f}x", flush=True)


if __name__ == "__main__":
    main()
