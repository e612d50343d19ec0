"""The block solve's set-up operators against scipy/numpy references."""

import numpy as np
import pytest
import scipy.sparse as sp

from npkl_dist.solvers.block._layout import constrained_columns, free_matrix, free_operator


def _reference_entries(indptr, indices, data, nu, keep_fn, rename_fn):
    end = int(indptr[nu])
    rows = np.repeat(np.arange(nu), np.diff(indptr[: nu + 1]))
    cols = np.asarray(indices[:end], np.int64)
    vals = np.asarray(data[:end], np.float64)
    keep = keep_fn(cols)
    ptr = np.zeros(nu + 1, np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=nu), out=ptr[1:])
    return ptr, rename_fn(cols)[keep], vals[keep]


def _part(seed, n_own, nu, n_halo, n_free_halo, dtype):
    """A partition's off-diagonal rows (own rows; columns over own + halo), sorted, with a
    few explicit zeros."""
    rng = np.random.default_rng(seed)
    n_loc = n_own + n_halo
    M = sp.random(n_own, n_loc, density=0.08, random_state=seed, format="csr", dtype=dtype)
    M = M.tolil()
    M.setdiag(0)
    M = M.tocsr()
    M.eliminate_zeros()
    M.sort_indices()
    zero = rng.random(M.nnz) < 0.05
    M.data[zero] = 0  # explicit zeros stay in the structure
    diag = rng.uniform(1, 2, n_own).astype(dtype)
    return M, diag


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_halo,n_free_halo", [(0, 0), (30, 12), (25, 25), (20, 0)])
def test_setup_operators_equal_the_numpy_and_scipy_references(seed, dtype, n_halo, n_free_halo):
    n_own, nu = 120, 90
    M, diag = _part(seed, n_own, nu, n_halo, n_free_halo, dtype)
    ip, ix, da = M.indptr.astype(np.int64), M.indices.astype(np.int64), M.data

    got = free_operator(ip, ix, da, nu, n_own, n_free_halo)
    ref = _reference_entries(
        ip,
        ix,
        da,
        nu,
        lambda c: (c < nu) | ((c >= n_own) & (c < n_own + n_free_halo)),
        lambda c: np.where(c < nu, c, c - n_own + nu),
    )
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and np.array_equal(g, r)

    got = constrained_columns(ip, ix, da, nu, n_own, n_free_halo)
    ref = _reference_entries(
        ip,
        ix,
        da,
        nu,
        lambda c: ((c >= nu) & (c < n_own)) | (c >= n_own + n_free_halo),
        lambda c: c,
    )
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and np.array_equal(g, r)

    # the AMG matrix: the own U block plus the diagonal, as scipy forms it
    A_ptr, A_idx, A_data = free_operator(ip, ix, da, nu, n_own, n_free_halo)
    A_diag = np.asarray(diag[:nu], np.float64)
    own = A_idx < nu
    rows = np.repeat(np.arange(nu), np.diff(A_ptr))
    A = sp.csr_matrix((A_data[own], (rows[own], A_idx[own])), shape=(nu, nu))
    ref = (A + sp.diags(A_diag)).tocsr()
    got = free_matrix(A_ptr, A_idx, A_data, A_diag)
    assert got.has_canonical_format
    assert np.array_equal(got.indptr, ref.indptr)
    assert np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data)  # bitwise: the same hierarchy follows
    assert (got != ref).nnz == 0
    # the serial compilations (Dask block actors) give the same arrays
    for fn, args in (
        (free_operator, (ip, ix, da, nu, n_own, n_free_halo)),
        (constrained_columns, (ip, ix, da, nu, n_own, n_free_halo)),
    ):
        for g, r in zip(fn(*args, serial=True), fn(*args)):
            assert g.dtype == r.dtype and np.array_equal(g, r)
    ser = free_matrix(A_ptr, A_idx, A_data, A_diag, serial=True)
    for attr in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(ser, attr), getattr(got, attr))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sort_rows", [True, False])
def test_whole_free_blocks_equal_the_three_selections(seed, dtype, sort_rows):
    """An in-process fit's one pass (operator, AMG matrix, C columns) gives the arrays of
    free_operator, free_matrix over it and constrained_columns, bit for bit: explicit
    zeros, a zero diagonal entry, float32 data, rows stored sorted or not."""
    from npkl_dist.solvers.block._layout import whole_free_blocks

    n, nu = 150, 110
    M, diag = _part(seed, n, nu, 0, 0, dtype)
    M = (M + M.T).tocsr()
    M.sort_indices()
    M.data[::9] = 0  # explicit zeros stay in the structure
    diag[3] = 0  # a zero diagonal entry is dropped from the AMG matrix
    rng = np.random.default_rng(seed)
    ip, ix, da = M.indptr.astype(np.int64), M.indices.astype(np.int64), M.data.copy()
    if not sort_rows:
        for i in range(n):
            sl = slice(ip[i], ip[i + 1])
            p = rng.permutation(sl.stop - sl.start)
            ix[sl], da[sl] = ix[sl][p], da[sl][p]
    assert np.count_nonzero(da == 0) > 0
    ops, A, uc = whole_free_blocks(ip, ix, da, diag, nu)
    want_ops = free_operator(ip, ix, da, nu, n, 0)
    if sort_rows:  # A is the operator too
        assert ops is None
    else:
        for g, r in zip(ops, want_ops):
            assert g.dtype == r.dtype and np.array_equal(g, r)
    for g, r in zip(uc, constrained_columns(ip, ix, da, nu, n, 0)):
        assert g.dtype == r.dtype and np.array_equal(g, r)
    ref = free_matrix(*want_ops, np.asarray(diag[:nu], np.float64))
    assert A.has_canonical_format
    # int32 indices (scipy's own choice for this size: the CSR holds them without a copy)
    assert A.indices.dtype == np.int32 and A.indptr.dtype == np.int32
    for g, r in ((A.indptr, ref.indptr), (A.indices, ref.indices), (A.data, ref.data)):
        assert np.array_equal(g, r)
    assert A[3, 3] == 0 and 3 not in A.indices[A.indptr[3] : A.indptr[4]]
    # the diagonal and Gershgorin ratios from the same pass: _diag_gershgorin's, bitwise
    from npkl_dist.solvers.block._kernels import _diag_gershgorin

    bounds = (np.full(nu, np.nan), np.full(nu, np.nan))
    _, A2, _ = whole_free_blocks(ip, ix, da, diag, nu, bounds)
    d, ratio = np.empty(nu), np.empty(nu)
    _diag_gershgorin(A2.indptr, A2.indices, A2.data, d, ratio)
    assert d.tobytes() == bounds[0].tobytes() and ratio.tobytes() == bounds[1].tobytes()
    assert bounds[0][3] == 0 and bounds[1][3] == 0 and np.all(bounds[1][d > 0] >= 1)
    with pytest.raises(ValueError, match="bounds"):
        whole_free_blocks(ip, ix, da, diag, nu, (np.empty(nu), np.empty(nu - 1)))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pdtype", [np.float64, np.float32])
def test_product_over_the_amg_matrix_is_the_operators(seed, pdtype):
    """Where the rows are stored sorted, the product with L_UU read from the AMG matrix
    (its diagonal entries skipped) gives the operator's Q and sums bit for bit: explicit
    zeros the canonical form dropped, a zero diagonal, rows with no entry left or right of
    the diagonal, rows of more than four entries each side (the four-neighbour passes)."""
    from npkl_dist.solvers.block._kernels import RB, _matvec_dot
    from npkl_dist.solvers.block._layout import whole_free_blocks

    n, nu = 300, 260
    M, diag = _part(seed, n, nu, 0, 0, np.float64)
    rng = np.random.default_rng(seed)
    M = (M + M.T + sp.random(n, n, density=0.06, random_state=seed)).tocsr()
    M = (M + M.T).tocsr()
    M.setdiag(0)
    M.eliminate_zeros()
    M.sort_indices()
    M.data[::7] = 0
    diag[5] = 0
    ip, ix, da = M.indptr.astype(np.int64), M.indices.astype(np.int64), M.data.copy()
    ops, A, _ = whole_free_blocks(ip, ix, da, diag, nu)
    assert ops is None
    optr, oidx, oval = free_operator(ip, ix, da, nu, n, 0)
    rows = np.repeat(np.arange(nu), np.diff(optr))
    left = np.bincount(rows[oidx < rows], minlength=nu)
    right = np.bincount(rows[oidx > rows], minlength=nu)
    assert left[0] == 0 and ((left > 8) & (right > 8)).any()
    d = np.asarray(diag[:nu], np.float64)
    P = rng.standard_normal((nu, 5)).astype(pdtype)
    n_ch = (nu + RB - 1) // RB
    Q1, Q2 = np.empty((nu, 5)), np.empty((nu, 5))
    s1, s2 = np.empty((n_ch, 5)), np.empty((n_ch, 5))
    _matvec_dot(optr, oidx, oval, d, P, Q1, s1)
    _matvec_dot(A.indptr, A.indices, A.data, d, P, Q2, s2, True)
    assert Q1.tobytes() == Q2.tobytes() and s1.tobytes() == s2.tobytes()
    Ad = free_matrix(optr, oidx, oval, d).toarray()
    np.testing.assert_allclose(Q2, Ad @ P.astype(np.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("start", ["random", "coarse-free"])
@pytest.mark.parametrize("precond", ["amg-additive", "amg-plain", "jacobi"])
def test_fit_through_the_one_pass_equals_the_three_selections(monkeypatch, start, precond):
    """A block fit whose set-up takes the operator, the C columns and the AMG matrix from
    whole_free_blocks (the session's, or the coarse-free start's) is bitwise the fit from the
    three separate selections; the AMG matrix does not outlive the preconditioner's set-up."""
    import warnings

    from test_blocksolve import sparse_constrained_problem

    from npkl_dist import ConvergenceWarning, fit_bcd, fit_setup
    from npkl_dist.executors import InProcessExecutor
    from npkl_dist.solvers.block import _kernels as _blocksolve_kernels
    from npkl_dist.solvers.block import _layout as _blocksolve_layout
    from npkl_dist.solvers.block import _precond as _blocksolve_precond

    p = sparse_constrained_problem(5, "square", n=700, frac=0.05)
    ex = InProcessExecutor(2)
    kw = dict(method="block", max_sweeps=6, tol=0, start=start, precond=precond, executor=ex)
    calls = []
    one_pass = _blocksolve_layout.whole_free_blocks

    def counted(*a):
        calls.append(a[5:])  # the bounds (diagonal, Gershgorin ratio) it was asked for
        return one_pass(*a)

    def three(indptr, indices, data, diag, nu, bounds=None):
        n = diag.shape[0]
        ops = free_operator(indptr, indices, data, nu, n, 0)
        A = free_matrix(*ops, np.asarray(diag[:nu], np.float64))
        if bounds is not None:  # the preconditioner's own pass over the matrix
            _blocksolve_kernels._diag_gershgorin(A.indptr, A.indices, A.data, *bounds)
        return ops, A, constrained_columns(indptr, indices, data, nu, n, 0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        monkeypatch.setattr("npkl_dist.solvers.block._precond.whole_free_blocks", counted)
        got = fit_bcd(p, **kw)
        assert len(calls) == 1
        setup = fit_setup(p, method="block", executor=ex)
        via_setup = fit_bcd(p, setup=setup, **kw)
        assert _blocksolve_precond._AMG_MATRIX_KEY not in setup.cache
        assert _blocksolve_precond._FINEST_BOUNDS_KEY not in setup.cache
        if precond != "jacobi":  # the finest level took the one pass's diagonal
            (bounds,) = calls[-1]
            M = setup.cache[("precond", precond, False)]
            assert M.levels[0]["diag"] is bounds[0]
        monkeypatch.setattr("npkl_dist.solvers.block._precond.whole_free_blocks", three)
        want = fit_bcd(p, **kw)
    assert np.array_equal(got.V, want.V) and np.array_equal(via_setup.V, want.V)
    assert got.objective_trace == want.objective_trace
