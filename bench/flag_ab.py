"""A/B of a block solver switch at n = 1e6: fits with the library's defaults against fits with
module flags of ``npkl_dist._blocksolve`` changed, alternating in one process.

``python bench/flag_ab.py --set NAME=VALUE [--set ...] [--time Class.method ...] [--rounds R]``

The problem is block_gap_1e6.py's (10-cluster mixture in 8-D, n = 1e6, kNN k = 10, 1% of the
points paired, square loss, r = 16, 2 threads). Each round runs a short plain-sweep fit first
(so that every block fit meets memory the way a fit after another job does), then one fit
with the defaults ("A") and one with the flags set ("B"), in alternating order; each fit runs
to the 1e-4 gap of block_gap_1e6's f*. Printed per fit: wall time, set-up, the sum of its
outer iterations, and the seconds spent in each ``--time`` method (e.g.
``BlockPart.objective_parts``, ``AMGPreconditioner._restrict``); then the medians and the
ratio B / A of each. Both sides must take the same number of outer iterations (a flag that
changes iterates shows here). The host's speed drifts: read the paired rows, not one pair.

Example (the C rows' carried (L V)_C against reading their neighbours at every objective):
``python bench/flag_ab.py --set LV_FROM_STEP=False --time BlockPart.objective_parts``
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist  # noqa: E402
from bench._env import time_method  # noqa: E402
from bench.bench_block import constraints_for, graph_for  # noqa: E402
from npkl_dist import NPKLProblem, fit_bcd  # noqa: E402
from npkl_dist import _blocksolve as bs  # noqa: E402

F_STAR = 2214.258  # block_gap_1e6's reference optimum at n = 1e6


def _flags(pairs):
    out = {}
    for item in pairs:
        name, _, value = item.partition("=")
        if not hasattr(bs, name):
            raise SystemExit(f"--set: npkl_dist._blocksolve has no {name!r}")
        out[name] = ast.literal_eval(value)
    return out


def _timers(names, acc):
    """Time each 'Class.method' of _blocksolve into acc[name]."""
    for name in names:
        cls_name, _, meth = name.partition(".")
        time_method(getattr(bs, cls_name), meth, acc, name)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a flag of npkl_dist._blocksolve for side B")
    ap.add_argument("--time", action="append", default=[], metavar="Class.method",
                    help="a _blocksolve method whose seconds per fit to report")
    ap.add_argument("--f-star", type=float, default=F_STAR)
    args = ap.parse_args(argv)
    flags = _flags(args.set)
    if not flags:
        raise SystemExit("--set: name at least one flag for side B")
    warnings.simplefilter("ignore")
    acc = collections.defaultdict(float)
    _timers(args.time, acc)
    S, y, _ = graph_for(args.n)
    L = npkl_dist.laplacian(S, 1e-3)
    C = constraints_for(y, "0.01")
    P = NPKLProblem.build(L, C, loss="square", gamma=1.0, rank=16, seed=0)
    ex = npkl_dist.executors.InProcessExecutor(2)
    defaults = {k: getattr(bs, k) for k in flags}
    for side in (defaults, flags):  # compile both sides
        for k, v in side.items():
            setattr(bs, k, v)
        fit_bcd(P, method="auto", max_sweeps=1, tol=0, executor=ex)
    rows = {"A": [], "B": []}
    stop = lambda s, obj, ch, sec: (obj - args.f_star) / abs(args.f_star) <= 1e-4  # noqa: E731
    for rnd in range(args.rounds):
        for side in (("A", "B") if rnd % 2 == 0 else ("B", "A")):
            fit_bcd(P, method="sweeps", max_sweeps=2, tol=0, executor=ex, trace=False)
            for k in flags:
                setattr(bs, k, defaults[k] if side == "A" else flags[k])
            acc.clear()
            t0 = time.perf_counter()
            res = fit_bcd(P, method="auto", max_sweeps=200, tol=0, executor=ex, callback=stop)
            wall = time.perf_counter() - t0
            row = {"wall": wall, "set-up": res.setup_seconds,
                   "outer sum": float(np.sum(res.sweep_seconds)), "outer": res.n_sweeps}
            row.update({name: acc[name] for name in args.time})
            rows[side].append(row)
            print(f"round {rnd + 1} {side}: " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                flush=True)
    for k, v in defaults.items():
        setattr(bs, k, v)
    print(f"B: {', '.join(f'{k}={v!r}' for k, v in flags.items())}; medians of "
          f"{args.rounds} fits a side:")
    for key in rows["A"][0]:
        a = float(np.median([r[key] for r in rows["A"]]))
        b = float(np.median([r[key] for r in rows["B"]]))
        ratio = f"{b / a:.3f}" if a else "-"
        print(f"  {key:32s} A {a:8.3f}  B {b:8.3f}  B/A {ratio}")


if __name__ == "__main__":
    main()
