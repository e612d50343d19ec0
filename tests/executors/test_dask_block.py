"""Block-exact BCD on the Dask executor (``npkl_dist.executors._dask_block``).

Oracle: the in-process block solve. With a Jacobi preconditioner (block-Jacobi of Jacobi is
Jacobi) or a single block (the local AMG is the global one) the Dask fit is the in-process
fit bitwise; with several blocks and the local-AMG block-Jacobi preconditioner the iterates
differ, and the fits must reach the same optimum (objective to 1e-6 relative, the kernel
K = V V' to 1e-4 of its largest entry, both at a scaled KKT residual below 1e-7, 1e-8 for
the squared hinge).
"""

import distributed  # noqa: E402 - a test dependency: missing means a broken install, not a skip
import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist.executors import InProcessExecutor
from npkl_dist.executors._dask import DaskExecutor  # noqa: E402
from npkl_dist.job._recovery import MemoryCheckpointer, fit_with_recovery
from npkl_dist.solvers.bcd._fit import checkpoint_width
from npkl_dist.solvers.bcd._setup import choose_method

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")

LOSSES = ("hinge", "squared_hinge", "square")


def make_problem(seed, loss="square", n=3000, rank=6, frac=0.05, dtype="float64"):
    """kNN graph of a 4-class 3-D Gaussian sample, ``frac * n`` must-link and as many
    cannot-link pairs: few constrained points, as block solves expect."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] > 0).astype(np.int64) + 2 * (X[:, 1] > 0)
    g = nk.knn_graph(X, 6, warn=False)
    k = max(1, int(frac * n))
    c = nk.sample_constraints(y, k, k, seed=seed)
    return nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss, rank=rank, seed=seed, dtype=dtype)


@pytest.fixture(scope="module")
def client():
    """A thread-based LocalCluster with 2 workers x 1 thread (fast to start)."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    )
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _same(got, ref):
    np.testing.assert_array_equal(got.V, ref.V)
    assert got.objective_trace == ref.objective_trace
    assert got.change_trace == ref.change_trace
    assert got.kkt_trace == ref.kkt_trace
    assert got.cg_iterations == ref.cg_iterations


@pytest.mark.parametrize("blocks", [1, 2, 3])
@pytest.mark.parametrize("loss", LOSSES)
def test_jacobi_block_fit_equals_inprocess_bitwise(client, global_random_seed, blocks, loss):
    """Block-Jacobi with Jacobi blocks is Jacobi: same iterates on any partition, since
    reductions are added in the same chunk order and halo rows carry the owners' values."""
    p = make_problem(global_random_seed, loss)
    kw = dict(method="block", max_sweeps=6, tol=0, precond="jacobi", inner_maxiter=3)
    ref = nk.fit_bcd(p, executor=InProcessExecutor(1), **kw)
    ex = DaskExecutor(client, blocks=blocks)
    got = nk.fit_bcd(p, executor=ex, **kw)
    _same(got, ref)


@pytest.mark.parametrize("blocks", [2, 3])
def test_float32_directions_through_halos_equal_inprocess_bitwise(
    client, global_random_seed, blocks
):
    """A one-step PCG (the default inner_maxiter=1) takes float32 directions
    (DIRECTION_FLOAT32): the halo rows of Z travel in float32, and every block's product
    reads its neighbours' rounded rows as their owners do, so the fit is the in-process one
    bit for bit on any partition."""
    p = make_problem(global_random_seed, "squared_hinge")
    kw = dict(method="block", max_sweeps=6, tol=0, precond="jacobi")
    ref = nk.fit_bcd(p, executor=InProcessExecutor(1), **kw)
    got = nk.fit_bcd(p, executor=DaskExecutor(client, blocks=blocks), **kw)
    _same(got, ref)


@pytest.mark.parametrize("blocks", [1, 3])
def test_hinge_joint_moves_equal_inprocess_bitwise(client, global_random_seed, blocks):
    """Hinge block fits take joint moves (npkl_dist.solvers.bcd._joint): the driver's move is written
    back into every block's own and halo rows, and the residual recomputed there."""
    p = make_problem(global_random_seed, "hinge")
    kw = dict(method="block", max_sweeps=12, tol=0, precond="jacobi", inner_maxiter=3)
    ref = nk.fit_bcd(p, executor=InProcessExecutor(1), **kw)
    got = nk.fit_bcd(p, executor=DaskExecutor(client, blocks=blocks), **kw)
    assert len(ref.joint_moves) >= 2
    assert got.joint_moves == ref.joint_moves
    _same(got, ref)


@pytest.mark.parametrize("precond", ["amg-plain", "amg", "amg-additive"])
def test_one_block_amg_equals_inprocess_bitwise(client, global_random_seed, precond):
    """One block: its local AMG is the in-process preconditioner, so the iterates agree
    (bitwise; the brief asked for 1e-10)."""
    p = make_problem(global_random_seed, "squared_hinge")
    kw = dict(method="block", max_sweeps=6, tol=0, precond=precond)
    ref = nk.fit_bcd(p, executor=InProcessExecutor(1), **kw)
    got = nk.fit_bcd(p, executor=DaskExecutor(client, blocks=1), **kw)
    _same(got, ref)


def test_float32_jacobi_equals_inprocess_bitwise(client, global_random_seed):
    p = make_problem(global_random_seed, "square", dtype="float32")
    kw = dict(method="block", max_sweeps=5, tol=0, precond="jacobi")
    ref = nk.fit_bcd(p, executor=InProcessExecutor(1), **kw)
    got = nk.fit_bcd(p, executor=DaskExecutor(client, blocks=2), **kw)
    assert got.V.dtype == np.float32
    _same(got, ref)


@pytest.mark.parametrize("loss", LOSSES)
def test_block_jacobi_amg_objective_never_increases(client, global_random_seed, loss):
    p = make_problem(global_random_seed, loss)
    res = nk.fit_bcd(
        p, method="block", max_sweeps=20, tol=0, executor=DaskExecutor(client, blocks=3)
    )
    trace = [res.objective_initial] + res.objective_trace
    for a, b in zip(trace, trace[1:]):
        assert b <= a + 1e-12 * max(1.0, abs(a)), (a, b)
    # the by-product objective is the objective
    assert res.objective == pytest.approx(p.objective(res.V), rel=1e-10)
    assert len(res.kkt_trace) == res.n_sweeps == len(res.cg_iterations)


@pytest.mark.parametrize(
    "loss, n, kkt",
    [
        # KKT 1e-7: at 1e-6 the default (additive) preconditioner's fits stopped 1.7e-4 apart in
        # K (flat directions), at 1e-7 1.8e-5
        ("square", 3000, 1e-7),
        # the squared hinge's flat directions are wider: at seed 42 the fits stopped 1.49e-4
        # apart in K at 1e-7 (AMD EPYC, 2026-11-28), 3.97e-5 at 1e-8 and 3.94e-6 at 1e-9, their
        # objectives 1.4e-10, 3.1e-14 and 1.2e-15 apart (relative): one optimum, approached
        # along different paths. 1e-8 costs about 130 s here (1e-7: 27 s)
        pytest.param("squared_hinge", 5000, 1e-8, marks=pytest.mark.heavy),
        # not 'hinge': nonsmooth coupled terms -- runs along different paths can stop at
        # different block-wise fixed points (both with a small KKT residual; at n = 5000 they
        # ended 0.9% apart), see test_reference's xfail on block-wise exactness
    ],
)
def test_dask_block_fit_reaches_the_inprocess_optimum(client, global_random_seed, loss, n, kkt):
    """Two blocks with local AMG (different iterates: both blocks hold U rows) and the
    in-process AMG, both run to a small scaled KKT residual: objectives within 1e-6
    (relative), kernels within 1e-4 of the largest entry (V itself is determined only up
    to a rotation). The default case takes ~20 s (about 2000 actor round trips)."""
    p = make_problem(global_random_seed, loss, n=n, rank=4)
    kw = dict(
        method="block", max_sweeps=3000, tol=1.0, tol_kkt=kkt, inner_rtol=1e-6, inner_maxiter=10
    )
    ref = nk.fit_bcd(p, executor=InProcessExecutor(1), **kw)
    ex = DaskExecutor(client, blocks=2)
    got = nk.fit_bcd(p, executor=ex, **kw)
    assert ref.converged and got.converged
    assert got.kkt < kkt and ref.kkt < kkt
    assert abs(got.objective - ref.objective) <= 1e-6 * abs(ref.objective)
    Kg, Kr = got.V @ got.V.T, ref.V @ ref.V.T
    assert np.abs(Kg - Kr).max() < 1e-4 * np.abs(Kr).max()
    # the paths differ: this is not the bitwise case in disguise
    assert got.objective_trace[:3] != ref.objective_trace[:3]


def test_dask_block_resume_is_bitwise(client, global_random_seed):
    """A fit resumed from a checkpoint (width 4r: V, S, L S, R) equals the uninterrupted one,
    with the state written through a run store by the actors shard by shard."""
    import tempfile

    from npkl_dist.store import RunStore, StoreCheckpointer

    p = make_problem(global_random_seed, "squared_hinge")
    ex = DaskExecutor(client, blocks=2)
    kw = dict(method="block", tol=0, executor=ex)
    full = nk.fit_bcd(p, max_sweeps=8, **kw)
    n, r = p.n_points, p.rank
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore.create(f"{tmp}/run", config={"test": True})
        try:
            ck = StoreCheckpointer(
                store,
                every=3,
                row_block=1024,
                n=n,
                max_sweeps=4,
                width=checkpoint_width(r, "block"),
                dtype=p.dtype,
            )
            part = fit_with_recovery(nk.fit_bcd, p, checkpointer=ck, max_sweeps=4, **kw)
            assert ck.n_saved == 2 and part.n_sweeps == 4
            state, W = ck.load()
            assert W.shape == (n, 4 * r) and state["sweep"] == 4
            resumed = nk.fit_bcd(p, max_sweeps=8, resume=(state, W), **kw)
        finally:
            store.close()
    _same(resumed, full)
    # and from a driver-memory checkpoint mid-way (the other checkpointer)
    mem = MemoryCheckpointer(every=5)
    fit_with_recovery(nk.fit_bcd, p, checkpointer=mem, max_sweeps=6, **kw)
    _same(nk.fit_bcd(p, max_sweeps=8, resume=mem.load(), **kw), full)


def test_auto_picks_block_on_dask(client):
    """choose_method treats the Dask executor like the in-process one."""
    from test_blocksolve import chain_problem

    from npkl_dist.solvers.bcd._setup import AUTO_SMALL_MIN_POINTS

    ex = DaskExecutor(client)
    assert ex.supports_block
    assert choose_method(chain_problem(20_000), ex) == "block"
    assert choose_method(chain_problem(AUTO_SMALL_MIN_POINTS), ex) == "block"
    assert choose_method(chain_problem(AUTO_SMALL_MIN_POINTS - 2), ex) == "sweeps"
    assert choose_method(chain_problem(20_000, frac=1.0), ex) == "block"
    assert choose_method(chain_problem(20_000, "hinge", 1.0), ex) == "block"
    assert choose_method(chain_problem(20_000, "linear", 1.0), ex) == "sweeps"


def test_halo_traffic_of_a_block_step(client, global_random_seed):
    """Per exchange only halo rows move: Z's and V_U's U halo rows, each C colour's rows."""
    from npkl_dist.solvers.block._layout import block_layout

    p = make_problem(global_random_seed, "square", n=4000, rank=4)
    plan = nk.make_plan(p)
    lay = block_layout(p, plan)
    prep = nk.prepare(p, lay)
    V = np.ascontiguousarray(nk.initial_V(p, np.random.default_rng(0))[lay.order])
    session = DaskExecutor(client, blocks=2).block_session(prep, lay, V.copy())
    session.step(np.arange(lay.n_colours), 0.01, 2)
    nc = lay.n_colours
    u_halo = sum(int(np.searchsorted(s.halo, lay.n_free)) for s in session.specs)
    c_halo = sum(s.halo.shape[0] for s in session.specs) - u_halo
    bytes_u = u_halo * V.shape[1] * 8  # Z is float64
    # precondition + one update with preconditioning (2 iterations): two Z exchanges,
    # then V_U's halo once, then C's colours
    assert session.halo_bytes[:2] == [bytes_u, bytes_u]
    assert session.halo_bytes[2] == u_halo * V.shape[1] * V.itemsize
    assert sum(session.halo_bytes[3:]) == c_halo * V.shape[1] * V.itemsize
    assert len(session.halo_bytes) == 3 + nc
    # a one-step PCG: one Z exchange, its rows in float32 (DIRECTION_FLOAT32)
    session.halo_bytes.clear()
    session.step(np.arange(lay.n_colours), 0.01, 1)
    assert session.halo_bytes[0] == u_halo * V.shape[1] * 4
    assert session.halo_bytes[1] == u_halo * V.shape[1] * V.itemsize
    assert len(session.halo_bytes) == 2 + nc
    session.close()


def test_bad_precond_names_the_argument(client):
    p = make_problem(0, n=1500)
    with pytest.raises(nk.ValidationError, match="precond: 'ilu' is not one of"):
        nk.fit_bcd(p, method="block", precond="ilu", executor=DaskExecutor(client))


@pytest.mark.heavy
def test_killed_worker_block_fit_completes_identically(global_random_seed):
    """A worker process is SIGKILLed mid block fit; the fit resumes from its newest
    checkpoint on rebuilt actors (same blocks, same local preconditioners) and ends bitwise
    equal to an uninterrupted Dask fit."""
    import os
    import signal
    import time

    p = make_problem(global_random_seed, "square", n=20_000, rank=8, frac=0.01)
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    c = distributed.Client(cluster)
    try:
        ex = DaskExecutor(c, blocks=4)
        kw = dict(method="block", max_sweeps=14, tol=0, executor=ex)
        ref = nk.fit_bcd(p, **kw)
        pids = list(c.run(os.getpid).values())
        killed = {}

        def callback(sweep, obj, change, seconds):
            if sweep == 7 and not killed:
                os.kill(pids[0], signal.SIGKILL)
                killed["at"] = sweep
                time.sleep(1.0)

        got = fit_with_recovery(
            nk.fit_bcd,
            p,
            checkpointer=MemoryCheckpointer(every=3),
            callback=callback,
            log=lambda m: None,
            **kw,
        )
        assert killed
        _same(got, ref)
    finally:
        c.close()
        cluster.close()


@pytest.mark.parametrize("blocks", [2, 3])
def test_repeated_constrained_passes_equal_inprocess_bitwise(client, global_random_seed, blocks):
    """c_passes=3 repeats the colour steps (and their halo exchanges) on every partition:
    the Dask fit is the in-process fit bitwise (Jacobi blocks)."""
    p = make_problem(global_random_seed, "squared_hinge")
    kw = dict(method="block", max_sweeps=5, tol=0, precond="jacobi", c_passes=3)
    ref = nk.fit_bcd(p, executor=InProcessExecutor(1), **kw)
    got = nk.fit_bcd(p, executor=DaskExecutor(client, blocks=blocks), **kw)
    _same(got, ref)
    one = nk.fit_bcd(p, executor=InProcessExecutor(1), **{**kw, "c_passes": 1})
    assert not np.array_equal(one.V, ref.V)  # the passes do change the iterates
