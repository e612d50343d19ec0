"""The KL-ADMM benchmarks run, and check what they claim to check: the blocked sparse
products of ``bench/admm_spmm_blocks.py`` give the library's row-wise sums bit for bit (the
script refuses to time forms that differ), and ``bench/admm_ab.py`` compares an earlier
commit's package with the working tree on the harness's inputs and reports V's equality."""

import subprocess

import numpy as np
import pytest
import scipy.sparse as sp


def _csr(n, seed):
    """A symmetric off-diagonal pattern (about 12 neighbours a row), negative weights, and
    a positive diagonal: a Laplacian's split form."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=6.0 / n, random_state=np.random.RandomState(seed), format="csr")
    A = (A + A.T).tocsr()
    A.setdiag(0.0)
    A.eliminate_zeros()
    A.data = -np.abs(A.data)
    diag = rng.uniform(1.0, 3.0, n)
    return (A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, diag)


@pytest.mark.parametrize("r", [1, 15, 16, 37, 48])
def test_blocked_products_equal_the_row_wise_product_bitwise(r):
    from bench import admm_spmm_blocks as b  # a broken bench fails here, not skips

    n = 300
    indptr, indices, data, diag = _csr(n, r)
    X = np.random.default_rng(r).standard_normal((n, r))
    ref = np.empty((n, r))
    b.row_wise(indptr, indices, data, diag, X, ref)
    dense = sp.csr_matrix((data, indices, indptr), shape=(n, n)) + sp.diags(diag)
    np.testing.assert_allclose(ref, dense @ X, rtol=1e-12, atol=1e-12)
    for form in ("blocks16", "blocks16_packed"):
        Y = np.full((n, r), np.nan)
        if form == "blocks16":
            b.blocks16(indptr, indices, data, diag, X, Y)
        else:
            b.blocks16_packed(indptr, indices, data, diag, X, Y,
                              np.empty((max(r // 16, 1), n, 16)))
        assert np.array_equal(Y, ref), form


def _git_head_available():
    try:
        subprocess.run(["git", "rev-parse", "HEAD"], check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


@pytest.mark.heavy
@pytest.mark.skipif(not _git_head_available(), reason="needs the repository's git history")
@pytest.mark.parametrize("threads", [1, 2])
def test_admm_ab_compares_head_with_the_tree(capsys, threads):
    import numba

    from bench import admm_ab  # a broken bench fails here, not skips

    before = numba.get_num_threads()
    try:
        admm_ab.main(["--base", "HEAD", "--datasets", "chessboard", "--rounds", "2",
                      "--min-seconds", "0", "--threads", str(threads)])
    finally:
        numba.set_num_threads(before)
    out = capsys.readouterr().out
    assert f"2 rounds, {threads} thread(s)" in out
    row = [line for line in out.splitlines() if line.startswith("| chessboard")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[1:4] == ["100", "25", "444"]  # n, rank, the harness's iterations (rep 0)
    assert cells[-1] == "yes"  # the tree's V equals HEAD's bit for bit
    assert float(cells[4]) > 0 and float(cells[5]) > 0


def test_admm_ab_refuses_more_threads_than_numba_has(capsys):
    import numba

    from bench import admm_ab

    with pytest.raises(SystemExit):
        admm_ab.main(["--base", "HEAD", "--threads", str(numba.config.NUMBA_NUM_THREADS + 1)])
    assert "--threads: expected 1 ..." in capsys.readouterr().err
