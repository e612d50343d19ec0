"""The plain-aggregation hierarchy's compiled Galerkin product against scipy's products as
pyamg forms them (bit for bit: values, the order of each row's entries, the pattern), and the
hierarchy against pyamg's own ``smoothed_aggregation_solver``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from test_reference import connected_knn_laplacian

from npkl_dist.linalg._aggregation import (
    _single_entry_columns,
    galerkin_plain,
    plain_aggregation_hierarchy,
)


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


def _pyamg_product(A, T):
    """``R @ A @ P`` as pyamg forms a coarse operator: BSR (1 x 1 blocks) prolongator, its
    BSR transpose, scipy's products; as CSR in scipy's stored order."""
    P = sp.bsr_matrix(T, blocksize=(1, 1))
    return sp.csr_matrix(P.T @ A @ P)


def _assert_same_csr(ptr, idx, val, want):
    np.testing.assert_array_equal(ptr, want.indptr)
    np.testing.assert_array_equal(idx, want.indices)
    np.testing.assert_array_equal(val, want.data)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_galerkin_plain_is_scipys_product_bit_for_bit(index_dtype, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    n, nc = 700, 53
    A = _symmetric(n, 0.02, rng)
    # rows in a scrambled order: the product reads A's entries in their stored order
    for i in range(n):
        sl = slice(A.indptr[i], A.indptr[i + 1])
        o = rng.permutation(sl.stop - sl.start)
        A.indices[sl], A.data[sl] = A.indices[sl][o], A.data[sl][o]
    A.has_sorted_indices = False
    agg, t, T = _tentative(n, nc, rng)
    want = _pyamg_product(A, T)
    assert not want.has_sorted_indices  # the order checked below is scipy's, not sorted
    for chunks in (1, 3, 64):
        for serial in (False, True):  # serial: the compilation without threads
            ptr, idx, val = galerkin_plain(
                A.indptr.astype(index_dtype),
                A.indices.astype(index_dtype),
                A.data,
                agg,
                t,
                nc,
                n_chunks=chunks,
                serial=serial,
            )
            _assert_same_csr(ptr, idx, val, want)
    np.testing.assert_allclose(
        sp.csr_matrix((val, idx, ptr), shape=(nc, nc)).toarray(),
        (T.T @ A @ T).toarray(),
        rtol=1e-12,
        atol=1e-13 * np.abs(want.data).max(),
    )


def test_galerkin_plain_drops_cancelling_sums_as_scipy_does():
    """An entry whose terms cancel exactly is not stored, as scipy's products store none;
    also where the cancellation is in Tᵀ A (the first product), which changes the order in
    which the second product meets the columns. The pattern is what the next level's
    aggregation reads."""
    A = sp.csr_matrix(np.array([[2.0, 1.0, -1.0], [1.0, 2.0, 0.0], [-1.0, 0.0, 2.0]]))
    agg = np.array([0, 1, 1])
    t = np.ones(3)
    T = sp.csr_matrix((t, (np.arange(3), agg)), shape=(3, 2))
    want = _pyamg_product(A, T)
    assert want.nnz == 2
    _assert_same_csr(*galerkin_plain(A.indptr, A.indices, A.data, agg, t, 2), want)
    # (Tᵀ A)[0, 2] = 1 * 3 + 1 * (-3) = 0 exactly: dropped before the second product
    A = sp.csr_matrix(
        np.array(
            [
                [1.0, 0.0, 3.0, 1.0],
                [0.0, 1.0, -3.0, 2.0],
                [3.0, -3.0, 1.0, 0.0],
                [1.0, 2.0, 0.0, 1.0],
            ]
        )
    )
    agg = np.array([0, 0, 1, 2])
    t = np.ones(4)
    T = sp.csr_matrix((t, (np.arange(4), agg)), shape=(4, 3))
    want = _pyamg_product(A, T)
    # 10 distinct (row, column) pairs in Tᵀ A, one of them an exact zero
    assert (sp.csr_matrix(sp.bsr_matrix(T, blocksize=(1, 1)).T @ A)).nnz == 9
    _assert_same_csr(*galerkin_plain(A.indptr, A.indices, A.data, agg, t, 3), want)


def test_single_entry_columns_refuses_a_smoothed_prolongator():
    T = sp.csr_matrix(np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="more than one entry"):
        _single_entry_columns(T)
    agg, t = _single_entry_columns(sp.csr_matrix(np.array([[0.0, 0.0], [0.0, 2.0]])))
    assert list(agg) == [-1, 1] and list(t) == [0.0, 2.0]


def _knn_operator(n, seed):
    rng = np.random.default_rng(seed)
    A = connected_knn_laplacian(rng.standard_normal((n, 3)), 8) + sp.identity(n) * 1e-3
    return sp.csr_matrix(A, dtype=np.float64)


@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("n,max_coarse", [(3000, 50), (8000, 20)])
def test_hierarchy_is_pyamgs_bit_for_bit(n, max_coarse, early, global_random_seed, monkeypatch):
    """Every level's operator (values, pattern, the order of the entries) and prolongator is
    pyamg's ``smoothed_aggregation_solver(..., strength=None, smooth=None)``'s; ``early``:
    with the finest level's counts from the thread beside the relaxation (used, and equal
    to a count after it)."""
    import pyamg

    from npkl_dist.linalg import _aggregation

    A = _knn_operator(n, global_random_seed)
    used = []
    if early:
        monkeypatch.setattr(_aggregation, "OVERLAP_MIN_ROWS", 1)
        real = _aggregation._EarlyStructure.result

        def result(self, agg):
            out = real(self, agg)
            used.append(out is not None)
            return out

        monkeypatch.setattr(_aggregation._EarlyStructure, "result", result)
    mine = plain_aggregation_hierarchy(A, max_coarse, 10)
    assert used == ([True] if early else [])
    ml = pyamg.smoothed_aggregation_solver(
        A, symmetry="hermitian", strength=None, smooth=None, max_coarse=max_coarse, max_levels=10
    )
    assert len(mine.levels) == len(ml.levels) >= 3
    for lev, ref in zip(mine.levels, ml.levels):
        Ar = sp.csr_matrix(ref.A)
        _assert_same_csr(lev.A.indptr, lev.A.indices, lev.A.data, Ar)
        if lev is mine.levels[-1]:
            assert lev.P is None
        else:
            Pr = sp.csr_matrix(ref.P)
            _assert_same_csr(lev.P.indptr, lev.P.indices, lev.P.data, Pr)
    assert mine.operator_complexity() == pytest.approx(ml.operator_complexity(), rel=1e-12)
    serial = plain_aggregation_hierarchy(A, max_coarse, 10, serial=True)
    for a, b in zip(serial.levels, mine.levels):
        _assert_same_csr(a.A.indptr, a.A.indices, a.A.data, b.A)


def test_small_matrix_is_its_own_coarsest_level():
    A = _knn_operator(300, 0)
    h = plain_aggregation_hierarchy(A, 500, 10)
    assert len(h.levels) == 1 and h.levels[0].P is None
    assert h.operator_complexity() == 1.0


def test_early_structure_is_the_count_after_and_refuses_other_aggregates():
    """The thread's (gptr, grows, counts) equal galerkin_structure's; result() with other
    aggregates gives None (the caller counts again); an error in the thread is raised by
    result()."""
    from npkl_dist.linalg._aggregation import _EarlyStructure, galerkin_structure

    rng = np.random.default_rng(3)
    A = _symmetric(500, 0.03, rng)
    agg = rng.integers(-1, 40, 500)
    early = _EarlyStructure(A, agg, 40)
    got = early.result(agg.copy())
    for a, b in zip(got, galerkin_structure(A.indptr, A.indices, agg, 40)):
        np.testing.assert_array_equal(a, b)
    other = agg.copy()
    other[0] = (other[0] + 1) % 40
    assert _EarlyStructure(A, agg, 40).result(other) is None
    with pytest.raises(AttributeError):
        _EarlyStructure(None, agg, 40).result(agg)  # no matrix: raised in the thread
