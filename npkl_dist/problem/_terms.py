"""The objective's compiled terms: per-row smooth terms tr(V'LV) and per-pair loss terms, summed
in a fixed order by the caller; the loss codes of the kernels."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..linalg._rowops import (
    CHUNK,
    _add_row_products,
    _dot_row_vec_plain,
    serial_variant,
)
from ..linalg._simd import _madd

LOSS_CODES = {"hinge": 0, "squared_hinge": 1, "square": 2, "linear": 3}


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
        _smooth_rows(
            ch * CHUNK,
            min((ch + 1) * CHUNK, n),
            indptr,
            indices,
            data,
            diag,
            V,
            out,
            np.empty(V.shape[1]),
            _madd,
            _dot_row_vec_plain,
        )


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


# Serial compilations of the parallel reductions (see serial_variant).
smooth_terms_serial = serial_variant(smooth_terms)
pair_terms_serial = serial_variant(pair_terms)
