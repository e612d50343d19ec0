"""The plain-aggregation hierarchy's compiled Galerkin product against scipy's products, and
the hierarchy against pyamg's steps run with scipy's products (the slow reference)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from npkl_dist._aggregation import (IMPROVE_CANDIDATES, _single_entry_columns, galerkin_plain,
                                    plain_aggregation_hierarchy)
from test_reference import connected_knn_laplacian


def _symmetric(n, density, rng):
    M = sp.random(n, n, density=density, random_state=np.random.RandomState(rng.integers(2**31)))
    M = (M + M.T).tocsr()
    M.data[:] = rng.standard_normal(M.nnz)
    M = (M + M.T).tocsr()
    M.sum_duplicates()
    M.eliminate_zeros()
    return M


def _tentative(n, n_coarse, rng, empty=0.1):
    """A prolongator with one entry per row (random aggregate and weight), some rows empty."""
    agg = rng.integers(0, n_coarse, n)
    agg[rng.random(n) < empty] = -1
    agg[:n_coarse] = np.arange(n_coarse)  # every aggregate non-empty
    t = rng.standard_normal(n)
    t[agg < 0] = 0.0
    has = agg >= 0
    T = sp.csr_matrix((t[has], (np.flatnonzero(has), agg[has])), shape=(n, n_coarse))
    return agg, t, T


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_galerkin_plain_is_scipys_product(index_dtype, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    n, nc = 700, 53
    A = _symmetric(n, 0.02, rng)
    agg, t, T = _tentative(n, nc, rng)
    want = (T.T @ A @ T).tocsr()
    want.sort_indices()
    results = []
    for chunks in (1, 3, 64):
        ptr, idx, val = galerkin_plain(A.indptr.astype(index_dtype),
                                       A.indices.astype(index_dtype), A.data, agg, t, nc,
                                       n_chunks=chunks)
        got = sp.csr_matrix((val, idx, ptr), shape=(nc, nc))
        # rows sorted, one entry per column
        for a in range(nc):
            assert np.all(np.diff(idx[ptr[a]:ptr[a + 1]]) > 0)
        np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-13,
                                   atol=1e-13 * np.abs(want.data).max())
        results.append((ptr, idx, val))
    # the chunking does not change a single bit (each row is summed by one thread in order)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_galerkin_plain_drops_cancelling_sums_as_scipy_does():
    """An entry whose terms cancel exactly is not stored, as scipy's products (CSR and
    pyamg's BSR) store none: the pattern is what the next level's aggregation reads."""
    A = sp.csr_matrix(np.array([[2.0, 1.0, -1.0], [1.0, 2.0, 0.0], [-1.0, 0.0, 2.0]]))
    agg = np.array([0, 1, 1])
    t = np.ones(3)
    T = sp.csr_matrix((t, (np.arange(3), agg)), shape=(3, 2))
    for want in ((T.T @ A @ T).tocsr(),
                 (sp.bsr_matrix(T, blocksize=(1, 1)).T @ sp.bsr_matrix(A, blocksize=(1, 1))
                  @ sp.bsr_matrix(T, blocksize=(1, 1))).tocsr()):
        assert want.nnz == 2
    ptr, idx, val = galerkin_plain(A.indptr, A.indices, A.data, agg, t, 2)
    assert list(ptr) == [0, 1, 2] and list(idx) == [0, 1]
    np.testing.assert_array_equal(val, [2.0, 4.0])


def test_single_entry_columns_refuses_a_smoothed_prolongator():
    T = sp.csr_matrix(np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="more than one entry"):
        _single_entry_columns(T)
    agg, t = _single_entry_columns(sp.csr_matrix(np.array([[0.0, 0.0], [0.0, 2.0]])))
    assert list(agg) == [-1, 1] and list(t) == [0.0, 2.0]


def _reference_hierarchy(A, max_coarse, max_levels):
    """pyamg's smooth=None steps with scipy's Galerkin products, rows sorted."""
    from pyamg.aggregation import fit_candidates, standard_aggregation
    from pyamg.relaxation.utils import relaxation_as_linear_operator

    levels = [[sp.csr_matrix(A), None]]
    B = np.ones((A.shape[0], 1))
    while len(levels) < max_levels and levels[-1][0].shape[0] > max_coarse:
        Ak = levels[-1][0]
        agg_op = standard_aggregation(Ak)[0]
        if len(levels) == 1:
            Ak.symmetry = "hermitian"
            B = relaxation_as_linear_operator(IMPROVE_CANDIDATES, Ak,
                                              np.zeros((Ak.shape[0], 1))) @ B
        T, B = fit_candidates(agg_op, B)
        T = sp.csr_matrix(T)
        levels[-1][1] = T
        Ac = (T.T @ Ak @ T).tocsr()
        Ac.sort_indices()
        levels.append([Ac, None])
    return levels


def _knn_operator(n, seed):
    rng = np.random.default_rng(seed)
    A = connected_knn_laplacian(rng.standard_normal((n, 3)), 8) + sp.identity(n) * 1e-3
    return sp.csr_matrix(A, dtype=np.float64)


@pytest.mark.parametrize("n,max_coarse", [(3000, 50), (8000, 20)])
def test_hierarchy_is_pyamgs_steps_with_scipys_products(n, max_coarse, global_random_seed):
    A = _knn_operator(n, global_random_seed)
    mine = plain_aggregation_hierarchy(A, max_coarse, 10)
    ref = _reference_hierarchy(A, max_coarse, 10)
    assert len(mine.levels) == len(ref) >= 3
    for lev, (Ar, Pr) in zip(mine.levels, ref):
        assert lev.A.shape == Ar.shape
        # the same pattern (every stored entry) and the same values to rounding
        np.testing.assert_array_equal(lev.A.indptr, Ar.indptr)
        np.testing.assert_array_equal(lev.A.indices, Ar.indices)
        np.testing.assert_allclose(lev.A.data, Ar.data, rtol=1e-12,
                                   atol=1e-13 * np.abs(Ar.data).max())
        if Pr is None:
            assert lev.P is None
        else:  # the aggregates and weights: exactly pyamg's
            np.testing.assert_array_equal(lev.P.toarray(), Pr.toarray())
    oc = sum(a.nnz for a, _ in ref) / ref[0][0].nnz
    assert mine.operator_complexity() == pytest.approx(oc, rel=1e-12)


def test_finest_level_is_pyamgs_own():
    """On the finest level nothing differs from pyamg's smoothed_aggregation_solver: the
    same prolongator bit for bit (the coarse operator is formed from it)."""
    import pyamg

    A = _knn_operator(3000, 3)
    mine = plain_aggregation_hierarchy(A, 50, 10)
    ml = pyamg.smoothed_aggregation_solver(A, symmetry="hermitian", strength=None,
                                           smooth=None, max_coarse=50, max_levels=10)
    np.testing.assert_array_equal(mine.levels[0].P.toarray(),
                                  sp.csr_matrix(ml.levels[0].P).toarray())
    want = sp.csr_matrix(ml.levels[1].A).toarray()
    np.testing.assert_allclose(mine.levels[1].A.toarray(), want, rtol=1e-12,
                               atol=1e-13 * np.abs(want).max())


def test_small_matrix_is_its_own_coarsest_level():
    A = _knn_operator(300, 0)
    h = plain_aggregation_hierarchy(A, 500, 10)
    assert len(h.levels) == 1 and h.levels[0].P is None
    assert h.operator_complexity() == 1.0
