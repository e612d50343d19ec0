"""Dask executor and run-store benchmark (issue: run store and Dask executor).

    python bench/bench_dask.py --n 1000000 --rank 64 --dtype float32

Seconds per BCD sweep in-process (numba, 2 threads) vs the Dask executor on a LocalCluster
with 1 and 2 worker processes (1 thread each, 2 blocks per worker), measured in the same run
on the same problem as bench_sweep.py (uniform points in the unit square, 9-NN, 2% of points
constrained); halo bytes per colour step as a share of V; peak resident memory per worker;
time and size of one V checkpoint written to a local run store. Writes the table, stamped with
the machine and the commit, to ``bench/results/dask.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None):
    import distributed

    import npkl_dist as nk
    from bench.bench_sweep import disjoint_pairs, knn_affinity, machine_info
    from npkl_dist.executors import InProcessExecutor
    from npkl_dist.executors._dask import DaskExecutor
    from npkl_dist.store import RunStore, StoreCheckpointer

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--blocks-per-worker", type=int, default=2)
    ap.add_argument("--json", default=None, help="results file (default: bench/results/dask.json)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    S = knn_affinity(args.n, 9, 2, 0)
    cons = disjoint_pairs(args.n, 0.02, 1)
    p = nk.NPKLProblem.build(
        nk.laplacian(S, 1e-3), cons, loss="square", rank=args.rank, dtype=args.dtype, seed=0
    )
    plan = nk.make_plan(p)
    prep = nk.prepare(p, plan)
    V0 = np.ascontiguousarray(nk.initial_V(p, np.random.default_rng(0))[plan.order])
    print(f"problem built in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    rows = []
    order = np.arange(plan.n_colours)

    def timed(session, k):
        session.sweep(order)  # warm-up (compilation, first touches)
        ts = []
        for _ in range(k):
            t = time.perf_counter()
            session.sweep(order)
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    ref_V = V0.copy()
    s_in = InProcessExecutor(2).bcd_session(prep, plan, ref_V)
    t_in = timed(s_in, args.sweeps)
    rows.append(("in-process, 2 threads", t_in, 1.0, "", ""))
    print(f"in-process {t_in:.3f}s", file=sys.stderr)
    row_block = 65536
    for workers in (1, 2):
        cluster = distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            memory_limit=0,
        )
        client = distributed.Client(cluster)
        try:
            ex = DaskExecutor(client, blocks=args.blocks_per_worker * workers, threads=1)
            ex.align = row_block
            V = V0.copy()
            sess = ex.bcd_session(prep, plan, V)
            t = timed(sess, args.sweeps)
            per_step = np.array(sess.halo_bytes[-plan.n_colours :], dtype=float)
            share = per_step / V0.nbytes
            rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            peak = max(rss.values()) / 1024  # MiB (ru_maxrss is KiB on Linux)
            blocks = args.blocks_per_worker * workers
            rows.append(
                (
                    f"dask, {workers} worker(s) x 1 thread, {blocks} blocks",
                    t,
                    t / t_in,
                    f"{100 * share.max():.2f}% max, {100 * share.mean():.2f}% mean",
                    f"{peak:.0f} MiB",
                )
            )
            print(rows[-1], file=sys.stderr)
            # checkpoint: each block writes its own shards, the driver commits
            tmp = Path(tempfile.mkdtemp(prefix="npkl-bench-"))
            try:
                store = RunStore.create(str(tmp / "run"), config={"bench": True})
                ck = StoreCheckpointer(
                    store,
                    every=1,
                    row_block=row_block,
                    n=args.n,
                    width=args.rank,
                    dtype=args.dtype,
                )
                t = time.perf_counter()
                ck.on_sweep({"sweep": 1, "objective": 0.0, "rng_state": {}}, sess)
                t_ck = time.perf_counter() - t
                size = sum(f.stat().st_size for f in (tmp / "run").rglob("*") if f.is_file())
                store.close()
                rows.append(
                    (
                        f"  checkpoint write ({workers} worker(s) writing shards)",
                        t_ck,
                        None,
                        f"{size / 2**20:.0f} MiB on disk",
                        "",
                    )
                )
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            sess.close()
        finally:
            client.close()
            cluster.close()
    from bench import _results

    table = [
        {"executor": name, "seconds": t, "ratio": ratio, "halo": halo, "memory": mem}
        for name, t, ratio, halo, mem in rows
    ]
    for r in table:
        print(r)
    _results.write(
        "dask",
        title="Plain sweeps on the Dask executor, and run-store checkpoints",
        measures="seconds per plain BCD sweep on a Dask LocalCluster (1 and 2 worker "
        "processes, 1 thread each), halo bytes per colour step, peak RSS per worker, "
        "and one V checkpoint written to a local run store",
        reference="the in-process executor with 2 threads on the same problem in the same run",
        command=_results.command("bench/bench_dask.py", argv),
        args=vars(args),
        path=args.json,
        columns=[
            ("executor", "executor"),
            ("seconds", "seconds"),
            ("ratio", "/ in-process"),
            ("halo", "halo per colour step (share of V)"),
            ("memory", "peak RSS per worker"),
        ],
        rows=table,
        notes=[
            f"problem: bench_sweep.py's (uniform points in the unit square, 9-NN, 2% of the "
            f"points constrained), n = {args.n:,}, r = {args.rank}, {args.dtype}, "
            f"{plan.n_colours} colours, V = {V0.nbytes / 2**20:.0f} MiB; median of "
            f"{args.sweeps} sweeps after a warm-up"
        ],
        extra={"software": machine_info()},
    )


if __name__ == "__main__":
    main()
