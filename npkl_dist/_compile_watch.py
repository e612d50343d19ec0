"""How long a run spends compiling numba kernels, and a notice when it starts.

A kernel compiles on its first call with a new signature unless numba's disk cache holds it
(:mod:`npkl_dist._numba_cache`); each such compile is one ``"numba:compile"`` event of
numba's documented event API (a kernel loaded from the cache raises none). A kernel that
calls another compiles the callee inside its own event, so only the outermost events are
timed: their sum is the wall time the run spent compiling rather than computing. With a
warm cache it is zero and the notice never appears.

Numba compiles under its global compiler lock, so the events arrive one compile at a time
even when several threads call kernels.
"""

from __future__ import annotations

import time

from numba.core import event

__all__ = ["CompileWatch", "COMPILE_NOTICE"]

#: What a command prints when the first kernel starts compiling.
COMPILE_NOTICE = "compiling numba kernels (first run only; cached after)..."


class CompileWatch(event.Listener):
    """``with CompileWatch(notice) as watch: ...``; then ``watch.seconds`` (wall time in
    outermost numba compiles) and ``watch.count`` (kernels compiled rather than loaded from
    the cache). ``notice()`` is called once, when the first compile starts (None: no call).
    ``watch.seconds`` is current while the block runs, too (the compiles finished so far).
    ``watch.kernels``: (dispatcher, argument types) of each outermost compile, in order."""

    def __init__(self, notice=None):
        self.notice = notice
        self.seconds = 0.0
        self.count = 0
        self.kernels: list = []
        self._depth = 0
        self._t0 = 0.0

    def on_start(self, ev):
        if self._depth == 0:
            self._t0 = time.perf_counter()
            args = ev.data["args"]
            self.kernels.append((ev.data["dispatcher"], tuple(getattr(args, "args", args))))
            if self.count == 0 and self.notice is not None:
                self.notice()
        self._depth += 1

    def on_end(self, ev):
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._t0
            self.count += 1

    def __enter__(self):
        event.register("numba:compile", self)
        return self

    def __exit__(self, *exc):
        event.unregister("numba:compile", self)
        return False
