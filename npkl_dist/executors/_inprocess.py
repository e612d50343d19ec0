"""In-process executor: numba kernels on one machine, threads across the units of a step.
The primitives are the solvers' own in-process execution (``solvers/*/_local.py``); this
class gathers them behind the executor interface."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

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

    def map_row_blocks(self, fn, blocks):
        """``[fn(start, stop) for (start, stop) in blocks]`` on the executor's threads, in
        order (see :class:`~npkl_dist.executors.base.Executor`)."""
        blocks = [(int(a), int(b)) for a, b in blocks]
        if self.n_threads == 1 or len(blocks) < 2:
            return [fn(a, b) for a, b in blocks]
        with ThreadPoolExecutor(max_workers=min(self.n_threads, len(blocks))) as pool:
            return list(pool.map(lambda ab: fn(*ab), blocks))
