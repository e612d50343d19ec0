"""SimpleNPKL's sparse eigensolves: Lanczos with partial reorthogonalisation against ARPACK.

On the paper harness's repetition-0 inputs, A(gamma) of SimpleNPKL-linear (the one
eigensolve of a linear fit), one BLAS and one numba thread as the harness's tasks run:

* ``lanczos``: :func:`npkl_dist._lanczos.lanczos_top_eigs` (the fast path's solver) on the
  upper form the fit hands it (``_SymA``; since 2026-11-25 evening, before that on the CSR
  matrix, converted inside each call);
* ``arpack``: ``_eigsh(A, rank, v0, fast=True)`` with Lanczos switched off, i.e. eigsh with
  the compiled products (the fast path before, and its fallback now).

The two alternate, ``--runs`` times each; the table gives medians, the ratio, Lanczos's
steps / reorthogonalised steps / vectors orthogonalised, the largest eigenvalue difference
(relative to ||A||) and the largest true residual over ARPACK's tolerance,
``||A p_i - sigma_i p_i|| / (1e-10 max(eps^(2/3), |sigma_i|))``, for both.

    python bench/lanczos_vs_arpack.py [--datasets adult-a1a ...] [--runs 5]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATASETS = ["glass", "heart", "breast-cancer", "adult-a1a", "adult-a2a", "adult-a3a",
            "adult-a4a", "adult-a5a"]


def residual_ratio(A, w, P):
    from npkl_dist import _lanczos as lz
    r = np.linalg.norm(A @ P - P * w, axis=0)
    return float(np.max(r / (1e-10 * np.maximum(lz._EPS23, np.abs(w)))))


def measure(name, runs):
    import npkl_dist as nk
    from npkl_dist import _lanczos as lz
    from npkl_dist import _simplenpkl as snp
    from bench.paper.run import task_inputs

    X, y, meta, L, cons, cons_diag = task_inputs(name, 0)
    p = nk.NPKLProblem.build(L, cons, loss="linear", seed=0)
    n, k = p.n_points, p.rank
    A = snp._SparseA(p).set(np.full(p.constraints.m, p.gamma))
    upper = snp._SymA(p).set(np.full(p.constraints.m, p.gamma))
    v0 = np.random.default_rng(p.seed).standard_normal(n)
    def arpack():
        snp._SPARSE_LANCZOS = False
        try:
            return snp._eigsh(A, k, v0, True)
        finally:
            snp._SPARSE_LANCZOS = True

    def lanczos():
        w, P, stats, failure = lz.lanczos_top_eigs(upper, k, v0, snp._EIG_TOL)
        if failure is not None:
            raise RuntimeError(f"{name}: Lanczos failed: {failure}")
        return w, P, stats

    lanczos(), arpack()  # compile, warm
    times = {"lanczos": [], "arpack": []}
    for _ in range(runs):
        for label, fn in (("lanczos", lanczos), ("arpack", arpack)):
            t = time.perf_counter()
            out = fn()
            times[label].append(time.perf_counter() - t)
            if label == "lanczos":
                wl, Pl, stats = out
            else:
                wa, Pa = out
    order = np.argsort(wa)[::-1]
    wa, Pa = wa[order], Pa[:, order]
    scale = float(np.abs(wa).max())
    return {
        "n": n, "k": k, "nnz": A.nnz,
        "lanczos": float(np.median(times["lanczos"])),
        "arpack": float(np.median(times["arpack"])),
        "stats": stats,
        "dw": float(np.max(np.abs(wl - wa))) / scale,
        "res_l": residual_ratio(A, wl, Pl), "res_a": residual_ratio(A, wa, Pa),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=DATASETS)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(1)
    with threadpool_limits(1, user_api="blas"):
        print(f"machine: {platform.processor() or platform.machine()}, "
              f"Python {platform.python_version()}; median of {args.runs} alternating runs")
        print("| data set | n | rank | nnz(A) | ARPACK (ms) | Lanczos (ms) | ratio | steps "
              "| reorth. steps | vectors orth. | max eigenvalue diff / ||A|| "
              "| residual / tol: Lanczos | ARPACK |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in args.datasets:
            r = measure(name, args.runs)
            s = r["stats"]
            print(f"| {name} | {r['n']} | {r['k']} | {r['nnz']} | {1e3 * r['arpack']:.1f} "
                  f"| {1e3 * r['lanczos']:.1f} | {r['arpack'] / r['lanczos']:.2f} "
                  f"| {s['steps']} | {s['reorth_steps']} | {s['orth_vectors']} "
                  f"| {r['dw']:.1e} | {r['res_l']:.2f} | {r['res_a']:.2g} |", flush=True)


if __name__ == "__main__":
    main()
