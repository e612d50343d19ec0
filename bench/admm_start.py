"""KL-ADMM from a spectral start instead of the paper's random one, on the harness's inputs.

kl-admm-ijcai2013 starts U and V at random (its footnote 2). Would a start near the
optimum's subspace end the fit earlier? For each data set and repetition this fits KL-ADMM
(the harness's protocol: its graph, constraints with K_ii = 1, gamma = 1, r from the Pataki
bound, IterMax 500 or 100 on adult, tol 1e-4; one BLAS and one numba thread) from each
start and prints iterations (``c``: the stopping rule held, ``*``: the cap), the median
time of --runs fits including the start's own cost (in brackets), the final objective and
the Rand accuracy of kernel k-means. Starts are ``initial_V``'s: ``random`` (the paper's),
``spectral`` (the r bottom eigenvectors of L, scaled) and ``coarse`` (the same on a coarse
level). ``--anderson M`` runs the accelerated iteration (``fit_admm(anderson=M)``) instead.

    python bench/admm_start.py [--datasets dbl-spiral] [--reps 5] [--runs 5]
        [--starts random spectral coarse] [--anderson 0]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["dbl-spiral"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--starts", nargs="+", default=["random", "spectral", "coarse"],
                    choices=["random", "spectral", "coarse"])
    ap.add_argument("--anderson", type=int, default=0)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import numba
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper.report import machine
    from bench.paper.run import task_inputs
    from npkl_dist._admm import fit_admm
    from npkl_dist._bcd import initial_V
    from npkl_dist.executors import InProcessExecutor

    threadpool_limits(limits=1, user_api="blas")
    numba.set_num_threads(1)
    ex = InProcessExecutor(1)
    print(f"machine: {machine()}; command: python bench/admm_start.py "
          f"{' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print("| data set | rep | " + " | ".join(args.starts) + " |")
    print("|---|---:|" + "---|" * len(args.starts))
    for name in args.datasets:
        for rep in range(args.reps):
            X, y, meta, L, cons, cons_diag = task_inputs(name, rep)
            k = int(np.unique(y).size)
            adult = meta.get("knn", 5) == 50
            kw = {"max_iter": 100 if adult else 500, "tol": 1e-4, "executor": ex,
                  "anderson": args.anderson}
            cells = []
            for start in args.starts:
                ts = []
                for _ in range(args.runs):
                    p = nk.NPKLProblem.build(L, cons_diag, loss="square", seed=rep)
                    t0 = time.perf_counter()
                    V0 = (None if start == "random"
                          else initial_V(p, np.random.default_rng(rep), start=start))
                    t1 = time.perf_counter()
                    res = fit_admm(p, V0=V0, **kw)
                    ts.append((time.perf_counter() - t0, t1 - t0))
                total, start_cost = np.median(np.array(ts), axis=0)
                acc = nk.clustering_metrics(
                    y, nk.kernel_kmeans(res.V, k, seed=rep))["rand_accuracy"]
                cells.append(f"{res.n_sweeps}{'c' if res.converged else '*'}, "
                             f"{total * 1e3:.2f} ms ({start_cost * 1e3:.2f}), "
                             f"f {res.objective:.5f}, {100 * acc:.2f}%")
            print(f"| {name} | {rep} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
