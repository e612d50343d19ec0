"""Small in-process BCD fits run on one thread (``InProcessExecutor.fit_threads``): the same
fit, without waiting on a preempted second thread at every parallel call."""

import numba
import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")

import npkl_dist as nk
from npkl_dist.executors import InProcessExecutor
from npkl_dist.executors._inprocess import FIT_PARALLEL_MIN_N


def _problem(n, loss, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] > 0).astype(np.int64)
    g = nk.knn_graph(X, 5, warn=False)
    return nk.NPKLProblem.build(
        g.laplacian(1e-3), nk.sample_constraints(y, seed=seed), loss=loss, seed=seed
    )


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two numba threads")
@pytest.mark.parametrize(
    "n, loss, method",
    [(60, "hinge", "block"), (300, "square", "block"), (300, "squared_hinge", "sweeps")],
)
def test_a_small_fit_runs_on_one_thread_and_fits_the_same(n, loss, method):
    assert n < FIT_PARALLEL_MIN_N
    p = _problem(n, loss)
    seen = []
    numba.set_num_threads(2)
    got = nk.fit_bcd(
        p,
        max_sweeps=40,
        method=method,
        executor=InProcessExecutor(2),
        callback=lambda *a: seen.append(numba.get_num_threads()),
    )
    assert seen and set(seen) == {1}
    assert numba.get_num_threads() == 2  # restored after the fit
    ref = nk.fit_bcd(p, max_sweeps=40, method=method, executor=InProcessExecutor(1))
    np.testing.assert_array_equal(got.V, ref.V)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two numba threads")
def test_fit_threads_scope():
    ex = InProcessExecutor(2)
    numba.set_num_threads(2)
    with ex.fit_threads(FIT_PARALLEL_MIN_N - 1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == 2
    for n in (FIT_PARALLEL_MIN_N, None):  # large, or unknown: left to the kernels
        with ex.fit_threads(n):
            assert numba.get_num_threads() == 2
    with pytest.raises(RuntimeError):  # restored on an error too
        with ex.fit_threads(10):
            raise RuntimeError
    assert numba.get_num_threads() == 2
