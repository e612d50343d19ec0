"""SIMD and memory intrinsics for numba: fused multiply-add, prefetch, and 4-lane float64
vectors (load, store, fma, splat) used by the compiled row kernels."""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c rounded once (LLVM's llvm.fma.f64: the FMA instruction where the CPU has
    one, an exact software fma where not, so the result is the same on every machine; the
    software fallback, on x86 CPUs older than Haswell / Piledriver, is many times slower)."""
    if not all(t == types.float64 for t in (a, b, c)):
        return None  # float64 only (callers convert): no implicit casts inside the fma
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


def _prefetch_codegen(context, builder, signature, args):
    """LLVM's llvm.prefetch (read, high temporal locality, data cache) of the element of the
    array ``args[0]`` at the indices ``args[1:]``: a hint, which never faults and changes no
    value."""

    arrty = signature.args[0]
    ary = context.make_array(arrty)(context, builder, args[0])
    idx = [context.cast(builder, a, t, types.intp) for a, t in zip(args[1:], signature.args[1:])]
    ptr = cgutils.get_item_pointer2(
        context,
        builder,
        ary.data,
        cgutils.unpack_tuple(builder, ary.shape),
        cgutils.unpack_tuple(builder, ary.strides),
        arrty.layout,
        idx,
        wraparound=False,
        boundscheck=False,
    )
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = builder.module.declare_intrinsic(
        "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    )
    builder.call(
        fn,
        [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)],
    )
    return context.get_dummy_value()


@intrinsic
def _prefetch(typingctx, X, i, j):
    """Prefetch the cache line of X[i, j] (a 2-D array)."""
    if not (
        isinstance(X, types.Array)
        and X.ndim == 2
        and isinstance(i, types.Integer)
        and isinstance(j, types.Integer)
    ):
        return None
    return types.void(X, i, j), _prefetch_codegen


@intrinsic
def prefetch1(typingctx, x, i):
    """Prefetch the cache line of x[i] (a 1-D array)."""
    if not (isinstance(x, types.Array) and x.ndim == 1 and isinstance(i, types.Integer)):
        return None
    return types.void(x, i), _prefetch_codegen


#: Positions ahead, in a list of rows being worked through, at which
#: :func:`prefetch_rows_ahead` prefetches a row's bounds, its entries, and what its columns
#: index: the serial and scattered set-up passes (Cuthill-McKee, the permutation, the
#: Galerkin products; docs/decisions/block-fit-at-1e6.md).
ROWS_AHEAD = (12, 8, 4)


@njit(nogil=True, cache=True, inline="always")
def prefetch_rows_ahead(indptr, indices, data, rows, q, end, dense_a, dense_b):
    """Before working on ``rows[q]`` (of ``rows[:end]``), prefetch in three stages for the
    rows further on (``ROWS_AHEAD``): the first one's bounds, the second one's entries
    (indices, and values if ``data`` has any), and ``dense_a`` (and ``dense_b``, if it has
    entries) at the third one's columns."""
    if q + ROWS_AHEAD[0] < end:
        prefetch1(indptr, rows[q + ROWS_AHEAD[0]])
    if q + ROWS_AHEAD[1] < end:
        u = rows[q + ROWS_AHEAD[1]]
        prefetch1(indices, indptr[u])
        prefetch1(indices, indptr[u + 1] - 1)
        if data.shape[0]:
            prefetch1(data, indptr[u])
            prefetch1(data, indptr[u + 1] - 1)
    if q + ROWS_AHEAD[2] < end:
        u = rows[q + ROWS_AHEAD[2]]
        for p in range(indptr[u], indptr[u + 1]):
            j = indices[p]
            prefetch1(dense_a, j)
            if dense_b.shape[0]:
                prefetch1(dense_b, j)


#: Entries ahead whose rows the gather-bound block-solve products prefetch.
PREFETCH_AHEAD = 16


@njit(nogil=True, cache=True, inline="always")
def prefetch_row(X, i):
    """Prefetch row i of the C-contiguous 2-D array X, each 64-byte line of it.

    The gather-bound products call it for the rows a few entries ahead: the rows that a
    product with L reads are scattered over about a quarter of a million rows of the RCM
    order at n = 1e6, and the CPU's own look-ahead covers only the next two or three
    (docs/decisions/block-fit-at-1e6.md)."""
    step = max(1, 64 // X.itemsize)
    for j in range(0, X.shape[1], step):
        _prefetch(X, i, j)


@njit(nogil=True, cache=True, inline="always")
def prefetch_ahead(indptr, indices, i, X, nnz):
    """Prefetch the rows of X that the CSR entries ``PREFETCH_AHEAD`` past row i's read
    (call before row i's product; the next rows' entries, in the same thread's chunk)."""
    for p in range(indptr[i] + PREFETCH_AHEAD, min(indptr[i + 1] + PREFETCH_AHEAD, nnz)):
        prefetch_row(X, indices[p])


# Multiply-add of the row-product and dot helpers below, passed as their ``madd`` argument
# (numba specialises and inlines the call). ``_madd`` rounds the product and then the sum, the
# arithmetic of the BCD sweeps, the block solve and their objectives. ``_fmadd`` rounds once:
# KL-ADMM's half-step and objective, where the fused form is faster and no less accurate
# (docs/decisions/kl-admm.md). The two paths of one solver must use the same one, as their sums
# must agree bitwise.
@njit(nogil=True, cache=True, inline="always")
def _madd(a, b, c):
    return a * b + c


@njit(nogil=True, cache=True, inline="always")
def _fmadd(a, b, c):
    return _fma(a, b, c)


# KL-ADMM's dots in explicit 4-lane vectors. ``_dot_rows``'s four lanes (q mod 4) are
# exactly the lanes of one AVX2 register, but LLVM keeps them in four scalar chains (it may
# not reassociate the sums): 4 FMAs and 8 loads per step where one vector FMA and two vector
# loads do. ``_F64x4`` is a numba type whose value is an LLVM <4 x double>; the intrinsics
# below load, fuse and combine it. The same operations on the same values in the same
# order, so the sums are bitwise ``_dot_rows(..., _fmadd)``'s (tests/linalg/test_row_products.py).
# Why, with figures: docs/decisions/kl-admm.md.
class _F64x4Type(types.Type):
    def __init__(self):
        super().__init__(name="npkl_f64x4")


_f64x4 = _F64x4Type()


@register_model(_F64x4Type)
class _F64x4Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(ir.DoubleType(), 4))


def _v4_ok(A, ndim):
    """A float32/float64 array of ``ndim`` dimensions."""
    return (
        isinstance(A, types.Array) and A.ndim == ndim and A.dtype in (types.float32, types.float64)
    )


def _v4_addressing(context, builder, sig, args, n_index_end):
    """The array args[0]'s element indices args[1:n_index_end] cast to intp, and a function
    from an index list to that element's pointer (any layout, no bounds check): the common
    start of the vector loads and stores."""

    arrty = sig.args[0]
    ary = context.make_array(arrty)(context, builder, args[0])
    idx = [
        context.cast(builder, a, t, types.intp)
        for a, t in zip(args[1:n_index_end], sig.args[1:n_index_end])
    ]
    shape = cgutils.unpack_tuple(builder, ary.shape)
    strides = cgutils.unpack_tuple(builder, ary.strides)

    def pointer(index):
        return cgutils.get_item_pointer2(
            context,
            builder,
            ary.data,
            shape,
            strides,
            arrty.layout,
            index,
            wraparound=False,
            boundscheck=False,
        )

    return idx, pointer


def _v4_load_codegen(context, builder, sig, args):
    """Elements [idx..., q:q + 4] of the array args[0] as <4 x double> (float32 widened
    lanewise, as np.float64(x) does): one vector load where the array is C-contiguous,
    four element loads otherwise (any strides)."""

    arrty = sig.args[0]
    idx, pointer = _v4_addressing(context, builder, sig, args, len(args))
    f32 = arrty.dtype == types.float32
    elt = ir.FloatType() if f32 else ir.DoubleType()
    v4 = ir.VectorType(ir.DoubleType(), 4)
    if arrty.layout == "C":
        v = builder.load(
            builder.bitcast(pointer(idx), ir.VectorType(elt, 4).as_pointer()),
            align=arrty.dtype.bitwidth // 8,
        )
        return builder.fpext(v, v4) if f32 else v
    v = ir.Constant(v4, ir.Undefined)
    for lane in range(4):
        q = builder.add(idx[-1], ir.Constant(idx[-1].type, lane))
        x = builder.load(pointer(idx[:-1] + [q]))
        v = builder.insert_element(
            v, builder.fpext(x, ir.DoubleType()) if f32 else x, ir.Constant(ir.IntType(32), lane)
        )
    return v


@intrinsic
def _v4_load(typingctx, A, i, q):
    """A[i, q:q + 4] (q + 4 <= A.shape[1]) in a 4-lane float64 vector."""
    if not (_v4_ok(A, 2) and isinstance(i, types.Integer) and isinstance(q, types.Integer)):
        return None
    return _f64x4(A, i, q), _v4_load_codegen


@intrinsic
def _v4_load1(typingctx, y, q):
    """y[q:q + 4] (q + 4 <= y.size) in a 4-lane float64 vector."""
    if not (_v4_ok(y, 1) and isinstance(q, types.Integer)):
        return None
    return _f64x4(y, q), _v4_load_codegen


@intrinsic
def _v4_fma(typingctx, a, b, c):
    """a * b + c lanewise, each lane rounded once (llvm.fma.v4f64)."""
    if not all(t == _f64x4 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        vt = ir.VectorType(ir.DoubleType(), 4)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vt, [vt] * 3), "llvm.fma.v4f64"
        )
        return builder.call(fn, list(args))

    return _f64x4(_f64x4, _f64x4, _f64x4), codegen


@intrinsic
def _v4_zero(typingctx):
    """The vector (+0.0, +0.0, +0.0, +0.0)."""

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.VectorType(ir.DoubleType(), 4), [0.0] * 4)

    return _f64x4(), codegen


@intrinsic
def _v4_pair_sum(typingctx, v):
    """(v0 + v1) + (v2 + v3), ``_dot_rows``'s combination of its lanes."""
    if v != _f64x4:
        return None

    def codegen(context, builder, sig, args):
        e = [builder.extract_element(args[0], ir.Constant(ir.IntType(32), k)) for k in range(4)]
        return builder.fadd(builder.fadd(e[0], e[1]), builder.fadd(e[2], e[3]))

    return types.float64(_f64x4), codegen


def _v4_store_codegen(context, builder, sig, args):
    """Store the <4 x double> args[-1] at elements [idx..., q:q + 4] of the array args[0]
    (rounded lanewise to float32 for a float32 array, as a scalar assignment rounds): one
    vector store where the array is C-contiguous, four element stores otherwise."""

    arrty = sig.args[0]
    idx, pointer = _v4_addressing(context, builder, sig, args, len(args) - 1)
    f32 = arrty.dtype == types.float32
    elt = ir.FloatType() if f32 else ir.DoubleType()
    v = args[-1]
    if f32:
        v = builder.fptrunc(v, ir.VectorType(elt, 4))
    if arrty.layout == "C":
        builder.store(
            v,
            builder.bitcast(pointer(idx), ir.VectorType(elt, 4).as_pointer()),
            align=arrty.dtype.bitwidth // 8,
        )
    else:
        for lane in range(4):
            q = builder.add(idx[-1], ir.Constant(idx[-1].type, lane))
            builder.store(
                builder.extract_element(v, ir.Constant(ir.IntType(32), lane)),
                pointer(idx[:-1] + [q]),
            )
    return context.get_dummy_value()


@intrinsic
def _v4_store(typingctx, A, i, q, v):
    """A[i, q:q + 4] = v (q + 4 <= A.shape[1]; float32 A: each lane rounded)."""
    if not (
        _v4_ok(A, 2)
        and isinstance(i, types.Integer)
        and isinstance(q, types.Integer)
        and v == _f64x4
    ):
        return None
    return types.void(A, i, q, v), _v4_store_codegen


@intrinsic
def _v4_store1(typingctx, y, q, v):
    """y[q:q + 4] = v (q + 4 <= y.size)."""
    if not (_v4_ok(y, 1) and isinstance(q, types.Integer) and v == _f64x4):
        return None
    return types.void(y, q, v), _v4_store_codegen


@intrinsic
def _v4_splat(typingctx, x):
    """(x, x, x, x) for a float64 x."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        v = ir.Constant(ir.VectorType(ir.DoubleType(), 4), ir.Undefined)
        for lane in range(4):
            v = builder.insert_element(v, args[0], ir.Constant(ir.IntType(32), lane))
        return v

    return _f64x4(x), codegen


def _v4_binary(instruction, doc):
    @intrinsic
    def op(typingctx, a, b):
        if not (a == _f64x4 and b == _f64x4):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, instruction)(args[0], args[1])

        return _f64x4(a, b), codegen

    op.__doc__ = doc
    return op


_v4_mul = _v4_binary("fmul", "a * b lanewise (IEEE, each lane rounded once).")
_v4_add = _v4_binary("fadd", "a + b lanewise.")
_v4_sub = _v4_binary("fsub", "a - b lanewise.")
_v4_div = _v4_binary("fdiv", "a / b lanewise (IEEE division, as the scalar one).")
