"""Benchmark: kernel learning on a social graph against what a user would pick instead (issue 72).

Problem: a planted partition (``npkl_dist.planted_partition``, igraph's SBM, seeded): n nodes in
``--groups`` equal groups, mean degree ``--degree``, a fraction ``--mix`` of each node's edges
leaving its group; ``--labelled`` of the nodes labelled (seeded), the papers' sampling
protocol for the pairs (``sample_constraints``: 0.6n cannot-link, and every must-link pair the
labels allow up to 0.6n), square loss, gamma 1, the default rank (128), delta 1e-3.

In one run, one process, on the same graph and labels:

* ``default``: ``fit_bcd`` as ``npkl fit`` runs it (method and start 'auto'),
* ``random``: the same fit from the paper's random start (``--random-seeds`` of them; the
  best objective of all fits is the reference optimum f*),
* ``propagation``: harmonic label propagation with the same L (one-hot labels of the
  labelled nodes, L_UU F_U = -L_UL Y_L by conjugate gradients on all classes at once,
  Jacobi-preconditioned, to a relative residual of 1e-6 per class; argmax),
* ``spectral``: no labels at all, the bottom ``groups`` eigenvectors of the normalised
  adjacency (scipy ``eigsh``) and k-means,

each with its wall time (the fits': ``fit_bcd``'s call, set-up and start included), ARI and
NMI against the planted groups (the fits: kernel k-means on the rows of V, ``groups``
clusters, the must-link groups seeding one more k-means run as ``npkl fit`` does), the fits'
objective, relative gap to f*, outer iterations and numerical rank, and the time at which
each fit's objective trace first came within ``--gap`` of f*. The fits are also clustered
with the cosine-normalised kernel (``npkl fit --normalize-kernel``: k-means on unit rows of
V), whose ARI is ``ari_normalized``; ``ari_normalized_restarts`` is the same without the
seeded run (10 k-means++ restarts only).

Writes a JSON (bench/_results.py: machine, commit, command, arguments, rows) to ``--json``
(default bench/results/social_graph_<n>.json) and prints a table::

    python bench/social_graph.py --n 100000
    python bench/social_graph.py --n 1000000 --random-seeds 0 --max-sweeps 40 --skip raw restarts
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import npkl_dist as nk

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))
from bench.paper.report import code_version, machine  # noqa: E402  (the header line)

#: What bench/results/social_graph_<n>.json says about itself (bench/_results.py).
DESCRIPTION = dict(
    title="Kernel learning on a planted-partition social graph",
    measures="wall seconds (fit_bcd's call, set-up and start included), seconds to the gap, "
    "objective, outer iterations and numerical rank of the default fit; ARI of kernel "
    "k-means on V and on the cosine-normalised V against the planted groups",
    reference="the fit from the paper's random start, harmonic label propagation on the same "
    "L, and unsupervised spectral embedding + k-means, on the same graph and labels",
    columns=[
        ("method", "method"),
        ("seconds", "seconds"),
        ("seconds_to_gap", "s to gap"),
        ("gap", "gap to f*"),
        ("iterations", "outer its"),
        ("numerical_rank", "numerical rank"),
        ("ari", "ARI"),
        ("ari_normalized", "ARI (normalised)"),
        ("nmi", "NMI"),
    ],
    notes=["f* = the best objective of the fits; the gap column is relative to it"],
)


def problem(n, groups, degree, mix, labelled, seed):
    t = time.perf_counter()
    edges, y = nk.planted_partition(n, groups, degree, mix, seed=seed)
    gen = time.perf_counter() - t
    g = nk.graph_from_edges(edges, len(y), warn=False)
    rng = np.random.default_rng(seed)
    part = np.full(len(y), -1)
    lab = rng.random(len(y)) < labelled
    part[lab] = y[lab]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nk.ConstraintWarning)
        cons = nk.sample_constraints(part, seed=seed)
    L = g.laplacian(1e-3)
    info = {
        "n_points": len(y),
        "n_edges": len(edges),
        "generate_seconds": gen,
        "n_labelled": int(lab.sum()),
        "n_constraints": cons.m,
        "n_components": int(g.n_components),
    }
    return edges, y, part, L, cons, info


def fit_row(name, p, y, groups, skip=(), **kw):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nk.ConvergenceWarning)
        r = nk.fit_bcd(p, **kw)
    wall = time.perf_counter() - t
    cons = p.constraints

    def clusters(normalize, seeded=True):
        labels = nk.kernel_kmeans(
            r.V, groups, seed=0, normalize=normalize, constraints=cons if seeded else None
        )
        return nk.clustering_metrics(y, labels)

    none = {"ari": None, "nmi": None}
    m = none if "raw" in skip else clusters(False)
    mn = clusters(True)
    mr = none if "restarts" in skip else clusters(True, seeded=False)
    # the objective after each outer iteration, against the fit's clock (set-up, then the
    # iterations and their evaluations)
    clock = r.setup_seconds + np.cumsum(
        np.asarray(r.sweep_seconds) + np.asarray(r.objective_seconds)
    )
    return {
        "method": name,
        "seconds": wall,
        "objective": r.objective,
        "iterations": r.n_sweeps,
        "numerical_rank": r.numerical_rank,
        "start": r.start,
        "fit_method": r.method,
        "kkt": r.kkt,
        "ari": m["ari"],
        "nmi": m["nmi"],
        "ari_normalized": mn["ari"],
        "nmi_normalized": mn["nmi"],
        "ari_normalized_restarts": mr["ari"],
        "setup_seconds": r.setup_seconds,
        "trace": [float(x) for x in r.objective_trace],
        "clock": clock.tolist(),
    }


def block_cg(A, B, tol: float = 1e-6, max_iter: int = 5000):
    """``(X, iterations)`` solving A X = B for every column of B at once: Jacobi-preconditioned
    conjugate gradients per column (A sparse symmetric positive definite), one sparse-times-
    dense product per iteration for all of them, until each column's residual is at most
    ``tol`` times its right-hand side's norm. (pyamg's hierarchy solves one column at a time,
    and an SBM graph is an expander, on which aggregation coarsens poorly and plain CG
    converges fast: docs/decisions/rank-deficient-starts.md.)"""
    inv_d = 1.0 / A.diagonal()[:, None]
    X = np.zeros_like(B)
    R = B.copy()
    Z = inv_d * R
    P = Z.copy()
    rz = np.einsum("ij,ij->j", R, Z)
    scale = np.linalg.norm(B, axis=0)
    scale[scale == 0] = 1.0
    for it in range(1, max_iter + 1):
        AP = A @ P
        pap = np.einsum("ij,ij->j", P, AP)
        alpha = np.divide(rz, pap, out=np.zeros_like(rz), where=pap > 0)
        X += alpha * P
        R -= alpha * AP
        if np.all(np.linalg.norm(R, axis=0) <= tol * scale):
            return X, it
        Z = inv_d * R
        rz_new = np.einsum("ij,ij->j", R, Z)
        beta = np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0)
        rz = rz_new
        P = Z + beta * P
    raise RuntimeError(f"block_cg: no convergence to {tol} in {max_iter} iterations")


def propagation(L, part, y, groups):
    """Harmonic label propagation on L: F_U = -L_UU^-1 L_UL Y_L, one-hot Y, argmax."""
    import scipy.sparse as sp

    t = time.perf_counter()
    L = sp.csr_matrix(L)
    lab = part >= 0
    U = np.flatnonzero(~lab)
    Lu = L[U][:, U].tocsr()
    Y = np.zeros((int(lab.sum()), groups))
    Y[np.arange(Y.shape[0]), part[lab]] = 1.0
    B = -(L[U][:, np.flatnonzero(lab)] @ Y)
    F, iterations = block_cg(Lu, np.asarray(B))
    pred = part.copy()
    pred[U] = np.argmax(F, axis=1)
    wall = time.perf_counter() - t
    m = nk.clustering_metrics(y, pred)
    return {
        "method": "propagation",
        "seconds": wall,
        "ari": m["ari"],
        "nmi": m["nmi"],
        "accuracy_unlabelled": float(np.mean(pred[U] == y[U])),
        "iterations": iterations,
    }


def spectral(edges, n, y, groups, seed):
    """Unsupervised: bottom eigenvectors of the normalised adjacency, rows normalised,
    k-means (no labels)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import eigsh
    from sklearn.cluster import KMeans

    t = time.perf_counter()
    A = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    A = (A + A.T).tocsr()
    d = np.asarray(A.sum(axis=1)).ravel()
    s = 1.0 / np.sqrt(np.maximum(d, 1e-12))
    An = sp.diags(s) @ A @ sp.diags(s)
    w, X = eigsh(An, k=groups, which="LA", v0=np.ones(n), tol=1e-6)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    pred = KMeans(groups, n_init=10, random_state=seed).fit_predict(X)
    wall = time.perf_counter() - t
    m = nk.clustering_metrics(y, pred)
    return {"method": "spectral", "seconds": wall, "ari": m["ari"], "nmi": m["nmi"]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--degree", type=float, default=20.0)
    ap.add_argument("--mix", type=float, default=0.3)
    ap.add_argument("--labelled", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--random-seeds",
        type=int,
        nargs="*",
        default=[0],
        help="seeds of the random-start fits (none: skip them)",
    )
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["default", "propagation", "spectral", "raw", "restarts"],
        help="raw: no k-means on V itself; restarts: no normalised k-means without the "
        "must-link seeding (each a k-means of 10 restarts per fit: long at n = 1e6)",
    )
    ap.add_argument("--gap", type=float, default=1e-3)
    ap.add_argument("--max-sweeps", type=int, default=1000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)

    edges, y, part, L, cons, info = problem(
        args.n, args.groups, args.degree, args.mix, args.labelled, args.seed
    )
    print(f"# {machine()}, commit {code_version()}", flush=True)
    print(f"# planted partition: {info}", flush=True)
    rows = []
    base = dict(loss="square", gamma=1.0)
    if "default" not in args.skip:
        p = nk.NPKLProblem.build(L, cons, seed=args.seed, **base)
        rows.append(
            fit_row("default", p, y, args.groups, skip=args.skip, max_sweeps=args.max_sweeps)
        )
        print(_line(rows[-1]), flush=True)
    for s in args.random_seeds:
        p = nk.NPKLProblem.build(L, cons, seed=s, **base)
        rows.append(
            fit_row(
                f"random (seed {s})",
                p,
                y,
                args.groups,
                skip=args.skip,
                start="random",
                max_sweeps=args.max_sweeps,
            )
        )
        print(_line(rows[-1]), flush=True)
    if "propagation" not in args.skip:
        rows.append(propagation(L, part, y, args.groups))
        print(_line(rows[-1]), flush=True)
    if "spectral" not in args.skip:
        rows.append(spectral(edges, len(y), y, args.groups, args.seed))
        print(_line(rows[-1]), flush=True)
    fits = [r for r in rows if "objective" in r]
    if fits:
        f_star = min(r["objective"] for r in fits)
        for r in fits:
            r["gap"] = (r["objective"] - f_star) / abs(f_star)
            tr = np.asarray(r["trace"])
            hit = np.flatnonzero(tr <= f_star * (1 + args.gap))
            r["seconds_to_gap"] = float(r["clock"][hit[0]]) if hit.size else None
    from bench import _results

    path = _results.write(
        f"social_graph_{args.n}",
        path=args.json,
        rows=rows,
        args={k: v for k, v in vars(args).items() if k != "argv"},
        extra={"problem": info},
        command=_results.command("bench/social_graph.py", args.argv),
        **DESCRIPTION,
    )
    out = json.loads(path.read_text())
    print(
        f"\n{'method':<20} {'seconds':>9} {'to gap':>9} {'objective':>12} {'gap':>9} "
        f"{'its':>5} {'rank':>5} {'ARI':>6} {'NMI':>6} {'ARI-n':>6}"
    )
    for r in rows:
        tg = r.get("seconds_to_gap")
        print(
            f"{r['method']:<20} {r['seconds']:9.1f} "
            f"{'' if tg is None else f'{tg:9.1f}':>9} "
            f"{r.get('objective', float('nan')):12.1f} {r.get('gap', float('nan')):9.2e} "
            f"{r.get('iterations', ''):>5} {r.get('numerical_rank', ''):>5} "
            f"{_f(r['ari'])} {_f(r['nmi'])} {_f(r.get('ari_normalized'))}"
        )
    return out


def _f(x):
    return f"{float('nan') if x is None else x:6.3f}"


def _line(r):
    keys = ("objective", "iterations", "numerical_rank", "start", "ari_normalized")
    extra = "".join(f" {k}={r[k]}" for k in keys if k in r)
    return f"{r['method']}: {r['seconds']:.1f} s, ARI {_f(r['ari'])}, NMI {_f(r['nmi'])}{extra}"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
