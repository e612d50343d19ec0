"""The Prefect flow ``npkl-pipeline``: ingest → graph → plan → learn → transform → evaluate →
extend → report (``transform``: the inductive kernel's z of every row, in chunks).

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
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.context import get_run_context

from npkl_dist import store as st
from npkl_flows import _stages  # absolute: Prefect may load this file by path
from npkl_flows._artifacts import LearnProgress, artifact_key, result_markdown, run_label
from npkl_flows._config import expand_run, load_config, validate_config
from npkl_flows._runstart import check_new_run, open_run

__all__ = ["pipeline", "run_pipeline", "open_run", "check_new_run"]

# the orchestrating process's open stores and per-run caches, by run URL (tasks get URLs)
_CONTEXTS: dict[str, _stages.Context] = {}
# stores `npkl run` created (and holds the lock of) before Prefect started, by run URL
_PREOPENED: dict[str, st.RunStore] = {}


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
transform_task = _stage_task("transform", _stages.transform)
evaluate_task = _stage_task("evaluate", _stages.evaluate)
extend_task = _stage_task("extend", _stages.extend)
report_task = _stage_task("report", _stages.report)
_TASKS = (
    ("ingest", ingest_task),
    ("graph", graph_task),
    ("plan", plan_task),
    ("learn", learn_task),
    ("transform", transform_task),
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


def _config_of(config, run=None) -> dict:
    if isinstance(config, str):
        cfg = load_config(config)
    else:
        cfg = (
            validate_config(config)
            if "input" not in config or not isinstance(config.get("execution"), dict)
            else config
        )
    return cfg if run is None else validate_config({**cfg, "run": run})


def _expand(run: str, flow_run) -> str:
    """A run name's ``{date}`` / ``{flow_run}``, the same every time within one flow run:
    the flow run's expected start time and the start of its id."""
    return expand_run(run, str(flow_run.id)[:8], when=flow_run.expected_start_time)


def _flow_run_name() -> str:
    """Each flow run is named after the run id it writes (the last part of a path or URL)."""
    try:
        ctx = get_run_context()
        cfg = _config_of(ctx.parameters["config"], ctx.parameters.get("run"))
        run = cfg["run"]
        if "{" in run and not ctx.parameters.get("resume"):
            run = _expand(run, ctx.flow_run)
        return run_label(run)
    except Exception:  # a bad config fails in the flow with its own message, not here
        from prefect.utilities.names import generate_slug

        return generate_slug(2)


class _Publisher:
    """The run's Prefect artifacts: a progress bar during learning, the markdown summary at
    the end (or what is known when a stage fails). Best effort: the API being unreachable
    must not stop a run whose truth is the store."""

    def __init__(self, run: str, log):
        self.run, self.log = run, log
        self.progress_id = None

    def progress(self, percent: float, description: str) -> None:
        try:
            if self.progress_id is None:
                self.progress_id = create_progress_artifact(
                    percent, key=artifact_key(self.run, "learn"), description=description
                )
            else:
                update_progress_artifact(self.progress_id, percent, description=description)
        except Exception as exc:
            self.log(f"could not publish learning progress to Prefect: {exc}")

    def summary(self, results: dict, error: str | None = None) -> None:
        try:
            create_markdown_artifact(
                result_markdown(results, error=error),
                key=artifact_key(self.run),
                description=f"npkl run {run_label(self.run)}: results, timings, where they are",
            )
        except Exception as exc:
            self.log(f"could not publish the run summary to Prefect: {exc}")


# log_prints must stay off: it patches builtins.print, which numba then cannot compile
@flow(name="npkl-pipeline", persist_result=False, log_prints=False, flow_run_name=_flow_run_name)
def pipeline(
    config: dict | str, resume: bool = False, quiet: bool = True, run: str | None = None
) -> dict:
    """Run (or resume) a whole npkl pipeline.

    The flow run is named after the run id; it publishes a progress artifact during
    learning and a markdown artifact (metrics, objective, iterations, time per stage, the
    run store's URL, the report's directory) at the end, keyed ``npkl-<run id>``.

    Parameters
    ----------
    config : dict or str
        A validated configuration dict, or the path of a TOML file (:mod:`npkl_flows._config`).
    resume : bool
        Continue an existing run (its stored configuration wins); otherwise create it.
    quiet : bool
        No progress bars (deployments run without a terminal).
    run : str, optional
        The run id, path or URL instead of the configuration's ``run`` (``npkl run --run``);
        ``{date}`` gives each flow run a new one.

    Returns
    -------
    dict
        Per-stage info (seconds, peak memory, skipped or not) and the run URL.
    """

    logger = get_run_logger()
    cfg = _config_of(config, run)
    flow_run = get_run_context().flow_run
    if not resume and "{" in cfg["run"]:
        cfg = {**cfg, "run": _expand(cfg["run"], flow_run)}
    pre = None
    if not resume:
        pre = _PREOPENED.pop(st.resolve_run(cfg["run"], root=cfg["storage"]["root"]), None)
    store, cfg = (pre, cfg) if pre is not None else open_run(cfg, resume)
    url = store.url
    client = cluster = None
    flow_run_id = str(flow_run.id)
    results = {"run": url, "flow_run": flow_run_id, "stages": {}}
    publish = _Publisher(url, logger.warning)
    name = None
    try:
        runs = (store.stages().get("flow", {}).get("info", {}) or {}).get("flow_runs", [])
        if flow_run_id not in runs:
            runs = [*runs, flow_run_id]
        store.mark_stage("flow", {"flow_runs": runs, "pid": os.getpid(), "state": "running"})
        crashed = _mark_crashed(store, flow_run_id, logger.warning)
        if crashed:
            logger.warning(f"marked {len(crashed)} earlier flow run(s) of this run crashed")
        logger.info(f"run store {url}")
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
            logger.info(f"Dask dashboard {client.dashboard_link}")
        ctx = _stages.Context(
            store, run_cfg, quiet=quiet, client=client, log=logger.warning
        )  # to stderr and to the Prefect API
        m = cfg["model"]
        iteration = "sweep" if m["solver"] == "bcd" and m["method"] == "sweeps" else "iteration"
        ctx.sweep_hooks.append(LearnProgress(publish.progress, m["max_sweeps"], iteration))
        _CONTEXTS[url] = ctx
        created = store._attrs.get("created", "")
        # the run's identity: its store URL and creation stamp; the configuration without
        # where the run is (a resume may name it differently); the code
        same = {k: v for k, v in cfg.items() if k not in ("run", "storage")}
        redone = len(store._attrs.get("redo", []))  # `npkl resume --redo` forgot stages
        key_base = (
            f"{store.url}|{created}|{redone}|{_stages.config_hash(same)}|{_stages.code_version()}"
        )
        for name, t in _TASKS:
            state = t(url, key_base, return_state=True)
            info = state.result()
            if state.name == "Cached":
                info = {**info, "skipped": True, "cached": True}
            results["stages"][name] = info
            logger.info(_stage_line(name, info))
            if name == "learn":
                publish.progress(100.0, f"learning finished: {_learn_line(info)}")
        publish.summary(results)
        return results
    except BaseException as exc:
        results["failed_stage"] = name or "start"
        publish.summary(results, error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}"[:500])
        raise
    finally:
        _CONTEXTS.pop(url, None)
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        store.close()


def _learn_line(info: dict) -> str:
    from npkl_dist.job._job import iterations_label

    return f"objective {info.get('objective', float('nan')):.6g} after {iterations_label(info)}"


def _stage_line(name: str, info: dict) -> str:
    """One log line per stage: what Prefect's log view shows instead of 'Completed()'."""
    if info.get("skipped"):
        return f"{name}: " + ("cached by Prefect" if info.get("cached") else "done before")
    line = f"{name}: {info.get('seconds', 0):.1f} s, peak {info.get('peak_rss_mb', 0):.0f} MB"
    if name == "learn":
        line += f"; {_learn_line(info)}"
    elif name == "evaluate" and info.get("metrics"):
        mt = info["metrics"]
        line += (
            f"; pairwise accuracy {mt['rand_accuracy']:.4f}, ARI {mt['ari']:.4f}, "
            f"NMI {mt['nmi']:.4f}"
        )
    elif name == "report" and info.get("dir"):
        line += f"; report in {info['dir']}"
    return line


def run_pipeline(config, *, resume: bool = False, quiet: bool = False, store=None) -> dict:
    """Run the flow from Python (the CLI's entry).

    ``store``: the run's store, already created by the caller (``npkl run`` creates it before
    Prefect starts, so ``npkl status`` finds the run at once); the flow takes it over.
    """
    if store is not None:
        _PREOPENED[store.url] = store
    try:
        return pipeline(config, resume=resume, quiet=quiet)
    finally:
        if store is not None and _PREOPENED.pop(store.url, None) is not None:
            store.close()  # the flow never started
