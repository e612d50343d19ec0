"""The traced block fit's objective and KKT evaluation after an outer iteration, with the
KKT residual's scale (chunk sums of ||v_i||^2) taken from the subspace step against a pass
over V of its own, on bench_block's problem.

``python bench/objective_norm_sums.py [--n N] [--runs K] [--threads T]``

Builds a block session on bench_block's n = 1e6 problem (10-cluster mixture in 8-D, kNN
k = 10, 1% constrained, square loss, r = 16), takes two outer iterations, then times
``session.objective_kkt()`` alternately as a fit now runs it (the sums from the subspace
step) and with the sums dropped (the pass over V that every evaluation made before), checking
that both give the same objective and KKT residual to rounding.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import numpy as np

    import npkl_dist
    from bench._env import time_alternately
    from bench.bench_block import constraints_for, graph_for
    from npkl_dist import NPKLProblem, initial_V, prepare
    from npkl_dist._blocksolve import BlockSession, block_layout
    from npkl_dist._plan import relabel_order

    warnings.simplefilter("ignore")
    S, y, _ = graph_for(args.n)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                          loss="square", gamma=1.0, rank=16, seed=0)
    lay = block_layout(P, relabel_order(P))
    prep = prepare(P, lay)
    V = np.ascontiguousarray(initial_V(P, np.random.default_rng(0))[lay.order])
    session = BlockSession(prep, lay, V, n_threads=args.threads)
    rng = np.random.default_rng(1)
    for _ in range(2):
        session.step(lay.colour_order(rng), 0.01, 1)
    part = session.parts[0]
    cached = part._vn

    def from_step():
        part._vn = cached
        return session.objective_kkt()

    def own_pass():
        part._vn = None
        return session.objective_kkt()

    (o1, k1), (o2, k2) = from_step(), own_pass()
    print(f"n = {args.n:,}, r = 16, {args.threads} threads; objective {o1!r} / {o2!r}, "
          f"KKT {k1!r} / {k2!r}")
    if o1 != o2 or abs(k1 - k2) > 1e-12 * abs(k2):
        raise SystemExit("the two evaluations differ beyond rounding")
    med = time_alternately({"sums from the subspace step": from_step,
                            "a pass over V": own_pass}, args.runs, unit="ms")
    print(f"saved per traced outer iteration: "
          f"{1e3 * (med['a pass over V'] - med['sums from the subspace step']):.1f} ms")


if __name__ == "__main__":
    main()
