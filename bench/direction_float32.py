"""A one-step PCG's direction in float32 against float64 (issue 6): whole block fits to the
1e-4 gap, the two settings alternating in one process.

``python bench/direction_float32.py [--n N] [--runs K] [--threads T] [--f-star F]``
``python bench/direction_float32.py --kernels [--n N] [--runs K] [--threads T]``
``python bench/direction_float32.py --dask [--n N] [--runs K]``

The problem is bench_block.py's (10-cluster mixture in 8-D, kNN k = 10, delta = 1e-3, square
loss, r = 16, gamma = 1, 1% of the points paired at random). Every fit goes through one
shared ``fit_setup`` (the AMG hierarchy and the work arrays built and touched once, by a
first fit of each setting), so what differs between the settings is the outer iterations:
``npkl_dist._blocksolve.DIRECTION_FLOAT32`` switches the direction's precision. Prints each
fit (outer iterations, seconds to the gap, the median outer iteration, the final gap) and
the medians per setting with their ratio; f* is bench_block's reference optimum at 1e6
(``--f-star 0``: a reference fit made here).

``--kernels``: only the PCG's one step, the passes that read or write the direction -- Z = M R
with its sums (``apply_dots``), Q = L Z with Z'Q (``_matvec_dot``), X += alpha Z with
finish_block's sums (``_cg_update_x_sums``) -- on the same graph's Laplacian in reverse
Cuthill-McKee order, with Z in float64 and in float32, alternating (the fits' times carry
the host's noise; these isolate what the precision changes).

``--dask``: the same fits on a Dask LocalCluster of 2 worker processes x 1 thread (2 blocks,
block-Jacobi AMG), both settings alternating: the bytes of the halo exchanges (the U rows of Z
sent during the PCG, and of V after it) and the time to the gap. (That Dask fits equal the
in-process partitioned oracle bit for bit, with either setting, is tests/test_dask_block.py's.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist  # noqa: E402
from bench.bench_block import constraints_for, graph_for  # noqa: E402
from npkl_dist import NPKLProblem, _blocksolve, fit_bcd  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gap", type=float, default=1e-4)
    ap.add_argument("--f-star", type=float, default=2214.258)
    ap.add_argument("--kernels", action="store_true", help="time the PCG step's passes only")
    ap.add_argument("--dask", action="store_true", help="fits on a 2-worker LocalCluster")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.kernels:
        return kernels(args)
    if args.dask:
        return dask_fits(args)
    S, y, _ = graph_for(args.n)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                          loss="square", gamma=1.0, rank=16, seed=0)
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    setup = npkl_dist.fit_setup(P, method="block", executor=ex)
    f_star = args.f_star
    if not f_star:
        f_star = fit_bcd(P, method="block", max_sweeps=300, tol=1.0, tol_kkt=1e-9,
                         executor=ex, setup=setup).objective
        print(f"reference f* = {f_star:.10g}")

    def stop(s, obj, ch, sec):
        return (obj - f_star) / abs(f_star) <= args.gap

    def fit(single):
        _blocksolve.DIRECTION_FLOAT32 = single
        try:
            t0 = time.perf_counter()
            res = fit_bcd(P, method="block", max_sweeps=200, tol=0, executor=ex, setup=setup,
                          callback=stop)
            return time.perf_counter() - t0, res
        finally:
            _blocksolve.DIRECTION_FLOAT32 = True

    names = {False: "float64 direction", True: "float32 direction"}
    for single in (False, True):  # compile, touch each setting's buffers
        fit(single)
    rows = {k: [] for k in names}
    for _ in range(args.runs):
        for single in (False, True):
            wall, res = fit(single)
            gap = (res.objective - f_star) / abs(f_star)
            outer = float(np.median(res.sweep_seconds))
            rows[single].append((wall, res.n_sweeps, outer, gap))
            print(f"{names[single]}: {res.n_sweeps} outer, {wall:.2f} s, median outer "
                  f"{outer:.3f} s, gap {gap:.2e}", flush=True)
    med = {k: np.median(np.array(v), axis=0) for k, v in rows.items()}
    for k in (False, True):
        w, its, outer, _ = med[k]
        print(f"{names[k]}: median {w:.2f} s to the gap, {its:.0f} outer iterations, "
              f"{1e3 * outer:.1f} ms per outer iteration")
    print(f"ratio float64 / float32: {med[False][0] / med[True][0]:.2f}x to the gap, "
          f"{med[False][2] / med[True][2]:.2f}x per outer iteration")


def dask_fits(args):
    import distributed

    from npkl_dist.executors._dask import DaskExecutor

    S, y, _ = graph_for(args.n)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                          loss="square", gamma=1.0, rank=16, seed=0)
    f_star = fit_bcd(P, method="block", max_sweeps=300, tol=1.0, tol_kkt=1e-9).objective

    def stop(s, obj, ch, sec):
        return (obj - f_star) / abs(f_star) <= args.gap

    def fit(ex, single):
        _blocksolve.DIRECTION_FLOAT32 = single  # the driver decides for every block
        try:
            t0 = time.perf_counter()
            res = fit_bcd(P, method="block", max_sweeps=200, tol=0, executor=ex,
                          callback=stop)
            return time.perf_counter() - t0, res
        finally:
            _blocksolve.DIRECTION_FLOAT32 = True

    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, env=env) as cluster, \
            distributed.Client(cluster) as client:
        ex = DaskExecutor(client, blocks=2)
        names = {False: "float64 direction", True: "float32 direction"}
        seen = {}
        from npkl_dist.executors._dask_block import DaskBlockSession as session_cls
        close = session_cls.close

        def keep(self):  # the session's halo bytes before it goes
            seen["bytes"] = list(self.halo_bytes)
            close(self)

        session_cls.close = keep
        for single in (False, True):
            fit(ex, single)  # compile, start the actors
        times = {k: [] for k in names}
        for _ in range(args.runs):
            for single in (False, True):
                wall, res = fit(ex, single)
                times[single].append(wall)
                b = np.array(seen["bytes"])
                gap = (res.objective - f_star) / abs(f_star)
                print(f"{names[single]}: {res.n_sweeps} outer, {wall:.2f} s, gap {gap:.2e}, "
                      f"halo bytes per outer iteration {b.sum() / res.n_sweeps / 1e6:.2f} MB "
                      f"(largest exchange {b.max() / 1e6:.2f} MB)", flush=True)
        session_cls.close = close
    for k in (False, True):
        print(f"{names[k]}: median {np.median(times[k]):.2f} s to the gap")


def kernels(args):
    import numba
    import scipy.sparse as sp

    from bench._env import time_alternately
    from npkl_dist._blocksolve import RB, AMGPreconditioner, _cg_update_x_sums, _matvec_dot
    from npkl_dist._plan import _split, permute, reverse_cuthill_mckee

    if args.threads:
        numba.set_num_threads(args.threads)
    S, _, _ = graph_for(args.n)
    L = sp.csr_matrix(npkl_dist.laplacian(S, 1e-3))
    L = permute(L, reverse_cuthill_mckee(L))
    M = AMGPreconditioner(L, smooth=None, additive=True)
    off, diag = _split(L)
    n, r = L.shape[0], 16
    rng = np.random.default_rng(0)
    R = rng.standard_normal((n, r))
    X0 = rng.standard_normal((n, r))
    n_ch = (n + RB - 1) // RB
    Q, X = np.empty((n, r)), np.empty((n, r))
    parts = [np.empty((n_ch, r)) for _ in range(3)] + [np.empty(n_ch) for _ in range(2)]
    Zs = {"float64": np.empty((n, r)), "float32": np.empty((n, r), np.float32)}

    def step(Z):
        M.apply_dots(R, Z, parts[0], parts[1])
        _matvec_dot(off.indptr, off.indices, off.data, diag, Z, Q, parts[2])
        rz, pq = parts[0].sum(0), parts[2].sum(0)
        _cg_update_x_sums(X, Z, rz / pq, parts[3], parts[4])

    cases = {f"{k} direction": (lambda Z=Z: step(Z)) for k, Z in Zs.items()}
    for f in cases.values():
        X[...] = X0
        f()
    print(f"n = {n:,}, r = {r}, {numba.get_num_threads()} threads; the PCG step's passes "
          f"(apply_dots, _matvec_dot, _cg_update_x_sums)")
    med = time_alternately(cases, args.runs, unit="ms", before=lambda: X.__setitem__(..., X0))
    a, b = med["float64 direction"], med["float32 direction"]
    print(f"saved per outer iteration: {1e3 * (a - b):.1f} ms ({a / b:.2f}x)")


if __name__ == "__main__":
    main()
