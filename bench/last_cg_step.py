"""The block solve's last PCG step and the subspace step's residual: with R updated by the
step and alpha Q added back in the subspace step (before), against X alone updated and the
residual formed from R as it stood (after).

``python bench/last_cg_step.py [--n N] [--r R] [--runs K] [--threads T]``

Random (n, r) float64 blocks (the kernels' cost does not depend on the values; n = 1e6,
r = 16 is bench_block's problem). Each run times, alternately, ``_cg_update`` +
``_subspace_step(use_q=True)`` and ``_cg_update_x`` + ``_subspace_step(use_q=False)`` on
the same arrays (the subspace step with its fused residual, on n_U = n rows), and prints
every run, the medians and the difference. Also checks that the two residuals agree to
rounding (they differ by (R - alpha Q) + alpha Q - R).

Then the step's update of X with ``finish_block``'s sums: ``_cg_update_x`` followed by
``_copy_delta`` (||X||^2, ||X - X_start||^2) against ``_cg_update_x_sums`` (one pass);
checks that X and the sums are bitwise the same.
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
    from npkl_dist._blocksolve import (RB, _cg_update, _cg_update_x, _cg_update_x_sums,
                                      _copy_delta, _subspace_step)

    numba.set_num_threads(args.threads)
    n, r = args.n, args.r
    rng = np.random.default_rng(0)
    X0, P, Q, R0, V0, S0, LS0, LD = (rng.standard_normal((n, r)) for _ in range(8))
    alpha = rng.uniform(0.1, 1.0, r)
    dinv = rng.uniform(0.5, 1.0, n)
    n_ch = (n + RB - 1) // RB
    X, R, V, Vprev, S, LS = (np.empty((n, r)) for _ in range(6))
    part, pxr, pg = np.empty((n_ch, 2)), np.empty(n_ch), np.empty(n_ch)

    def reset():
        for a, b in ((X, X0), (R, R0), (V, V0), (Vprev, X0), (S, S0), (LS, LS0)):
            a[...] = b

    def before():
        _cg_update(X, R, P, Q, alpha)
        _subspace_step(V, Vprev, LD, S, LS, 0.3, 0.2, part, R, Q, alpha, True, dinv, True,
                       pxr, pg)

    def after():
        _cg_update_x(X, P, alpha)
        _subspace_step(V, Vprev, LD, S, LS, 0.3, 0.2, part, R, Q, alpha, False, dinv, True,
                       pxr, pg)

    results = {}
    for name, f in (("before", before), ("after", after)):
        reset()
        f()  # compile / warm up
        reset()
        f()
        results[name] = (X.copy(), R.copy(), V.copy())
    same_x = np.array_equal(results["before"][0], results["after"][0])
    same_v = np.array_equal(results["before"][2], results["after"][2])
    dr = np.abs(results["before"][1] - results["after"][1]).max()
    scale = np.abs(results["after"][1]).max()
    print(f"n = {n:,}, r = {r}, {args.threads} threads; X and V bitwise the same: "
          f"{same_x and same_v}; residuals differ by {dr:.1e} (entries up to {scale:.1f})")
    med = time_alternately({"before": before, "after": after}, args.runs, unit="ms",
                           before=reset)
    print(f"saved per outer iteration: {1e3 * (med['before'] - med['after']):.1f} ms "
          f"({med['before'] / med['after']:.2f}x)")

    n2, d2, n2f, d2f = (np.empty(n_ch) for _ in range(4))
    Xs = np.empty((n, r))
    no_v = np.empty((0, r))

    def reset_x():
        X[...] = X0
        Xs[...] = X0

    def two_passes():
        _cg_update_x(X, P, alpha)
        _copy_delta(X, Vprev, no_v, False, False, n2, d2)  # Vprev holds X0 (reset)

    def one_pass():
        _cg_update_x_sums(Xs, P, alpha, n2f, d2f)

    Vprev[...] = X0
    reset_x()
    two_passes()
    one_pass()
    same = (np.array_equal(X, Xs) and np.array_equal(n2, n2f) and np.array_equal(d2, d2f))
    print(f"X += alpha P with finish_block's sums, bitwise the same: {same}")
    med = time_alternately({"_cg_update_x + _copy_delta": two_passes,
                            "_cg_update_x_sums": one_pass}, args.runs, unit="ms",
                           before=reset_x)
    print(f"saved per outer iteration: "
          f"{1e3 * (med['_cg_update_x + _copy_delta'] - med['_cg_update_x_sums']):.1f} ms")


if __name__ == "__main__":
    main()
