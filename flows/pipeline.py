"""The Prefect flow ``npkl-pipeline``: ingest → graph → plan → learn → evaluate → extend → report.

One flow run per pipeline run; each stage is one coarse Prefect task (its overhead:
docs/decisions/pipeline-orchestration.md) that calls :mod:`npkl_flows._stages`. Heavy data
stays in the run store; tasks receive and return small JSON dicts. Task results persist
(Prefect's local result storage) under a key made of the run URL, the run store's creation
stamp, the configuration hash, the stage and the code version, so a re-run of the same run id
after a crash skips finished stages even before looking at the store — and a new run at the
same location (new creation stamp) or changed code never reuses them. Independently of Prefect,
every stage also checks the run store's own stage record, and the learn stage resumes from the
newest complete checkpoint.

Per-block work (kNN row blocks, sweeps) runs in plain Dask / numba inside the tasks: Prefect
never sees it, and Dask workers never start Prefect.
"""

from __future__ import annotations

import hashlib
import os

from prefect import flow, get_run_logger, task
from prefect.context import get_run_context

from npkl_dist import store as st
from npkl_dist.job._job import config_dict
from npkl_flows import _stages  # absolute: Prefect may load this file by path
from npkl_flows._config import expand_run, fit_config, load_config, validate_config

__all__ = ["pipeline", "run_pipeline"]

# the orchestrating process's open stores and per-run caches, by run URL (tasks get URLs)
_CONTEXTS: dict[str, _stages.Context] = {}


def _cache_key(ctx, params) -> str:
    return "npkl-" + hashlib.sha256(f"{params['key']}|{ctx.task.name}".encode()).hexdigest()[:40]


def _stage_task(name, fn):
    @task(name=name, cache_key_fn=_cache_key, persist_result=True, retries=0)
    def _t(url: str, key: str) -> dict:
        return fn(_CONTEXTS[url])

    return _t


ingest_task = _stage_task("ingest", _stages.ingest)
graph_task = _stage_task("build-graph", _stages.build_graph)
plan_task = _stage_task("colour-partition", _stages.colour)
learn_task = _stage_task("learn", _stages.learn)
evaluate_task = _stage_task("evaluate", _stages.evaluate)
extend_task = _stage_task("extend", _stages.extend)
report_task = _stage_task("report", _stages.report)
_TASKS = (
    ("ingest", ingest_task),
    ("graph", graph_task),
    ("plan", plan_task),
    ("learn", learn_task),
    ("evaluate", evaluate_task),
    ("extend", extend_task),
    ("report", report_task),
)


def _mark_crashed(store, current_id, log):
    """Flow runs of this run id left RUNNING by a killed process: we now hold the writer
    lock, so none of them is alive. Mark them Crashed so the API tells the truth."""
    runs = (store.stages().get("flow", {}).get("info", {}) or {}).get("flow_runs", [])
    stale = [r for r in runs if r != current_id]
    if not stale:
        return []
    marked = []
    try:
        from prefect.client.orchestration import get_client  # optional engine (the prefect extra)
        from prefect.states import Crashed  # optional engine (the prefect extra)

        with get_client(sync_client=True) as client:
            for fid in stale:
                try:
                    fr = client.read_flow_run(fid)
                except Exception:  # another API / deleted run
                    continue
                if fr.state is not None and fr.state.type.value in ("RUNNING", "PENDING"):
                    client.set_flow_run_state(
                        fid,
                        Crashed(
                            message="the orchestrating process died; resumed by "
                            f"flow run {current_id}"
                        ),
                        force=True,
                    )
                    marked.append(fid)
    except Exception as exc:  # the API is best effort here; the store is the truth
        log(f"could not mark earlier flow runs crashed: {exc}")
    return marked


def open_run(cfg: dict, resume: bool):
    """The run store of a pipeline, created (a new run) or opened for writing (resume).

    Returns ``(store, cfg)``; on resume ``cfg`` is the run's stored configuration.
    """

    url = st.resolve_run(cfg["run"], root=cfg["storage"]["root"])
    so = cfg["storage"]["options"]
    if resume:
        store = st.RunStore.open(url, mode="a", storage_options=so)
        return store, store.config.get("pipeline") or cfg

    check_new_run(cfg)
    store = st.RunStore.create(
        url,
        config={
            "pipeline": cfg,
            "fit": config_dict(fit_config(cfg)),
            "run": dict(cfg["execution"]),
        },
        storage_options=so,
    )
    return store, cfg


def check_new_run(cfg: dict) -> None:
    """Refuse a new run where one exists, naming `npkl resume` and `npkl status`."""

    if "{" in cfg["run"]:
        return  # expanded to a new name when the flow starts
    url = st.resolve_run(cfg["run"], root=cfg["storage"]["root"])
    try:
        with st.RunStore.open(url, mode="r", storage_options=cfg["storage"]["options"]):
            exists = True
    except st.StoreError:
        exists = False
    if exists:
        raise st.StoreError(
            f"run: {cfg['run']!r} already exists at {url}; continue it with `npkl resume "
            f"{cfg['run']}` (a deployment: resume=true), look at it with `npkl status "
            f'{cfg["run"]}`, or choose another run id (run = "name-{{date}}" makes a new one '
            f"each time)"
        )


# log_prints must stay off: it patches builtins.print, which numba then cannot compile
@flow(name="npkl-pipeline", persist_result=False, log_prints=False)
def pipeline(config: dict | str, resume: bool = False, quiet: bool = True) -> dict:
    """Run (or resume) a whole npkl pipeline.

    Parameters
    ----------
    config : dict or str
        A validated configuration dict, or the path of a TOML file (:mod:`npkl_flows._config`).
    resume : bool
        Continue an existing run (its stored configuration wins); otherwise create it.
    quiet : bool
        No progress bars (deployments run without a terminal).

    Returns
    -------
    dict
        Per-stage info (seconds, peak memory, skipped or not) and the run URL.
    """

    logger = get_run_logger()
    if isinstance(config, str):
        cfg = load_config(config)
    else:
        cfg = (
            validate_config(config)
            if "input" not in config or not isinstance(config.get("execution"), dict)
            else config
        )

    if not resume and "{" in cfg["run"]:
        cfg = {**cfg, "run": expand_run(cfg["run"], get_run_context().flow_run.name)}
    store, cfg = open_run(cfg, resume)
    url = store.url
    client = cluster = None
    try:
        flow_run_id = str(get_run_context().flow_run.id)
        runs = (store.stages().get("flow", {}).get("info", {}) or {}).get("flow_runs", [])
        store.mark_stage("flow", {"flow_runs": [*runs, flow_run_id], "pid": os.getpid()})
        crashed = _mark_crashed(store, flow_run_id, logger.warning)
        if crashed:
            logger.warning(f"marked {len(crashed)} earlier flow run(s) of this run crashed")
        ex = cfg["execution"]
        run_cfg = cfg
        if ex["dask"] and ex["executor"] in ("auto", "dask"):
            from distributed import Client  # optional engine (the dask extra)

            address = ex["dask"]
            if address == "slurm":
                # workers as SLURM jobs, configured by the Dask configuration (jobqueue.slurm,
                # deploy/jobqueue.yaml); they stop with this flow run
                from dask_jobqueue import SLURMCluster  # optional engine (the slurm extra)

                cluster = SLURMCluster()
                cluster.scale(jobs=ex["workers"])
                address = cluster.scheduler_address
                run_cfg = {**cfg, "execution": {**ex, "dask": address}}
            client = Client(address)
            if cluster is not None:
                client.wait_for_workers(1, timeout=600)
        ctx = _stages.Context(
            store, run_cfg, quiet=quiet, client=client, log=logger.warning
        )  # to stderr and to the Prefect API
        _CONTEXTS[url] = ctx
        created = store._attrs.get("created", "")
        # the run's identity: its store URL and creation stamp; the configuration without
        # where the run is (a resume may name it differently); the code
        same = {k: v for k, v in cfg.items() if k not in ("run", "storage")}
        redone = len(store._attrs.get("redo", []))  # `npkl resume --redo` forgot stages
        key_base = (
            f"{store.url}|{created}|{redone}|{_stages.config_hash(same)}|{_stages.code_version()}"
        )
        results = {"run": store.url, "flow_run": flow_run_id, "stages": {}}
        for name, t in _TASKS:
            state = t(url, key_base, return_state=True)
            info = state.result()
            if state.name == "Cached":
                info = {**info, "skipped": True, "cached": True}
            results["stages"][name] = info
        return results
    finally:
        _CONTEXTS.pop(url, None)
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        store.close()


def run_pipeline(config, *, resume: bool = False, quiet: bool = False) -> dict:
    """Run the flow from Python (the CLI's entry)."""
    return pipeline(config, resume=resume, quiet=quiet)
