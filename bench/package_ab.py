"""Block fits at n = 1e6 of an earlier commit's package against the working tree's, alternating
in one process, with the time of each phase of the outer iterations.

``python bench/package_ab.py --base REV [--rounds R]``

The earlier package is ``git archive REV npkl_dist`` unpacked into a temporary directory as
``npkl_old`` (its imports are relative, so it runs beside ``npkl_dist``). Both fit
block_gap_1e6.py's problem (n = 1e6, 1% constrained, square loss, r = 16, 2 threads) to the
1e-4 gap of its f*, in alternating order, each after a short plain-sweep fit (fresh memory,
as a fit after another job meets it); every round ends with seven plain sweeps of the
working tree, whose median is printed. Printed: each fit's wall time, set-up, outer sum and
count, and objective; the medians of the phases (``BlockPart`` methods) and their paired
differences; the paired wall-time ratios base / working tree and their median.

Comparing in one process, fit after fit, is what resolves a few per cent on a host whose
speed drifts by tens of per cent within minutes (runs of block_gap_1e6.py in turn did not).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import npkl_dist  # noqa: E402
import npkl_dist.executors  # noqa: E402
from bench._env import time_method  # noqa: E402
from bench.bench_block import constraints_for, graph_for  # noqa: E402

F_STAR = 2214.258  # block_gap_1e6's reference optimum at n = 1e6
PHASES = ("pcg_precondition", "pcg_matvec", "finish_block", "colour_step", "direction",
          "subspace_step", "objective_parts")


def old_package(rev: str, where: str):
    """``npkl_dist`` of commit ``rev``, importable as ``npkl_old`` from ``where``."""
    data = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", rev, "npkl_dist"],
                          check=True, capture_output=True).stdout
    tar_path = os.path.join(where, "old.tar")
    with open(tar_path, "wb") as fh:
        fh.write(data)
    with tarfile.open(tar_path) as tar:
        tar.extractall(where, filter="data")
    os.rename(os.path.join(where, "npkl_dist"), os.path.join(where, "npkl_old"))
    sys.path.insert(0, where)
    mod = importlib.import_module("npkl_old")
    importlib.import_module("npkl_old.executors")
    return mod


def time_phases(mod, acc):
    """Time the ``PHASES`` methods of ``mod``'s BlockPart (those it has) into acc."""
    bsm = importlib.import_module(mod.__name__ + "._blocksolve")
    for ph in PHASES:
        if hasattr(bsm.BlockPart, ph):
            time_method(bsm.BlockPart, ph, acc)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    tmp = tempfile.mkdtemp(prefix="npkl_old_")
    old = old_package(args.base, tmp)
    S, y, _ = graph_for(args.n)
    C = constraints_for(y, "0.01")
    sides = {}
    for name, mod in (("base", old), ("tree", npkl_dist)):
        L = mod.laplacian(S, 1e-3)
        Cm = mod.Constraints.from_arrays(C.i, C.j, C.t, C.n_points)
        P = mod.NPKLProblem.build(L, Cm, loss="square", gamma=1.0, rank=16, seed=0)
        ex = mod.executors.InProcessExecutor(2)
        mod.fit_bcd(P, method="auto", max_sweeps=1, tol=0, executor=ex)  # compile
        acc = collections.defaultdict(float)
        time_phases(mod, acc)
        sides[name] = (mod, P, ex, acc)
    stop = lambda s, obj, ch, sec: (obj - F_STAR) / abs(F_STAR) <= 1e-4  # noqa: E731
    fits = {"base": [], "tree": []}
    phases = {"base": [], "tree": []}
    for rnd in range(args.rounds):
        for name in (("base", "tree") if rnd % 2 == 0 else ("tree", "base")):
            mod, P, ex, acc = sides[name]
            mod.fit_bcd(P, method="sweeps", max_sweeps=2, tol=0, executor=ex, trace=False)
            acc.clear()
            t0 = time.perf_counter()
            res = mod.fit_bcd(P, method="auto", max_sweeps=200, tol=0, executor=ex,
                              callback=stop)
            wall = time.perf_counter() - t0
            fits[name].append((wall, res.setup_seconds, float(np.sum(res.sweep_seconds))))
            phases[name].append(dict(acc))
            print(f"round {rnd + 1} {name}: wall {wall:.3f} s, set-up {res.setup_seconds:.3f} s,"
                  f" outer sum {fits[name][-1][2]:.3f} s, {res.n_sweeps} outer, objective "
                  f"{res.objective:.13g}", flush=True)
        mod, P, ex, _ = sides["tree"]
        swp = mod.fit_bcd(P, method="sweeps", max_sweeps=7, tol=0, executor=ex, trace=False)
        print(f"  plain sweep median {np.median(swp.sweep_seconds):.3f} s", flush=True)
    print(f"phases (seconds per fit; medians of {args.rounds}, paired base - tree):")
    for ph in PHASES:
        b = np.array([r.get(ph, 0.0) for r in phases["base"]])
        t = np.array([r.get(ph, 0.0) for r in phases["tree"]])
        print(f"  {ph:18s} base {np.median(b):.3f}  tree {np.median(t):.3f}  paired "
              f"{np.array2string(b - t, precision=3)}")
    b, t = np.array(fits["base"]), np.array(fits["tree"])
    for k, label in enumerate(("wall", "set-up", "outer sum")):
        ratio = b[:, k] / t[:, k]
        print(f"{label:10s} base {np.median(b[:, k]):.3f} s  tree {np.median(t[:, k]):.3f} s  "
              f"paired base/tree {np.array2string(ratio, precision=3)}  median "
              f"{np.median(ratio):.3f}")


if __name__ == "__main__":
    main()
