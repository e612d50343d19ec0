"""Prefetching the rows a pass gathers: each kernel with its prefetches against the same kernel
compiled without them, alternating in one process (issue 6).

``python bench/prefetch.py [--n N] [--runs R] [--threads T] [--ahead D ...]``

On bench_block's problem (10-cluster mixture in 8-D, kNN k = 10, delta = 1e-3, 1% of the
points paired, r = 16) in the block fit's U-first RCM order. The passes:

- the product with L_UU and its sums (``_matvec_dot``, float32 direction, every outer
  iteration), the first residual (``_neg_residual_rows``, float64 V, once per fit);
- the set-up's scattered passes: the Cuthill-McKee search, ``permute_split``'s gather, the
  Galerkin count and fill of the finest level.

(The passes tried with prefetches and left without them, the level-1 smoothing, the
restriction, a plain sweep's rows and the constrained rows' passes, were measured with
throw-away copies: bench/RESULTS.md.)

A variant "without" is the library's kernel compiled from the same code with the prefetch
helpers replaced by no-ops, so the arithmetic is the same and the outputs are checked equal
bit for bit. ``--ahead``: also time the product and the residual with other look-ahead
distances (entries). Prints the median of ``--runs`` alternating calls of each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types as pytypes
import warnings

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import npkl_dist  # noqa: E402
from bench.bench_block import constraints_for, graph_for  # noqa: E402
from npkl_dist import NPKLProblem  # noqa: E402
from npkl_dist import _aggregation as AG  # noqa: E402
from npkl_dist import _blocksolve as B  # noqa: E402
from npkl_dist import _kernels as K  # noqa: E402
from npkl_dist import _plan as PL  # noqa: E402


def _nothing(*args):
    pass


def recompiled(kernel, replace, tag, parallel):
    """``kernel`` compiled again from its code, with the globals in ``replace`` swapped."""
    from numba import njit

    f = kernel.py_func
    g = dict(f.__globals__)
    g.update(replace)
    h = pytypes.FunctionType(f.__code__, g, f.__name__ + tag, f.__defaults__, f.__closure__)
    return njit(nogil=True, parallel=parallel)(h)


def no_prefetch():
    """Jitted no-ops with the prefetch helpers' signatures."""
    from numba import njit

    return {"prefetch_ahead": njit(inline="always")(lambda indptr, indices, i, X, nnz: None),
            "prefetch1": njit(inline="always")(lambda x, i: None),
            "prefetch_rows_ahead": njit(inline="always")(
                lambda indptr, indices, data, rows, q, end, a, b: None)}


def ahead(distance):
    """A prefetch_ahead with another look-ahead distance."""
    from numba import njit

    @njit(inline="always")
    def f(indptr, indices, i, X, nnz):
        for p in range(indptr[i] + distance, min(indptr[i + 1] + distance, nnz)):
            K.prefetch_row(X, indices[p])
    return f


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ahead", type=int, nargs="*", default=[8, 32])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    S, y, _ = graph_for(args.n)
    L = npkl_dist.laplacian(S, 1e-3)
    C = constraints_for(y, "0.01")
    P = NPKLProblem.build(L, C, loss="square", gamma=1.0, rank=16, seed=0)
    ex = npkl_dist.executors.InProcessExecutor(args.threads)
    from npkl_dist._bcd import _build

    _, layout, prep = _build(P, "block", ex, "rcm", "blocks", None)
    nu, n, r = int(layout.n_free), P.n_points, P.rank
    (optr, oidx, oval), A, uc = B.whole_free_blocks(prep.indptr, prep.indices, prep.data,
                                                    prep.diag, nu)
    h = B.free_hierarchy(prep, nu, {})
    rng = np.random.default_rng(0)
    d = np.asarray(prep.diag[:nu], np.float64)
    Z = rng.standard_normal((nu, r)).astype(np.float32)
    V = rng.standard_normal((n, r))
    X = V[:nu].copy()
    n_ch = (nu + B.RB - 1) // B.RB
    off = no_prefetch()

    # set-up passes: inputs
    Lc = sp.csr_matrix(P.L)
    degree = np.empty(n, np.int32)
    PL._rcm_degrees(Lc.indptr, Lc.indices, degree)
    seeds = np.argsort(degree)
    order = layout.order
    ranks = PL._compact_ranks(layout.rank_of)
    T = sp.csr_matrix(h.levels[0].P)
    agg, t = AG._single_entry_columns(T)
    nc = T.shape[1]
    A0 = h.levels[0].A
    gptr, grows, counts = AG.galerkin_structure(A0.indptr, A0.indices, agg, nc)
    cptr = K.csr_row_ptr(counts)
    cs = np.zeros(grows.shape[0] + 1, np.int64)
    np.cumsum(np.diff(np.asarray(A0.indptr, np.int64))[grows], out=cs[1:])
    max_ra = int(np.max(cs[gptr[1:]] - cs[gptr[:-1]]))

    def product(kern):
        Q, part = np.empty((nu, r)), np.empty((n_ch, r))
        kern(optr, oidx, oval, d, Z, Q, part)
        return Q, part

    def residual(kern):
        R, pa, pb = np.empty((nu, r)), np.empty(n_ch), np.empty(n_ch)
        kern(nu, prep.indptr, prep.indices, prep.data, prep.diag, V, X, R, 1.0 / d, pa, pb)
        return R, pa, pb

    def rcm(kern):
        o = np.empty(n, np.int64)
        kern(Lc.indptr, Lc.indices, degree, seeds, o)
        return (o,)

    def permute(kern):
        return kern(Lc.indptr, Lc.indices, Lc.data, order, ranks)

    def count(kern):
        return (kern(A0.indptr, A0.indices, agg, gptr, grows, nc, args.threads),)

    def fill(kern):
        return kern(A0.indptr, A0.indices, A0.data, agg, t, gptr, grows, cptr, nc,
                    args.threads, agg.shape[0], max_ra)

    cases = [
        ("product with L_UU (per outer iteration)", product, B._matvec_dot, True),
        ("first residual (per fit)", residual, B._neg_residual_rows, True),
        ("Cuthill-McKee search (set-up, serial)", rcm, PL._cuthill_mckee, False),
        ("permute_split's gather (set-up)", permute, PL._permute_split_rows, True),
        ("Galerkin count, finest level (set-up)", count, AG._galerkin_count, True),
        ("Galerkin fill, finest level (set-up)", fill, AG._galerkin_fill, True),
    ]
    for dist in args.ahead:
        cases.append((f"product with L_UU, {dist} entries ahead", product,
                      recompiled(B._matvec_dot, {"prefetch_ahead": ahead(dist)}, f"_a{dist}",
                                 True), True))
        cases.append((f"first residual, {dist} entries ahead", residual,
                      recompiled(B._neg_residual_rows, {"prefetch_ahead": ahead(dist)},
                                 f"_a{dist}", True), True))
    print(f"n = {n:,}, r = {r}, {args.threads} threads, {args.runs} alternating runs; "
          f"medians (ms)", flush=True)
    print("| pass | without prefetch | with | ratio | outputs equal |")
    print("|---|---:|---:|---:|---|")
    for name, run, kern, parallel in cases:
        without = recompiled(kern, off, "_without", parallel)
        same = all(np.array_equal(a, b) for a, b in zip(run(kern), run(without)))
        tw, tp = [], []
        for k in range(args.runs):
            for which in ((kern, without) if k % 2 == 0 else (without, kern)):
                t0 = time.perf_counter()
                run(which)
                (tp if which is kern else tw).append(time.perf_counter() - t0)
        a, b = np.median(tw), np.median(tp)
        print(f"| {name} | {a * 1e3:.1f} | {b * 1e3:.1f} | {a / b:.2f}x | {same} |",
              flush=True)


if __name__ == "__main__":
    main()
