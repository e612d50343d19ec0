"""The block solve's last PCG step, finish_block's sums and the subspace step's residual, as
before this change and as now.

``python bench/last_cg_step.py [--n N] [--r R] [--runs K] [--threads T]``

Before: ``_cg_update`` (X += alpha P and R -= alpha Q), ``_copy_delta`` (the sums of ||X||^2
and ||X - X_start||^2) and ``_subspace_step`` adding alpha Q back to R. Now:
``_cg_update_x_sums`` (X += alpha P with those sums, R untouched) and ``_subspace_step`` from
R as it stands. Random (n, r) float64 blocks (the kernels' cost does not depend on the
values; n = 1e6, r = 16 is bench_block's problem), the subspace step with its fused residual
on n_U = n rows. Checks that X, V and the sums are bitwise the same and the residuals agree
to rounding (they differ by (R - alpha Q) + alpha Q - R), then times the two alternately
``--runs`` times and prints every run, the medians and the difference.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(HERE))
    import numba
    import numpy as np

    from bench._env import time_alternately
    from npkl_dist._blocksolve import (RB, _cg_update, _cg_update_x_sums, _copy_delta,
                                      _subspace_step)

    numba.set_num_threads(args.threads)
    n, r = args.n, args.r
    rng = np.random.default_rng(0)
    X0, P, Q, R0, V0, S0, LS0, LD = (rng.standard_normal((n, r)) for _ in range(8))
    alpha = rng.uniform(0.1, 1.0, r)
    dinv = rng.uniform(0.5, 1.0, n)
    n_ch = (n + RB - 1) // RB
    X, R, V, Vprev, S, LS = (np.empty((n, r)) for _ in range(6))
    part, pxr, pg, n2, d2 = (np.empty((n_ch, 2)), *(np.empty(n_ch) for _ in range(4)))
    no_v = np.empty((0, r))

    def reset():  # Vprev holds X's start, as after the previous subspace step
        for a, b in ((X, X0), (R, R0), (V, V0), (Vprev, X0), (S, S0), (LS, LS0)):
            a[...] = b

    def step(use_q):
        _subspace_step(V, Vprev, LD, S, LS, 0.3, 0.2, part, R, Q, alpha, use_q, dinv, True,
                       pxr, pg)

    def before():
        _cg_update(X, R, P, Q, alpha)
        _copy_delta(X, Vprev, no_v, False, False, n2, d2)
        step(True)

    def now():
        _cg_update_x_sums(X, P, alpha, n2, d2)
        step(False)

    results = {}
    for name, f in (("before", before), ("now", now)):
        reset()
        f()  # compile / warm up
        reset()
        f()
        results[name] = (X.copy(), V.copy(), n2.copy(), d2.copy(), R.copy())
    same = all(np.array_equal(a, b) for a, b in zip(results["before"][:4], results["now"][:4]))
    dr = np.abs(results["before"][4] - results["now"][4]).max()
    print(f"n = {n:,}, r = {r}, {args.threads} threads; X, V and the sums bitwise the same: "
          f"{same}; residuals differ by {dr:.1e} (entries up to "
          f"{np.abs(results['now'][4]).max():.1f})")
    med = time_alternately({"before": before, "now": now}, args.runs, unit="ms",
                           before=reset)
    print(f"saved per outer iteration: {1e3 * (med['before'] - med['now']):.1f} ms "
          f"({med['before'] / med['now']:.2f}x)")


if __name__ == "__main__":
    main()
