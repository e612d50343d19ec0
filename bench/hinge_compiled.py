"""Hinge block fits: the compiled derivative-free search and box QP against the scipy/numpy
forms they replace (issue 6).

``python bench/hinge_compiled.py PROBLEM [PROBLEM ...] [--runs R] [--tol-kkt X]
[--step-rule-only]``

A block fit of the hinge ends each outer iteration with a 2-D search on the plane of its last
two steps (a line search, then Nelder-Mead: :func:`npkl_dist._blocksolve.
subspace_search_nelder_mead`) and, on a schedule, a joint move whose multipliers come from a
box QP (:func:`npkl_dist._joint._box_qp`). Both now run as compiled loops. This times whole
fits (``trace=False``, one thread, the default stopping rule, ``--tol-kkt`` or, with
``--step-rule-only``, the step-size rule alone) with the
compiled loops and with scipy's ``minimize_scalar``/``minimize`` and the numpy projected
gradient patched back in, alternating, in one process. The iterates are the same bit for
bit (checked: objective, V and the iteration count), so only the time differs.

Problems as in ``bench/auto_default_fit.py`` (``mixture-N``, the paper sets, ``digits``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist as nk  # noqa: E402
from npkl_dist import _blocksolve, _joint  # noqa: E402
from npkl_dist.executors import InProcessExecutor  # noqa: E402


def _reference_paths():
    """Patch scipy's searches and the numpy projected gradient back in; returns an undo."""
    search = _blocksolve.subspace_search_nelder_mead
    apg = _joint._apg_box

    def scipy_search(a, B, C, gamma, loss_code, boxed=False, compiled=True):
        return search(a, B, C, gamma, loss_code, boxed=boxed, compiled=False)

    def numpy_apg(indptr, indices, data, c, lip, atol, max_iter, a):
        import scipy.sparse as sp

        Q = sp.csr_matrix((data, indices, indptr), shape=(c.size, c.size))
        out, ok = _joint._box_qp_reference_loop(Q, c, a.copy(), lip, atol, max_iter)
        a[:] = out
        return ok

    _blocksolve.subspace_search_nelder_mead = scipy_search
    _joint._apg_box = numpy_apg

    def undo():
        _blocksolve.subspace_search_nelder_mead = search
        _joint._apg_box = apg
    return undo


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tol-kkt", type=float, default=None)
    ap.add_argument("--step-rule-only", action="store_true",
                    help="hinge_kkt=False: stop on the step-size rule alone (bcdkl's rule)")
    ap.add_argument("--max-iters", type=int, default=5000)
    args = ap.parse_args(argv)
    from bench._env import pin_threads
    from bench.auto_default_fit import problem

    head = pin_threads(1)
    warnings.simplefilter("ignore")
    print(f"{head}; medians of {args.runs} alternations; tol_kkt={args.tol_kkt}, "
          f"hinge_kkt={not args.step_rule_only}")
    print("| problem | n | outer its | compiled (s) | scipy/numpy (s) | ratio | objective | KKT |")
    print("|:---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.problems:
        P = problem(name, "hinge")
        opts = dict(method="block", trace=False, tol_kkt=args.tol_kkt,
                    max_sweeps=args.max_iters, executor=InProcessExecutor(n_threads=1))
        if args.step_rule_only:
            opts["hinge_kkt"] = False
        nk.fit_bcd(P, **dict(opts, max_sweeps=3))  # compile and warm up
        times = {"compiled": [], "reference": []}
        results = {}
        for _ in range(args.runs):
            for mode in ("compiled", "reference"):
                undo = _reference_paths() if mode == "reference" else (lambda: None)
                try:
                    t = time.perf_counter()
                    res = nk.fit_bcd(P, **opts)
                    times[mode].append(time.perf_counter() - t)
                finally:
                    undo()
                results[mode] = res
        a, b = results["compiled"], results["reference"]
        if not (np.array_equal(a.V, b.V) and a.objective == b.objective):
            raise SystemExit(f"{name}: the two paths' iterates differ")
        tc, tr = np.median(times["compiled"]), np.median(times["reference"])
        print(f"| {name} | {P.n_points:,} | {len(a.change_trace)} | {tc:.2f} | {tr:.2f} | "
              f"{tr / tc:.2f}x | {a.objective:.6f} | {a.kkt:.1e} |", flush=True)


if __name__ == "__main__":
    main()
