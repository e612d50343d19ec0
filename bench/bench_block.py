"""Benchmark: time to solution of plain sweeps vs block solves (issue 6).

Problem (the issue's): n points from a 10-cluster Gaussian mixture in 8-D, kNN graph with
k = 10 (``npkl_dist.knn_graph``: exact up to 50,000 points, pynndescent above), Gaussian
weights, delta = 1e-3, rank r (default 16). Constraints: a fraction of the points paired at
random (disjoint pairs, must/cannot from the cluster labels), or the papers' protocol
(0.6n must + 0.6n cannot pairs from the labels).

For each case a long reference run (the block method until its scaled KKT residual is below
1e-8 or ``--ref-iters`` outer iterations) gives f*; f* is then the lowest objective any run
reached. Each method's time to a relative gap (f - f*) / f* <= ``--gap`` counts everything
from the call of ``fit_bcd``: relabelling, colouring, AMG set-up, the start, sweeps/outer
iterations and the objective evaluations. "Sweep-equivalents" divides that time by the
median time of one plain sweep (colour steps only) measured in the same case. Accuracy:
kernel k-means (K = V V') with 10 clusters, Rand index and ARI against the mixture labels.

Usage::

    python bench/bench_block.py --n 100000 --fractions 0.001 0.01 0.1 protocol \
        --losses square squared_hinge hinge
    python bench/bench_block.py --n 1000000 --fractions 0.01 --losses square \
        --max-sweeps 600
    python bench/bench_block.py --n 100000 --fractions 0.001 0.01 0.1 protocol \
        --losses square --figure bench/results/block_convergence_1e5.png

Prints the table and writes it, stamped with the machine and the commit, to
``bench/results/block_<n>.json`` (``--json``); ``python -m bench.performance`` renders it on
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings

import numpy as np

import npkl_dist
import npkl_dist.executors
from npkl_dist import (
    Constraints,
    ConvergenceWarning,
    NPKLProblem,
    clustering_metrics,
    fit_bcd,
    kernel_kmeans,
    knn_graph,
    sample_constraints,
)

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:  # run as a script
    sys.path.insert(0, os.path.dirname(HERE))
from bench.block_figure import curve, figure, frac_label, time_at_gap  # noqa: E402

CACHE = os.path.join(HERE, ".cache")


def mixture(n, seed=0):
    from sklearn.datasets import make_blobs

    return make_blobs(n, n_features=8, centers=10, cluster_std=2.0, random_state=seed)


def graph_for(n, seed=0):
    """The kNN affinity, cached on disk (pynndescent at 1e6 takes a minute)."""
    import scipy.sparse as sp

    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"mixture8d_n{n}_k10_s{seed}.npz")
    X, y = mixture(n, seed)
    if os.path.exists(path):
        return sp.load_npz(path).tocsr(), y, 0.0
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        G = knn_graph(X, 10, seed=seed)
    t = time.perf_counter() - t0
    sp.save_npz(path, G.S.tocsr())
    return G.S.tocsr(), y, t


def constraints_for(y, frac, seed=0):
    n = y.shape[0]
    if frac == "protocol":
        return sample_constraints(y, seed=seed)
    rng = np.random.default_rng(seed)
    k = max(2, int(float(frac) * n) // 2 * 2)
    pts = rng.choice(n, k, replace=False)
    i, j = pts[::2], pts[1::2]
    return Constraints.from_arrays(i, j, np.where(y[i] == y[j], 1, -1), n)


def time_to_gap(res, f_star, gap, steps_only=False):
    """Seconds from the call until the objective is within ``gap`` of f*, or None.
    ``steps_only``: without the per-sweep objective evaluations (``curve``'s ``t_steps``)."""
    return time_at_gap(curve(res), f_star, gap, "t_steps" if steps_only else "t")


def iters_to_gap(res, f_star, gap):
    for k, f in enumerate(res.objective_trace, 1):
        if (f - f_star) / abs(f_star) <= gap:
            return k
    return None


def accuracy(V, y, seed=0):
    lab = kernel_kmeans(V, 10, seed=seed)
    m = clustering_metrics(y, lab)
    return m["rand_accuracy"], m["ari"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--fractions", nargs="+", default=["0.001", "0.01", "0.1", "protocol"])
    ap.add_argument("--losses", nargs="+", default=["square", "squared_hinge", "hinge"])
    ap.add_argument("--gap", type=float, default=1e-4)
    ap.add_argument(
        "--max-sweeps",
        type=int,
        default=3000,
        help="plain sweeps at most (the run stops earlier once it reaches the gap)",
    )
    ap.add_argument("--max-outer", type=int, default=400)
    ap.add_argument("--ref-iters", type=int, default=1500)
    ap.add_argument(
        "--f-star",
        type=float,
        default=None,
        help="skip the reference run and take this f* (from an earlier run's "
        "reference, cited in the notes; one case only)",
    )
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--json", default=None, help="results file (default: bench/results/block_<n>.json)"
    )
    ap.add_argument(
        "--figure",
        default=None,
        help="PNG of the relative gap against wall time per case; the curves' "
        "data go to the same path with .json (redraw or merge with "
        "bench/block_figure.py)",
    )
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.figure and not args.figure.endswith(".png"):
        ap.error(f"--figure: expected a path ending in .png, got {args.figure!r}")
    warnings.simplefilter("ignore", ConvergenceWarning)
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    rows = []
    notes = []
    cases = []
    t_all = time.perf_counter()
    for n in args.n:
        S, y, t_graph = graph_for(n)
        notes.append(
            f"n={n:,}: graph {S.nnz // 2:,} edges"
            + (f", built in {t_graph:.0f} s" if t_graph else " (cached)")
        )
        L = npkl_dist.laplacian(S, 1e-3)
        for frac in args.fractions:
            C = constraints_for(y, frac)
            n_con = np.unique(np.r_[C.i, C.j]).size
            for loss in args.losses:
                P = NPKLProblem.build(L, C, loss=loss, gamma=1.0, rank=args.rank, seed=0)
                auto = npkl_dist.solvers.bcd._setup.choose_method(P, ex)
                say = lambda m: print(f"[n={n} frac={frac} {loss}] {m}", flush=True)  # noqa
                if args.f_star is None:
                    ref = fit_bcd(
                        P,
                        method="block",
                        max_sweeps=args.ref_iters,
                        tol=1.0,
                        tol_kkt=1e-8,
                        executor=ex,
                    )
                    f_ref = ref.objective
                    say(
                        f"reference: {ref.n_sweeps} outer, f={ref.objective:.8g}, "
                        f"kkt={ref.kkt:.2e}, {ref.fit_seconds:.1f} s"
                    )
                else:
                    f_ref = args.f_star
                blk = fit_bcd(
                    P,
                    method="block",
                    max_sweeps=args.max_outer,
                    tol=0,
                    tol_objective=None,
                    executor=ex,
                    callback=_stopper(f_ref, args.gap),
                )
                say(f"block: {blk.n_sweeps} outer, {blk.fit_seconds:.1f} s")
                swp = fit_bcd(
                    P,
                    method="sweeps",
                    max_sweeps=args.max_sweeps,
                    tol=0,
                    executor=ex,
                    callback=_stopper(f_ref, args.gap),
                )
                say(f"sweeps: {swp.n_sweeps} sweeps, {swp.fit_seconds:.1f} s")
                f_star = min(f_ref, min(blk.objective_trace), min(swp.objective_trace))
                t_sweep = float(np.median(swp.sweep_seconds))
                cb, cs = curve(blk), curve(swp)
                tb, ts = time_at_gap(cb, f_star, args.gap), time_at_gap(cs, f_star, args.gap)
                acc_b = accuracy(blk.V, y)
                acc_s = accuracy(swp.V, y)
                gap_s_end = (swp.objective_trace[-1] - f_star) / abs(f_star)
                ib = iters_to_gap(blk, f_star, args.gap)
                rows.append(
                    {
                        "n": n,
                        "frac": frac,
                        "n_con": n_con,
                        "pairs": C.m,
                        "loss": loss,
                        "auto": auto,
                        "f_star": f_star,
                        "t_sweep": t_sweep,
                        "blk_iters": ib,
                        "blk_t": tb,
                        "blk_cg": sum(blk.cg_iterations[: ib or None]),
                        "swp_iters": iters_to_gap(swp, f_star, args.gap),
                        "swp_t": ts,
                        "swp_n": swp.n_sweeps,
                        "swp_total": swp.fit_seconds,
                        "swp_gap_end": gap_s_end,
                        "acc_b": acc_b,
                        "acc_s": acc_s,
                        "blk_t_steps": time_at_gap(cb, f_star, args.gap, "t_steps"),
                        "swp_t_steps": time_at_gap(cs, f_star, args.gap, "t_steps"),
                        "swp_steps_total": cs["t_steps"][-1],
                        "kkt_b": blk.kkt,
                        "kkt_s": swp.kkt,
                    }
                )
                say(str(rows[-1]))
                cases.append(
                    {
                        "n": n,
                        "frac": frac,
                        "loss": loss,
                        "f_star": f_star,
                        "t_sweep": t_sweep,
                        "block": cb,
                        "sweeps": cs,
                    }
                )
    write(args, rows, notes, time.perf_counter() - t_all)
    if args.figure:
        with open(args.figure[:-4] + ".json", "w") as fh:
            from bench import _results

            json.dump(
                {
                    "command": _results.command("bench/bench_block.py", args.argv),
                    **_results.stamps(),
                    "gap": args.gap,
                    "cases": cases,
                },
                fh,
            )
        print(figure(cases, args.figure, gap=args.gap))


def _stopper(f_ref, gap):
    """Stop a run once it is at half the gap to the reference optimum (saves bench time)."""

    def cb(sweep, obj, change, seconds):
        return (obj - f_ref) / abs(f_ref) <= 0.5 * gap

    return cb


def _cpu():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _speedup(t_sweeps, sweeps_total, t_block):
    """Sweeps' time to the gap over the block's; a lower bound (">", the sweeps' whole run)
    where the sweeps did not reach it; "-" where the block did not."""
    if t_block is None:
        return "-"
    if t_sweeps is None:
        return f">{sweeps_total / t_block:.1f}x"
    return f"{t_sweeps / t_block:.1f}x"


def _fmt_t(t):
    return "-" if t is None else f"{t:.1f}"


def write(args, rows, notes, wall):
    """Print the table and write bench/results/block_<n>.json (``--json``)."""
    from bench import _results

    shown = []
    for r in rows:
        shown.append(
            {
                **r,
                "constrained": f"{frac_label(r['frac'])} ({r['n_con']:,} pts)",
                "sweeps_iters": (
                    str(r["swp_iters"])
                    if r["swp_iters"] is not None
                    else f">{r['swp_n']} (gap {r['swp_gap_end']:.1e})"
                ),
                "sweeps_s": (
                    _fmt_t(r["swp_t"]) if r["swp_t"] is not None else f">{r['swp_total']:.1f}"
                ),
                "block_outer": f"{r['blk_iters'] or '-'} ({r['blk_cg']})",
                "block_s": _fmt_t(r["blk_t"]),
                "sweep_eq": "-" if r["blk_t"] is None else f"{r['blk_t'] / r['t_sweep']:.0f}",
                "speedup": _speedup(r["swp_t"], r["swp_total"], r["blk_t"]),
                "speedup_steps": _speedup(
                    r["swp_t_steps"], r["swp_steps_total"], r["blk_t_steps"]
                ),
                "rand": f"{r['acc_s'][0]:.4f} / {r['acc_b'][0]:.4f}",
            }
        )
    columns = [
        ("n", "n"),
        ("constrained", "constrained"),
        ("loss", "loss"),
        ("auto", "auto"),
        ("sweeps_iters", "sweeps: iters"),
        ("sweeps_s", "sweeps: s"),
        ("block_outer", "block: outer (CG its)"),
        ("block_s", "block: s"),
        ("sweep_eq", "block in sweeps' time"),
        ("speedup", "speed-up"),
        ("speedup_steps", "speed-up, iterations only"),
        ("rand", "Rand sweeps / block"),
    ]
    for r in shown:
        print(" | ".join(str(r[k]) for k, _ in columns))
    name = "block_" + "_".join(str(n) for n in args.n)
    _results.write(
        name,
        title=f"Block solves against plain sweeps, time to a {args.gap:g} gap",
        measures="seconds from the call of fit_bcd (set-up, AMG, start, iterations, objective "
        "evaluations) until the objective is within the gap of f*, default block "
        "solves",
        reference="plain BCD sweeps (bcdkl-tnnls2015 Alg. 1) on the same problem in the same "
        "run; f* = the lowest objective of a long block reference run "
        "(KKT < 1e-8) and of both runs",
        command=_results.command("bench/bench_block.py", args.argv),
        args={k: v for k, v in vars(args).items() if k != "argv"},
        path=args.json,
        columns=columns,
        rows=shown,
        notes=[
            f"problem: 10-cluster Gaussian mixture in 8-D, kNN k=10, Gaussian weights, "
            f"delta=1e-3, r={args.rank}, gamma=1; " + "; ".join(notes),
            f"plain sweeps capped at {args.max_sweeps}; '-' = gap not reached (the "
            f"speed-up is then a lower bound); 'iterations only' leaves out the objective "
            f"evaluations after each sweep / outer iteration",
        ],
        extra={"wall_seconds": wall},
    )


if __name__ == "__main__":
    main()
