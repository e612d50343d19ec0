"""CSR helpers: Laplacian statistics, negated dense rows, pair terms added in place, row
pointers, and the row sort (radix for long rows) that compacts a CSR matrix."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._rowops import _dot_rows
from ._simd import _madd


@njit(nogil=True, cache=True)
def csr_laplacian_stats(indptr, indices, data):
    """(all entries finite, every diagonal entry stored and > 0, max |M_ij|,
    max |M_ij - M_ji|) of a square CSR matrix with sorted, duplicate-free indices, in one
    pass: for each stored (i, j), M_ji is found by binary search in row j (0 where not
    stored). The last equals ``abs(M - M.T).max()`` (0 for an empty matrix) without building
    M.T and M - M.T (in scipy, most of ``NPKLProblem.build``'s validation;
    docs/decisions/small-fit-times.md).

    M_ji is found by a cursor per row: rows i are visited in increasing order, so the
    columns asked of row j only increase and its cursor only moves forward (O(nnz) in all,
    against a binary search per entry)."""
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
    (three products, three sums) costs several times more on small fits; the dot products
    sum in any order (SIMD lanes side by side; docs/decisions/small-fit-times.md), so the
    rounding depends on the machine's vector width, as BLAS's does in numpy's form."""
    XT = np.ascontiguousarray(X.T).astype(np.float64)
    YT = np.ascontiguousarray(Y.T).astype(np.float64)
    return (
        _gram_square_sum(XT, XT, True),
        _gram_square_sum(YT, YT, True),
        _gram_square_sum(XT, YT, False),
    )


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
#: entries a row in a random order, where an insertion sort's quadratic shifts cost more;
#: docs/decisions/block-fit-at-1e6.md).
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
    return ptr, idx[: ptr[n]], val[: ptr[n]]
