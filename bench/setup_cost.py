"""What a standalone block fit's set-up costs, and two cuts to it, at n = 1e6 (issue 6).

``python bench/setup_cost.py [--n N] [--runs R] [--threads T] [--skip-fits]``

On bench_block's problem (10-cluster mixture in 8-D, kNN k = 10, delta = 1e-3, 1% of the
points paired, square loss, r = 16), in one process, alternating the two variants of each
comparison so that the VM's drift falls on both:

1. **L permuted and split**: scipy's route, ``_split(permute(L, order, rank_of))`` (row
   gather, index sort, duplicate check, then the split of the diagonal), against the one
   compiled pass ``permute_split`` (bitwise the same arrays, checked here).
2. **Prefaulted work arrays**: fits to the 1e-4 gap (f* of bench/RESULTS.md) with the block
   session's work arrays touched in a background thread during the set-up (the library's
   default, ``_blocksolve.Prefault``) and without (``PREFAULT_MIN_ENTRIES`` raised above n r).
   Prints each fit's wall time, set-up and first outer iteration, and the medians' ratio.
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
from npkl_dist import NPKLProblem, _blocksolve, fit_bcd  # noqa: E402
from npkl_dist._plan import _split, permute, permute_split, relabel_order  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--f-star", type=float, default=2214.258)
    ap.add_argument("--skip-fits", action="store_true")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    S, y, _ = graph_for(args.n)
    L = npkl_dist.laplacian(S, 1e-3)
    C = constraints_for(y, "0.01")
    P = NPKLProblem.build(L, C, loss="square", gamma=1.0, rank=16, seed=0)
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    if args.threads:
        import numba

        numba.set_num_threads(args.threads)
    order = relabel_order(P)
    rank_of = np.empty_like(order)
    rank_of[order] = np.arange(order.shape[0])
    a = _split(permute(P.L, order, rank_of))
    b = permute_split(P.L, order, rank_of)
    same = (np.array_equal(a[0].indptr, b.indptr) and np.array_equal(a[0].indices, b.indices)
            and np.array_equal(a[0].data, b.data) and np.array_equal(a[1], b.diag))
    print(f"permute_split bitwise equal to _split(permute(...)): {same}")
    t_old, t_new = [], []
    for k in range(args.runs):
        for which in ((0, 1) if k % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            if which == 0:
                _split(permute(P.L, order, rank_of))
                t_old.append(time.perf_counter() - t0)
            else:
                permute_split(P.L, order, rank_of)
                t_new.append(time.perf_counter() - t0)
    print(f"permute + split: median {np.median(t_old):.3f} s; permute_split: median "
          f"{np.median(t_new):.3f} s ({args.runs} runs each); ratio "
          f"{np.median(t_old) / np.median(t_new):.2f}x")
    if args.skip_fits:
        return
    fit_bcd(P, method="auto", max_sweeps=1, tol=0, executor=ex)  # compile
    f_star = args.f_star

    def stop(s, obj, ch, sec):
        return (obj - f_star) / abs(f_star) <= 1e-4

    walls = {True: [], False: []}
    floor = _blocksolve.PREFAULT_MIN_ENTRIES
    try:
        for k in range(args.runs):
            for on in ((True, False) if k % 2 == 0 else (False, True)):
                _blocksolve.PREFAULT_MIN_ENTRIES = floor if on else 1 << 62
                t0 = time.perf_counter()
                res = fit_bcd(P, method="auto", max_sweeps=200, tol=0, executor=ex,
                              callback=stop)
                walls[on].append(time.perf_counter() - t0)
                print(f"prefault {'on ' if on else 'off'}: {walls[on][-1]:.2f} s, set-up "
                      f"{res.setup_seconds:.2f} s, first outer {res.sweep_seconds[0]:.2f} s, "
                      f"median outer {np.median(res.sweep_seconds):.3f} s, {res.n_sweeps} "
                      f"outer ({res.start})", flush=True)
    finally:
        _blocksolve.PREFAULT_MIN_ENTRIES = floor
    on, off = np.median(walls[True]), np.median(walls[False])
    print(f"fits to the gap: prefault on median {on:.2f} s, off {off:.2f} s ({args.runs} each); "
          f"ratio {off / on:.2f}x")


if __name__ == "__main__":
    main()
