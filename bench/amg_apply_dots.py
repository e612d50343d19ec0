"""The block solve's preconditioning step: the additive AMG cycle then the PCG sums, as two
calls (``apply_to``, then ``_dots``) against the fused ``apply_dots``, on bench_block's graph.

``python bench/amg_apply_dots.py [--n N] [--r R] [--runs K] [--threads T]``

The operator is the Laplacian of bench_block's kNN graph (10-cluster mixture in 8-D, k = 10,
delta = 1e-3; cached under bench/.cache) in reverse Cuthill-McKee order, the hierarchy the
default block solve builds (plain aggregation, additive cycle). Checks that both give the
same Z and chunk sums bit for bit, then times them alternately ``--runs`` times (a random
(n, r) block) and prints every run, the medians and the ratio.
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
    import scipy.sparse as sp

    import npkl_dist
    from bench._env import time_alternately
    from bench.bench_block import graph_for
    from npkl_dist._blocksolve import RB, AMGPreconditioner, _dots
    from npkl_dist._plan import permute, reverse_cuthill_mckee

    numba.set_num_threads(args.threads)
    S, _, _ = graph_for(args.n)
    L = sp.csr_matrix(npkl_dist.laplacian(S, 1e-3))
    L = permute(L, reverse_cuthill_mckee(L))
    M = AMGPreconditioner(L, smooth=None, additive=True)
    n, r = L.shape[0], args.r
    R = np.random.default_rng(0).standard_normal((n, r))
    n_ch = (n + RB - 1) // RB
    Z1, Z2 = np.empty((n, r)), np.empty((n, r))
    parts = [np.empty((n_ch, r)) for _ in range(4)]

    def two_calls():
        M.apply_to(R, Z1)
        _dots(R, Z1, parts[0], parts[1])

    def fused():
        M.apply_dots(R, Z2, parts[2], parts[3])

    two_calls()
    fused()
    same = (np.array_equal(Z1, Z2) and np.array_equal(parts[0], parts[2])
            and np.array_equal(parts[1], parts[3]))
    print(f"n = {n:,}, r = {r}, {len(M.levels)} levels, {args.threads} threads; "
          f"bitwise the same: {same}")
    if not same:
        raise SystemExit("apply_dots differs from apply_to + _dots")
    med = time_alternately({"apply_to + _dots": two_calls, "apply_dots": fused}, args.runs,
                           unit="ms")
    print(f"saved per application: {1e3 * (med['apply_to + _dots'] - med['apply_dots']):.1f} ms "
          f"({med['apply_to + _dots'] / med['apply_dots']:.2f}x)")


if __name__ == "__main__":
    main()
