"""The inductive kernel's pipeline stages (``[model] solver = "inductive"``): its learn stage,
which keeps the model in the run store, and the transform stage of row-chunk tasks; the
extension of new rows by the model. The other stages and their helpers: ``_stages``."""

from __future__ import annotations

import hashlib

import numpy as np

from npkl_dist import ValidationError
from npkl_dist._compile_watch import CompileWatch
from npkl_dist.graph._blocks import row_blocks
from npkl_dist.graph._graph import _check_features
from npkl_dist.job._inductive import RUN_MODEL_KEY, chunk_size, extend_inductive
from npkl_dist.solvers.inductive import InductiveKernel, fit_inductive
from npkl_dist.store._rows import (
    create_row_arrays,
    read_row_arrays,
    row_blocks_present,
    write_row_block,
)

from . import _stage_kit as S  # the helpers every stage module shares


def _save_model(store, model: InductiveKernel) -> str:
    """The model into the run store (``RUN_MODEL_KEY``, one atomic object: what `npkl transform
    RUN` reads); returns its sha256, which the learn stage records."""
    import io

    buf = io.BytesIO()
    model.save(buf)
    data = buf.getvalue()
    store._require_writer("the inductive model")
    with store._io("writing the inductive model"):
        store._objects.write_atomic(RUN_MODEL_KEY, data)
    return hashlib.sha256(data).hexdigest()


def run_model(store, info: dict) -> InductiveKernel:
    """The learn stage's model, checked against the sha256 its record holds."""
    import io

    data = store.read_stage_object("learn", RUN_MODEL_KEY, info.get("model_sha256", ""))
    return InductiveKernel.load(io.BytesIO(data))


def _model(ctx: S.Context) -> InductiveKernel:
    if "model" not in ctx.cache:
        ctx.cache["model"] = run_model(ctx.store, ctx.done("learn") or {})
    return ctx.cache["model"]


def learn_inductive(ctx: S.Context) -> dict:
    """Fit the inductive kernel on the stored features and pairs (the landmarks and the
    constrained points only; a crash repeats the fit, which touches no n-sized work) and keep
    the model in the run store."""
    m, ind = ctx.cfg["model"], ctx.cfg["inductive"]
    out: dict = {}
    with S.measure(out):
        inputs = ctx.store.read_inputs()
        bar = ctx.bar("learn", m["max_sweeps"])

        def progress(it, change):
            bar.update(int(it))
            for hook in ctx.sweep_hooks:
                hook(int(it), float("nan"), float(change), 0.0)

        compiling = CompileWatch(None if ctx.quiet else (lambda: S._compile_notice(bar)))
        try:
            with compiling:
                model = fit_inductive(
                    inputs["features"],
                    inputs["constraints"],
                    regularizer=ind["regularizer"],
                    kernel=ind["kernel"],
                    bandwidth=ind["bandwidth"],
                    landmarks=ind["landmarks"],
                    basis=ind["basis"],
                    gamma=m["gamma"],
                    max_iter=m["max_sweeps"],
                    tol=ind["tol"],
                    seed=m["seed"],
                    progress=progress,
                    scale=ctx.cfg["graph"]["scale"],
                )
        finally:
            bar.close()
        sha = _save_model(ctx.store, model)
        ctx.cache["model"] = model
    info = model.info
    return S._finish(
        ctx,
        "learn",
        {
            **out,
            "solver": "inductive",
            "regularizer": model.regularizer,
            "kernel": model.base_kernel,
            "bandwidth": model.bandwidth,
            "basis": info["basis"],
            "landmarks": info["landmarks"],
            "rank": model.dim,
            "bounds": info["bounds"],
            "gamma": info["gamma"],
            "seed": m["seed"],
            "objective": info["objective"],
            "n_sweeps": info["iterations"],
            "converged": info["converged"],
            "fit_seconds": info["fit_seconds"],
            "compile_seconds": compiling.seconds,
            "model_sha256": sha,
            "model_key": RUN_MODEL_KEY,
        },
    )


def transform_block_to_store(model: InductiveKernel, store, start: int, stop: int) -> int:
    """One task (driver or Dask worker): z of the stored feature rows [start, stop), written
    into the run store as one row block of ``inductive_z/z`` (bitwise the same on any worker:
    blocks start at multiples of the model's tile)."""
    import zarr  # optional engine (the zarr extra)

    with store._io(f"reading feature rows [{start}, {stop})"):
        X = zarr.open_array(store._block_store(), path="inputs/features", mode="r", zarr_format=3)
        rows = np.asarray(X[start:stop])
    write_row_block(store, f"{S.Z_GROUP}/z", start, model.transform(rows, start=start))
    return stop - start


def transform(ctx: S.Context) -> dict:
    """Inductive runs: z of every training row, one task per row chunk (Dask tasks when the
    run has a cluster), each chunk written whole into the run store, so a rerun computes only
    the missing chunks; then the embedding result. Other solvers: a record only."""
    if (info := ctx.done("transform")) is not None:
        return S._skip("transform", info)

    out: dict = {}
    with S.measure(out):
        meta: dict = {"n_rows": 0}
        if S.inductive(ctx.cfg):
            model = _model(ctx)
            n = int(ctx.store.stages()["ingest"]["info"]["n_points"])
            chunk = chunk_size(ctx.cfg["inductive"]["chunk_rows"])
            spans = row_blocks(n, chunk)
            create_row_arrays(ctx.store, S.Z_GROUP, {"z": (model.dim, "float64")}, n, chunk)
            have = row_blocks_present(ctx.store, f"{S.Z_GROUP}/z", n, chunk)
            todo = [sp for b, sp in enumerate(spans) if b not in have]
            bar = ctx.bar("transform", len(todo))
            try:
                S._run_blocks(ctx, model, todo, bar, task=_block_task())
            finally:
                bar.close()
            Z = read_row_arrays(ctx.store, S.Z_GROUP, ("z",))["z"]
            ctx.store.write_results(embedding=Z)
            ctx.cache["V"] = Z
            meta = {
                "n_rows": n,
                "dim": model.dim,
                "chunk_rows": chunk,
                "n_chunks": len(spans),
                "chunks_reused": len(spans) - len(todo),
                "executor": "dask" if ctx.client is not None else "inprocess",
            }
    return S._finish(ctx, "transform", {**out, **meta})


def extend_inductive_points(store, Q, cache=None):
    """New rows by the run's inductive model (it scales them as in training)."""
    res = store.read_results()
    if "embedding" not in res:
        raise ValidationError(
            f"extend: run {store.url} has no embedding yet; finish it with "
            f"`npkl resume {store.url}` first"
        )
    stages = store.stages()
    model = (cache or {}).get("model") or run_model(store, stages["learn"]["info"])
    ev = stages.get("evaluate", {}).get("info", {})
    return extend_inductive(
        model,
        _check_features(Q),
        V=res["embedding"],
        labels=res.get("clusters"),
        normalize=bool(ev.get("normalize_kernel")),
    )


def _block_task():
    """The row-block task, looked up at call time (a test replaces it to simulate a crash)."""
    return transform_block_to_store
