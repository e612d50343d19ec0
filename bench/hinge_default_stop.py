"""The hinge's default stop against the step-size rule alone, both methods (issue 6), and the
joint move over a ladder of kink tolerances against the exact kink set's alone.

``python bench/hinge_default_stop.py PROBLEM [PROBLEM ...] [--methods block sweeps]
[--rules step default] [--moves ladder exact] [--runs R] [--max-iters N]``

For each problem (names as in ``bench/auto_default_fit.py``: ``mixture-N``, the paper sets,
``digits``), one hinge fit per method, rule and move, ``trace=False``, one thread, the
default iteration cap (1,000) unless ``--max-iters``. Rules: ``step`` is ``hinge_kkt=False``
(bcdkl's rule: the relative change below ``tol = 1e-5``), ``default`` also needs the joint KKT
residual below ``stall_bound(tol)`` = 1e-3. Moves: ``ladder`` is the default joint move (the
best of the kink tolerances ``npkl_dist._joint.KINK_LADDER``), ``exact`` the exact kink set's
alone (``kink_ladder=(KINK_RTOL,)``, the move before 2026-11-27). With ``--runs R`` each fit
is timed R times (the median is printed; the iterates are the same each time). Prints a
Markdown table: outer iterations, whether the fit stopped on its rule, seconds, final
objective, final joint KKT residual and the warning the fit gave ('stall': stopped on the
step-size rule where it stalled; 'cap': stopped at the cap).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist as nk  # noqa: E402
from npkl_dist._joint import KINK_LADDER, KINK_RTOL  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--methods", nargs="+", default=["block", "sweeps"],
                    choices=["block", "sweeps", "auto"])
    ap.add_argument("--rules", nargs="+", default=["step", "default"],
                    choices=["step", "default"])
    ap.add_argument("--moves", nargs="+", default=["ladder"], choices=["ladder", "exact"])
    ap.add_argument("--runs", type=int, default=1, help="timings per fit (median printed)")
    ap.add_argument("--max-iters", type=int, default=None,
                    help="iteration cap (default: fit_bcd's, 1000)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs: expected a positive count, got {args.runs}")
    from bench._env import pin_threads
    from bench.auto_default_fit import problem

    print(pin_threads(1))
    print(f"# moves: ladder = kink tolerances {KINK_LADDER}, exact = ({KINK_RTOL:g},); "
          f"median of {args.runs} run(s)")
    print("| problem | n | method | rule | move | its | stopped on the rule | s | objective "
          "| KKT | warning |")
    print("|:---|---:|:---|:---|:---|---:|:---|---:|---:|---:|:---|")
    cap = {} if args.max_iters is None else {"max_sweeps": args.max_iters}
    for name in args.problems:
        P = problem(name, "hinge")
        for method in args.methods:
            for rule in args.rules:
                for move in args.moves:
                    ladder = None if move == "ladder" else (KINK_RTOL,)
                    times = []
                    for _ in range(args.runs):
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")
                            t = time.perf_counter()
                            r = nk.fit_bcd(P, method=method, hinge_kkt=rule == "default",
                                           kink_ladder=ladder, trace=False,
                                           executor=InProcessExecutor(n_threads=1), **cap)
                            times.append(time.perf_counter() - t)
                    kinds = sorted({"stall" if "stalled" in str(w.message) else "cap"
                                    for w in caught if str(w.message).startswith("bcd:")})
                    print(f"| {name} | {P.n_points:,} | {r.method} | {rule} | {move} | "
                          f"{len(r.change_trace)} | {'yes' if r.converged else 'no'} | "
                          f"{statistics.median(times):.2f} | {r.objective:.6f} | {r.kkt:.1e} | "
                          f"{', '.join(kinds) or '-'} |", flush=True)


if __name__ == "__main__":
    main()
