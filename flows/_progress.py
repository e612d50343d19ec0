"""Progress bars on stderr: one updating line, only on a terminal and never with --quiet."""

from __future__ import annotations

import sys
import time

__all__ = ["Bar", "progress_enabled"]


def progress_enabled(quiet: bool = False, stream=None) -> bool:
    stream = stream or sys.stderr
    return not quiet and hasattr(stream, "isatty") and stream.isatty()


class Bar:
    """``Bar("graph", total)``; ``update(done, note="")``; ``close()``.

    Redraws at most 10 times a second; the line shows done/total, a bar, the rate-based
    time left and a note (e.g. the objective).
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

    def update(self, done: int, note: str = "", *, force: bool = False):
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < 0.1 and not (self.total and done >= self.total):
            return
        self._last = now
        elapsed = now - self.t0
        if self.total:
            frac = min(1.0, done / self.total)
            fill = int(round(frac * self.width))
            bar = "#" * fill + "-" * (self.width - fill)
            left = elapsed / done * (self.total - done) if done else float("nan")
            eta = f" {left:5.0f}s left" if done and done < self.total else ""
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

    def sweep_callback(self):
        """A ``callback(sweep, objective, change, seconds)`` for the solvers."""

        def cb(sweep, obj, change, seconds):
            self.update(sweep, f"objective {obj:.6g}  change {change:.1e}")

        return cb
