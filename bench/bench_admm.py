"""Benchmark: KL-ADMM's compiled loop against the reference loop, on the papers' data sets.

For each data set, repetition 0 of ``bench/paper/run.py``'s protocol (kNN graph, kl-admm's
diagonal targets, Pataki rank, gamma = 1, max_iter 500 or 100 on adult, tol 1e-4, one
thread): ``fit_admm(fused=False)`` (one ``session.iterate`` + ``session.objective`` per
iteration, the loop every executor runs) against ``fit_admm()`` (in-process: the iterations
inside one compiled call). Both are timed from ``NPKLProblem.build`` to the returned fit, as
the replication harness times them, alternating, ``--runs`` times after one warm-up each;
the table gives medians, their ratio, whether the two fits are bitwise equal, and the CPU
time the paper reports for the same data set (kl-admm-ijcai2013 Table 2) over ours.

Usage::

    python bench/bench_admm.py --datasets chessboard dbl-spiral glass heart iris sonar \
        soybean wine adult-a1a adult-a2a adult-a4a --runs 5

Prints the table and writes it, stamped with the machine and the commit, to
``bench/results/admm.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import npkl_dist as nk  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402
from npkl_dist.solvers.admm._fit import fit_admm  # noqa: E402


def case(name):
    from bench.paper.run import prepare_data

    X, y, meta = prepare_data(name)
    graph = nk.knn_graph(X, meta.get("knn", 5), seed=0, warn=False)
    cons = nk.sample_constraints(y, seed=0, diagonal=True)
    return graph.laplacian(1e-3), cons, meta.get("knn", 5) == 50


def timed(L, cons, adult, fused):
    t0 = time.perf_counter()
    p = nk.NPKLProblem.build(L, cons, loss="square", seed=0)
    res = fit_admm(
        p, max_iter=100 if adult else 500, tol=1e-4, executor=InProcessExecutor(1), fused=fused
    )
    return time.perf_counter() - t0, res, p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["iris", "adult-a1a"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", default=None, help="results file (default: bench/results/admm.json)")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    import numba
    from threadpoolctl import threadpool_limits

    from bench.paper.published import published_value

    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    warnings.simplefilter("ignore")
    rows = []
    t_all = time.perf_counter()
    for name in args.datasets:
        L, cons, adult = case(name)
        times = {False: [], True: []}
        fits = {}
        for fused in (False, True):  # warm-up (compilation, caches)
            timed(L, cons, adult, fused)
        for _ in range(args.runs):
            for fused in (False, True):
                t, res, p = timed(L, cons, adult, fused)
                times[fused].append(t)
                fits[fused] = res
        ref, got = fits[False], fits[True]
        same = (
            np.array_equal(ref.V, got.V)
            and ref.objective_trace == got.objective_trace
            and ref.rho_trace == got.rho_trace
        )
        t_ref, t_fused = float(np.median(times[False])), float(np.median(times[True]))
        pub = published_value(name, "KL-ADMM", quantity="cpu")
        row = {
            "name": name,
            "n": p.n_points,
            "rank": p.rank,
            "iters": got.n_sweeps,
            "ref": t_ref,
            "fused": t_fused,
            "same": same,
            "pub": pub[0] if pub else None,
        }
        print(row, flush=True)
        rows.append(row)
    write(rows, args, time.perf_counter() - t_all)


def write(rows, args, wall):
    """Print the table and write bench/results/admm.json (``--json``)."""
    from bench import _results

    for r in rows:
        r["speedup"] = f"{r['ref'] / r['fused']:.2f}x"
        r["bitwise"] = "yes" if r["same"] else "NO"
        r["pub_ratio"] = f"{r['pub'] / r['fused']:.0f}x" if r["pub"] else None
    columns = [
        ("name", "data set"),
        ("n", "n"),
        ("rank", "rank"),
        ("iters", "iterations"),
        ("ref", "reference s"),
        ("fused", "compiled loop s"),
        ("speedup", "speed-up"),
        ("bitwise", "bitwise equal"),
        ("pub", "published s"),
        ("pub_ratio", "published / ours"),
    ]
    for r in rows:
        print(" | ".join(str(r[k]) for k, _ in columns))
    _results.write(
        "admm",
        title="KL-ADMM: the compiled loop against the reference loop",
        measures="seconds from NPKLProblem.build to the fit of fit_admm() (in-process: the "
        "iterations inside one compiled call), median of alternating runs after a "
        "warm-up, one thread",
        reference="fit_admm(fused=False) (one session.iterate + session.objective per "
        "iteration, the loop every executor runs) in the same run, which must give "
        "bitwise the same fit; and kl-admm-ijcai2013 Table 2's CPU time",
        command=_results.command("bench/bench_admm.py", args.argv),
        args={k: v for k, v in vars(args).items() if k != "argv"},
        path=args.json,
        columns=columns,
        rows=rows,
        notes=[
            "problem: bench/paper/run.py repetition 0 (kl-admm protocol: diagonal targets, "
            "Pataki rank capped at 128, gamma = 1, max_iter 500, 100 on adult, tol 1e-4); "
            f"median of {args.runs} runs"
        ],
        extra={"wall_seconds": wall},
    )


if __name__ == "__main__":
    main()
