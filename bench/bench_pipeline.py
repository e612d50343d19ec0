"""The whole pipeline (Prefect flow) on synthetic points: wall time and peak memory per stage.

    python bench/bench_pipeline.py --n 1000000 --d 16 --knn 10 --rank 32 --constrained 0.01

Data: ``--clusters`` Gaussian blobs in d dimensions (unit spread, centres drawn with spread
``--separation``), a fraction ``--constrained`` of the points labelled (must-link and
cannot-link pairs sampled among them, 0.6 per labelled point each, the papers' protocol),
``--new`` extra points from the same blobs for the extend stage. The pipeline runs as one
Prefect flow (the temporary local server, started inside the timed region, unless
PREFECT_API_URL is set) with the in-process executor.

Reported: per stage the wall seconds and the process's peak resident memory during the
stage; total = wall time from before ``import prefect`` to the flow's return; orchestration
overhead = total - sum of stage seconds (Prefect import and start-up, task bookkeeping,
opening the run store). One JSON line on stdout, and the table, stamped with the machine and
the commit, in ``bench/results/pipeline_<n>.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def make_data(out: Path, n, d, n_new, clusters, constrained, separation, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=separation, size=(clusters, d))
    y = rng.integers(0, clusters, n + n_new)
    X = (centres[y] + rng.normal(size=(n + n_new, d))).astype(np.float64)
    lab = np.full(n, -1, np.int64)
    chosen = rng.choice(n, int(round(constrained * n)), replace=False)
    lab[chosen] = y[chosen]
    np.save(out / "X.npy", X[:n])
    np.save(out / "labels.npy", lab)
    np.save(out / "truth.npy", y[:n].astype(np.int64))
    np.save(out / "X_new.npy", X[n:])
    return chosen.size


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=16)
    p.add_argument("--knn", type=int, default=10)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--constrained", type=float, default=0.01)
    p.add_argument("--clusters", type=int, default=10)
    p.add_argument("--separation", type=float, default=3.0)
    p.add_argument("--new", type=int, default=10_000)
    p.add_argument("--max-sweeps", type=int, default=30)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="where data and the run go (default: a temp dir)")
    p.add_argument(
        "--json",
        default=None,
        help="results file (default: bench/results/pipeline_<n>.json; '' for none)",
    )
    args = p.parse_args(argv)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="npkl-bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    n_lab = make_data(
        work, args.n, args.d, args.new, args.clusters, args.constrained, args.separation, args.seed
    )
    gen = time.perf_counter() - t
    n_pairs = int(round(0.6 * n_lab))
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    cfg = {
        "run": str(run),
        "input": {
            "features": str(work / "X.npy"),
            "labels": str(work / "labels.npy"),
            "eval_labels": str(work / "truth.npy"),
            "n_must": n_pairs,
            "n_cannot": n_pairs,
        },
        "graph": {"knn": args.knn},
        "model": {
            "rank": args.rank,
            "max_sweeps": args.max_sweeps,
            "tol": 1e-5,
            "dtype": args.dtype,
            "seed": args.seed,
        },
        "execution": {"executor": "inprocess", "checkpoint_every": args.checkpoint_every},
        "output": {"out": str(work / "report")},
        "extend": {"features": str(work / "X_new.npy")},
    }
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    sys.path.insert(0, str(ROOT))
    import warnings

    t0 = time.perf_counter()
    from npkl_flows._config import validate_config
    from npkl_flows.pipeline import run_pipeline

    t_import = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at the sweep cap is expected
        res = run_pipeline(validate_config(cfg), quiet=True)
    total = time.perf_counter() - t0
    stages = res["stages"]
    compute = sum(s.get("seconds", 0.0) for s in stages.values())
    import psutil

    out = {
        "n": args.n,
        "d": args.d,
        "knn": args.knn,
        "rank": args.rank,
        "constrained_points": n_lab,
        "pairs": 2 * n_pairs,
        "new_points": args.new,
        "max_sweeps": args.max_sweeps,
        "dtype": args.dtype,
        "stages": {
            k: {"seconds": round(v.get("seconds", 0.0), 2), "peak_rss_mb": v.get("peak_rss_mb")}
            for k, v in stages.items()
        },
        "n_sweeps": stages["learn"].get("n_sweeps"),
        "objective": stages["learn"].get("objective"),
        "metrics": stages["evaluate"].get("metrics"),
        "graph_method": None,
        "total_seconds": round(total, 2),
        "stage_seconds": round(compute, 2),
        "overhead_seconds": round(total - compute, 2),
        "overhead_fraction": round((total - compute) / total, 4),
        "prefect_import_seconds": round(t_import, 2),
        "data_generation_seconds": round(gen, 2),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.1f} GiB, Python "
        f"{platform.python_version()}",
    }
    print(json.dumps(out))
    if args.json != "":
        _record(out, list(sys.argv[1:] if argv is None else argv), args.json or None)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _record(o, argv, path):
    """Write bench/results/pipeline_<n>.json (``--json``): one row per stage and the totals."""
    sys.path.insert(0, str(ROOT))
    from bench import _results

    rows = [
        {"stage": k, "seconds": v["seconds"], "peak_rss_mb": v["peak_rss_mb"]}
        for k, v in o["stages"].items()
    ]
    rows += [
        {"stage": "sum of stages", "seconds": o["stage_seconds"]},
        {"stage": "total (import prefect -> flow returns)", "seconds": o["total_seconds"]},
        {
            "stage": "orchestration overhead",
            "seconds": o["overhead_seconds"],
            "share": f"{100 * o['overhead_fraction']:.1f}%",
        },
    ]
    m = o.get("metrics") or {}
    _results.write(
        f"pipeline_{o['n']}",
        title=f"The whole pipeline on {o['n']:,} synthetic points",
        measures="wall seconds and peak resident memory of each stage of `npkl run`'s Prefect "
        "flow (in-process executor), and the flow's total from before `import "
        "prefect` to its return",
        reference="the sum of the stages' own seconds in the same run: the difference is the "
        "orchestration overhead (Prefect import and start-up, task bookkeeping, "
        "opening the run store)",
        command=_results.command("bench/bench_pipeline.py", argv),
        args=o,
        path=path,
        columns=[
            ("stage", "stage"),
            ("seconds", "wall s"),
            ("peak_rss_mb", "peak RSS MB"),
            ("share", "share of total"),
        ],
        rows=rows,
        notes=[
            f"d = {o['d']}, k = {o['knn']}, r = {o['rank']}, "
            f"{o['constrained_points']:,} points constrained, {o['pairs']:,} pairs, "
            f"{o['n_sweeps']} sweeps ({o['dtype']}), {o['new_points']:,} points extended",
            *(
                [
                    f"pairwise accuracy {m['rand_accuracy']:.4f}, ARI {m['ari']:.4f}, NMI "
                    f"{m['nmi']:.4f}"
                ]
                if m
                else []
            ),
        ],
    )


if __name__ == "__main__":
    raise SystemExit(main())
