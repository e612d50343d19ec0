"""The executor protocol (npkl_dist.executors.base): one conformance class run against every
executor, in-process (one and two threads) and Dask (a process-based LocalCluster, so
functions really travel by pickle), as the store's tests run against each backend."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from npkl_dist.executors import Executor, InProcessExecutor, row_blocks
from npkl_dist.linalg._rowops import SUM_BLOCK

distributed = pytest.importorskip("distributed")
from npkl_dist.executors import DaskExecutor  # noqa: E402


def _row_sums(X, start, stop):
    """A row block's per-row sums: depends on its range only (module level: picklable)."""
    return X[start:stop].sum(axis=1)


def _fails_on(bad_start, start, stop):
    if start == bad_start:
        raise ZeroDivisionError(f"block {start}:{stop}")
    return start


@pytest.fixture(scope="module", params=["inprocess-1", "inprocess-2", "dask"])
def executor(request):
    if request.param.startswith("inprocess"):
        yield InProcessExecutor(int(request.param[-1]))
        return
    ex = DaskExecutor(workers=2, threads=1)
    try:
        yield ex
    finally:
        ex.close()


def test_row_blocks_cover_the_rows_in_order():
    assert row_blocks(0, 5) == []
    assert row_blocks(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert row_blocks(8, 4) == [(0, 4), (4, 8)]
    assert row_blocks(3, SUM_BLOCK) == [(0, 3)]
    for bad in ((-1, 4), (10, 0), (True, 4), (10, 2.5)):
        with pytest.raises(ValueError):
            row_blocks(*bad)


class TestConformance:
    def test_is_an_executor(self, executor):
        assert isinstance(executor, Executor)
        assert executor.name in ("inprocess", "dask") and isinstance(executor.supports_block, bool)

    def test_results_in_block_order_equal_the_serial_loop(self, executor):
        X = np.random.default_rng(0).standard_normal((1000, 7))
        blocks = row_blocks(1000, 96)
        fn = functools.partial(_row_sums, X)
        got = executor.map_row_blocks(fn, blocks)
        want = [fn(a, b) for a, b in blocks]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)  # bitwise: the same arithmetic per range

    def test_result_does_not_depend_on_the_block_size(self, executor):
        X = np.random.default_rng(1).standard_normal((517, 5))
        fn = functools.partial(_row_sums, X)
        parts = [
            np.concatenate(executor.map_row_blocks(fn, row_blocks(517, size)))
            for size in (1, 64, 517, 1000)
        ]
        for p in parts[1:]:
            np.testing.assert_array_equal(p, parts[0])

    def test_no_blocks_no_calls(self, executor):
        assert executor.map_row_blocks(functools.partial(_fails_on, 0), []) == []

    def test_an_error_in_a_block_is_raised_as_is(self, executor):
        with pytest.raises(ZeroDivisionError, match="block 4:8"):
            executor.map_row_blocks(functools.partial(_fails_on, 4), row_blocks(12, 4))

    def test_sessions_of_the_iterative_solvers_are_offered(self, executor):
        for name in ("bcd_session", "block_session", "admm_session"):
            assert callable(getattr(executor, name))
