"""Compiled (numba, nogil) block kernels of the BCD sweep and the objective.

Conventions (pynndescent / scikit-learn style): small pure kernels, loops inside ``@njit``,
caller-allocated outputs marked ``# OUT``. Arrays are in the solver's internal (relabelled)
order. The Laplacian is passed split into its diagonal ``diag`` and its off-diagonal CSR
``(indptr, indices, data)``; the constraints as symmetric per-point lists ``(cptr, cidx, csgn)``.

Per-column subproblem (bcdkl-tnnls2015 eq. 11, multiplied by 2): with g = sum_{k != i} L_ik v_k,
a_j = T_ij v_j for j in T(i) and A = [a_j] (r x p),

    phi(v) = L_ii ||v||^2 + 2 g'v + gamma * sum_j loss(a_j'v)

whose exact minimisers are
    none      v = -g / L_ii                                  (eq. 13)
    square    (L_ii I + gamma A A') v = gamma A 1 - g        (Woodbury: a p x p system)
    hinge     dual  min 1/2 a'Ha - q'a,  0 <= a <= gamma,  H = A'A / (2 L_ii),
              q = 1 + A'g / L_ii,  v = (A a / 2 - g) / L_ii  (eq. 21-23, scaled by 2)
    sq.hinge  as hinge with H += I / (2 gamma) and a >= 0    (eq. 25)
    linear    v = (gamma/2 A 1 - g) / L_ii projected on ||v|| <= b  (eq. 31; the ball
              constraint holds for every column, constrained or not)
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic, models, register_model

LOSS_CODES = {"hinge": 0, "squared_hinge": 1, "square": 2, "linear": 3}

#: Rows per parallel work item of the KL-ADMM half-step; a sweep step runs in parallel only
#: above 2 * CHUNK rows (a parallel region costs more than it saves below).
CHUNK = 512

#: Reductions over rows are summed in fixed chunks of SUM_BLOCK rows, chunk partials then
#: added in row order. Every executor does the same (its row blocks are multiples of
#: SUM_BLOCK), so sums -- and the stopping decisions made from them -- are bitwise identical.
SUM_BLOCK = 1024

#: box QP: phase-1 coordinate-descent sweeps; phase-2 rounds (CD sweeps + one active-set step).
#: A dual that phase 1 has not settled in 100 sweeps is a degenerate one, for phase 2's exact
#: active-set steps: with 10,000 sweeps, the few such rows of a hinge fit cost most of it (a
#: 60-point fit 1.95 -> 0.49 s, the paper sets 1.3-2.4x; the same iterations, objectives to
#: 1e-10 and clusterings; caps 30 and 300 measured the same; bench/RESULTS.md, "The hinge's
#: row QP: 100 coordinate-descent sweeps before the active set")
_QP_MAX_ITER = 100
_QP_ROUNDS = 50
_QP_CD_ITER = 200


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
    from llvmlite import ir
    from numba.core import cgutils

    arrty = signature.args[0]
    ary = context.make_array(arrty)(context, builder, args[0])
    idx = [context.cast(builder, a, t, types.intp) for a, t in zip(args[1:], signature.args[1:])]
    ptr = cgutils.get_item_pointer2(
        context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
        cgutils.unpack_tuple(builder, ary.strides), arrty.layout, idx, wraparound=False,
        boundscheck=False)
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = builder.module.declare_intrinsic(
        "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                      ir.Constant(i32, 1)])
    return context.get_dummy_value()


@intrinsic
def _prefetch(typingctx, X, i, j):
    """Prefetch the cache line of X[i, j] (a 2-D array)."""
    if not (isinstance(X, types.Array) and X.ndim == 2 and isinstance(i, types.Integer)
            and isinstance(j, types.Integer)):
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
#: Galerkin products; bench/RESULTS.md, "Prefetching the rows a product gathers").
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
    (bench/RESULTS.md, "Prefetching the rows a product gathers")."""
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
# KL-ADMM's half-step and objective, where the fused form makes the sparse product 13% and
# the half-step 15% faster (adult-a1a, r = 103; bench/RESULTS.md), with results no less
# accurate. The two paths of one solver must use the same one, as their sums must agree bitwise.
@njit(nogil=True, cache=True, inline="always")
def _madd(a, b, c):
    return a * b + c


@njit(nogil=True, cache=True, inline="always")
def _fmadd(a, b, c):
    return _fma(a, b, c)


@njit(nogil=True, cache=True, inline="always")
def _gather(i, indptr, indices, data, V, g):
    """g <- sum_{k != i} L_ik v_k (off-diagonal row i times V)."""
    r = V.shape[1]
    for c in range(r):
        g[c] = 0.0
    # four neighbours per pass over g, as in _add_row_products (the same roundings, in the
    # dtype arithmetic of the plain loop: w * V[k, c] in the problem's dtype)
    p = indptr[i]
    end = indptr[i + 1]
    while p + 3 < end:
        k0 = indices[p]
        k1 = indices[p + 1]
        k2 = indices[p + 2]
        k3 = indices[p + 3]
        w0 = data[p]
        w1 = data[p + 1]
        w2 = data[p + 2]
        w3 = data[p + 3]
        for c in range(r):
            g[c] = (((g[c] + w0 * V[k0, c]) + w1 * V[k1, c]) + w2 * V[k2, c]) + w3 * V[k3, c]
        p += 4
    while p < end:
        k = indices[p]
        w = data[p]
        for c in range(r):
            g[c] += w * V[k, c]
        p += 1


@njit(nogil=True, cache=True, inline="always")
def _cholesky_body(M, y, p, by_reciprocal):
    """Solve M x = y in place (y <- x) for SPD M[:p, :p]; M is overwritten by its factor.
    ``by_reciprocal`` (a constant at each call site): keep 1 / L_jj on the diagonal and
    multiply by it, rather than divide by L_jj: one division per pivot instead of one per
    entry below it and two per solve (KL-ADMM's p <= 8 systems on iris: the half-step 5%
    faster; each quotient then rounds twice).

    Returns False when M is not numerically positive definite.
    """
    for j in range(p):
        s = M[j, j]
        for k in range(j):
            s -= M[j, k] * M[j, k]
        if not s > 0.0:
            return False
        d = np.sqrt(s)
        if by_reciprocal:
            d = 1.0 / d
        M[j, j] = d
        for i in range(j + 1, p):
            s = M[i, j]
            for k in range(j):
                s -= M[i, k] * M[j, k]
            M[i, j] = s * d if by_reciprocal else s / d
    for i in range(p):  # forward
        s = y[i]
        for k in range(i):
            s -= M[i, k] * y[k]
        y[i] = s * M[i, i] if by_reciprocal else s / M[i, i]
    for i in range(p - 1, -1, -1):  # backward
        s = y[i]
        for k in range(i + 1, p):
            s -= M[k, i] * y[k]
        y[i] = s * M[i, i] if by_reciprocal else s / M[i, i]
    return True


@njit(nogil=True, cache=True)
def _cholesky_solve(M, y, p):
    """``_cholesky_body`` dividing by the pivots (the BCD column updates)."""
    return _cholesky_body(M, y, p, False)


@njit(nogil=True, cache=True)
def _qp_value(H, q, alpha, p):
    val = 0.0
    for a in range(p):
        s = 0.0
        for b in range(p):
            s += H[a, b] * alpha[b]
        val += alpha[a] * (0.5 * s - q[a])
    return val


@njit(nogil=True, cache=True)
def _qp_refresh(H, q, alpha, p, grad, upper):
    """grad <- H alpha - q; returns the largest projected-gradient violation."""
    viol = 0.0
    for a in range(p):
        s = -q[a]
        for b in range(p):
            s += H[a, b] * alpha[b]
        grad[a] = s
        if alpha[a] <= 0.0:
            v = -s if s < 0.0 else 0.0
        elif alpha[a] >= upper:
            v = s if s > 0.0 else 0.0
        else:
            v = abs(s)
        viol = max(viol, v)
    return viol


@njit(nogil=True, cache=True, inline="always")
def _free_set(alpha, upper, p, free):
    """free[:nf] <- the variables strictly inside the box; returns nf."""
    nf = 0
    for j in range(p):
        if 0.0 < alpha[j] < upper:
            free[nf] = j
            nf += 1
    return nf


@njit(nogil=True, cache=True, inline="always")
def _free_system(H, q, alpha, upper, p, free, nf, work_M, work_y):
    """The QP restricted to the free variables (the others fixed at their bounds):
    work_M[:nf, :nf] = H_FF, work_y[:nf] = q_F - H_FB alpha_B."""
    for a in range(nf):
        ja = free[a]
        s = q[ja]
        for k in range(p):
            if not (0.0 < alpha[k] < upper):
                s -= H[ja, k] * alpha[k]
        work_y[a] = s
        for b in range(nf):
            work_M[a, b] = H[ja, free[b]]


@njit(nogil=True, cache=True)
def _free_solve(H, q, alpha, upper, p, free, nf, work_M, work_y):
    """work_y[:nf] <- minimiser of the QP over the free variables with the others fixed.

    Cholesky when H_FF is positive definite, else the minimum-norm solution through an
    eigendecomposition (dependent constraint vectors make H singular).
    """
    _free_system(H, q, alpha, upper, p, free, nf, work_M, work_y)
    rhs = work_y[:nf].copy()
    if _cholesky_solve(work_M, work_y, nf):
        return
    Hf = np.empty((nf, nf))
    for a in range(nf):
        for b in range(nf):
            Hf[a, b] = H[free[a], free[b]]
    w, Q = np.linalg.eigh(Hf)
    cut = 1e-12 * max(abs(w[-1]), 1e-300)
    for a in range(nf):
        work_y[a] = 0.0
    for e in range(nf):
        if w[e] > cut:
            c = 0.0
            for a in range(nf):
                c += Q[a, e] * rhs[a]
            c /= w[e]
            for a in range(nf):
                work_y[a] += c * Q[a, e]


@njit(nogil=True, cache=True, inline="always")
def _cd_pass(H, upper, p, alpha, grad):
    """One pass of dual coordinate descent over the box QP's variables (exact minimisation
    in each, clipped to [0, upper]), keeping grad = H alpha - q; returns the largest
    projected-gradient violation seen at the start of each coordinate's step."""
    viol = 0.0
    for j in range(p):
        gj = grad[j]
        a = alpha[j]
        if a <= 0.0:
            v = -gj if gj < 0.0 else 0.0
        elif a >= upper:
            v = gj if gj > 0.0 else 0.0
        else:
            v = abs(gj)
        viol = max(viol, v)
        hjj = H[j, j]
        if hjj > 0.0:
            new = a - gj / hjj
        else:
            new = upper if gj < 0.0 else (0.0 if gj > 0.0 else a)
        if new < 0.0:
            new = 0.0
        elif new > upper:
            new = upper
        d = new - a
        if d != 0.0:
            alpha[j] = new
            for k in range(p):
                grad[k] += d * H[k, j]
    return viol


@njit(nogil=True, cache=True, inline="always")
def gram_rows(A, p, div, H):
    """H[s, u] = (A_s . A_u) / div for the first p rows of A (symmetric, float64)."""
    r = A.shape[1]
    for s in range(p):
        for u in range(s + 1):
            d = 0.0
            for c in range(r):
                d += A[s, c] * A[u, c]
            H[s, u] = d / div
            H[u, s] = H[s, u]


@njit(nogil=True, cache=True, inline="always")
def _transpose_rows(A, p, AT):
    """AT[c, s] = A[s, c] for the first p rows of A."""
    r = A.shape[1]
    for s in range(p):
        for c in range(r):
            AT[c, s] = A[s, c]


@njit(nogil=True, cache=True, inline="always")
def gram_upper(A, AT, p, H):
    """H[s, u] = A_s . A_u for u >= s (the upper triangle), from AT = A[:p].T (both
    C-contiguous). Built as rank-one row updates over c in 4-lane fused multiply-adds,
    contiguous in u, rather than p^2 / 2 dot products that are each a chain of dependent
    adds. Each row starts at the 4-block holding its diagonal, so a few entries left of
    the diagonal get values too: the lower triangle is workspace, never read."""
    r = A.shape[1]
    for s in range(p):
        u0 = s - s % 4
        p4 = p - (p - u0) % 4
        for u in range(u0, p):
            H[s, u] = 0.0
        r4 = r - r % 4
        for c in range(0, r4, 4):  # four columns per pass over the row of H
            a0 = np.float64(A[s, c])
            a1 = np.float64(A[s, c + 1])
            a2 = np.float64(A[s, c + 2])
            a3 = np.float64(A[s, c + 3])
            v0 = _v4_splat(a0)
            v1 = _v4_splat(a1)
            v2 = _v4_splat(a2)
            v3 = _v4_splat(a3)
            for u in range(u0, p4, 4):
                h = _v4_fma(v0, _v4_load(AT, c, u), _v4_load(H, s, u))
                h = _v4_fma(v1, _v4_load(AT, c + 1, u), h)
                h = _v4_fma(v2, _v4_load(AT, c + 2, u), h)
                _v4_store(H, s, u, _v4_fma(v3, _v4_load(AT, c + 3, u), h))
            for u in range(p4, p):
                H[s, u] = _fma(a3, AT[c + 3, u], _fma(a2, AT[c + 2, u], _fma(
                    a1, AT[c + 1, u], _fma(a0, AT[c, u], H[s, u]))))
        for c in range(r4, r):
            a = np.float64(A[s, c])
            av = _v4_splat(a)
            for u in range(u0, p4, 4):
                _v4_store(H, s, u, _v4_fma(av, _v4_load(AT, c, u), _v4_load(H, s, u)))
            for u in range(p4, p):
                H[s, u] = _fma(a, AT[c, u], H[s, u])


@njit(nogil=True, cache=True, inline="always")
def _cholesky_upper_solve(M, y, p):
    """Solve M x = y in place (y <- x) for SPD M[:p, :p] given by its upper triangle (C-
    contiguous), overwritten by U with M = U'U. Right-looking: every update is a row axpy
    in 4-lane fused multiply-adds (from the 4-block holding the diagonal; the lower
    triangle is workspace). Returns False when M is not numerically positive definite."""
    for j in range(p):
        s = M[j, j]
        if not s > 0.0:
            return False
        d = np.sqrt(s)
        M[j, j] = d
        for k in range(j + 1, p):
            M[j, k] /= d
        for i in range(j + 1, p):
            f = -M[j, i]
            fv = _v4_splat(f)
            k0 = i - i % 4
            p4 = p - (p - k0) % 4
            for k in range(k0, p4, 4):
                _v4_store(M, i, k, _v4_fma(fv, _v4_load(M, j, k), _v4_load(M, i, k)))
            for k in range(p4, p):
                M[i, k] = _fma(f, M[j, k], M[i, k])
    for i in range(p):  # U' z = y
        zi = y[i] / M[i, i]
        y[i] = zi
        for k in range(i + 1, p):
            y[k] -= M[i, k] * zi
    for i in range(p - 1, -1, -1):  # U x = z
        s = y[i]
        for k in range(i + 1, p):
            s -= M[i, k] * y[k]
        y[i] = s / M[i, i]
    return True


@njit(nogil=True, cache=True)
def box_qp(H, q, upper, p, alpha, grad, work_M, work_y, free):
    """Exact solution of  min 1/2 a'Ha - q'a  s.t. 0 <= a <= upper  (p small, H PSD).

    Rounds of dual coordinate descent alternate with active-set steps: the minimiser over
    the current free variables (Cholesky, or a minimum-norm eigen-solve when H is singular)
    is taken up to the first bound it would cross, and kept only if it does not increase the
    QP objective. Ends when the projected gradient vanishes to rounding. ``upper`` may be inf.

    alpha : (p,) OUT, grad : (p,) workspace (H a - q), work_M (p, p), work_y (p,), free (p,).
    """
    scale = 1.0
    hmax = 0.0
    for j in range(p):
        alpha[j] = 0.0
        grad[j] = -q[j]
        scale = max(scale, abs(q[j]))
        hmax = max(hmax, abs(H[j, j]))
    tol = 1e-15 * scale
    # Phase 1: coordinate descent to the tolerance, then an exact polish of the free set.
    # This settles every well-conditioned dual; degenerate ones (nearly dependent constraint
    # vectors, H singular) go on to phase 2.
    viol = 0.0
    for _ in range(_QP_MAX_ITER):
        viol = _cd_pass(H, upper, p, alpha, grad)
        if viol <= tol:
            break
    if viol <= tol:
        nf = _free_set(alpha, upper, p, free)
        if nf == 0:
            return
        _free_system(H, q, alpha, upper, p, free, nf, work_M, work_y)
        if _cholesky_solve(work_M, work_y, nf):
            inside = True
            for a in range(nf):
                if not (0.0 <= work_y[a] <= upper):
                    inside = False
            if inside:
                for a in range(nf):
                    alpha[free[a]] = work_y[a]
        return
    # Phase 2: rounds of coordinate descent and active-set steps.
    for _ in range(_QP_ROUNDS):
        viol = 0.0
        for _ in range(_QP_CD_ITER):
            viol = _cd_pass(H, upper, p, alpha, grad)
            if viol <= tol:
                break
        # active-set step on the free variables
        nf = _free_set(alpha, upper, p, free)
        if nf == 0:
            if viol <= tol:
                return
            continue
        _free_solve(H, q, alpha, upper, p, free, nf, work_M, work_y)
        t = 1.0  # ratio test: stay in the box
        for a in range(nf):
            d = work_y[a] - alpha[free[a]]
            if d < 0.0 and alpha[free[a]] + t * d < 0.0:
                t = alpha[free[a]] / -d
            elif d > 0.0 and alpha[free[a]] + t * d > upper:
                t = (upper - alpha[free[a]]) / d
        before = _qp_value(H, q, alpha, p)
        for a in range(nf):  # stash the current point in grad's tail? use work_M row 0
            work_M[0, a] = alpha[free[a]]
        for a in range(nf):
            ja = free[a]
            val = alpha[ja] + t * (work_y[a] - alpha[ja])
            alpha[ja] = min(max(val, 0.0), upper)
        if _qp_value(H, q, alpha, p) > before:
            for a in range(nf):  # no progress: undo
                alpha[free[a]] = work_M[0, a]
        viol = _qp_refresh(H, q, alpha, p, grad, upper)
        if viol <= tol:
            return


@njit(nogil=True, cache=True)
def update_column(i, indptr, indices, data, diag, cptr, cidx, csgn, V, loss, gamma, bound,
                  out, g, A, H, M, qv, alpha, grad, wy, free):
    """Exact minimiser of the column-i subproblem given the other columns of V.

    out : (r,) float64 OUT. Returns nothing; V is not modified.
    Workspaces: g (r,), A (pmax, r), H, M (max(pmax, r), pmax), qv, alpha, grad, wy
    (pmax,), free (pmax,) int64.
    """
    r = V.shape[1]
    Lii = diag[i]
    _gather(i, indptr, indices, data, V, g)
    p = cptr[i + 1] - cptr[i]
    if p == 0 or loss == 3:
        if loss == 3:
            # linear: v~ = (gamma/2 sum_j a_j - g) / L_ii
            for c in range(r):
                out[c] = -g[c]
            for s in range(p):
                k = cidx[cptr[i] + s]
                t = csgn[cptr[i] + s]
                for c in range(r):
                    out[c] += 0.5 * gamma * t * V[k, c]
            nrm = 0.0
            for c in range(r):
                out[c] /= Lii
                nrm += out[c] * out[c]
            nrm = np.sqrt(nrm)
            if nrm > bound:
                f = bound / nrm
                for c in range(r):
                    out[c] *= f
        else:
            for c in range(r):
                out[c] = -g[c] / Lii
        return
    # A = [t_j v_j]
    for s in range(p):
        k = cidx[cptr[i] + s]
        t = csgn[cptr[i] + s]
        for c in range(r):
            A[s, c] = t * V[k, c]
    if loss == 2:
        # square: v = (b - A (L/gamma I + A'A)^{-1} A'b) / L,  b = gamma A 1 - g
        # (loops over s outside: the same running sum per c, one vectorisable pass per s)
        for c in range(r):
            out[c] = -g[c]
        for s in range(p):
            for c in range(r):
                out[c] += gamma * A[s, c]
        _transpose_rows(A, p, H)
        gram_upper(A, H, p, M)
        for s in range(p):
            qv[s] = _dot_row_vec(A, s, out, r, _madd)
            M[s, s] += Lii / gamma
        _cholesky_upper_solve(M, qv, p)
        for s in range(p):
            qs = qv[s]
            for c in range(r):
                out[c] -= A[s, c] * qs
        for c in range(r):
            out[c] = out[c] / Lii
        return
    # hinge (0) / squared hinge (1): dual box QP
    _transpose_rows(A, p, M)
    gram_upper(A, M, p, H)
    div = 2.0 * Lii
    for s in range(p):
        for u in range(s, p):
            H[s, u] = H[s, u] / div
            H[u, s] = H[s, u]
    for s in range(p):
        ag = 0.0
        for c in range(r):
            ag += A[s, c] * g[c]
        qv[s] = 1.0 + ag / Lii
        if loss == 1:
            H[s, s] += 1.0 / (2.0 * gamma)
    upper = gamma if loss == 0 else np.inf
    box_qp(H, qv, upper, p, alpha, grad, M, wy, free)
    for c in range(r):
        out[c] = -g[c]
    for s in range(p):
        ha = 0.5 * alpha[s]
        for c in range(r):
            out[c] += ha * A[s, c]
    for c in range(r):
        out[c] = out[c] / Lii
    # Safeguard: keep the current column if a degenerate dual left the new one clearly worse,
    # so that a sweep never increases the objective. Not at rounding level: phi is flat at
    # its minimum (an error of 1e-8 in v moves phi by ~1e-16), so a tighter test would
    # freeze rows short of their minimiser.
    phi_old = _column_phi_row(V, i, g, A, p, Lii, gamma, loss)
    if _column_phi(out, g, A, p, Lii, gamma, loss) > phi_old + 1e-12 * max(1.0, abs(phi_old)):
        for c in range(r):
            out[c] = V[i, c]


@njit(nogil=True, cache=True)
def _column_phi(v, g, A, p, Lii, gamma, loss):
    """phi(v) = L_ii ||v||^2 + 2 g'v + gamma sum_j loss(a_j'v) for a float64 vector v."""
    r = v.shape[0]
    val = 0.0
    for c in range(r):
        val += v[c] * (Lii * v[c] + 2.0 * g[c])
    for s in range(p):
        z = 0.0
        for c in range(r):
            z += A[s, c] * v[c]
        val += gamma * loss_value(z, loss)
    return val


@njit(nogil=True, cache=True)
def _column_phi_row(V, i, g, A, p, Lii, gamma, loss):
    """phi at the current row i of V."""
    r = V.shape[1]
    val = 0.0
    for c in range(r):
        x = np.float64(V[i, c])
        val += x * (Lii * x + 2.0 * g[c])
    for s in range(p):
        z = 0.0
        for c in range(r):
            z += A[s, c] * V[i, c]
        val += gamma * loss_value(z, loss)
    return val


@njit(nogil=True, cache=True)
def sweep_rows(rows, start, stop, base, indptr, indices, data, diag, cptr, cidx, csgn, V, loss,
               gamma, bound, pmax, delta2, norm2):
    """Update rows[start:stop] one after the other (Gauss-Seidel, in that order), in place.

    The rows are one *unit* of a sweep step (see ``_plan``): ascending, updated sequentially,
    each from the current values of all other rows.

    V : (n, r) IN/OUT. delta2, norm2 : (n,) float64 OUT at those rows. The change
    ||v_new - v_old||^2 and ||v_new||^2 are accumulated per column over a *run* -- the
    consecutive rows of the unit that lie in one chunk of SUM_BLOCK row indices -- and the
    run's totals are stored at its last row, zeros at its other rows. Per-column sums are
    element-wise (no r-long add chain per row); runs are fixed by the plan, so the sums are
    the same on any thread count and any executor whose row blocks start at multiples of
    SUM_BLOCK. ``base`` is the global index of local row 0 (a Dask block's offset).

    Unconstrained rows of the non-linear losses take the closed form v = -g / L_ii inline;
    it is the same arithmetic as ``update_column`` (bitwise), without the call. The other
    rows go through ``_update_row``, out of the hot loop.
    """
    r = V.shape[1]
    pm = max(pmax, 1)
    out = np.empty(r)
    g = np.empty(r)
    A = np.empty((pm, r))
    H = np.empty((max(pm, r), pm))  # also A[:p].T for the square loss
    M = np.empty((max(pm, r), pm))  # also A[:p].T for the hinge losses
    qv = np.empty(pm)
    alpha = np.empty(pm)
    grad = np.empty(pm)
    wy = np.empty(pm)
    free = np.empty(pm, np.int64)
    dacc = np.zeros(r)
    nacc = np.zeros(r)
    for q in range(start, stop):
        i = rows[q]
        if loss == 3 or cptr[i + 1] != cptr[i]:
            _update_row(i, indptr, indices, data, diag, cptr, cidx, csgn, V, loss, gamma, bound,
                        out, g, A, H, M, qv, alpha, grad, wy, free, dacc, nacc)
        else:
            _gather(i, indptr, indices, data, V, g)
            Lii = diag[i]
            for c in range(r):
                old = np.float64(V[i, c])
                V[i, c] = -g[c] / Lii  # rounds to V's dtype
                new = np.float64(V[i, c])
                dacc[c] += (new - old) * (new - old)
                nacc[c] += new * new
        if q + 1 == stop or (rows[q + 1] + base) // SUM_BLOCK != (i + base) // SUM_BLOCK:
            d2 = 0.0
            n2 = 0.0
            for c in range(r):
                d2 += dacc[c]
                n2 += nacc[c]
                dacc[c] = 0.0
                nacc[c] = 0.0
            delta2[i] = d2
            norm2[i] = n2
        else:
            delta2[i] = 0.0
            norm2[i] = 0.0


@njit(nogil=True, cache=True)
def _update_row(i, indptr, indices, data, diag, cptr, cidx, csgn, V, loss, gamma, bound, out, g,
                A, H, M, qv, alpha, grad, wy, free, dacc, nacc):
    """v_i <- update_column(i); dacc += (v_new - v_old)^2, nacc += v_new^2 per column."""
    update_column(i, indptr, indices, data, diag, cptr, cidx, csgn, V, loss, gamma, bound,
                  out, g, A, H, M, qv, alpha, grad, wy, free)
    for c in range(V.shape[1]):
        old = np.float64(V[i, c])
        V[i, c] = out[c]  # rounds to V's dtype
        new = np.float64(V[i, c])
        dacc[c] += (new - old) * (new - old)
        nacc[c] += new * new


@njit(nogil=True, cache=True, parallel=True)
def sweep_units(rows, ptr, base, indptr, indices, data, diag, cptr, cidx, csgn, V, loss, gamma,
                bound, pmax, delta2, norm2):
    """One sweep step: units ``rows[ptr[u]:ptr[u + 1]]`` spread over numba's threads.

    The units of a step are mutually independent (no row of one is coupled to a row of
    another), so they may run in any order or concurrently; each is sequential inside."""
    for u in prange(ptr.shape[0] - 1):
        sweep_rows(rows, ptr[u], ptr[u + 1], base, indptr, indices, data, diag, cptr, cidx,
                   csgn, V, loss, gamma, bound, pmax, delta2, norm2)


@njit(nogil=True, cache=True)
def sweep_units_serial(rows, ptr, base, indptr, indices, data, diag, cptr, cidx, csgn, V, loss,
                       gamma, bound, pmax, delta2, norm2):
    """The same step on the calling thread: identical results (the units are independent)."""
    for u in range(ptr.shape[0] - 1):
        sweep_rows(rows, ptr[u], ptr[u + 1], base, indptr, indices, data, diag, cptr, cidx,
                   csgn, V, loss, gamma, bound, pmax, delta2, norm2)


@njit(nogil=True, cache=True, inline="always")
def _add_row_products(i, indptr, indices, data, X, y, r, sign, madd):
    """y[q] += sign * sum_p data[p] X[indices[p], q] over row i of the CSR, in p order,
    in float64 (``sign`` +1 or -1: ``y + (-w) x`` rounds exactly as ``y - w x``), each
    term added by ``madd`` (``_madd`` or ``_fmadd``).

    Four neighbours per pass over y: ``(((y + w0 x0) + w1 x1) + w2 x2) + w3 x3`` is the
    same sequence of roundings as four single passes, so the sums are bitwise those of the
    plain loop, with a quarter of the loads and stores of y (KL-ADMM's half-step on
    adult-a1a, r = 103: 3.34 -> 2.90 ms; bench/RESULTS.md)."""
    _add_range_products(indptr[i], indptr[i + 1], indices, data, X, y, r, sign, madd)


@njit(nogil=True, cache=True, inline="always")
def _add_range_products(p, end, indices, data, X, y, r, sign, madd):
    """:func:`_add_row_products` over the CSR entries p..end (part of a row). Two adjacent
    ranges in turn add exactly as the one range over both: the four-neighbour passes
    round as single ones."""
    while p + 3 < end:
        k0 = indices[p]
        k1 = indices[p + 1]
        k2 = indices[p + 2]
        k3 = indices[p + 3]
        w0 = sign * np.float64(data[p])
        w1 = sign * np.float64(data[p + 1])
        w2 = sign * np.float64(data[p + 2])
        w3 = sign * np.float64(data[p + 3])
        for q in range(r):
            y[q] = madd(w3, np.float64(X[k3, q]), madd(w2, np.float64(X[k2, q]), madd(
                w1, np.float64(X[k1, q]), madd(w0, np.float64(X[k0, q]), y[q]))))
        p += 4
    while p < end:
        k = indices[p]
        w = sign * np.float64(data[p])
        for q in range(r):
            y[q] = madd(w, np.float64(X[k, q]), y[q])
        p += 1


@njit(nogil=True, cache=True, inline="always")
def _dot_rows(A, i, B, j, r, madd):
    """sum_q A[i, q] B[j, q] in float64 with four interleaved partial sums (lanes q mod 4,
    combined (0+1)+(2+3), then the tail): independent chains the CPU can overlap, where
    one running sum waits on every add. Fixed order, so every caller agrees bit for bit."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    q4 = r - r % 4
    for q in range(0, q4, 4):
        s0 = madd(np.float64(A[i, q]), np.float64(B[j, q]), s0)
        s1 = madd(np.float64(A[i, q + 1]), np.float64(B[j, q + 1]), s1)
        s2 = madd(np.float64(A[i, q + 2]), np.float64(B[j, q + 2]), s2)
        s3 = madd(np.float64(A[i, q + 3]), np.float64(B[j, q + 3]), s3)
    acc = (s0 + s1) + (s2 + s3)
    for q in range(q4, r):
        acc = madd(np.float64(A[i, q]), np.float64(B[j, q]), acc)
    return acc


@njit(nogil=True, cache=True, inline="always")
def _dot_row_vec(A, i, y, r, madd):
    """sum_q A[i, q] y[q], in the lane order of ``_dot_rows``. Written out rather than
    ``_dot_rows`` on ``y.reshape((1, r))``: the view costs 13% of a KL-ADMM half-step on
    iris (r = 31)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    q4 = r - r % 4
    for q in range(0, q4, 4):
        s0 = madd(np.float64(A[i, q]), y[q], s0)
        s1 = madd(np.float64(A[i, q + 1]), y[q + 1], s1)
        s2 = madd(np.float64(A[i, q + 2]), y[q + 2], s2)
        s3 = madd(np.float64(A[i, q + 3]), y[q + 3], s3)
    acc = (s0 + s1) + (s2 + s3)
    for q in range(q4, r):
        acc = madd(np.float64(A[i, q]), y[q], acc)
    return acc


# KL-ADMM's dots in explicit 4-lane vectors. ``_dot_rows``'s four lanes (q mod 4) are
# exactly the lanes of one AVX2 register, but LLVM keeps them in four scalar chains (it may
# not reassociate the sums): 4 FMAs and 8 loads per step where one vector FMA and two vector
# loads do. ``_F64x4`` is a numba type whose value is an LLVM <4 x double>; the intrinsics
# below load, fuse and combine it. The same operations on the same values in the same
# order, so the sums are bitwise ``_dot_rows(..., _fmadd)``'s (tests/test_row_products.py).
# With the Woodbury rows read in place, the harness's KL-ADMM fits are 1.09-1.30x faster with
# the same factors (bench/RESULTS.md, "KL-ADMM's dots in vector registers").
class _F64x4Type(types.Type):
    def __init__(self):
        super().__init__(name="npkl_f64x4")


_f64x4 = _F64x4Type()


@register_model(_F64x4Type)
class _F64x4Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        from llvmlite import ir

        super().__init__(dmm, fe_type, ir.VectorType(ir.DoubleType(), 4))


def _v4_ok(A, ndim):
    """A float32/float64 array of ``ndim`` dimensions."""
    return (isinstance(A, types.Array) and A.ndim == ndim
            and A.dtype in (types.float32, types.float64))


def _v4_addressing(context, builder, sig, args, n_index_end):
    """The array args[0]'s element indices args[1:n_index_end] cast to intp, and a function
    from an index list to that element's pointer (any layout, no bounds check): the common
    start of the vector loads and stores."""
    from numba.core import cgutils

    arrty = sig.args[0]
    ary = context.make_array(arrty)(context, builder, args[0])
    idx = [context.cast(builder, a, t, types.intp)
           for a, t in zip(args[1:n_index_end], sig.args[1:n_index_end])]
    shape = cgutils.unpack_tuple(builder, ary.shape)
    strides = cgutils.unpack_tuple(builder, ary.strides)

    def pointer(index):
        return cgutils.get_item_pointer2(context, builder, ary.data, shape, strides,
                                         arrty.layout, index, wraparound=False,
                                         boundscheck=False)

    return idx, pointer


def _v4_load_codegen(context, builder, sig, args):
    """Elements [idx..., q:q + 4] of the array args[0] as <4 x double> (float32 widened
    lanewise, as np.float64(x) does): one vector load where the array is C-contiguous,
    four element loads otherwise (any strides)."""
    from llvmlite import ir

    arrty = sig.args[0]
    idx, pointer = _v4_addressing(context, builder, sig, args, len(args))
    f32 = arrty.dtype == types.float32
    elt = ir.FloatType() if f32 else ir.DoubleType()
    v4 = ir.VectorType(ir.DoubleType(), 4)
    if arrty.layout == "C":
        v = builder.load(builder.bitcast(pointer(idx), ir.VectorType(elt, 4).as_pointer()),
                         align=arrty.dtype.bitwidth // 8)
        return builder.fpext(v, v4) if f32 else v
    v = ir.Constant(v4, ir.Undefined)
    for lane in range(4):
        q = builder.add(idx[-1], ir.Constant(idx[-1].type, lane))
        x = builder.load(pointer(idx[:-1] + [q]))
        v = builder.insert_element(v, builder.fpext(x, ir.DoubleType()) if f32 else x,
                                   ir.Constant(ir.IntType(32), lane))
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
        from llvmlite import ir
        from numba.core import cgutils

        vt = ir.VectorType(ir.DoubleType(), 4)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                            "llvm.fma.v4f64")
        return builder.call(fn, list(args))

    return _f64x4(_f64x4, _f64x4, _f64x4), codegen


@intrinsic
def _v4_zero(typingctx):
    """The vector (+0.0, +0.0, +0.0, +0.0)."""
    def codegen(context, builder, sig, args):
        from llvmlite import ir

        return ir.Constant(ir.VectorType(ir.DoubleType(), 4), [0.0] * 4)

    return _f64x4(), codegen


@intrinsic
def _v4_pair_sum(typingctx, v):
    """(v0 + v1) + (v2 + v3), ``_dot_rows``'s combination of its lanes."""
    if v != _f64x4:
        return None

    def codegen(context, builder, sig, args):
        from llvmlite import ir

        e = [builder.extract_element(args[0], ir.Constant(ir.IntType(32), k))
             for k in range(4)]
        return builder.fadd(builder.fadd(e[0], e[1]), builder.fadd(e[2], e[3]))

    return types.float64(_f64x4), codegen


def _v4_store_codegen(context, builder, sig, args):
    """Store the <4 x double> args[-1] at elements [idx..., q:q + 4] of the array args[0]
    (rounded lanewise to float32 for a float32 array, as a scalar assignment rounds): one
    vector store where the array is C-contiguous, four element stores otherwise."""
    from llvmlite import ir

    arrty = sig.args[0]
    idx, pointer = _v4_addressing(context, builder, sig, args, len(args) - 1)
    f32 = arrty.dtype == types.float32
    elt = ir.FloatType() if f32 else ir.DoubleType()
    v = args[-1]
    if f32:
        v = builder.fptrunc(v, ir.VectorType(elt, 4))
    if arrty.layout == "C":
        builder.store(v, builder.bitcast(pointer(idx), ir.VectorType(elt, 4).as_pointer()),
                      align=arrty.dtype.bitwidth // 8)
    else:
        for lane in range(4):
            q = builder.add(idx[-1], ir.Constant(idx[-1].type, lane))
            builder.store(builder.extract_element(v, ir.Constant(ir.IntType(32), lane)),
                          pointer(idx[:-1] + [q]))
    return context.get_dummy_value()


@intrinsic
def _v4_store(typingctx, A, i, q, v):
    """A[i, q:q + 4] = v (q + 4 <= A.shape[1]; float32 A: each lane rounded)."""
    if not (_v4_ok(A, 2) and isinstance(i, types.Integer) and isinstance(q, types.Integer)
            and v == _f64x4):
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
        from llvmlite import ir

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


@njit(nogil=True, cache=True, inline="always")
def _dot_rows_fused(A, i, B, j, r):
    """``_dot_rows(A, i, B, j, r, _fmadd)`` with its 4 lanes in one vector register (the
    same sum, bit for bit). A and B: float32 / float64 arrays (a vector load where
    C-contiguous)."""
    acc = _v4_zero()
    q4 = r - r % 4
    for q in range(0, q4, 4):
        acc = _v4_fma(_v4_load(A, i, q), _v4_load(B, j, q), acc)
    s = _v4_pair_sum(acc)
    for q in range(q4, r):
        s = _fma(np.float64(A[i, q]), np.float64(B[j, q]), s)
    return s


@njit(nogil=True, cache=True, inline="always")
def _dot_row_vec_fused(A, i, y, r):
    """``_dot_row_vec(A, i, y, r, _fmadd)`` likewise (y: float64)."""
    acc = _v4_zero()
    q4 = r - r % 4
    for q in range(0, q4, 4):
        acc = _v4_fma(_v4_load(A, i, q), _v4_load1(y, q), acc)
    s = _v4_pair_sum(acc)
    for q in range(q4, r):
        s = _fma(np.float64(A[i, q]), y[q], s)
    return s


@njit(nogil=True, cache=True, inline="always")
def _add_row_products_fused(i, indptr, indices, data, X, y, r):
    """``_add_row_products(i, ..., X, y, r, 1.0, _fmadd)`` with y's columns in 4-lane vectors
    (y: float64, C-contiguous): each element gets the same fused multiply-adds in the same
    order, so y is bitwise the scalar form's. Written out because LLVM's own vectorisation
    of the scalar loop leaves up to 15 of r columns to a scalar tail at KL-ADMM's ranks."""
    q4 = r - r % 4
    p = indptr[i]
    end = indptr[i + 1]
    while p + 3 < end:
        k0 = indices[p]
        k1 = indices[p + 1]
        k2 = indices[p + 2]
        k3 = indices[p + 3]
        w0 = np.float64(data[p])
        w1 = np.float64(data[p + 1])
        w2 = np.float64(data[p + 2])
        w3 = np.float64(data[p + 3])
        s0 = _v4_splat(w0)
        s1 = _v4_splat(w1)
        s2 = _v4_splat(w2)
        s3 = _v4_splat(w3)
        for q in range(0, q4, 4):
            acc = _v4_fma(s0, _v4_load(X, k0, q), _v4_load1(y, q))
            acc = _v4_fma(s1, _v4_load(X, k1, q), acc)
            acc = _v4_fma(s2, _v4_load(X, k2, q), acc)
            _v4_store1(y, q, _v4_fma(s3, _v4_load(X, k3, q), acc))
        for q in range(q4, r):
            y[q] = _fma(w3, np.float64(X[k3, q]), _fma(w2, np.float64(X[k2, q]), _fma(
                w1, np.float64(X[k1, q]), _fma(w0, np.float64(X[k0, q]), y[q]))))
        p += 4
    while p < end:
        k = indices[p]
        w = np.float64(data[p])
        sw = _v4_splat(w)
        for q in range(0, q4, 4):
            _v4_store1(y, q, _v4_fma(sw, _v4_load(X, k, q), _v4_load1(y, q)))
        for q in range(q4, r):
            y[q] = _fma(w, np.float64(X[k, q]), y[q])
        p += 1


@njit(nogil=True, cache=True, inline="always")
def _dot_row_vec_plain(A, i, y, r):
    """``_dot_row_vec`` with two roundings per term (the BCD solvers' arithmetic)."""
    return _dot_row_vec(A, i, y, r, _madd)


@njit(nogil=True, cache=True, inline="always")
def _smooth_rows(start, stop, indptr, indices, data, diag, V, out, y, madd, dot):
    """out[i] = v_i' (L V)_i for rows start..stop-1 (y: (r,) scratch): the product's terms
    added by ``madd``, the reduction by ``dot(V, i, y, r)`` (``_dot_row_vec_plain``, or
    ``_dot_row_vec_fused`` for KL-ADMM, as ``admm_rows`` forms its smooth term)."""
    r = V.shape[1]
    for i in range(start, stop):
        d = np.float64(diag[i])
        for c in range(r):
            y[c] = d * np.float64(V[i, c])
        _add_row_products(i, indptr, indices, data, V, y, r, 1.0, madd)
        out[i] = dot(V, i, y, r)


@njit(nogil=True, cache=True, parallel=True)
def smooth_terms(indptr, indices, data, diag, V, out):
    """out[i] = v_i' (L V)_i, so that tr(V' L V) = out.sum().  out : (n,) float64 OUT.

    y = (L V)_i is formed first, row-wise as in a sparse product (axpys over the neighbours),
    then one r-long reduction v_i'y per row (``_dot_row_vec``) -- not one per edge.
    Covers the rows of ``out`` (V may hold further rows: a block's halo)."""
    n = out.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    for ch in prange(n_chunks):
        _smooth_rows(ch * CHUNK, min((ch + 1) * CHUNK, n), indptr, indices, data, diag, V,
                     out, np.empty(V.shape[1]), _madd, _dot_row_vec_plain)


@njit(nogil=True, cache=True, parallel=True)
def admm_smooth_terms(indptr, indices, data, diag, V, out):
    """``smooth_terms`` in KL-ADMM's arithmetic (fused multiply-adds, as ``admm_rows``)."""
    n = out.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    for ch in prange(n_chunks):
        _smooth_rows(ch * CHUNK, min((ch + 1) * CHUNK, n), indptr, indices, data, diag, V,
                     out, np.empty(V.shape[1]), _fmadd, _dot_row_vec_fused)


@njit(nogil=True, cache=True)
def loss_value(z, loss):
    """loss(z) for z = T_ij v_i'v_j."""
    if loss == 0:
        return max(1.0 - z, 0.0)
    if loss == 1:
        h = max(1.0 - z, 0.0)
        return h * h
    if loss == 2:
        return (1.0 - z) * (1.0 - z)
    return -z


@njit(nogil=True, cache=True, parallel=True)
def pair_terms(pi, pj, pt, V, loss, out):
    """out[k] = loss(t_k v_i'v_j) for each constraint pair k.  out : (m,) float64 OUT."""
    m = pi.shape[0]
    r = V.shape[1]
    for k in prange(m):
        d = 0.0
        for c in range(r):
            d += np.float64(V[pi[k], c]) * np.float64(V[pj[k], c])
        out[k] = loss_value(pt[k] * d, loss)


@njit(nogil=True, cache=True)
def greedy_colouring(n, indptr, indices, cptr, cidx, active, colour):
    """Greedy proper colouring of the subgraph induced by the ``active`` vertices of the union
    of two symmetric graphs (CSR ``indptr/indices`` and ``cptr/cidx``), in index order.

    active : (n,) bool. colour : (n,) int64 OUT (-1 at inactive vertices). Returns the number
    of colours.
    """
    forbidden = np.full(n + 1, -1, np.int64)
    n_colours = 0
    for i in range(n):
        colour[i] = -1
        if not active[i]:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            if k < i and active[k]:
                forbidden[colour[k]] = i
        for p in range(cptr[i], cptr[i + 1]):
            k = cidx[p]
            if k < i and active[k]:
                forbidden[colour[k]] = i
        c = 0
        while forbidden[c] == i:
            c += 1
        colour[i] = c
        if c + 1 > n_colours:
            n_colours = c + 1
    return n_colours


@njit(nogil=True, cache=True)
def _clashes(a, b, block):
    """Rows in two different blocks of the same parity: updated concurrently by a block step."""
    return block[a] != block[b] and (block[a] - block[b]) % 2 == 0


@njit(nogil=True, cache=True)
def block_deferral(n, indptr, indices, cptr, cidx, block, deferred):
    """Greedy vertex cover of the conflict edges (graph edges and constraint pairs) that join
    two different blocks of the same parity: for each such edge (i, k), i < k, in index order
    with neither end yet deferred, k is deferred.

    block : (n,) int64 block of each row. deferred : (n,) bool OUT. Returns the count.
    """
    count = 0
    for i in range(n):
        deferred[i] = False
    for i in range(n):
        if deferred[i]:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            if k > i and not deferred[k] and _clashes(i, k, block):
                deferred[k] = True
                count += 1
        for p in range(cptr[i], cptr[i + 1]):
            k = cidx[p]
            if k > i and not deferred[k] and _clashes(i, k, block):
                deferred[k] = True
                count += 1
    return count


# --------------------------------------------------------------------------------------
# KL-ADMM (kl-admm-ijcai2013, Alg. 1). Targets T_ij = 1 (must-link), 0 (cannot-link) and,
# with the diagonal protocol, T_ii = 1. With the sum over ordered pairs of T and the
# augmented Lagrangian of eq. (6), setting the gradients (9)-(10) to zero gives
#   (rho I + gamma sum_{j in T_i} u_j u_j') v_i = gamma sum_j T_ij u_j - (L U)_i + rho u_i - Lam_i
#   (rho I + gamma sum_{j in T_i} v_j v_j') u_i = gamma sum_j T_ij v_j - (L V)_i + rho v_i + Lam_i
# (the paper's d_i writes v_i inside the sum: a typo; the derivative has v_j). Woodbury with
# W = [x_j] (r x p):  (rho I + gamma W W')^{-1} c = (c - W (rho/gamma I + W'W)^{-1} W'c) / rho.
# Every row depends only on the other factor, so a half-step is embarrassingly parallel.
# --------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def admm_rows(start, stop, indptr, indices, data, diag, cptr, cidx, csgn, diagonal, X, Lam,
              lam_sign, rho, gamma, pmax, out, sm, nrm):
    """Half-step of KL-ADMM for rows start..stop-1.

    X : (n, r) IN, the other factor (U for the V-step, V^{k+1} for the U-step).
    nrm : (n,) float64 IN, ||x_k||^2 by ``admm_row_norms`` for every row k the step reads
        (the diagonal of each row's Woodbury matrix: formed once per row of X rather than
        once for every constraint that reads it; the same value, so bitwise the same).
    Lam : (n, r) IN. lam_sign : -1 for the V-step, +1 for the U-step.
    out : (n, r) OUT at those rows.
    sm : (n,) float64 OUT at those rows, or length 0 (not wanted): x_i' (L X)_i, the row's
        term of tr(X' L X) with the arithmetic of ``admm_smooth_terms`` (so the U-step, whose X is
        the new V, hands the objective its smooth term for free).
    """
    r = X.shape[1]
    q4 = r - r % 4  # columns 0..q4-1 in 4-lane vectors, the rest one by one: every element
    # gets the same operations in the same order either way (bitwise the scalar loops)
    pm = pmax + 1
    want_sm = sm.shape[0] > 0
    c = np.empty(r)
    y = np.empty(r)
    M = np.empty((pm, pm))
    z = np.empty(pm)
    rows = np.empty(pm, np.int64)
    v_rho = _v4_splat(np.float64(rho))
    v_sign = _v4_splat(np.float64(lam_sign))
    v_gamma = _v4_splat(np.float64(gamma))
    for i in range(start, stop):
        # y = (L X)_i, formed as in admm_smooth_terms; then
        # c = rho x_i + lam_sign Lam_i - (L X)_i + gamma sum_j T_ij x_j
        dii = np.float64(diag[i])
        v_d = _v4_splat(dii)
        for q in range(0, q4, 4):
            _v4_store1(y, q, _v4_mul(v_d, _v4_load(X, i, q)))
        for q in range(q4, r):
            y[q] = dii * np.float64(X[i, q])
        _add_row_products_fused(i, indptr, indices, data, X, y, r)
        if want_sm:
            sm[i] = _dot_row_vec_fused(X, i, y, r)
        for q in range(0, q4, 4):
            _v4_store1(c, q, _v4_sub(_v4_add(_v4_mul(v_rho, _v4_load(X, i, q)),
                                             _v4_mul(v_sign, _v4_load(Lam, i, q))),
                                     _v4_load1(y, q)))
        for q in range(q4, r):
            c[q] = rho * np.float64(X[i, q]) + lam_sign * np.float64(Lam[i, q]) - y[q]
        p_i = 0
        for s in range(cptr[i], cptr[i + 1]):
            k = cidx[s]
            rows[p_i] = k
            if csgn[s] > 0:  # must-link target 1; cannot-link target 0 adds nothing
                for q in range(0, q4, 4):
                    _v4_store1(c, q, _v4_add(_v4_load1(c, q), _v4_mul(v_gamma,
                                                                      _v4_load(X, k, q))))
                for q in range(q4, r):
                    c[q] += gamma * X[k, q]
            p_i += 1
        if diagonal:
            rows[p_i] = i
            for q in range(0, q4, 4):
                _v4_store1(c, q, _v4_add(_v4_load1(c, q), _v4_mul(v_gamma, _v4_load(X, i, q))))
            for q in range(q4, r):
                c[q] += gamma * X[i, q]
            p_i += 1
        if p_i == 0:
            for q in range(0, q4, 4):
                _v4_store(out, i, q, _v4_div(_v4_load1(c, q), v_rho))
            for q in range(q4, r):
                out[i, q] = c[q] / rho
            continue
        # the Woodbury matrix W W' + rho / gamma I and W c, W's rows read in place in X
        for a in range(p_i):
            ka = rows[a]
            z[a] = _dot_row_vec_fused(X, ka, c, r)
            for b in range(a):
                d = _dot_rows_fused(X, ka, X, rows[b], r)
                M[a, b] = d
                M[b, a] = d
            M[a, a] = nrm[ka] + rho / gamma
        _cholesky_body(M, z, p_i, True)  # SPD: rho / gamma > 0 on the diagonal
        # c - sum_a z_a w_a, subtracted in a's order for each q (as one running sum per q),
        # one vectorisable pass over c per a
        for a in range(p_i):
            za = -z[a]
            ka = rows[a]
            v_z = _v4_splat(za)
            for q in range(0, q4, 4):
                _v4_store1(c, q, _v4_fma(_v4_load(X, ka, q), v_z, _v4_load1(c, q)))
            for q in range(q4, r):
                c[q] = _fma(np.float64(X[ka, q]), za, c[q])
        for q in range(0, q4, 4):
            _v4_store(out, i, q, _v4_div(_v4_load1(c, q), v_rho))
        for q in range(q4, r):
            out[i, q] = c[q] / rho


@njit(nogil=True, cache=True, parallel=True)
def admm_row_norms(X, nrm):
    """nrm[k] = ||x_k||^2 for every row of X (float64, ``_dot_rows_fused``): the
    ``nrm`` input of ``admm_rows``.  OUT (X.shape[0],)."""
    n, r = X.shape
    for k in prange(n):
        nrm[k] = _dot_rows_fused(X, k, X, k, r)


@njit(nogil=True, cache=True, parallel=True)
def admm_half_step(indptr, indices, data, diag, cptr, cidx, csgn, diagonal, X, Lam, lam_sign,
                   rho, gamma, pmax, out, sm, nrm):
    """All rows of one KL-ADMM half-step, chunks spread over numba's threads (``nrm`` as
    for ``admm_rows``)."""
    n = X.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    for ch in prange(n_chunks):
        admm_rows(ch * CHUNK, min((ch + 1) * CHUNK, n), indptr, indices, data, diag, cptr,
                  cidx, csgn, diagonal, X, Lam, lam_sign, rho, gamma, pmax, out, sm, nrm)


@njit(nogil=True, cache=True, inline="always")
def _admm_pair_loss(V, i, j, t, r):
    """(v_i'v_j - T)^2 with KL-ADMM's target T = 1 for t > 0 (must), 0 else (cannot)."""
    d = _dot_rows_fused(V, i, V, j, r)
    target = 1.0 if t > 0 else 0.0
    return (d - target) * (d - target)


@njit(nogil=True, cache=True, parallel=True)
def admm_pair_terms(pi, pj, pt, V, out):
    """out[k] = (v_i'v_j - T_k)^2 with KL-ADMM targets T = 1 (must) / 0 (cannot).  OUT (m,)."""
    m = pi.shape[0]
    r = V.shape[1]
    for k in prange(m):
        out[k] = _admm_pair_loss(V, pi[k], pj[k], pt[k], r)


@njit(nogil=True, cache=True, parallel=True)
def admm_diag_terms(V, out):
    """out[i] = (||v_i||^2 - 1)^2.  OUT (n,)."""
    n, r = V.shape
    for i in prange(n):
        d = 0.0
        for c in range(r):
            d += np.float64(V[i, c]) * np.float64(V[i, c])
        out[i] = (d - 1.0) * (d - 1.0)


@njit(nogil=True, cache=True)
def block_sums(x):
    """Per-SUM_BLOCK sums of x (plain left-to-right sums; numpy's are pairwise), in order:
    the partial sums every executor reduces with, so that totals agree bit for bit."""
    n = x.shape[0]
    out = np.empty((n + SUM_BLOCK - 1) // SUM_BLOCK)
    for b in range(out.shape[0]):
        part = 0.0
        for i in range(b * SUM_BLOCK, min((b + 1) * SUM_BLOCK, n)):
            part += x[i]
        out[b] = part
    return out


@njit(nogil=True, cache=True)
def row_sq_dist(A, B, out):
    """out[i] = ||a_i - b_i||^2 in float64, left to right (as ``admm_run``).  OUT (n,)."""
    for i in range(out.shape[0]):
        acc = 0.0
        for q in range(A.shape[1]):
            d = np.float64(A[i, q]) - np.float64(B[i, q])
            acc += d * d
        out[i] = acc


@njit(nogil=True, cache=True)
def row_sq(A, out):
    """out[i] = ||a_i||^2 in float64, left to right (as ``admm_run``).  OUT (n,)."""
    for i in range(out.shape[0]):
        acc = 0.0
        for q in range(A.shape[1]):
            a = np.float64(A[i, q])
            acc += a * a
        out[i] = acc


@njit(nogil=True, cache=True)
def _block_total(x, n):
    """sum(x[:n]) as the executors reduce it: ``block_sums`` added in order."""
    total = 0.0
    for part in block_sums(x[:n]):
        total += part
    return total


def admm_parts(indptr, cptr, diagonal, r, n_parts):
    """Row boundaries (int64, ``n_parts`` + 1 of them at most, 0 first and n last) that cut
    KL-ADMM's rows into ``n_parts`` runs of about equal cost: a row's half-step costs about
    r (its graph degree + its Woodbury rows p (p + 3) / 2 + 4) multiply-adds, p its
    constraints (+ 1 with diagonal targets). Chunks of a fixed row count leave a thread idle
    when their count is odd or their rows' degrees differ (adult: 5 chunks of 512 rows on 2
    threads ran 1.27x faster than one thread). Runs of no rows are dropped."""
    n = indptr.shape[0] - 1
    p = np.diff(cptr).astype(np.float64) + (1.0 if diagonal else 0.0)
    cost = (np.diff(indptr) + p * (p + 3.0) / 2.0 + 4.0) * max(int(r), 1)
    cum = np.concatenate(([0.0], np.cumsum(cost)))
    k = max(int(n_parts), 1)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, k) / k, side="left")
    return np.unique(np.concatenate(([0], cuts, [n])).astype(np.int64))


@njit(nogil=True, cache=True, inline="always")
def _admm_row_norms_range(start, stop, X, out):
    """out[k] = ||x_k||^2 (``_dot_rows_fused``) for rows start..stop-1."""
    r = X.shape[1]
    for k in range(start, stop):
        out[k] = _dot_rows_fused(X, k, X, k, r)


@njit(nogil=True, cache=True, inline="always")
def _admm_dual_rows(start, stop, V, U, Lam, Vn, Un, rho, prow, srow, vrow, drow, qrow):
    """Rows start..stop-1 of the dual update Lam += rho (Vn - Un) (each increment rounded
    to Lam's dtype first), the copies V <- Vn, U <- Un, and the rows' terms of ||V - U||^2,
    ||Vn - V||^2, ||Vn||^2 and the diagonal loss (qrow zeroed for the pair terms)."""
    r = V.shape[1]
    inc = np.empty_like(Lam[0, :1])
    for i in range(start, stop):
        pr = 0.0
        st = 0.0
        vv = 0.0
        for q in range(r):
            vn = np.float64(Vn[i, q])
            d = vn - np.float64(Un[i, q])
            inc[0] = rho * d
            Lam[i, q] += inc[0]
            pr += d * d
            e = vn - np.float64(V[i, q])
            st += e * e
            vv += vn * vn
            V[i, q] = Vn[i, q]
            U[i, q] = Un[i, q]
        prow[i] = pr
        srow[i] = st
        vrow[i] = vv
        drow[i] = (vv - 1.0) * (vv - 1.0)
        qrow[i] = 0.0


@njit(nogil=True, cache=True, inline="always")
def _admm_pair_values(k0, k1, X, pi, pj, pt, pv):
    """pv[k] = ``_admm_pair_loss`` of pair k, for pairs k0..k1-1 (``admm_pair_terms``'s
    values over a range)."""
    r = X.shape[1]
    for k in range(k0, k1):
        pv[k] = _admm_pair_loss(X, pi[k], pj[k], pt[k], r)


@njit(nogil=True, cache=True, parallel=True)
def admm_run(indptr, indices, data, diag, cptr, cidx, csgn, diagonal, pmax, pi, pj, pt, V, U,
             Lam, Vn, Un, rho, rho_min, gamma, tol, adaptive, n_iter, trace, parts, aa_on, X,
             Fp, Gp, dF, dG, gram, order, ints, floats, bdot, Vsave, aa_block, fpart, bpart,
             coef):
    """Up to ``n_iter`` whole KL-ADMM iterations in one call (the in-process fast path).

    Each iteration is exactly the reference one (two ``admm_rows`` half-steps, the dual
    update Lam += rho (V - U) rounded to Lam's dtype, then V, U <- the new factors), followed
    by the quantities ``fit_admm`` reads: ||V - U||, ||V(k+1) - V(k)||, the objective of the
    new V (its smooth term is the U-step's by-product, pair and diagonal terms in O((m + n)
    r)), ||V||; then the stopping test and eq. (15) for rho, as in ``fit_admm``. Row sums
    run left to right and totals in ``block_sums`` partials, the executors' arithmetic, so
    every trace equals the session path's bit for bit.

    V, U, Lam : (n, r) IN/OUT. Vn, Un : (n, r) scratch. trace : (n_iter, 5) float64 OUT, per
    iteration done: primal residual, step, objective, rho used, ||V||.
    parts : int64 (k + 1,) row boundaries 0 = parts[0] < ... < parts[k] = n: the work items
    the half-steps and the dual update are spread over (``admm_parts``: of about equal cost,
    so that threads finish together). Rows are independent, so any boundaries give the same
    iterates bit for bit.
    aa_on: after each iteration, ``_anderson.anderson_after`` on the accelerator's memory
    (X ... Vsave, IN/OUT; dummies when off), as ``fit_admm``'s Python loop calls it.
    Returns (iterations done, rho for the next iteration, converged).
    """
    n, r = V.shape
    m = pi.shape[0]
    n_parts = parts.shape[0] - 1
    sm = np.empty(n)
    no_sm = np.empty(0)
    nrm_u = np.empty(n)  # ||u_k||^2, read by the V-step
    nrm_v = np.empty(n)  # ||v_k||^2 of the new V, read by the U-step
    prow = np.empty(n)
    srow = np.empty(n)
    vrow = np.empty(n)
    drow = np.empty(n)
    qrow = np.empty(n)
    pv = np.empty(m)
    done = 0
    converged = False
    for k in prange(n):
        nrm_u[k] = _dot_rows_fused(U, k, U, k, r)
    for it in range(n_iter):
        if n_parts == 1:
            # one work item (the serial compilation): separate passes, as before the fused
            # regions below (the same values; on one core 2-4% faster than the fused form,
            # bench/RESULTS.md, 2026-11-29)
            admm_rows(0, n, indptr, indices, data, diag, cptr, cidx, csgn, diagonal, U, Lam,
                      -1.0, rho, gamma, pmax, Vn, no_sm, nrm_u)
            _admm_row_norms_range(0, n, Vn, nrm_v)
            admm_rows(0, n, indptr, indices, data, diag, cptr, cidx, csgn, diagonal, Vn, Lam,
                      1.0, rho, gamma, pmax, Un, sm, nrm_v)
            _admm_dual_rows(0, n, V, U, Lam, Vn, Un, rho, prow, srow, vrow, drow, qrow)
            _admm_pair_values(0, m, V, pi, pj, pt, pv)
            _admm_row_norms_range(0, n, U, nrm_u)
        else:
            # two parallel regions per iteration (six until 2026-11-29): the V-step with its
            # rows' norms, then the U-step followed, on each work item's rows, by the dual
            # update, the copies and the norms of the next V-step, and by a slice of the
            # pair values of the new V. Each value is computed as in separate passes (a
            # row's norm from the same row, the pairs from Vn, which V then copies), so the
            # iterates are bitwise the same; fewer barriers, and a work item's rows stay in
            # its core's cache between the passes
            for ch in prange(n_parts):
                admm_rows(parts[ch], parts[ch + 1], indptr, indices, data, diag, cptr, cidx,
                          csgn, diagonal, U, Lam, -1.0, rho, gamma, pmax, Vn, no_sm, nrm_u)
                _admm_row_norms_range(parts[ch], parts[ch + 1], Vn, nrm_v)
            for ch in prange(n_parts):
                admm_rows(parts[ch], parts[ch + 1], indptr, indices, data, diag, cptr, cidx,
                          csgn, diagonal, Vn, Lam, 1.0, rho, gamma, pmax, Un, sm, nrm_v)
                # the U-step reads Lam, V and U only at its own rows, so each row's update
                # and copies may follow its own step
                _admm_dual_rows(parts[ch], parts[ch + 1], V, U, Lam, Vn, Un, rho, prow, srow,
                                vrow, drow, qrow)
                _admm_row_norms_range(parts[ch], parts[ch + 1], U, nrm_u)
                _admm_pair_values(m * ch // n_parts, m * (ch + 1) // n_parts, Vn, pi, pj, pt,
                                  pv)
        for k in range(m):  # grouped by owner row in pair order, as np.bincount
            qrow[pi[k]] += pv[k]
        primal = np.sqrt(_block_total(prow, n))
        step = np.sqrt(_block_total(srow, n))
        obj = _block_total(sm, n) + gamma * _block_total(qrow, n)
        if diagonal:
            obj += 0.5 * gamma * _block_total(drow, n)
        vnorm = max(np.sqrt(_block_total(vrow, n)), 1e-300)
        trace[it, 0] = primal
        trace[it, 1] = step
        trace[it, 2] = obj
        trace[it, 3] = rho
        trace[it, 4] = vnorm
        done = it + 1
        converged = primal / vnorm < tol and step / vnorm < tol
        rho_next = rho
        if adaptive and not converged:  # eq. (15)
            dual = rho * step
            if primal > 10.0 * dual:
                rho_next = 2.0 * rho
            elif dual > 10.0 * primal:
                rho_next = max(rho / 2.0, rho_min)
        if aa_on:
            rho_next, converged = _anderson.anderson_after(
                obj, rho, rho_next, converged, tol, vnorm, V, U, Lam, X, Fp, Gp, dF, dG, gram,
                order, ints, floats, bdot, Vsave, aa_block, fpart, bpart, coef)
            for k in prange(n):  # the accelerator may have replaced U
                nrm_u[k] = _dot_rows_fused(U, k, U, k, r)
        rho = rho_next
        if converged:
            break
    return done, rho, converged


@njit(nogil=True, cache=True, parallel=True)
def _take_rows(A, idx, out):
    """out[q] = A[idx[q]], rows in parallel (each output row written by one thread)."""
    r = A.shape[1]
    for q in prange(idx.shape[0]):
        src = idx[q]
        for c in range(r):
            out[q, c] = A[src, c]


_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def take_rows(A, idx, dtype=None, out=None) -> np.ndarray:
    """``np.ascontiguousarray(A[idx], dtype)``: a relabelling of an (n, r) factor, into a
    fit's internal order (``idx`` = the order) or back (``idx`` = its inverse, ``rank_of``).
    Float32/float64 (n, r) arrays with indices in range take one parallel compiled pass, the
    same values bit for bit (a float64 to float32 conversion rounds as numpy's does); at
    n = 1e6, r = 16 about a third of numpy's serial gather (bench/RESULTS.md). Anything else
    (negative or out-of-range indices among it) takes numpy's route.

    ``out``: a C-contiguous array of the result's shape and dtype to write it into (one
    whose pages are already touched: a block fit's result, prefaulted during its set-up);
    ignored if it does not fit, or on numpy's route."""
    A = np.asarray(A)
    dtype = A.dtype if dtype is None else np.dtype(dtype)
    idx = np.asarray(idx)
    if (A.ndim != 2 or A.dtype not in _ROW_DTYPES or dtype not in _ROW_DTYPES
            or idx.ndim != 1 or idx.dtype.kind not in "iu"
            or (idx.size and (idx.min() < 0 or idx.max() >= A.shape[0]))):
        return np.ascontiguousarray(A[idx], dtype=dtype)
    shape = (idx.shape[0], A.shape[1])
    if (out is None or out.shape != shape or out.dtype != dtype
            or not out.flags.c_contiguous or not out.flags.writeable):
        out = np.empty(shape, dtype)
    _take_rows(A, idx, out)
    return out


def serial_variant(kernel):
    """``kernel`` (an ``@njit(parallel=True)`` dispatcher) compiled without ``parallel``:
    prange runs as range, the arithmetic is the same.

    For callers that parallelise at a coarser level, e.g. Dask block actors with one thread
    each -- an OpenMP parallel region started from a worker's actor thread gains nothing and
    can stall. The copy gets its own qualified name: numba's on-disk cache keys an entry by
    the function's name and bytecode, not by its compile flags, so a plain
    ``njit(kernel.py_func)`` shares the parallel kernel's cache entry and whichever compiles
    first is loaded for both.
    """
    import types

    f = kernel.py_func
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial", f.__defaults__,
                           f.__closure__)
    g.__qualname__ = f.__qualname__ + "_serial"
    g.__module__ = f.__module__
    g.__doc__ = f.__doc__
    return njit(nogil=True, cache=True)(g)


# Serial compilations of the parallel reductions (see serial_variant).
smooth_terms_serial = serial_variant(smooth_terms)
admm_smooth_terms_serial = serial_variant(admm_smooth_terms)
admm_row_norms_serial = serial_variant(admm_row_norms)
pair_terms_serial = serial_variant(pair_terms)
admm_pair_terms_serial = serial_variant(admm_pair_terms)
admm_diag_terms_serial = serial_variant(admm_diag_terms)
admm_run_serial = serial_variant(admm_run)


@njit(nogil=True, cache=True)
def csr_laplacian_stats(indptr, indices, data):
    """(all entries finite, every diagonal entry stored and > 0, max |M_ij|,
    max |M_ij - M_ji|) of a square CSR matrix with sorted, duplicate-free indices, in one
    pass: for each stored (i, j), M_ji is found by binary search in row j (0 where not
    stored). The last equals ``abs(M - M.T).max()`` (0 for an empty matrix) without building
    M.T and M - M.T (chessboard's 100-point Laplacian: ~70 us in scipy, most of
    ``NPKLProblem.build``'s validation).

    M_ji is found by a cursor per row: rows i are visited in increasing order, so the
    columns asked of row j only increase and its cursor only moves forward (O(nnz) in all;
    a binary search per entry took 20 ms of adult-a5a's 0.8 s SimpleNPKL fit)."""
    n = indptr.size - 1
    finite = True
    diag_positive = True
    biggest = 0.0
    worst = 0.0
    cursor = indptr[:-1].copy()
    for i in range(n):
        has_diag = False
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            v = data[p]
            if not np.isfinite(v):
                finite = False
            biggest = max(biggest, abs(v))
            if j == i:
                has_diag = True
                if not v > 0.0:
                    diag_positive = False
            lo = cursor[j]
            end = indptr[j + 1]
            while lo < end and indices[lo] < i:  # first stored column >= i in row j
                lo += 1
            cursor[j] = lo
            other = data[lo] if lo < end and indices[lo] == i else 0.0
            worst = max(worst, abs(v - other))
        if not has_diag:
            diag_positive = False
    return finite, diag_positive, biggest, worst


@njit(nogil=True, cache=True)
def pair_dots(V, ci, cj, out):  # OUT: out (m,)
    """out[k] = v_{ci[k]}' v_{cj[k]} (``np.einsum('kr,kr->k', V[ci], V[cj])`` without the two
    gathered (m, r) copies), in ``_dot_rows``'s arithmetic."""
    r = V.shape[1]
    for k in range(ci.size):
        out[k] = _dot_rows(V, ci[k], V, cj[k], r, _madd)


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _gram_square_sum(A, B, symmetric):
    """||A B'||_F^2 for A (r, n) and B (s, n) (rows: transposed columns), each entry a dot
    product of two rows; ``symmetric`` (B is A): each off-diagonal pair once, doubled."""
    n = A.shape[1]
    total = 0.0
    for a in range(A.shape[0]):
        for b in range(a if symmetric else 0, B.shape[0]):
            d = 0.0
            for i in range(n):
                d += A[a, i] * B[b, i]
            total += d * d if (a == b or not symmetric) else 2.0 * d * d
    return total


@njit(nogil=True, cache=True)
def gram_square_sums(X, Y):
    """(||X'X||_F^2, ||Y'Y||_F^2, ||X'Y||_F^2) for X (n, r) and Y (n, s): the three terms of
    ||XX' - YY'||_F^2 = ||X'X||^2 + ||Y'Y||^2 - 2 ||X'Y||^2 in O(n (r + s)^2), each Gram
    entry a dot product of two transposed columns (:func:`_gram_square_sum`). numpy's form
    (three products, three sums) costs 14 us at n = 100, r = s = 15, this 3.7 us; the dot
    products sum in any order (SIMD lanes side by side: a serial sum took 16 us), so the
    rounding depends on the machine's vector width, as BLAS's does in numpy's form."""
    XT = np.ascontiguousarray(X.T).astype(np.float64)
    YT = np.ascontiguousarray(Y.T).astype(np.float64)
    return (_gram_square_sum(XT, XT, True), _gram_square_sum(YT, YT, True),
            _gram_square_sum(XT, YT, False))


@njit(nogil=True, cache=True)
def csr_negated_dense(indptr, indices, data, out):  # OUT: out (n, n), zero on entry
    """out[i, j] = 0 - M_ij over the stored entries of a CSR matrix without duplicates
    (0 - x, not -x: a stored zero stays +0.0, like the entries outside the pattern)."""
    for i in range(indptr.size - 1):
        for p in range(indptr[i], indptr[i + 1]):
            out[i, indices[p]] = 0.0 - data[p]


@njit(nogil=True, cache=True)
def add_pair_terms(base, ci, cj, w, t, out):  # OUT: out (n, n)
    """out = base + sum_p (w_p t_p / 2) (E_{i_p j_p} + E_{j_p i_p}), one addition per entry
    for distinct pairs i_p < j_p (SimpleNPKL's A(w) from -L)."""
    n = base.shape[0]
    for a in range(n):
        for b in range(n):
            out[a, b] = base[a, b]
    add_pairs_in_place(out, ci, cj, w, t)


@njit(nogil=True, cache=True)
def add_pairs_in_place(out, ci, cj, w, t):  # OUT: out (n, n)
    """out += sum_p (w_p t_p / 2) (E_{i_p j_p} + E_{j_p i_p}) (:func:`add_pair_terms`
    without the copy)."""
    for p in range(ci.size):
        half = 0.5 * w[p] * t[p]
        out[ci[p], cj[p]] += half
        out[cj[p], ci[p]] += half


@njit(nogil=True, cache=True)
def csr_row_ptr(counts):
    """CSR row pointer of rows with ``counts`` entries (int64, len(counts) + 1)."""
    n = counts.shape[0]
    ptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        ptr[i + 1] = ptr[i] + counts[i]
    return ptr


@njit(nogil=True, cache=True, inline="always")
def sort_row(idx, val, start, end):
    """Entries start..end of a CSR row sorted by column, values along (an insertion sort:
    the set-ups' rows are short, and often sorted but for one entry)."""
    for a in range(start + 1, end):
        ci, vi = idx[a], val[a]
        b = a - 1
        while b >= start and idx[b] > ci:
            idx[b + 1], val[b + 1] = idx[b], val[b]
            b -= 1
        idx[b + 1], val[b + 1] = ci, vi


#: Rows longer than this are sorted by :func:`radix_sort_row` (coarse AMG levels: about 100
#: entries a row in a random order, where an insertion sort's quadratic shifts cost 2.3x
#: the radix passes; bench/RESULTS.md, "Coarse levels' rows sorted by radix").
RADIX_MIN_ROW = 32


@njit(nogil=True, cache=True)
def radix_passes(n_cols):
    """Byte passes of :func:`radix_sort_row` for column indices below ``n_cols``."""
    passes = 1
    while n_cols - 1 >= (1 << (8 * passes)) and passes < 8:
        passes += 1
    return passes


@njit(nogil=True, cache=True)
def radix_sort_row(idx, val, start, end, kbuf, vbuf, hist, passes):
    """Entries start..end of a CSR row sorted by column (non-negative, below 256**passes),
    values along: a least-significant-byte radix sort, stable, through the scratch ``kbuf``,
    ``vbuf`` (at least end - start entries) and ``hist`` (256 int64)."""
    k = end - start
    src_k, src_v, dst_k, dst_v = idx, val, kbuf, vbuf
    s0, d0 = start, 0
    for ps in range(passes):
        sh = 8 * ps
        hist[:] = 0
        for a in range(k):
            hist[(src_k[s0 + a] >> sh) & 255] += 1
        tot = 0
        for b in range(256):
            c = hist[b]
            hist[b] = tot
            tot += c
        for a in range(k):
            key = src_k[s0 + a]
            b = (key >> sh) & 255
            dst_k[d0 + hist[b]] = key
            dst_v[d0 + hist[b]] = src_v[s0 + a]
            hist[b] += 1
        src_k, src_v, dst_k, dst_v = dst_k, dst_v, src_k, src_v
        s0, d0 = d0, s0
    if passes % 2 == 1:  # the sorted row is in the scratch
        for a in range(k):
            idx[start + a] = kbuf[a]
            val[start + a] = vbuf[a]


@njit(nogil=True, cache=True)
def csr_compact(start, idx, val, kept):
    """Rows written at ``start[a]`` with ``kept[a]`` entries each (gaps after them), made
    contiguous in place: returns (ptr, idx, val) of the compacted CSR."""
    n = kept.shape[0]
    ptr = csr_row_ptr(kept)
    for a in range(n):
        src, dst = start[a], ptr[a]
        for k in range(kept[a]):
            idx[dst + k] = idx[src + k]
            val[dst + k] = val[src + k]
    return ptr, idx[:ptr[n]], val[:ptr[n]]


# Bound last: _anderson's kernels use the ones above (its import of this module finds them
# defined whichever module is imported first), and admm_run resolves
# _anderson.anderson_after when it compiles.
from . import _anderson  # noqa: E402
