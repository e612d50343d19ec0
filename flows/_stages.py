"""The pipeline's stages as plain functions over an open run store (no Prefect here).

Each stage reads what earlier stages left in the run store, writes its own output there,
records itself in the store's stage record (``_npkl/stages.json``) with its wall time and
peak memory, and returns a small JSON-able dict. A stage already recorded is skipped, so a
re-run of the same run id after a crash does only the missing work; the learn stage
continues from the newest complete checkpoint (bitwise identical to an uninterrupted run).

`npkl_flows.pipeline` wraps these in Prefect tasks; `bench/bench_pipeline.py` and the tests can
call them directly. Heavy arrays never leave the store and the process: stages pass run URLs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from npkl_dist import (
    GraphError,
    NPKLProblem,
    ValidationError,
    clustering_metrics,
    fit_admm,
    fit_bcd,
    fit_simplenpkl,
    make_plan,
)
from npkl_dist import store as st
from npkl_dist._compile_watch import CompileWatch
from npkl_dist.evaluate import choose_normalize, cluster_kernel, resolve_cluster_method
from npkl_dist.graph._blocks import (
    assemble_knn_graph,
    build_knn_index,
    check_edge_batch,
    graph_from_edge_batches,
    iter_edge_batches,
    knn_rows,
    row_blocks,
)
from npkl_dist.graph._graph import (
    SIGMA_NEIGHBOURS,
    _check_features,
    apply_feature_scale,
    feature_scale,
    laplacian,
    warn_feature_scales,
)
from npkl_dist.graph._io import FeatureChunks
from npkl_dist.job._extend import graph_knn, place_new_points
from npkl_dist.job._job import (
    _row_block,
    _select_gamma,
    iterations_label,
    load_constraints,
    make_executor,
    result_summary,
    write_outputs,
)
from npkl_dist.job._recovery import MemoryCheckpointer, fit_with_recovery
from npkl_dist.problem._constraints import Constraints
from npkl_dist.solvers.admm._fit import admm_checkpoint_width
from npkl_dist.solvers.bcd._fit import checkpoint_width
from npkl_dist.solvers.bcd._setup import choose_method
from npkl_dist.store._rows import (
    create_row_arrays,
    read_row_arrays,
    row_blocks_present,
    write_row_block,
)

from ._config import fit_config, read_input, run_options, with_defaults
from ._stage_kit import (
    Z_GROUP,
    Context,
    _compile_notice,
    _finish,
    _run_blocks,
    _skip,
    inductive,
    measure,
)

__all__ = [
    "STAGES",
    "Context",
    "measure",
    "ingest",
    "build_graph",
    "colour",
    "learn",
    "transform",
    "evaluate",
    "extend",
    "report",
    "code_version",
    "config_hash",
]

#: Pipeline stages in order; each records ``stages.json[name]`` when done. ``transform``
#: embeds the training rows with an inductive model (a record and nothing else for the
#: transductive solvers, whose learn stage writes the embedding).
STAGES = ("ingest", "graph", "plan", "learn", "transform", "evaluate", "extend", "report")


def _no_graph(ctx: Context, name: str) -> dict:
    """The graph and plan stages of an inductive run: recorded, nothing computed."""
    out: dict = {}
    with measure(out):
        pass
    return _finish(
        ctx, name, {**out, "source": None, "note": "the inductive kernel uses no graph"}
    )


def code_version() -> str:
    """sha256 (16 hex) of the library's and the flows' Python sources: a change of code
    invalidates Prefect's cached stage results (the run store's own records stay)."""
    import npkl_dist  # only for its __file__: the sources to hash

    h = hashlib.sha256()
    for pkg in (Path(npkl_dist.__file__).parent, Path(__file__).parent):
        for p in sorted(pkg.rglob("*.py")):
            h.update(p.relative_to(pkg.parent).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def config_hash(cfg: dict) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------ ingest
def _edge_count_points(path):
    top = 0
    for i, j, w, first in iter_edge_batches(path):
        if i.size:
            check_edge_batch(i, j, w, first)  # a bad row is named here, not as a count
            top = max(top, int(i.max()) + 1, int(j.max()) + 1)
    if top == 0:
        raise GraphError(f"edges: {str(path)!r} holds no edge; pass at least one row i, j[, w]")
    return top


def _ingest_features(store, source: str, chunk_rows: int | None = None) -> int:
    """Stream a feature table into the store in row chunks (never whole in this process);
    ``dataset:NAME`` (a small bundled table) is cut into the same chunks. Returns n."""
    if source.startswith("dataset:"):
        X = _check_features(read_input(source, "features"))
        step = chunk_rows or X.shape[0]
        chunks = (X[a : a + step] for a in range(0, X.shape[0], step))
        return store.write_features_chunks(chunks, n_features=X.shape[1], n_rows=X.shape[0])

    fc = FeatureChunks(source, chunk_rows)
    return store.write_features_chunks(fc, n_features=fc.n_features, n_rows=fc.n_rows)


def ingest(ctx: Context) -> dict:
    """Features (chunked by rows), constraints (given or sampled) and labels into the store."""
    if (info := ctx.done("ingest")) is not None:
        return _skip("ingest", info)

    cfg, fc = ctx.cfg, fit_config(ctx.cfg)
    out: dict = {}
    with measure(out):
        lab = cfg["input"]["labels"]
        if lab is not None and lab.startswith("dataset:"):
            fc = dataclasses.replace(fc, labels=None, y_constraints=read_input(lab, "labels"))
        feats = cfg["input"]["features"]
        if feats is not None:
            n = _ingest_features(ctx.store, feats)
        else:
            n = cfg["input"]["n_points"] or _edge_count_points(cfg["input"]["edges"])
        from_edges = feats is None and not cfg["input"]["n_points"]
        if cfg["model"]["solver"] == "spe":  # the connectivity alone: no pairs
            cons = Constraints.from_arrays(*(np.zeros(0, np.int64),) * 3, n)
        else:
            cons = load_constraints(fc, n, n_from_edges=from_edges)
        y_eval = (
            read_input(cfg["input"]["eval_labels"], "labels")
            if cfg["input"]["eval_labels"]
            else None
        )
        if y_eval is not None and y_eval.shape[0] != n:
            raise ValidationError(
                f"eval_labels: {y_eval.shape[0]} labels for {n} points; give one label per "
                f"point (-1 for unknown)"
            )
        ctx.store.write_inputs(
            constraints=cons, eval_labels=None if y_eval is None else np.asarray(y_eval)
        )
    return _finish(
        ctx,
        "ingest",
        {
            **out,
            "n_points": int(n),
            "n_constraints": int(cons.m),
            "n_must": int(cons.n_must),
            "n_cannot": int(cons.n_cannot),
            "n_duplicates_merged": int(cons.n_duplicates),
            "diagonal_targets": bool(cons.diagonal),
        },
    )


# ------------------------------------------------------------------------------ graph
KNN_GROUP = "graph_knn"


def knn_block_to_store(index, store, start: int, stop: int) -> int:
    """One task (driver or Dask worker): neighbours of rows [start, stop) written into the
    run store as one row block of ``graph_knn/idx`` and ``graph_knn/dist``."""

    idx, dist = knn_rows(index, start, stop)
    write_row_block(store, f"{KNN_GROUP}/idx", start, idx)
    write_row_block(store, f"{KNN_GROUP}/dist", start, dist)
    return stop - start


def build_graph(ctx: Context) -> dict:
    """The manifold graph: kNN from one index, its row blocks written into the run store by
    independent tasks (a rerun computes only missing blocks); or the edge list in batches."""
    if (info := ctx.done("graph")) is not None and "seconds" in info:
        return _skip("graph", info)

    if inductive(ctx.cfg):
        return _no_graph(ctx, "graph")
    g, inp = ctx.cfg["graph"], ctx.cfg["input"]
    out: dict = {}
    with measure(out):
        if inp["features"] is not None:
            X = ctx.store.read_inputs()["features"]  # the index holds every row anyway
            # the graph is built from the scaled columns ([graph] scale); the parameters go
            # into the stage's record, so that extend scales new points alike
            scale = feature_scale(X, g.get("scale", "none"))  # (runs stored before it)
            if scale is None:
                warn_feature_scales(X)
            X = apply_feature_scale(X, scale)
            ctx.cache["X"] = X  # the features the graph was built from
            n, k, block = X.shape[0], g["knn"], g["block"]
            method = g["knn_method"]
            if method == "auto":
                method = "exact" if n <= g["exact_max_points"] else "pynndescent"
            kq = max(k, min(SIGMA_NEIGHBOURS, n - 1))
            spans = row_blocks(n, block)
            create_row_arrays(
                ctx.store, KNN_GROUP, {"idx": (kq, "int64"), "dist": (kq, "float64")}, n, block
            )
            have = row_blocks_present(
                ctx.store, f"{KNN_GROUP}/idx", n, block
            ) & row_blocks_present(ctx.store, f"{KNN_GROUP}/dist", n, block)
            todo = [sp for b, sp in enumerate(spans) if b not in have]
            bar = ctx.bar("graph", len(todo))
            if todo:
                bar.update(0, f"building the {method} neighbour index", force=True)
                index = ctx.cache.get("index")  # one index per run (reused by extend)
                if index is None or (index.method, index.k_query, index.n_points) != (
                    method,
                    kq,
                    n,
                ):
                    index = build_knn_index(X, k, method=method, seed=ctx.cfg["model"]["seed"])
                    ctx.cache["index"] = index
                _run_blocks(ctx, index, todo, bar, task=knn_block_to_store)
            bar.close()
            nb = read_row_arrays(ctx.store, KNN_GROUP, ("idx", "dist"))
            graph = assemble_knn_graph([(nb["idx"], nb["dist"])], k, weighting=g["weighting"])
            meta = {
                "source": "features",
                "knn": k,
                "weighting": g["weighting"],
                "method": method,
                "sigma": graph.sigma,
                "length": graph.length,
                "n_blocks": len(spans),
                "blocks_reused": len(spans) - len(todo),
                "scale": scale,
            }
        else:
            n_pts = ctx.store.stages()["ingest"]["info"]["n_points"]
            rule = g.get("duplicates", "max")  # runs stored before [graph] duplicates
            graph = graph_from_edge_batches(
                iter_edge_batches(inp["edges"]), n_pts, duplicates=rule
            )
            meta = {"source": "edges", "weighting": "given", "sigma": None, "duplicates": rule}
            if g.get("manifold", "graph") == "spectral":  # runs stored before [graph] manifold
                graph, meta = _spectral_manifold(ctx, graph, meta)
        ctx.store.write_graph(graph.S)
    return _finish(
        ctx,
        "graph",
        {
            **out,
            **meta,
            "n_edges": int(graph.S.nnz // 2),
            "n_components": graph.n_components,
            "n_isolated": graph.n_isolated,
        },
    )


def _spectral_manifold(ctx: Context, given, meta: dict):
    """[graph] manifold = "spectral": the kNN graph of the given graph's spectral embedding
    replaces it as the graph npkl smooths over (the given graph's figures stay in the
    record)."""
    from npkl_dist.job._embed import SPECTRAL_DIM, SPECTRAL_KNN, spectral_manifold

    bar = ctx.bar("graph", 1)
    bar.update(0, "spectral manifold: eigenvectors and their kNN graph", force=True)
    graph = spectral_manifold(given.S, seed=ctx.cfg["model"]["seed"])
    bar.update(1)
    bar.close()
    meta = {
        **meta,
        "manifold": "spectral",
        "manifold_dim": SPECTRAL_DIM,
        "manifold_knn": SPECTRAL_KNN,
        "given_n_edges": int(given.S.nnz // 2),
    }
    return graph, meta


# ------------------------------------------------------------------------------ problem
def _problem(ctx: Context):
    if "problem" in ctx.cache:
        return ctx.cache["problem"]

    m, g = ctx.cfg["model"], ctx.cfg["graph"]
    inputs = ctx.store.read_inputs()
    S = ctx.store.read_graph()
    L = laplacian(S, g["delta"], dtype=m["dtype"])
    # gamma = 'cv': 1 until the learn stage has chosen it (_gamma); the plan ignores gamma
    problem = NPKLProblem.build(
        L,
        inputs["constraints"],
        loss=m["loss"],
        gamma=1.0 if m["gamma"] == "cv" else m["gamma"],
        rank=m["rank"],
        bound=m["bound"],
        seed=m["seed"],
        dtype=m["dtype"],
    )
    ctx.cache["problem"] = problem
    ctx.cache["eval_labels"] = inputs.get("eval_labels")
    return problem


def colour(ctx: Context) -> dict:
    """Relabelling and colouring of the conflict graph (the sweep plan)."""
    if (info := ctx.done("plan")) is not None and "seconds" in info:
        return _skip("plan", info)
    if inductive(ctx.cfg):
        return _no_graph(ctx, "plan")
    if ctx.cfg["model"]["solver"] == "spe":
        out: dict = {}
        with measure(out):
            pass
        return _finish(ctx, "plan", {**out, "note": "SPE sweeps need no colouring"})

    out: dict = {}
    with measure(out):
        problem = _problem(ctx)
        # blocks aligned to the checkpoint shards (where the Dask executor may cut)
        plan = make_plan(problem, align=_row_block(problem.n_points))
        ctx.store.write_plan(plan)
    return _finish(
        ctx, "plan", {**out, "n_colours": int(plan.n_colours), "rank": int(problem.rank)}
    )


# ------------------------------------------------------------------------------ learn
def _gamma(ctx: Context, problem, executor):
    """The problem with the model's gamma. With ``gamma = 'cv'`` it is chosen by
    cross-validation on held-out constraints (:func:`npkl_dist.select_gamma`; never the
    labels) and recorded in the run store (record 'gamma'), so that a resumed run learns with
    the same value without choosing again. Returns (problem, selection record or None)."""
    m = ctx.cfg["model"]
    if m["gamma"] != "cv":
        return problem, None

    if (info := ctx.done("gamma")) is None:
        ctx.log("learn: choosing gamma by cross-validation on held-out constraints")
        sel = _select_gamma(fit_config(ctx.cfg), problem, executor)
        info = _finish(ctx, "gamma", {"gamma": float(sel.gamma), "selection": sel.to_dict()})
    return replace(problem, gamma=float(info["gamma"])), info["selection"]


class _NoCheckpoints:
    """The checkpointer of a throw-away store: nothing is saved, nothing resumes."""

    n_saved = 0

    def on_sweep(self, state, session):
        pass

    def load(self):
        return None


def learn(ctx: Context) -> dict:
    """Learn V with checkpoints every ``checkpoint_every`` sweeps; resumes from the newest.

    BCD (plain sweeps or block solves) and KL-ADMM checkpoint into the store; SimpleNPKL
    (an eigensolver iteration) does not, so a resumed run repeats its learning."""
    if (info := ctx.done("learn")) is not None:
        return _skip("learn", info)
    if inductive(ctx.cfg):
        from ._stages_inductive import learn_inductive

        return learn_inductive(ctx)
    if ctx.cfg["model"]["solver"] == "spe":
        from ._stages_spe import learn_spe

        return learn_spe(ctx)

    m = ctx.cfg["model"]
    out: dict = {}
    with measure(out):
        problem = _problem(ctx)
        plan, _ = ctx.store.read_plan()
        n, r = problem.n_points, problem.rank
        opts = run_options(ctx.cfg, n, r)
        row_block = _row_block(n)
        executor = make_executor(opts, row_block)
        method = m["method"]
        if m["solver"] == "bcd" and method == "auto":
            method = choose_method(problem, executor)
        width = (
            admm_checkpoint_width(r, m["anderson"])
            if m["solver"] == "admm"
            else checkpoint_width(r, method)
        )
        problem, selection = _gamma(ctx, problem, executor)
        params = {
            "solver": m["solver"],
            "loss": m["loss"],
            "gamma": problem.gamma,
            "rank": r,
            "delta": ctx.cfg["graph"]["delta"],
            "bound": m["bound"],
            "seed": m["seed"],
            "dtype": str(problem.dtype),
            "tol": m["tol"],
            "max_sweeps": m["max_sweeps"],
            "executor": opts["executor"],
            "anderson": m["anderson"],
            **st.data_hashes(ctx.store),
        }
        if m["solver"] == "bcd":
            params["method"] = method
        if ctx.throwaway:
            # a lost Dask worker still resumes from the newest sweep held in memory
            ck = MemoryCheckpointer() if opts["executor"] == "dask" else _NoCheckpoints()
        else:
            ck = st.StoreCheckpointer(
                ctx.store,
                every=int(opts["checkpoint_every"]),
                row_block=row_block,
                n=n,
                width=width,
                dtype=np.float64 if m["anderson"] else problem.dtype,
                max_sweeps=m["max_sweeps"],
                extra={"parameters": params},
            )
        bar = ctx.bar("learn", m["max_sweeps"])
        latest = ck.load()
        if latest is not None:
            ctx.log(f"learn: resuming after sweep {latest[0]['sweep']} (checkpoint)")
            bar.update(int(latest[0]["sweep"]), "resumed", force=True)
        callbacks = [bar.sweep_callback(tol=m["tol"]), *ctx.sweep_hooks]
        if hasattr(executor, "progress_callback"):  # Dask: learning on the dashboard
            unit = "sweep" if m["solver"] == "bcd" and method == "sweeps" else "iteration"
            callbacks.append(executor.progress_callback(m["max_sweeps"], unit))
            link = getattr(executor.client, "dashboard_link", None)
            if link and not ctx.quiet:
                print(f"learn: Dask dashboard {link}", file=sys.stderr)

        def callback(*args):
            for cb in callbacks:
                cb(*args)

        common = dict(executor=executor, plan=plan, tol=m["tol"], callback=callback, log=ctx.log)
        compiling = CompileWatch(None if ctx.quiet else (lambda: _compile_notice(bar)))
        try:
            with compiling:
                if m["solver"] == "simplenpkl":
                    result = fit_simplenpkl(
                        problem,
                        B=m["capacity"],
                        max_iter=m["max_sweeps"],
                        tol=m["tol"],
                        callback=common["callback"],
                    )
                elif m["solver"] == "admm":
                    result = fit_with_recovery(
                        fit_admm,
                        problem,
                        checkpointer=ck,
                        resume=latest,
                        max_iter=m["max_sweeps"],
                        anderson=m["anderson"],
                        **common,
                    )
                else:
                    result = fit_with_recovery(
                        fit_bcd,
                        problem,
                        checkpointer=ck,
                        resume=latest,
                        max_sweeps=m["max_sweeps"],
                        method=method,
                        start=m["start"],
                        tol_objective=m["tol_objective"],
                        tol_kkt=m["tol_kkt"],
                        **common,
                    )
        finally:
            bar.close()
            if hasattr(executor, "close"):
                executor.close()
        V = np.ascontiguousarray(result.V)
        ctx.store.write_results(embedding=V)
        ctx.cache["V"] = V
    return _finish(
        ctx,
        "learn",
        {
            **out,
            "executor": opts["executor"],
            "solver": m["solver"],
            "loss": m["loss"],
            "gamma": problem.gamma,
            "rank": int(r),
            "dtype": str(problem.dtype),
            "seed": m["seed"],
            **({} if selection is None else {"gamma_selection": selection}),
            **result_summary(m["solver"], result),
            "sweep_seconds_total": float(sum(result.sweep_seconds)),
            "compile_seconds": compiling.seconds,
            "checkpoints_written": int(ck.n_saved),
            "resumed_from": None if latest is None else int(latest[0]["sweep"]),
        },
    )


def transform(ctx: Context) -> dict:
    """Inductive runs: z of every training row in resumable row-chunk tasks
    (:func:`npkl_flows._stages_inductive.transform`); other solvers: a record only."""
    from ._stages_inductive import transform as transform_inductive

    return transform_inductive(ctx)


def _V(ctx):
    if "V" not in ctx.cache:
        ctx.cache["V"] = ctx.store.read_results()["embedding"]
    return ctx.cache["V"]


# ------------------------------------------------------------------------------ evaluate
def evaluate(ctx: Context) -> dict:
    """Kernel k-means on V (k-means on its rows) and, with ground truth, the metrics."""
    if (info := ctx.done("evaluate")) is not None:
        return _skip("evaluate", info)

    out: dict = {}
    with measure(out):
        V = _V(ctx)
        y = ctx.cache.get("eval_labels", None)
        if "eval_labels" not in ctx.cache:
            y = ctx.store.read_inputs().get("eval_labels")
        k = ctx.cfg["output"]["clusters"]
        if k is None and y is not None:
            k = int(np.unique(y[y >= 0]).size)
        metrics = None
        method = None
        unit = ctx.cfg["output"]["normalize_kernel"]
        if k is not None:
            cons = ctx.store.read_inputs()["constraints"]
            # None (the default): the unit rows when the free points' rows are short
            unit = choose_normalize(unit, cons, V)
            labels = cluster_kernel(
                V,
                k,
                seed=ctx.cfg["model"]["seed"],
                normalize=unit,
                short_rows_of=cons,
                gamma_cv=ctx.cfg["model"]["gamma"] == "cv",
                constraints=cons,
                solver=ctx.cfg["model"]["solver"],
                method=ctx.cfg["output"].get("cluster_method"),  # runs stored before the key
            )
            method = resolve_cluster_method(ctx.cfg["output"].get("cluster_method"), cons)
            ctx.store.write_results(clusters=labels)
            if y is not None:
                lab = y >= 0
                metrics = clustering_metrics(y[lab], labels[lab])
    return _finish(
        ctx,
        "evaluate",
        {
            **out,
            "n_clusters": k,
            "metrics": metrics,
            "normalize_kernel": unit,
            "cluster_method": method,
        },
    )


# ------------------------------------------------------------------------------ extend
def graph_features(store, ginfo, cache=None):
    """The features the kNN graph was built from: the stored ones scaled as its record says
    ([graph] scale), or those the graph stage of this process left in ``cache``."""

    if cache is not None and "X" in cache:
        return cache["X"]
    return apply_feature_scale(store.read_inputs()["features"], ginfo.get("scale"))


def index_for(X, ginfo, cfg, cache=None):
    """The kNN index of the graph's features ``X`` (reused when this process built it)."""

    if cache is not None and cache.get("index") is not None:
        return cache["index"]
    return build_knn_index(
        X, cfg["graph"]["knn"], method=ginfo.get("method", "auto"), seed=cfg["model"]["seed"]
    )


def extend_points(store, cfg, Q, *, cache=None):
    """New feature rows Q placed in the run's embedding (and clusters, when the run has
    them), scaled as the training rows were; far points flagged with one warning.

    Returns
    -------
    Extension (``npkl_dist.job._extend``): ``V``, ``clusters`` (or None), ``far``, ...
    """

    if inductive(with_defaults(cfg)):
        from ._stages_inductive import extend_inductive_points

        return extend_inductive_points(store, Q, cache)
    stages = store.stages()
    ginfo = stages.get("graph", {}).get("info", {})
    if ginfo.get("source") != "features":
        raise ValidationError(
            f"extend: run {store.url} has a given graph (edges), not one built from features; "
            f"new points can only be placed in a run whose graph was built with features"
        )
    res = store.read_results()
    if "embedding" not in res:
        raise ValidationError(
            f"extend: run {store.url} has no learned embedding yet; finish it with "
            f"`npkl resume {store.url}` first"
        )
    V = res["embedding"]
    Q = _check_features(Q)
    X = graph_features(store, ginfo, cache)  # read once: the width check and the search
    d = X.shape[1]
    if Q.shape[1] != d:
        raise ValidationError(
            f"features: new points have {Q.shape[1]} features, the run was trained on {d}; "
            f"pass rows with the same {d} columns"
        )
    k = cfg["graph"]["knn"]
    Q = apply_feature_scale(Q, ginfo.get("scale"))  # as the training rows ([graph] scale)
    if ginfo.get("method") == "exact":
        idx, dist = index_for(X, ginfo, cfg, cache).query(Q, k)
    else:
        # large n: best-first search on the training graph (pynndescent's own query would
        # compile a search closure per index and prepare a search graph: minutes at 1e6)

        idx, dist = graph_knn(X, store.read_graph(), Q, k, seed=cfg["model"]["seed"])
    labels = None
    unit = False
    if "clusters" in res:
        # as the evaluate stage clustered (its record holds what an automatic choice chose)
        ev = stages.get("evaluate", {}).get("info", {})
        unit = bool(ev.get("normalize_kernel", cfg["output"].get("normalize_kernel")))
        labels = res["clusters"]
    scale = ginfo.get("scale")
    return place_new_points(
        V,
        store.read_degrees(),
        X,
        Q,
        idx,
        dist,
        sigma=ginfo.get("sigma"),
        length=ginfo.get("length", ginfo.get("sigma")),
        weighting=ginfo.get("weighting", "gaussian"),
        delta=cfg["graph"]["delta"],
        labels=labels,
        normalize=unit,
        advice=(
            "give them in the units of the training features (the run scales them "
            f"{'with its recorded ' + scale['kind'] + ' scaling' if scale else 'not at all'}) "
            "and check they come from the same source"
        ),
    )


def extend(ctx: Context) -> dict:
    """Embed the configured new points (bcdkl-tnnls2015 §III-E) and store their rows."""
    if (info := ctx.done("extend")) is not None:
        return _skip("extend", info)
    path = ctx.cfg["extend"]["features"]
    out: dict = {}
    with measure(out):
        n_new = 0
        if path is not None:
            Q = read_input(path, "features")
            ext = extend_points(ctx.store, ctx.cfg, Q, cache=ctx.cache)
            items = {
                "extended_embedding": np.ascontiguousarray(ext.V),
                "extended_far": ext.far,
            }
            if ext.clusters is not None:
                items["extended_clusters"] = ext.clusters
            ctx.store.write_results(**items)
            n_new = int(ext.V.shape[0])
            out["n_far"] = int(ext.far.sum())
            out["far_rows"] = np.flatnonzero(ext.far)[:100].tolist()
            out["n_copies"] = int(ext.copy.sum())
    return _finish(ctx, "extend", {**out, "n_new": n_new})


# ------------------------------------------------------------------------------ report
def report_dir(cfg: dict, url: str) -> Path | None:
    """Where the report files go; None with ``[output] files = false``."""
    if not cfg["output"].get("files", True):
        return None
    if cfg["output"]["out"]:
        return Path(cfg["output"]["out"])
    name = url.rstrip("/").rsplit("/", 1)[-1]
    return Path(st.npkl_home()) / "reports" / name


#: fields of the learn stage's record copied into the summary (the ``npkl fit --json``
#: contract: npkl_dist.job._job.run_fit's summary has the same keys)
_LEARN_FIELDS = (
    "solver",
    "loss",
    "gamma",
    "rank",
    "dtype",
    "seed",
    "objective",
    "objective_initial",
    "objective_trace",
    "change_trace",
    "n_sweeps",
    "converged",
    "n_colours",
    "sweep_seconds",
    "objective_seconds",
    "fit_seconds",
    "compile_seconds",
    "method",
    "start",
    "kkt",
    "kkt_trace",
    "cg_iterations",
    "primal_residual_trace",
    "dual_residual_trace",
    "rho_trace",
    "B",
    "dual_trace",
    "duality_gap",
    "polished",
    "n_eigsolves",
    "executor",
    "checkpoints_written",
    "gamma_selection",
    "joint_moves",
    "numerical_rank",
    "descent_curvature",
    "regularizer",
    "kernel",
    "bandwidth",
    "basis",
    "landmarks",
    "bounds",
)


def summarise(store, cfg: dict) -> dict:
    """The run's summary from its stage record: what ``summary.json`` and ``npkl fit --json``
    show (the fit's fields, the graph, per-stage seconds and peak memory)."""
    stages = store.stages()
    info = {s: stages.get(s, {}).get("info", {}) for s in STAGES if s in stages}
    ing, learn_i = info.get("ingest", {}), info.get("learn", {})
    ev = info.get("evaluate", {})
    summary = {
        "run": store.url,
        "config": cfg,
        **{
            k: ing.get(k)
            for k in (
                "n_points",
                "n_constraints",
                "n_must",
                "n_cannot",
                "n_duplicates_merged",
                "diagonal_targets",
            )
        },
        **{k: learn_i[k] for k in _LEARN_FIELDS if k in learn_i},
        "rank": learn_i.get("rank"),
        "objective": learn_i.get("objective"),
        "objective_trace": learn_i.get("objective_trace"),
        "n_sweeps": learn_i.get("n_sweeps"),
        "converged": learn_i.get("converged"),
        "metrics": ev.get("metrics"),
        "n_clusters": ev.get("n_clusters"),
        "normalize_kernel": bool(ev.get("normalize_kernel", False)),
        "cluster_method": ev.get("cluster_method"),
        "graph": {
            **{
                k: info.get("graph", {}).get(k)
                for k in (
                    "source",
                    "knn",
                    "weighting",
                    "method",
                    "sigma",
                    "n_edges",
                    "n_components",
                    "n_isolated",
                )
            },
            # the scaling's kind (its parameters stay in the stage's record)
            "scale": None
            if info.get("graph", {}).get("source") != "features"
            else (info["graph"].get("scale") or {}).get("kind", "none"),
        },
        "graph_seconds": info.get("graph", {}).get("seconds"),
        "cluster_seconds": ev.get("seconds"),
        "stages": {
            s: {
                "seconds": info.get(s, {}).get("seconds"),
                "peak_rss_mb": info.get(s, {}).get("peak_rss_mb"),
            }
            for s in STAGES
            if s in info
        },
        "code_version": code_version(),
    }
    return summary


def report(ctx: Context, timings: dict | None = None) -> dict:
    """summary.json (also stored as the run's ``summary`` result), objective.png and
    embedding.png (:func:`_plots`), embedding.npy, clusters.npy."""

    if (info := ctx.done("report")) is not None:
        return _skip("report", info)
    out: dict = {}
    with measure(out):
        summary = summarise(ctx.store, ctx.cfg)
        if ctx.throwaway:
            # the store is a temporary directory removed after the fit: point nowhere
            summary["run"] = None
            summary["config"] = {**summary["config"], "run": None}
        res = ctx.store.read_results()
        if "summary" not in res:
            ctx.store.write_results(summary=summary)
        d = report_dir(ctx.cfg, ctx.store.url)
        if d is not None:
            write_outputs(d, res["embedding"], res.get("clusters"))
            if "extended_embedding" in res:
                np.save(d / "extended_embedding.npy", res["extended_embedding"])
                if "extended_clusters" in res:
                    np.save(d / "extended_clusters.npy", res["extended_clusters"])
                if "extended_far" in res:
                    np.save(d / "extended_far.npy", res["extended_far"])
            if ctx.cfg["output"]["plots"]:
                _plots(d, res, summary, ctx.store.read_inputs().get("eval_labels"))
            (d / "summary.json").write_text(json.dumps(summary, indent=2))
    return _finish(ctx, "report", {**out, "dir": None if d is None else str(d.resolve())})


def trace_labels(summary: dict) -> tuple[str, str]:
    """(x-axis label, title) of objective.png: the solver's own unit (sweep, outer iteration
    of block solves, iteration of KL-ADMM / SimpleNPKL) and its count."""

    label = iterations_label(summary)  # "N sweeps", "N outer iterations", "N iterations"
    return label.split(" ", 1)[1].removesuffix("s"), f"objective trace ({label})"


def _plots(d: Path, res: dict, summary: dict, y_eval=None) -> list[Path]:
    """objective.png (the gap to the final objective, log axis) and embedding.png (a seeded
    2-D layout of the rows that were clustered, coloured by ``y_eval`` when given, else by
    cluster, with the metrics in the title); npkl_dist.plotting draws both."""
    from npkl_dist import plotting  # lazy: matplotlib only when a figure is drawn

    xlabel, title = trace_labels(summary)
    written = []
    trace = summary.get("objective_trace") or []
    if trace:
        fig = plotting.objective_figure(trace, xlabel=xlabel, title=title)
        written.append(plotting.save_figure(fig, d / "objective.png"))
    fig = plotting.embedding_figure(
        res["embedding"],
        labels=y_eval,
        clusters=res.get("clusters"),
        metrics=summary.get("metrics"),
        normalize=bool(summary.get("normalize_kernel")),
        seed=summary.get("seed") or 0,
        title="learned kernel K = V'V",
    )
    written.append(plotting.save_figure(fig, d / "embedding.png"))
    return written


#: What ``npkl resume RUN --redo STAGE`` may recompute, in order, with the store data each
#: writes ("results" goes with every one of them: the learned kernel depends on it all).
REDO = {
    "ingest": ("inputs",),
    "graph": ("graph", KNN_GROUP),
    "plan": ("plan",),
    "learn": ("checkpoints", Z_GROUP, "spe"),  # spe: _stages_spe.SPE_GROUP
}


def redo(store, stage: str) -> list[str]:
    """Forget ``stage`` and every stage after it (records and data), so that the next
    resume recomputes them from the inputs; returns the stages forgotten."""
    if stage not in REDO:
        raise ValidationError(
            f"--redo: {stage!r} is not a stage that can be recomputed; use one of "
            f"{', '.join(REDO)}"
        )
    later = list(REDO)[list(REDO).index(stage) :]
    stages = [*STAGES[STAGES.index(stage) :], "gamma", "results"]
    if stage == "ingest":
        stages.append("inputs")
    groups = [g for s in later for g in REDO[s]] + ["results"]
    store.forget(stages, groups)
    return stages


def run_stages(ctx: Context, only=None) -> dict:
    """All stages in order without Prefect (the benchmark's reference, and tests)."""
    fns = {
        "ingest": ingest,
        "graph": build_graph,
        "plan": colour,
        "learn": learn,
        "transform": transform,
        "evaluate": evaluate,
        "extend": extend,
        "report": report,
    }
    return {name: fns[name](ctx) for name in (only or STAGES)}
