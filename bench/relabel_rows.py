"""A fit's relabelling of V: numpy's fancy indexing against the compiled row passes
(``npkl_dist._kernels.take_rows`` through the order and through its inverse), on
bench_block's problem.

``python bench/relabel_rows.py [--n N] [--r R] [--runs K] [--threads T]``

The order is the one a block fit uses (reverse Cuthill-McKee of the kNN Laplacian of
bench_block's 10-cluster mixture, U rows first; 1% of the points constrained). Times, in
alternation: ``np.ascontiguousarray(V0[order])`` (the start into the internal order) against
``take_rows(V0, order)``, and ``out[order] = V`` (the result back into the points' order)
against ``take_rows(V, rank_of)``, into fresh arrays each time as in a fit; checks that they
agree bit for bit.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import numba
    import numpy as np

    import npkl_dist
    from bench._env import time_alternately
    from bench.bench_block import constraints_for, graph_for
    from npkl_dist import NPKLProblem
    from npkl_dist._blocksolve import block_layout
    from npkl_dist._kernels import take_rows
    from npkl_dist._plan import relabel_order

    numba.set_num_threads(args.threads)
    S, y, _ = graph_for(args.n)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                          loss="square", gamma=1.0, rank=args.r, seed=0)
    layout = block_layout(P, relabel_order(P))
    order, rank_of = layout.order, layout.rank_of
    V0 = np.random.default_rng(0).standard_normal((args.n, args.r))

    def np_take():
        return np.ascontiguousarray(V0[order])

    def np_put():
        out = np.empty_like(V0)
        out[order] = V0
        return out

    same = (np.array_equal(np_take(), take_rows(V0, order))
            and np.array_equal(np_put(), take_rows(V0, rank_of)))
    print(f"n = {args.n:,}, r = {args.r}, {args.threads} threads; bitwise the same: {same}")
    if not same:
        raise SystemExit("the compiled relabelling differs from numpy's")
    med = time_alternately({"numpy V0[order]": np_take,
                            "take_rows": lambda: take_rows(V0, order),
                            "numpy out[order] = V": np_put,
                            "take_rows, inverse order": lambda: take_rows(V0, rank_of)},
                           args.runs, unit="ms")
    saved = (med["numpy V0[order]"] - med["take_rows"]
             + med["numpy out[order] = V"] - med["take_rows, inverse order"])
    print(f"saved per fit (start and end): {1e3 * saved:.1f} ms")


if __name__ == "__main__":
    main()
