"""A compiled Householder tridiagonalisation against LAPACK's ``dsytrd`` + ``dormqr``: tried
for SimpleNPKL's small dense eigensolves, not kept.

SimpleNPKL's dense route (``npkl_dist._tridiag.tridiagonal_top_eigs``) spends most of a
small linear fit in LAPACK's ``dsytrd`` (iris, n = 150: about 200 of 380 us) and ``dormqr``.
This script times a compiled alternative on random symmetric matrices: the unblocked
Householder reduction of the lower triangle (``dsytd2``'s algorithm) with one fused pass per
step (the rank-2 update of the trailing block and the next step's symmetric product in the
same sweep over its rows, 4-lane vectors through ``npkl_dist._kernels``' intrinsics), and the
back-transformation of k eigenvectors by the reflectors (``dormqr``'s work). Both are checked
first: the eigenvalues of the tridiagonal form against numpy's ``eigvalsh``, and the
back-transformed top-k eigenvectors' residual ||A Z - Z diag(w)||.

Usage::

    python bench/tridiag_compiled.py [--sizes 47 100 150 214 270 350] [--runs 300]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from numba import njit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from npkl_dist._kernels import (_fma, _v4_add, _v4_fma, _v4_load, _v4_load1,  # noqa: E402
                                _v4_mul, _v4_pair_sum, _v4_splat, _v4_store, _v4_store1,
                                _v4_sub, _v4_zero)


@njit(nogil=True, cache=True, inline="always")
def _sym_row_product(A, i, m, vk, p):
    """Row i of the lower triangle (columns m..i) into p = A v: p[j] += A[i, j] v[i] for
    j < i, p[i] += sum_{j <= i} A[i, j] v[j]. vk: the row of A holding v."""
    vi = A[vk, i]
    v_vi = _v4_splat(vi)
    acc = _v4_zero()
    j = m
    while j + 4 <= i:
        a = _v4_load(A, i, j)
        acc = _v4_fma(a, _v4_load(A, vk, j), acc)
        _v4_store1(p, j, _v4_fma(a, v_vi, _v4_load1(p, j)))
        j += 4
    s = _v4_pair_sum(acc)
    while j < i:
        a = A[i, j]
        s = _fma(a, A[vk, j], s)
        p[j] = _fma(a, vi, p[j])
        j += 1
    p[i] += _fma(A[i, i], vi, s)


@njit(nogil=True, cache=True)
def trd_v4(A, d, e, tau):
    """Householder tridiagonalisation of the symmetric (n, n) C-ordered A, lower triangle
    read and overwritten: Q' A Q = T, d (n,) its diagonal, e (n - 1,) its subdiagonal,
    Q = H_0 ... H_{n-3} with H_k = I - tau_k v_k v_k' on rows k + 1.., v_k stored in row k's
    upper part (A[k, k + 1] = 1). OUT: d, e, tau, A."""
    n = A.shape[0]
    p = np.zeros(n)
    w = np.zeros(n)
    if n == 1:
        d[0] = A[0, 0]
        return
    fresh = True
    for k in range(n - 2):
        m = k + 1
        alpha = A[m, k]
        ss = 0.0
        for i in range(m + 1, n):
            ss += A[i, k] * A[i, k]
        if ss == 0.0:
            t = 0.0
            e[k] = alpha
            A[k, m] = 1.0
            for i in range(m + 1, n):
                A[k, i] = 0.0
        else:
            beta = -np.copysign(np.sqrt(alpha * alpha + ss), alpha)
            t = (beta - alpha) / beta
            e[k] = beta
            sc = 1.0 / (alpha - beta)
            A[k, m] = 1.0
            for i in range(m + 1, n):
                A[k, i] = A[i, k] * sc
        tau[k] = t
        d[k] = A[k, k]
        if t == 0.0:
            fresh = True
            continue
        if fresh:
            for i in range(m, n):
                p[i] = 0.0
            for i in range(m, n):
                _sym_row_product(A, i, m, k, p)
            fresh = False
        pv = 0.0
        for i in range(m, n):
            p[i] *= t
            pv += p[i] * A[k, i]
        a2 = -0.5 * t * pv
        for i in range(m, n):
            w[i] = p[i] + a2 * A[k, i]
        if k == n - 3:
            for i in range(m, n):
                vi = A[k, i]
                wi = w[i]
                for j in range(m, i + 1):
                    A[i, j] -= vi * w[j] + wi * A[k, j]
            break
        # column m of the updated block: the next reflector's source
        wm = w[m]
        vm = A[k, m]
        for i in range(m, n):
            A[i, m] -= A[k, i] * wm + w[i] * vm
        m2 = m + 1
        alpha = A[m2, m]
        ss = 0.0
        for i in range(m2 + 1, n):
            ss += A[i, m] * A[i, m]
        sc = 0.0
        if ss != 0.0:
            beta = -np.copysign(np.sqrt(alpha * alpha + ss), alpha)
            sc = 1.0 / (alpha - beta)
        A[m, m2] = 1.0
        for i in range(m2 + 1, n):
            A[m, i] = A[i, m] * sc
        for i in range(m2, n):
            p[i] = 0.0
        for i in range(m2, n):
            vi = A[k, i]
            wi = w[i]
            vni = A[m, i]
            v_vi = _v4_splat(vi)
            v_wi = _v4_splat(wi)
            v_vni = _v4_splat(vni)
            acc = _v4_zero()
            j = m2
            while j + 4 <= i:
                a = _v4_sub(_v4_load(A, i, j), _v4_add(_v4_mul(v_vi, _v4_load1(w, j)),
                                                       _v4_mul(v_wi, _v4_load(A, k, j))))
                _v4_store(A, i, j, a)
                acc = _v4_fma(a, _v4_load(A, m, j), acc)
                _v4_store1(p, j, _v4_fma(a, v_vni, _v4_load1(p, j)))
                j += 4
            s = _v4_pair_sum(acc)
            while j < i:
                a = A[i, j] - (vi * w[j] + wi * A[k, j])
                A[i, j] = a
                s = _fma(a, A[m, j], s)
                p[j] = _fma(a, vni, p[j])
                j += 1
            a = A[i, i] - (vi * w[i] + wi * A[k, i])
            A[i, i] = a
            p[i] += _fma(a, vni, s)
    d[n - 2] = A[n - 2, n - 2]
    d[n - 1] = A[n - 1, n - 1]
    e[n - 2] = A[n - 1, n - 2]
    tau[n - 2] = 0.0


@njit(nogil=True, cache=True)
def back_v4(A, tau, Z):
    """Z (n, k) C-ordered IN/OUT: Z <- Q Z with Q the reflectors of ``trd_v4`` (A, tau)."""
    n, kk = Z.shape
    s = np.empty(kk)
    q4 = kk - kk % 4
    for jj in range(n - 3, -1, -1):
        t = tau[jj]
        if t == 0.0:
            continue
        m = jj + 1
        for q in range(kk):
            s[q] = 0.0
        for i in range(m, n):
            v_vi = _v4_splat(A[jj, i])
            for q in range(0, q4, 4):
                _v4_store1(s, q, _v4_fma(v_vi, _v4_load(Z, i, q), _v4_load1(s, q)))
            for q in range(q4, kk):
                s[q] = _fma(A[jj, i], Z[i, q], s[q])
        for q in range(kk):
            s[q] *= -t
        for i in range(m, n):
            v_vi = _v4_splat(A[jj, i])
            for q in range(0, q4, 4):
                _v4_store(Z, i, q, _v4_fma(v_vi, _v4_load1(s, q), _v4_load(Z, i, q)))
            for q in range(q4, kk):
                Z[i, q] = _fma(A[jj, i], s[q], Z[i, q])


def check(n, k, rng):
    """(max eigenvalue error of T, residual of the top-k pairs) on one random matrix."""
    from scipy.linalg import eigh_tridiagonal

    A = rng.standard_normal((n, n))
    A = A + A.T
    M, d, e, tau = A.copy(), np.empty(n), np.empty(n - 1), np.empty(n - 1)
    trd_v4(M, d, e, tau)
    w, Zt = eigh_tridiagonal(d, e, select="i", select_range=(n - k, n - 1))
    Z = np.ascontiguousarray(Zt)
    back_v4(M, tau, Z)
    err = np.abs(np.sort(eigh_tridiagonal(d, e, eigvals_only=True))
                 - np.linalg.eigvalsh(A)).max()
    return err / np.abs(w).max(), np.abs(A @ Z - Z * w).max() / np.abs(w).max()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[47, 100, 150, 214, 270, 350])
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args(argv)
    if args.runs < 1 or min(args.sizes) < 3:
        raise SystemExit(f"tridiag_compiled: --runs={args.runs} must be >= 1 and every size "
                         f"of --sizes={args.sizes} >= 3")
    from scipy.linalg import eigh_tridiagonal, lapack

    from bench._env import pin_threads
    from npkl_dist._tridiag import _dsytrd_block

    print(pin_threads(1))
    rng = np.random.default_rng(0)
    rows = []
    for n in args.sizes:
        k = max(1, int(np.sqrt(2 * 1.2 * n)))  # the Pataki rank at 1.2 n pairs
        err, res = check(n, k, rng)
        A = rng.standard_normal((n, n))
        A = A + A.T
        d, e, tau = np.empty(n), np.empty(n - 1), np.empty(n - 1)
        M = A.copy()
        trd_v4(M, d, e, tau)
        Zt = np.ascontiguousarray(eigh_tridiagonal(d, e, select="i",
                                                   select_range=(n - k, n - 1))[1])
        lw = n * _dsytrd_block(n)
        c = lapack.dsytrd(A.copy().T, lower=1, lwork=lw, overwrite_a=1)
        med = _medians(A, M, d, e, tau, Zt, c, lw, k, n, args.runs)
        rows.append((n, k, err, res, *med))
    print("\n| n | k | eigenvalue error / max |w| | residual / max |w| | compiled reduction (us) "
          "| dsytrd (us) | compiled / dsytrd | compiled back-transformation (us) | dormqr (us) "
          "| compiled / dormqr |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, k, err, res, tr, ts, tb, tq in rows:
        print(f"| {n} | {k} | {err:.1e} | {res:.1e} | {1e6 * tr:.1f} | {1e6 * ts:.1f} | "
              f"{tr / ts:.2f} | {1e6 * tb:.1f} | {1e6 * tq:.1f} | {tb / tq:.2f} |")


def _medians(A, M, d, e, tau, Zt, c, lw, k, n, runs):
    """Medians (s) of the four steps, alternating call by call; each call's copy of its
    input is made untimed."""
    import time

    from scipy.linalg import lapack

    t = {q: [] for q in range(4)}
    for _ in range(runs):
        X = A.copy()
        t0 = time.perf_counter()
        trd_v4(X, d, e, tau)
        t[0].append(time.perf_counter() - t0)
        X = A.copy().T
        t0 = time.perf_counter()
        lapack.dsytrd(X, lower=1, lwork=lw, overwrite_a=1)
        t[1].append(time.perf_counter() - t0)
        Z = Zt.copy()
        t0 = time.perf_counter()
        back_v4(M, tau, Z)
        t[2].append(time.perf_counter() - t0)
        Z = np.asfortranarray(Zt[1:])
        t0 = time.perf_counter()
        lapack.dormqr("L", "N", c[0][1:, :n - 1], c[3], Z, lwork=64 * k, overwrite_c=1)
        t[3].append(time.perf_counter() - t0)
    return [float(np.median(t[q])) for q in range(4)]


if __name__ == "__main__":
    main()
