"""What fresh memory costs in this kind of VM, and what a block fit at n = 1e6 pays for it.

``python bench/fresh_pages.py [--mb MB] [--fits SEQ] [--runs R]``

1. **Touching fresh memory** (each in a new process, after a 3 s sleep so that the memory
   freed by earlier processes has gone back to the host through the balloon's free page
   reporting): a numpy array of ``--mb`` MB with numpy's huge pages (its default), the same
   without them, and ``npkl_dist._memory.populated_empty`` (base pages, one madvise call);
   each three times in the process (the second and third reuse just-freed memory).
2. **Kernel speed on base pages**: the block solve's product with L_UU (``_matvec_dot`` over
   the AMG matrix, float32 direction in, float64 Q out) and the PCG update, with their arrays
   from numpy (huge pages) and from ``populated_empty``, alternating ``--runs`` times.
3. ``--fits SEQ`` (e.g. ``BSBSB``): block fits to the 1e-4 gap (B) and plain-sweep fits (S)
   in that order in one process, printing each block fit's wall time, set-up and system CPU
   time. A block fit after a sweep fit finds the memory the last block fit freed handed back
   to the host, as a fit in a new process does.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import sys, time
import numpy as np
mode, mb = sys.argv[1], int(sys.argv[2])
if mode in ("numpy-huge", "numpy-base"):
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        from numpy.core.multiarray import _set_madvise_hugepage
    _set_madvise_hugepage(mode == "numpy-huge")
else:
    from npkl_dist._memory import populated_empty
time.sleep(3)
out = []
for k in range(3):
    t = time.perf_counter()
    if mode == "populated":
        a = populated_empty((mb << 17,), np.float64)
    else:
        a = np.empty(mb << 17)
        a[::512] = 0
    out.append(time.perf_counter() - t)
    del a
print(" ".join(f"{x:.3f}" for x in out))
"""


def touch_costs(mb):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for mode in ("numpy-huge", "numpy-base", "populated", "numpy-huge"):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(mb)], cwd=root,
                             capture_output=True, text=True, check=True).stdout.strip()
        print(f"{mode:11s} {mb} MB, three times in a new process: {out} s", flush=True)


def kernel_speed(runs):
    import numba

    import npkl_dist
    from bench.bench_block import constraints_for, graph_for
    from npkl_dist import NPKLProblem
    from npkl_dist import _blocksolve as B
    from npkl_dist._memory import populated_empty
    from npkl_dist._plan import prepare, relabel_order

    warnings.simplefilter("ignore")
    S, y, _ = graph_for(1_000_000)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                          loss="square", gamma=1.0, rank=16, seed=0)
    lay, Lp = B.block_layout(P, relabel_order(P, "rcm"), return_matrix=True)
    prep = prepare(P, lay, Lp)
    nu, r = lay.n_free, 16
    _, A, _ = B.whole_free_blocks(prep.indptr, prep.indices, prep.data, prep.diag, nu)
    d = np.asarray(prep.diag[:nu], np.float64)
    numba.set_num_threads(2)
    Z0 = np.random.default_rng(0).standard_normal((nu, r)).astype(np.float32)
    n_ch = (nu + B.RB - 1) // B.RB
    part, pa, pb = np.empty((n_ch, r)), np.empty(n_ch), np.empty(n_ch)
    alpha = np.zeros(r)
    arrays = {}
    for kind, make in (("huge pages", lambda s, t: np.zeros(s, t)),
                       ("base pages", populated_empty)):
        Z, Q, X = make((nu, r), np.float32), make((nu, r), np.float64), make((nu, r),
                                                                           np.float64)
        Z[...] = Z0
        Q[...] = 0
        X[...] = 1
        arrays[kind] = (Z, Q, X)
    passes = {}
    for kind, (Z, Q, X) in arrays.items():
        passes[f"product, {kind}"] = (lambda Z=Z, Q=Q: B._matvec_dot(
            A.indptr, A.indices, A.data, d, Z, Q, part, True))
        passes[f"update, {kind}"] = (lambda Z=Z, X=X: B._cg_update_x_sums(X, Z, alpha, pa, pb))
    for f in passes.values():
        f()
    times = {k: [] for k in passes}
    for _ in range(runs):
        for k, f in passes.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    for k, v in times.items():
        print(f"{k:24s} median {np.median(v) * 1e3:6.1f} ms, min {np.min(v) * 1e3:6.1f} ms")


def fits(seq):
    import npkl_dist
    from bench.bench_block import constraints_for, graph_for
    from npkl_dist import NPKLProblem, fit_bcd

    warnings.simplefilter("ignore")
    S, y, _ = graph_for(1_000_000)
    P = NPKLProblem.build(npkl_dist.laplacian(S, 1e-3), constraints_for(y, "0.01"),
                          loss="square", gamma=1.0, rank=16, seed=0)
    ex = npkl_dist.executors.InProcessExecutor(2)
    fit_bcd(P, method="auto", max_sweeps=1, tol=0, executor=ex)  # compile
    f_star = 2214.258
    for what in seq:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        if what == "B":
            res = fit_bcd(P, method="auto", max_sweeps=200, tol=0, executor=ex,
                          callback=lambda s, obj, ch, sec: (obj - f_star) / abs(f_star) <= 1e-4)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            print(f"block fit: {time.perf_counter() - t0:.2f} s, set-up {res.setup_seconds:.2f} s,"
                  f" {res.n_sweeps} outer (median {np.median(res.sweep_seconds):.3f} s), "
                  f"system CPU {r1.ru_stime - r0.ru_stime:.2f} s", flush=True)
        else:
            swp = fit_bcd(P, method="sweeps", max_sweeps=7, tol=0, executor=ex, trace=False)
            print(f"plain sweeps: median sweep {np.median(swp.sweep_seconds):.3f} s", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--fits", default="", help="a sequence of B (block fit) and S (sweeps)")
    ap.add_argument("--skip-touch", action="store_true")
    ap.add_argument("--skip-kernels", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_touch:
        touch_costs(args.mb)
    if not args.skip_kernels:
        kernel_speed(args.runs)
    if args.fits:
        fits(args.fits)


if __name__ == "__main__":
    main()
