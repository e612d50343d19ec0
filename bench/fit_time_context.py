"""What a sub-millisecond fit pays for the work before it: one pair of the fit-time table
timed after different kinds of preceding work, in one process.

``python bench/fit_time_context.py [--pair soybean:SimpleNPKL-linear] [--reps 3] [--runs 15]``

``bench/fit_time_warm.py`` showed that the misses of the fit-time table below 100x are at
100-106x when the fit is repeated (warm) and 1.2-2.9x slower after the harness's preceding
work (in context). This script asks what in that work costs the time: it times the
harness's own fit (``learn_kernel``, the repetition's inputs, one BLAS and one numba
thread), ``--runs`` times per repetition, each time right after one of:

- ``nothing``: the fit before it (warm);
- ``previous fit``: the method before it in the fit-time runs' order, fitted (as the
  harness does);
- ``kernel k-means``: kernel k-means on that method's V, only;
- ``harness work``: the previous method fitted, clustered and scored (``fit_time_warm``'s
  "in context");
- ``sleep 10 ms``: the process idle (the core may run something else or sleep);
- ``sleep 10 ms, then the fit``: idle, then one untimed fit of the same method;
- ``read 32 MB``: a sum over a 32 MB array (evicts the caches, no other code runs).

It prints the median over the repetitions of each way's median, and its ratio to the warm
time. If idling or streaming unrelated memory costs as much as the harness's work, the
in-context time is the caches', not the preceding work's code.
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
from bench.fit_time_warm import (  # noqa: E402
    ORDER, check_counts, harness_fit, parse_pair, previous_method)


def ways(fit, method, before, k, seed, y, big):
    """name -> the untimed work before each timed fit."""
    import npkl_dist as nk

    Vb = fit(before)
    return {
        "nothing": lambda: None,
        "previous fit": lambda: fit(before),
        "kernel k-means": lambda: nk.kernel_kmeans(Vb, k, seed=seed),
        "harness work": lambda: nk.clustering_metrics(
            y, nk.kernel_kmeans(fit(before), k, seed=seed)),
        "sleep 10 ms": lambda: time.sleep(0.01),
        "sleep 10 ms, then the fit": lambda: (time.sleep(0.01), fit(method)),
        "read 32 MB": lambda: float(big.sum()),
    }


def time_ways(name, method, reps, runs):
    """way -> list of per-repetition medians (seconds)."""
    from npkl_dist.executors import InProcessExecutor

    ex = InProcessExecutor(1)
    before = previous_method(method)
    big = np.random.default_rng(0).random(4_000_000)  # 32 MB
    out = {}
    for rep in range(reps):
        fit, y, k = harness_fit(name, rep, ex)
        for _ in range(5):
            fit(method)
        for way, pre in ways(fit, method, before, k, rep, y, big).items():
            ts = []
            for _ in range(runs):
                pre()
                t0 = time.perf_counter()
                fit(method)
                ts.append(time.perf_counter() - t0)
            out.setdefault(way, []).append(float(np.median(ts)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="soybean:SimpleNPKL-linear", metavar="DATASET:METHOD")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (harness inputs 0..N-1)")
    ap.add_argument("--runs", type=int, default=15, help="timed fits per repetition and way")
    args = ap.parse_args(argv)
    name, method = parse_pair(args.pair)
    check_counts("fit_time_context", args)
    print(pin_threads(1))
    from bench.paper.run import warm_up

    warnings.simplefilter("ignore")
    warm_up(ORDER)
    print(f"command: python bench/fit_time_context.py --pair {args.pair} --reps {args.reps} "
          f"--runs {args.runs}\n")
    res = time_ways(name, method, args.reps, args.runs)
    warm = float(np.median(res["nothing"]))
    print(f"| before each timed fit ({name} {method}) | fit (µs) | / warm |")
    print("|---|---:|---:|")
    for way, ts in res.items():
        t = float(np.median(ts))
        print(f"| {way} | {t * 1e6:.1f} | {t / warm:.2f} |")


if __name__ == "__main__":
    main()
