"""Checkpointing and recovery around a solver, independent of the executor and the store.

A *checkpointer* saves the solver state every ``every`` sweeps and loads the newest one:

* :class:`MemoryCheckpointer` keeps it in the driver's memory (no store);
* ``npkl_dist.store.StoreCheckpointer`` writes it to a run store (survives the driver).

:func:`fit_with_recovery` runs a fit and, when the executor reports a lost worker, resumes
from the newest checkpoint. Sweeps are deterministic, so the result is bitwise the one an
uninterrupted run gives.
"""

from __future__ import annotations

import copy
import json
import sys

import numpy as np

from .._errors import NpklError

__all__ = ["MemoryCheckpointer", "fit_with_recovery"]


class MemoryCheckpointer:
    """Keeps the newest state and factor in memory (JSON-round-tripped, copied)."""

    def __init__(self, every: int = 1):
        self.every = int(every)
        self._latest = None
        self.n_saved = 0

    def on_sweep(self, state, session):
        if state["sweep"] % self.every == 0 or state.get("converged"):
            W = (
                session.checkpoint_array()
                if hasattr(session, "checkpoint_array")
                else session.gather()
            )
            W = np.hstack(W) if isinstance(W, tuple) else W
            self._latest = (json.loads(json.dumps(state)), np.array(W, copy=True))
            self.n_saved += 1

    def load(self):
        return None if self._latest is None else copy.deepcopy(self._latest)


def fit_with_recovery(fit, problem, *, checkpointer, max_restarts: int = 3, log=None, **kwargs):
    """``fit(problem, resume=..., on_sweep=..., **kwargs)`` with restarts on lost workers.

    Parameters
    ----------
    fit : callable
        :func:`~npkl_dist.fit_bcd` or :func:`~npkl_dist.fit_admm`.
    checkpointer : object with ``on_sweep(state, session)`` and ``load()``
    max_restarts : int
        Give up after this many lost workers.
    kwargs
        Passed to ``fit`` (executor, max_sweeps/max_iter, tol, plan, callback, ...).
    """
    restarts = 0
    resume = kwargs.pop("resume", None) or checkpointer.load()
    while True:
        try:
            return fit(problem, resume=resume, on_sweep=checkpointer.on_sweep, **kwargs)
        except NpklError as exc:
            if type(exc).__name__ != "WorkerLostError" or restarts >= max_restarts:
                raise
            restarts += 1
            resume = checkpointer.load()
            where = f"sweep {resume[0]['sweep']}" if resume else "the start"
            (log or (lambda m: print(m, file=sys.stderr)))(
                f"npkl: a worker was lost ({exc}); resuming from {where} "
                f"(restart {restarts}/{max_restarts})"
            )
