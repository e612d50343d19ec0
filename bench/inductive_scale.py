"""Benchmark: the inductive kernel at 10^7 points, features and output in Zarr (issue 76).

Synthetic features: ``--n`` points in ``--d`` dimensions, a mixture of ``--classes`` Gaussian
classes (seeded), written to a Zarr array in chunks; ``--pairs`` pairs sampled from the
labels (half must-link). In one run:

* ``fit``: ``fit_inductive`` on the Zarr array (LogDet, ``--landmarks`` k-means++ landmarks,
  the median bandwidth rule), in a child process: wall seconds and the process's peak RSS;
* ``transform in-process``: ``transform_chunks`` of all n rows into a Zarr group, 2 threads,
  in a child process: wall seconds, peak RSS, chunks per second;
* ``transform on Dask``: the same on a 2-worker LocalCluster (one task per chunk): wall
  seconds, peak RSS of the driver and of every worker, and whether every chunk equals the
  in-process output bitwise;
* ``I/O floor`` (the reference): a pass that reads every chunk of the features and writes a
  chunk of the output's shape (zeros) into a Zarr group, with the same chunking.

Writes bench/results/inductive_scale_<n>.json (bench/_results.py)::

    python bench/inductive_scale.py --n 10000000
    python bench/inductive_scale.py --n 100000 --quick
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

DESCRIPTION = dict(
    title="Inductive kernel at scale: fit once, transform every point (Zarr in and out)",
    measures="wall seconds and peak RSS (GB) of the fit and of the chunked transform of all "
    "points, in-process (2 threads) and on a 2-worker Dask LocalCluster; chunks per second",
    reference="an I/O floor that reads every feature chunk and writes an output chunk of "
    "zeros with the same chunking; the Dask output compared bitwise with the in-process one",
    columns=[
        ("step", "step"),
        ("seconds", "seconds"),
        ("peak_gb", "peak RSS GB"),
        ("chunks_per_second", "chunks/s"),
        ("bitwise_equal", "= in-process"),
    ],
)


def make_features(path, n, d, classes, seed, chunk=200_000):
    import zarr

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, d)) * 3.0
    z = zarr.create_array(str(path), shape=(n, d), chunks=(chunk, d), dtype="f8")
    y = np.empty(n, dtype=np.int64)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        lab = rng.integers(0, classes, e - s)
        z[s:e] = centres[lab] + rng.standard_normal((e - s, d))
        y[s:e] = lab
    return y


CHILD = r"""
import json, resource, sys, time
import numpy as np, zarr
sys.path.insert(0, sys.argv[1])
import npkl_dist as nk
from npkl_dist.job._inductive import transform_chunks
from npkl_dist.solvers.inductive import InductiveKernel
a = json.loads(sys.argv[2])
X = zarr.open_array(a["features"], mode="r")
out = {}
if a["step"] == "fit":
    y = np.load(a["labels"])
    cons = nk.sample_constraints(y, a["pairs"] // 2, a["pairs"] // 2, seed=a["seed"])
    t = time.perf_counter()
    m = nk.fit_inductive(X, cons, landmarks=a["landmarks"], seed=a["seed"], max_iter=a["max_iter"])
    out["seconds"] = time.perf_counter() - t
    out["info"] = {k: m.info[k] for k in ("iterations", "converged", "fit_seconds", "rank")}
    m.save(a["model"])
elif a["step"] == "transform":
    m = InductiveKernel.load(a["model"])
    t = time.perf_counter()
    r = transform_chunks(m, a["features"], a["out"], chunk_rows=a["chunk_rows"], threads=2)
    out["seconds"] = time.perf_counter() - t
    out["chunks"] = r["chunks"]
elif a["step"] == "floor":
    g = zarr.open_group(a["out"], mode="w")
    n = X.shape[0]
    z = g.create_array("z", shape=(n, a["dim"]), chunks=(a["chunk_rows"], a["dim"]), dtype="f8",
                       config={"write_empty_chunks": True})
    t = time.perf_counter()
    c = a["chunk_rows"]
    for s in range(0, n, c):
        rows = X[s : s + c]
        z[s : s + rows.shape[0]] = np.zeros((rows.shape[0], a["dim"])) + rows[:, :1] * 0.0
    out["seconds"] = time.perf_counter() - t
out["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps(out))
"""


def child(step, **kw):
    args = json.dumps({"step": step, **kw})
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), args], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{step} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def dask_transform(model_path, features, out, chunk_rows, workers):
    import distributed

    from npkl_dist.job._inductive import transform_chunks
    from npkl_dist.solvers.inductive import InductiveKernel

    m = InductiveKernel.load(model_path)
    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        t = time.perf_counter()
        r = transform_chunks(m, features, out, chunk_rows=chunk_rows, client=client)
        seconds = time.perf_counter() - t
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    return seconds, r["chunks"], peaks


def equal_chunks(a, b, chunk_rows):
    import zarr

    za, zb = zarr.open_group(a)["z"], zarr.open_group(b)["z"]
    for s in range(0, za.shape[0], chunk_rows):
        if not np.array_equal(za[s : s + chunk_rows], zb[s : s + chunk_rows]):
            return False
    return True


def main(argv=None):
    from bench._results import command, write

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--d", type=int, default=16)
    p.add_argument("--classes", type=int, default=20)
    p.add_argument("--pairs", type=int, default=100_000)
    p.add_argument("--landmarks", type=int, default=128)
    p.add_argument("--max-iter", type=int, default=50)
    p.add_argument("--chunk-rows", type=int, default=65536)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--quick", action="store_true", help="smoke run; writes no result")
    args = p.parse_args(argv)
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="npkl-inductive-scale-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        feats = str(scratch / "X.zarr")
        t = time.perf_counter()
        y = make_features(feats, args.n, args.d, args.classes, args.seed)
        np.save(scratch / "y.npy", y)
        print(f"features: {time.perf_counter() - t:.1f}s", file=sys.stderr)
        model = str(scratch / "model.npz")
        fit = child(
            "fit",
            features=feats,
            labels=str(scratch / "y.npy"),
            pairs=args.pairs,
            landmarks=args.landmarks,
            seed=args.seed,
            max_iter=args.max_iter,
            model=model,
        )
        print(f"fit: {fit}", file=sys.stderr)
        from npkl_dist.solvers.inductive import InductiveKernel

        dim = InductiveKernel.load(model).dim
        z_in = str(scratch / "z_inprocess.zarr")
        tr = child("transform", features=feats, model=model, out=z_in, chunk_rows=args.chunk_rows)
        print(f"transform: {tr}", file=sys.stderr)
        floor = child(
            "floor",
            features=feats,
            out=str(scratch / "z_floor.zarr"),
            chunk_rows=args.chunk_rows,
            dim=dim,
        )
        print(f"floor: {floor}", file=sys.stderr)
        z_dask = str(scratch / "z_dask.zarr")
        d_sec, d_chunks, peaks = dask_transform(
            model, feats, z_dask, args.chunk_rows, args.workers
        )
        driver_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        same = equal_chunks(z_in, z_dask, args.chunk_rows)
        print(f"dask: {d_sec:.1f}s, equal {same}", file=sys.stderr)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = [
        {
            "step": f"fit (LogDet, {args.landmarks} landmarks, {args.pairs} pairs, "
            f"{fit['info']['iterations']} passes)",
            "seconds": fit["seconds"],
            "peak_gb": fit["peak_gb"],
        },
        {
            "step": "transform in-process (2 threads)",
            "seconds": tr["seconds"],
            "peak_gb": tr["peak_gb"],
            "chunks_per_second": tr["chunks"] / tr["seconds"],
        },
        {
            "step": f"transform on Dask ({args.workers} workers)",
            "seconds": d_sec,
            "peak_gb": max([driver_peak, *peaks.values()]),
            "chunks_per_second": d_chunks / d_sec,
            "bitwise_equal": same,
        },
        {
            "step": "I/O floor (read features, write zeros)",
            "seconds": floor["seconds"],
            "peak_gb": floor["peak_gb"],
            "chunks_per_second": tr["chunks"] / floor["seconds"],
        },
    ]
    for r in rows:
        print(r)
    if args.quick:
        return 0
    notes = [
        f"n = {args.n:,}, d = {args.d}, {args.classes} classes, output dimension {dim}, "
        f"chunks of {args.chunk_rows} rows; fit + in-process transform "
        f"{fit['seconds'] + tr['seconds']:.0f} s (issue 76's target: <= 600 s, <= 4 GB)",
        f"Dask peak RSS per process (GB): driver {driver_peak:.2f}, workers "
        + ", ".join(f"{v:.2f}" for v in peaks.values()),
    ]
    write(
        f"inductive_scale_{args.n}",
        command=command("bench/inductive_scale.py", argv),
        rows=rows,
        notes=notes,
        args=vars(args),
        **DESCRIPTION,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
