"""Benchmark: block solves (issue 6, item 4) in-process vs on the Dask executor.

    flock /tmp/npkl-bench.lock python bench/bench_dask_block.py --n 100000

Problem: bench_block.py's (10-cluster Gaussian mixture in 8-D, kNN k = 10, delta = 1e-3,
rank 16, 1% of the points paired at random, square loss; graph cached in bench/.cache).
f* comes from a long in-process block reference run (scaled KKT < 1e-8 or --ref-iters outer
iterations). Each configuration then fits with method='block' (default preconditioner,
'amg-additive' since 2026-11-22 evening, 'amg-plain' before: in-process one AMG on L_UU,
on Dask block-Jacobi with a local AMG per block)
until the relative gap (f - f*)/f* <= --gap; the time counted runs from the call of fit_bcd
(layout, actor start-up and local AMG set-up included; starting the cluster not) to the
outer iteration that reaches the gap. Configurations: in-process with 1 and 2 numba
threads, Dask LocalCluster (processes) with 1 worker x 1 thread (one block) and 2 workers x
1 thread (two blocks). Medians over --repeats runs; a warm-up fit per cluster compiles the
serial kernels first.

Prints the table and writes it, stamped with the machine and the commit, to
``bench/results/dask_block.json`` (``--json``).
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


def main(argv=None):
    import distributed

    import npkl_dist
    from bench.bench_block import _stopper, constraints_for, graph_for, iters_to_gap, time_to_gap
    from npkl_dist import ConvergenceWarning, NPKLProblem, fit_bcd
    from npkl_dist.executors import InProcessExecutor
    from npkl_dist.executors._dask import DaskExecutor

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--frac", default="0.01")
    ap.add_argument("--loss", default="square")
    ap.add_argument("--gap", type=float, default=1e-4)
    ap.add_argument("--max-outer", type=int, default=400)
    ap.add_argument("--ref-iters", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--json", default=None, help="results file (default: bench/results/dask_block.json)"
    )
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    warnings.simplefilter("ignore", ConvergenceWarning)
    t_all = time.perf_counter()
    S, y, _ = graph_for(args.n)
    L = npkl_dist.laplacian(S, 1e-3)
    C = constraints_for(y, args.frac)
    P = NPKLProblem.build(L, C, loss=args.loss, gamma=1.0, rank=args.rank, seed=0)
    ref = fit_bcd(
        P,
        method="block",
        max_sweeps=args.ref_iters,
        tol=1.0,
        tol_kkt=1e-8,
        executor=InProcessExecutor(),
    )
    print(
        f"reference: {ref.n_sweeps} outer, f={ref.objective:.10g}, kkt={ref.kkt:.2e}", flush=True
    )
    runs = {}

    def measure(name, ex, n_workers=None):
        assert npkl_dist.solvers.bcd._setup.choose_method(P, ex) == "block"
        out = []
        for _ in range(args.repeats):
            res = fit_bcd(
                P,
                method="block",
                max_sweeps=args.max_outer,
                tol=0,
                executor=ex,
                callback=_stopper(ref.objective, args.gap),
            )
            out.append(res)
            print(
                f"{name}: {res.n_sweeps} outer, {res.fit_seconds:.1f} s, f={res.objective:.10g}",
                flush=True,
            )
        runs[name] = out

    for threads in (1, 2):
        measure(f"in-process, {threads} thread{'s' * (threads > 1)}", InProcessExecutor(threads))
    for workers in (1, 2):
        env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        t0 = time.perf_counter()
        with (
            distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                env=env,
            ) as cluster,
            distributed.Client(cluster) as c,
        ):
            t_cluster = time.perf_counter() - t0
            ex = DaskExecutor(c, blocks=workers)
            small = NPKLProblem.build(
                npkl_dist.laplacian(graph_for(20_000)[0], 1e-3),
                constraints_for(graph_for(20_000)[1], args.frac),
                loss=args.loss,
                rank=args.rank,
                seed=0,
            )
            fit_bcd(small, method="block", max_sweeps=2, tol=0, executor=ex)  # compile
            measure(
                f"Dask, {workers} worker{'s' * (workers > 1)} x 1 thread "
                f"({workers} block{'s' * (workers > 1)}; cluster start {t_cluster:.1f} s)",
                ex,
            )
    f_star = min([ref.objective] + [min(r.objective_trace) for rs in runs.values() for r in rs])
    write(args, ref, f_star, runs, time.perf_counter() - t_all, time_to_gap, iters_to_gap)


def write(args, ref, f_star, runs, wall, time_to_gap, iters_to_gap):
    """Print the table and write bench/results/dask_block.json (``--json``)."""
    from bench import _results

    rows, base = [], None
    for name, rs in runs.items():
        ts = [time_to_gap(r, f_star, args.gap) for r in rs]
        its = [iters_to_gap(r, f_star, args.gap) for r in rs]
        ok = [t for t in ts if t is not None]
        med = float(np.median(ok)) if ok else None
        rows.append(
            {
                "configuration": name,
                "outer": "/".join(str(i) if i else "-" for i in its),
                "setup": float(np.median([r.setup_seconds for r in rs])),
                "seconds": med,
                "runs": ts,
            }
        )
        if name.startswith("in-process, 2"):
            base = med
    for r in rows:
        r["ratio"] = (
            None if r["seconds"] is None or base is None else f"{r['seconds'] / base:.2f}x"
        )
        print(r, flush=True)
    _results.write(
        "dask_block",
        title="Block solves in-process and on the Dask executor",
        measures=f"seconds from the call of fit_bcd(method='block') to the outer iteration "
        f"reaching the {args.gap:g} gap (set-up included, cluster start not), on a "
        f"Dask LocalCluster of 1 and 2 worker processes; medians of {args.repeats} "
        f"runs",
        reference="the in-process executor with 1 and 2 threads on the same problem in the "
        "same run",
        command=_results.command("bench/bench_dask_block.py", args.argv),
        args={k: v for k, v in vars(args).items() if k != "argv"},
        path=args.json,
        columns=[
            ("configuration", "configuration"),
            ("outer", "outer iterations to gap"),
            ("setup", "set-up s"),
            ("seconds", "s to gap (median)"),
            ("ratio", "vs in-process 2 threads"),
        ],
        rows=rows,
        notes=[
            f"problem: bench_block.py's mixture (8-D, 10 clusters), kNN k=10, delta=1e-3, "
            f"n={args.n:,}, r={args.rank}, {args.frac} of the points paired at random, "
            f"loss {args.loss}, gamma=1; f* = {f_star:.10g} (in-process reference: "
            f"{ref.n_sweeps} outer iterations, KKT {ref.kkt:.1e}); Dask: block-Jacobi "
            f"with a local AMG per block"
        ],
        extra={"f_star": f_star, "wall_seconds": wall},
    )


if __name__ == "__main__":
    main()
