"""``npkl fit --solver inductive`` and ``npkl transform``: argument handling around
npkl_dist.job._inductive (no numerics here)."""

from __future__ import annotations

import json
import os
import sys

from npkl_dist import ValidationError
from npkl_dist.job._inductive import fit_inductive_job, load_model, transform_chunks


def _refuse_graph_options(args):
    if args.edges is not None:
        raise ValidationError(
            "--edges: --solver inductive learns a kernel on feature rows and builds no graph; "
            "give --features (or another --solver for a given graph)"
        )
    if args.features is None:
        raise ValidationError("--features: --solver inductive needs feature rows; give --features")
    if args.gamma == "cv":
        raise ValidationError(
            "--gamma: cv is not available for --solver inductive; give a number (the slack "
            "weight, default 1.0)"
        )
    if args.executor != "inprocess":
        raise ValidationError(
            "--executor: --solver inductive fits in this process (its fit touches only the "
            "landmarks and the constrained points); use `npkl transform --executor dask` to "
            "embed many points on Dask"
        )


def _progress(quiet):
    if quiet:
        return None

    def show(it, change):
        sys.stderr.write(f"\rinductive: pass {it}, change {change:.3g}   ")
        sys.stderr.flush()

    return show


def cmd_fit_inductive(args, announce) -> int:
    _refuse_graph_options(args)
    announce("fit", args.quiet, run=None, out=args.out)
    params = dict(
        regularizer=args.regularizer,
        kernel=args.kernel,
        bandwidth=args.bandwidth,
        landmarks=args.landmarks,
        basis=args.basis,
        gamma=float(args.gamma),
        bounds=None if args.bounds is None else tuple(args.bounds),
        scale=args.scale,
    )
    if args.max_sweeps is not None:
        params["max_iter"] = args.max_sweeps
    summary, model, Z, clusters = fit_inductive_job(
        features=args.features,
        constraints=args.constraints,
        labels=args.labels,
        groups=args.groups,
        n_must=args.n_must,
        n_cannot=args.n_cannot,
        eval_labels=args.eval_labels,
        clusters=args.clusters,
        out=args.out,
        run=args.run,
        threads=args.threads or 1,
        seed=args.seed,
        progress=_progress(args.quiet),
        **params,
    )
    if not args.quiet:
        sys.stderr.write("\n")
    if args.out and args.plot:
        from npkl_dist import plotting  # lazy: matplotlib only when a figure is drawn
        from npkl_dist.graph._io import read_labels

        fig = plotting.embedding_figure(
            Z,
            labels=None if args.eval_labels is None else read_labels(args.eval_labels),
            clusters=clusters,
            metrics=summary.get("metrics"),
            seed=args.seed,
            title=f"inductive kernel ({model.regularizer}, {model.base_kernel})",
            rows_name="z(x) of the training points",
        )
        plotting.save_figure(fig, os.path.join(args.out, "embedding.png"))
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        line = (
            f"inductive kernel ({summary['regularizer']}, {summary['kernel']}): objective "
            f"{summary['objective']:.6g} after {summary['iterations']} passes "
            f"({summary['fit_seconds']:.2f}s fit, {summary['transform_seconds']:.2f}s transform), "
            f"dimension {summary['rank']}"
        )
        if "metrics" in summary:
            m = summary["metrics"]
            line += (
                f"; pairwise accuracy {m['rand_accuracy']:.4f}, ARI {m['ari']:.4f}, "
                f"NMI {m['nmi']:.4f}"
            )
        print(line)
    return 0


def cmd_transform(args, storage_options) -> int:
    model = load_model(args.run, storage_options)
    out = args.out
    to_zarr = out.rstrip("/").endswith(".zarr") or "://" in out
    if args.executor == "dask" and not to_zarr:
        raise ValidationError(
            "--out: --executor dask writes a Zarr array; give a path or URL ending in .zarr"
        )
    if to_zarr:
        target = out
    else:
        os.makedirs(out, exist_ok=True)
        target = os.path.join(out, "embedding.npy")

    def progress(i, total):
        if not args.quiet:
            sys.stderr.write(f"\rtransform: chunk {i}/{total}   ")
            sys.stderr.flush()

    ex = None
    try:
        if args.executor == "dask":
            from npkl_dist.executors._dask import DaskExecutor

            ex = DaskExecutor(address=args.dask, workers=args.workers)
        res = transform_chunks(
            model,
            args.features,
            target,
            chunk_rows=args.chunk_rows,
            threads=args.threads,
            client=None if ex is None else ex.client,
            progress=progress,
        )
    finally:
        if ex is not None:
            if args.dask:
                ex.client.close()  # a cluster we did not start stays up
            ex.close()
    if not args.quiet:
        sys.stderr.write("\n")
    summary = {
        "model": str(args.run),
        "features": str(args.features),
        "out": target,
        **{k: v for k, v in res.items() if k != "z"},
    }
    if not to_zarr:
        with open(os.path.join(out, "transform.json"), "w") as fh:
            fh.write(json.dumps(summary, indent=2) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        print(
            f"embedded {res['n_points']} points (dimension {res['dim']}) in "
            f"{res['transform_seconds']:.2f}s: {res['chunks_computed']} of {res['chunks']} "
            f"chunks computed; wrote {target}"
        )
    return 0
