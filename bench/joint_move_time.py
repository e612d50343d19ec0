"""Time one hinge joint move at the papers' protocol (issue 6).

``python bench/joint_move_time.py [--root DIR] [--n N] [--outer K] [--calls C] [--threads T]``

Builds bench_block's problem (10-cluster mixture in 8-D, kNN k = 10, delta = 1e-3, r = 16,
gamma = 1, 0.6n + 0.6n pairs, hinge loss), fits K outer iterations of the block method with
``joint=False``, then times ``npkl_dist._joint.hinge_joint_move`` C times from that point and
prints the kink count, the move's KKT residual, step and decrease, and the times. ``--root``
imports npkl_dist from another checkout (e.g. a ``git worktree`` of an older commit), so
two versions can be timed on the same problem one after the other.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=HERE, help="checkout whose npkl_dist is timed")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--outer", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.root))
    sys.path.insert(1, HERE)
    import numpy as np

    import npkl_dist
    import npkl_dist._joint as J
    from bench.bench_block import constraints_for, graph_for
    from npkl_dist import NPKLProblem, fit_bcd
    from npkl_dist._bcd import _build
    from npkl_dist.executors import InProcessExecutor

    warnings.simplefilter("ignore")
    S, y, _ = graph_for(args.n)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "protocol"),
                          loss="hinge", gamma=1.0, rank=16, seed=0)
    ex = InProcessExecutor(args.threads)
    _, layout, prep = _build(P, "block", ex, "rcm", "blocks", None)
    res = fit_bcd(P, method="block", max_sweeps=args.outer, tol=0, joint=False, executor=ex)
    V = res.V[layout.order].astype(np.float64)
    times = []
    for _ in range(args.calls):
        t = time.perf_counter()
        m = J.hinge_joint_move(prep, V)
        times.append(time.perf_counter() - t)
    print(f"npkl_dist from {os.path.dirname(npkl_dist.__file__)}: n={args.n:,}, "
          f"{m.n_kink:,} kink pairs, kkt {m.kkt:.7e}, step {m.step:.7e}, "
          f"decrease {m.decrease:.7e}; seconds {[round(t, 2) for t in times]}, "
          f"median {float(np.median(times)):.2f}")


if __name__ == "__main__":
    main()
