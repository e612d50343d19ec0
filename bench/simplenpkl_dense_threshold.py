"""SimpleNPKL's fast path: dense eigh vs ARPACK on small data sets (the _FAST_DENSE_MAX_N choice).

For each data set (bench/paper/run.py repetition 0, kNN k = 5, B = 100), whole
``fit_simplenpkl`` fits with the linear and squared hinge losses, with the fast path's dense
threshold set to 0 (sparse solves always: ``lanczos``, the fast path's Lanczos with partial
reorthogonalisation since 2026-11-25, or ``arpack``, its ARPACK fallback, the sparse solver
before) and to ``--dense-max-n`` (dense solves up to that many
points), the dense solve being the fast path's ``_dense_top_eigs`` (``tridiagonal``:
dsyevr's algorithm for the top rank eigenpairs with the bisection compiled, from
``_TRIDIAG_MIN_N`` points on, numpy's eigh below), LAPACK's own ``dsyevr`` for the top rank
eigenpairs (``dsyevr``: the dense solve from 2026-11-24 until the tridiagonal route replaced
it, here in place of ``_dense_top_eigs``), or, as before that, ``numpy.linalg.eigh`` of all
n (``numpy-eigh``: ``_TRIDIAG_MIN_N`` raised above every n); ``tridiagonal-before`` is the route
as it was before 2026-11-24 late evening: inverse iteration one eigenvalue at a time
(``_tridiag._inverse_iteration``, now the reference of the batched one) and LAPACK's panel
width of 32 in ``dsytrd``. The variants alternate within each run
(``--runs`` rounds after a warm-up; medians). One BLAS thread, as the fits themselves set
it. Prints one line per data set.

Usage::

    python bench/simplenpkl_dense_threshold.py soybean chessboard iris wine sonar glass heart
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist as nk  # noqa: E402
from bench.paper.run import prepare_data  # noqa: E402
from npkl_dist import _simplenpkl as snp  # noqa: E402
from npkl_dist import _tridiag as tri  # noqa: E402


def dsyevr_top_eigs(M, k, overwrite=False):
    """LAPACK dsyevr for eigenpairs n-k+1..n of M, descending: the dense solve before the
    tridiagonal route, a drop-in for ``_dense_top_eigs`` (numpy's eigh below
    ``_TRIDIAG_MIN_N`` points as there; also timed by bench/fit_time_floor.py). M is copied
    (C-ordered for LAPACK's Fortran order), as it was then; ``overwrite`` is accepted and
    ignored."""
    from scipy.linalg import lapack

    n = M.shape[0]
    if n < snp._TRIDIAG_MIN_N or k >= n:
        w, P = np.linalg.eigh(M)
        return w[::-1][:k].copy(), P[:, ::-1][:, :k].copy()
    w, Z, m, _, info = lapack.dsyevr(M, compute_v=1, range="I", il=n - k + 1, iu=n,
                                      overwrite_a=1)
    assert info == 0 and m == k, (info, m, k)
    return w[:k][::-1].copy(), Z[:, :k][:, ::-1].copy()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--dense-max-n", type=int, default=400)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--variants", nargs="*", default=None,
                    help="run only these variants (default: all)")
    ap.add_argument("--subsample", type=int, nargs="*", default=[],
                    help="also fit random subsets (seed 0) of these many points of each set")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    thr0, tri0, top0 = snp._FAST_DENSE_MAX_N, snp._TRIDIAG_MIN_N, snp._dense_top_eigs
    inv0, nb0 = tri._inverse_iteration_batched, tri._dsytrd_block
    jobs = []
    for name in args.datasets:
        X, y, _ = prepare_data(name)
        jobs.append((name, X, y))
        for size in args.subsample:
            if size < X.shape[0]:
                keep = np.sort(np.random.default_rng(0).choice(X.shape[0], size, replace=False))
                jobs.append((f"{name}[{size}]", X[keep], y[keep]))
    for name, X, y in jobs:
        g = nk.knn_graph(X, 5, seed=0, warn=False)
        cons = nk.sample_constraints(y, seed=0)
        L = g.laplacian(1e-3)
        out = []
        for loss in ("linear", "squared_hinge"):
            p = nk.NPKLProblem.build(L, cons, loss=loss, seed=0)
            # (dense limit, _TRIDIAG_MIN_N, dense solve, the route's inverse iteration and
            # panel width)
            variants = {"lanczos": (0, tri0, top0, inv0, nb0),
                        "arpack": (0, tri0, top0, inv0, nb0),
                        "numpy-eigh": (args.dense_max_n, sys.maxsize, top0, inv0, nb0),
                        "dsyevr": (args.dense_max_n, tri0, dsyevr_top_eigs, inv0, nb0),
                        "tridiagonal-before": (args.dense_max_n, tri0, top0,
                                               tri._inverse_iteration, lambda n: 32),
                        "tridiagonal": (args.dense_max_n, tri0, top0, inv0, nb0)}
            if args.variants:
                variants = {v: variants[v] for v in args.variants}
            ts = {v: [] for v in variants}
            its = {}
            for rnd in range(args.runs + 1):
                for v, (thr, tri_min_n, top, inv, nb) in variants.items():
                    tri._inverse_iteration_batched, tri._dsytrd_block = inv, nb
                    snp._FAST_DENSE_MAX_N = thr
                    snp._TRIDIAG_MIN_N = tri_min_n
                    snp._dense_top_eigs = top
                    snp._SPARSE_LANCZOS = v != "arpack"
                    t0 = time.perf_counter()
                    r = snp.fit_simplenpkl(p, B=100.0)
                    if rnd:  # round 0 is the warm-up
                        ts[v].append(time.perf_counter() - t0)
                    its[v] = r.n_sweeps
            out.append(f"{loss}: " + ", ".join(
                f"{v} {np.median(ts[v]) * 1e3:.2f} ms ({its[v]} it)" for v in variants))
        snp._FAST_DENSE_MAX_N, snp._TRIDIAG_MIN_N, snp._dense_top_eigs = thr0, tri0, top0
        snp._SPARSE_LANCZOS = True
        tri._inverse_iteration_batched, tri._dsytrd_block = inv0, nb0
        print(name, X.shape[0], " | ".join(out), flush=True)


if __name__ == "__main__":
    main()
