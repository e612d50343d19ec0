"""The block solve's set-up operators against scipy/numpy references."""

import numpy as np
import pytest
import scipy.sparse as sp

from npkl_dist._blocksolve import constrained_columns, free_matrix, free_operator


def _reference_entries(indptr, indices, data, nu, keep_fn, rename_fn):
    end = int(indptr[nu])
    rows = np.repeat(np.arange(nu), np.diff(indptr[:nu + 1]))
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
def test_setup_operators_equal_the_numpy_and_scipy_references(seed, dtype, n_halo,
                                                              n_free_halo):
    n_own, nu = 120, 90
    M, diag = _part(seed, n_own, nu, n_halo, n_free_halo, dtype)
    ip, ix, da = M.indptr.astype(np.int64), M.indices.astype(np.int64), M.data

    got = free_operator(ip, ix, da, nu, n_own, n_free_halo)
    ref = _reference_entries(
        ip, ix, da, nu,
        lambda c: (c < nu) | ((c >= n_own) & (c < n_own + n_free_halo)),
        lambda c: np.where(c < nu, c, c - n_own + nu))
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and np.array_equal(g, r)

    got = constrained_columns(ip, ix, da, nu, n_own, n_free_halo)
    ref = _reference_entries(
        ip, ix, da, nu,
        lambda c: ((c >= nu) & (c < n_own)) | (c >= n_own + n_free_halo), lambda c: c)
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
    for fn, args in ((free_operator, (ip, ix, da, nu, n_own, n_free_halo)),
                     (constrained_columns, (ip, ix, da, nu, n_own, n_free_halo))):
        for g, r in zip(fn(*args, serial=True), fn(*args)):
            assert g.dtype == r.dtype and np.array_equal(g, r)
    ser = free_matrix(A_ptr, A_idx, A_data, A_diag, serial=True)
    for attr in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(ser, attr), getattr(got, attr))

