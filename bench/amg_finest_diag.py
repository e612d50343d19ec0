"""The additive AMG finest level's set-up: its diagonal and Gershgorin bound from one pass
over the rows (``_diag_gershgorin``) against the split route it replaced (the off-diagonal
part copied without explicit zeros, then the bound from it), on bench_block's U block.

``python bench/amg_finest_diag.py [--n N] [--runs K] [--threads T]``

The matrix is L_UU of bench_block's n = 1e6 problem (10-cluster mixture in 8-D, kNN k = 10,
1% of the points constrained) in the block fit's order, as ``free_matrix`` builds it. Checks
that both routes give the same diagonal and Jacobi weights bit for bit, then times them
alternately.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import numba
    import numpy as np
    import scipy.sparse as sp

    import npkl_dist
    from bench._env import time_alternately
    from bench.bench_block import constraints_for, graph_for
    from npkl_dist import NPKLProblem, prepare
    from numba import njit, prange

    from npkl_dist._blocksolve import (_diag_gershgorin, block_layout, free_matrix,
                                       free_operator)
    from npkl_dist._plan import _nonzero, _split, relabel_order

    numba.set_num_threads(args.threads)
    S, y, _ = graph_for(args.n)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                          loss="square", gamma=1.0, rank=16, seed=0)
    lay = block_layout(P, relabel_order(P))
    prep = prepare(P, lay)
    nu = lay.n_free
    ptr, idx, val = free_operator(prep.indptr, prep.indices, prep.data, nu, P.n_points, 0)
    A = free_matrix(ptr, idx, val, np.asarray(prep.diag[:nu], np.float64))

    @njit(parallel=True)
    def gershgorin_from_off(indptr, off_data, diag):  # the bound as the split route took it
        ratio = np.empty(diag.shape[0])
        for i in prange(diag.shape[0]):
            s = abs(diag[i])
            for p in range(indptr[i], indptr[i + 1]):
                s += abs(off_data[p])
            ratio[i] = s / diag[i]
        return ratio.max()

    def split_route():
        off, d = _split(_nonzero(sp.csr_matrix(A)))
        return d, gershgorin_from_off(off.indptr, off.data, d)

    def one_pass():
        d, ratio = np.empty(A.shape[0]), np.empty(A.shape[0])
        _diag_gershgorin(A.indptr, A.indices, A.data, d, ratio)
        return d, ratio.max()

    (d1, r1), (d2, r2) = split_route(), one_pass()
    same = np.array_equal(d1, d2) and r1 == r2
    print(f"L_UU: {A.shape[0]:,} rows, {A.nnz:,} entries, {args.threads} threads; the same "
          f"diagonal and bound: {same}")
    if not same:
        raise SystemExit("the one-pass route differs from the split route")
    med = time_alternately({"split route": split_route, "one pass": one_pass}, args.runs,
                           unit="ms")
    print(f"saved per block fit's set-up: {1e3 * (med['split route'] - med['one pass']):.1f} ms")


if __name__ == "__main__":
    main()
