"""The inductive kernel as a job: a streamed transform of any number of rows into z, in
chunks, in-process (threads) or as Dask tasks, into memory, a .npy file or a Zarr array
that a rerun completes (only the missing chunks are computed).

A chunk is ``chunk_rows`` rows (a multiple of the model's TILE), so a row's z is bitwise the
same whatever the chunking, the thread count or the worker that computed it
(npkl_dist.solvers.inductive._kernels). The Zarr output is a group with ``z`` (n x dim,
one Zarr chunk per job chunk, each written whole by one task) and ``done`` (one element per
chunk, its own Zarr chunk, written by the task after its rows): a chunk whose ``done`` is set
is complete, because Zarr writes a chunk as one file or object.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from .._errors import ValidationError, fix, fmt_value
from ..solvers.inductive import TILE, InductiveKernel

#: default rows per chunk of a streamed transform
CHUNK_ROWS = 64 * TILE


def model_digest(model: InductiveKernel) -> str:
    h = hashlib.sha256()
    for a in (model.basis, model.T):
        h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    h.update(repr((model.base_kernel, model.bandwidth)).encode())
    return h.hexdigest()[:16]


def chunk_size(chunk_rows) -> int:
    if chunk_rows is None:
        return CHUNK_ROWS
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)):
        raise ValidationError(
            f"chunk_rows: expected a positive integer, got {fmt_value(chunk_rows)}"
        )
    if chunk_rows < 1:
        raise ValidationError(f"chunk_rows: expected a positive integer, got {chunk_rows}")
    return int(-(-int(chunk_rows) // TILE) * TILE)  # up to a multiple of TILE


def open_source(source):
    """(array-like with row slicing, description): a numpy array, a .npy path (memory-mapped),
    or a Zarr array / URL (``*.zarr`` path or any URL zarr opens)."""
    if hasattr(source, "shape") and hasattr(source, "__getitem__"):
        return source, "array"
    path = str(source)
    if path.endswith(".npy"):
        from ..graph._io import _load_npy, _path

        X = _load_npy(_path(path, "features"), "features", mmap_mode="r")
        return X, path
    if path.endswith(".csv") or path.endswith(".parquet"):
        from ..graph._io import read_features

        return read_features(path), path
    import zarr

    try:
        return zarr.open_array(path, mode="r"), path
    except Exception as exc:  # noqa: BLE001 - zarr raises several kinds for a missing array
        raise ValidationError(
            f"features: cannot open {path!r} as .npy, .csv, .parquet or a Zarr array ({exc}); "
            "give one of those"
        ) from None


def _chunk_task(model, source, out_url, k, chunk):
    """Transform rows [k chunk, (k+1) chunk) of ``source`` and write them and their done-mark
    into the Zarr group ``out_url`` (what one Dask task does)."""
    import zarr

    X, _ = open_source(source)
    s = k * chunk
    Z = model.transform(X[s : s + chunk], start=s)
    g = zarr.open_group(out_url, mode="r+")
    g["z"][s : s + Z.shape[0]] = Z
    g["done"][k] = 1
    return k


def transform_chunks(
    model: InductiveKernel,
    source,
    out=None,
    *,
    chunk_rows=None,
    threads: int = 1,
    client=None,
    progress=None,
) -> dict:
    """z for every row of ``source`` in chunks of ``chunk_rows`` (rounded up to a multiple of
    TILE).

    out : None (return the array in the result's ``"z"``), a ``.npy`` path, or a Zarr group
        URL / path (resumable: chunks already done are skipped).
    threads : tiles transformed at a time in this process.
    client : a ``distributed.Client``: one task per chunk on its workers (``source`` must be a
        path or URL the workers can open, ``out`` a Zarr URL).

    Returns a dict with ``n_points``, ``dim``, ``chunks``, ``chunks_computed``,
    ``transform_seconds`` (and ``z`` when ``out`` is None)."""
    t0 = time.perf_counter()
    chunk = chunk_size(chunk_rows)
    X, where = open_source(source)
    if len(X.shape) != 2 or X.shape[1] != model.n_features:
        width = X.shape[1] if len(X.shape) == 2 else f"a {len(X.shape)}-D array"
        raise ValidationError(
            f"features: the model was fitted on {model.n_features} features, {where} has "
            f"{width}; give the same columns in the same order as in training"
        )
    n = int(X.shape[0])
    n_chunks = -(-n // chunk)
    res = {"n_points": n, "dim": model.dim, "chunks": n_chunks, "chunk_rows": chunk}
    out_s = None if out is None else str(out)
    if out_s is None or out_s.endswith(".npy"):
        if client is not None:
            raise ValidationError(
                "out: a Dask transform writes a Zarr array; give a Zarr path or URL "
                "(e.g. out.zarr), not a .npy file"
            )
        if out_s is None:
            Z = np.empty((n, model.dim))
        else:
            Z = np.lib.format.open_memmap(out_s, mode="w+", dtype=np.float64, shape=(n, model.dim))
        for k in range(n_chunks):
            s = k * chunk
            Z[s : s + chunk] = model.transform(X[s : s + chunk], start=s, threads=threads)
            if progress is not None:
                progress(k + 1, n_chunks)
        if out_s is None:
            res["z"] = Z
        else:
            Z.flush()
            del Z
        res["chunks_computed"] = n_chunks
        res["transform_seconds"] = time.perf_counter() - t0
        return res

    import zarr

    digest = model_digest(model)
    attrs = {"model": digest, "n_points": n, "chunk_rows": chunk, "dim": model.dim}
    try:
        g = zarr.open_group(out_s, mode="r+")
        have = {k: g.attrs.get(k) for k in attrs}
        if have != attrs:
            raise ValidationError(
                f"out: {out_s!r} holds a transform of another model or input ({have}); give a "
                "new output path, or delete it to start over"
            )
    except (FileNotFoundError, zarr.errors.GroupNotFoundError):
        g = zarr.open_group(out_s, mode="w")
        g.create_array(
            "z",
            shape=(n, model.dim),
            chunks=(chunk, model.dim),
            dtype="f8",
            config={"write_empty_chunks": True},
        )
        g.create_array("done", shape=(n_chunks,), chunks=(1,), dtype="u1", fill_value=0)
        g.attrs.update(attrs)  # last: a group without them is refused above, never reused
    done = np.asarray(g["done"][:])
    todo = [k for k in range(n_chunks) if not done[k]]
    res["chunks_computed"] = len(todo)
    if client is not None:
        if where == "array":
            raise ValidationError(
                "features: a Dask transform reads the features on the workers; give a .npy "
                "path or a Zarr URL, not an in-memory array"
            )
        from distributed import as_completed

        m_fut = client.scatter(model, broadcast=True)
        futs = [
            client.submit(_chunk_task, m_fut, where, out_s, k, chunk, key=f"transform-chunk-{k}")
            for k in todo
        ]
        try:
            for i, f in enumerate(as_completed(futs), 1):
                f.result()
                if progress is not None:
                    progress(i, len(todo))
        finally:
            # release the scattered model: a cluster closed while it holds it logs the loss of
            # scattered data at ERROR
            client.cancel([*futs, m_fut])
    else:
        z, d = g["z"], g["done"]
        for i, k in enumerate(todo, 1):
            s = k * chunk
            z[s : s + chunk] = model.transform(X[s : s + chunk], start=s, threads=threads)
            d[k] = 1
            if progress is not None:
                progress(i, len(todo))
    res["transform_seconds"] = time.perf_counter() - t0
    return res


MODEL_FILE = "model.npz"
#: where `npkl fit --solver inductive --run RUN` keeps the model in the run's store
RUN_MODEL_KEY = "inductive/model.npz"
RUN_SUMMARY_KEY = "inductive/summary.json"


def fit_inductive_job(
    *,
    features,
    constraints=None,
    labels=None,
    groups=None,
    n_must=None,
    n_cannot=None,
    eval_labels=None,
    clusters=None,
    out=None,
    run=None,
    storage_options=None,
    threads: int = 1,
    seed: int = 0,
    progress=None,
    **params,
):
    """``npkl fit --solver inductive``: read the features and the pairs (a pairs file, or
    sampled from labels with the papers' protocol), fit, transform the training points, and
    cluster and score them when asked. Writes model.npz, embedding.npy (z of the training
    points), clusters.npy and summary.json into ``out`` (the caller draws pictures), and
    the model and summary into the run store ``run``. Returns (summary, model, Z, clusters)."""
    import json
    from pathlib import Path

    from ..evaluate import clustering_metrics, kernel_kmeans
    from ..graph._io import read_constraints, read_features, read_labels
    from ..problem._constraints import Constraints, sample_constraints
    from ..solvers.inductive import fit_inductive
    from ._job import ensure_out_dir

    if sum(v is not None for v in (constraints, labels, groups)) != 1:
        raise ValidationError(
            "constraints: give exactly one of a pairs file (--constraints), labels to sample "
            "pairs from (--labels) or group memberships (--groups)"
        )
    if out is not None:
        out = ensure_out_dir(out, "out")
    X = read_features(features)
    n = X.shape[0]
    if constraints is not None:
        cons = Constraints.from_arrays(*read_constraints(constraints), n)
    elif groups is not None:
        from ..embedding import group_constraints, read_memberships

        member = read_memberships(groups, n_nodes=n)
        if member.n_nodes != n:
            raise ValidationError(
                f"groups: memberships name point {member.n_nodes - 1}, the features have {n} "
                f"rows (0 to {n - 1}); give memberships of these points"
            )
        cons = group_constraints(member, n_must, n_cannot, seed=seed)
    else:
        y = read_labels(labels)
        if y.shape[0] != n:
            raise ValidationError(
                f"labels: {y.shape[0]} labels for {n} points; give one label per point (-1 for "
                "unlabelled)"
            )
        cons = sample_constraints(y, n_must, n_cannot, seed=seed)
    y_eval = None
    if eval_labels is not None:
        y_eval = read_labels(eval_labels)
        if y_eval.shape[0] != n:
            raise ValidationError(
                f"eval_labels: {y_eval.shape[0]} labels for {n} points; give one per point"
            )
    model = fit_inductive(X, cons, seed=seed, progress=progress, **params)
    tr = transform_chunks(model, X, threads=threads)
    Z = tr["z"]
    info = model.info
    summary = {
        "solver": "inductive",
        "regularizer": model.regularizer,
        "kernel": model.base_kernel,
        "bandwidth": model.bandwidth,
        "basis": info["basis"],
        "landmarks": info["landmarks"],
        "rank": model.dim,
        "objective": info["objective"],
        "iterations": info["iterations"],
        "converged": info["converged"],
        "n_points": int(n),
        "n_features": int(X.shape[1]),
        "n_constraints": cons.m,
        "n_must": cons.n_must,
        "n_cannot": cons.n_cannot,
        "bounds": info["bounds"],
        "gamma": info["gamma"],
        "scale": "none" if model.scaling is None else model.scaling["kind"],
        "seed": seed,
        "fit_seconds": info["fit_seconds"],
        "transform_seconds": tr["transform_seconds"],
    }
    k = clusters
    if k is None and y_eval is not None:
        k = int(np.unique(y_eval[y_eval >= 0]).size)
    cl = None
    if k is not None:
        cl = kernel_kmeans(Z, k, seed=seed)
        summary["n_clusters"] = int(k)
        if y_eval is not None:
            known = y_eval >= 0
            summary["metrics"] = clustering_metrics(y_eval[known], cl[known])
    files = {}
    if out is not None:
        files["model"] = out / MODEL_FILE
        model.save(files["model"])
        files["embedding"] = out / "embedding.npy"
        np.save(files["embedding"], Z)
        if cl is not None:
            files["clusters"] = out / "clusters.npy"
            np.save(files["clusters"], cl)
        files["summary"] = out / "summary.json"
    if run is not None:
        from ..store import resolve_run
        from ..store._objects import objects_for

        url = resolve_run(run)
        objs = objects_for(url, storage_options)
        import io

        buf = io.BytesIO()
        model.save(buf)
        objs.write_atomic(RUN_MODEL_KEY, buf.getvalue())
        summary["run"] = url
    summary["files"] = {name: str(p) for name, p in files.items()}
    if run is not None:
        objs.write_atomic(RUN_SUMMARY_KEY, (json.dumps(summary, indent=2) + "\n").encode())
    if out is not None:
        Path(files["summary"]).write_text(json.dumps(summary, indent=2) + "\n")
    return summary, model, Z, cl


def _pipeline_model(url, storage_options):
    """A pipeline run's model (`npkl run` with solver = "inductive"), checked against the
    sha256 its learn stage recorded; None when ``url`` is no such run."""
    from ..store import RunStore, StoreError

    try:
        rs = RunStore.open(url, mode="r", storage_options=storage_options)
    except (StoreError, ValidationError, OSError):
        return None
    with rs:
        info = rs.stages().get("learn", {}).get("info", {}) or {}
        if not info.get("model_sha256"):
            return None
        return rs.read_stage_object("learn", info["model_key"], info["model_sha256"])


def load_model(where, storage_options=None) -> InductiveKernel:
    """An inductive model from a model.npz path, a directory holding one (``npkl fit --out``),
    or a run (id, path or URL) that `npkl fit --solver inductive --run` wrote."""
    import io
    from pathlib import Path

    p = Path(str(where))
    if p.suffix == ".npz" and p.is_file():
        return InductiveKernel.load(p)
    if p.is_dir() and (p / MODEL_FILE).is_file():
        return InductiveKernel.load(p / MODEL_FILE)
    from ..store import resolve_run
    from ..store._objects import objects_for

    url = resolve_run(str(where))
    data = _pipeline_model(url, storage_options)
    if data is not None:
        return InductiveKernel.load(io.BytesIO(data))
    try:
        data = objects_for(url, storage_options).read(RUN_MODEL_KEY)
    except (FileNotFoundError, OSError):
        raise ValidationError(
            f"RUN: no inductive model at {str(where)!r} (looked for a model.npz file, a "
            f"directory holding one, and {url}/{RUN_MODEL_KEY}); give what "
            + fix(
                "InductiveKernel.save or fit_inductive_job(out=..., run=...)",
                "a fit with --solver inductive and --out DIR or --run RUN",
            )
            + " wrote"
        ) from None
    return InductiveKernel.load(io.BytesIO(data))


#: A new point is far from the training data when the base kernel to its nearest landmark is
#: below exp(-FAR_LENGTHS^2 / 2) (rbf: more than FAR_LENGTHS bandwidths away), the rule of
#: the graph extension (npkl_dist.job._extend.FAR_LENGTHS): its z is then the model's
#: extrapolation, near zero.
def landmark_far(model: InductiveKernel, Q) -> np.ndarray:
    """Per row of ``Q``: farther than FAR_LENGTHS bandwidths from every landmark (rbf only;
    a linear kernel has no locality, so no row is far)."""
    from ..solvers.inductive import _kernels as K
    from ._extend import FAR_LENGTHS

    Q = model._check_X(Q, "features")
    if model.base_kernel != "rbf" or Q.shape[0] == 0:
        return np.zeros(Q.shape[0], dtype=bool)
    nearest = K.map_tiles(
        lambda t: K.kernel_block(
            model.base_kernel, model.bandwidth, model._prep(t), model.basis, model._b_sq
        ).max(axis=1, keepdims=True),
        Q,
    )[:, 0]
    return nearest < np.exp(-0.5 * FAR_LENGTHS**2)


def extend_inductive(model: InductiveKernel, Q, *, V=None, labels=None, normalize=False):
    """New rows ``Q`` (in the training features' units: the model scales them) embedded by the
    model, ``far`` flagged (one warning), and assigned to the nearest training cluster centre
    (of the unit rows with ``normalize``) when ``labels`` (clusters of ``V``, the training z)
    are given. Returns an Extension (``nearest``/``distance``/``copy`` are not defined for a
    kernel function: -1, NaN and False)."""
    import warnings

    from .._errors import GraphWarning
    from ..evaluate import assign_clusters, cluster_centres
    from ._extend import FAR_LENGTHS, Extension

    Q = np.asarray(model._check_X(Q, "features"), dtype=np.float64)
    Z = model.transform(Q)
    far = landmark_far(model, Q)
    m = Q.shape[0]
    if far.any():
        rows = np.flatnonzero(far)
        warnings.warn(
            f"extend: {rows.size} of {m} new point(s) lie farther than {FAR_LENGTHS:g} "
            f"bandwidths from every landmark (rows {rows[:5].tolist()}"
            f"{' ...' if rows.size > 5 else ''}): their z is near zero, flagged 'far'; give "
            "them in the units of the training features and check they come from the same "
            "source",
            GraphWarning,
            stacklevel=2,
        )
    clusters = None
    if labels is not None:
        clusters = assign_clusters(
            Z, cluster_centres(V, labels, normalize=normalize), normalize=normalize
        )
    return Extension(
        Z,
        np.full(m, -1, dtype=np.int64),
        np.full(m, np.nan),
        far,
        np.zeros(m, dtype=bool),
        clusters,
        None,  # no neighbourhood length: far is the landmark rule above
    )
