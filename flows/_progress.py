"""Progress bars on stderr: one updating line, only on a terminal and never with --quiet.

Time left is shown only once it can be estimated honestly (docs/cli.md, "Progress"): the
first step of a bar is left out of every rate, since it carries the numba compiles of a cold
cache (tens of seconds for one step of milliseconds once compiled), and an estimate needs two
steps after it. A fit's bar estimates the sweeps left from how fast the relative change of V
falls toward ``tol`` (:func:`sweeps_left`); a fit whose change does not fall yet gets the bound
from ``max_sweeps``, shown as ``<=``.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

__all__ = ["Bar", "progress_enabled", "sweeps_left", "time_left"]

#: Sweeps (after the first) whose changes the decay rate is fitted to: the recent ones.
DECAY_WINDOW = 10
#: Steps after the first needed before any time left is shown.
MIN_STEPS = 2


def progress_enabled(quiet: bool = False, stream=None) -> bool:
    stream = stream or sys.stderr
    return not quiet and hasattr(stream, "isatty") and stream.isatty()


def sweeps_left(changes, tol, max_left):
    """Sweeps until the relative change falls below ``tol``, from its geometric decay.

    ``changes``: the relative change of each sweep so far, the first sweep's left out by the
    caller or not (it is not fitted: only the last ``DECAY_WINDOW`` after the first). Fits
    log(change) = a + b k by least squares over them; with b < 0 the change reaches ``tol``
    after (log tol - log change_now) / b more sweeps (at least 1, at most ``max_left``).
    Returns ``(sweeps, exact)``: ``exact`` False when the sweeps are only the bound
    ``max_left`` (fewer than 3 positive changes after the first, no tol, or no decay)."""
    max_left = max(int(max_left), 0)
    c = np.asarray(changes, dtype=float)[1:][-DECAY_WINDOW:]
    if not tol or tol <= 0 or c.size < 3 or not np.all(np.isfinite(c)) or np.any(c <= 0):
        return max_left, False
    b, a = np.polyfit(np.arange(c.size, dtype=float), np.log(c), 1)
    if not b < 0:
        return max_left, False
    now = a + b * (c.size - 1)  # the fitted line's value now: less noisy than the last change
    k = math.ceil((math.log(tol) - now) / b)
    return min(max(k, 1), max_left), k <= max_left


def time_left(seconds, steps_left):
    """Seconds for ``steps_left`` more steps at the mean time of the steps so far after the
    first (``seconds``: the time of each step, first included); None with fewer than
    ``MIN_STEPS`` steps after the first."""
    s = np.asarray(seconds, dtype=float)[1:]
    if s.size < MIN_STEPS:
        return None
    return float(s.mean()) * steps_left


class Bar:
    """``Bar("graph", total)``; ``update(done, note="")``; ``close()``.

    Redraws at most 10 times a second; the line shows done/total, a bar, the time left
    (see the module docstring) and a note (e.g. the objective).
    """

    def __init__(
        self, label: str, total: int | None, *, enabled: bool = True, stream=None, width: int = 24
    ):
        self.label, self.total, self.enabled = label, total, enabled
        self.stream = stream or sys.stderr
        self.width = width
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._drawn = False
        self._marks: list[tuple[int, float]] = []  # (done, time) at each distinct update

    def _rate_left(self, done, now):
        """Time left at the rate since the first update (the first step is left out)."""
        if not self._marks or self._marks[-1][0] != done:
            self._marks.append((done, now))
        d0, t0 = self._marks[0]
        if done - d0 < MIN_STEPS or not self.total or done >= self.total:
            return None
        return (now - t0) / (done - d0) * (self.total - done), True

    def update(self, done: int, note: str = "", *, force: bool = False, left=None):
        """``left``: ``(seconds, exact)`` from the caller (a fit's bar), else the rate."""
        if not self.enabled:
            return
        now = time.perf_counter()
        rate = self._rate_left(done, now)
        if not force and now - self._last < 0.1 and not (self.total and done >= self.total):
            return
        self._last = now
        elapsed = now - self.t0
        left = rate if left is None else left
        if self.total:
            frac = min(1.0, done / self.total)
            fill = int(round(frac * self.width))
            bar = "#" * fill + "-" * (self.width - fill)
            eta = ""
            if left is not None and left[0] is not None and done < self.total:
                eta = f" {'~' if left[1] else '<='}{left[0]:.0f}s left"
            text = f"{self.label:<6} [{bar}] {done}/{self.total}{eta}"
        else:
            text = f"{self.label:<6} {done}"
        text += f"  {elapsed:6.1f}s"
        if note:
            text += f"  {note}"
        self.stream.write("\r" + text[:150].ljust(80))
        self.stream.flush()
        self._drawn = True

    def close(self):
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def sweep_callback(self, tol=None):
        """A ``callback(sweep, objective, change, seconds)`` for the solvers; the time left
        is the sweeps left (:func:`sweeps_left` from the changes and ``tol``) at the mean
        time of the sweeps after the first (:func:`time_left`)."""
        changes: list[float] = []
        seconds: list[float] = []

        def cb(sweep, obj, change, secs):
            changes.append(float(change))
            seconds.append(float(secs))
            left = None
            if self.total:
                k, exact = sweeps_left(changes, tol, self.total - sweep)
                left = (time_left(seconds, k), exact)
            self.update(sweep, f"objective {obj:.6g}  change {change:.1e}", left=left)

        return cb
