"""The Dask executor equals the in-process oracle bitwise; a killed worker changes nothing."""

import os
import signal
import time

import distributed  # noqa: E402 - a test dependency: missing means a broken install, not a skip
import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist.executors import InProcessExecutor
from npkl_dist.executors._dask import (  # noqa: E402
    DaskExecutor,
    build_blocks,
    partition_plan,
    partition_rows,
)
from npkl_dist.job._recovery import MemoryCheckpointer, fit_with_recovery

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")


def make_problem(seed, loss="square", diagonal=False, n=3000, rank=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] > 0).astype(np.int64) + 2 * (X[:, 1] > 0)
    g = nk.knn_graph(X, 6, warn=False)
    c = nk.sample_constraints(y, seed=seed, diagonal=diagonal)
    return nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss, rank=rank, seed=seed)


@pytest.fixture(scope="module")
def clusters():
    """A thread-based LocalCluster with w workers (fast to start); one alive at a time."""
    current = {}

    def get(w):
        if current.get("w") != w:
            close()
            current["client"] = distributed.Client(
                distributed.LocalCluster(
                    n_workers=w, threads_per_worker=1, processes=False, dashboard_address=":0"
                )
            )
            current["w"] = w
        return current["client"]

    def close():
        client = current.pop("client", None)
        current.pop("w", None)
        if client is not None:
            cluster = client.cluster
            client.close()
            cluster.close()

    yield get
    close()


def test_partition_is_aligned_and_covers():
    starts = partition_rows(10_000, 4, align=1024)
    assert starts[0] == 0 and starts[-1] == 10_000
    assert all(s % 1024 == 0 for s in starts[:-1])
    assert np.all(np.diff(starts) > 0)
    assert len(partition_rows(500, 8, align=1024)) == 2  # never more blocks than chunks


def test_block_specs_route_every_halo_row():
    p = make_problem(0)
    plan = nk.make_plan(p)
    prep = nk.prepare(p, plan)
    specs = build_blocks(prep, plan, partition_rows(p.n_points, 3))
    for spec in specs:
        need = set(spec.halo.tolist())
        got = set()
        for c in range(plan.n_colours):
            for _src, pos in spec.recv[c]:
                got |= set(spec.halo[pos - spec.n_own].tolist())
                assert np.all(plan.colour[spec.halo[pos - spec.n_own]] == c)
        assert got == need


def test_partition_plan_cuts_at_aligned_plan_blocks():
    p = make_problem(0, n=5000)
    plan = nk.make_plan(p, n_blocks=4)
    assert plan.n_blocks == 4 and np.all(plan.block_ptr[1:-1] % 1024 == 0)
    for k in (1, 2, 3, 4, 9):
        starts = partition_plan(plan, k)
        assert starts[0] == 0 and starts[-1] == 5000 and len(starts) - 1 == min(k, 4)
        assert set(starts.tolist()) <= set(plan.block_ptr.tolist())
    # a plan cut at another alignment: only its aligned boundaries are used
    odd = nk.make_plan(p, n_blocks=5, align=1)
    starts = partition_plan(odd, 5)
    assert all(s % 1024 == 0 for s in starts[:-1])
    assert set(starts.tolist()) <= set(odd.block_ptr.tolist())


def test_hinge_joint_moves_equal_inprocess_bitwise(clusters, global_random_seed):
    """Hinge fits take joint moves (npkl_dist.solvers.bcd._joint) on the driver and write them back to
    every block, own rows and halo: the fit stays bitwise equal to in-process."""
    p = make_problem(global_random_seed, "hinge")
    plan = nk.make_plan(p, n_blocks=3)
    ref = nk.fit_bcd(p, max_sweeps=25, tol=0.0, plan=plan, executor=InProcessExecutor(1))
    got = nk.fit_bcd(
        p, max_sweeps=25, tol=0.0, plan=plan, executor=DaskExecutor(clusters(2), blocks=3)
    )
    assert len(ref.joint_moves) >= 2
    assert got.joint_moves == ref.joint_moves
    np.testing.assert_array_equal(got.V, ref.V)
    assert got.objective_trace == ref.objective_trace


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("blocks", [1, 2, 3])
@pytest.mark.parametrize("loss", ["hinge", "square", "linear"])
@pytest.mark.parametrize("scheme", ["blocks", "colours"])
def test_bcd_equals_inprocess_bitwise(clusters, global_random_seed, workers, blocks, loss, scheme):
    """Both sweep schemes; the block plan has 3 blocks (n = 3000, boundaries at 1024 and
    2048), so up to 3 Dask blocks each run whole plan blocks, deferred rows included."""
    p = make_problem(global_random_seed, loss)
    plan = nk.make_plan(p, scheme=scheme, n_blocks=3)
    if scheme == "blocks":
        assert plan.n_blocks == 3 and plan.n_colours > 2
    ref = nk.fit_bcd(p, max_sweeps=4, tol=0.0, plan=plan, executor=InProcessExecutor(1))
    ex = DaskExecutor(clusters(workers), blocks=blocks)
    got = nk.fit_bcd(p, max_sweeps=4, tol=0.0, plan=plan, executor=ex)
    np.testing.assert_array_equal(got.V, ref.V)
    assert got.objective_trace == ref.objective_trace
    assert got.change_trace == ref.change_trace
    assert len(partition_plan(plan, blocks)) - 1 == blocks  # every Dask block was used


@pytest.mark.parametrize("workers, blocks", [(1, 1), (2, 3), (3, 2)])
def test_admm_equals_inprocess_bitwise(clusters, global_random_seed, workers, blocks):
    p = make_problem(global_random_seed, "square", diagonal=True)
    ref = nk.fit_admm(p, max_iter=6, tol=0.0, executor=InProcessExecutor(1))
    got = nk.fit_admm(
        p, max_iter=6, tol=0.0, executor=DaskExecutor(clusters(workers), blocks=blocks)
    )
    np.testing.assert_array_equal(got.V, ref.V)
    assert got.objective_trace == ref.objective_trace and got.rho_trace == ref.rho_trace


@pytest.mark.parametrize("workers, blocks", [(1, 1), (2, 3)])
def test_admm_anderson_equals_inprocess_bitwise(clusters, global_random_seed, workers, blocks):
    """Anderson-accelerated KL-ADMM on Dask blocks (each with its rows' memory, partial dots
    added in block order on the driver) equals the in-process fit bit for bit, with
    extrapolated steps and at least one rejected one (gamma 0.1, as the safeguard needs)."""
    p = make_problem(global_random_seed, "square", diagonal=True)
    p = nk.NPKLProblem.build(
        p.L, p.constraints, loss="square", rank=p.rank, seed=p.seed, gamma=0.1
    )
    kw = {"max_iter": 60, "tol": 0.0, "anderson": 4}
    ref = nk.fit_admm(p, executor=InProcessExecutor(1), **kw)
    got = nk.fit_admm(p, executor=DaskExecutor(clusters(workers), blocks=blocks), **kw)
    assert ref.anderson_steps > 0 and ref.anderson_rejected > 0
    np.testing.assert_array_equal(got.V, ref.V)
    np.testing.assert_array_equal(got.U, ref.U)
    assert got.objective_trace == ref.objective_trace and got.rho_trace == ref.rho_trace
    assert (got.anderson_steps, got.anderson_rejected, got.objective) == (
        ref.anderson_steps,
        ref.anderson_rejected,
        ref.objective,
    )
    # and resumed on Dask from a mid-fit checkpoint (V, U, Lam and every block's memory)
    mem = MemoryCheckpointer(every=25)
    ex = DaskExecutor(clusters(workers), blocks=blocks)
    fit_with_recovery(nk.fit_admm, p, checkpointer=mem, executor=ex, **{**kw, "max_iter": 30})
    state, W = mem.load()
    assert state["sweep"] == 25
    resumed = nk.fit_admm(p, executor=ex, resume=(state, W), **kw)
    np.testing.assert_array_equal(resumed.V, ref.V)
    assert resumed.objective_trace == ref.objective_trace


def test_halo_traffic_is_exactly_the_halo(clusters, global_random_seed):
    """Each sweep moves every halo row exactly once (in its colour's step) and nothing else;
    on a 2-D manifold of 20 000 points a colour step moves < 10% of V (the share falls as
    the blocks grow: boundary over volume)."""
    rng = np.random.default_rng(global_random_seed)
    X = rng.random((20_000, 2))
    y = (X[:, 0] > 0.5).astype(np.int64)
    g = nk.knn_graph(X, 6, warn=False)
    p = nk.NPKLProblem.build(
        g.laplacian(1e-3), nk.sample_constraints(y, 200, 200, seed=1), loss="square", rank=8
    )
    ex = DaskExecutor(clusters(2), blocks=2)
    plan = nk.make_plan(p)
    prep = nk.prepare(p, plan)
    V = np.ascontiguousarray(nk.initial_V(p, np.random.default_rng(0))[plan.order])
    session = ex.bcd_session(prep, plan, V)
    session.sweep(np.arange(plan.n_colours))
    halo_rows = sum(spec.halo.shape[0] for spec in session.specs)
    assert sum(session.halo_bytes) == halo_rows * V.shape[1] * V.itemsize
    assert len(session.halo_bytes) == plan.n_colours
    assert max(session.halo_bytes) < 0.10 * V.nbytes


@pytest.mark.heavy
def test_killed_worker_run_completes_identically(global_random_seed):
    """A real worker process is SIGKILLed mid-fit; the fit resumes from its newest
    checkpoint on the surviving / restarted workers and ends bitwise equal."""
    p = make_problem(global_random_seed, "square", n=20_000, rank=16)
    ref = nk.fit_bcd(p, max_sweeps=25, tol=0.0, executor=InProcessExecutor(1))
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = distributed.Client(cluster)
    try:
        ex = DaskExecutor(client, blocks=4)
        pids = list(client.run(os.getpid).values())
        killed = {}

        def callback(sweep, obj, change, seconds):
            if sweep == 8 and not killed:
                os.kill(pids[0], signal.SIGKILL)
                killed["at"] = sweep
                time.sleep(1.0)

        ck = MemoryCheckpointer(every=3)
        got = fit_with_recovery(
            nk.fit_bcd,
            p,
            checkpointer=ck,
            executor=ex,
            max_sweeps=25,
            tol=0.0,
            callback=callback,
            log=lambda m: None,
        )
        assert killed
        np.testing.assert_array_equal(got.V, ref.V)
        assert got.objective_trace == ref.objective_trace
    finally:
        client.close()
        cluster.close()


def test_existing_scheduler_address(global_random_seed):
    """DaskExecutor(address=...) connects to a running scheduler (as `--dask ADDRESS` does)
    and gives the oracle's result."""
    p = make_problem(global_random_seed, "square", n=2500)
    ref = nk.fit_bcd(p, max_sweeps=3, tol=0.0, executor=InProcessExecutor(1))
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        ex = DaskExecutor(address=cluster.scheduler_address)
        try:
            assert ex.blocks == 2  # one block per worker
            got = nk.fit_bcd(p, max_sweeps=3, tol=0.0, executor=ex)
        finally:
            ex.client.close()
    np.testing.assert_array_equal(got.V, ref.V)


class _FakeClient:
    """ncores() empty until wait_for_workers is called (a cluster whose workers are still
    joining), or always (``never``)."""

    def __init__(self, never=False):
        self.never, self.waited = never, []
        self.scheduler = type("S", (), {"address": "tcp://fake:8786"})()

    def ncores(self):
        return {} if self.never or not self.waited else {"tcp://w2:1": 1, "tcp://w1:1": 1}

    def wait_for_workers(self, n, timeout=None):
        self.waited.append((n, timeout))
        if self.never:
            raise TimeoutError("no workers")


def test_worker_addresses_wait_for_a_worker_then_fail_clearly():
    ex = DaskExecutor.__new__(DaskExecutor)
    ex.client = _FakeClient()
    assert ex._worker_addresses(timeout=5) == ["tcp://w1:1", "tcp://w2:1"]
    assert ex.client.waited == [(1, 5)]
    ex.client = _FakeClient(never=True)
    from npkl_dist.executors._dask import WorkerLostError

    with pytest.raises(WorkerLostError, match="has no workers.*5 s"):
        ex._worker_addresses(timeout=5)


@pytest.mark.parametrize("solver", ["bcd", "admm"])
def test_block_data_is_scattered_not_sent_in_the_graph(clusters, solver):
    """The blocks' arrays reach the workers by scatter, not inside the actors' task graph
    (which passes through the scheduler; distributed warns "Sending large graph" past its
    threshold, lowered here to 32 kB against about 100 kB of blocks); the fit is unchanged."""
    import warnings

    import dask

    p = make_problem(3, "square", diagonal=solver == "admm", n=3000, rank=6)
    fit = nk.fit_bcd if solver == "bcd" else nk.fit_admm
    ref = (
        fit(p, max_iter=3, executor=InProcessExecutor(1))
        if solver == "admm"
        else fit(p, max_sweeps=3, tol=0.0, executor=InProcessExecutor(1))
    )
    ex = DaskExecutor(clusters(2))
    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": "32kB"}),
        warnings.catch_warnings(),
    ):
        warnings.filterwarnings("error", message="Sending large graph")
        got = (
            fit(p, max_iter=3, executor=ex)
            if solver == "admm"
            else fit(p, max_sweeps=3, tol=0.0, executor=ex)
        )
    np.testing.assert_array_equal(got.V, ref.V)


def test_own_cluster_closes_workers_before_the_scheduler(monkeypatch):
    """Closing a cluster the executor started retires its workers while the scheduler still
    answers them and quiets their shutdown logs: a worker's heartbeat racing the scheduler's
    close printed a closed-stream traceback after a successful `npkl fit --executor dask`."""
    import logging

    ex = DaskExecutor(workers=2, processes=False, dashboard_address=":0")
    cluster, seen = ex._own_cluster, {}
    real_close = cluster.close

    def close(*a, **kw):
        seen["workers_at_close"] = len(cluster.scheduler.workers)
        seen["level"] = logging.getLogger("distributed.worker").level
        seen["scheduler_side"] = logging.getLogger("distributed.batched").level
        return real_close(*a, **kw)

    monkeypatch.setattr(cluster, "close", close)
    try:
        assert len(cluster.scheduler.workers) == 2
    finally:
        ex.close()
        logging.getLogger("distributed.worker").setLevel(logging.NOTSET)
    assert seen == {
        "workers_at_close": 0,
        "level": logging.CRITICAL,
        "scheduler_side": logging.ERROR,
    }
    assert logging.getLogger("distributed.batched").level == logging.NOTSET  # restored
    assert ex._own_cluster is None
