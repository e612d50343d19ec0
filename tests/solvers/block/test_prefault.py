"""Block fits' work arrays touched in a background thread during the set-up (``Prefault``):
the session takes exactly the arrays ``session_buffers`` names, and the fit is bitwise the
fit without them."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from test_blocksolve import sparse_constrained_problem

from npkl_dist import ConvergenceWarning, fit_bcd, fit_setup
from npkl_dist.executors import InProcessExecutor
from npkl_dist.linalg import _memory
from npkl_dist.solvers.bcd import _start as _bcd_start
from npkl_dist.solvers.block._session import Prefault, session_buffers


def _fit(problem, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit_bcd(problem, **kw)


@pytest.fixture
def prefaults(monkeypatch):
    """Every block fit prefaults (no size floor); records (left, missed) of each prefault
    when the fit closes it."""
    monkeypatch.setattr("npkl_dist.solvers.bcd._start.PREFAULT_MIN_ENTRIES", 0)
    seen = []
    close = Prefault.close

    def recording_close(self):
        seen.append((self.left(), list(self.missed)))
        return close(self)

    monkeypatch.setattr(Prefault, "close", recording_close)
    return seen


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("extrapolate", [True, False])
@pytest.mark.parametrize("inner_maxiter", [1, 3])
def test_session_takes_exactly_the_prefaulted_arrays(prefaults, dtype, extrapolate, inner_maxiter):
    p = sparse_constrained_problem(3, "squared_hinge", n=600, frac=0.1, dtype=dtype)
    _fit(
        p,
        method="block",
        max_sweeps=4,
        tol=0,
        extrapolate=extrapolate,
        inner_maxiter=inner_maxiter,
        executor=InProcessExecutor(2),
    )
    assert prefaults == [([], [])]  # every array taken, none asked for that was not held


@pytest.mark.parametrize("loss", ["square", "hinge"])
def test_prefaulted_fit_is_bitwise_the_fit_without(monkeypatch, loss, global_random_seed):
    p = sparse_constrained_problem(global_random_seed, loss, n=800, frac=0.05)
    kw = dict(method="block", max_sweeps=8, tol=0, executor=InProcessExecutor(2))
    monkeypatch.setattr("npkl_dist.solvers.bcd._start.PREFAULT_MIN_ENTRIES", 1 << 62)
    without = _fit(p, **kw)
    monkeypatch.setattr("npkl_dist.solvers.bcd._start.PREFAULT_MIN_ENTRIES", 0)
    started = []
    init = Prefault.__init__

    def counting_init(self, specs):
        started.append(sorted(specs))
        init(self, specs)

    monkeypatch.setattr(Prefault, "__init__", counting_init)
    with_ = _fit(p, **kw)
    assert len(started) == 1
    assert np.array_equal(with_.V, without.V)
    assert with_.objective_trace == without.objective_trace
    assert with_.kkt_trace == without.kkt_trace


def test_prefault_only_for_standalone_in_process_block_fits(prefaults, monkeypatch):
    p = sparse_constrained_problem(1, "square", n=600, frac=0.1)
    ex = InProcessExecutor(1)
    _fit(p, method="sweeps", max_sweeps=2, tol=0, executor=ex)
    assert prefaults == []
    _fit(
        p,
        method="block",
        max_sweeps=2,
        tol=0,
        executor=ex,
        setup=fit_setup(p, method="block", executor=ex),
    )
    assert prefaults == []  # a setup keeps its own work arrays

    class NoPrefaults(InProcessExecutor):
        prefaults = False

    _fit(p, method="block", max_sweeps=2, tol=0, executor=NoPrefaults(1))
    assert prefaults == []
    monkeypatch.setattr(
        "npkl_dist.solvers.bcd._start.PREFAULT_MIN_ENTRIES", p.n_points * p.rank + 1
    )
    _fit(p, method="block", max_sweeps=2, tol=0, executor=ex)
    assert prefaults == []  # below the size floor
    monkeypatch.setattr("npkl_dist.solvers.bcd._start.PREFAULT_MIN_ENTRIES", p.n_points * p.rank)
    _fit(p, method="block", max_sweeps=2, tol=0, executor=ex)
    assert prefaults == [([], [])]


def test_session_buffers_of_a_problem_with_every_point_constrained(prefaults):
    p = sparse_constrained_problem(2, "square", n=200, frac=1.0)
    _fit(p, method="block", max_sweeps=2, tol=0, executor=InProcessExecutor(1))
    assert prefaults == [([], [])]
    specs = session_buffers(200, 0, 4)
    assert specs["R"] == ((0, 4), np.dtype(np.float64))
    assert specs["Vprev"] == ((200, 4), np.dtype(np.float64))


def test_prefault_take_checks_shape_and_dtype():
    pf = Prefault({"A": ((5, 3), np.float64), "B": ((4,), np.float32)})
    assert pf.take("A", (5, 2), np.float64) is None
    assert pf.take("B", (4,), np.float64) is None
    assert pf.take("C", (1,), np.float64) is None
    assert pf.missed == ["A", "B", "C"]
    a = pf.take("A", (5, 3), np.float64)
    assert a.shape == (5, 3) and a.dtype == np.float64
    assert pf.take("A", (5, 3), np.float64) is None  # taken once
    assert pf.left() == ["B"]
    assert pf.close() == ["B"] and pf.left() == []


def test_failed_setup_leaves_no_prefault_thread(prefaults, monkeypatch):
    p = sparse_constrained_problem(1, "square", n=600, frac=0.1)

    def broken_build(*a, **k):
        raise RuntimeError("set-up failed")

    monkeypatch.setattr("npkl_dist.solvers.bcd._fit._build", broken_build)
    monkeypatch.setattr("npkl_dist.solvers.bcd._setup._build", broken_build)
    monkeypatch.setattr("npkl_dist.solvers.bcd._start._build", broken_build)
    with pytest.raises(RuntimeError, match="set-up failed"):
        _fit(p, method="block", max_sweeps=2, tol=0, executor=InProcessExecutor(1))
    assert len(prefaults) == 1  # closed
    assert not any(t.name == "npkl-prefault" and t.is_alive() for t in threading.enumerate())


def record_prefault_arrays(monkeypatch):
    """{name: array} of every array a Prefault thread makes, in order, recorded as each is
    stored: before its event is set, so before the fit can take it. (Recording them after
    the thread's last array raced with the fit taking one, and lost S in a CI run.)"""
    held = {}
    run = Prefault._run

    class Recording(dict):
        def __setitem__(self, name, array):
            held[name] = array
            super().__setitem__(name, array)

    def recording_run(self):
        self._arrays = Recording()
        run(self)

    monkeypatch.setattr(Prefault, "_run", recording_run)
    return held


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("extrapolate", [True, False])
def test_result_is_written_into_the_prefaulted_array(prefaults, monkeypatch, dtype, extrapolate):
    """The fit's result V (the relabelling undone) goes into an array the prefault touched,
    with the values of a fit without it: the session's S, dead after the last outer
    iteration (a standalone fit's cache is its own), or without extrapolation (no S) an
    array of its own."""
    p = sparse_constrained_problem(4, "square", n=600, frac=0.1, dtype=dtype)
    kw = dict(
        method="block", max_sweeps=3, tol=0, executor=InProcessExecutor(2), extrapolate=extrapolate
    )
    held = record_prefault_arrays(monkeypatch)
    res = _fit(p, **kw)
    assert (_bcd_start.RESULT_BUFFER in held) is not extrapolate
    assert res.V is held["S" if extrapolate else _bcd_start.RESULT_BUFFER]
    assert res.V.dtype == np.dtype(dtype) and res.V.shape == (p.n_points, p.rank)
    assert prefaults == [([], [])]
    monkeypatch.setattr("npkl_dist.solvers.bcd._start.PREFAULT_MIN_ENTRIES", 1 << 62)
    assert np.array_equal(_fit(p, **kw).V, res.V)


@pytest.mark.parametrize("start", ["coarse-free", "random"])
def test_coarse_free_start_is_built_in_the_prefaulted_array(prefaults, monkeypatch, start):
    """The default start of a block fit (coarse-free) builds E in the array the prefault
    touched first, and the fit is the fit without it; any other start lets that array go
    (nothing left, nothing missed)."""
    p = sparse_constrained_problem(5, "square", n=600, frac=0.1)
    kw = dict(method="block", max_sweeps=3, tol=0, executor=InProcessExecutor(2), start=start)
    held = record_prefault_arrays(monkeypatch)
    sessions = []
    real_session = InProcessExecutor.block_session

    def recording_session(self, prep, layout, V, **opts):
        sessions.append(V)
        return real_session(self, prep, layout, V, **opts)

    monkeypatch.setattr(InProcessExecutor, "block_session", recording_session)
    res = _fit(p, **kw)
    assert list(held)[0] == _bcd_start.START_BUFFER  # made first
    assert (sessions[0] is held[_bcd_start.START_BUFFER]) == (start == "coarse-free")
    assert prefaults == [([], [])]
    monkeypatch.setattr("npkl_dist.solvers.bcd._start.PREFAULT_MIN_ENTRIES", 1 << 62)
    assert np.array_equal(_fit(p, **kw).V, res.V)


def test_prefault_take_waits_for_its_own_array_only(monkeypatch):
    """take(name) returns once that array is made, while later ones are still being made;
    drop(name) lets one go."""
    gate = threading.Event()
    make = _memory.populated_empty

    def slow_make(shape, dtype, **kw):
        if tuple(shape) == (6,):  # the second array ("B") waits for the gate
            assert gate.wait(10)
        return make(shape, dtype, **kw)

    monkeypatch.setattr("npkl_dist.solvers.block._layout.populated_empty", slow_make)
    monkeypatch.setattr("npkl_dist.solvers.block._precond.populated_empty", slow_make)
    monkeypatch.setattr("npkl_dist.solvers.block._session.populated_empty", slow_make)
    pf = Prefault({"A": ((2, 2), np.float64), "B": ((6,), np.float64), "C": ((3,), np.int64)})
    a = pf.take("A", (2, 2), np.float64)  # would hang here if take joined the thread
    assert a is not None and not gate.is_set()
    gate.set()
    pf.drop("C")
    assert pf.left() == ["B"]
    assert pf.close() == ["B"]


def test_take_rows_writes_into_out_only_where_it_fits():
    from npkl_dist.linalg._rowops import take_rows

    rng = np.random.default_rng(0)
    A = rng.standard_normal((50, 3))
    perm = rng.permutation(50)
    out = np.empty((50, 3))
    assert take_rows(A, perm, out=out) is out
    np.testing.assert_array_equal(out, A[perm])
    for bad in (np.empty((50, 3), np.float32), np.empty((49, 3)), np.empty((3, 50)).T):
        got = take_rows(A, perm, out=bad)
        assert got is not bad
        np.testing.assert_array_equal(got, A[perm])


# --------------------------------------------------------------------------------------------
# work arrays on base pages, mapped in one call (npkl_dist.linalg._memory)
# --------------------------------------------------------------------------------------------


def _vma_of(addr):
    """The /proc/self/smaps entry (header and fields) of the mapping holding ``addr``."""
    import re

    with open("/proc/self/smaps") as f:
        text = f.read()
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        lo, hi = (int(x, 16) for x in block.split()[0].split("-"))
        if lo <= addr < hi:
            return block
    raise AssertionError("no mapping")


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
@pytest.mark.parametrize("populate", [True, False])
def test_populated_empty_maps_every_page_on_base_pages(monkeypatch, dtype, populate):
    """A large array: its own anonymous mapping, every page resident before it is written,
    no huge pages, writable, of the shape and dtype asked for; where the kernel cannot
    populate, the pages are touched instead. Small arrays are numpy's."""
    import sys

    from npkl_dist.linalg import _memory

    if not sys.platform.startswith("linux"):
        pytest.skip("base-page mappings are Linux's")
    if not populate:  # an older kernel: MADV_POPULATE_WRITE refused
        real = _memory._madvise
        monkeypatch.setattr(
            _memory,
            "_madvise",
            lambda a, n, adv: (False if adv == _memory.MADV_POPULATE_WRITE else real(a, n, adv)),
        )
    shape = ((3 << 20) // np.dtype(dtype).itemsize, 4)  # 12 MB
    a = _memory.populated_empty(shape, dtype)
    assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.writeable
    assert a.flags.c_contiguous and a.ctypes.data % _memory.PAGE == 0
    vma = _vma_of(a.ctypes.data)
    fields = dict(line.split(":", 1) for line in vma.splitlines()[1:] if ":" in line)
    kb = lambda k: int(fields[k].split()[0])  # noqa: E731
    assert kb("Rss") >= a.nbytes // 1024  # mapped before any write of ours
    assert kb("AnonHugePages") == 0
    a[...] = 7
    assert np.all(a == 7)
    small = _memory.populated_empty((10, 3), dtype)
    assert small.shape == (10, 3) and isinstance(small.base, (type(None), np.ndarray))


@pytest.mark.parametrize("populate", [True, False])
@pytest.mark.parametrize("shape", [(10, 3), ((3 << 20) // 8, 4)])
def test_populated_zeros_are_zeros_where_the_heap_held_garbage(monkeypatch, populate, shape):
    """``zeros=True`` (the prefault's arrays, which the session takes as zeros without a
    fill): all zeros, small (numpy's) or large (a fresh mapping, populated or touched), right
    after arrays of garbage were freed."""
    from npkl_dist.linalg import _memory

    if not populate:
        real = _memory._madvise
        monkeypatch.setattr(
            _memory,
            "_madvise",
            lambda a, n, adv: (False if adv == _memory.MADV_POPULATE_WRITE else real(a, n, adv)),
        )
    for _ in range(3):
        junk = np.empty(shape)
        junk[...] = np.nan
        del junk
        a = _memory.populated_empty(shape, np.float64, zeros=True)
        assert a.shape == shape and not np.any(a)


def test_prefault_arrays_are_populated_base_page_arrays(prefaults):
    """The prefault's arrays come from populated_empty (their own mappings)."""
    import mmap

    pf = Prefault({"A": ((1 << 20, 2), np.float64), "B": ((5,), np.float32)})
    a = pf.take("A", (1 << 20, 2), np.float64)
    owner = a
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)
    assert not np.any(a)  # zeros: the session skips their fill
    b = pf.take("B", (5,), np.float32)
    assert b.shape == (5,) and not np.any(b)
    pf.close()
