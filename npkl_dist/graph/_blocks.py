"""Manifold graphs built in row blocks, for pipelines that spread the work.

* kNN graphs: one neighbour index (scikit-learn's exact search, or one pynndescent index) is
  built once; the neighbours of each row block are found by an independent task
  (:func:`knn_rows`), so blocks can run on Dask workers; the driver reduces the per-block
  partial sums to sigma and assembles the symmetric graph in O(n k) memory
  (:func:`assemble_knn_graph`). The result is the graph of :func:`~npkl_dist.knn_graph`.
* Given graphs: an edge list is read in batches (:func:`iter_edge_batches`, pyarrow for
  CSV / Parquet, a memory map for ``.npy``) and merged batch by batch
  (:func:`graph_from_edge_batches`), so the whole list is never held in one process; memory
  is O(edges of the deduplicated graph + one batch).

Only numpy / scipy / scikit-learn / pynndescent / pyarrow here; no Dask. The caller maps
:func:`knn_rows` over blocks with whatever engine it has (a loop, threads, Dask).
"""

from __future__ import annotations

import numpy as np
from sklearn.neighbors import NearestNeighbors

from .._errors import GraphError, InputFileError, ValidationError, fmt_value
from ._graph import (
    EXACT_KNN_MAX_POINTS,
    SIGMA_NEIGHBOURS,
    Graph,
    _check_features,
    _finish,
    _int_seed,
    _n_points,
    check_duplicates,
    dedup_pairs,
    graph_from_neighbours,
    merge_duplicates,
    warn_edge_cleanup,
    warn_feature_scales,
)
from ._io import _load_npy, _numeric, _path, _suffix

__all__ = [
    "check_edge_batch",
    "KnnIndex",
    "build_knn_index",
    "knn_rows",
    "row_blocks",
    "assemble_knn_graph",
    "knn_graph_blocked",
    "iter_edge_batches",
    "graph_from_edge_batches",
]


class KnnIndex:
    """One neighbour index over the training rows.

    Attributes
    ----------
    method : {'exact', 'pynndescent'}
    n_points, k_query : int
        Rows indexed; neighbours found per row (self excluded).
    """

    def __init__(self, X, k_query: int, method: str, seed=0):
        self.method = method
        self.n_points = int(X.shape[0])
        self.k_query = int(k_query)
        self._graph = None
        if method == "exact":
            self._nn = NearestNeighbors(n_neighbors=k_query + 1).fit(X)
            self._X = X
        else:
            from pynndescent import (
                NNDescent,  # lazy: importing it compiles numba code (seconds)
            )

            self._nn = NNDescent(
                X, n_neighbors=k_query + 1, random_state=_int_seed(seed), n_jobs=None
            )
            # the build yields every training row's neighbours; rows are sliced from it
            idx, dist = self._nn.neighbor_graph
            self._graph = (np.asarray(idx, np.int64), np.asarray(dist, np.float64))
        self._prepared = False

    def __getstate__(self):
        # the pynndescent index itself is not needed to answer training rows
        state = dict(self.__dict__)
        if self.method == "pynndescent":
            state["_nn"] = None
        return state

    def training_rows(self, start: int, stop: int):
        """Neighbours of training rows [start, stop) (self excluded), ascending distance."""
        if self.method == "exact":
            dist, idx = self._nn.kneighbors(self._X[start:stop])
        else:
            idx, dist = (a[start:stop] for a in self._graph)
        return _drop_self(
            np.asarray(idx, np.int64), np.asarray(dist, np.float64), start, self.k_query
        )

    def query(self, Q, k: int):
        """The k nearest training rows of new points Q, (idx, dist) ascending."""
        Q = _check_features(Q)
        if self.method == "exact":
            dist, idx = self._nn.kneighbors(Q, n_neighbors=k)
        else:
            if self._nn is None:
                raise ValidationError(
                    "index: this pynndescent index was sent to a worker without its search "
                    "structure; query new points on the process that built it"
                )
            if not self._prepared:
                self._nn.prepare()
                self._prepared = True
            idx, dist = self._nn.query(Q, k=k)
        return np.asarray(idx, np.int64), np.asarray(dist, np.float64)


def _drop_self(idx, dist, start, k):
    """Remove each row itself (by identity: a twin may come first), keep k neighbours."""
    m = idx.shape[0]
    is_self = idx == (start + np.arange(m))[:, None]
    no_self = ~is_self.any(axis=1)
    is_self[no_self, -1] = True  # self not returned (ties): drop the farthest instead
    keep = ~is_self
    return idx[keep].reshape(m, k), dist[keep].reshape(m, k)


def build_knn_index(X, k: int, *, method: str = "auto", seed=0) -> KnnIndex:
    """The one neighbour index of a kNN graph build.

    Parameters
    ----------
    X : ndarray, shape (n_samples, n_features)
    k : int
        Graph neighbours per point; the index answers ``max(k, 10)`` (sigma uses 10).
    method : {'auto', 'exact', 'pynndescent'}
        'auto' is exact up to ``EXACT_KNN_MAX_POINTS`` points.
    """
    X = _check_features(X)
    n = X.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < n:
        raise ValidationError(
            f"knn: expected an integer in [1, {n - 1}] for {n} points, got {fmt_value(k)}"
        )
    if method == "auto":
        method = "exact" if n <= EXACT_KNN_MAX_POINTS else "pynndescent"
    if method not in ("exact", "pynndescent"):
        raise ValidationError(
            f"knn_method: {method!r} is not one of 'auto', 'exact', 'pynndescent'"
        )
    kq = max(int(k), min(SIGMA_NEIGHBOURS, n - 1))
    return KnnIndex(X, kq, method, seed)


def row_blocks(n: int, block: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering range(n) in blocks of ``block`` rows."""
    block = max(1, int(block))
    return [(s, min(s + block, n)) for s in range(0, n, block)]


def knn_rows(index: KnnIndex, start: int, stop: int):
    """One task: neighbours of rows [start, stop) and their partial sigma sums.

    Returns
    -------
    idx : ndarray of int64, shape (stop - start, k_query)
    dist : ndarray of float64, shape (stop - start, k_query)
    """
    return index.training_rows(start, stop)


def assemble_knn_graph(blocks, k: int, *, weighting: str = "gaussian", warn=True) -> Graph:
    """The symmetric kNN graph from per-block neighbours (in row order).

    Same definition as :func:`~npkl_dist.knn_graph`: sigma is half the mean distance to the
    10 nearest neighbours, S_ij = exp(-d_ij^2 / 2 sigma^2) on the union of both kNN
    directions (``'gaussian'``), or 1 on mutual neighbours (``'mutual'``). Blocks are joined in
    row order, so the result does not depend on which worker ran which block.
    """
    if weighting not in ("gaussian", "mutual"):
        raise ValidationError(f"weighting: {weighting!r} is not one of 'gaussian', 'mutual'")
    blocks = list(blocks)
    idx = np.concatenate([b[0] for b in blocks])
    dist = np.concatenate([b[1] for b in blocks])
    return graph_from_neighbours(idx, dist, k, weighting=weighting, warn=warn)


def knn_graph_blocked(
    X,
    k: int = 5,
    *,
    weighting: str = "gaussian",
    method: str = "auto",
    seed=0,
    block: int = 65536,
    mapper=None,
    progress=None,
    warn=True,
):
    """:func:`~npkl_dist.knn_graph` computed in row blocks.

    Parameters
    ----------
    mapper : callable, optional
        ``mapper(fn, index, spans)`` returns ``[fn(index, s, e) for s, e in spans]`` in
        order, running them however it likes (threads, Dask). Default: a loop.
    progress : callable, optional
        ``progress(done, total)`` after each block (only with the default mapper).

    Returns
    -------
    graph : Graph
    index : KnnIndex
        Kept for out-of-sample queries (:func:`npkl_dist.extend_embedding`).
    """
    index = build_knn_index(X, k, method=method, seed=seed)  # checks X
    if warn:
        warn_feature_scales(np.asarray(X), stacklevel=2)
    spans = row_blocks(index.n_points, block)
    if mapper is None:
        out = []
        for t, (s, e) in enumerate(spans):
            out.append(knn_rows(index, s, e))
            if progress is not None:
                progress(t + 1, len(spans))
    else:
        out = mapper(knn_rows, index, spans)
    return assemble_knn_graph(out, k, weighting=weighting, warn=warn), index


# ------------------------------------------------------------------------------ edge lists
def iter_edge_batches(path, batch_rows: int = 1 << 20):
    """Batches ``(i, j, w, first_row)`` of an edge list, never the whole file in memory.

    ``.npy`` (m, 2|3) is memory-mapped and sliced; ``.csv`` is streamed by pyarrow's CSV
    reader and ``.parquet`` by record batches; both need columns ``i, j[, w]``.
    """
    p = _path(path, "edges")
    s = _suffix(p, "edges", (".npy", ".csv", ".parquet"))
    if s == ".npy":
        E = _load_npy(p, "edges", mmap_mode="r")
        if E.ndim != 2 or E.shape[1] not in (2, 3):
            raise GraphError(
                f"edges: expected shape (m, 2) or (m, 3) with columns i, j[, w], got {E.shape}"
            )
        for a in range(0, E.shape[0], batch_rows):
            B = np.asarray(E[a : a + batch_rows], dtype=np.float64)
            yield B[:, 0], B[:, 1], (B[:, 2] if B.shape[1] == 3 else None), a
        return
    import pyarrow as pa  # lazy: only Parquet / CSV edge files need it (slow import)

    try:
        if s == ".parquet":
            import pyarrow.parquet as pq  # lazy, as above

            batches = pq.ParquetFile(p).iter_batches(batch_size=batch_rows)
        else:
            import pyarrow.csv as pacsv  # lazy, as above

            batches = pacsv.open_csv(
                p, read_options=pacsv.ReadOptions(block_size=max(1 << 20, batch_rows * 24))
            )
        first = 0
        for batch in batches:
            names = batch.schema.names
            missing = [c for c in ("i", "j") if c not in names]
            if missing:
                raise InputFileError(
                    f"edges: {str(p)!r} lacks column(s) {missing}; expected a header with "
                    f"i, j[, w] (found {names[:6]})"
                )
            col = {
                c: batch.column(names.index(c)).to_numpy(zero_copy_only=False)
                for c in ("i", "j", "w")
                if c in names
            }
            i, j = (_numeric(col[c], c, p, "edges", first) for c in ("i", "j"))
            w = _numeric(col["w"], "w", p, "edges", first) if "w" in col else None
            yield i, j, w, first
            first += batch.num_rows
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, InputFileError):
            raise
        raise InputFileError(f"edges: cannot read {str(p)!r}: {exc}") from exc


def check_edge_batch(i, j, w, first):
    """The weights of a batch of edges (ones where ``w`` is None) after refusing NaN / inf,
    non-whole or negative node numbers and non-positive weights, naming the file's rows
    (``first``: the batch's first row)."""
    m = i.shape[0]
    w = np.ones(m) if w is None else w
    bad = ~(np.isfinite(i) & np.isfinite(j) & np.isfinite(w))
    if bad.any():
        raise GraphError(
            f"edges: NaN or inf in row(s) {(first + np.flatnonzero(bad)[:5]).tolist()} of "
            f"the edge list; drop or fix those rows"
        )
    frac = (i != np.round(i)) | (j != np.round(j))
    if frac.any():
        raise GraphError(
            f"edges: columns i, j must hold whole 0-based node numbers; row(s) "
            f"{(first + np.flatnonzero(frac)[:5]).tolist()} do not"
        )
    neg = (i < 0) | (j < 0)
    if neg.any():
        raise GraphError(
            f"edges: negative node index in row(s) {(first + np.flatnonzero(neg)[:5]).tolist()}"
            f"; nodes are 0-based"
        )
    nonpos = w <= 0
    if nonpos.any():
        raise GraphError(
            f"edges: weights must be positive, got {w[nonpos][:5].tolist()} in row(s) "
            f"{(first + np.flatnonzero(nonpos)[:5]).tolist()}; drop those edges"
        )
    return w


def graph_from_edge_batches(
    batches, n_points: int | None = None, *, duplicates: str = "max", warn=True
) -> Graph:
    """A given graph from batches of edges (see :func:`iter_edge_batches`).

    Same result as :func:`~npkl_dist.graph_from_edges` on the concatenated list: 0-based
    undirected edges, self-loops dropped, repeated edges combined by ``duplicates`` (sums
    and means up to rounding: batches add in another order). Each batch is validated on
    arrival and errors name the offending row numbers of the file.
    """
    check_duplicates(duplicates)
    parts = []  # deduplicated upper-triangular (lo, hi, w) parts
    held = 0
    top = 0
    seen = 0
    counts = {"loops": 0, "duplicates": 0, "conflicts": 0}  # what reading changed (warned)
    for i, j, w, first in batches:
        m = i.shape[0]
        if m == 0:
            continue
        seen += m
        w = check_edge_batch(i, j, w, first)
        ii, jj = i.astype(np.int64), j.astype(np.int64)
        top = max(top, int(max(ii.max(), jj.max())) + 1)
        loop = ii == jj
        if loop.any():
            counts["loops"] += int(loop.sum())
            ii, jj, w = ii[~loop], jj[~loop], w[~loop]
        parts.append(dedup_pairs(ii, jj, w, counts))
        held += parts[-1][0].size
        if len(parts) > 1 and held > 2 * max(parts[0][0].size, 1 << 20):
            lo, hi, w, mask, cnt, at_max, wsum = (np.concatenate(c) for c in zip(*parts))
            parts = [dedup_pairs(lo, hi, w, counts, mask, cnt, at_max, wsum)]
            held = parts[0][0].size
    if seen == 0:
        raise GraphError("edges: the edge list is empty; pass at least one edge")
    n_points = _n_points(n_points, top)
    if parts:
        lo, hi, w, mask, cnt, at_max, wsum = (np.concatenate(c) for c in zip(*parts))
    else:
        lo = hi = cnt = at_max = np.zeros(0, np.int64)
        w, wsum, mask = np.zeros(0), np.zeros(0), np.zeros(0, np.int8)
    merged = dedup_pairs(lo, hi, w, counts, mask, cnt, at_max, wsum)
    A = merge_duplicates(merged, n_points, duplicates, counts)
    if warn:
        warn_edge_cleanup(counts, duplicates, stacklevel=2)
    return _finish(A.maximum(A.T), None, warn=warn, given=True)
