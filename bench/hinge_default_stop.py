"""The hinge's default stop against the step-size rule alone, both methods (issue 6).

``python bench/hinge_default_stop.py PROBLEM [PROBLEM ...] [--methods block sweeps]
[--max-iters N]``

For each problem (names as in ``bench/auto_default_fit.py``: ``mixture-N``, the paper sets,
``digits``), one hinge fit per method and rule, ``trace=False``, one thread, the default
iteration cap (1,000) unless ``--max-iters``: ``hinge_kkt=False`` (bcdkl's rule: the relative
change below ``tol = 1e-5``) and the default (the same, and the joint KKT residual below
``stall_bound(tol)`` = 1e-3). Prints a Markdown table: outer iterations, whether the fit
stopped on its rule, seconds, final objective, final joint KKT residual and the warning the
fit gave ('stall': stopped on the step-size rule where it stalled; 'cap': stopped at the cap).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist as nk  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--methods", nargs="+", default=["block", "sweeps"],
                    choices=["block", "sweeps", "auto"])
    ap.add_argument("--max-iters", type=int, default=None,
                    help="iteration cap (default: fit_bcd's, 1000)")
    args = ap.parse_args(argv)
    import numba
    from threadpoolctl import threadpool_limits

    from bench.auto_default_fit import problem

    numba.set_num_threads(1)
    threadpool_limits(1, user_api="blas")
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), "unknown CPU")
    print(f"# {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, one thread")
    print("| problem | n | method | rule | its | stopped on the rule | s | objective | KKT "
          "| warning |")
    print("|:---|---:|:---|:---|---:|:---|---:|---:|---:|:---|")
    cap = {} if args.max_iters is None else {"max_sweeps": args.max_iters}
    for name in args.problems:
        P = problem(name, "hinge")
        for method in args.methods:
            for default in (False, True):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    t = time.perf_counter()
                    r = nk.fit_bcd(P, method=method, hinge_kkt=default, trace=False,
                                   executor=InProcessExecutor(n_threads=1), **cap)
                    dt = time.perf_counter() - t
                kinds = sorted({"stall" if "stalled" in str(w.message) else "cap"
                                for w in caught if str(w.message).startswith("bcd:")})
                rule = "default" if default else "step rule"
                print(f"| {name} | {P.n_points:,} | {r.method} | {rule} | "
                      f"{len(r.change_trace)} | {'yes' if r.converged else 'no'} | {dt:.2f} | "
                      f"{r.objective:.6f} | {r.kkt:.1e} | {', '.join(kinds) or '-'} |",
                      flush=True)


if __name__ == "__main__":
    main()
