"""Fit time of the fit-time comparison's pairs timed two ways in one process: warm (the same fit
repeated) and as the harness times it (right after the work a harness task does before it).

``python bench/fit_time_warm.py [--pairs DATASET:METHOD ...] [--reps 20] [--runs 15]``

Issue 3's target is a fit time at least 100x below the paper's CPU time. ``python -m bench.paper``
times each fit once, in its task, after the methods before it: for the fit-time runs
(``--methods KL-ADMM SimpleNPKL-linear SimpleNPKL-sqhinge``) that is the previous method's fit,
kernel k-means on it and the clustering metrics. The sub-millisecond fits pay for caches the
work before them emptied. This script measures, per repetition of the harness's inputs
(``task_inputs``) and with the harness's own fit (``learn_kernel``, one BLAS and one numba
thread):

- **warm**: ``--runs`` fits in a row after five untimed ones; the repetition's median;
- **in context**: ``--runs`` times the harness's preceding work (the method before it in the
  fit-time runs' order, cyclically, fitted, clustered and scored), then the fit, timed; the
  repetition's median.

It prints, per pair, the median over the repetitions of both, the budget (the published CPU
time / 100, ``bench.paper.published``) and both ratios against the published time. The
harness's own ratio is the in-context one; the warm one says how much of a miss is the cold
caches. Same inputs, options and order as the harness, so the fits are the harness's fits
(the script checks V against a fresh fit).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._env import pin_threads  # noqa: E402
from bench.paper.fit_time_machines import METHODS  # noqa: E402

#: the fit-time runs' methods (bench/paper/README.md's commands pass them in this order, so
#: each task fits them in it)
ORDER = METHODS
#: the pairs below 100x on the Zen 5 (bench/RESULTS.md, twenty-second to twenty-fourth sessions)
DEFAULT_PAIRS = ("soybean:SimpleNPKL-linear", "iris:SimpleNPKL-linear",
                 "chessboard:SimpleNPKL-sqhinge", "dbl-spiral:KL-ADMM")


def parse_pair(text):
    name, sep, method = text.partition(":")
    if not sep or method not in ORDER:
        raise SystemExit(f"fit_time_warm: pair={text!r} must be DATASET:METHOD with METHOD one "
                         f"of {', '.join(ORDER)} (e.g. iris:SimpleNPKL-linear)")
    return name, method


def previous_method(method):
    """The method fitted before ``method`` in each task of the fit-time runs (``ORDER``,
    cyclically: the first one follows the task's last)."""
    return ORDER[(ORDER.index(method) - 1) % len(ORDER)]


def check_counts(prog, args, flags=("reps", "runs")):
    """SystemExit naming the first of ``flags`` (parsed ``args``) below 1, as ``prog`` says."""
    for flag in flags:
        if getattr(args, flag) < 1:
            raise SystemExit(f"{prog}: --{flag}={getattr(args, flag)} must be >= 1")


def harness_fit(name, rep, executor):
    """(fit, y, k) for repetition ``rep`` of data set ``name``: ``fit(method)`` is the
    harness's fit of that method on the repetition's inputs (``task_inputs``,
    ``learn_kernel``), returning V; y the labels, k the number of classes."""
    from bench.paper.run import learn_kernel, task_inputs

    X, y, meta, L, cons, cons_diag = task_inputs(name, rep)
    n, k = X.shape[0], int(np.unique(y).size)

    def fit(m):
        return learn_kernel(m, L, cons, cons_diag, n=n, k=k, adult=False, seed=rep,
                            executor=executor, rec={})

    return fit, y, k


def time_pair(name, method, reps, runs):
    """(warm medians, in-context medians) per repetition, seconds."""
    import npkl_dist as nk
    from npkl_dist.executors import InProcessExecutor

    ex = InProcessExecutor(1)
    before = previous_method(method)
    warm, ctx = [], []
    for rep in range(reps):
        fit, y, k = harness_fit(name, rep, ex)
        V_ref = fit(method)
        for _ in range(4):
            fit(method)
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            V = fit(method)
            ts.append(time.perf_counter() - t0)
        if not np.array_equal(V, V_ref):
            raise SystemExit(f"fit_time_warm: {name} {method} rep {rep}: V differs between "
                             f"repeated fits of the same input")
        warm.append(float(np.median(ts)))
        ts = []
        for _ in range(runs):
            Vb = fit(before)  # the harness's preceding work: fit, cluster, score
            nk.clustering_metrics(y, nk.kernel_kmeans(Vb, k, seed=rep))
            t0 = time.perf_counter()
            fit(method)
            ts.append(time.perf_counter() - t0)
        ctx.append(float(np.median(ts)))
    return warm, ctx


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", nargs="+", default=list(DEFAULT_PAIRS), metavar="DATASET:METHOD")
    ap.add_argument("--reps", type=int, default=20, help="repetitions (harness inputs 0..N-1)")
    ap.add_argument("--runs", type=int, default=15, help="timed fits per repetition and way")
    args = ap.parse_args(argv)
    pairs = [parse_pair(p) for p in args.pairs]
    check_counts("fit_time_warm", args)
    print(pin_threads(1))
    from bench.paper.published import published_value
    from bench.paper.run import warm_up

    warnings.simplefilter("ignore")
    warm_up(ORDER)  # as each harness worker does: the compiled kernels loaded, untimed
    print(f"command: python bench/fit_time_warm.py --pairs {' '.join(args.pairs)} "
          f"--reps {args.reps} --runs {args.runs}\n")
    print("| data set | method | published (s) | budget (ms) | warm (ms) | warm ratio "
          "| in context (ms) | in-context ratio | in context / warm |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, method in pairs:
        pub = published_value(name, method, quantity="cpu")
        if pub is None:
            raise SystemExit(f"fit_time_warm: no published CPU time for {name} {method}")
        warm, ctx = time_pair(name, method, args.reps, args.runs)
        w, c = float(np.median(warm)), float(np.median(ctx))
        print(f"| {name} | {method} | {pub[0]:g} | {pub[0] * 10:.3f} | {w * 1e3:.3f} "
              f"| {pub[0] / w:.0f}x | {c * 1e3:.3f} | {pub[0] / c:.0f}x | {c / w:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
