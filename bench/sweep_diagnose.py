"""Why is a colour-ordered sweep slower than SpMM?  Measurements and a prototype fix.

Run after ``bench_sweep.py``; same synthetic problem (see there). Everything here is
benchmark-only code: the library (``npkl_dist``) is used as it is, its kernels are called
unchanged (``update_column``, ``sweep_rows``, ``sweep_colour``), and the prototype below only
changes *which rows are processed together and in what order*.

Measured (one n, r, dtype; T threads):

1. library sweep vs SpMM (as in bench_sweep);
2. time of each colour step alone, against the colour's share of rows: every colour step
   streams (nearly) all of V through the caches, because the rows of one colour are spread
   over the whole RCM order and their neighbours cover almost every row;
3. the library row kernel over all rows in plain RCM row order, one pass, no colours
   (``sweep_colour(arange(n))``; with T > 1 the two threads race at one chunk boundary, so
   this is a timing-only variant): the cost of the per-row work without the colour passes;
4. relabel 'none' vs 'rcm';
5. prototype "block red-black" sweep (bit-for-bit deterministic, independent of T):
   - the RCM order is cut into ``--blocks`` contiguous blocks of >= bandwidth rows, so an
     edge never joins two different blocks of the same parity;
   - step "even" runs the even blocks in parallel, each block sequentially in row order (plain
     Gauss-Seidel, the cache-friendly order of 3.), skipping constrained rows; step "odd" the
     same for the odd blocks;
   - the constrained rows (2 %), whose partners are anywhere in the order, get their own
     greedy colouring (graph edges among them + constraint pairs; 2-3 colours) and are
     updated as ordinary colour steps with the library's ``sweep_colour``;
   - the step order is drawn per sweep from the seeded generator, like the colour order.
   Every row still gets its exact minimiser given the current values of the others, and rows
   updated concurrently are independent, so it is a valid BCD sweep (monotone objective).
   Checked here: parallel result == sequential result (bitwise), T=1 == T=2 (bitwise),
   objective decreases, objective after ``--check-sweeps`` sweeps vs the library's;
6. the same prototype with a fast path for unconstrained rows (gather + scale inlined into
   the block loop instead of a call to ``update_column``; same arithmetic, bitwise equal);
7. objective: library ``smooth_terms`` (one r-long reduction per edge) vs a row-wise variant
   (y = D v_i + sum_k L_ik v_k as in SpMM, then one reduction v_i'y per row).

Usage::

    .venv/bin/python bench/sweep_diagnose.py --n 1000000 --rank 64 --dtype float64
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_sweep import (  # noqa: E402
    Case, interleaved, machine_info, spmm, with_threads,
)
from npkl_dist._kernels import (  # noqa: E402
    greedy_colouring, pair_terms, smooth_terms, sweep_colour, sweep_rows, update_column,
)
from npkl_dist.executors import InProcessExecutor  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------------------------
# prototype: block red-black plan
# --------------------------------------------------------------------------------------------

class BlockPlan:
    """Blocks of the RCM order (even/odd steps) + colours of the deferred constrained rows.

    defer='all': every constrained row leaves its block and is updated in the constrained
    colour steps. defer='cover' (default): a constrained row stays in its block unless one of
    its pairs joins two *different blocks of the same parity* (the only pairs that could be
    updated concurrently); of such a pair only one end is deferred (greedy vertex cover, the
    larger index). A block row may read a deferred row: that row is not written during a
    block step.
    """

    def __init__(self, prep, n_blocks: int = 16, defer: str = "cover"):
        n = prep.n_points
        indptr, indices = prep.indptr, prep.indices
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        self.bandwidth = int(np.abs(src - indices).max()) if indices.size else 0
        nb = max(2, n_blocks - n_blocks % 2)
        while nb > 2 and -(-n // nb) < max(self.bandwidth, 1):
            nb -= 2
        size = -(-n // nb)
        if size < self.bandwidth:
            raise ValueError("graph bandwidth too large for two blocks")
        self.n_blocks = nb
        self.block_size = size
        self.defer = defer
        bounds = np.minimum(np.arange(nb + 1, dtype=np.int64) * size, n)
        blk = np.minimum(np.arange(n) // size, nb - 1)
        constrained = np.diff(prep.cptr) > 0
        self.n_constrained = int(constrained.sum())
        if defer == "all":
            deferred = constrained.copy()
        else:
            deferred = np.zeros(n, bool)
            pi, pj = prep.pi, prep.pj
            clash = (blk[pi] != blk[pj]) & ((blk[pi] - blk[pj]) % 2 == 0)
            for a, b in zip(pi[clash].tolist(), pj[clash].tolist()):
                if not (deferred[a] or deferred[b]):
                    deferred[max(a, b)] = True
        self.deferred = deferred
        kept = np.flatnonzero(~deferred).astype(np.int64)
        self.block_rows = kept
        self.block_ptr = np.searchsorted(kept, bounds).astype(np.int64)
        # colouring of the deferred rows: graph edges and constraint pairs among them
        keep = deferred[src] & deferred[indices]
        sub = sp.csr_matrix((np.ones(int(keep.sum()), np.int8), (src[keep], indices[keep])),
                            shape=(n, n))
        csrc = np.repeat(np.arange(n, dtype=np.int64), np.diff(prep.cptr))
        ckeep = deferred[csrc] & deferred[prep.cidx]
        csub = sp.csr_matrix((np.ones(int(ckeep.sum()), np.int8),
                              (csrc[ckeep], prep.cidx[ckeep])), shape=(n, n))
        colour = np.zeros(n, np.int64)
        greedy_colouring(n, sub.indptr.astype(np.int64), sub.indices.astype(np.int64),
                         csub.indptr.astype(np.int64), csub.indices.astype(np.int64), colour)
        dr = np.flatnonzero(deferred).astype(np.int64)
        cc = colour[dr]
        self.con_colours = [dr[cc == c] for c in range(int(cc.max()) + 1 if dr.size else 0)]
        self.n_steps = 2 + len(self.con_colours)
        # structural checks: no edge (graph or pair) joins two kept rows of different
        # same-parity blocks; the deferred colours are proper
        for a, b in ((src, indices), (csrc, prep.cidx)):
            both = ~deferred[a] & ~deferred[b]
            bad = both & (blk[a] != blk[b]) & ((blk[a] - blk[b]) % 2 == 0)
            assert not bad.any(), "same-parity blocks joined by an edge"
        for rows in self.con_colours:
            m = np.zeros(n, bool)
            m[rows] = True
            assert not (m[src] & m[indices]).any(), "deferred colour not proper (graph)"
            assert not (m[csrc] & m[prep.cidx]).any(), "deferred colour not proper (pairs)"

    def step_order(self, rng):
        return rng.permutation(self.n_steps)

    def describe(self):
        return (f"{self.n_blocks} blocks of {self.block_size} rows (bandwidth "
                f"{self.bandwidth}); defer={self.defer}: {int(self.deferred.sum())} of "
                f"{self.n_constrained} constrained rows deferred to "
                f"{len(self.con_colours)} colours of {[len(c) for c in self.con_colours]}")


@njit(nogil=True, cache=True, parallel=True)
def block_step(parity, block_rows, block_ptr, indptr, indices, data, diag, cptr, cidx, csgn,
               V, loss, gamma, bound, pmax, delta2, norm2):
    """Blocks parity, parity+2, ... in parallel; each block in row order (library kernel)."""
    nb = block_ptr.shape[0] - 1
    n_par = (nb - parity + 1) // 2
    for t in prange(n_par):
        b = parity + 2 * t
        sweep_rows(block_rows, block_ptr[b], block_ptr[b + 1], indptr, indices, data, diag,
                   cptr, cidx, csgn, V, loss, gamma, bound, pmax, delta2, norm2)


@njit(nogil=True, cache=True)
def _block_rows_fast(rows, start, stop, indptr, indices, data, diag, cptr, cidx, csgn, V,
                     loss, gamma, bound, pmax, delta2, norm2):
    """sweep_rows with the unconstrained non-linear case inlined (bitwise the same)."""
    r = V.shape[1]
    g = np.empty(r)
    for q in range(start, stop):
        i = rows[q]
        if loss == 3 or cptr[i + 1] != cptr[i]:
            sweep_rows(rows, q, q + 1, indptr, indices, data, diag, cptr, cidx, csgn, V,
                       loss, gamma, bound, pmax, delta2, norm2)
            continue
        for c in range(r):
            g[c] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            w = data[p]
            for c in range(r):
                g[c] += w * V[k, c]
        Lii = diag[i]
        d2 = 0.0
        n2 = 0.0
        for c in range(r):
            old = np.float64(V[i, c])
            V[i, c] = -g[c] / Lii
            new = np.float64(V[i, c])
            d2 += (new - old) * (new - old)
            n2 += new * new
        delta2[i] = d2
        norm2[i] = n2


@njit(nogil=True, cache=True)
def _block_rows_fast4(rows, start, stop, indptr, indices, data, diag, cptr, cidx, csgn, V,
                      loss, gamma, bound, pmax, delta2, norm2):
    """As _block_rows_fast, but ||dv||^2 and ||v||^2 summed in 4 interleaved partial sums
    (fixed order, so still deterministic on every machine): the serial float64 add chain of
    2 r adds per row is latency-bound (~4 cycles an add); 4 chains cut it 4x. V is bitwise
    the same as the library's; delta2/norm2 differ in the last bits."""
    r = V.shape[1]
    r4 = r - r % 4
    g = np.empty(r)
    for q in range(start, stop):
        i = rows[q]
        if loss == 3 or cptr[i + 1] != cptr[i]:
            sweep_rows(rows, q, q + 1, indptr, indices, data, diag, cptr, cidx, csgn, V,
                       loss, gamma, bound, pmax, delta2, norm2)
            continue
        for c in range(r):
            g[c] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            w = data[p]
            for c in range(r):
                g[c] += w * V[k, c]
        Lii = diag[i]
        d0 = d1 = d2_ = d3 = 0.0
        m0 = m1 = m2 = m3 = 0.0
        for c in range(0, r4, 4):
            o0 = np.float64(V[i, c])
            o1 = np.float64(V[i, c + 1])
            o2 = np.float64(V[i, c + 2])
            o3 = np.float64(V[i, c + 3])
            V[i, c] = -g[c] / Lii
            V[i, c + 1] = -g[c + 1] / Lii
            V[i, c + 2] = -g[c + 2] / Lii
            V[i, c + 3] = -g[c + 3] / Lii
            e0 = np.float64(V[i, c])
            e1 = np.float64(V[i, c + 1])
            e2 = np.float64(V[i, c + 2])
            e3 = np.float64(V[i, c + 3])
            d0 += (e0 - o0) * (e0 - o0)
            d1 += (e1 - o1) * (e1 - o1)
            d2_ += (e2 - o2) * (e2 - o2)
            d3 += (e3 - o3) * (e3 - o3)
            m0 += e0 * e0
            m1 += e1 * e1
            m2 += e2 * e2
            m3 += e3 * e3
        for c in range(r4, r):
            o0 = np.float64(V[i, c])
            V[i, c] = -g[c] / Lii
            e0 = np.float64(V[i, c])
            d0 += (e0 - o0) * (e0 - o0)
            m0 += e0 * e0
        delta2[i] = (d0 + d1) + (d2_ + d3)
        norm2[i] = (m0 + m1) + (m2 + m3)


@njit(nogil=True, cache=True, parallel=True)
def block_step_fast4(parity, block_rows, block_ptr, indptr, indices, data, diag, cptr, cidx,
                     csgn, V, loss, gamma, bound, pmax, delta2, norm2):
    nb = block_ptr.shape[0] - 1
    n_par = (nb - parity + 1) // 2
    for t in prange(n_par):
        b = parity + 2 * t
        _block_rows_fast4(block_rows, block_ptr[b], block_ptr[b + 1], indptr, indices, data,
                          diag, cptr, cidx, csgn, V, loss, gamma, bound, pmax, delta2, norm2)


@njit(nogil=True, cache=True, parallel=True)
def block_step_noreduce(parity, block_rows, block_ptr, indptr, indices, data, diag, cptr,
                        cidx, csgn, V, loss, gamma, bound, pmax, delta2, norm2):
    """Timing-only lower bound: the unconstrained fast path without delta2/norm2."""
    nb = block_ptr.shape[0] - 1
    n_par = (nb - parity + 1) // 2
    r = V.shape[1]
    for t in prange(n_par):
        b = parity + 2 * t
        g = np.empty(r)
        for q in range(block_ptr[b], block_ptr[b + 1]):
            i = block_rows[q]
            for c in range(r):
                g[c] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                k = indices[p]
                w = data[p]
                for c in range(r):
                    g[c] += w * V[k, c]
            Lii = diag[i]
            for c in range(r):
                V[i, c] = -g[c] / Lii


@njit(nogil=True, cache=True, parallel=True)
def block_step_fast(parity, block_rows, block_ptr, indptr, indices, data, diag, cptr, cidx,
                    csgn, V, loss, gamma, bound, pmax, delta2, norm2):
    nb = block_ptr.shape[0] - 1
    n_par = (nb - parity + 1) // 2
    for t in prange(n_par):
        b = parity + 2 * t
        _block_rows_fast(block_rows, block_ptr[b], block_ptr[b + 1], indptr, indices, data,
                         diag, cptr, cidx, csgn, V, loss, gamma, bound, pmax, delta2, norm2)


@njit(nogil=True, cache=True)
def _block_rows_colacc(rows, start, stop, indptr, indices, data, diag, cptr, cidx, csgn, V,
                       loss, gamma, bound, pmax, delta2, norm2):
    """Fast path whose ||dv||^2 / ||v||^2 are accumulated per *column* over the block's rows
    (dacc[c] += dv_c^2: element-wise, vectorisable, no add chain), reduced once per block in
    a fixed order. Returns the block's (delta2, norm2); V bitwise as the library's. Rows that
    take the library path (constrained, linear loss) write delta2/norm2[i] and are added."""
    r = V.shape[1]
    g = np.empty(r)
    dacc = np.zeros(r)
    nacc = np.zeros(r)
    extra_d = 0.0
    extra_n = 0.0
    for q in range(start, stop):
        i = rows[q]
        if loss == 3 or cptr[i + 1] != cptr[i]:
            sweep_rows(rows, q, q + 1, indptr, indices, data, diag, cptr, cidx, csgn, V,
                       loss, gamma, bound, pmax, delta2, norm2)
            extra_d += delta2[i]
            extra_n += norm2[i]
            continue
        for c in range(r):
            g[c] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            w = data[p]
            for c in range(r):
                g[c] += w * V[k, c]
        Lii = diag[i]
        for c in range(r):
            old = np.float64(V[i, c])
            V[i, c] = -g[c] / Lii
            new = np.float64(V[i, c])
            dacc[c] += (new - old) * (new - old)
            nacc[c] += new * new
    d = extra_d
    m = extra_n
    for c in range(r):
        d += dacc[c]
        m += nacc[c]
    return d, m


@njit(nogil=True, cache=True, parallel=True)
def block_step_colacc(parity, block_rows, block_ptr, indptr, indices, data, diag, cptr,
                      cidx, csgn, V, loss, gamma, bound, pmax, delta2, norm2, bd2, bn2):
    """bd2, bn2 : (n_blocks,) OUT, per-block totals (summed in block order by the caller)."""
    nb = block_ptr.shape[0] - 1
    n_par = (nb - parity + 1) // 2
    for t in prange(n_par):
        b = parity + 2 * t
        d, m = _block_rows_colacc(block_rows, block_ptr[b], block_ptr[b + 1], indptr, indices,
                                  data, diag, cptr, cidx, csgn, V, loss, gamma, bound, pmax,
                                  delta2, norm2)
        bd2[b] = d
        bn2[b] = m


BLOCK_KERNELS = {False: block_step, True: block_step_fast, "fast": block_step_fast,
                 "fast4": block_step_fast4, "noreduce": block_step_noreduce}


def block_sweep(bp, prep, V, order, n_threads, fast=False, serial=False):
    """One prototype sweep in the given step order; returns (delta2, norm2) like the executor.

    fast: False (library row kernel), True/"fast" (inlined unconstrained path), "fast4",
    "noreduce" (timing only), "colacc" (per-column accumulation of delta2/norm2).
    serial=True runs every block one after the other on the calling thread (reference).
    """
    n = V.shape[0]
    delta2 = np.empty(n)
    norm2 = np.empty(n)
    args = (prep.indptr, prep.indices, prep.data, prep.diag, prep.cptr, prep.cidx, prep.csgn,
            V, prep.loss_code, prep.gamma, prep.bound, prep.pmax, delta2, norm2)
    colacc = fast == "colacc"
    if colacc:
        bd2 = np.zeros(bp.n_blocks)
        bn2 = np.zeros(bp.n_blocks)
        tot_d = tot_n = 0.0
    prev = numba.get_num_threads()
    numba.set_num_threads(n_threads)
    try:
        for s in order:
            if s < 2:
                if serial:
                    for b in range(int(s), bp.n_blocks, 2):
                        sweep_rows(bp.block_rows, bp.block_ptr[b], bp.block_ptr[b + 1], *args)
                elif colacc:
                    block_step_colacc(int(s), bp.block_rows, bp.block_ptr, *args, bd2, bn2)
                else:
                    BLOCK_KERNELS[fast](int(s), bp.block_rows, bp.block_ptr, *args)
            else:
                rows = bp.con_colours[int(s) - 2]
                if serial:
                    sweep_rows(rows, 0, rows.shape[0], *args)
                else:
                    sweep_colour(rows, *args)
                if colacc:
                    tot_d += float(delta2[rows].sum())
                    tot_n += float(norm2[rows].sum())
    finally:
        numba.set_num_threads(prev)
    if colacc:
        return tot_d + float(bd2.sum()), tot_n + float(bn2.sum())
    return float(delta2.sum()), float(norm2.sum())


# --------------------------------------------------------------------------------------------
# prototype: row-wise objective
# --------------------------------------------------------------------------------------------

@njit(nogil=True, cache=True, parallel=True)
def smooth_terms_rowwise(indptr, indices, data, diag, V, out):
    """out[i] = v_i' (L V)_i via y = (L V)_i first (SpMM-like axpys, one reduction per row)."""
    n, r = V.shape
    n_chunks = (n + 511) // 512
    for ch in prange(n_chunks):
        y = np.empty(r)
        for i in range(ch * 512, min((ch + 1) * 512, n)):
            d = np.float64(diag[i])
            for c in range(r):
                y[c] = d * np.float64(V[i, c])
            for p in range(indptr[i], indptr[i + 1]):
                k = indices[p]
                w = np.float64(data[p])
                for c in range(r):
                    y[c] += w * np.float64(V[k, c])
            acc = 0.0
            for c in range(r):
                acc += np.float64(V[i, c]) * y[c]
            out[i] = acc


def objective_rowwise(prep, V, n_threads):
    n = V.shape[0]
    sm = np.empty(n)
    pairs = np.empty(prep.pi.shape[0])
    prev = numba.get_num_threads()
    numba.set_num_threads(n_threads)
    try:
        smooth_terms_rowwise(prep.indptr, prep.indices, prep.data, prep.diag, V, sm)
        pair_terms(prep.pi, prep.pj, prep.pt, V, prep.loss_code, pairs)
    finally:
        numba.set_num_threads(prev)
    return float(sm.sum()) + prep.gamma * float(pairs.sum())


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rank", type=int, nargs="+", default=[64])
    ap.add_argument("--dtype", nargs="+", default=["float64"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--loss", default="square")
    ap.add_argument("--k", type=int, default=9)
    ap.add_argument("--dim", type=int, default=2)
    ap.add_argument("--constrained", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--block-scan", type=int, nargs="*", default=[4, 8, 16, 32, 64],
                    help="block counts to time the prototype with")
    ap.add_argument("--check-sweeps", type=int, default=10)
    ap.add_argument("--max-wait", type=float, default=300.0)
    ap.add_argument("--skip-none", action="store_true", help="skip the relabel='none' run")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args(argv)
    T = args.threads
    K = args.repeats
    t_start = time.perf_counter()
    info = machine_info()
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    def table(res, base, load):
        say("| variant | median s | min s | median / SpMM median |")
        say("|:---|---:|---:|---:|")
        for k, (med, mn) in res.items():
            say(f"| {k} | {med:.4f} | {mn:.4f} | {med / base:.2f} |")
        say(f"\nother-process load during the block: {load:.2f} cores")

    case = Case(args.n, args)
    n = args.n
    say(f"### sweep_diagnose: n={n:,}, T={T}, loss {args.loss}, mean degree "
        f"{case.mean_degree:.2f}, {case.constraints.m} pairs")
    say("")
    cmd_args = " ".join(sys.argv[1:] if argv is None else argv)
    say(f"- command: `python bench/sweep_diagnose.py {cmd_args}`")
    say(f"- machine: {info['cpu']}, {info['cores']} cores, {info['ram']}, L3 {info['l3']}")
    say(f"- timing: {K} interleaved rounds (each variant once per round) after a warm-up")
    for dtype in args.dtype:
        plan, prep, problem = case.prepared(dtype)
        bp1 = BlockPlan(prep, args.blocks, defer="all")
        bp2 = BlockPlan(prep, args.blocks, defer="cover")
        say(f"- {dtype}: {plan.n_colours} colours, rows per colour "
            f"{np.diff(plan.colour_ptr).tolist()}")
        say(f"- prototype v1: {bp1.describe()}")
        say(f"- prototype v2: {bp2.describe()}")
        for r in args.rank:
            say("")
            say(f"#### n={n:,}, r={r}, {dtype}, T={T}")
            say("")
            rng = np.random.default_rng(args.seed)
            V0 = (rng.standard_normal((n, r)) / np.sqrt(r)).astype(dtype)
            V = V0.copy()
            Y = np.empty_like(V)
            ex = InProcessExecutor(n_threads=T)
            orng = np.random.default_rng(1)
            d2 = np.empty(n)
            n2 = np.empty(n)
            largs = (prep.indptr, prep.indices, prep.data, prep.diag, prep.cptr, prep.cidx,
                     prep.csgn, V, prep.loss_code, prep.gamma, prep.bound, prep.pmax, d2, n2)
            allrows = np.arange(n, dtype=np.int64)
            fns = {
                "SpMM (floor)": with_threads(T, lambda: spmm(prep.indptr, prep.indices,
                                                             prep.data, prep.diag, V, Y)),
                "library sweep (colour steps)":
                    lambda: ex.sweep(prep, plan, V, plan.colour_order(orng)),
                "library row kernel, plain row order, one pass, no colours (timing only)":
                    with_threads(T, lambda: sweep_colour(allrows, *largs)),
                "prototype v1: blocks + all constrained rows deferred (library row kernel)":
                    lambda: block_sweep(bp1, prep, V, bp1.step_order(orng), T),
                "prototype v1 + fast path":
                    lambda: block_sweep(bp1, prep, V, bp1.step_order(orng), T, fast=True),
                "prototype v2: blocks + vertex-cover deferral (library row kernel)":
                    lambda: block_sweep(bp2, prep, V, bp2.step_order(orng), T),
                "prototype v2 + fast path":
                    lambda: block_sweep(bp2, prep, V, bp2.step_order(orng), T, fast=True),
                "prototype v2 + fast path + 4 partial sums for delta2/norm2":
                    lambda: block_sweep(bp2, prep, V, bp2.step_order(orng), T, fast="fast4"),
                "prototype v2 + fast path + per-column delta2/norm2 accumulation":
                    lambda: block_sweep(bp2, prep, V, bp2.step_order(orng), T, fast="colacc"),
                "prototype v2, fast path without delta2/norm2 (timing-only bound)":
                    lambda: block_sweep(bp2, prep, V, bp2.step_order(orng), T,
                                        fast="noreduce"),
                "objective, library": lambda: ex.objective(prep, V),
                "objective, row-wise prototype": lambda: objective_rowwise(prep, V, T),
            }
            res, load = interleaved(fns, K, args.max_wait)
            base = res["SpMM (floor)"][0]
            table(res, base, load)

            # per-colour steps of the library sweep
            per = {}
            for c in range(plan.n_colours):
                rows = plan.rows_of(c)
                if T > 1 and rows.shape[0] > 1024:
                    per[c] = with_threads(T, lambda rows=rows: sweep_colour(rows, *largs))
                else:
                    per[c] = with_threads(1, lambda rows=rows: sweep_rows(
                        rows, 0, rows.shape[0], *largs))
            per["spmm"] = fns["SpMM (floor)"]
            pres, pload = interleaved(per, K, args.max_wait)
            pbase = pres.pop("spmm")[0]
            tot = sum(v[0] for v in pres.values())
            say("")
            say("Library colour steps, each timed alone (library kernel):")
            say("")
            say("| colour | rows | share of rows | median s | share of sweep | / SpMM "
                "| ns per row |")
            say("|---:|---:|---:|---:|---:|---:|---:|")
            for c, (t, _) in pres.items():
                m = plan.rows_of(c).shape[0]
                say(f"| {c} | {m:,} | {m / n:.1%} | {t:.4f} | {t / tot:.1%} | {t / pbase:.2f} "
                    f"| {t / max(m, 1) * 1e9:.0f} |")
            say(f"| sum | {n:,} | 100% | {tot:.4f} | 100% | {tot / pbase:.2f} | "
                f"{tot / n * 1e9:.0f} |")
            say(f"\nSpMM {pbase:.4f} s ({pbase / n * 1e9:.0f} ns per row); other-process "
                f"load {pload:.2f} cores")

            # prototype v2 steps alone
            steps = {st: (lambda st=st: block_sweep(bp2, prep, V, [st], T, fast="colacc"))
                     for st in range(bp2.n_steps)}
            steps["spmm"] = fns["SpMM (floor)"]
            sres, sload = interleaved(steps, K, args.max_wait)
            sbase = sres.pop("spmm")[0]
            say("")
            say("Prototype v2 (fast path + per-column delta2/norm2) steps, each timed alone:")
            say("")
            say("| step | rows | median s | / SpMM |")
            say("|:---|---:|---:|---:|")
            for st, (t, _) in sres.items():
                if st < 2:
                    name = "even blocks" if st == 0 else "odd blocks"
                    m = int(sum(bp2.block_ptr[b + 1] - bp2.block_ptr[b]
                                for b in range(st, bp2.n_blocks, 2)))
                else:
                    name = f"deferred colour {st - 2}"
                    m = bp2.con_colours[st - 2].shape[0]
                say(f"| {name} | {m:,} | {t:.4f} | {t / sbase:.2f} |")
            say(f"| SpMM | {n:,} | {sbase:.4f} | 1.00 |")
            say(f"\nother-process load: {sload:.2f} cores")

            if args.block_scan:
                bps = {nb: BlockPlan(prep, nb, defer="cover") for nb in args.block_scan}
                scan = {nb: (lambda b=b: block_sweep(b, prep, V, b.step_order(orng), T,
                                                     fast="colacc"))
                        for nb, b in bps.items()}
                scan["spmm"] = fns["SpMM (floor)"]
                bres, bload = interleaved(scan, K, args.max_wait)
                bbase = bres.pop("spmm")[0]
                say("")
                say("Prototype v2 + fast path + per-column delta2/norm2 vs number of blocks:")
                say("")
                say("| blocks | rows per block | deferred rows | median s | / SpMM |")
                say("|---:|---:|---:|---:|---:|")
                for nb, (t, _) in bres.items():
                    b = bps[nb]
                    say(f"| {b.n_blocks} | {b.block_size:,} | {int(b.deferred.sum()):,} "
                        f"| {t:.4f} | {t / bbase:.2f} |")
                say(f"\nother-process load: {bload:.2f} cores")

            # correctness of the prototype
            say("")
            say("Prototype checks:")
            for name, bp in (("v1", bp1), ("v2", bp2)):
                Va, Vb, Vc, Vd, Ve, Vf, Vg = (V0.copy() for _ in range(7))
                same_dg = True
                okr = np.random.default_rng(5)
                for _ in range(3):
                    order = bp.step_order(okr)
                    da = block_sweep(bp, prep, Va, order, T)
                    block_sweep(bp, prep, Vb, order, 1)
                    block_sweep(bp, prep, Vc, order, T, serial=True)
                    block_sweep(bp, prep, Vd, order, T, fast=True)
                    de = block_sweep(bp, prep, Ve, order, T, fast="fast4")
                    df = block_sweep(bp, prep, Vf, order, T, fast="colacc")
                    dg = block_sweep(bp, prep, Vg, order, 1, fast="colacc")
                    same_dg &= df == dg
                say(f"- {name}, 3 sweeps: T={T} == T=1 bitwise: {np.array_equal(Va, Vb)}; == "
                    f"sequential blocks: {np.array_equal(Va, Vc)}; fast path == library row "
                    f"kernel: {np.array_equal(Va, Vd)}; 4-partial-sum path: V bitwise equal "
                    f"{np.array_equal(Va, Ve)}, delta2 rel. diff "
                    f"{abs(da[0] - de[0]) / da[0]:.1e}; per-column path: V bitwise equal "
                    f"{np.array_equal(Va, Vf)}, delta2 rel. diff {abs(da[0] - df[0]) / da[0]:.1e}"
                    f", norm2 rel. diff {abs(da[1] - df[1]) / da[1]:.1e}, its (delta2, norm2) "
                    f"T={T} == T=1 exactly: {same_dg}")
                del Va, Vb, Vc, Vd, Ve, Vf, Vg
            Vl = V0.copy()
            Vp = V0.copy()  # prototype v2 with the per-column fast path
            lr = np.random.default_rng(11)
            pr_ = np.random.default_rng(11)
            obj_l = [ex.objective(prep, Vl)]
            obj_p = [obj_l[0]]
            for _ in range(args.check_sweeps):
                ex.sweep(prep, plan, Vl, plan.colour_order(lr))
                block_sweep(bp2, prep, Vp, bp2.step_order(pr_), T, fast="colacc")
                obj_l.append(ex.objective(prep, Vl))
                obj_p.append(ex.objective(prep, Vp))
            mono = all(b <= a * (1 + 1e-12) + 1e-9 for a, b in zip(obj_p, obj_p[1:]))
            say(f"- v2 objective monotone over {args.check_sweeps} sweeps: {mono}")
            say(f"- objective (start {obj_l[0]:.6g}) after sweeps 1, 2, 5, {args.check_sweeps}: "
                f"library {[float(f'{obj_l[j]:.6g}') for j in (1, 2, 5, -1)]}, prototype v2 "
                f"{[float(f'{obj_p[j]:.6g}') for j in (1, 2, 5, -1)]}")
            ol = ex.objective(prep, Vp)
            orow = objective_rowwise(prep, Vp, T)
            say(f"- row-wise objective vs library: rel. diff {abs(orow - ol) / abs(ol):.1e}")
            del V, Y, Vl, Vp

        if not args.skip_none:
            r = args.rank[0]
            say("")
            say(f"#### relabel 'none' vs 'rcm' (library sweep, r={r}, {dtype}, T={T})")
            say("")
            say("| relabel | colours | sweep s | SpMM s | sweep/SpMM |")
            say("|:---|---:|---:|---:|---:|")
            for relabel in ("rcm", "none"):
                plan_, prep_, _ = case.prepared(dtype, relabel=relabel)
                V = (np.random.default_rng(0).standard_normal((n, r)) / np.sqrt(r)).astype(dtype)
                Y = np.empty_like(V)
                orng = np.random.default_rng(1)
                ex = InProcessExecutor(n_threads=T)
                res, load = interleaved({
                    "sweep": lambda: ex.sweep(prep_, plan_, V, plan_.colour_order(orng)),
                    "spmm": with_threads(T, lambda: spmm(prep_.indptr, prep_.indices,
                                                         prep_.data, prep_.diag, V, Y)),
                }, K, args.max_wait)
                say(f"| {relabel} | {plan_.n_colours} | {res['sweep'][0]:.4f} "
                    f"| {res['spmm'][0]:.4f} | {res['sweep'][0] / res['spmm'][0]:.2f} |")
                del V, Y
            say(f"\nother-process load: {load:.2f} cores (last block)")
            case.prepared(dtype, relabel="rcm")
    say("")
    say(f"diagnosis wall time {time.perf_counter() - t_start:.0f} s")
    say("")
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
        print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
