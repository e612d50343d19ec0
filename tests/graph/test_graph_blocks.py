"""Graphs built in row blocks equal the one-shot builders."""

from __future__ import annotations

import numpy as np
import pytest

from npkl_dist import GraphError, graph_from_edges, knn_graph
from npkl_dist.graph._blocks import (
    graph_from_edge_batches,
    iter_edge_batches,
    knn_graph_blocked,
    row_blocks,
)


@pytest.mark.parametrize("weighting", ["gaussian", "mutual"])
@pytest.mark.parametrize("block", [7, 50, 1000])
def test_blocked_knn_equals_knn_graph(global_random_seed, weighting, block):
    X = np.random.default_rng(global_random_seed).normal(size=(300, 4))
    ref = knn_graph(X, 5, weighting=weighting, method="exact", warn=False)
    got, index = knn_graph_blocked(
        X, 5, weighting=weighting, method="exact", block=block, warn=False
    )
    assert (got.S != ref.S).nnz == 0 or np.allclose(
        got.S.toarray(), ref.S.toarray(), rtol=1e-12, atol=0
    )
    assert got.S.nnz == ref.S.nnz
    assert np.array_equal(got.S.indices, ref.S.indices)
    if weighting == "gaussian":
        assert got.sigma == pytest.approx(ref.sigma, rel=1e-12)


def test_blocked_knn_with_a_mapper_and_progress():
    X = np.random.default_rng(0).normal(size=(120, 3))
    seen = []
    a, _ = knn_graph_blocked(
        X, 4, method="exact", block=25, progress=lambda d, t: seen.append((d, t)), warn=False
    )
    b, _ = knn_graph_blocked(
        X,
        4,
        method="exact",
        block=25,
        warn=False,
        mapper=lambda fn, ix, spans: [fn(ix, s, e) for s, e in spans[::-1]][::-1],
    )
    assert seen[-1] == (5, 5)
    assert (a.S != b.S).nnz == 0


def test_row_blocks():
    assert row_blocks(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert row_blocks(3, 10) == [(0, 3)]


def _edges(seed, n=80, m=400):
    rng = np.random.default_rng(seed)
    E = np.column_stack([rng.integers(0, n, m), rng.integers(0, n, m), rng.uniform(0.1, 2, m)])
    return E


@pytest.mark.parametrize("suffix", [".npy", ".csv", ".parquet"])
def test_streamed_edges_equal_graph_from_edges(tmp_path, global_random_seed, suffix):
    E = _edges(global_random_seed)
    path = tmp_path / f"e{suffix}"
    if suffix == ".npy":
        np.save(path, E)
    else:
        import pyarrow as pa

        t = pa.table({"i": E[:, 0].astype(np.int64), "j": E[:, 1].astype(np.int64), "w": E[:, 2]})
        if suffix == ".csv":
            import pyarrow.csv as pacsv

            pacsv.write_csv(t, path)
        else:
            import pyarrow.parquet as pq

            pq.write_table(t, path, row_group_size=37)
    ref = graph_from_edges(E, 90, warn=False)
    got = graph_from_edge_batches(iter_edge_batches(path, batch_rows=50), 90, warn=False)
    assert (got.S != ref.S).nnz == 0
    assert got.n_components == ref.n_components


def test_streamed_edges_errors_name_rows(tmp_path):
    E = _edges(0)
    E[123, 2] = -1
    np.save(tmp_path / "e.npy", E)
    with pytest.raises(GraphError, match=r"row\(s\) \[123\]"):
        graph_from_edge_batches(iter_edge_batches(tmp_path / "e.npy", batch_rows=50))
    with pytest.raises(GraphError, match="n_points: 5"):
        graph_from_edge_batches([(E[:10, 0], E[:10, 1], None, 0)], 5)
