"""Block solves with the Newton subspace search against the derivative-free reference.

``python bench/bench_subspace_search.py [--n N] [--cases protocol:square ...] [--runs R]
[--threads T]``

Each outer iteration of a block fit ends with an exact search over V + s1 D + s2 S
(``npkl_dist._blocksolve.subspace_search``). The default solves it by damped Newton on exact
derivatives (square loss: a quartic whose coefficients take one pass over the pairs;
squared hinge: one pass per step); the reference, ``subspace_search_nelder_mead``, is the
line search plus Nelder-Mead that the block method used before (150-220 passes over the
pairs per outer iteration). With 1.2 pairs per point (the papers' protocol) the passes cost
about a sweep's worth of time. For the hinge both are Nelder-Mead: the default evaluates the
line search's bracket and the trials near its point on a box (``BoxedPairSum``: only the
pairs that may cross their kink there, pair by pair), the reference every pair per trial.

Problem: bench_block's (10-cluster mixture in 8-D, kNN k = 10, delta = 1e-3, r = 16,
gamma = 1). Per case: f* from a long block fit (KKT < 1e-9 or 400 outer iterations), then
``--runs`` alternations of the two searches, each fit timed from the call of ``fit_bcd`` to
the 1e-4 gap; medians and the ratio reference / Newton, measured in the same process.
``--outer K``: no f*; both run K outer iterations (for sizes where a reference fit is too
long), and the table gives the objectives reached.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist  # noqa: E402
import npkl_dist._blocksolve as bs  # noqa: E402
from bench.bench_block import constraints_for, graph_for  # noqa: E402
from npkl_dist import NPKLProblem, fit_bcd  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402

SEARCHES = {"newton": bs.subspace_search, "reference": bs.subspace_search_nelder_mead}


def _machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def timed_fit(P, search, f_star, gap, ex, outer=None):
    spent = [0.0]

    def wrapped(*args):
        t = time.perf_counter()
        out = SEARCHES[search](*args)
        spent[0] += time.perf_counter() - t
        return out

    bs.subspace_search = wrapped
    try:
        t0 = time.perf_counter()
        if outer:
            res = fit_bcd(P, method="block", max_sweeps=outer, tol=0, executor=ex)
        else:
            res = fit_bcd(P, method="block", max_sweeps=1000, tol=0, executor=ex,
                          callback=lambda s, obj, ch, sec: (obj - f_star) / abs(f_star) <= gap)
        wall = time.perf_counter() - t0
    finally:
        bs.subspace_search = SEARCHES["newton"]
    if outer:
        return wall, res.n_sweeps, spent[0], res.objective
    return wall, res.n_sweeps, spent[0], (res.objective - f_star) / abs(f_star)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--cases", nargs="+",
                    default=["protocol:square", "protocol:squared_hinge", "0.01:square",
                             "0.01:squared_hinge"], help="fraction:loss")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gap", type=float, default=1e-4)
    ap.add_argument("--outer", type=int, default=None,
                    help="run this many outer iterations instead of to the gap of an f*")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    S, y, _ = graph_for(args.n)
    L = npkl_dist.laplacian(S, 1e-3)
    ex = InProcessExecutor(args.threads)
    rows = []
    for case in args.cases:
        frac, loss = case.split(":")
        C = constraints_for(y, frac)
        P = NPKLProblem.build(L, C, loss=loss, gamma=1.0, rank=16, seed=0)
        fit_bcd(P, method="block", max_sweeps=2, tol=0, executor=ex)  # compile
        if args.outer:
            f_star, ref = None, None
        else:
            ref = fit_bcd(P, method="block", max_sweeps=400, tol=1.0, tol_kkt=1e-9,
                          executor=ex, trace=False)
            f_star = ref.objective
        got = {"newton": [], "reference": []}
        for _ in range(args.runs):
            for search in ("reference", "newton"):
                got[search].append(timed_fit(P, search, f_star, args.gap, ex, args.outer))
                if not args.outer:
                    f_star = min(f_star, f_star * (1 + min(0.0, got[search][-1][3])))
        med = {k: np.median(np.array([g[:3] for g in v]), axis=0) for k, v in got.items()}
        final = {k: v[-1][3] for k, v in got.items()}
        rows.append((args.n, frac, int(C.i.shape[0]), loss, f_star, ref, med, final))
        print(case, {k: [tuple(round(x, 3) for x in g) for g in v] for k, v in got.items()},
              flush=True)
    print(f"\n- machine: {_machine()}; threads {args.threads}; runs {args.runs} (alternating)")
    print(f"- command: `python bench/bench_subspace_search.py --n {args.n} --cases "
          f"{' '.join(args.cases)} --runs {args.runs} --threads {args.threads}`\n")
    if args.outer:
        print("| n | constrained | pairs | loss | outer its | search s ref / Newton | "
              "fit s ref / Newton | objective ref / Newton | speed-up |")
        print("|---:|:---|---:|:---|---:|---:|---:|---:|---:|")
    else:
        print("| n | constrained | pairs | loss | f* (outer, KKT) | outer its ref / Newton | "
              "search s ref / Newton | fit s to 1e-4 ref / Newton | speed-up |")
        print("|---:|:---|---:|:---|---:|---:|---:|---:|---:|")
    for n, frac, m, loss, f_star, ref, med, final in rows:
        r, w = med["reference"], med["newton"]
        if args.outer:
            print(f"| {n:,} | {frac} | {m:,} | {loss} | {args.outer} | {r[2]:.2f} / {w[2]:.2f} | "
                  f"{r[0]:.2f} / {w[0]:.2f} | {final['reference']:.8g} / "
                  f"{final['newton']:.8g} | {r[0] / w[0]:.2f}x |")
        else:
            print(f"| {n:,} | {frac} | {m:,} | {loss} | {f_star:.8g} ({ref.n_sweeps}, "
                  f"{ref.kkt:.0e}) | {r[1]:.0f} / {w[1]:.0f} | {r[2]:.2f} / {w[2]:.2f} | "
                  f"{r[0]:.2f} / {w[0]:.2f} | {r[0] / w[0]:.2f}x |")


if __name__ == "__main__":
    main()
