"""Benchmark: plain sweeps vs block solves on real data at the papers' protocol (issue 6).

``bench_block.py`` measures ``method='auto'``'s choice on a 10-cluster Gaussian mixture.
This measures it where users meet it: scikit-learn's digits exactly as ``npkl demo`` fits
them (standardised features, kNN k = 5, 0.6n must-link + 0.6n cannot-link pairs, rank from
the Pataki bound), and the paper harness's data sets at their protocol (repetition 0 of
``bench/paper/run.py``'s inputs; the adult sets use k = 50).

For each data set and loss:

* f*: a long block reference run (scaled KKT residual below 1e-9, or ``--ref-iters``
  outer iterations), lowered to the best objective any run reached;
* time to the relative gaps ``--gaps`` (f - f*)/f*, from the call of ``fit_bcd``, for both
  methods, traced (the per-iteration objective counted, ``t``) and "iterations only"
  (``t_steps``: what the same iterates cost in an untraced fit);
* the default fit: ``trace=False``, ``tol=1e-5`` (the library's default step-size rule) and
  at most ``--max-default`` iterations, i.e. what a user's fit with default options costs,
  with the gap it stops at.

Each timing is the median of ``--runs`` runs (the iterates do not depend on the run).

Usage::

    python bench/auto_real.py --datasets digits adult-a1a adult-a2a --losses square
    python bench/auto_real.py --datasets digits --losses square squared_hinge --runs 3

Prints the table and writes it, stamped with the machine and the commit, to
``bench/results/auto_real.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

import npkl_dist
import npkl_dist.executors
from npkl_dist import ConvergenceWarning, NPKLProblem, fit_bcd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.block_figure import curve, time_at_gap  # noqa: E402

METHODS = ("sweeps", "block")


def digits_problem_inputs(seed=0):
    """The demo's inputs: (L, constraints), as ``npkl demo`` builds them."""
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    graph = npkl_dist.knn_graph(X, 5, seed=seed, warn=False)
    return graph.laplacian(1e-3), npkl_dist.sample_constraints(y, seed=seed)


def paper_problem_inputs(name, rep=0):
    """Repetition ``rep`` of the paper harness's inputs: (L, constraints)."""
    from bench.paper.run import task_inputs

    _, _, _, L, cons, _ = task_inputs(name, rep)
    return L, cons


def inputs(name):
    return digits_problem_inputs() if name == "digits" else paper_problem_inputs(name)


def _stop_at(f_ref, gap):
    """A fit callback that stops the fit once its objective is within ``gap`` of f_ref."""

    def cb(sweep, f, change, seconds):
        return (f - f_ref) / abs(f_ref) <= gap

    return cb


def measure(P, ex, gaps, runs, max_iters, ref_iters, max_default):
    """Medians over ``runs`` of each method's time to each gap and of its default fit."""
    # tol=1.0: the step-size rule always holds, so the KKT residual decides
    ref = fit_bcd(P, method="block", max_sweeps=ref_iters, tol=1.0, tol_kkt=1e-9, executor=ex)
    traced = {m: [] for m in METHODS}
    default = {m: [] for m in METHODS}
    for _ in range(runs):
        for m in METHODS:
            cb = _stop_at(ref.objective, min(gaps) * 0.5)
            traced[m].append(
                fit_bcd(P, method=m, max_sweeps=max_iters, tol=0.0, executor=ex, callback=cb)
            )
            default[m].append(
                fit_bcd(P, method=m, max_sweeps=max_default, tol=1e-5, trace=False, executor=ex)
            )
    f_star = min(
        [ref.objective]
        + [min(r.objective_trace) for m in METHODS for r in traced[m]]
        + [r.objective for m in METHODS for r in default[m]]
    )
    out = {"f_star": f_star, "ref_iters": ref.n_sweeps, "ref_kkt": ref.kkt}
    for m in METHODS:
        curves = [curve(r) for r in traced[m]]
        for g in gaps:
            for key in ("t", "t_steps"):
                ts = [time_at_gap(c, f_star, g, key) for c in curves]
                out[(m, g, key)] = None if any(t is None for t in ts) else float(np.median(ts))
            ks = [
                next(
                    (
                        k
                        for k, f in enumerate(r.objective_trace, 1)
                        if (f - f_star) / abs(f_star) <= g
                    ),
                    None,
                )
                for r in traced[m]
            ]
            out[(m, g, "iters")] = ks[0]
        d = default[m]
        out[(m, "default")] = {
            "seconds": float(np.median([r.fit_seconds for r in d])),
            "iters": d[0].n_sweeps,
            "converged": bool(d[0].converged),
            "gap": (d[0].objective - f_star) / abs(f_star),
        }
    return out


def _ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.1f}x"


def write(args, rows, wall):
    """Print the table and write bench/results/auto_real.json (``--json``): one row per data
    set, loss and gap, and one per data set and loss for the default fit (gap 'default')."""
    from bench import _results

    shown = []
    for r in rows:
        o = r["out"]
        head = {k: r[k] for k in ("name", "n", "pairs", "rank", "loss", "auto")}
        for g in args.gaps:
            shown.append(
                {
                    **head,
                    "gap": f"{g:g}",
                    "sweeps_iters": o[("sweeps", g, "iters")],
                    "sweeps_s": o[("sweeps", g, "t")],
                    "sweeps_s_steps": o[("sweeps", g, "t_steps")],
                    "block_iters": o[("block", g, "iters")],
                    "block_s": o[("block", g, "t")],
                    "block_s_steps": o[("block", g, "t_steps")],
                    "ratio": _ratio(o[("sweeps", g, "t")], o[("block", g, "t")]),
                    "ratio_steps": _ratio(o[("sweeps", g, "t_steps")], o[("block", g, "t_steps")]),
                }
            )
        s, b = o[("sweeps", "default")], o[("block", "default")]
        shown.append(
            {
                **head,
                "gap": "default stop",
                "sweeps_iters": s["iters"],
                "sweeps_s": s["seconds"],
                "sweeps_converged": s["converged"],
                "sweeps_gap_at_stop": s["gap"],
                "block_iters": b["iters"],
                "block_s": b["seconds"],
                "block_converged": b["converged"],
                "block_gap_at_stop": b["gap"],
                "ratio": _ratio(s["seconds"], b["seconds"]),
            }
        )
    columns = [
        ("name", "data set"),
        ("n", "n"),
        ("pairs", "pairs"),
        ("loss", "loss"),
        ("auto", "auto"),
        ("gap", "gap"),
        ("sweeps_iters", "sweeps: its"),
        ("sweeps_s", "sweeps: s"),
        ("block_iters", "block: its"),
        ("block_s", "block: s"),
        ("ratio", "sweeps / block"),
    ]
    for r in shown:
        print(" | ".join("-" if r.get(k) is None else str(r[k]) for k, _ in columns))
    _results.write(
        "auto_real",
        title="Plain sweeps against block solves on real data at the papers' protocol",
        measures="seconds from the call of fit_bcd to relative objective gaps (traced fits; "
        "median of the runs), and the untraced fit with the default stopping rule "
        "(trace=False, tol=1e-5), for method='block'",
        reference="method='sweeps' (plain BCD sweeps) on the same problem in the same run; "
        "f* from a long block reference run (KKT < 1e-9)",
        command=_results.command("bench/auto_real.py", args.argv),
        args={k: v for k, v in vars(args).items() if k != "argv"},
        path=args.json,
        columns=columns,
        rows=shown,
        notes=[
            f"{args.threads} thread(s); medians of {args.runs} runs; 'default stop': "
            f"trace=False, tol=1e-5, at most {args.max_default} iterations (the rows keep "
            f"the gap each stops at)"
        ],
        extra={"wall_seconds": wall},
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--datasets",
        nargs="+",
        default=["digits"],
        help="'digits' (the demo's problem) or paper harness data set names",
    )
    ap.add_argument("--losses", nargs="+", default=["square"])
    ap.add_argument("--gaps", type=float, nargs="+", default=[1e-4, 1e-5, 1e-6])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--max-iters",
        type=int,
        default=5000,
        help="iterations at most of the traced runs (they stop at half the smallest gap)",
    )
    ap.add_argument("--max-default", type=int, default=5000)
    ap.add_argument("--ref-iters", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--json", default=None, help="results file (default: bench/results/auto_real.json)"
    )
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for name, value in (
        ("--runs", args.runs),
        ("--max-iters", args.max_iters),
        ("--max-default", args.max_default),
        ("--ref-iters", args.ref_iters),
    ):
        if value < 1:
            ap.error(f"{name}: expected a positive count, got {value}")
    if any(not 0 < g < 1 for g in args.gaps):
        ap.error(f"--gaps: expected relative gaps in (0, 1), got {args.gaps}")
    from bench.paper.datasets import canonical

    for name in args.datasets:
        try:
            name == "digits" or canonical(name)
        except KeyError as exc:
            ap.error(f"--datasets: {exc.args[0]}, or 'digits' (the demo's problem)")
    warnings.simplefilter("ignore", ConvergenceWarning)
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    rows = []
    t0 = time.perf_counter()
    for name in args.datasets:
        L, cons = inputs(name)
        for loss in args.losses:
            P = NPKLProblem.build(L, cons, loss=loss, gamma=1.0, seed=0)
            auto = npkl_dist.solvers.bcd._setup.choose_method(P, ex)
            t1 = time.perf_counter()
            out = measure(
                P, ex, args.gaps, args.runs, args.max_iters, args.ref_iters, args.max_default
            )
            print(
                f"[{name} {loss}] {time.perf_counter() - t1:.0f} s: "
                f"{ {str(k): v for k, v in out.items()} }",
                flush=True,
            )
            rows.append(
                {
                    "name": name,
                    "n": P.n_points,
                    "pairs": cons.m,
                    "rank": P.rank,
                    "loss": loss,
                    "auto": auto,
                    "out": out,
                }
            )
    write(args, rows, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
