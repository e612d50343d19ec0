"""Base kernels of the inductive kernel and the tiled, deterministic map x -> k_B(x).

A row's kernel values against the basis points B are computed in fixed tiles of ``TILE``
rows whose boundaries sit at multiples of ``TILE`` of the row's position in the whole input;
the last tile is zero-padded to full height. Every tile is therefore the same BLAS call with
the same shapes, so a row's result does not depend on how the rows were cut into chunks, on
which thread or Dask worker computed them (BLAS runs single-threaded inside a tile; the tiles
are the unit of parallelism), or on the other rows of its tile.
"""

from __future__ import annotations

import numpy as np

from ..._errors import ValidationError, fmt_value
from ...linalg._blas import _OneBlasThread

#: rows per tile (chunks of a streamed transform are multiples of this)
TILE = 256

KERNELS = ("rbf", "linear")

#: the graph's bandwidth rule: half the mean distance to this many nearest neighbours
BANDWIDTH_NEIGHBOURS = 10
#: points the bandwidth rule is computed on (a seeded sample beyond this)
BANDWIDTH_SAMPLE = 5000


#: bandwidth rules: "median" (kappa = exp(-|x-y|^2 / median |x-y|^2) over sampled pairs: the
#: median pair has kernel 1/e) and "knn" (the kNN graph's sigma); docs/decisions/inductive.md
BANDWIDTH_RULES = ("median", "knn")
#: pairs the median rule samples
MEDIAN_PAIRS = 20000


def check_kernel(kernel, bandwidth):
    if kernel not in KERNELS:
        raise ValidationError(f"kernel: {kernel!r} is not one of {', '.join(map(repr, KERNELS))}")
    if kernel != "rbf" or bandwidth is None or bandwidth in BANDWIDTH_RULES:
        return
    b = bandwidth
    if isinstance(b, bool) or not isinstance(b, (int, float, np.floating, np.integer)):
        raise ValidationError(
            f"bandwidth: expected a positive number, 'median' or 'knn', got {fmt_value(b)}"
        )
    if not np.isfinite(b) or b <= 0:
        raise ValidationError(
            f"bandwidth: expected a positive finite number, got {fmt_value(b)}; or 'median' "
            "(the default: the median sampled pair has kernel 1/e) or 'knn' (the graph's rule)"
        )


def median_rule(X, seed=0) -> float:
    """sigma with 2 sigma^2 = the median squared distance over seeded random pairs."""
    A, B = sample_pairs(X, MEDIAN_PAIRS, seed, 11)
    d2 = np.einsum("ij,ij->i", A - B, A - B)
    med = float(np.median(d2))
    if not med > 0:
        raise ValidationError(
            "X: most sampled pairs of points coincide (median distance 0); remove duplicate "
            "rows or give bandwidth="
        )
    return float(np.sqrt(med / 2.0))


def take_rows(X, idx) -> np.ndarray:
    """X[idx] as float64 for any row-sliceable X (numpy, memory map, Zarr, a scaled view),
    reading each row once, in order."""
    u, inv = np.unique(np.asarray(idx, dtype=np.int64), return_inverse=True)
    if isinstance(X, np.ndarray):
        rows = X[u]
    elif hasattr(X, "oindex"):  # Zarr: orthogonal selection of sorted unique rows
        rows = X.oindex[u, :]
    else:
        rows = X[u]
    return np.asarray(rows, dtype=np.float64)[inv]


def resolve_bandwidth(X, bandwidth, seed=0) -> float:
    if bandwidth is None or bandwidth == "median":
        return median_rule(X, seed)
    if bandwidth == "knn":
        return bandwidth_rule(X, seed)
    return float(bandwidth)


def bandwidth_rule(X, seed=0) -> float:
    """sigma by the kNN graph's rule (graph_from_neighbours): half the mean distance from each
    point to its SIGMA_NEIGHBOURS nearest neighbours, on all points up to
    ``BANDWIDTH_SAMPLE`` and on a seeded sample of that many beyond (exact neighbours among
    the sample)."""
    from ...graph._graph import SIGMA_NEIGHBOURS, knn_neighbours

    n = X.shape[0]
    rows = np.arange(n)
    if n > BANDWIDTH_SAMPLE:
        rows = np.random.default_rng(seed).choice(n, BANDWIDTH_SAMPLE, replace=False)
    X = take_rows(X, rows)
    k = min(SIGMA_NEIGHBOURS, X.shape[0] - 1)
    if k < 1:
        raise ValidationError("X: the bandwidth rule needs at least 2 points; give bandwidth=")
    _, dist = knn_neighbours(X, k, method="exact")
    sigma = 0.5 * float(dist.mean())
    if not sigma > 0:
        raise ValidationError(
            "X: all points coincide with their neighbours (bandwidth 0); remove duplicate "
            "rows or give bandwidth="
        )
    return sigma


def sample_pairs(X, count: int, seed, stream: int):
    """Rows (A, B) of ``count`` seeded random pairs of distinct points (``stream`` keeps the
    bandwidth's and the bounds' pairs apart)."""
    rng = np.random.default_rng([seed, stream])
    n = X.shape[0]
    i, j = rng.integers(0, n, count), rng.integers(0, n, count)
    keep = i != j
    if not keep.any():
        raise ValidationError("X: sampling pairs needs at least 2 points")
    return take_rows(X, i[keep]), take_rows(X, j[keep])


def kernel_block(kernel, sigma, A, B, b_sq=None):
    """kappa(A, B) for row blocks (dense, float64). ``b_sq``: the squared norms of B's rows."""
    G = A @ B.T
    if kernel == "linear":
        return G
    a_sq = np.einsum("ij,ij->i", A, A)
    if b_sq is None:
        b_sq = np.einsum("ij,ij->i", B, B)
    D = a_sq[:, None] + b_sq[None, :] - 2.0 * G
    np.maximum(D, 0.0, out=D)
    D *= -1.0 / (2.0 * sigma * sigma)
    return np.exp(D, out=D)


def self_kernel(kernel, sigma, A):
    """kappa(a, a) for each row of A."""
    if kernel == "linear":
        return np.einsum("ij,ij->i", A, A)
    return np.ones(A.shape[0])


def map_tiles(fn, X, start: int = 0, threads: int = 1):
    """``fn`` applied to the fixed tiles of rows X (whose first row has global position
    ``start``, a multiple of TILE), results stacked in order; the last tile zero-padded to
    TILE rows and cut back. BLAS single-threaded inside a tile; ``threads`` tiles at a time."""
    from concurrent.futures import ThreadPoolExecutor

    if start % TILE:
        raise ValueError(f"start {start} is not a multiple of TILE={TILE}")
    n = X.shape[0]

    def one(s):
        tile = np.asarray(X[s : s + TILE], dtype=np.float64)
        h = tile.shape[0]
        if h < TILE:
            pad = np.zeros((TILE, tile.shape[1]))
            pad[:h] = tile
            tile = pad
        return fn(tile)[:h]

    starts = range(0, n, TILE)
    with _OneBlasThread():  # (threadpoolctl's limit() rescans the libraries on every call)
        if threads > 1 and len(starts) > 1:
            with ThreadPoolExecutor(threads) as pool:
                out = list(pool.map(one, starts))
        else:
            out = [one(s) for s in starts]
    return np.concatenate(out, axis=0) if out else None
