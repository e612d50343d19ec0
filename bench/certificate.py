"""Benchmark: the rank certificate's Lanczos run with and without V's span shifted away.

A fit whose numerical rank is below half its rank ends with a certificate: the smallest
curvature of S = grad_K f that Lanczos finds (npkl_dist.solvers.bcd._rank). At a stationary V,
S V = 0, so V's columns are eigenvectors of S for the eigenvalue 0; run on S itself, Lanczos
must tell them from L's clustered small eigenvalues, to a tolerance relative to eigenvalues
of 1e-4. ``descent_certificate`` runs on S + c Q Q' + I (Q: V's significant column space)
instead, to an absolute tolerance. Measured on issue 78's mixture (20
classes in 20-D, 5-NN graph, pairs from 1% of the labels, rank from the pair count): the
default BCD fit, then both certificates of its V, their seconds and values.

Usage::

    python bench/certificate.py --n 30000 100000

writes ``bench/results/certificate/certificate.json`` (off the performance page; cited by
docs/decisions/certificate.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def undeflated(problem, V, maxiter=300, seed=0):
    """The certificate before docs/decisions/certificate.md: Lanczos on S itself, tol 1e-4."""
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    from npkl_dist.solvers.bcd._rank import gradient_matrix

    S = gradient_matrix(problem, V)
    v0 = np.random.default_rng(seed).standard_normal(S.shape[0])
    try:
        _, U = eigsh(S, k=1, which="SA", tol=1e-4, maxiter=maxiter, v0=v0)
    except ArpackNoConvergence as err:
        if err.eigenvalues.size == 0:
            return float("nan")
        U = err.eigenvectors
    u = U[:, 0] / np.linalg.norm(U[:, 0])
    return float(u @ (S @ u))


def main(argv=None):
    import npkl_dist as nk
    from bench import _results
    from bench.estimators_overhead import mixture
    from npkl_dist.solvers.bcd._rank import descent_certificate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[30_000, 100_000])
    ap.add_argument("--json", default=None, help="output path")
    args = ap.parse_args(argv)
    rows = []
    for n in args.n:
        X, y = mixture(n)
        rng = np.random.default_rng(1)
        part = np.where(rng.random(n) < 0.01, y, -1)
        L = nk.knn_graph(X, 5, seed=0, warn=False).laplacian(1e-3)
        n_start = int((part >= 0).sum())
        cons = nk.sample_constraints(part, n_start, n_start, seed=0)
        problem = nk.NPKLProblem.build(L, cons, rank=nk.default_rank(cons.m + 100, n), seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", nk.ConvergenceWarning)
            t = time.perf_counter()
            fit = nk.fit_bcd(problem)
            fit_s = time.perf_counter() - t
        t = time.perf_counter()
        old = undeflated(problem, fit.V)
        old_s = time.perf_counter() - t
        t = time.perf_counter()
        new, _ = descent_certificate(problem, fit.V)
        new_s = time.perf_counter() - t
        rows.append(
            {
                "n": n,
                "rank": problem.rank,
                "numerical_rank": int(fit.numerical_rank),
                "fit_s": round(fit_s, 2),
                "sweeps_s": round(float(sum(fit.sweep_seconds)), 2),
                "undeflated_s": round(old_s, 2),
                "undeflated_value": None if np.isnan(old) else float(f"{old:.4g}"),
                "deflated_s": round(new_s, 2),
                "deflated_value": float(f"{new:.4g}"),
            }
        )
        print(rows[-1], flush=True)
    _results.write(
        "certificate",
        title="The rank certificate: Lanczos on S against Lanczos with V's span shifted away",
        measures=(
            "seconds and value (smallest Rayleigh quotient found; none: ARPACK converged "
            "nothing within its cap of 300 restarts) of each certificate of the default fit's V"
        ),
        reference="the certificate before the change (Lanczos on S), same V, same run",
        command=_results.command("bench/certificate.py", argv),
        columns=[
            ("n", "points"),
            ("numerical_rank", "numerical rank"),
            ("rank", "rank"),
            ("fit_s", "fit s (with the new certificate)"),
            ("sweeps_s", "sweeps s"),
            ("undeflated_s", "Lanczos on S, s"),
            ("undeflated_value", "its value"),
            ("deflated_s", "shifted, s"),
            ("deflated_value", "its value"),
        ],
        rows=rows,
        notes=["issue 78's mixture: 20 classes in 20-D, 5-NN graph, square loss, gamma = 1"],
        args=vars(args),
        path=args.json
        or os.path.join(os.path.dirname(__file__), "results", "certificate", "certificate.json"),
    )


if __name__ == "__main__":
    main()
