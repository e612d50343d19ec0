"""What every pipeline stage module shares (``_stages``, ``_stages_inductive``): the run's
Context, the measured record of a stage, the row-block task runner. No stage here."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

import numpy as np

from npkl_dist._compile_watch import COMPILE_NOTICE

from ._config import with_defaults
from ._progress import Bar, progress_enabled

#: the transform stage's scratch group of an inductive run (flows/_stages_inductive.py)
Z_GROUP = "inductive_z"


def inductive(cfg: dict) -> bool:
    """The run learns the inductive kernel (no graph, no plan; a transform stage)."""
    return cfg["model"]["solver"] == "inductive"


@contextmanager
def measure(out: dict, interval: float = 0.05):
    """Wall seconds and peak resident memory (sampled) of the enclosed block, into ``out``."""
    try:
        import psutil  # optional (the prefect extra): memory figures only

        proc = psutil.Process()
    except ImportError:  # pragma: no cover
        proc = None
    peak = [proc.memory_info().rss if proc else 0]
    stop = threading.Event()

    def sample():
        while not stop.wait(interval):
            peak[0] = max(peak[0], proc.memory_info().rss)

    th = threading.Thread(target=sample, daemon=True) if proc else None
    if th:
        th.start()
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - t0
        stop.set()
        if th:
            th.join()
            peak[0] = max(peak[0], proc.memory_info().rss)
        out["peak_rss_mb"] = round(peak[0] / 2**20, 1)


class Context:
    """What the stages of one run share inside the orchestrating process.

    Attributes
    ----------
    store : RunStore (writer)
    cfg : dict
        The validated pipeline configuration (:mod:`npkl_flows._config`).
    quiet : bool
        No progress bars.
    client : distributed.Client or None
        For kNN row blocks on an existing Dask cluster.
    cache : dict
        In-process objects reused between stages (the kNN index, the problem).
    throwaway : bool
        The store is deleted after the run (``npkl fit`` without ``--run``): learning is not
        checkpointed (nothing could resume from it) and the summary names no run.
    """

    def __init__(
        self,
        store,
        cfg: dict,
        *,
        quiet: bool = False,
        client=None,
        log=None,
        throwaway: bool = False,
    ):
        self.store, self.cfg, self.quiet, self.client = store, with_defaults(cfg), quiet, client
        self.throwaway = throwaway
        self.cache: dict = {}
        self.log = log or (lambda msg: None)
        # more ``callback(sweep, objective, change, seconds)`` during learning (the flow's
        # progress artifact); the progress bar is always called
        self.sweep_hooks: list = []

    def bar(self, label, total):
        return Bar(label, total, enabled=progress_enabled(self.quiet))

    def done(self, name: str) -> dict | None:
        entry = self.store.stages().get(name)
        return entry.get("info", {}) if entry and entry.get("done") else None


def _compile_notice(bar):
    """Printed when the first numba kernel of a fit starts compiling (a cold cache), on a line
    of its own (ending ``bar``'s line if it was drawn; its next update draws it again)."""
    bar.close()
    sys.stderr.write(f"{COMPILE_NOTICE}\n")
    sys.stderr.flush()


def _finite(value):
    """JSON-safe (the store's records are strict JSON): non-finite floats become None
    (e.g. the KKT residual, NaN for solvers that do not compute it)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return None
    return value


def _finish(ctx: Context, name: str, info: dict) -> dict:
    info = _finite(info)
    ctx.store.mark_stage(name, info)
    return {"stage": name, **info, "skipped": False}


def _skip(name, info):
    return {"stage": name, **info, "skipped": True}


def _run_blocks(ctx: Context, index, spans, bar, task):
    """Row blocks as Dask tasks when the stage has a Dask client, else in a loop here: each
    ``task(payload, store, start, stop)`` writes its block into the run store (the graph
    stage's kNN blocks, with the index as the payload; the transform stage's z, with the model).

    The index is built once (here) and shipped once to every worker (``scatter``,
    broadcast): an exact index carries its training rows, a pynndescent one the neighbour
    graph its build produced for every training row (the answer to a training row's query;
    the search structure, which only new points need, stays here). Each task answers the
    queries of one row block and writes that block into the run store itself; the driver
    only collects completion. Same index, same rows -> the same neighbours either way."""
    done = 0
    if ctx.client is not None and spans:
        from distributed import as_completed  # optional engine (the dask extra)

        fut_index = ctx.client.scatter(index, broadcast=True, hash=False)
        futs = [ctx.client.submit(task, fut_index, ctx.store, s, e, pure=False) for s, e in spans]
        try:
            for _ in as_completed(futs):
                done += 1
                bar.update(done)
            ctx.client.gather(futs)  # re-raises a task's error
        finally:
            ctx.client.cancel([*futs, fut_index])
        return
    for s, e in spans:
        task(index, ctx.store, s, e)
        done += 1
        bar.update(done)
