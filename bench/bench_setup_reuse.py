"""Benchmark: fits of one graph and one constraint set with and without a shared fit_setup.

What select_gamma does on each fold: the same problem fitted at several gammas. Each fit
either builds its own set-up (relabelling, layout, permutation, AMG hierarchy, first touch of
the work arrays) or goes through one ``fit_setup`` made before the first fit. The iterates are
bitwise the same (checked here too); the difference is wall time.

Problem: bench_block's (10-cluster mixture in 8-D, kNN k = 10, delta = 1e-3, square loss,
r = 16, 1% of the points paired), ``method='auto'`` (block solves), a fixed number of outer
iterations per fit. The two modes alternate ``--rounds`` times; each round fits the whole
gamma grid; medians over rounds.

    python bench/bench_setup_reuse.py --n 100000 --threads 1 --rounds 3
    python bench/bench_setup_reuse.py --n 1000000 --threads 2 --rounds 3
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
from npkl_dist import NPKLProblem, fit_bcd, fit_setup  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--outer", type=int, default=28, help="outer iterations per fit")
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.1, 1.0, 10.0, 100.0])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    S, y, _ = graph_for(args.n)
    L = npkl_dist.laplacian(S, 1e-3)
    C = constraints_for(y, "0.01")
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    problems = [NPKLProblem.build(L, C, loss="square", gamma=g, rank=16, seed=0)
                for g in args.gammas]
    kw = dict(method="auto", max_sweeps=args.outer, tol=0, executor=ex)
    fit_bcd(problems[0], **{**kw, "max_sweeps": 1})  # compile
    own, shared, setups, check = [], [], [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        a = [fit_bcd(p, **kw) for p in problems]
        own.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        st = fit_setup(problems[0], method="auto", executor=ex)
        setups.append(time.perf_counter() - t0)
        b = [fit_bcd(p, setup=st, **kw) for p in problems]
        shared.append(time.perf_counter() - t0)
        del st
        check.append(all(np.array_equal(x.V, z.V) for x, z in zip(a, b)))
        print(f"own set-up {own[-1]:.2f} s ({', '.join(f'{x.setup_seconds:.2f}' for x in a)}); "
              f"shared {shared[-1]:.2f} s (fit_setup {setups[-1]:.2f} s; fits' set-up "
              f"{', '.join(f'{x.setup_seconds:.2f}' for x in b)}); bitwise {check[-1]}",
              flush=True)
    o, s = float(np.median(own)), float(np.median(shared))
    print(f"n={args.n:,}, {len(problems)} fits of {args.outer} outer iterations "
          f"({a[0].method}), threads {ex.n_threads}: median {o:.2f} s with their own set-ups, "
          f"{s:.2f} s through one fit_setup -> {o / s:.2f}x; per fit {o / len(problems):.2f} "
          f"-> {s / len(problems):.2f} s; bitwise the same: {all(check)}")


if __name__ == "__main__":
    main()
