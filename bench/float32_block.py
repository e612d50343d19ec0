"""float32 against float64 block fits on the test suite's blob problems (issue 6).

``python bench/float32_block.py [--seeds 1 2 3 4 5] [--losses square squared_hinge hinge]``

For each loss and seed: ``blob_problem`` (tests/test_reference.py: 400 points, two Gaussian
blobs, kNN Laplacian, 60 label-sampled pairs, rank 10) in both dtypes, block fits from the
same start, one thread:
- after 20 outer iterations (``tol = 0``): ||V32 - V64|| / ||V64||;
- to ``tol = 1e-6`` (at most 2,000 outer iterations): the iterations, whether the rule was
  met, the final KKT residual, the objective's relative difference, and the largest
  relative rise of the float32 objective trace (none: monotone).
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--losses", nargs="+", default=["square", "squared_hinge", "hinge"])
    args = ap.parse_args(argv)
    from test_reference import blob_problem

    from npkl_dist import fit_bcd, initial_V
    from npkl_dist.executors import InProcessExecutor

    warnings.simplefilter("ignore")
    ex = InProcessExecutor(n_threads=1)
    print("| loss | seed | V apart after 20 its | f32 its | f64 its | f32 met the rule | f32 KKT "
          "| f64 KKT | objective f32 - f64 (rel.) | largest rise (rel.) |")
    print("|:---|---:|---:|---:|---:|:---|---:|---:|---:|---:|")
    for loss in args.losses:
        for seed in args.seeds:
            P = {dt: blob_problem(seed, loss, n=400, rank=10, dtype=dt, n_pairs=60)
                 for dt in ("float32", "float64")}
            V0 = initial_V(P["float64"], np.random.default_rng(seed))
            short = {dt: fit_bcd(p, method="block", V0=V0, max_sweeps=20, tol=0, executor=ex)
                     for dt, p in P.items()}
            dV = (np.linalg.norm(short["float32"].V.astype(np.float64) - short["float64"].V)
                  / np.linalg.norm(short["float64"].V))
            full = {dt: fit_bcd(p, method="block", V0=V0, max_sweeps=2000, tol=1e-6,
                                executor=ex) for dt, p in P.items()}
            a, b = full["float32"], full["float64"]
            rise = np.diff([a.objective_initial] + a.objective_trace).max() / abs(a.objective)
            print(f"| {loss} | {seed} | {dV:.1e} | {len(a.change_trace)} | "
                  f"{len(b.change_trace)} | {'yes' if a.converged else 'no'} | {a.kkt:.1e} | "
                  f"{b.kkt:.1e} | {(a.objective - b.objective) / abs(b.objective):.1e} | "
                  f"{max(rise, 0.0):.1e} |", flush=True)


if __name__ == "__main__":
    main()
