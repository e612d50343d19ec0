"""Reverse Cuthill-McKee of a plan: the compiled order against scipy's, on bench_block's graph.

``python bench/rcm_time.py [--n N] [--runs R]``

Builds the Laplacian of bench_block's kNN graph (10-cluster mixture in 8-D, k = 10,
delta = 1e-3; cached under bench/.cache), checks that ``npkl_dist._plan.reverse_cuthill_mckee``
returns scipy's ``reverse_cuthill_mckee(L, symmetric_mode=True)`` element for element, then
times the two alternately ``--runs`` times and prints every run, the medians and the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(HERE))
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee as scipy_rcm

    import npkl_dist
    from bench._env import time_alternately
    from bench.bench_block import graph_for
    from npkl_dist._plan import reverse_cuthill_mckee

    S, _, _ = graph_for(args.n)
    L = sp.csr_matrix(npkl_dist.laplacian(S, 1e-3))
    ours = reverse_cuthill_mckee(L)  # also compiles
    same = np.array_equal(ours, scipy_rcm(L, symmetric_mode=True))
    print(f"n = {args.n:,}, {L.nnz:,} entries; the same permutation as scipy's: {same}")
    if not same:
        raise SystemExit("the compiled order differs from scipy's")
    med = time_alternately({"scipy": lambda: scipy_rcm(L, symmetric_mode=True),
                            "compiled": lambda: reverse_cuthill_mckee(L)}, args.runs)
    print(f"ratio scipy / compiled: {med['scipy'] / med['compiled']:.2f}x")


if __name__ == "__main__":
    main()
