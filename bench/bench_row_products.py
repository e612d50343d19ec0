"""Benchmark: the same fits from two source trees (e.g. before and after a kernel change).

Each case is timed in a fresh child process per tree (``PYTHONPATH`` = the tree), the trees
alternating, ``--runs`` times; each child warms up once (numba's compiled kernels load) and
then times ``--reps`` fits, reporting their median. The table gives the median over runs per
tree, the ratio, and whether the trees' results are bitwise equal (a digest of V).

Cases (one thread; what the fits' row products dominate):

* ``admm:<data set>`` -- KL-ADMM under the replication protocol (``bench/paper/run.py``:
  repetition 0, diagonal targets, Pataki rank, max_iter 500 or 100 on adult, tol 1e-4),
  timed from ``NPKLProblem.build`` to the returned fit, as the harness times it.
* ``sweeps:<n>`` / ``block:<n>`` -- ``fit_bcd`` with ``method='sweeps'`` (10 sweeps) or
  ``'block'`` (10 outer iterations), square loss, r = 16, 1% of the points constrained, on
  a 10-cluster Gaussian mixture in 8-D with a kNN graph (k = 10), tol 0.

Usage::

    git worktree add /tmp/before <commit>
    python bench/bench_row_products.py --trees /tmp/before . --cases admm:adult-a1a \
        admm:chessboard sweeps:100000 block:100000 --runs 5

Appends a markdown section to bench/RESULTS.md (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import hashlib, json, sys, time, warnings
import numpy as np
import numba
numba.set_num_threads(1)
from threadpoolctl import threadpool_limits
threadpool_limits(1, user_api="blas")
warnings.simplefilter("ignore")
import npkl_dist as nk
from npkl_dist.executors import InProcessExecutor
kind, arg, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == "admm":
    from bench.paper.run import task_inputs
    from npkl_dist._admm import fit_admm
    X, y, meta, L, cons, cons_diag = task_inputs(arg, 0)
    adult = meta.get("knn", 5) == 50
    def fit():
        p = nk.NPKLProblem.build(L, cons_diag, loss="square", seed=0)
        return fit_admm(p, max_iter=100 if adult else 500, tol=1e-4,
                        executor=InProcessExecutor(1))
else:
    from sklearn.datasets import make_blobs
    n = int(arg)
    X, y = make_blobs(n, centers=10, n_features=8, random_state=0)
    L = nk.knn_graph(X, 10, seed=0, warn=False).laplacian(1e-3)
    from bench.bench_block import constraints_for
    cons = constraints_for(y, 0.01)
    p = nk.NPKLProblem.build(L, cons, loss="square", rank=16, seed=0)
    def fit():
        return nk.fit_bcd(p, max_sweeps=10, tol=0, method=kind,
                          executor=InProcessExecutor(1))
res = fit()
ts = []
for _ in range(reps):
    t0 = time.perf_counter()
    res = fit()
    ts.append(time.perf_counter() - t0)
digest = hashlib.sha1(np.ascontiguousarray(res.V).tobytes()).hexdigest()[:12]
print(json.dumps({"seconds": float(np.median(ts)), "digest": digest}))
"""


def run_child(tree, case, reps):
    kind, arg = case.split(":", 1)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), NUMBA_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, kind, arg, str(reps)], env=env,
                         cwd=os.path.abspath(tree), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", nargs=2, required=True, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--cases", nargs="+", default=["admm:adult-a1a", "admm:chessboard"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args(argv)
    for case in args.cases:
        kind = case.split(":", 1)[0]
        if kind not in ("admm", "sweeps", "block") or ":" not in case:
            ap.error(f"--cases: {case!r} is not admm:<data set>, sweeps:<n> or block:<n>")
    rows = []
    for case in args.cases:
        times = {0: [], 1: []}
        digests = {0: set(), 1: set()}
        for run in range(args.runs):
            for t in (0, 1) if run % 2 == 0 else (1, 0):
                out = run_child(args.trees[t], case, args.reps)
                times[t].append(out["seconds"])
                digests[t].add(out["digest"])
            print(f"{case} run {run}: before {times[0][-1]:.4f} s, after {times[1][-1]:.4f} s",
                  file=sys.stderr)
        b, a = float(np.median(times[0])), float(np.median(times[1]))
        same = digests[0] == digests[1] and len(digests[0]) == 1
        rows.append((case, b, a, b / a, same))
    sys.path.insert(0, os.path.dirname(HERE))
    from bench.paper.report import machine

    lines = [
        f"## bench_row_products — {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
        f"- machine: {machine()}; python {platform.python_version()}",
        f"- command: `python bench/bench_row_products.py {shlex.join(sys.argv[1:])}`",
        f"- one thread; each tree in its own child processes, alternating; per child the median "
        f"of {args.reps} fits after a warm-up; table: median over {args.runs} children", "",
        "| case | before (s) | after (s) | speed-up | V bitwise equal |",
        "|---|---:|---:|---:|:---:|",
    ]
    for case, b, a, ratio, same in rows:
        lines.append(f"| {case} | {b:.4f} | {a:.4f} | {ratio:.2f}x | {'yes' if same else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
