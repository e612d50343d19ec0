"""SimpleNPKL's fast eigensolver path (eigensolver='fast') against the reference ('arpack').

The reference calls ``eigsh(A, k=rank)`` at every kernel step. The fast path computes the
same eigenpairs through scipy's compiled CSR product, keeps only the positive eigenpairs
between slack checks, and runs with one BLAS thread. These tests tie it to the reference
(same iterates, objective and duality-gap certificate) and its pieces to dense ``eigh``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import npkl_dist as nk
from npkl_dist import ConvergenceWarning, ValidationError
from npkl_dist.linalg import _blas as snp_blas
from npkl_dist.solvers.simplenpkl import _eigen as snp_eigen
from npkl_dist.solvers.simplenpkl import _fit as snp_fit
from npkl_dist.solvers.simplenpkl._fit import fit_simplenpkl


@pytest.fixture(autouse=True)
def arpack_fast_path(monkeypatch):
    """These problems (n = 80-150) would take the fast path's dense solve (n <= 160); keep
    them on its sparse path (Lanczos, ARPACK where it fails), which is what they test.
    ``test_small_n_fast_path_is_dense`` covers the dense one."""
    monkeypatch.setattr(snp_eigen, "_FAST_DENSE_MAX_N", 0)


@pytest.fixture
def no_lanczos(monkeypatch):
    """The fast path's sparse solves through ARPACK (its fallback), whose products are
    bitwise the reference's: for the tests that check iterates equal the reference's."""
    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._eigen._SPARSE_LANCZOS", False)
    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._fit._SPARSE_LANCZOS", False)


def medium_problem(seed, loss, n=150, n_pairs=60, k=6, gamma=1.0):
    """kNN graph on a 3-cluster mixture; Pataki rank 10 for 60 pairs (eigsh path)."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    y = rng.integers(0, 3, n)
    X = centers[y] + rng.standard_normal((n, 2))
    g = nk.knn_graph(X, k, warn=False)
    c = nk.sample_constraints(y, n_pairs // 2, n_pairs // 2, seed=seed)
    return nk.NPKLProblem.build(g.laplacian(1e-3), c, loss=loss, gamma=gamma, seed=seed)


def quiet(problem, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit_simplenpkl(problem, **kw)


def _kernel(V):
    return V.astype(np.float64) @ V.T.astype(np.float64)


def _spy_partial(monkeypatch):
    """Count the fast path's partial (positive-only) kernel steps."""
    calls = {"partial": 0, "full": 0}
    orig = snp_eigen._top_eigs_positive

    def spy(A, k, v0, k_try, **kw):
        out = orig(A, k, v0, k_try, **kw)
        calls["full" if out[2] else "partial"] += 1
        return out

    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._fit._top_eigs_positive", spy)
    return calls


# ------------------------------------------------------------ whole fits: fast = reference


@pytest.mark.parametrize("dual", ["alg1", "lbfgs"])
@pytest.mark.parametrize("loss", ["linear", "squared_hinge", "square", "hinge"])
@pytest.mark.parametrize("B, n_pairs", [(10.0, 60), (1000.0, 60), (15000.0, 120)])
def test_fast_fit_matches_the_reference(global_random_seed, loss, B, n_pairs, dual):
    if loss == "linear" and dual == "lbfgs":
        pytest.skip("the linear loss has no dual iteration")
    p = medium_problem(global_random_seed, loss, n_pairs=n_pairs)
    assert p.rank in (10, 15) and not snp_eigen._use_dense(p.n_points, p.rank)
    ref = quiet(p, B=B, eigensolver="arpack", max_iter=60, dual=dual)
    fast = quiet(p, B=B, eigensolver="fast", max_iter=60, dual=dual)
    scale = abs(ref.objective) + 1.0
    assert fast.n_sweeps == ref.n_sweeps
    assert fast.converged == ref.converged
    # 'polished' says which of the last iterate and the refined kernel was lower; L-BFGS-B
    # can end so close to the optimum that the two tie to rounding (hinge, B = 15000:
    # 6.301391454805386 refined vs 6.301391454805391), and then either may be returned
    if fast.polished != ref.polished:
        refined = fast if fast.polished else ref
        assert abs(refined.objective_trace[-1] - refined.objective) <= 1e-12 * scale
    assert abs(fast.objective - ref.objective) <= 1e-6 * scale
    assert abs(fast.duality_gap - ref.duality_gap) <= 1e-6 * scale
    np.testing.assert_allclose(
        fast.objective_trace, ref.objective_trace, rtol=1e-6, atol=1e-9 * scale
    )
    np.testing.assert_allclose(fast.dual_trace, ref.dual_trace, rtol=1e-6, atol=1e-9 * scale)
    np.testing.assert_allclose(fast.eigenvalues, ref.eigenvalues, atol=1e-7)
    # the kernel is less well determined than the objective where the capacity is slack
    np.testing.assert_allclose(
        _kernel(fast.V), _kernel(ref.V), atol=2e-4 * np.abs(_kernel(ref.V)).max() + 1e-12
    )
    assert fast.V.shape == ref.V.shape == (p.n_points, p.rank)


@pytest.mark.parametrize("dual", ["alg1", "lbfgs"])
@pytest.mark.parametrize("loss", ["squared_hinge", "square"])
def test_partial_steps_happen_and_keep_the_iterates(
    global_random_seed, loss, monkeypatch, dual, no_lanczos
):
    """The positive-only steps are exercised (few positive eigenvalues at the end) and every
    iterate equals the reference's; max_iter = 23 ends on a partial step, re-solved in full
    for the certificate and the reported eigenvalues. (ARPACK on both sides: the
    refinement at iteration 10 runs to tol = 0, i.e. 500 FISTA steps per stage, whose
    restarts turn 1e-12 differences of the eigenvectors into 1e-7 ones of the iterates;
    the next test covers Lanczos.)"""
    p = medium_problem(global_random_seed, loss, n_pairs=120)  # rank 15
    B = 100.0 * p.n_points  # the adult setting: few positive eigenvalues after a while
    ref = quiet(p, B=B, eigensolver="arpack", max_iter=23, tol=0.0, dual=dual)
    calls = _spy_partial(monkeypatch)
    fast = quiet(p, B=B, eigensolver="fast", max_iter=23, tol=0.0, dual=dual)
    assert calls["partial"] > 0
    assert fast.n_sweeps == ref.n_sweeps == 23
    assert fast.n_eigsolves >= ref.n_eigsolves
    scale = abs(ref.objective) + 1.0
    np.testing.assert_allclose(fast.objective_trace, ref.objective_trace, rtol=1e-7)
    np.testing.assert_allclose(fast.dual_trace, ref.dual_trace, rtol=1e-7)
    assert abs(fast.objective - ref.objective) <= 1e-6 * scale
    assert abs(fast.duality_gap - ref.duality_gap) <= 1e-6 * scale
    # the final eigenvalues are all rank of them (not padded), as the reference's
    np.testing.assert_allclose(fast.eigenvalues, ref.eigenvalues, atol=1e-7)
    assert len(np.unique(fast.eigenvalues)) == p.rank


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_partial_steps_with_lanczos_follow_the_reference(global_random_seed, loss, monkeypatch):
    """The default fast path (Lanczos for the sparse solves) with partial steps: the
    iterates before the first refinement equal the reference's to 1e-9 (the eigenpairs
    agree to eigsh's tolerance), and the fit ends at the reference's objective."""
    p = medium_problem(global_random_seed, loss, n_pairs=120)
    B = 100.0 * p.n_points
    ref = quiet(p, B=B, eigensolver="arpack", max_iter=23, tol=0.0, dual="alg1")
    calls = _spy_partial(monkeypatch)
    used = []
    real = snp_eigen.lanczos_top_eigs
    monkeypatch.setattr(
        "npkl_dist.solvers.simplenpkl._eigen.lanczos_top_eigs",
        lambda *a, **k: used.append(1) or real(*a, **k),
    )
    fast = quiet(p, B=B, eigensolver="fast", max_iter=23, tol=0.0, dual="alg1")
    assert calls["partial"] > 0 and len(used) >= fast.n_eigsolves
    assert fast.n_sweeps == ref.n_sweeps == 23
    first = snp_fit._SLACK_CHECK - 1  # the trace entry of the first refinement's iteration
    np.testing.assert_allclose(
        fast.objective_trace[:first], ref.objective_trace[:first], rtol=1e-9
    )
    np.testing.assert_allclose(fast.dual_trace[:first], ref.dual_trace[:first], rtol=1e-9)
    scale = abs(ref.objective) + 1.0
    assert abs(fast.objective - ref.objective) <= 1e-6 * scale


def test_module_switch_selects_the_reference(global_random_seed, monkeypatch):
    p = medium_problem(global_random_seed, "squared_hinge")
    seen = []
    orig = snp_eigen._top_eigs

    def spy(A, k, v0, fast=False, **kw):
        seen.append(fast)
        return orig(A, k, v0, fast, **kw)

    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._eigen._top_eigs", spy)
    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._fit._top_eigs", spy)
    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._fit.EIGENSOLVER", "arpack")
    quiet(p, B=10.0, max_iter=5)
    assert seen and not any(seen)
    seen.clear()
    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._fit.EIGENSOLVER", "fast")
    quiet(p, B=10.0, max_iter=5)
    assert seen and all(seen)


@pytest.mark.parametrize("bad", ["lobpcg", "", None.__class__, 3, ["fast"]])
def test_eigensolver_validation(bad):
    p = medium_problem(0, "linear")
    with pytest.raises(ValidationError, match="eigensolver: expected one of 'fast', 'arpack'"):
        fit_simplenpkl(p, eigensolver=bad)


def test_fast_fit_blas_threads(global_random_seed, monkeypatch):
    """One BLAS thread while ARPACK's basis is small, the process's setting above."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    p = medium_problem(global_random_seed, "squared_hinge")
    seen = []

    def blas_threads():
        return max(
            (i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"),
            default=1,
        )

    def cb(*args):
        seen.append(blas_threads())

    before = threadpoolctl.threadpool_info()
    assert p.n_points * (2 * p.rank + 1) <= snp_eigen._ONE_THREAD_MAX_BASIS
    quiet(p, B=10.0, max_iter=3, callback=cb)
    assert seen and max(seen) == 1
    assert threadpoolctl.threadpool_info() == before  # restored
    seen.clear()
    monkeypatch.setattr("npkl_dist.solvers.simplenpkl._fit._ONE_THREAD_MAX_BASIS", 0)
    quiet(p, B=10.0, max_iter=3, callback=cb)
    assert seen and set(seen) == {blas_threads()}


# ---------------------------------------------------------- the pieces against dense eigh


def _random_sparse_symmetric(rng, n, density, spectrum=None):
    """Sparse symmetric matrix; with ``spectrum``: P' diag(spectrum) P + a sparse symmetric
    perturbation-free block structure (2 x 2 rotations keep it sparse, the spectrum exact)."""
    if spectrum is None:
        M = sp.random(n, n, density=density, random_state=rng, format="csr")
        M = (M + M.T) * 0.5 - sp.diags(rng.random(n))
        return M.tocsr()
    # exact spectrum: disjoint 2 x 2 rotations of a diagonal, then a symmetric permutation
    d = np.asarray(spectrum, dtype=np.float64)
    perm = rng.permutation(n)
    rows, cols, vals = [], [], []
    for a in range(0, n - 1, 2):
        th = rng.uniform(0, np.pi)
        c, s = np.cos(th), np.sin(th)
        i, j = perm[a], perm[a + 1]
        # R diag(d_i, d_j) R'
        rows += [i, i, j, j]
        cols += [i, j, i, j]
        vals += [
            c * c * d[i] + s * s * d[j],
            c * s * (d[i] - d[j]),
            c * s * (d[i] - d[j]),
            s * s * d[i] + c * c * d[j],
        ]
    if n % 2:
        rows.append(perm[-1])
        cols.append(perm[-1])
        vals.append(d[perm[-1]])
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def _positive_kernel(sigma, P):
    w = np.maximum(sigma, 0.0)
    return (P * w) @ P.T


def test_csr_operator_products_are_those_of_A(global_random_seed, no_lanczos):
    rng = np.random.default_rng(global_random_seed)
    A = _random_sparse_symmetric(rng, 300, 0.05)
    op = snp_eigen._CSROperator(A)
    x = rng.standard_normal(300)
    np.testing.assert_array_equal(op.matvec(x), A @ x)
    X = rng.standard_normal((300, 4))
    np.testing.assert_array_equal(op.matmat(X), A @ X)
    k = 12
    v0 = rng.standard_normal(300)
    w_ref, P_ref = snp_eigen._top_eigs(A, k, v0)
    w, P = snp_eigen._top_eigs(A, k, v0, fast=True)
    np.testing.assert_array_equal(w, w_ref)  # same products: same ARPACK run
    np.testing.assert_array_equal(P, P_ref)
    dense = np.linalg.eigvalsh(A.toarray())[::-1][:k]
    np.testing.assert_allclose(w, dense, atol=1e-10)


@pytest.mark.parametrize("case", ["random", "degenerate", "clustered"])
def test_positive_eigenpairs_match_dense_eigh(global_random_seed, case):
    rng = np.random.default_rng(global_random_seed)
    n, k = 200, 30
    if case == "random":
        A = _random_sparse_symmetric(rng, n, 0.04)
        w = np.linalg.eigvalsh(A.toarray())[::-1]
        A = (A - 0.5 * (w[11] + w[12]) * sp.identity(n, format="csr")).tocsr()  # 12 > 0
    else:
        spec = -rng.uniform(0.1, 3.0, n)
        if case == "degenerate":  # a 4-fold positive eigenvalue and a 3-fold one
            spec[:7] = [0.9, 0.9, 0.9, 0.9, 0.4, 0.4, 0.4]
        else:  # clustered just above and below 0
            spec[:12] = 0.3 + 1e-6 * rng.random(12)
            spec[12:20] = 1e-4 * rng.random(8)
            spec[20:40] = -1e-4 * rng.random(20)
        A = _random_sparse_symmetric(rng, n, 0.0, spectrum=spec)
    wd, Pd = np.linalg.eigh(A.toarray())
    wd, Pd = wd[::-1][:k], Pd[:, ::-1][:, :k]
    n_pos = int(np.sum(wd > 0))
    assert 0 < n_pos < k - 4
    v0 = rng.standard_normal(n)
    sigma, P, complete = snp_eigen._top_eigs_positive(A, k, v0, n_pos + 4)
    assert not complete and sigma.shape == (k,) and P.shape == (n, k)
    assert np.all(P[:, n_pos + 4 :] == 0.0) and np.all(sigma[n_pos + 4 :] <= 0.0)
    np.testing.assert_allclose(sigma[: n_pos + 4], wd[: n_pos + 4], atol=1e-9)
    # what the kernel step uses: A_+ restricted to the top k (rotation invariant)
    np.testing.assert_allclose(_positive_kernel(sigma, P), _positive_kernel(wd, Pd), atol=1e-7)
    # and through the kernel step itself
    V, norm = snp_fit._kernel_step(sigma, P, 10.0)
    Vd, norm_d = snp_fit._kernel_step(wd, Pd, 10.0)
    assert np.isclose(norm, norm_d, rtol=1e-10)
    np.testing.assert_allclose(V @ V.T, Vd @ Vd.T, atol=1e-6)


def test_positive_solve_falls_back_to_the_full_one(global_random_seed):
    """More positive eigenvalues than asked for: the full top-k solve is returned."""
    rng = np.random.default_rng(global_random_seed)
    n, k = 150, 20
    spec = -rng.uniform(0.1, 2.0, n)
    spec[:15] = rng.uniform(0.2, 1.0, 15)
    A = _random_sparse_symmetric(rng, n, 0.0, spectrum=spec)
    sigma, P, complete = snp_eigen._top_eigs_positive(A, k, rng.standard_normal(n), 8)
    assert complete
    np.testing.assert_allclose(sigma, np.sort(spec)[::-1][:k], atol=1e-9)
    assert np.all(np.linalg.norm(P, axis=0) > 0.5)


@pytest.mark.parametrize("k", [60, 79])
def test_k_close_to_n_uses_dense_eigh(global_random_seed, k):
    """n <= 2k + 1: the dense path, for the reference and the positive-only solve alike."""
    rng = np.random.default_rng(global_random_seed)
    n = 80
    A = _random_sparse_symmetric(rng, n, 0.1) - 0.3 * sp.identity(n, format="csr")
    wd = np.linalg.eigvalsh(A.toarray())[::-1][:k]
    for k_try in (k // 2, k - 1):
        sigma, P, complete = snp_eigen._top_eigs_positive(A, k, None, k_try)
        assert complete  # n <= 2 k_try + 1 as well, or too few: the full (dense) solve
        np.testing.assert_allclose(sigma, wd, atol=1e-10)
        np.testing.assert_allclose(P.T @ P, np.eye(k), atol=1e-10)


def test_eigsh_no_convergence_retries_then_raises(monkeypatch, no_lanczos):
    """Both paths share the ARPACK retry (larger ncv) and its error (the fast path's
    ARPACK: its fallback after Lanczos)."""
    import scipy.sparse.linalg as spla

    rng = np.random.default_rng(0)
    A = _random_sparse_symmetric(rng, 120, 0.05)
    calls = []
    real = spla.eigsh

    def flaky(*args, **kw):
        calls.append(kw.get("ncv"))
        if len(calls) == 1:
            raise spla.ArpackNoConvergence("no", np.zeros(0), np.zeros((120, 0)))
        return real(*args, **kw)

    monkeypatch.setattr(snp_eigen.spla, "eigsh", flaky)
    sigma, P, complete = snp_eigen._top_eigs_positive(A, 10, None, 6)
    assert len(calls) >= 2 and calls[1] > calls[0]
    np.testing.assert_allclose(sigma[:6], np.linalg.eigvalsh(A.toarray())[::-1][:6], atol=1e-9)

    def never(*args, **kw):
        raise spla.ArpackNoConvergence("no", np.zeros(0), np.zeros((120, 0)))

    monkeypatch.setattr(snp_eigen.spla, "eigsh", never)
    with pytest.raises(nk.NpklError, match="did not converge"):
        snp_eigen._top_eigs_positive(A, 10, None, 6)


@pytest.mark.parametrize(
    "n, k",
    [(1, 1), (2, 1), (47, 6), (128, 1), (150, 18), (150, 149), (150, 150), (200, 1), (240, 24)],
)
def test_dense_top_eigs_match_numpy_eigh(global_random_seed, n, k, monkeypatch):
    """The fast path's dense solve (tridiagonalisation, compiled bisection for eigenvalues
    n-k+1..n, inverse iteration) against the reference numpy.linalg.eigh (all n): same top-k
    eigenvalues, the same eigenvectors up to sign (a spectrum with gaps >= 1e-3),
    orthonormal, in descending order. The tridiagonal route at every size
    (``_TRIDIAG_MIN_N`` = 0), the default size rule separately below."""
    monkeypatch.setattr(snp_eigen, "_TRIDIAG_MIN_N", 0)
    rng = np.random.default_rng(global_random_seed)
    spec = np.sort(rng.uniform(-3.0, 3.0, n))
    spec += 1e-3 * np.arange(n)  # distinct, gaps >= 1e-3: vectors are determined up to sign
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    M = (Q * spec) @ Q.T
    M = 0.5 * (M + M.T)
    wd, Pd = np.linalg.eigh(M)
    wd, Pd = wd[::-1][:k], Pd[:, ::-1][:, :k]
    kept = M.copy()
    sigma, P = snp_eigen._dense_top_eigs(M, k)
    np.testing.assert_array_equal(M, kept)  # the input is not overwritten
    assert sigma.shape == (k,) and P.shape == (n, k)
    assert np.all(np.diff(sigma) <= 0)
    np.testing.assert_allclose(sigma, wd, atol=1e-12 * 3 * n)
    np.testing.assert_allclose(P.T @ P, np.eye(k), atol=1e-12 * n)
    signs = np.sign(np.sum(P * Pd, axis=0))
    np.testing.assert_allclose(P * signs, Pd, atol=1e-9)


@given(
    n=st.integers(2, 60),
    k_frac=st.floats(0.0, 1.0),
    levels=st.integers(1, 4),
    split=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, deadline=None)
def test_tridiagonal_top_eigs_on_repeated_and_split_spectra(n, k_frac, levels, split, seed):
    """The hard cases for bisection plus inverse iteration: eigenvalues repeated many times
    (a few levels only), and matrices whose tridiagonal form splits (block diagonal, zero
    couplings). The top-k eigenvalues equal numpy's, the vectors are orthonormal and
    A Z = Z diag(w) to rounding (with repeated eigenvalues vectors are not unique, the
    invariant subspace is)."""
    from npkl_dist.linalg._tridiag import tridiagonal_top_eigs

    rng = np.random.default_rng(seed)
    k = max(1, min(n, int(round(k_frac * n))))
    spec = rng.integers(0, levels, n).astype(float) * rng.uniform(0.5, 2.0)
    if split:
        M = np.diag(spec)  # already tridiagonal, every coupling zero
        perm = rng.permutation(n)
        M = M[np.ix_(perm, perm)]
    else:
        Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        M = (Q * spec) @ Q.T
        M = 0.5 * (M + M.T)
    w, Z, failure = tridiagonal_top_eigs(M, k)
    assert failure is None
    scale = max(1.0, np.abs(spec).max())
    np.testing.assert_allclose(w, np.linalg.eigvalsh(M)[n - k :], atol=1e-12 * n * scale)
    np.testing.assert_allclose(Z.T @ Z, np.eye(k), atol=1e-11 * n)
    np.testing.assert_allclose(M @ Z, Z * w, atol=1e-11 * n * scale)


def test_tridiagonal_top_eigs_when_dstebz_cannot_count_a_range():
    """16 x 16, two eigenvalue levels, top 1: T splits with exactly repeated eigenvalues and
    dstebz asked for index 16 alone returns info = 2 (found by hypothesis); its documented
    cure, all eigenvalues and then the top k, gives the pair."""
    from npkl_dist.linalg._tridiag import tridiagonal_top_eigs

    rng = np.random.default_rng(294)
    n = 16
    spec = rng.integers(0, 2, n).astype(float) * rng.uniform(0.5, 2.0)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    M = (Q * spec) @ Q.T
    M = 0.5 * (M + M.T)
    for k in (1, 3, 8):
        w, Z, failure = tridiagonal_top_eigs(M, k)
        assert failure is None
        np.testing.assert_allclose(w, np.linalg.eigvalsh(M)[n - k :], atol=1e-12 * n * 2)
        np.testing.assert_allclose(Z.T @ Z, np.eye(k), atol=1e-11 * n)
        np.testing.assert_allclose(M @ Z, Z * w, atol=1e-11 * n * 2)


@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1e150, 1e300])
def test_tridiagonal_top_eigs_at_extreme_scales(global_random_seed, scale):
    """Entries far outside [1e-146, 8e76] are scaled into that range first (``dsyevr``'s
    RMIN/RMAX), as squares and products would under- or overflow: without it this returned
    eigenvalues off by 60-90% or no vectors."""
    from npkl_dist.linalg._tridiag import tridiagonal_top_eigs

    rng = np.random.default_rng(global_random_seed)
    n, k = 60, 9
    X = rng.standard_normal((n, n))
    M = (X + X.T) * scale
    w, Z, failure = tridiagonal_top_eigs(M, k)
    assert failure is None
    ref = np.linalg.eigvalsh(M / scale)[n - k :]
    np.testing.assert_allclose(w / scale, ref, rtol=0, atol=1e-12 * np.abs(ref).max() * n)
    np.testing.assert_allclose(Z.T @ Z, np.eye(k), atol=1e-12 * n)
    np.testing.assert_allclose((M / scale) @ Z, Z * (w / scale), atol=1e-11 * n)


def test_tridiagonal_bisection_matches_lapack_dstebz(global_random_seed):
    """The compiled bisection is dstebz's (same Sturm recurrence, guard and tolerance): the
    eigenvalues agree with LAPACK's to a few ulps of ||T||."""
    from scipy.linalg import lapack

    from npkl_dist.linalg import _tridiag as tri

    rng = np.random.default_rng(global_random_seed)
    n, k = 120, 17
    d, e = rng.standard_normal(n), rng.standard_normal(n - 1)
    m, w_ref, *_ = lapack.dstebz(d, e, 2, 0.0, 0.0, n - k + 1, n, 0.0, "B")
    e2 = e * e
    w = tri._bisect_top(
        d,
        e2,
        k,
        tri._SAFMIN * max(1.0, e2.max()),
        tri._EPS * (np.abs(d).max() + 2 * np.abs(e).max()),
    )
    assert m == k
    np.testing.assert_allclose(w, w_ref[:k], rtol=0, atol=8 * tri._EPS * np.abs(w_ref).max())


def test_inverse_iteration_matches_lapack_dstein(global_random_seed):
    """The compiled inverse iteration is dstein's algorithm: on a random unreduced
    tridiagonal, for its top eigenvalues, the same eigenvectors (both normalised with the
    largest entry positive) to rounding, with or without close eigenvalues (a cluster of
    three within 1e-9, reorthogonalised)."""
    from scipy.linalg import lapack

    from npkl_dist.linalg import _tridiag as tri

    rng = np.random.default_rng(global_random_seed)
    n, k = 90, 14
    for clustered in (False, True):
        if clustered:  # T from a matrix with a tight cluster at the top
            spec = np.r_[rng.uniform(-2, 1, n - 3), 2.0, 2.0 + 1e-9, 2.0 + 2e-9]
            Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
            _, d, e, _, _ = lapack.dsytrd((Q * spec) @ Q.T, lower=1)
        else:
            d, e = rng.standard_normal(n), rng.standard_normal(n - 1)
        m, w, block, split, _ = lapack.dstebz(d, e, 2, 0.0, 0.0, n - k + 1, n, 0.0, "B")
        w = w[:k]
        Z_ref, info = lapack.dstein(d, e, w, block, split)
        assert info == 0
        Z = np.empty((n, k), order="F")
        assert tri._inverse_iteration(d, e, w, Z) == 0
        Z_batched = np.empty((n, k), order="F")
        assert tri._inverse_iteration_batched(d, e, w, Z_batched) == 0
        np.testing.assert_array_equal(Z_batched, Z)  # the same vectors, bit for bit
        T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
        np.testing.assert_allclose(Z.T @ Z, np.eye(k), atol=1e-13 * n)
        np.testing.assert_allclose(T @ Z, Z * w, atol=1e-13 * n * np.abs(w).max())
        if not clustered:  # vectors unique up to sign, sign fixed by the largest entry
            np.testing.assert_allclose(
                Z, Z_ref * np.sign(Z_ref[np.abs(Z_ref).argmax(0), np.arange(k)]), atol=1e-12
            )
        else:  # the cluster's invariant subspace is
            P, P_ref = Z[:, -3:] @ Z[:, -3:].T, Z_ref[:, -3:] @ Z_ref[:, -3:].T
            np.testing.assert_allclose(P, P_ref, atol=1e-7)
            np.testing.assert_allclose(
                Z[:, :-3],
                Z_ref[:, :-3] * np.sign(Z_ref[np.abs(Z_ref[:, :-3]).argmax(0), np.arange(k - 3)]),
                atol=1e-10,
            )


@given(
    n=st.integers(2, 70),
    k_frac=st.floats(0.0, 1.0),
    kind=st.sampled_from(["random", "levels", "cluster", "graded"]),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=80, deadline=None)
def test_batched_inverse_iteration_equals_the_sequential_one(n, k_frac, kind, seed):
    """The route's inverse iteration runs up to _LANES eigenvalues side by side; its vectors
    and failure count are the one-at-a-time loop's (dstein's algorithm, the slow reference)
    bit for bit, with clusters (where batches must break: a vector is orthogonalised
    against its cluster's earlier ones), repeated levels, graded spectra and batches of
    every length."""
    from scipy.linalg import lapack

    from npkl_dist.linalg import _tridiag as tri

    rng = np.random.default_rng(seed)
    k = max(1, min(n, int(round(k_frac * n))))
    if kind == "random":
        X = rng.standard_normal((n, n))
        M = X + X.T
    else:
        if kind == "levels":
            spec = rng.integers(0, 3, n) + 1e-7 * rng.standard_normal(n)
        elif kind == "cluster":
            spec = rng.standard_normal(n)
            top = rng.integers(1, n + 1)
            spec[:top] = 1.0 + 1e-10 * rng.standard_normal(top)
        else:
            spec = 10.0 ** rng.uniform(-12, 0, n)
        Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        M = (Q * spec) @ Q.T
        M = 0.5 * (M + M.T)
    _, d, e, _, _ = lapack.dsytrd(M, lower=1)
    e2 = np.empty(n - 1)
    _, splits, pivmin, tnorm = tri._inspect(d, e, e2)
    assume(not splits)  # split T goes to LAPACK's dstebz + dstein instead
    w = tri._bisect_top(d, e2, k, pivmin, tri._EPS * tnorm)
    Z, Z_batched = np.empty((n, k), order="F"), np.empty((n, k), order="F")
    assert tri._inverse_iteration_batched(d, e, w, Z_batched) == tri._inverse_iteration(d, e, w, Z)
    np.testing.assert_array_equal(Z_batched, Z)


def test_dense_top_eigs_size_rule(monkeypatch):
    """Below _TRIDIAG_MIN_N points numpy's eigh (faster there), from it on the tridiagonal
    route; and numpy's eigh whenever inverse iteration fails to converge."""
    from npkl_dist.linalg import _tridiag as tri

    calls = []
    real = tri.tridiagonal_top_eigs
    monkeypatch.setattr(
        "npkl_dist.solvers.simplenpkl._eigen.tridiagonal_top_eigs",
        lambda *a, **kw: calls.append(1) or real(*a, **kw),
    )
    rng = np.random.default_rng(0)
    for n, expect in ((snp_eigen._TRIDIAG_MIN_N - 1, 0), (snp_eigen._TRIDIAG_MIN_N, 1)):
        X = rng.standard_normal((n, n))
        M = X + X.T
        w_ref = np.linalg.eigvalsh(M)[::-1][:5]
        calls.clear()
        sigma, P = snp_eigen._dense_top_eigs(M.copy(), 5)
        assert len(calls) == expect
        np.testing.assert_allclose(sigma, w_ref, atol=1e-10)
    # a failed inverse iteration (vectors not converged) falls back to numpy's eigh, also
    # when the route has reduced M in place (M is rebuilt from its strict lower triangle and
    # diagonal, which that keeps)
    monkeypatch.setattr(tri, "_inverse_iteration_batched", lambda *a: 2)
    for overwrite in (False, True):
        sigma, P = snp_eigen._dense_top_eigs(M.copy(), 5, overwrite=overwrite)
        np.testing.assert_allclose(sigma, w_ref, atol=1e-10)
        np.testing.assert_allclose(M @ P, P * sigma, atol=1e-9)
        w_all, P_all = np.linalg.eigh(M)
        np.testing.assert_array_equal(sigma, w_all[::-1][:5])  # eigh of the original M
        np.testing.assert_array_equal(P, P_all[:, ::-1][:, :5])


def test_dense_top_eigs_in_place_equals_the_copy(global_random_seed):
    """``overwrite=True`` (the fits' fresh A: dsytrd reduces it in its own buffer, as the
    Fortran-ordered transpose) gives the eigenpairs of the copying call bit for bit on a
    symmetric matrix, and leaves M's strict lower triangle as it was."""
    rng = np.random.default_rng(global_random_seed)
    for n, k in ((30, 4), (100, 15), (200, 20)):  # both dsytrd panel widths
        X = rng.standard_normal((n, n))
        M = X + X.T
        w0, P0 = snp_eigen._dense_top_eigs(M, k)
        M1 = M.copy()
        w1, P1 = snp_eigen._dense_top_eigs(M1, k, overwrite=True)
        np.testing.assert_array_equal(w1, w0)
        np.testing.assert_array_equal(P1, P0)
        assert not np.array_equal(M1, M)  # reduced in place
        np.testing.assert_array_equal(np.tril(M1, -1), np.tril(M, -1))


@pytest.mark.parametrize("n", [6, 30])  # at 30, numpy's eigh returns finite eigenvalues
@pytest.mark.parametrize("tridiag_min_n", [0, 128])  # tridiagonal route, numpy's eigh
def test_dense_top_eigs_refuses_a_matrix_with_nan(monkeypatch, tridiag_min_n, n):
    monkeypatch.setattr(snp_eigen, "_TRIDIAG_MIN_N", tridiag_min_n)
    M = np.eye(n)
    M[1, 2] = M[2, 1] = np.nan
    with pytest.raises(nk.NpklError, match="dense eigensolver failed.*NaN"):
        snp_eigen._dense_top_eigs(M, 3)


def test_fast_small_n_solve_is_dense_top_eigs(global_random_seed, monkeypatch):
    """Up to _FAST_DENSE_MAX_N points the fast path's kernel steps go through
    ``_dense_top_eigs`` (not numpy's full eigh), and the reference path does not."""
    monkeypatch.setattr(snp_eigen, "_FAST_DENSE_MAX_N", 200)
    p = medium_problem(global_random_seed, "squared_hinge")
    calls = []
    real = snp_eigen._dense_top_eigs
    monkeypatch.setattr(
        snp_eigen, "_dense_top_eigs", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    fast = quiet(p, B=10.0, eigensolver="fast", max_iter=20)
    assert fast.n_sweeps >= 1 and len(calls) >= fast.n_sweeps  # one or more per iteration
    calls.clear()
    quiet(p, B=10.0, eigensolver="arpack", max_iter=20)
    assert not calls


@pytest.mark.parametrize("loss", ["linear", "squared_hinge", "square"])
def test_small_n_fast_path_is_dense(global_random_seed, loss, monkeypatch):
    """Up to _FAST_DENSE_MAX_N points the fast path solves densely (no ARPACK call). The
    linear loss (one eigensolve) gives the reference's kernel; the saddle-point losses,
    stopped after 60 iterations, differ from the reference's eigsh run by more than the
    eigensolvers do (seed 8: 2.3e-5 relative), so each objective is held to the other's
    duality certificate: f* lies in [f - gap, f] for both fits (weak duality)."""
    monkeypatch.setattr(snp_eigen, "_FAST_DENSE_MAX_N", 200)
    p = medium_problem(global_random_seed, loss)
    ref = quiet(p, B=10.0, eigensolver="arpack", max_iter=60)
    calls = []
    real = snp_eigen._eigsh
    monkeypatch.setattr(snp_eigen, "_eigsh", lambda *a: calls.append(1) or real(*a))
    fast = quiet(p, B=10.0, eigensolver="fast", max_iter=60)
    assert not calls
    scale = abs(ref.objective) + 1.0
    assert fast.converged and ref.converged
    if loss == "linear":
        assert abs(fast.objective - ref.objective) <= 1e-9 * scale
        np.testing.assert_allclose(fast.eigenvalues, ref.eigenvalues, atol=1e-9)
        np.testing.assert_allclose(
            _kernel(fast.V), _kernel(ref.V), atol=1e-8 * np.abs(_kernel(ref.V)).max()
        )
        return
    eps = 1e-12 * scale
    assert fast.duality_gap >= -eps and ref.duality_gap >= -eps
    assert fast.objective - fast.duality_gap <= ref.objective + eps
    assert ref.objective - ref.duality_gap <= fast.objective + eps


@given(
    n=st.integers(1, 40),
    r=st.integers(1, 9),
    m=st.integers(0, 60),
    density=st.floats(0.0, 0.6),
    fortran=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, deadline=None)
def test_compiled_objective_terms_equal_numpy(n, r, m, density, fortran, seed):
    """The fits' objective terms, compiled: tr(V'LV) from L's whole CSR arrays (diagonal
    included, so the separate diagonal is 0) against np.sum(V * (L @ V)), and the pair
    values v_i'v_j against np.einsum on the gathered rows (any memory layout of V)."""
    from npkl_dist.linalg._csr import pair_dots
    from npkl_dist.problem._terms import smooth_terms_serial

    rng = np.random.default_rng(seed)
    M = sp.random(n, n, density=density, random_state=rng, format="csr")
    M = sp.csr_matrix(M - M.T + sp.diags(rng.uniform(0.5, 2.0, n)))
    V = rng.standard_normal((n, r))
    if fortran:
        V = np.asfortranarray(V)
    ref = float(np.sum(V * (M @ V)))
    rows = np.empty(n)
    smooth_terms_serial(M.indptr, M.indices, M.data, np.zeros(n), V, rows)
    got = float(np.sum(rows))
    assert abs(got - ref) <= 1e-12 * max(1.0, float(np.sum(np.abs(V) * (abs(M) @ np.abs(V)))))
    ci, cj = rng.integers(0, n, m), rng.integers(0, n, m)
    out = np.empty(m)
    pair_dots(V, ci, cj, out)
    np.testing.assert_allclose(
        out, np.einsum("kr,kr->k", V[ci], V[cj]), rtol=1e-12, atol=1e-12 * r
    )


def test_one_blas_thread_sets_and_restores_on_error():
    """``_OneBlasThread`` puts every BLAS library of the process's controller at one thread
    and restores each library's own count on exit, also when the fit raises."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    libs = [lib for lib in snp_blas._blas_controller().lib_controllers if lib.user_api == "blas"]
    if not libs:
        pytest.skip("no BLAS library under threadpoolctl's control")
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = [lib.get_num_threads() for lib in libs]
        with pytest.raises(RuntimeError, match="inside"):
            with snp_blas._OneBlasThread():
                assert [lib.get_num_threads() for lib in libs] == [1] * len(libs)
                raise RuntimeError("inside")
        assert [lib.get_num_threads() for lib in libs] == before


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_refinement_does_not_depend_on_the_signs_of_the_eigenvectors(global_random_seed, loss):
    """The subspace refinement (_polish) on P and on P with some columns negated (what two
    eigensolvers may return for the same eigenpairs) reaches the same kernel: its
    Lipschitz estimate starts from a matrix built from P, not a fixed random one."""
    p = medium_problem(global_random_seed, loss, n_pairs=120)
    A = snp_eigen._SparseA(p).set(np.full(p.constraints.m, p.gamma))
    w, P = np.linalg.eigh(A.toarray())
    P = P[:, ::-1][:, : p.rank]
    S0 = np.diag(np.maximum(w[::-1][: p.rank], 0.0))
    signs = np.where(np.random.default_rng(global_random_seed).random(p.rank) < 0.5, -1.0, 1.0)
    L64 = sp.csr_matrix(p.L, dtype=np.float64)
    S1, f1, its1, mu1 = snp_fit._polish(p, P, S0, 100.0, L64)
    S2, f2, its2, mu2 = snp_fit._polish(p, P * signs, S0, 100.0, L64)
    assert its1 == its2 and mu1 == mu2
    assert abs(f1 - f2) <= 1e-10 * (abs(f1) + 1.0)
    K1 = P @ S1 @ P.T
    K2 = (P * signs) @ S2 @ (P * signs).T
    np.testing.assert_allclose(K2, K1, atol=1e-9 * np.abs(K1).max())


def test_eigenpairs_come_out_descending_with_rows_contiguous():
    """_descending: ARPACK's ascending pairs are reversed into a C-contiguous P (the
    objective and the pair values read its rows; an F-ordered P made tr(V'LV) 5x slower on
    adult-a5a); Lanczos's pairs, already in order, pass through unchanged."""
    rng = np.random.default_rng(0)
    w = np.sort(rng.standard_normal(7))
    P = rng.standard_normal((30, 7))
    wd, Pd = snp_eigen._descending(w, P)
    np.testing.assert_array_equal(wd, w[::-1])
    np.testing.assert_array_equal(Pd, P[:, ::-1])
    assert Pd.flags.c_contiguous
    w2, P2 = snp_eigen._descending(wd, Pd)
    assert w2 is wd and P2 is Pd
    w3, P3 = snp_eigen._descending(wd, np.asfortranarray(Pd))
    np.testing.assert_array_equal(P3, Pd)
    assert P3.flags.c_contiguous


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 120),
    r=st.integers(1, 20),
    s=st.integers(1, 20),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-50, 1e-3, 1.0, 1e50]),
)
def test_gram_square_sums_equal_the_numpy_formula(n, r, s, seed, scale):
    from npkl_dist.linalg._csr import gram_square_sums

    rng = np.random.default_rng(seed)
    X = scale * rng.standard_normal((n, r))
    Y = rng.standard_normal((n, s))
    if s <= r and n > 1:  # columns shared with X: X'Y is not a generic product
        Y[:, :s] = X[:, :s] / scale
    got = gram_square_sums(X, Y)
    want = (np.sum((X.T @ X) ** 2), np.sum((Y.T @ Y) ** 2), np.sum((X.T @ Y) ** 2))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_kernel_change_is_the_dense_frobenius_ratio_and_sign_invariant(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    V1 = rng.standard_normal((60, 7))
    V2 = V1 + 0.01 * rng.standard_normal((60, 7))
    K1, K2 = V1 @ V1.T, V2 @ V2.T
    want = np.linalg.norm(K2 - K1) / np.linalg.norm(K2)
    assert snp_fit._k_change(V2, V1) == pytest.approx(want, rel=1e-9)
    # a column's sign and an orthogonal rotation of the columns leave K, and the change, alone
    Q, _ = np.linalg.qr(rng.standard_normal((7, 7)))
    flipped = V1 * np.where(np.arange(7) % 2, -1.0, 1.0)
    assert snp_fit._k_change(V2, flipped @ Q) == pytest.approx(want, rel=1e-9)
    assert snp_fit._k_change(V1, V1 @ Q) <= 1e-7  # rounding of a + b - 2 cross: ~sqrt(eps)
    assert snp_fit._k_change(np.zeros((5, 2)), np.zeros((5, 2))) == 0.0
