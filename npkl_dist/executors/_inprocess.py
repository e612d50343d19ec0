"""In-process executor: numba kernels on one machine, threads across the units of a step.
The primitives are the solvers' own in-process execution (``solvers/*/_local.py``); this
class gathers them behind the executor interface."""

from __future__ import annotations

from ..solvers.admm._local import ADMM_PARALLEL_MIN_N, LocalADMM
from ..solvers.bcd._local import FIT_PARALLEL_MIN_N, LocalBCD

__all__ = ["InProcessExecutor", "ADMM_PARALLEL_MIN_N", "FIT_PARALLEL_MIN_N"]


class InProcessExecutor(LocalADMM):
    """Runs every solver's primitives on this machine with numba threads.

    Parameters
    ----------
    n_threads : int, optional
        Threads per sweep step; default all of numba's threads. Set explicitly per call,
        never as an import side effect.
    """

    #: a BCD set-up made without an executor (on LocalBCD) serves fits on this one, and back
    setup_kind = LocalBCD
