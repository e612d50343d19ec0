"""The main job as plain stages: inputs -> graph -> constraints -> learn -> cluster/evaluate.

``run_fit`` is what ``npkl fit`` and ``npkl demo`` call; the Prefect flows of a later issue
wrap the same stage functions as coarse tasks. No orchestration here, only calls.
"""

from __future__ import annotations

import inspect
import json
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import store as st
from .._compile_watch import CompileWatch
from .._errors import ValidationError, fix
from .._precompile import background_compile
from ..evaluate import (
    CLUSTER_METHODS,
    choose_normalize,
    cluster_kernel,
    clustering_metrics,
    resolve_cluster_method,
)
from ..executors import InProcessExecutor
from ..executors._dask import DaskExecutor
from ..graph._graph import (
    _check_features,
    apply_feature_scale,
    feature_scale,
    graph_from_edges,
    knn_graph,
    laplacian,
)
from ..graph._io import read_constraints, read_edges, read_features, read_labels
from ..linalg._rowops import SUM_BLOCK
from ..model_selection import select_gamma
from ..problem._constraints import Constraints, sample_constraints
from ..problem._problem import NPKLProblem
from ..solvers._plan import make_plan
from ..solvers.admm._fit import admm_checkpoint_width, fit_admm
from ..solvers.bcd._fit import checkpoint_width, fit_bcd
from ..solvers.bcd._rank import numerical_rank
from ..solvers.bcd._setup import choose_method
from ..solvers.simplenpkl._fit import fit_simplenpkl
from ._recovery import fit_with_recovery

__all__ = ["FitConfig", "run_fit", "SOLVERS"]

SOLVERS = ("bcd", "admm", "simplenpkl")


@dataclass
class FitConfig:
    """Everything a fit needs; mirrors the options of ``npkl fit``."""

    features: str | None = None
    edges: str | None = None
    n_points: int | None = None
    duplicates: str = "max"  # repeated edges: max | sum | mean | error
    constraints: str | None = None
    labels: str | None = None
    groups: str | None = None  # memberships (node, group): pairs by group_constraints' protocol
    n_must: int | None = None
    n_cannot: int | None = None
    diagonal: bool | None = None
    solver: str = "bcd"
    loss: str = "square"
    rank: int | None = None
    gamma: float | str = 1.0  # or "cv": chosen by npkl_dist.select_gamma
    knn: int = 5
    weighting: str = "gaussian"
    knn_method: str = "auto"
    scale: str = "none"  # feature columns before the kNN graph: none | standard
    delta: float = 1e-3
    bound: float = 1.0
    capacity: float | None = None
    anderson: int = 0  # admm: Anderson acceleration's memory (0: the paper's Alg. 1)
    max_sweeps: int | None = None  # None: the solver's own cap (default_max_iterations)
    tol: float = 1e-5
    method: str = "auto"
    start: str = "auto"
    tol_objective: float | None = None
    tol_kkt: float | None = None
    dtype: str = "float64"
    seed: int = 0
    threads: int | None = None
    clusters: int | None = None
    # kernel k-means on the cosine-normalised kernel; None: when the free points' rows are short
    normalize_kernel: bool | None = None
    # "pck" (constrained k-means) or "kmeans"; None: "pck" when there are constraints
    cluster_method: str | None = None
    eval_labels: str | None = None
    # arrays instead of paths (Python callers, the demo)
    X: np.ndarray | None = field(default=None, repr=False)
    y_constraints: np.ndarray | None = field(default=None, repr=False)
    y_eval: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.cluster_method is not None and self.cluster_method not in CLUSTER_METHODS:
            raise ValidationError(
                f"cluster_method: expected one of {', '.join(map(repr, CLUSTER_METHODS))} "
                f"or None (pck when there are constraints), got {self.cluster_method!r}"
            )
        if self.max_sweeps is None and self.solver in SOLVERS:
            self.max_sweeps = default_max_iterations(self.solver)
        if self.anderson and self.solver != "admm":
            raise ValidationError(
                f"anderson: {self.anderson} accelerates solver='admm' only, got "
                f"solver={self.solver!r}; use anderson=0 or solver='admm'"
            )


def default_max_iterations(solver: str) -> int:
    """The iteration cap ``solver`` uses when none is given: its fit function's own default
    (``fit_bcd``'s max_sweeps, ``fit_admm``'s and ``fit_simplenpkl``'s max_iter)."""

    if solver not in SOLVERS:
        raise ValidationError(f"solver: {solver!r} is not one of {', '.join(SOLVERS)}")
    if solver == "admm":
        fit = fit_admm
    elif solver == "simplenpkl":
        fit = fit_simplenpkl
    else:
        fit = fit_bcd
    params = inspect.signature(fit).parameters
    return params["max_sweeps" if solver == "bcd" else "max_iter"].default


def load_graph(cfg: FitConfig):
    """Stage: the manifold graph from features or an edge list."""
    sources = [cfg.features is not None or cfg.X is not None, cfg.edges is not None]
    if sum(sources) != 1:
        raise ValidationError(
            "input: give exactly one of --features PATH (feature rows) or --edges PATH (a given "
            "graph's edge list)"
        )
    if cfg.edges is not None:
        return graph_from_edges(
            read_edges(cfg.edges), cfg.n_points, duplicates=cfg.duplicates
        ), None
    X = cfg.X if cfg.X is not None else read_features(cfg.features)
    # the graph from the scaled columns (cfg.scale); the features themselves as given
    Xg = X
    if cfg.scale != "none":  # (knn_graph checks X; scaling must see checked columns)
        Xg = _check_features(X)
        Xg = apply_feature_scale(Xg, feature_scale(Xg, cfg.scale))
    return knn_graph(Xg, cfg.knn, weighting=cfg.weighting, method=cfg.knn_method, seed=cfg.seed), X


def _learn(cfg: FitConfig, problem: NPKLProblem, executor, callback):
    """Stage: learn the kernel with the configured solver."""
    fit, options = _solver(cfg, executor)
    return fit(problem, callback=callback, **options)


def _solver(cfg: FitConfig, executor):
    """The configured solver function and its options (all but the problem and callback)."""
    if cfg.solver == "admm":
        return fit_admm, {
            "max_iter": cfg.max_sweeps,
            "tol": cfg.tol,
            "executor": executor,
            "anderson": cfg.anderson,
        }
    if cfg.solver == "simplenpkl":
        return fit_simplenpkl, {"B": cfg.capacity, "max_iter": cfg.max_sweeps, "tol": cfg.tol}
    return fit_bcd, {
        "max_sweeps": cfg.max_sweeps,
        "tol": cfg.tol,
        "executor": executor,
        **bcd_options(cfg),
    }


def _select_gamma(cfg: FitConfig, problem: NPKLProblem, executor):
    """``gamma = 'cv'``: choose gamma by cross-validation on held-out constraints (never the
    labels; the 'clusters' score when ``clusters`` is given, else 'auc')."""

    _, options = _solver(cfg, executor)
    return select_gamma(
        problem,
        folds=3,
        seed=cfg.seed,
        solver=cfg.solver,
        n_clusters=cfg.clusters,
        fit_options=options,
        normalize=bool(cfg.normalize_kernel),  # None (automatic): V as before
    )


def _cv_gamma(cfg: FitConfig) -> bool:
    """True for ``gamma='cv'``; other strings are refused here with the fix."""
    if isinstance(cfg.gamma, str):
        if cfg.gamma.strip().lower() == "cv":
            return True
        raise ValidationError(
            f"gamma: expected a number > 0 or 'cv' (choose it by cross-validation on "
            f"held-out constraints), got {cfg.gamma!r}"
        )
    return False


def bcd_options(cfg: FitConfig) -> dict:
    """The block-solve / start / stopping options of a BCD fit."""
    return {
        "method": cfg.method,
        "start": cfg.start,
        "tol_objective": cfg.tol_objective,
        "tol_kkt": cfg.tol_kkt,
    }


def _bcd_summary(result) -> dict:
    """JSON fields of a BCD fit beyond the common ones."""
    if not hasattr(result, "kkt_trace"):
        return {}
    return {
        "method": result.method,
        "start": result.start,
        "kkt": result.kkt,
        "kkt_trace": result.kkt_trace,
        "cg_iterations": result.cg_iterations,
        "joint_moves": list(getattr(result, "joint_moves", [])),
    }


def iterations_label(summary: dict) -> str:
    """'N sweeps'; 'N outer iterations' for a block-solve fit, 'N iterations' for KL-ADMM,
    SimpleNPKL and the inductive kernel (n_sweeps counts those)."""
    n = summary.get("n_sweeps")
    if summary.get("solver") in ("admm", "simplenpkl", "inductive"):
        return f"{n} iterations"
    return f"{n} outer iterations" if summary.get("method") == "block" else f"{n} sweeps"


def result_summary(solver: str, result) -> dict:
    """The JSON fields of a fit result (the learning part of the ``npkl fit --json``
    contract), for any solver."""
    out = {
        "objective": float(result.objective),
        "objective_initial": float(result.objective_initial),
        "objective_trace": [float(x) for x in result.objective_trace],
        "change_trace": [float(x) for x in result.change_trace],
        "n_sweeps": int(result.n_sweeps),
        "converged": bool(result.converged),
        "n_colours": int(result.n_colours),
        "sweep_seconds": [float(x) for x in result.sweep_seconds],
        "objective_seconds": [float(x) for x in result.objective_seconds],
        "fit_seconds": float(result.fit_seconds),
        "numerical_rank": int(
            numerical_rank(result.V)
            if getattr(result, "numerical_rank", -1) < 0
            else result.numerical_rank
        ),
    }
    if np.isfinite(getattr(result, "descent_curvature", float("nan"))):
        out["descent_curvature"] = float(result.descent_curvature)
    out.update(_bcd_summary(result))
    if solver == "admm":
        out["primal_residual_trace"] = result.primal_trace
        out["dual_residual_trace"] = result.dual_trace
        out["rho_trace"] = result.rho_trace
    if solver == "simplenpkl":
        out.update(
            {
                "B": float(result.B),
                "dual_trace": list(map(float, result.dual_trace)),
                "duality_gap": float(result.duality_gap),
                "polished": bool(result.polished),
                "n_eigsolves": int(result.n_eigsolves),
            }
        )
    return out


def _check_constraint_source(cfg: FitConfig):
    given = [
        cfg.constraints is not None,
        cfg.labels is not None or cfg.y_constraints is not None,
        cfg.groups is not None,
    ]
    if sum(given) != 1:
        raise ValidationError(
            "constraints: give exactly one of --constraints PATH (pairs i,j,type), --labels "
            "PATH (partial labels, pairs sampled with the papers' protocol) or --groups PATH "
            "(memberships node,group; pairs sampled from shared groups)"
        )


def load_constraints(cfg: FitConfig, n: int, *, n_from_edges: bool = False) -> Constraints:
    """Stage: constraints from a pairs file, or sampled from (partial) labels or group
    memberships.

    ``n_from_edges``: n was read off the edge list (its largest node + 1), so a point
    beyond it may be a node without edges: the error then names ``--n-points``."""
    _check_constraint_source(cfg)

    def hint(needed):
        if not n_from_edges or needed <= n:
            return ""
        return (
            f"; the edge list's largest node is {n - 1}: if the nodes after it have no "
            f"edge, pass their count "
            f"({fix(f'n_points={needed}', f'--n-points {needed}', f'[input] n_points = {needed}')})"
        )

    if cfg.constraints is not None:
        i, j, t = read_constraints(cfg.constraints)
        try:
            return Constraints.from_arrays(i, j, t, n, diagonal=_diagonal(cfg))
        except ValidationError as exc:
            top = int(np.nanmax(np.r_[np.asarray(i, float), np.asarray(j, float)])) + 1
            extra = hint(top)
            if not extra:
                raise
            raise ValidationError(f"{exc}{extra}") from None
    if cfg.groups is not None:
        from ..embedding import group_constraints, read_memberships

        member = read_memberships(cfg.groups, n_nodes=n)
        if member.n_nodes != n:
            raise ValidationError(
                f"groups: memberships name node {member.n_nodes - 1}, the graph has {n} nodes "
                f"(0 to {n - 1}); give memberships of its nodes" + hint(member.n_nodes)
            )
        return group_constraints(
            member, cfg.n_must, cfg.n_cannot, seed=cfg.seed, diagonal=_diagonal(cfg)
        )
    y = cfg.y_constraints if cfg.y_constraints is not None else read_labels(cfg.labels)
    if y.shape[0] != n:
        raise ValidationError(
            f"labels: {y.shape[0]} labels for {n} points; give one label per point (-1 for "
            f"unlabelled)" + hint(y.shape[0])
        )
    return sample_constraints(y, cfg.n_must, cfg.n_cannot, seed=cfg.seed, diagonal=_diagonal(cfg))


def _diagonal(cfg: FitConfig) -> bool:
    """KL-ADMM's protocol fits K_ii = 1 by default; BCD's objective has no such term."""
    return (cfg.solver == "admm") if cfg.diagonal is None else bool(cfg.diagonal)


def run_fit(
    cfg: FitConfig, callback=None, executor=None
) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """Run the main job.

    Returns
    -------
    summary : dict
        JSON-ready report (the ``npkl fit --json`` contract).
    V : ndarray, shape (n_points, rank), original point order
    clusters : ndarray of int64 or None
    """
    # a first run on the machine compiles the BCD fit's kernels on the idle core as well
    # (npkl_dist._precompile; nothing starts when numba's cache holds them)
    helper = background_compile(cfg.loss, cfg.dtype) if cfg.solver == "bcd" else nullcontext()
    with helper:
        return _run_fit(cfg, callback, executor)


def _run_fit(cfg, callback, executor):
    if cfg.solver not in SOLVERS:
        raise ValidationError(f"solver: {cfg.solver!r} is not one of {', '.join(SOLVERS)}")
    _check_constraint_source(cfg)  # fail fast, before the graph is built
    t0 = time.perf_counter()
    graph, X = load_graph(cfg)
    t_graph = time.perf_counter() - t0
    n = graph.n_points
    from_edges = cfg.edges is not None and cfg.n_points is None
    cons = load_constraints(cfg, n, n_from_edges=from_edges)
    y_eval = cfg.y_eval
    if y_eval is None and cfg.eval_labels is not None:
        y_eval = read_labels(cfg.eval_labels)
    if y_eval is not None and y_eval.shape[0] != n:
        raise ValidationError(
            f"eval labels: {y_eval.shape[0]} labels for {n} points; give one label per point"
        )
    L = graph.laplacian(cfg.delta, dtype=cfg.dtype)
    cv = _cv_gamma(cfg)
    problem = NPKLProblem.build(
        L,
        cons,
        loss=cfg.loss,
        gamma=1.0 if cv else cfg.gamma,
        rank=cfg.rank,
        bound=cfg.bound,
        seed=cfg.seed,
        dtype=cfg.dtype,
    )

    own_executor = executor is None
    executor = executor or InProcessExecutor(cfg.threads)
    selection = None
    try:
        if cv:
            selection = _select_gamma(cfg, problem, executor)
            problem = selection.problem
        with CompileWatch() as compiling:
            result = _learn(cfg, problem, executor, callback)
    finally:
        if not own_executor and hasattr(executor, "close"):
            executor.close()
    k = cfg.clusters
    if k is None and y_eval is not None:
        k = int(np.unique(y_eval[y_eval >= 0]).size)
    clusters = None
    t_c = time.perf_counter()
    unit = bool(cfg.normalize_kernel)  # what the summary says when nothing is clustered
    if k is not None:
        unit = choose_normalize(cfg.normalize_kernel, cons, result.V)
        clusters = cluster_kernel(
            result.V,
            k,
            seed=cfg.seed,
            normalize=unit,
            short_rows_of=cons,
            gamma_cv=_cv_gamma(cfg),
            constraints=cons,
            solver=cfg.solver,
            method=cfg.cluster_method,
        )
    t_cluster = time.perf_counter() - t_c
    summary = {
        "solver": cfg.solver,
        "loss": cfg.loss,
        "gamma": problem.gamma,
        "rank": problem.rank,
        "dtype": str(problem.dtype),
        "seed": cfg.seed,
        "n_points": n,
        "n_constraints": cons.m,
        "n_must": cons.n_must,
        "n_cannot": cons.n_cannot,
        "n_duplicates_merged": cons.n_duplicates,
        "diagonal_targets": cons.diagonal,
        "graph": {
            "n_edges": int(graph.S.nnz // 2),
            "n_components": graph.n_components,
            "n_isolated": graph.n_isolated,
            "sigma": graph.sigma,
            "length": graph.length,
            "knn": cfg.knn,
            "weighting": cfg.weighting if X is not None else "given",
            "scale": cfg.scale if X is not None else None,
        },
        **result_summary(cfg.solver, result),
        "compile_seconds": compiling.seconds,
        "graph_seconds": t_graph,
        "cluster_seconds": t_cluster,
        "n_clusters": k,
        "normalize_kernel": unit,
        "cluster_method": resolve_cluster_method(cfg.cluster_method, cons) if k else None,
    }
    if selection is not None:
        summary["gamma_selection"] = selection.to_dict()
    if y_eval is not None and clusters is not None:
        labelled = y_eval >= 0
        summary["metrics"] = clustering_metrics(y_eval[labelled], clusters[labelled])
    return summary, result.V, clusters


def ensure_out_dir(out_dir, name: str = "out") -> Path:
    """Create the output directory ``out_dir`` (and its parents) and check that a file can
    be written in it; a command calls this before its long work, so that a bad ``--out``
    is refused at once instead of after the fit. ``name`` is the argument to name."""

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".npkl-write-check-"):
            pass
    except OSError as exc:
        raise ValidationError(
            f"{name}: cannot write to {str(out)!r} ({exc.strerror or exc}); choose a "
            f"directory this process may create and write to"
        ) from None
    return out


def write_outputs(out_dir, V, clusters, summary=None) -> list[Path]:
    """``embedding.npy`` (n x r, original order), ``clusters.npy`` (where ``clusters`` is
    given) and ``summary.json`` (where ``summary`` is). Returns the paths written."""

    out = ensure_out_dir(out_dir, "out_dir")
    written = [out / "embedding.npy"]
    np.save(written[0], V)
    if clusters is not None:
        written.append(out / "clusters.npy")
        np.save(written[-1], clusters)
    if summary is not None:
        written.append(out / "summary.json")
        written[-1].write_text(json.dumps(summary, indent=2))
    return written


def config_dict(cfg: FitConfig) -> dict:
    d = asdict(cfg)
    for k in ("X", "y_constraints", "y_eval"):
        d.pop(k)
    return d


# ------------------------------------------------------------------------------------------
# Runs in a store: every stage's output persisted, learning checkpointed, resumable.
# ------------------------------------------------------------------------------------------


def _row_block(n: int) -> int:
    """Shard height of V checkpoints: a multiple of the reduction chunk (1024 rows) that
    gives at most a few hundred shards."""

    return SUM_BLOCK * max(1, min(64, n // (SUM_BLOCK * 16)))


def make_executor(opts: dict, row_block: int):
    if opts.get("executor", "inprocess") == "dask":
        ex = DaskExecutor(
            address=opts.get("dask"),
            workers=int(opts.get("workers") or 2),
            threads=int(opts.get("threads") or 1),
            blocks=opts.get("blocks"),
            # a cluster of its own gets the dashboard users look for (a free port if 8787
            # is taken); learning shows on it through DaskExecutor.progress_callback
            dashboard_address=opts.get("dashboard", ":8787"),
        )
        ex.align = row_block
        return ex
    return InProcessExecutor(opts.get("threads"))


def run_fit_in_store(
    cfg: FitConfig | None,
    run: str,
    *,
    opts: dict | None = None,
    resume: bool = False,
    callback=None,
    storage_options=None,
    log=None,
):
    """The main job with every stage persisted in the run store at ``run``.

    A new run (``resume=False``) refuses an existing one. ``resume=True`` re-opens it, reads
    its stored configuration and continues: finished stages are read back, learning restarts
    from the newest complete checkpoint, and the result equals an uninterrupted run bitwise.

    Returns
    -------
    summary : dict, V : ndarray (n, r) original order, clusters : ndarray or None
    """

    url = st.resolve_run(run)
    if resume:
        store = st.RunStore.open(url, mode="a", storage_options=storage_options)
        stored = store.config
        cfg = FitConfig(**stored["fit"])
        opts = stored["run"]
    else:
        opts = dict(opts or {})
        _check_constraint_source(cfg)
        store = st.RunStore.create(
            url, config={"fit": config_dict(cfg), "run": opts}, storage_options=storage_options
        )
    try:
        if store.stage_done("results"):
            res = store.read_results()
            return res["summary"], res["embedding"], res.get("clusters")
        t0 = time.perf_counter()
        # stage: inputs and graph
        if not store.stage_done("graph"):
            graph, X = load_graph(cfg)
            n = graph.n_points
            from_edges = cfg.edges is not None and cfg.n_points is None
            cons = load_constraints(cfg, n, n_from_edges=from_edges)
            y_eval = cfg.y_eval
            if y_eval is None and cfg.eval_labels is not None:
                y_eval = read_labels(cfg.eval_labels)
            store.write_inputs(
                features=None if X is None else np.asarray(X, np.float64),
                constraints=cons,
                eval_labels=None if y_eval is None else np.asarray(y_eval),
            )
            store.write_graph(graph.S)
        inputs = store.read_inputs()
        S = store.read_graph()
        t_graph = time.perf_counter() - t0
        cons = inputs["constraints"]
        y_eval = inputs.get("eval_labels")
        L = laplacian(S, cfg.delta, dtype=cfg.dtype)
        if _cv_gamma(cfg):
            raise ValidationError(
                "gamma: 'cv' is not available with --run yet; choose gamma by running the "
                "same fit without --run (its JSON has the chosen 'gamma'), then pass that value"
            )
        problem = NPKLProblem.build(
            L,
            cons,
            loss=cfg.loss,
            gamma=cfg.gamma,
            rank=cfg.rank,
            bound=cfg.bound,
            seed=cfg.seed,
            dtype=cfg.dtype,
        )
        n, r = problem.n_points, problem.rank
        row_block = _row_block(n)
        # stage: plan (its blocks aligned to the checkpoint shards, where Dask may cut)
        if not store.stage_done("plan"):
            store.write_plan(make_plan(problem, align=row_block))
        plan, _ = store.read_plan()
        # stage: learn (checkpointed)
        executor = make_executor(opts, row_block)
        method = cfg.method
        if cfg.solver == "bcd" and method == "auto":
            method = choose_method(problem, executor)
        width = (
            admm_checkpoint_width(r, cfg.anderson)
            if cfg.solver == "admm"
            else checkpoint_width(r, method)
        )
        params = {
            "solver": cfg.solver,
            "loss": cfg.loss,
            "gamma": cfg.gamma,
            "rank": r,
            "delta": cfg.delta,
            "bound": cfg.bound,
            "seed": cfg.seed,
            "dtype": str(problem.dtype),
            "tol": cfg.tol,
            "max_sweeps": cfg.max_sweeps,
            "executor": opts.get("executor", "inprocess"),
            "anderson": cfg.anderson,
            **st.data_hashes(store),
        }
        # the accelerator's memory is float64 whatever the problem's dtype (resume is bitwise)
        ck = st.StoreCheckpointer(
            store,
            every=int(opts.get("checkpoint_every") or 1),
            row_block=row_block,
            n=n,
            width=width,
            dtype=np.float64 if cfg.anderson else problem.dtype,
            max_sweeps=cfg.max_sweeps,
            extra={"parameters": params},
        )
        try:
            if cfg.solver == "admm":
                result = fit_with_recovery(
                    fit_admm,
                    problem,
                    checkpointer=ck,
                    executor=executor,
                    plan=plan,
                    max_iter=cfg.max_sweeps,
                    tol=cfg.tol,
                    anderson=cfg.anderson,
                    callback=callback,
                    log=log,
                )
            elif cfg.solver == "bcd":
                result = fit_with_recovery(
                    fit_bcd,
                    problem,
                    checkpointer=ck,
                    executor=executor,
                    plan=plan,
                    max_sweeps=cfg.max_sweeps,
                    tol=cfg.tol,
                    callback=callback,
                    log=log,
                    **{**bcd_options(cfg), "method": method},
                )
            else:
                raise ValidationError(
                    f"solver: {cfg.solver!r} does not checkpoint into a run store yet; use "
                    f"'bcd' or 'admm' with --run, or drop --run"
                )
        finally:
            if hasattr(executor, "close"):
                executor.close()
        k = cfg.clusters
        if k is None and y_eval is not None:
            k = int(np.unique(y_eval[y_eval >= 0]).size)
        unit = (
            choose_normalize(cfg.normalize_kernel, cons, result.V)
            if k is not None
            else bool(cfg.normalize_kernel)  # nothing clustered
        )
        clusters = (
            cluster_kernel(
                result.V,
                k,
                seed=cfg.seed,
                normalize=unit,
                constraints=cons,
                method=cfg.cluster_method,
            )
            if k is not None
            else None
        )
        summary = {
            "solver": cfg.solver,
            "loss": cfg.loss,
            "gamma": cfg.gamma,
            "rank": r,
            "dtype": str(problem.dtype),
            "seed": cfg.seed,
            "n_points": n,
            "n_constraints": cons.m,
            "objective": result.objective,
            "objective_trace": result.objective_trace,
            "n_sweeps": result.n_sweeps,
            "converged": bool(result.converged),
            "sweep_seconds": result.sweep_seconds,
            "fit_seconds": result.fit_seconds,
            "graph_seconds": t_graph,
            "n_clusters": k,
            "normalize_kernel": unit,
            "cluster_method": resolve_cluster_method(cfg.cluster_method, cons) if k else None,
            "run": url,
            "executor": opts.get("executor", "inprocess"),
            "checkpoints_written": ck.n_saved,
        }
        summary.update(_bcd_summary(result))
        if y_eval is not None and clusters is not None:
            lab = y_eval >= 0
            summary["metrics"] = clustering_metrics(y_eval[lab], clusters[lab])
        out = {"embedding": np.ascontiguousarray(result.V), "summary": summary}
        if clusters is not None:
            out["clusters"] = clusters
        store.write_results(**out)
        return summary, result.V, clusters
    finally:
        store.close()


def export_run(run: str, out_dir, storage_options=None) -> list[Path]:
    """``embedding.npy`` (n x r, original order), ``clusters.npy`` (where the run clustered)
    and ``summary.json`` of a finished run; returns the paths written."""

    store = st.RunStore.open(st.resolve_run(run), mode="r", storage_options=storage_options)
    try:
        ensure_out_dir(out_dir, "out_dir")
        if not store.stage_done("results"):
            raise ValidationError(
                f"run: {store.url} has no results yet (learning not finished); finish it with "
                f"`npkl resume {run}` first"
            )
        res = store.read_results()
    finally:
        store.close()
    return write_outputs(out_dir, res["embedding"], res.get("clusters"), res.get("summary"))
