"""With the linear kernel and J = I the LogDet fit is ITML: it equals metric-learn's ITML
Mahalanobis solution on the same pairs, bounds and slack (metric-learn 0.7.0 runs in the
separate environment `make test` creates, bench/.venv-itml)."""

import subprocess
import sys

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist.solvers.inductive import fit_inductive

sys.path.insert(0, ".")
from bench.paper import peers  # noqa: E402

SCRIPT = r"""
import sys, numpy as np
from metric_learn import ITML
d = np.load(sys.argv[1])
itml = ITML(preprocessor=d["X"], gamma=float(d["gamma"]), max_iter=100000, tol=1e-13,
            prior="identity")
itml.fit(d["pairs"], d["y"], bounds=d["bounds"])
np.save(sys.argv[2], itml.get_mahalanobis_matrix())
"""


@pytest.mark.parametrize("gamma", [1.0, 10.0])
def test_linear_logdet_with_J_identity_equals_metric_learn_itml(tmp_path, gamma):
    py = peers.ITML_VENV / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no ITML environment at {peers.ITML_VENV} (make test creates it)")
    rng = np.random.default_rng(3)
    n, d = 8, 10  # n <= d: K = XX' is invertible, J = I spans the training points
    X = rng.standard_normal((n, d))
    y = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    cons = nk.sample_constraints(y, 5, 8, seed=3)
    bounds = (4.0, 30.0)
    m = fit_inductive(
        X,
        cons,
        regularizer="logdet",
        kernel="linear",
        basis_points=X,
        bounds=bounds,
        gamma=gamma,
        tol=1e-13,
        max_iter=100000,
    )
    assert m.info["converged"]
    pairs = np.column_stack([cons.i, cons.j])
    src, dst = tmp_path / "in.npz", tmp_path / "A.npy"
    np.savez(src, X=X, pairs=pairs, y=np.where(cons.t > 0, 1, -1), bounds=bounds, gamma=gamma)
    proc = subprocess.run([str(py), "-c", SCRIPT, str(src), str(dst)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    A = np.load(dst)
    KW_itml = X @ A @ X.T
    np.testing.assert_allclose(m.kernel(X), KW_itml, rtol=1e-7, atol=1e-7 * np.abs(KW_itml).max())
    # and on points never seen: kappa_W(x, y) = x'Ay for the inductive kernel
    Xn = rng.standard_normal((5, d))
    # (points outside span(X): the alpha part kappa(x, y) = x'y stays exact in kernel())
    np.testing.assert_allclose(
        m.kernel(Xn, X), Xn @ A @ X.T, rtol=1e-7, atol=1e-7 * np.abs(KW_itml).max()
    )
