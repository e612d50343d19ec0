"""CompileWatch: the notice before the first compile and the time in outermost compiles."""

from __future__ import annotations

import numpy as np
from numba import njit

from npkl_dist._compile_watch import CompileWatch


def test_watch_counts_outermost_compiles_and_notices_once():
    @njit
    def inner(x):
        return x * 2.0

    @njit
    def outer(x):
        return inner(x) + 1.0

    notices = []
    with CompileWatch(lambda: notices.append(1)) as watch:
        assert outer(1.0) == 3.0  # compiles outer, and inner inside it
        assert watch.count == 1 and watch.seconds > 0.0
        first = watch.seconds
        outer(2.0)  # compiled already: no event
        assert watch.count == 1 and watch.seconds == first
        outer(np.float32(1.0))  # a new signature compiles again
    assert watch.count == 2 and notices == [1]
    outer(np.int64(1))  # outside the block: not counted
    assert watch.count == 2


def test_watch_without_compiles():
    @njit
    def f(x):
        return x + 1

    f(1)
    with CompileWatch(lambda: (_ for _ in ()).throw(AssertionError("noticed"))) as watch:
        f(2)
    assert watch.count == 0 and watch.seconds == 0.0
