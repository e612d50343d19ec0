"""The progress bars' time left: no estimate before it can be honest, and the estimate of a
fit's sweeps left from the decay of its relative change (flows/_progress.py)."""

from __future__ import annotations

import io
import math

import pytest

from npkl_flows._progress import Bar, sweeps_left, time_left


class Tty(io.StringIO):
    def isatty(self):
        return True


def _geometric(n, decades_per_sweep=0.1, first=1.0):
    return [first * 10 ** (-decades_per_sweep * k) for k in range(n)]


def test_sweeps_left_on_an_exact_geometric_decay():
    changes = _geometric(20)  # change 10^-k/10 at sweep k + 1; now 10^-1.9
    tol = 10**-5.05
    k, exact = sweeps_left(changes, tol, 1000)
    assert exact
    assert k == 32  # 10^-1.9 falls below 10^-5.05 after 31.5 more sweeps
    assert changes[-1] * 10 ** (-0.1 * k) < tol <= changes[-1] * 10 ** (-0.1 * (k - 1))


def test_sweeps_left_ignores_the_first_sweep():
    base = _geometric(12)
    outlier = [1e6] + base[1:]
    assert sweeps_left(base, 1e-6, 500) == sweeps_left(outlier, 1e-6, 500)


def test_sweeps_left_is_only_the_bound_without_a_decay():
    assert sweeps_left([0.5, 0.1, 0.1, 0.1, 0.1], 1e-5, 80) == (80, False)  # flat
    assert sweeps_left([0.5, 0.1, 0.2, 0.4], 1e-5, 80) == (80, False)  # growing
    assert sweeps_left([0.5, 0.1, 0.01], 1e-5, 80) == (80, False)  # 2 after the first
    assert sweeps_left(_geometric(10), None, 80) == (80, False)  # no tol
    assert sweeps_left(_geometric(10), 1e-5, 0) == (0, False)


def test_sweeps_left_capped_by_max_sweeps():
    k, exact = sweeps_left(_geometric(10, decades_per_sweep=0.01), 1e-8, 40)
    assert (k, exact) == (40, False)


def test_sweeps_left_at_least_one():
    k, exact = sweeps_left(_geometric(10), 0.5, 100)  # already below tol
    assert (k, exact) == (1, True)


def test_time_left_leaves_out_the_first_step():
    assert time_left([40.0], 10) is None
    assert time_left([40.0, 0.1], 10) is None
    assert time_left([40.0, 0.1, 0.3], 10) == pytest.approx(2.0)


def test_fit_bar_shows_no_time_left_until_it_can_estimate_one():
    out = Tty()
    bar = Bar("learn", 1000, stream=out)
    cb = bar.sweep_callback(tol=10**-5.05)
    lines = []
    for s, (change, secs) in enumerate(zip(_geometric(20), [30.0] + [0.01] * 19), start=1):
        cb(s, 1.0, change, secs)
        bar._last = 0.0  # draw every update
        lines.append(out.getvalue().rsplit("\r", 1)[-1])
    # sweep 1 carries the compiles: no rate from it; then two more sweeps are needed
    assert all("left" not in line for line in lines[:2])
    assert "<=" in lines[2]  # sweep 3: a rate, but no decay fitted yet (2 changes after the first)
    # from sweep 4 on: the sweeps left from the decay, at 0.01 s each (not 30 s)
    assert "~0s left" in lines[-1]
    k, exact = sweeps_left(_geometric(20), 10**-5.05, 980)
    assert exact and math.isclose(time_left([30.0] + [0.01] * 19, k), 0.32)


def test_count_bar_rate_excludes_the_first_update():
    out = Tty()
    bar = Bar("graph", 10, stream=out)
    for done in (1, 2):
        bar.update(done, force=True)
        assert "left" not in out.getvalue().rsplit("\r", 1)[-1]
    bar.update(3, force=True)
    assert "s left" in out.getvalue().rsplit("\r", 1)[-1]
