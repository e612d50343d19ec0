"""KL-ADMM fits of the paper harness, an earlier commit's package against the working tree's,
alternating in one process; the factors must be bitwise equal.

``python bench/admm_ab.py --base REV [--datasets chessboard iris ...] [--rounds 9]
[--threads T]``

For each data set, the harness's repetition-0 inputs (``bench.paper.run.task_inputs``: the
kNN graph, the Laplacian, the constraints with diagonal targets) and its KL-ADMM options
(IterMax 500, 100 on adult; tol 1e-4; one-thread in-process executor), one BLAS and one
numba thread, as ``python -m bench.paper`` runs its tasks (``--threads T``: T of each and a
T-thread executor on both sides, as ``python -m bench.paper --threads T``). The timed span is the harness's: the
problem's build and ``fit_admm``. ``--base``'s ``npkl_dist`` is unpacked as ``npkl_old``
(``bench.package_ab.old_package``). Each round fits both, in alternating order; a round
repeats a fit until it has run for at least ``--min-seconds`` and keeps the median.
Printed per data set: iterations, median time per fit of each side, the paired ratios
base / tree and their median, and whether V is bitwise the same (it must be: the change
this measures keeps every rounding).
"""

from __future__ import annotations

import argparse
import os
from importlib import import_module
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import npkl_dist  # noqa: E402
import npkl_dist.executors  # noqa: E402
from bench.package_ab import old_package  # noqa: E402
from bench.paper.run import _is_adult, task_inputs  # noqa: E402

SMALL = ("soybean", "chessboard", "dbl-spiral", "iris", "wine", "sonar", "glass", "heart")


def _fit_once(mod, fit_admm, L, cons_diag, opts):
    """The harness's KL-ADMM span: build the problem, fit. Returns (seconds, result)."""
    t0 = time.perf_counter()
    p = mod.NPKLProblem.build(L, cons_diag, loss="square", seed=0)
    res = fit_admm(p, **opts)
    return time.perf_counter() - t0, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    ap.add_argument("--datasets", nargs="+", default=list(SMALL))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1,
                    help="numba and BLAS threads and the executor's, both sides (default 1)")
    ap.add_argument("--min-seconds", type=float, default=0.2,
                    help="each side's fits in a round run at least this long (median kept)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import numba
    from threadpoolctl import threadpool_limits

    if not 1 <= args.threads <= numba.config.NUMBA_NUM_THREADS:
        ap.error(f"--threads: expected 1 ... {numba.config.NUMBA_NUM_THREADS} (numba's "
                 f"threads), got {args.threads}")
    numba.set_num_threads(args.threads)
    threadpool_limits(args.threads, user_api="blas")
    old = old_package(args.base, tempfile.mkdtemp(prefix="npkl_old_"))
    print(f"base {args.base} against the working tree; {args.rounds} rounds, "
          f"{args.threads} thread(s)")
    print("| data set | n | r | iterations | base (ms) | tree (ms) | base / tree (median of "
          "paired) | paired ratios | V bitwise equal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for name in args.datasets:
        X, y, meta, L, cons, cons_diag = task_inputs(name, 0)
        adult = _is_adult(name)
        sides = {}
        for side, mod in (("base", old), ("tree", npkl_dist)):
            # each package's own constraint type (the same pairs)
            cd = mod.Constraints.from_arrays(cons_diag.i, cons_diag.j, cons_diag.t,
                                             cons_diag.n_points, diagonal=True, warn=False)
            opts = {"max_iter": 100 if adult else 500, "tol": 1e-4,
                    "executor": mod.executors.InProcessExecutor(args.threads)}
            fit_admm = import_module(mod.__name__ + "._admm").fit_admm
            _, res = _fit_once(mod, fit_admm, L, cd, opts)  # compile, first touch
            sides[side] = (mod, fit_admm, cd, opts, res)
        same = np.array_equal(sides["base"][4].V, sides["tree"][4].V)
        its = sides["tree"][4].n_sweeps
        times = {"base": [], "tree": []}
        for rnd in range(args.rounds):
            for side in (("base", "tree") if rnd % 2 == 0 else ("tree", "base")):
                mod, fit_admm, cd, opts, _ = sides[side]
                ts, t_start = [], time.perf_counter()
                while not ts or time.perf_counter() - t_start < args.min_seconds:
                    ts.append(_fit_once(mod, fit_admm, L, cd, opts)[0])
                times[side].append(float(np.median(ts)))
        b, t = np.array(times["base"]), np.array(times["tree"])
        ratio = b / t
        print(f"| {name} | {X.shape[0]} | {sides['tree'][4].V.shape[1]} | {its} | "
              f"{np.median(b) * 1e3:.3g} | {np.median(t) * 1e3:.3g} | "
              f"{np.median(ratio):.3f} | {np.array2string(ratio, precision=2)} | "
              f"{'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
