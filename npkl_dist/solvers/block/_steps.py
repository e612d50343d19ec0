"""One block iteration's steps: residuals, CG directions, the coefficients of the subspace step
and the row updates, as compiled kernels over row blocks."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ...linalg._rowops import _add_row_products
from ...linalg._simd import _madd, prefetch_ahead
from ._kernels import RB


@njit(nogil=True, cache=True, parallel=True)
def _neg_residual_rows(n_free, indptr, indices, data, diag, V, X, R, dinv, part_xr, part_g):
    """R = -(L V)_U for the first n_free rows (the exact CG residual of L_UU X = -L_UC V_C,
    with X = V[:n_free] in float64), fused with chunk sums of X*R and ||dinv R||^2."""
    r = V.shape[1]
    n_ch = (n_free + RB - 1) // RB
    nnz = indptr[n_free]
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n_free)):
            prefetch_ahead(indptr, indices, i, V, nnz)
            d = np.float64(diag[i])
            for c in range(r):
                q[c] = -d * X[i, c]
            _add_row_products(i, indptr, indices, data, V, q, r, -1.0, _madd)
            s = dinv[i]
            for c in range(r):
                R[i, c] = q[c]
                a += X[i, c] * q[c]
                b += (s * q[c]) * (s * q[c])
        part_xr[ch] = a
        part_g[ch] = b


@njit(nogil=True, cache=True, parallel=True)
def _copy_delta(X, Xold, V, copy, set_old, n2_part, d2_part):
    """V[:n] = X (cast to V's dtype) and X = that rounded value (``copy`` False: X is V's
    own float64 rows, nothing to write); chunk sums of ||X||^2 and ||X - Xold||^2; Xold = X
    if ``set_old`` (else Xold is the start of the outer iteration kept elsewhere: Vprev)."""
    n, r = X.shape
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                if copy:
                    V[i, c] = X[i, c]
                    x = np.float64(V[i, c])
                    X[i, c] = x
                else:
                    x = X[i, c]
                dd = x - Xold[i, c]
                if set_old:
                    Xold[i, c] = x
                a += x * x
                b += dd * dd
        n2_part[ch] = a
        d2_part[ch] = b


@njit(nogil=True, cache=True, inline="always")
def _row_times_step(i, indptr, indices, data, diag, V, Vprev, q):
    """q = (L D)_i for D = V - Vprev (float64), D formed on the fly (as _row_times)."""
    r = V.shape[1]
    d = np.float64(diag[i])
    for c in range(r):
        q[c] = d * (np.float64(V[i, c]) - Vprev[i, c])
    # four neighbours per pass over q, as _add_row_products (the same roundings)
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
        for c in range(r):
            q[c] = (
                (
                    (q[c] + w0 * (np.float64(V[k0, c]) - Vprev[k0, c]))
                    + w1 * (np.float64(V[k1, c]) - Vprev[k1, c])
                )
                + w2 * (np.float64(V[k2, c]) - Vprev[k2, c])
            ) + w3 * (np.float64(V[k3, c]) - Vprev[k3, c])
        p += 4
    while p < end:
        k = indices[p]
        w = np.float64(data[p])
        for c in range(r):
            q[c] += w * (np.float64(V[k, c]) - Vprev[k, c])
        p += 1


@njit(nogil=True, cache=True, parallel=True)
def _direction_LD(
    uc_ptr,
    uc_idx,
    uc_data,
    nu,
    indptr,
    indices,
    data,
    diag,
    V,
    Vprev,
    Q,
    alpha,
    use_q,
    LD,
    S,
    LS,
    part_a,
    part_b,
    part,
):
    """LD = L D for LD's rows (the own rows), D = V - Vprev (float64; never stored: formed
    where it is read), with chunk sums of <LD, V> and <LD, D>, and in the same pass those
    of <LS, V>, <LD, S>, <LS, S> (part[:, 0..2]) for the subspace search.

    Rows i >= nu take a row product with D. The first ``nu`` rows (0 for the plain product)
    are U rows after a one-step PCG: with V in float64 they moved by exactly the CG step
    alpha P, and Q = L_UU P, so (L D)_U = alpha Q + L_UC D_C -- only their few constrained
    neighbours (``uc_*``: the U rows' entries in C columns, local numbering). ``use_q``
    False: the PCG took no step (D_U = 0)."""
    r = V.shape[1]
    n = LD.shape[0]
    n_ch = (n + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        a2 = 0.0
        b2 = 0.0
        e2 = 0.0
        q = np.empty(r)
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            if i < nu:
                for c in range(r):
                    q[c] = alpha[c] * Q[i, c] if use_q else 0.0
                for p in range(uc_ptr[i], uc_ptr[i + 1]):
                    k = uc_idx[p]
                    w = uc_data[p]
                    for c in range(r):
                        q[c] += w * (np.float64(V[k, c]) - Vprev[k, c])
            else:
                _row_times_step(i, indptr, indices, data, diag, V, Vprev, q)
            for c in range(r):
                LD[i, c] = q[c]
                v = np.float64(V[i, c])
                a += q[c] * v
                b += q[c] * (v - Vprev[i, c])
                sc = np.float64(S[i, c])
                lsc = np.float64(LS[i, c])
                a2 += lsc * v
                b2 += q[c] * sc
                e2 += lsc * sc
        part_a[ch] = a
        part_b[ch] = b
        part[ch, 0] = a2
        part[ch, 1] = b2
        part[ch, 2] = e2


@njit(nogil=True, cache=True, parallel=True)
def _residual_dots(R, X, dinv, part_xr, part_g):
    """Chunk sums of X*R and ||dinv R||^2 of a residual R as it is (a resumed fit's; as
    :func:`_neg_residual_rows` and the residual update of :func:`_subspace_step` sum)."""
    n_free, r = R.shape
    n_ch = (n_free + RB - 1) // RB
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n_free)):
            s = dinv[i]
            for c in range(r):
                q = R[i, c]
                a += X[i, c] * q
                b += (s * q) * (s * q)
        part_xr[ch] = a
        part_g[ch] = b


@njit(nogil=True, cache=True, parallel=True)
def _subspace_step(
    V, Vprev, LD, S, LS, s1, s2, part, R, Q, alpha, use_q, dinv, res, part_xr, part_g
):
    """V += s1 D + s2 S with D = V - Vprev; then the outer iteration's whole step
    S <- (1 + s1) D + s2 S and LS <- (1 + s1) LD + s2 LS (stored in V's dtype, so a resumed
    fit reproduces them), with chunk sums of ||S||^2 and ||V||^2 over the own rows (LD's).
    Halo rows (beyond LD's) get the same V and S updates, so a partition's copies stay equal
    to their owners' rows. Vprev becomes the new V (the next outer iteration's start, as
    :func:`_save` would copy it) in the same pass.

    ``res``: in the same pass, the residual of R's rows (the own U rows) without a product
    with L: V moved from Vprev by the whole step S (LS = L S, just updated), so
    -(L V)_U = R_start - (L S)_U, and after a one-step PCG R holds R_start - alpha Q
    (``use_q``); with its chunk sums of X*R and ||dinv R||^2 (X = V's U rows)."""
    n_all, r = V.shape
    n = LD.shape[0]
    for i in prange(n, n_all):
        for c in range(r):
            sc = np.float64(S[i, c])
            v = np.float64(V[i, c])
            d = v - Vprev[i, c]
            V[i, c] = v + s1 * d + s2 * sc
            S[i, c] = (1.0 + s1) * d + s2 * sc
            Vprev[i, c] = V[i, c]
    n_ch = (n + RB - 1) // RB
    nu = R.shape[0] if res else 0
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        xr = 0.0
        g = 0.0
        for i in range(ch * RB, min((ch + 1) * RB, n)):
            for c in range(r):
                sc = np.float64(S[i, c])
                v = np.float64(V[i, c])
                d = v - Vprev[i, c]
                V[i, c] = v + s1 * d + s2 * sc
                S[i, c] = (1.0 + s1) * d + s2 * sc
                LS[i, c] = (1.0 + s1) * LD[i, c] + s2 * np.float64(LS[i, c])
                x = np.float64(S[i, c])
                a += x * x
                v = np.float64(V[i, c])
                Vprev[i, c] = v
                b += v * v
            if i < nu:  # -(L V)_U = R_start (- alpha Q) - (L S)_U
                w = dinv[i]
                for c in range(r):
                    q = R[i, c]
                    if use_q:
                        q += alpha[c] * Q[i, c]
                    q -= np.float64(LS[i, c])
                    R[i, c] = q
                    xr += np.float64(V[i, c]) * q
                    g += (w * q) * (w * q)
        part[ch, 0] = a
        part[ch, 1] = b
        if ch * RB < nu:
            part_xr[ch] = xr
            part_g[ch] = g


@njit(nogil=True, cache=True, inline="always")
def _pair_terms(acc, vi, vj, di, dj, si, sj):
    """One column's terms of a pair's (c0, c1, c2, c11, c22, c12) (see ``_pair_coeffs2``)
    added to ``acc``."""
    c0, c1, c2, c11, c22, c12 = acc
    return (
        c0 + vi * vj,
        c1 + (vi * dj + di * vj),
        c2 + (vi * sj + si * vj),
        c11 + di * dj,
        c22 + si * sj,
        c12 + (di * sj + si * dj),
    )


@njit(nogil=True, cache=True, inline="always")
def _store_pair(out, k, t, acc):
    for m in range(6):
        out[k, m] = t * acc[m]


@njit(nogil=True, cache=True, parallel=True)
def _pair_coeffs2(pi, pj, pt, V, Vprev, S, out):
    """t z along V + s1 D + s2 S (D = V - Vprev) is
    c0 + s1 c1 + s2 c2 + s1^2 c11 + s2^2 c22 + s1 s2 c12; out[:, 0..5] = (c0, c1, c2, c11,
    c22, c12) per pair."""
    r = V.shape[1]
    for k in prange(pi.shape[0]):  # pairs are independent: any thread count, same bits
        i = pi[k]
        j = pj[k]
        acc = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        for c in range(r):
            vi = np.float64(V[i, c])
            vj = np.float64(V[j, c])
            acc = _pair_terms(
                acc,
                vi,
                vj,
                vi - Vprev[i, c],
                vj - Vprev[j, c],
                np.float64(S[i, c]),
                np.float64(S[j, c]),
            )
        _store_pair(out, k, pt[k], acc)


# -- the outer step's direction from the one-step PCG (``D_FROM_CG``) --------------------------
# The U rows moved by exactly alpha Z in a one-step PCG (X += alpha Z, Z = P, V float64), so
# their step D_U is alpha Z, formed where it is read: Vprev and L D are stored for the C rows
# only (local rows: own U [0, nu), own C [nu, n_own), halo U [n_own, n_own + nfh), halo C
# after; ``Vp`` holds the own C rows, then the halo C rows).


@njit(nogil=True, cache=True, inline="always")
def _step_of(k, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh):
    """D[k, c] (float64) of local row k: alpha Z on U rows (own, then the halo's rows of Z;
    0 where the PCG took no step), V - Vp on C rows."""
    if k < nu:
        return alpha[c] * np.float64(Z[k, c]) if use_q else 0.0
    if k < n_own + nfh and k >= n_own:
        return alpha[c] * np.float64(Z[k - n_own + nu, c]) if use_q else 0.0
    return _c_step(k, c, V, Vp, nu, n_own, nfh)


@njit(nogil=True, cache=True, inline="always")
def _c_step(k, c, V, Vp, nu, n_own, nfh):
    """D[k, c] = V - Vp of a C row k (own, or the halo's)."""
    if k < n_own:
        return np.float64(V[k, c]) - Vp[k - nu, c]
    return np.float64(V[k, c]) - Vp[k - nu - nfh, c]


@njit(nogil=True, cache=True, parallel=True)
def _uc_products(ucr, uc_ptr, uc_idx, uc_data, V, Vp, nu, n_own, nfh, UCD):
    """UCD[s] = (L_UC D_C) of U row ucr[s] (the U rows with C neighbours, in order): the
    C rows' part of (L D)_U, formed once per outer iteration for the direction and the step
    while the few C rows are in cache. Read from the U rows' own passes, those gathers
    missed cache on every entry (docs/decisions/block-fit-at-1e6.md)."""
    r = V.shape[1]
    for s in prange(ucr.shape[0]):
        i = ucr[s]
        for c in range(r):
            UCD[s, c] = 0.0
        for p in range(uc_ptr[i], uc_ptr[i + 1]):
            k = uc_idx[p]
            w = uc_data[p]
            for c in range(r):
                UCD[s, c] += w * _c_step(k, c, V, Vp, nu, n_own, nfh)


@njit(nogil=True, cache=True, parallel=True)
def _direction_cg(
    ucr,
    UCD,
    nu,
    n_own,
    nfh,
    indptr,
    indices,
    data,
    diag,
    V,
    Vp,
    Z,
    alpha,
    use_q,
    Q,
    LDC,
    S,
    LS,
    part_a,
    part_b,
    part,
    upd,
    pend,
    n2_part,
):
    """:func:`_direction_LD` with D_U = alpha Z: the sums of <LD, V>, <LD, D>, <LS, V>,
    <LD, S>, <LS, S> over the own rows, with (L D)_U = alpha Q + L_UC D_C (``UCD`` of
    :func:`_uc_products` on the rows ``ucr``) formed and summed (not stored: the step forms
    it again) and (L D)_C stored in LDC (own C rows).

    ``pend`` (``FOLD_X_UPDATE``): the PCG's X += alpha Z is still to be taken on the U rows
    but ``upd`` (sorted; the C rows' U neighbours, moved before the C rows' updates): their
    V is read as V + alpha Z, rounded as that update rounds it, and the chunk sums of
    ||X||^2 over the U rows that the update would have formed go to ``n2_part``."""
    r = V.shape[1]
    n_ch = (n_own + RB - 1) // RB
    nb = ucr.shape[0]
    nup = upd.shape[0]
    for ch in prange(n_ch):
        a = 0.0
        b = 0.0
        a2 = 0.0
        b2 = 0.0
        e2 = 0.0
        x2 = 0.0
        q = np.empty(r)
        d = np.empty(r)
        sb = np.searchsorted(ucr, ch * RB)
        su = np.searchsorted(upd, ch * RB)
        for i in range(ch * RB, min((ch + 1) * RB, n_own)):
            if i < nu:
                boundary = sb < nb and ucr[sb] == i
                moved = su < nup and upd[su] == i
                if moved:
                    su += 1
                take = pend and not moved  # V here is the start of the PCG's step
                # one pass over the row, the sums in the order of the general rows' below
                for c in range(r):
                    dz = alpha[c] * np.float64(Z[i, c]) if use_q else 0.0
                    qc = alpha[c] * Q[i, c] if use_q else 0.0
                    if boundary:
                        qc += UCD[sb, c]
                    v = np.float64(V[i, c]) + dz if take else np.float64(V[i, c])
                    if pend:
                        x2 += v * v
                    a += qc * v
                    b += qc * dz
                    sc = np.float64(S[i, c])
                    lsc = np.float64(LS[i, c])
                    a2 += lsc * v
                    b2 += qc * sc
                    e2 += lsc * sc
                if boundary:
                    sb += 1
                continue
            dg = np.float64(diag[i])
            for c in range(r):
                d[c] = np.float64(V[i, c]) - Vp[i - nu, c]
                q[c] = dg * d[c]
            for p in range(indptr[i], indptr[i + 1]):
                k = indices[p]
                w = np.float64(data[p])
                for c in range(r):
                    q[c] += w * _step_of(k, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh)
            for c in range(r):
                LDC[i - nu, c] = q[c]
                v = np.float64(V[i, c])
                a += q[c] * v
                b += q[c] * d[c]
                sc = np.float64(S[i, c])
                lsc = np.float64(LS[i, c])
                a2 += lsc * v
                b2 += q[c] * sc
                e2 += lsc * sc
        part_a[ch] = a
        part_b[ch] = b
        part[ch, 0] = a2
        part[ch, 1] = b2
        part[ch, 2] = e2
        if pend and ch * RB < nu:
            n2_part[ch] = x2


@njit(nogil=True, cache=True, parallel=True)
def _pair_coeffs2_cg(pi, pj, pt, V, Vp, S, Z, alpha, use_q, nu, n_own, nfh, out):
    """:func:`_pair_coeffs2` with the step D of :func:`_step_of`."""
    r = V.shape[1]
    for k in prange(pi.shape[0]):  # pairs are independent: any thread count, same bits
        i = pi[k]
        j = pj[k]
        acc = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        for c in range(r):
            acc = _pair_terms(
                acc,
                np.float64(V[i, c]),
                np.float64(V[j, c]),
                _step_of(i, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh),
                _step_of(j, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh),
                np.float64(S[i, c]),
                np.float64(S[j, c]),
            )
        _store_pair(out, k, pt[k], acc)


@njit(nogil=True, cache=True, parallel=True)
def _subspace_step_cg(
    V,
    Vp,
    LDC,
    S,
    LS,
    s1,
    s2,
    part,
    R,
    Q,
    alpha,
    use_q,
    r_moved,
    dinv,
    res,
    part_xr,
    part_g,
    ucr,
    UCD,
    Z,
    nu,
    n_own,
    nfh,
    upd,
    pend,
    LVC,
):
    """:func:`_subspace_step` with D_U = alpha Z: V += s1 D + s2 S, S <- (1 + s1) D + s2 S,
    LS <- (1 + s1) LD + s2 LS, Vp <- V on the C rows; ||S||^2 and ||V||^2 chunk sums over
    the own rows; ``res``: the residual R_start (- alpha Q where the step moved R) - (L S)_U
    with its sums. (L D)_U = alpha Q + L_UC D_C, the second term from ``UCD`` (formed before
    the C rows move: :func:`_uc_products`). The own C rows' sums continue the chunk the U
    rows left, so every chunk sums its rows in order. ``pend``: the PCG's X += alpha Z is
    taken here on the U rows but ``upd`` (as :func:`_direction_cg` reads them). ``LVC``
    (own C rows, or empty): (L V)_C += the new (L S)_C (``LV_FROM_STEP``)."""
    n_loc, r = V.shape
    carry = LVC.shape[0] > 0
    n_chu = (nu + RB - 1) // RB
    qa = alpha if use_q else np.zeros(r)  # alpha Z as read (0: the PCG took no step)
    ra = alpha if r_moved else np.zeros(r)  # alpha Q added back to R
    nb = ucr.shape[0]
    for ch in prange(n_chu):
        a = 0.0
        b = 0.0
        xr = 0.0
        g = 0.0
        ld = np.empty(r)
        sb = np.searchsorted(ucr, ch * RB)
        su = np.searchsorted(upd, ch * RB)
        nup = upd.shape[0]
        for i in range(ch * RB, min((ch + 1) * RB, nu)):
            moved = su < nup and upd[su] == i
            if moved:
                su += 1
            take = pend and not moved  # V here is the start of the PCG's step
            if use_q:
                for c in range(r):
                    ld[c] = alpha[c] * Q[i, c]
            else:
                ld[:] = 0.0
            if sb < nb and ucr[sb] == i:  # (L D)_i = alpha Q_i + (L_UC D_C)_i
                for c in range(r):
                    ld[c] += UCD[sb, c]
                sb += 1
            # one pass over the row (V, S, LS in float64 here: what is written is what a
            # read would give back)
            w = dinv[i]
            for c in range(r):
                dd = qa[c] * np.float64(Z[i, c])
                sc = S[i, c]
                v = V[i, c] + dd if take else V[i, c]
                vn = v + s1 * dd + s2 * sc
                sn = (1.0 + s1) * dd + s2 * sc
                ls = (1.0 + s1) * ld[c] + s2 * LS[i, c]
                V[i, c] = vn
                S[i, c] = sn
                LS[i, c] = ls
                a += sn * sn
                b += vn * vn
                if res:  # -(L V)_U = R_start (- alpha Q) - (L S)_U
                    q = R[i, c] + ra[c] * Q[i, c] if r_moved else R[i, c]
                    q -= ls
                    R[i, c] = q
                    xr += vn * q
                    g += (w * q) * (w * q)
        part[ch, 0] = a
        part[ch, 1] = b
        if res:
            part_xr[ch] = xr
            part_g[ch] = g
    for i in prange(n_own, n_loc):  # halo rows: V and S as their owners move them
        for c in range(r):
            dd = _step_of(i, c, V, Vp, Z, alpha, use_q, nu, n_own, nfh)
            sc = np.float64(S[i, c])
            v = np.float64(V[i, c])
            V[i, c] = v + s1 * dd + s2 * sc
            S[i, c] = (1.0 + s1) * dd + s2 * sc
            if i >= n_own + nfh:
                Vp[i - nu - nfh, c] = V[i, c]
    n_ch = (n_own + RB - 1) // RB
    for ch in prange(nu // RB, n_ch):
        first = ch * RB < nu  # the chunk the U rows began
        a = part[ch, 0] if first else 0.0
        b = part[ch, 1] if first else 0.0
        for i in range(max(ch * RB, nu), min((ch + 1) * RB, n_own)):
            for c in range(r):
                sc = np.float64(S[i, c])
                v = np.float64(V[i, c])
                dd = v - Vp[i - nu, c]
                V[i, c] = v + s1 * dd + s2 * sc
                S[i, c] = (1.0 + s1) * dd + s2 * sc
                LS[i, c] = (1.0 + s1) * LDC[i - nu, c] + s2 * np.float64(LS[i, c])
                if carry:  # V = Vprev + S: (L V)_C = (L Vprev)_C + (L S)_C
                    LVC[i - nu, c] += np.float64(LS[i, c])
                x = np.float64(S[i, c])
                a += x * x
                v = np.float64(V[i, c])
                Vp[i - nu, c] = v
                b += v * v
        part[ch, 0] = a
        part[ch, 1] = b


@njit(nogil=True, cache=True, parallel=True)
def _update_rows(rows, X, P, alpha):
    """X[i] += alpha P[i] for i in ``rows`` (the PCG's update, as ``_cg_update_x_sums``
    rounds it, on those rows only)."""
    r = X.shape[1]
    for q in prange(rows.shape[0]):
        i = rows[q]
        for c in range(r):
            X[i, c] = X[i, c] + alpha[c] * P[i, c]
