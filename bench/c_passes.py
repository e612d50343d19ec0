"""Outer iterations and time to the 1e-4 gap of block fits with one, two, three ... passes
over the constrained rows per outer iteration (``fit_bcd(..., c_passes=k)``), on
bench_block's mixture problems.

``python bench/c_passes.py [--n N ...] [--fractions F ...] [--losses L ...]
[--passes K ...] [--rounds R] [--threads T] [--ref-iters K] [--datasets D ...]``

``--datasets digits adult-a1a ...``: real data at the papers' protocol instead of the mixture
(``bench/auto_real.py``'s inputs: the demo's digits, the paper harness's sets; the rank from
the Pataki bound).

For every (n, fraction, loss): a reference run (block solves until the KKT residual is below
1e-9 or ``--ref-iters`` outer iterations; f* is the lowest objective it or any timed fit
reached), then ``--rounds`` rounds of one fit per pass count, in alternating order, each
traced to ``--max-outer`` outer iterations and read at the first objective within ``--gap``
of f*. The time to the gap is the fit's set-up plus its outer iterations up to that one
(the per-iteration objective evaluations left out: an untraced fit does not make them).
Prints a markdown table: outer iterations to the gap, the median time to it, the median
outer iteration, and the ratio of each pass count's median time to one pass's.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist  # noqa: E402
from bench.bench_block import constraints_for, graph_for  # noqa: E402
from npkl_dist import NPKLProblem, fit_bcd  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000])
    ap.add_argument("--fractions", nargs="+", default=["0.001", "0.01", "0.1", "protocol"])
    ap.add_argument("--losses", nargs="+", default=["square", "squared_hinge", "hinge"])
    ap.add_argument("--passes", type=int, nargs="+", default=[1, 2, 3, 5])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gap", type=float, default=1e-4)
    ap.add_argument("--max-outer", type=int, default=300)
    ap.add_argument("--ref-iters", type=int, default=400)
    ap.add_argument("--f-star", type=float, default=None,
                    help="f* for a single (n, fraction, loss) instead of a reference run")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--datasets", nargs="+", default=None,
                    help="real data sets at the protocol (bench/auto_real.py) instead")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    print(f"command: python bench/c_passes.py {' '.join(argv or sys.argv[1:])}", flush=True)
    rows = []
    for n, frac, L, C, rank in _cases(args):
        for loss in args.losses:
            P = NPKLProblem.build(L, C, loss=loss, gamma=1.0, rank=rank, seed=0)
            fit_bcd(P, method="block", max_sweeps=1, tol=0, executor=ex)  # compile
            if args.f_star is not None:
                f_star = args.f_star
            else:
                ref = fit_bcd(P, method="block", max_sweeps=args.ref_iters, tol=1.0,
                              tol_kkt=1e-9, executor=ex, trace=False)
                f_star = ref.objective
            fits = {k: [] for k in args.passes}
            for rnd in range(args.rounds):
                for k in (args.passes if rnd % 2 == 0 else args.passes[::-1]):
                    objs = []

                    def cb(s, obj, ch, sec, objs=objs):
                        objs.append(obj)
                        return (obj - f_star) / abs(f_star) <= args.gap / 10

                    res = fit_bcd(P, method="block", max_sweeps=args.max_outer, tol=0,
                                  executor=ex, callback=cb, c_passes=k)
                    fits[k].append((res, np.array(objs)))
                    f_star = min(f_star, float(np.min(objs)))
            base = None
            for k in args.passes:
                its, secs, outer = [], [], []
                for res, objs in fits[k]:
                    hit = np.flatnonzero((objs - f_star) / abs(f_star) <= args.gap)
                    j = int(hit[0]) + 1 if hit.size else None
                    its.append(j)
                    secs.append(res.setup_seconds + float(np.sum(res.sweep_seconds[:j]))
                                if j else np.inf)
                    outer.append(float(np.median(res.sweep_seconds)))
                med = float(np.median(secs))
                base = med if base is None else base
                rows.append((n, frac, loss, k, its, med, float(np.median(outer)),
                             base / med if np.isfinite(med) else 0.0))
                print(f"n={n} {frac} {loss} c_passes={k}: its {its}, {med:.2f} s, outer "
                      f"{np.median(outer) * 1e3:.1f} ms, f* {f_star:.9g}", flush=True)
    print("\n| n | constrained | loss | c_passes | outer its to the gap | median s to the gap "
          "| median outer (ms) | speed-up over 1 pass |\n|---:|:---|:---|---:|---:|---:|---:|---:|")
    for n, frac, loss, k, its, med, outer, ratio in rows:
        its_s = ", ".join(str(i) if i else "-" for i in sorted(set(its), key=lambda x: x or 0))
        print(f"| {n:,} | {frac} | {loss} | {k} | {its_s} | {med:.2f} | {outer * 1e3:.1f} | "
              f"{ratio:.2f}x |")


def _cases(args):
    """(n, label, L, constraints, rank): the mixture's (n, fraction) grid, or the data sets."""
    if args.datasets:
        from bench.auto_real import inputs

        for name in args.datasets:
            L, C = inputs(name)
            yield L.shape[0], name, L, C, None
        return
    for n in args.n:
        S, y, _ = graph_for(n)
        L = npkl_dist.laplacian(S, 1e-3)
        for frac in args.fractions:
            yield n, frac, L, constraints_for(y, frac), 16


if __name__ == "__main__":
    main()
