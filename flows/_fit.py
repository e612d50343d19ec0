"""``npkl fit``: the pipeline's stages run in this process, without Prefect.

`npkl fit` is the one-shot form of a pipeline: its options become a pipeline configuration
(:func:`fit_pipeline_config`) and the same stage functions as ``npkl run`` (ingest, graph,
plan, learn, evaluate, extend, report; :mod:`npkl_flows._stages`) run here over a run store. No
Prefect: a flow run's start-up (a temporary server) costs more than a whole fit of a few
thousand points (docs/decisions/pipeline-orchestration.md), and a fit has nothing to schedule
or watch remotely. ``npkl run`` wraps the very same functions in Prefect tasks and pays that
cost once per run.

Without ``--run`` the store is a temporary directory deleted at the end, and learning is not
checkpointed there (nothing could resume from it). With ``--run`` the store is kept,
learning is checkpointed every ``--checkpoint-every`` sweeps, and ``npkl resume RUN``
continues it here (:func:`run_fit_stages` with ``resume=True``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from npkl_dist import (
    InputFileError,
    ValidationError,
)
from npkl_dist import store as st
from npkl_dist.job._job import config_dict

from . import _stages
from ._config import fit_config, validate_config

__all__ = ["fit_pipeline_config", "run_fit_stages", "FIT_COMMAND"]

#: the run store's config["command"] of a run made by ``npkl fit --run``
FIT_COMMAND = "fit"


def _check_sources(args):
    """The fit's input rules, in the command line's terms (before anything is read)."""

    if (args.features is None) == (args.edges is None):
        raise ValidationError(
            "input: give exactly one of --features PATH (feature rows) or --edges PATH (a given "
            "graph's edge list)"
        )
    if sum(getattr(args, k) is not None for k in ("constraints", "labels", "groups")) != 1:
        raise ValidationError(
            "constraints: give exactly one of --constraints PATH (pairs i,j,type), --labels "
            "PATH (partial labels, pairs sampled with the papers' protocol) or --groups PATH "
            "(memberships node,group; pairs sampled from shared groups)"
        )
    for opt in ("features", "edges", "constraints", "labels", "groups", "eval_labels"):
        path = getattr(args, opt)
        if path is not None and "://" not in path and not Path(path).is_file():
            flag = f"--{opt.replace('_', '-')}"
            if Path(path).is_dir():
                raise InputFileError(
                    f"{flag}: {path!r} is a directory; pass the file inside it (.npy, .csv "
                    f"or .parquet)"
                )
            raise InputFileError(f"{flag}: file {path!r} does not exist; check the path")


def fit_pipeline_config(args, run: str) -> dict:
    """The validated pipeline configuration of ``npkl fit`` options ``args`` (argparse)."""

    _check_sources(args)
    inp = {
        k: getattr(args, k)
        for k in (
            "features",
            "edges",
            "n_points",
            "constraints",
            "labels",
            "groups",
            "n_must",
            "n_cannot",
            "eval_labels",
        )
    }
    raw = {
        "run": run,
        "input": inp,
        "graph": {
            "knn": args.knn,
            "weighting": args.weighting,
            "knn_method": args.knn_method,
            "scale": args.scale,
            "delta": args.delta,
            "duplicates": args.duplicates,
        },
        "model": {
            k: getattr(args, k)
            for k in (
                "solver",
                "loss",
                "rank",
                "gamma",
                "bound",
                "diagonal",
                "max_sweeps",
                "tol",
                "dtype",
                "seed",
                "method",
                "start",
                "tol_objective",
                "tol_kkt",
                "capacity",
                "anderson",
            )
        },
        # --dask counts with --executor dask only (as it always has)
        "execution": {
            "executor": args.executor,
            "workers": args.workers,
            "dask": args.dask if args.executor == "dask" else None,
            "blocks": args.blocks,
            "threads": args.threads,
            "checkpoint_every": args.checkpoint_every,
        },
        "output": {
            "clusters": args.clusters,
            "normalize_kernel": args.normalize_kernel,
            "cluster_method": args.cluster_method,
            "out": args.out,
            "plots": args.out is not None and args.plot,
            "files": args.out is not None,
        },
    }
    return validate_config(raw, source="npkl fit", base_dir=os.getcwd())


def run_fit_stages(
    cfg: dict, *, resume: bool = False, keep: bool = True, quiet: bool = True, storage_options=None
):
    """Run (or resume) the stages of a fit over the run store at ``cfg["run"]``.

    Parameters
    ----------
    cfg : dict
        A validated pipeline configuration (:func:`fit_pipeline_config`, or the one stored
        in the run on resume).
    resume : bool
        Continue an existing run (finished stages are skipped; learning continues from its
        newest checkpoint) instead of creating one.
    keep : bool
        False: ``cfg["run"]`` is a throw-away location; the store is created without
        checkpoints and deleted at the end.

    Returns
    -------
    summary : dict
        The ``npkl fit --json`` object (:func:`npkl_flows._stages.summarise`).
    V : ndarray (n, r), original point order; clusters : ndarray or None
    """

    url = st.resolve_run(cfg["run"], root=cfg["storage"]["root"])
    so = storage_options or cfg["storage"]["options"]
    if resume:
        store = st.RunStore.open(url, mode="a", storage_options=so)
    else:
        if keep:
            # lazy: the pipeline module imports Prefect, which `npkl fit --run` does not use
            from npkl_flows.pipeline import check_new_run

            check_new_run(cfg)
        store = st.RunStore.create(
            url,
            config={
                "pipeline": cfg,
                "fit": config_dict(fit_config(cfg)),
                "run": dict(cfg["execution"]),
                "command": FIT_COMMAND,
            },
            storage_options=so,
        )
    client = None
    try:
        ex = cfg["execution"]
        if ex["dask"] and ex["executor"] == "dask":
            from distributed import Client  # optional engine (the dask extra)

            client = Client(ex["dask"])  # the graph stage's kNN blocks on that cluster

        def log(msg):
            if not quiet:
                sys.stderr.write(f"npkl: {msg}\n")

        ctx = _stages.Context(store, cfg, quiet=quiet, client=client, log=log, throwaway=not keep)
        _stages.run_stages(ctx)
        res = store.read_results()
        summary = dict(res.get("summary") or _stages.summarise(store, ctx.cfg))
        if summary.get("metrics") is None:
            summary.pop("metrics", None)
        return summary, res["embedding"], res.get("clusters")
    finally:
        if client is not None:
            client.close()
        store.close()


def fit(cfg_for, *, run: str | None, quiet: bool):
    """``npkl fit``: ``cfg_for(run)`` builds the configuration for a run location."""
    if run is not None:
        return run_fit_stages(cfg_for(run), quiet=quiet)
    tmp = tempfile.mkdtemp(prefix="npkl-fit-")
    try:
        return run_fit_stages(cfg_for(os.path.join(tmp, "run")), keep=False, quiet=quiet)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
