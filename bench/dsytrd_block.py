"""LAPACK ``dsytrd``'s panel width on small matrices (the rule of ``_tridiag._dsytrd_block``).

``dsytrd`` takes its panel width from ``ilaenv`` (32) unless the work array is shorter: with
``lwork = n * nb`` it runs panels of nb columns. For each n, random symmetric matrices are
reduced with every width of ``--widths`` in alternation (``--reps`` rounds, one BLAS thread,
as SimpleNPKL's dense fits run), and the medians are printed with the best width, the
package's rule and LAPACK's default of 32.

Usage::

    python bench/dsytrd_block.py [--sizes 47 100 178 270 560] [--reps 60]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from npkl_dist._tridiag import _dsytrd_block  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+",
                    default=[24, 47, 64, 100, 128, 150, 178, 190, 200, 214, 240, 270, 320,
                             400, 480, 560])
    ap.add_argument("--widths", type=int, nargs="+", default=[2, 4, 6, 8, 12, 16, 24, 32])
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args(argv)
    from scipy.linalg import lapack
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")
    print("| n | best width | its time (us) | rule's width | its time (us) | width 32 (us) | "
          "32 / rule |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        rng = np.random.default_rng(n)
        X = rng.standard_normal((n, n))
        A = np.asfortranarray(X + X.T)
        widths = sorted(set(args.widths) | {_dsytrd_block(n), 32})
        ts = {nb: [] for nb in widths}
        for _ in range(args.reps):
            for nb in widths:
                B = A.copy(order="F")
                t0 = time.perf_counter()
                *_, info = lapack.dsytrd(B, lower=1, lwork=n * nb, overwrite_a=1)
                ts[nb].append(time.perf_counter() - t0)
                assert info == 0
        med = {nb: 1e6 * float(np.median(v)) for nb, v in ts.items()}
        best = min(med, key=med.get)
        rule = _dsytrd_block(n)
        print(f"| {n} | {best} | {med[best]:.0f} | {rule} | {med[rule]:.0f} | {med[32]:.0f} | "
              f"{med[32] / med[rule]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
