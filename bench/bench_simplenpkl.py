"""Benchmark: SimpleNPKL's reference paths against the fast ones on the adult data.

Problem (bench/paper/run.py, repetition 0): features scaled to [-1, 1], kNN graph k = 50 with
Gaussian weights, Laplacian with delta = 1e-3, 0.6n must-link + 0.6n cannot-link pairs
(seed 0), rank from Pataki's bound, gamma = 1, B = 100 n. For each data set and loss the
fit runs ``--runs`` times with ``eigensolver='arpack'`` (the reference: eigsh at every
kernel step, default BLAS threads) and ``eigensolver='fast'``, alternating, one process;
the table gives the median wall seconds of ``fit_simplenpkl`` (graph and constraints are
built once, outside the timing), the ratio, the final objective of both and the Rand
accuracy of kernel k-means (true number of classes, seeds ``--kmeans-seeds``) on K = V V'.
The published times are the MATLAB ones of simplenpkl-jmlr2011 Table 7
(bench/paper/published.py ``_SNPKL7_CPU``).

``--compare eigensolver`` (default): reference ``eigensolver='arpack'`` against ``'fast'``,
both with the same dual solver (``--dual``). ``--compare dual``: the paper's Alg. 1
(``dual='alg1'``) against L-BFGS-B on the same dual (``dual='lbfgs'``), both with the fast
eigensolver.

The machine is shared: wrap the run in ``flock /tmp/npkl-bench.lock``.

Usage::

    python bench/bench_simplenpkl.py --datasets adult-a1a adult-a2a adult-a4a \
        --losses linear squared_hinge --runs 3
    python bench/bench_simplenpkl.py --compare dual --datasets adult-a1a adult-a4a \
        --losses squared_hinge --runs 3

Prints the table and writes it, stamped with the machine and the commit, to
``bench/results/simplenpkl_<compare>.json`` (``--json``; ``--json ''`` for none).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import npkl_dist  # noqa: E402
from bench.paper.run import prepare_data  # noqa: E402
from npkl_dist import ConvergenceWarning  # noqa: E402
from npkl_dist.solvers.simplenpkl._fit import fit_simplenpkl  # noqa: E402

#: simplenpkl-jmlr2011 Table 7, CPU seconds (LL = linear, SHL = squared hinge)
PUBLISHED = {
    "adult-a1a": {"linear": 8.5, "squared_hinge": 322.9},
    "adult-a2a": {"linear": 15.3, "squared_hinge": 637.2},
    "adult-a3a": {"linear": 28.8, "squared_hinge": 1160.8},
    "adult-a4a": {"linear": 66.3, "squared_hinge": 2341.3},
    "adult-a5a": {"linear": 79.6, "squared_hinge": 3692.1},
}


def build(name):
    X, y, meta = prepare_data(name)
    graph = npkl_dist.knn_graph(X, meta.get("knn", 5), seed=0, warn=False)
    cons = npkl_dist.sample_constraints(y, seed=0)
    return X.shape[0], y, graph.laplacian(1e-3), cons


def one_fit(problem, B, config):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        res = fit_simplenpkl(problem, B=B, **config)
        return time.perf_counter() - t0, res


def configs(compare, dual):
    """(reference, fast) keyword arguments of fit_simplenpkl."""
    if compare == "dual":
        return {"eigensolver": "fast", "dual": "alg1"}, {"eigensolver": "fast", "dual": "lbfgs"}
    return {"eigensolver": "arpack", "dual": dual}, {"eigensolver": "fast", "dual": dual}


def rand(y, V, seeds):
    k = int(np.unique(y).size)
    return [
        npkl_dist.clustering_metrics(y, npkl_dist.kernel_kmeans(V, k, seed=s))["rand_accuracy"]
        for s in seeds
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["adult-a1a", "adult-a2a", "adult-a4a"])
    ap.add_argument(
        "--losses",
        nargs="+",
        default=["linear", "squared_hinge"],
        choices=["linear", "squared_hinge", "square", "hinge"],
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compare", choices=["eigensolver", "dual"], default="eigensolver")
    ap.add_argument(
        "--dual",
        choices=["lbfgs", "alg1"],
        default="lbfgs",
        help="dual solver of both sides with --compare eigensolver",
    )
    ap.add_argument("--kmeans-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--json",
        default=None,
        help="results file (default: bench/results/simplenpkl_<compare>.json; '' for none)",
    )
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    t_wall = time.perf_counter()
    cfg = dict(zip(("ref", "fast"), configs(args.compare, args.dual)))
    rows = []
    for name in args.datasets:
        n, y, L, cons = build(name)
        for loss in args.losses:
            p = npkl_dist.NPKLProblem.build(L, cons, loss=loss, seed=0)
            if loss == args.losses[0]:  # warm-up (imports, caches), untimed
                q = npkl_dist.NPKLProblem.build(L, cons, loss="linear", seed=0)
                for config in cfg.values():
                    one_fit(q, 100.0 * n, config)
            times = {"ref": [], "fast": []}
            last = {}
            for r in range(args.runs):
                for side, config in cfg.items():
                    t, res = one_fit(p, 100.0 * n, config)
                    times[side].append(t)
                    last[side] = res
                    print(
                        f"{name} {loss} run {r} {side} {config}: {t:.2f} s, objective "
                        f"{res.objective:.10g}, eigensolves {res.n_eigsolves}",
                        flush=True,
                    )
            ref, fast = last["ref"], last["fast"]
            row = {
                "name": name,
                "n": n,
                "m": cons.m,
                "rank": p.rank,
                "loss": loss,
                "t_ref": float(np.median(times["ref"])),
                "t_fast": float(np.median(times["fast"])),
                "runs": args.runs,
                "obj_ref": ref.objective,
                "obj_fast": fast.objective,
                "gap_ref": ref.duality_gap,
                "gap_fast": fast.duality_gap,
                "iters": ref.n_sweeps,
                "iters_fast": fast.n_sweeps,
                "solves": (ref.n_eigsolves, fast.n_eigsolves),
                "rand_ref": rand(y, ref.V, args.kmeans_seeds),
                "rand_fast": rand(y, fast.V, args.kmeans_seeds),
                "published": PUBLISHED.get(name, {}).get(loss),
            }
            rows.append(row)
            print(row, flush=True)
    wall = time.perf_counter() - t_wall
    if args.json != "":
        write(args, rows, wall)


def write(args, rows, wall):
    """Print the table and write bench/results/simplenpkl_<compare>.json (``--json``)."""
    from bench import _results

    for r in rows:
        pub = r["published"]
        r["ratio"] = f"{r['t_ref'] / r['t_fast']:.2f}x"
        r["pub_ratio"] = None if pub is None else f"{pub / r['t_fast']:.0f}x"
        r["rel_diff"] = abs(r["obj_fast"] - r["obj_ref"]) / max(abs(r["obj_ref"]), 1e-300)
        r["rand"] = f"{np.mean(r['rand_ref']):.4f} / {np.mean(r['rand_fast']):.4f}"
    columns = [
        ("name", "data set"),
        ("n", "n"),
        ("m", "pairs"),
        ("rank", "rank"),
        ("loss", "loss"),
        ("iters", "iterations"),
        ("t_ref", "reference s"),
        ("t_fast", "fast s"),
        ("ratio", "reference / fast"),
        ("published", "published s"),
        ("pub_ratio", "published / fast"),
        ("rel_diff", "objective rel. diff"),
        ("rand", "Rand reference / fast"),
    ]
    for r in rows:
        print(" | ".join(str(r[k]) for k, _ in columns))
    if args.compare == "dual":
        title = "SimpleNPKL: L-BFGS-B on the dual against the paper's Alg. 1"
        ref = (
            "dual='alg1' (simplenpkl-jmlr2011 Alg. 1) in the same run, both "
            "eigensolver='fast'; and simplenpkl-jmlr2011 Table 7's MATLAB seconds"
        )
    else:
        title = "SimpleNPKL: the fast eigensolver paths against ARPACK at every step"
        ref = (
            "eigensolver='arpack' (eigsh at every kernel step) in the same run, both "
            f"dual='{args.dual}'; and simplenpkl-jmlr2011 Table 7's MATLAB seconds"
        )
    _results.write(
        f"simplenpkl_{args.compare}",
        title=title,
        measures="median wall seconds of fit_simplenpkl (graph and constraints built once, "
        "outside the timing), reference and fast alternating in one process",
        reference=ref,
        command=_results.command("bench/bench_simplenpkl.py", args.argv),
        args={k: v for k, v in vars(args).items() if k != "argv"},
        path=args.json or None,
        columns=columns,
        rows=rows,
        notes=[
            "problem: bench/paper/run.py repetition 0 (kNN k=50, delta=1e-3, 0.6n + 0.6n "
            "pairs, Pataki rank, gamma=1, B=100n); Rand = kernel k-means on K = V V', mean "
            f"over seeds {' '.join(map(str, args.kmeans_seeds))}"
        ],
        extra={"wall_seconds": wall},
    )


if __name__ == "__main__":
    main()
