"""``bench/tridiag_compiled.py``'s compiled tridiagonalisation (tried against LAPACK, not kept)
is a correct one: its T has A's eigenvalues and its reflectors take T's eigenvectors to A's."""

import numpy as np
import pytest


@pytest.mark.parametrize("n", [3, 4, 5, 9, 30])
def test_reduction_and_back_transformation_against_numpy(n, global_random_seed):
    from bench import tridiag_compiled as tc  # a broken bench fails here, not skips

    err, res = tc.check(n, max(1, n // 3), np.random.default_rng(global_random_seed))
    assert err < 1e-13 and res < 1e-13


@pytest.mark.parametrize("blocks", [(1, 3), (3, 2), (3, 3), (4, 3, 5)])
def test_a_zero_column_gives_an_identity_reflector(blocks, global_random_seed):
    from scipy.linalg import block_diag, eigh_tridiagonal

    from bench import tridiag_compiled as tc

    # a block-diagonal A: where a block ends, the column below the subdiagonal is zero, the
    # reflector is the identity (tau = 0) and the next step forms its product afresh
    rng = np.random.default_rng(global_random_seed)
    parts = [rng.standard_normal((b, b)) for b in blocks]
    A = block_diag(*[p + p.T for p in parts])
    n = A.shape[0]
    M, d, e, tau = A.copy(), np.empty(n), np.empty(n - 1), np.empty(n - 1)
    tc.trd_v4(M, d, e, tau)
    ends = np.cumsum(blocks)[:-1] - 1  # the last row of each block but the last
    assert np.all(e[ends] == 0.0)
    assert np.all(tau[ends[ends < n - 2]] == 0.0)
    w, Z = eigh_tridiagonal(d, e)
    Z = np.ascontiguousarray(Z)
    tc.back_v4(M, tau, Z)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(A), atol=1e-13)
    np.testing.assert_allclose(A @ Z, Z * w, atol=1e-13)


def test_bad_arguments_are_named():
    from bench import tridiag_compiled as tc

    with pytest.raises(SystemExit, match="--runs=0 must be >= 1"):
        tc.main(["--runs", "0"])
