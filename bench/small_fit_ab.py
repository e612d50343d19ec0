"""Small SimpleNPKL fits of an earlier commit's package against the working tree's, timed as
the paper harness times them: each fit right after the work a harness task does before it.

``python bench/small_fit_ab.py --base REV [--loss linear] [--reps 20] [--rounds 3] DATASET ...``

For each data set and repetition (the harness's inputs, ``task_inputs``), each round runs,
in alternating order, for the base package (``git archive REV npkl_dist`` unpacked as
``npkl_old``, see ``bench/package_ab.py``) and for the working tree: the harness's preceding
work (the working tree's KL-ADMM fit on the same problem, kernel k-means on it and the
clustering metrics), then ``NPKLProblem.build`` + ``fit_simplenpkl`` of the variant, timed.
One BLAS and one numba thread, as the harness. Prints per data set the medians of both and the
median of the paired ratios base / tree, and checks that both give the same V (bitwise, or
the largest difference). Comparing fit after fit in one process resolves what runs of the
harness minutes apart cannot (the host drifts by 10-30%).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._env import pin_threads  # noqa: E402
from bench.package_ab import old_package  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--base", required=True)
    ap.add_argument("--loss", default="linear")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(pin_threads(1))
    import npkl_dist as new
    from bench.paper.run import task_inputs
    from npkl_dist._admm import fit_admm
    from npkl_dist._simplenpkl import fit_simplenpkl as fit_new

    old = old_package(args.base, tempfile.mkdtemp(prefix="npkl_old_"))
    from npkl_old._simplenpkl import fit_simplenpkl as fit_old

    variants = {"base": (old, fit_old), "tree": (new, fit_new)}
    warnings.simplefilter("ignore")
    print(f"base {args.base} vs working tree, SimpleNPKL {args.loss}, B = 100, "
          f"{args.reps} repetitions x {args.rounds} rounds")
    for name in args.datasets:
        times = {v: [] for v in variants}
        ratios, worst = [], 0.0
        for rep in range(args.reps):
            X, y, meta, L, cons, cons_diag = task_inputs(name, rep)
            k = int(np.unique(y).size)
            # each package its own Constraints (the old one checks for its own class)
            own = {"tree": cons, "base": old.Constraints.from_arrays(
                cons.i, cons.j, cons.t, cons.n_points, warn=False)}
            for v, (mod, fit) in variants.items():  # warm: compiled code loaded
                fit(mod.NPKLProblem.build(L, own[v], loss=args.loss, seed=rep), B=100.0)
            for rnd in range(args.rounds):
                order = list(variants) if (rep + rnd) % 2 == 0 else list(variants)[::-1]
                got = {}
                for v in order:
                    mod, fit = variants[v]
                    # the harness's work before this fit: KL-ADMM, k-means, metrics
                    pa = new.NPKLProblem.build(L, cons_diag, loss="square", seed=rep)
                    Va = fit_admm(pa, max_iter=500, tol=1e-4,
                                  executor=new.executors.InProcessExecutor(1)).V
                    new.clustering_metrics(y, new.kernel_kmeans(Va, k, seed=rep))
                    t0 = time.perf_counter()
                    res = fit(mod.NPKLProblem.build(L, own[v], loss=args.loss, seed=rep),
                              B=100.0)
                    times[v].append(time.perf_counter() - t0)
                    got[v] = res.V
                ratios.append(times["base"][-1] / times["tree"][-1])
                d = float(np.max(np.abs(got["base"] - got["tree"]))) if got["base"].size else 0.0
                worst = max(worst, d)
        tb, tt = (1e3 * np.median(times[v]) for v in ("base", "tree"))
        same = "V bitwise equal" if worst == 0.0 else f"max |V_base - V_tree| = {worst:.3g}"
        print(f"{name}: base {tb:.3f} ms, tree {tt:.3f} ms, paired base/tree "
              f"{np.median(ratios):.3f} (n = {len(ratios)}); {same}")


if __name__ == "__main__":
    main()
