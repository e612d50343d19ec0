"""KL-ADMM's sparse product L X on adult: the library's row-wise form against column blocks
held in vector registers, and the bandwidth each reaches.

``python bench/admm_spmm_blocks.py [--datasets adult-a1a adult-a4a] [--runs 7]``

The half-step forms (L X)_i = L_ii x_i + sum_k L_ik x_k row by row, four neighbours per pass
over the row's r columns (``_kernels._add_range_products``; LLVM vectorises each pass), and
each nonzero reads a whole row of X (r doubles). On adult X is 1.3-4.9 MB, beyond a Zen 3
core's 512 KB L2, and reverse Cuthill-McKee leaves these k = 50 graphs a bandwidth of about
3/4 n, so the rows come from L3. Blocking the columns so that a block of X fits in L2 is the
textbook cure; this times it, with the block's partial sums held in vector registers for a
whole row (``npkl_dist._kernels``'s 4-lane vector type), in two layouts:

* ``row-wise``: the library's form (one row's product at a time, all columns);
* ``blocks-16``: for each block of 16 columns, every row: 4 vector accumulators, one FMA
  per nonzero and vector, in the neighbours' order (bitwise the library's sums);
* ``blocks-16 packed``: the same on a copy of X whose 16-column blocks are contiguous
  (n x 16 doubles, 128 B a row; the copy's cost included).

Inputs: the harness's repetition-0 Laplacian in the plan's order, X random of the
protocol's rank, one thread. Printed: median ms of ``--runs`` products (alternating), cycles
per nonzero at the clock this host's FMA latency implies, and the bandwidth of the X rows
read (nnz * r * 8 bytes / time). All three results are checked bitwise equal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from npkl_dist._kernels import (_add_row_products, _f64x4, _fma, _fmadd,  # noqa: E402
                                _v4_fma, _v4_load)


@intrinsic
def _v4_store(typingctx, A, i, q, v):
    """A[i, q:q + 4] = v (A: C-contiguous float64, 2-D)."""
    if not (isinstance(A, types.Array) and A.ndim == 2 and A.layout == "C"
            and A.dtype == types.float64 and v == _f64x4):
        return None

    def codegen(context, builder, sig, args):
        from llvmlite import ir
        from numba.core import cgutils

        ary = context.make_array(sig.args[0])(context, builder, args[0])
        idx = [context.cast(builder, a, t, types.intp) for a, t in zip(args[1:3],
                                                                       sig.args[1:3])]
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
            cgutils.unpack_tuple(builder, ary.strides), "C", idx, wraparound=False,
            boundscheck=False)
        builder.store(args[3], builder.bitcast(
            ptr, ir.VectorType(ir.DoubleType(), 4).as_pointer()), align=8)
        return context.get_dummy_value()

    return types.void(A, i, q, _f64x4), codegen


@intrinsic
def _v4_splat(typingctx, x):
    """(x, x, x, x)."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        from llvmlite import ir

        vt = ir.VectorType(ir.DoubleType(), 4)
        v = builder.insert_element(ir.Constant(vt, ir.Undefined), args[0],
                                   ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), 4), [0] * 4))

    return _f64x4(types.float64), codegen


@intrinsic
def _v4_mul(typingctx, a, b):
    if not (a == _f64x4 and b == _f64x4):
        return None

    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], args[1])

    return _f64x4(_f64x4, _f64x4), codegen


@njit(nogil=True)
def row_wise(indptr, indices, data, diag, X, Y):
    """The library's form: y = L_ii x_i, then the row's neighbours, four per pass."""
    n, r = X.shape
    y = np.empty(r)
    for i in range(n):
        dii = np.float64(diag[i])
        for q in range(r):
            y[q] = dii * np.float64(X[i, q])
        _add_row_products(i, indptr, indices, data, X, y, r, 1.0, _fmadd)
        for q in range(r):
            Y[i, q] = y[q]


@njit(nogil=True, inline="always")
def _block16(indptr, indices, data, diag, X, cx, Y, cy):
    """Columns cy..cy+15 of Y from columns cx..cx+15 of X, every row."""
    n = X.shape[0]
    for i in range(n):
        d = _v4_splat(np.float64(diag[i]))
        a0 = _v4_mul(d, _v4_load(X, i, cx))
        a1 = _v4_mul(d, _v4_load(X, i, cx + 4))
        a2 = _v4_mul(d, _v4_load(X, i, cx + 8))
        a3 = _v4_mul(d, _v4_load(X, i, cx + 12))
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            w = _v4_splat(np.float64(data[p]))
            a0 = _v4_fma(w, _v4_load(X, k, cx), a0)
            a1 = _v4_fma(w, _v4_load(X, k, cx + 4), a1)
            a2 = _v4_fma(w, _v4_load(X, k, cx + 8), a2)
            a3 = _v4_fma(w, _v4_load(X, k, cx + 12), a3)
        _v4_store(Y, i, cy, a0)
        _v4_store(Y, i, cy + 4, a1)
        _v4_store(Y, i, cy + 8, a2)
        _v4_store(Y, i, cy + 12, a3)


@njit(nogil=True, inline="always")
def _rest_columns(indptr, indices, data, diag, X, Y, q0):
    """Columns q0.. one at a time (the columns beyond the last whole block)."""
    n, r = X.shape
    for q in range(q0, r):
        for i in range(n):
            s = np.float64(diag[i]) * np.float64(X[i, q])
            for p in range(indptr[i], indptr[i + 1]):
                s = _fma(np.float64(data[p]), np.float64(X[indices[p], q]), s)
            Y[i, q] = s


@njit(nogil=True)
def blocks16(indptr, indices, data, diag, X, Y):
    r = X.shape[1]
    r16 = r - r % 16
    for q in range(0, r16, 16):
        _block16(indptr, indices, data, diag, X, q, Y, q)
    _rest_columns(indptr, indices, data, diag, X, Y, r16)


@njit(nogil=True)
def blocks16_packed(indptr, indices, data, diag, X, Y, P):
    """P: (n_blocks, n, 16) scratch; each block copied contiguous first."""
    n, r = X.shape
    r16 = r - r % 16
    for b in range(r16 // 16):
        Pb = P[b]
        for i in range(n):
            for c in range(16):
                Pb[i, c] = X[i, b * 16 + c]
        _block16(indptr, indices, data, diag, Pb, 0, Y, b * 16)
    _rest_columns(indptr, indices, data, diag, X, Y, r16)


def _fma_clock():
    """GHz implied by a chain of dependent FMAs at 4 cycles each (Zen 3 and Intel cores
    since Skylake)."""
    @njit
    def chain(m, a, b):
        x = 0.5
        for _ in range(m):
            x = _fma(x, a, b)
        return x

    chain(10, 0.999, 1e-3)
    t0 = time.perf_counter()
    chain(50_000_000, 0.999, 1e-3)
    return 4 * 50_000_000 / (time.perf_counter() - t0) / 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["adult-a1a", "adult-a4a"])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import numba
    from threadpoolctl import threadpool_limits

    import npkl_dist as nk
    from bench.paper.run import task_inputs
    from npkl_dist._plan import make_plan, prepare

    numba.set_num_threads(1)
    threadpool_limits(1, user_api="blas")
    ghz = _fma_clock()
    print(f"clock from the FMA latency: {ghz:.2f} GHz; one thread")
    print("| data set | n | r | nnz | form | ms | cycles / nonzero | X rows read (GB/s) |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for name in args.datasets:
        _, _, _, L, _, cons_diag = task_inputs(name, 0)
        p = nk.NPKLProblem.build(L, cons_diag, loss="square", seed=0)
        plan, Lp = make_plan(p, relabel="rcm", return_matrix=True)
        pr = prepare(p, plan, Lp)
        n, r = p.n_points, p.rank
        X = np.random.default_rng(0).standard_normal((n, r))
        P = np.empty((max(r // 16, 1), n, 16))
        forms = {
            "row-wise": lambda Y: row_wise(pr.indptr, pr.indices, pr.data, pr.diag, X, Y),
            "blocks-16": lambda Y: blocks16(pr.indptr, pr.indices, pr.data, pr.diag, X, Y),
            "blocks-16 packed": lambda Y: blocks16_packed(pr.indptr, pr.indices, pr.data,
                                                          pr.diag, X, Y, P),
        }
        outs, times = {}, {k: [] for k in forms}
        for k, f in forms.items():
            outs[k] = np.empty((n, r))
            f(outs[k])
        for k in forms:
            if not np.array_equal(outs[k], outs["row-wise"]):
                raise SystemExit(f"{name}: {k} differs from the row-wise product")
        for _ in range(args.runs):
            for k, f in forms.items():
                t0 = time.perf_counter()
                f(outs[k])
                times[k].append(time.perf_counter() - t0)
        nnz = pr.indices.size
        for k in forms:
            t = float(np.median(times[k]))
            print(f"| {name} | {n} | {r} | {nnz} | {k} | {t * 1e3:.2f} | "
                  f"{t * ghz * 1e9 / nnz:.0f} | {nnz * r * 8 / t / 1e9:.1f} |", flush=True)


if __name__ == "__main__":
    main()
