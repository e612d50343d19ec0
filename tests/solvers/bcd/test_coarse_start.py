"""The coarse spectral start (``npkl_dist.solvers.bcd._coarse_start``, ``start='coarse'``).

References: the Galerkin operator Tᵀ L T formed with scipy's sparse products from an explicit
prolongator, numpy's dense ``eigh`` of it, the dense product T_0 T_1 ... X, and the problem's
own objective along the ray for the scale.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from test_blocksolve import sparse_constrained_problem

import npkl_dist as nk
from npkl_dist import ConvergenceWarning, ValidationError, fit_bcd, fit_setup, initial_V
from npkl_dist.executors import InProcessExecutor
from npkl_dist.linalg._rowops import take_rows
from npkl_dist.solvers._plan import _split
from npkl_dist.solvers.bcd._coarse_start import (
    FREE_MIN_FRACTION,
    MIN_ROW_NORM,
    _aggregate,
    coarse_basis,
    coarse_start,
    galerkin,
    prolong,
    smooth_energy,
    start_scale,
)
from npkl_dist.solvers.bcd._start import resolve_start
from npkl_dist.solvers.block._layout import constrained_mask


def _prolongator(agg, t, n_coarse):
    rows = np.flatnonzero(agg >= 0)
    return sp.csr_matrix((t[rows], (rows, agg[rows])), shape=(agg.shape[0], n_coarse))


def _mixture_problem(seed, loss="square", n=4000, rank=6, frac=0.02, dtype="float64"):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((5, 3)) * 6
    y = rng.integers(0, 5, n)
    X = centres[y] + rng.standard_normal((n, 3))
    g = nk.knn_graph(X, 6, warn=False)
    k = max(1, int(frac * n) // 2)
    c = nk.sample_constraints(y, k, k, seed=seed)
    return nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss, rank=rank, seed=seed, dtype=dtype)


def test_galerkin_equals_scipys_products(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    p = _mixture_problem(global_random_seed, n=1500)
    off, diag = _split(p.L.tocsr())
    # an aggregation with some rows in no aggregate (agg = -1), weights of any sign
    agg, t, nc, _ = _aggregate(off)
    drop = rng.random(agg.shape[0]) < 0.05
    agg[drop], t[drop] = -1, 0.0
    t = t * rng.uniform(0.5, 1.5, t.shape)
    got = galerkin(off.indptr, off.indices, off.data, diag, agg, t, nc)
    T = _prolongator(agg, t, nc)
    ref = (T.T @ (off + sp.diags(diag)) @ T).toarray()
    np.testing.assert_allclose(got.toarray(), ref, rtol=1e-12, atol=1e-13 * np.abs(ref).max())
    assert got.has_canonical_format or np.all(np.diff(got.indptr) >= 1)
    # every coarse row holds its diagonal entry first
    assert np.array_equal(got.indices[got.indptr[:-1]], np.arange(nc))


def test_basis_is_the_coarse_levels_bottom_eigenpairs(global_random_seed):
    p = _mixture_problem(global_random_seed, n=6000)
    off, diag = _split(p.L.tocsr())
    r = p.rank
    b = coarse_basis(off.indptr, off.indices, off.data, diag, r, max_coarse=100)
    assert len(b.aggs) >= 1
    # the levels by scipy's products, from the same aggregates
    A = (off + sp.diags(diag)).tocsr()
    P = sp.identity(A.shape[0], format="csr")
    for agg, t in zip(b.aggs, b.ts):
        T = _prolongator(agg, t, int(agg.max()) + 1)
        P = P @ T
        A = (T.T @ A @ T).tocsr()
    assert A.shape[0] == b.n_coarse >= 2 * r
    w, X = np.linalg.eigh(A.toarray())
    np.testing.assert_allclose(b.w, w[:r], rtol=1e-10, atol=1e-12)
    # eigenvectors up to sign (the bottom eigenvalues here are distinct enough)
    E = prolong(b, r)
    ref = P @ X[:, :r]
    np.testing.assert_allclose(np.abs(np.sum(E * ref, axis=0)), 1.0, rtol=1e-8)
    # orthonormal columns, and the smoothness energy from the coarse level alone
    np.testing.assert_allclose(E.T @ E, np.eye(r), atol=1e-10)
    L = p.L.tocsr()
    assert smooth_energy(b, r) == pytest.approx(float(np.sum(E * (L @ E))), rel=1e-10)


def test_levels_stop_before_fewer_than_two_rank_rows():
    p = _mixture_problem(0, n=3000, rank=6)
    off, diag = _split(p.L.tocsr())
    for r in (2, 6, 40):
        b = coarse_basis(off.indptr, off.indices, off.data, diag, r, max_coarse=10)
        assert b.n_coarse >= 2 * r
        # one more level would have fallen below 2r (or not coarsened)
        last = sp.csr_matrix((np.ones(1), ([0], [0])), shape=(1, 1))
        if b.aggs:
            A = (off + sp.diags(diag)).tocsr()
            for agg, t in zip(b.aggs, b.ts):
                T = _prolongator(agg, t, int(agg.max()) + 1)
                A = (T.T @ A @ T).tocsr()
            last = A
        nxt = _aggregate(sp.csr_matrix(last - sp.diags(last.diagonal())))[2]
        assert nxt < 2 * r or nxt >= last.shape[0]


def test_arpack_path_is_deterministic_and_agrees_with_the_dense_one():
    p = _mixture_problem(3, n=8000, rank=4)
    off, diag = _split(p.L.tocsr())
    dense = coarse_basis(off.indptr, off.indices, off.data, diag, 4, max_coarse=2000)
    assert dense.n_coarse > 50
    a = coarse_basis(off.indptr, off.indices, off.data, diag, 4, max_coarse=2000, dense_max=50)
    b = coarse_basis(off.indptr, off.indices, off.data, diag, 4, max_coarse=2000, dense_max=50)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_allclose(a.w, dense.w, rtol=1e-6)


def test_small_problem_start_is_the_exact_bottom_eigenspace():
    """Below max_coarse rows nothing is aggregated: the start spans L's own bottom
    eigenvectors."""
    p = sparse_constrained_problem(1, "square", n=300, rank=4)
    V = initial_V(p, np.random.default_rng(0), "coarse")
    w, E = np.linalg.eigh(p.L.toarray())
    proj = E[:, :4] @ (E[:, :4].T @ V)
    np.testing.assert_allclose(V, proj, atol=1e-10 * np.abs(V).max())


@pytest.mark.parametrize("loss", ["square", "squared_hinge", "hinge", "linear"])
def test_scale_minimises_the_objective_along_the_ray(loss, global_random_seed):
    p = sparse_constrained_problem(global_random_seed, loss, n=600, rank=4)
    off, diag = _split(p.L.tocsr())
    c = p.constraints
    V, b = coarse_start(
        off.indptr,
        off.indices,
        off.data,
        diag,
        c.i,
        c.j,
        c.t,
        rank=p.rank,
        loss=p.loss,
        gamma=p.gamma,
        bound=p.bound,
    )
    np.testing.assert_array_equal(V, initial_V(p, np.random.default_rng(0), "coarse"))
    E = prolong(b, p.rank)
    s = float(np.sum(V * V) / np.sum(E * E))
    floor = MIN_ROW_NORM**2 * p.n_points / p.rank
    norms = np.linalg.norm(V, axis=1)
    ray = [p.objective(np.sqrt(x) * E) for x in np.geomspace(1e-6 * s, s, 60)]
    f = [p.objective(m * V) for m in (0.97, 1.0, 1.03)]
    if loss == "linear" and norms.max() > p.bound * (1 - 1e-9):  # the ball binds
        assert norms.max() <= p.bound * (1 + 1e-9)
        assert f[1] <= f[0] + 1e-9 * abs(f[1]) or s <= floor * (1 + 1e-9)
    elif s <= floor * (1 + 1e-9):  # the floor binds: the ray's optimum is below it
        assert s == pytest.approx(floor, rel=1e-9)
        assert f[2] >= f[1] - 1e-9 * abs(f[1])
        assert min(ray) <= f[1] + 1e-9 * abs(f[1])
    else:  # the ray's optimum
        assert f[1] <= min(f[0], f[2]) + 1e-9 * abs(f[1])
        assert f[1] <= min(ray) + 1e-9 * abs(f[1])


def test_floor_is_a_mean_row_norm():
    s = start_scale("square", 1.0, 1.0, 10.0, np.zeros(5), 0.0, 1000, 4)
    assert s == pytest.approx(MIN_ROW_NORM**2 * 1000 / 4)


def test_start_scale_matches_a_fine_grid():
    rng = np.random.default_rng(0)
    z = rng.standard_normal(50)
    a = 3.0
    s = start_scale("square", 1.0, 1.0, a, z, 0.0, 100, 4, min_row=0.0)
    grid = np.linspace(0, 5, 200001)
    f = grid * a + np.sum((1 - np.outer(grid, z)) ** 2, axis=1)
    assert s == pytest.approx(grid[np.argmin(f)], abs=1e-4)


@pytest.mark.parametrize("method", ["block", "sweeps"])
def test_fit_from_the_coarse_start_equals_a_fit_from_that_v0(method, global_random_seed):
    """fit_bcd(start='coarse') builds the start in its internal order: the same fit as one
    given that start in original order, bit for bit."""
    p = _mixture_problem(global_random_seed, n=3000, rank=4)
    kw = dict(method=method, max_sweeps=5, tol=0, executor=InProcessExecutor(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        got = fit_bcd(p, start="coarse", **kw)
        s = fit_setup(p, method=method)
        c = p.constraints
        from npkl_dist.solvers.bcd._start import _internal_coarse_start

        Vint = _internal_coarse_start(p, s.prep, None)
        V0 = take_rows(Vint, s.layout.rank_of)
        ref = fit_bcd(p, V0=V0, **kw)
    assert got.start == "coarse"
    assert got.objective_initial == ref.objective_initial
    np.testing.assert_array_equal(got.V, ref.V)
    assert got.objective_trace == ref.objective_trace
    # and the internal start is the construction on L in that order
    off, diag = _split(p.L.tocsr()[s.layout.order][:, s.layout.order])
    Vref = coarse_start(
        off.indptr,
        off.indices,
        off.data,
        diag,
        s.layout.rank_of[c.i],
        s.layout.rank_of[c.j],
        c.t,
        rank=p.rank,
        loss=p.loss,
        gamma=p.gamma,
        bound=p.bound,
    )[0]
    np.testing.assert_allclose(Vint, Vref, rtol=1e-12, atol=1e-14)


def test_setup_reuse_keeps_the_basis_and_the_fit(global_random_seed):
    p = _mixture_problem(global_random_seed, n=3000, rank=4)
    ex = InProcessExecutor(2)
    kw = dict(method="block", max_sweeps=4, tol=0, executor=ex, start="coarse")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = fit_bcd(p, **kw)
        s = fit_setup(p, method="block", executor=ex)
        a = fit_bcd(p, setup=s, **kw)
        assert ("coarse start", p.rank) in s.cache
        b = fit_bcd(p, setup=s, **kw)  # from the cached basis
    for got in (a, b):
        np.testing.assert_array_equal(got.V, ref.V)
        assert got.objective_trace == ref.objective_trace


@pytest.mark.parametrize("start", ["coarse", "coarse-free"])
def test_coarse_starts_reach_the_random_starts_optimum(start):
    p = _mixture_problem(2, n=4000, rank=6, frac=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = fit_bcd(p, method="block", start=start, max_sweeps=400, tol=1e-12)
        b = fit_bcd(p, method="block", start="random", max_sweeps=400, tol=1e-12)
    assert a.start == start
    assert a.kkt < 1e-6 and b.kkt < 1e-6
    assert a.objective == pytest.approx(b.objective, rel=1e-8)
    assert a.objective_initial < b.objective_initial / 10


def test_unknown_start_is_refused():
    p = sparse_constrained_problem(0, "square", n=200, rank=3)
    with pytest.raises(ValidationError, match="start: 'coarsest' is not one of"):
        fit_bcd(p, start="coarsest")


@pytest.mark.parametrize("frac,block_start", [(0.02, "coarse-free"), (0.9, "coarse")])
def test_auto_start_per_method_and_constrained_fraction(frac, block_start):
    """'auto': for block solves 'coarse-free' where at least half the points are in no pair,
    else 'coarse'; 'random' for plain sweeps."""
    p = _mixture_problem(1, n=3000, rank=4, frac=frac)
    n_free = p.n_points - np.count_nonzero(constrained_mask(p))
    assert (n_free >= FREE_MIN_FRACTION * p.n_points) == (block_start == "coarse-free")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        blk = fit_bcd(p, method="block", max_sweeps=3, tol=0)
        blk_named = fit_bcd(p, method="block", max_sweeps=3, tol=0, start=block_start)
        swp = fit_bcd(p, method="sweeps", max_sweeps=3, tol=0)
        swp_random = fit_bcd(p, method="sweeps", max_sweeps=3, tol=0, start="random")
    assert (blk.start, swp.start) == (block_start, "random")
    np.testing.assert_array_equal(blk.V, blk_named.V)
    np.testing.assert_array_equal(swp.V, swp_random.V)
    with pytest.raises(ValidationError, match="'auto' is resolved by fit_bcd"):
        initial_V(p, np.random.default_rng(0), "auto")


def test_auto_start_rule_at_the_threshold(monkeypatch):
    p = _mixture_problem(1, n=1000, rank=4, frac=0.3)
    n_free = p.n_points - np.count_nonzero(constrained_mask(p))
    monkeypatch.setattr("npkl_dist.solvers.bcd._start.FREE_MIN_FRACTION", n_free / p.n_points)
    assert resolve_start("auto", "block", p) == "coarse-free"
    monkeypatch.setattr(
        "npkl_dist.solvers.bcd._start.FREE_MIN_FRACTION", (n_free + 1) / p.n_points
    )
    assert resolve_start("auto", "block", p) == "coarse"
    assert resolve_start("auto", "sweeps", p) == "random"
    assert resolve_start("spectral", "block", p) == "spectral"


# -- start='coarse-free': the block solver's own hierarchy of L_UU -------------------------


def _free_reference(p, layout, prep, rank):
    """Dense references of the coarse-free start: the hierarchy's coarsest operator rebuilt
    by scipy products, its bottom eigenvectors, E_U = T_0 T_1 ... X, the C rows by one
    dense Jacobi step, and tr(Eᵀ L E)."""
    from npkl_dist.solvers.block._precond import free_hierarchy

    nu = layout.n_free
    n = p.n_points
    L = (
        sp.csr_matrix((prep.data, prep.indices, prep.indptr), shape=(n, n)) + sp.diags(prep.diag)
    ).toarray()
    h = free_hierarchy(prep, nu)
    A = L[:nu, :nu]
    T = np.eye(nu)
    for lev in h.levels[:-1]:
        P = lev.P.toarray()
        # tentative prolongators: one entry per row, orthonormal columns
        assert np.all(np.count_nonzero(P, axis=1) <= 1)
        np.testing.assert_allclose(P.T @ P, np.eye(P.shape[1]), atol=1e-12)
        A = P.T @ A @ P
        T = T @ P
    np.testing.assert_allclose(
        h.levels[-1].A.toarray(), A, rtol=1e-10, atol=1e-12 * np.abs(A).max()
    )
    w, X = np.linalg.eigh(A)
    k = min(rank, A.shape[0])
    E = np.zeros((n, rank))
    E[:nu, :k] = T @ X[:, :k]
    E[nu:] = -(L[nu:, :nu] @ E[:nu]) / prep.diag[nu:, None]
    return L, E, w[:k], float(np.trace(E.T @ L @ E))


@pytest.mark.parametrize("loss", ["square", "squared_hinge", "hinge"])
def test_free_start_against_dense_references(loss, global_random_seed):
    from npkl_dist.problem._objective import loss_fn
    from npkl_dist.solvers.bcd._setup import _build
    from npkl_dist.solvers.bcd._start import _internal_free_start

    p = _mixture_problem(global_random_seed, loss=loss, n=2500, rank=5, frac=0.1)
    _, layout, prep = _build(p, "block", InProcessExecutor(2), "rcm", "blocks", None)
    L, E, w, a = _free_reference(p, layout, prep, p.rank)
    V = _internal_free_start(p, prep, layout, None)
    # V = sqrt(s) E up to the sign of each eigenvector
    s = float(np.sum(V * V) / np.sum(E * E))
    signs = np.sign(np.sum(V * E, axis=0))
    np.testing.assert_allclose(V, np.sqrt(s) * E * signs, rtol=1e-7, atol=1e-9 * np.abs(V).max())
    # the scale: the ray's optimum of the problem's own objective, floored at a mean row
    # norm of MIN_ROW_NORM (and inside the ball for the linear loss)
    z = p.constraints.t * np.einsum("kr,kr->k", E[prep.pi], E[prep.pj])
    lf = loss_fn(loss)

    def f(t):
        return t * a + p.gamma * float(np.sum(lf(t * z)))

    floor = MIN_ROW_NORM**2 * p.n_points / np.sum(E * E)
    grid = np.concatenate([np.linspace(0, 4 * max(s, floor), 4001), [s]])
    best = min(f(t) for t in grid if t >= floor * (1 - 1e-12))
    assert s >= floor * (1 - 1e-9)
    assert f(s) <= best + 1e-7 * abs(best) + 1e-12
    # tr(Eᵀ L E) from the Galerkin eigenvalues and the C rows' terms
    from npkl_dist.solvers.bcd._coarse_start import _fill_constrained_rows

    E2 = np.zeros_like(E)
    E2[: layout.n_free] = E[: layout.n_free]
    terms = np.empty(p.n_points - layout.n_free)
    _fill_constrained_rows(
        prep.indptr, prep.indices, prep.data, prep.diag, layout.n_free, E2, terms
    )
    np.testing.assert_allclose(E2, E, rtol=1e-10, atol=1e-13)
    assert np.sum(w) + np.sum(terms) == pytest.approx(a, rel=1e-9)


def test_free_start_shares_the_preconditioners_hierarchy(global_random_seed):
    """A standalone block fit from 'coarse-free' builds L_UU's hierarchy once, for its start
    and its preconditioner: bitwise the fit given that start (whose session builds the
    hierarchy itself), through a setup too, and the start from initial_V is the fit's."""
    from npkl_dist.solvers.block import _precond as _blocksolve_precond

    p = _mixture_problem(global_random_seed, n=3000, rank=4, frac=0.04)
    ex = InProcessExecutor(2)
    kw = dict(method="block", max_sweeps=5, tol=0, executor=ex)
    built = []
    orig = _blocksolve_precond.plain_aggregation_hierarchy

    def counting(*a, **k):
        built.append(a[0].shape[0])
        return orig(*a, **k)

    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore", ConvergenceWarning)
        mp.setattr("npkl_dist.solvers.block._precond.plain_aggregation_hierarchy", counting)
        got = fit_bcd(p, start="coarse-free", **kw)
        assert len(built) == 1  # the start's, taken by the preconditioner
        V0 = initial_V(p, np.random.default_rng(0), "coarse-free")
        ref = fit_bcd(p, V0=V0, **kw)
        s = fit_setup(p, method="block", executor=ex)
        a = fit_bcd(p, setup=s, start="coarse-free", **kw)
        b = fit_bcd(p, setup=s, start="coarse-free", **kw)  # from the cached basis
        assert ("coarse-free start", p.rank) in s.cache
        assert _blocksolve_precond.HIERARCHY_KEY not in s.cache  # the preconditioner took it
    assert got.start == "coarse-free"
    for other in (ref, a, b):
        assert other.objective_initial == got.objective_initial
        np.testing.assert_array_equal(other.V, got.V)
        assert other.objective_trace == got.objective_trace


def test_free_start_errors():
    p = _mixture_problem(0, n=600, rank=3, frac=0.05)
    with pytest.raises(ValidationError, match="'coarse-free' is a block fit's start"):
        fit_bcd(p, method="sweeps", start="coarse-free", max_sweeps=2)
    q = sparse_constrained_problem(0, "square", n=200, rank=3, frac=1.0)
    with pytest.raises(ValidationError, match="needs at least one point in no constraint"):
        fit_bcd(q, method="block", start="coarse-free", max_sweeps=2)
    assert resolve_start("auto", "block", q) == "coarse"
    lin = _mixture_problem(0, loss="linear", n=600, rank=3, frac=0.05)
    with pytest.raises(ValidationError, match="block fits do not take the linear loss"):
        initial_V(lin, np.random.default_rng(0), "coarse-free")


def test_a_given_hierarchy_must_be_plain_aggregation():
    """AMGPreconditioner takes a prebuilt hierarchy only for plain aggregation (smooth=None):
    a smoothed one would need its own prolongators."""
    from npkl_dist.solvers.bcd._setup import _build
    from npkl_dist.solvers.block._precond import AMGPreconditioner, free_hierarchy

    p = _mixture_problem(0, n=1500, rank=4, frac=0.05)
    _, layout, prep = _build(p, "block", InProcessExecutor(1), "rcm", "blocks", None)
    h = free_hierarchy(prep, layout.n_free)
    with pytest.raises(ValueError, match="a given hierarchy is a plain-aggregation one"):
        AMGPreconditioner(h.levels[0].A, smooth="jacobi", hierarchy=h)
    M = AMGPreconditioner(h.levels[0].A, smooth=None, additive=True, hierarchy=h)
    ref = AMGPreconditioner(h.levels[0].A, smooth=None, additive=True)
    R = np.random.default_rng(0).standard_normal((layout.n_free, 3))
    Z, Zref = np.empty_like(R), np.empty_like(R)
    M.apply_to(R, Z)
    ref.apply_to(R, Zref)
    np.testing.assert_array_equal(Z, Zref)


def test_prolong_into_out_and_the_starts_scaling_passes(global_random_seed):
    """prolong(out=) writes the finest level's rows into the caller's array, bitwise what it
    returns without; a wrong out is refused. The start's compiled scaling of E in place."""
    from npkl_dist.solvers.bcd._coarse_start import _scale_in_place

    p = _mixture_problem(global_random_seed, loss="square", n=2500, rank=5, frac=0.1)
    off, diag = _split(p.L)
    basis = coarse_basis(off.indptr, off.indices, off.data, diag, rank=5)
    assert basis.aggs  # levels to prolongate through
    want = prolong(basis, 5)
    out = np.full((p.n_points + 3, 5), np.nan)
    got = prolong(basis, 5, out=out[: p.n_points])
    assert np.shares_memory(got, out)
    np.testing.assert_array_equal(out[: p.n_points], want)
    assert np.isnan(out[p.n_points :]).all()
    with pytest.raises(ValueError, match="out"):
        prolong(basis, 5, out=np.empty((p.n_points, 4)))
    from npkl_dist.solvers.bcd._coarse_start import free_basis, free_start
    from npkl_dist.solvers.bcd._setup import _build
    from npkl_dist.solvers.block._precond import free_hierarchy

    _, layout, prep = _build(p, "block", InProcessExecutor(1), "rcm", "blocks", None)
    fb = free_basis(free_hierarchy(prep, layout.n_free), 5)
    args = (
        prep.indptr,
        prep.indices,
        prep.data,
        prep.diag,
        layout.n_free,
        prep.pi,
        prep.pj,
        prep.pt,
        fb,
    )
    kw = dict(rank=5, loss="square", gamma=p.gamma, bound=p.bound)
    buf = np.empty((p.n_points, 5))
    V = free_start(*args, **kw, out=buf)
    assert V is buf  # float64: the start is the buffer itself
    np.testing.assert_array_equal(V, free_start(*args, **kw))
    for bad in (
        np.empty((p.n_points, 4)),
        np.empty((p.n_points, 5), np.float32),
        np.empty((5, p.n_points)).T,
    ):
        with pytest.raises(ValueError, match="free_start: out must be"):
            free_start(*args, **kw, out=bad)
    rng = np.random.default_rng(global_random_seed)
    E = rng.standard_normal((10_001, 7)) * np.exp(rng.uniform(-20, 20, (10_001, 1)))
    F = E.copy()
    _scale_in_place(F, 0.37)
    np.testing.assert_array_equal(F, E * 0.37)


def test_start_does_not_depend_on_the_blas_thread_count():
    """Two connected components give L two eigenvalues equal up to rounding (the shift each):
    LAPACK's order and signs then follow its rounding, which follows the BLAS thread count.
    The start is computed on one BLAS thread, so that a resume in a process whose BLAS runs
    on another count (a library or test left it at one) reproduces the fit bit for bit (the
    fault-injection matrix of tests/flows/test_integrity.py failed so on CI)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.7, size=(100, 5)) for c in (0, 2, 4)])
    y = np.repeat(np.arange(3), 100)
    g = nk.knn_graph(X, 10, warn=False)
    assert g.n_components == 2
    p = nk.NPKLProblem.build(g.laplacian(), nk.sample_constraints(y, seed=0), rank=6, seed=0)
    starts = []
    for threads in (1, 2, 1):
        with threadpool_limits(threads, user_api="blas"):
            starts.append(initial_V(p, np.random.default_rng(0), "coarse"))
    for V in starts[1:]:
        np.testing.assert_array_equal(V, starts[0])
