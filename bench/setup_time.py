"""Set-up time of one fit on bench_block's problem (the part of ``fit_bcd`` before its first
iteration: relabelling, layout, L permuted, the prepared arrays; for block solves also the
U-block operator, the AMG hierarchy and the work arrays).

``python bench/setup_time.py [--n N] [--method sweeps|block] [--fits F] [--threads T]
[--tree DIR ...]``

Each tree (a checkout of npkl-dist; default: this one) runs in its own process: one warm-up
fit, then ``--fits`` fits with ``max_sweeps=1``; prints every set-up and the median. Trees
alternate ``--rounds`` times, so that before/after are measured in the same minutes. The
problem is bench_block's (10-cluster mixture in 8-D, kNN k = 10, delta = 1e-3, square loss,
r = 16, 1% of the points paired at random); its kNN graph is cached under bench/.cache.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import importlib.util, os, sys, warnings
sys.path.insert(0, sys.argv[1])  # the tree's npkl_dist
warnings.simplefilter("ignore")
import npkl_dist
# bench_block (and with it the cached kNN graph) from this checkout, whatever the tree
spec = importlib.util.spec_from_file_location(
    "bench.bench_block", os.path.join(sys.argv[2], "bench", "bench_block.py"))
bb = importlib.util.module_from_spec(spec)
sys.path.insert(1, sys.argv[2])
spec.loader.exec_module(bb)
constraints_for, graph_for = bb.constraints_for, bb.graph_for
n, method, fits, threads = int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
S, y, _ = graph_for(n)
P = npkl_dist.NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                                loss="square", gamma=1.0, rank=16, seed=0)
ex = npkl_dist.executors.InProcessExecutor(threads)
npkl_dist.fit_bcd(P, method=method, max_sweeps=1, tol=0, executor=ex)  # compile, warm up
s = [npkl_dist.fit_bcd(P, method=method, max_sweeps=1, tol=0, executor=ex).setup_seconds
     for _ in range(fits)]
print(" ".join(f"{x:.3f}" for x in s))
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--method", default="sweeps", choices=["sweeps", "block"])
    ap.add_argument("--fits", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tree", nargs="*", default=[os.path.dirname(HERE)])
    args = ap.parse_args(argv)
    import numpy as np

    got = {t: [] for t in args.tree}
    for _ in range(args.rounds):
        for t in args.tree:
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, t, os.path.dirname(HERE), str(args.n),
                 args.method, str(args.fits), str(args.threads)],
                check=True, capture_output=True, text=True).stdout.split()
            got[t] += [float(x) for x in out]
            print(f"{t}: {' '.join(out)}", flush=True)
    med = {t: float(np.median(v)) for t, v in got.items()}
    first = args.tree[0]
    for t, v in got.items():
        ratio = "" if t == first else f", {med[first] / med[t]:.2f}x faster than {first}"
        print(f"{t}: {args.method} set-up median {med[t]:.2f} s over {len(v)} fits{ratio}")


if __name__ == "__main__":
    main()
