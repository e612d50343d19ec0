"""Clustering accuracy of hinge fits with the joint move over the kink ladder against the exact
kink set's move, on the papers' data sets and protocol (issue 6).

``python bench/hinge_ladder_accuracy.py [DATASET ...] [--reps R] [--fits harness default]``

For each data set and repetition (the paper harness's inputs: ``bench.paper.run.task_inputs``),
BCD-hinge fitted twice per kind of fit, with ``kink_ladder`` = the default ladder
(``npkl_dist._joint.KINK_LADDER``) and with the exact kink set alone (``(KINK_RTOL,)``, the
move before 2026-11-27); each fit clustered by kernel k-means with the true number of classes
(seed = repetition), scored by pairwise (Rand) accuracy. Fits: ``harness`` is the paper
harness's BCD-hinge (``bench.paper.run.bcd_options``: plain sweeps, ``hinge_kkt=False``,
cap 1,000, ``tol = 1e-5``), ``default`` is ``fit_bcd``'s defaults (``auto``: block solves for
the hinge; the default stop). One thread. Prints a Markdown table of the means over the
repetitions (the joint KKT residual: the median): objective, joint KKT residual, outer
iterations, seconds, accuracy (± std), and how many repetitions each move won, lost and tied
on accuracy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import npkl_dist as nk  # noqa: E402
from npkl_dist._joint import KINK_LADDER, KINK_RTOL  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402

SMALL = ["soybean", "chessboard", "dbl-spiral", "iris", "wine", "sonar", "glass", "heart",
         "breast-cancer"]
FITS = ("harness", "default")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="*", default=SMALL)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--fits", nargs="+", default=list(FITS), choices=FITS)
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps: expected a positive count, got {args.reps}")
    from bench._env import pin_threads
    from bench.paper.run import bcd_options, task_inputs

    head = pin_threads(1)
    warnings.simplefilter("ignore")
    print(f"{head}; {args.reps} repetitions; ladder {KINK_LADDER}, exact ({KINK_RTOL:g},)")
    print("| data set | fit | move | objective | KKT | its | s | accuracy | ladder won / lost "
          "/ tied |")
    print("|:---|:---|:---|---:|---:|---:|---:|---:|:---|")
    ex = InProcessExecutor(1)
    for name in args.datasets:
        rows = {}
        for rep in range(args.reps):
            X, y, meta, L, cons, _ = task_inputs(name, rep)
            k = int(np.unique(y).size)
            P = nk.NPKLProblem.build(L, cons, loss="hinge", seed=rep)
            for fit in args.fits:
                # the harness's options or fit_bcd's defaults; one executor, untraced
                opts = bcd_options(meta.get("knn", 5) == 50) if fit == "harness" else {}
                for move, ladder in (("ladder", None), ("exact", (KINK_RTOL,))):
                    t = time.perf_counter()
                    r = nk.fit_bcd(P, **{**opts, "executor": ex, "trace": False,
                                         "kink_ladder": ladder})
                    dt = time.perf_counter() - t
                    labels = nk.kernel_kmeans(r.V, k, seed=rep)
                    acc = nk.clustering_metrics(y, labels)["rand_accuracy"]
                    rows.setdefault((fit, move), []).append(
                        (r.objective, r.kkt, len(r.change_trace), dt, acc))
        for fit in args.fits:
            lad = np.array(rows[(fit, "ladder")])
            exa = np.array(rows[(fit, "exact")])
            won = int(np.sum(lad[:, 4] > exa[:, 4] + 1e-12))
            lost = int(np.sum(lad[:, 4] < exa[:, 4] - 1e-12))
            for move, a in (("ladder", lad), ("exact", exa)):
                score = (f"{won} / {lost} / {args.reps - won - lost}" if move == "ladder"
                         else "")
                print(f"| {name} | {fit} | {move} | {a[:, 0].mean():.4f} | "
                      f"{statistics.median(a[:, 1]):.1e} | {a[:, 2].mean():.0f} | "
                      f"{a[:, 3].mean():.2f} | {100 * a[:, 4].mean():.2f} ± "
                      f"{100 * a[:, 4].std():.2f} | {score} |", flush=True)


if __name__ == "__main__":
    main()
