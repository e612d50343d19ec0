"""Ordered reductions: per-chunk sums of per-row values in a fixed order, so that every
executor and thread count adds the same numbers in the same order (bitwise results)."""

from __future__ import annotations

import numpy as np

from ._rowops import block_sums, row_sq, row_sq_dist


def chunked_sums(values) -> list:
    """Per-chunk sums of a per-row array (chunks of SUM_BLOCK rows, in order; plain sums,
    ``_kernels.block_sums``, the arithmetic of the compiled ``admm_run`` too)."""
    return block_sums(np.ascontiguousarray(values, dtype=np.float64)).tolist()


def row_norms2(A, B=None) -> np.ndarray:
    """||a_i - b_i||^2 (or ||a_i||^2) per row in float64, summed left to right."""
    out = np.empty(A.shape[0])
    if B is None:
        row_sq(A, out)
    else:
        row_sq_dist(A, B, out)
    return out


def ordered_total(partials) -> float:
    total = 0.0
    for x in partials:
        total += x
    return total
