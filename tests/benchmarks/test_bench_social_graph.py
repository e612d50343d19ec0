"""bench/social_graph.py on a small graph: every row measured, the gap column consistent."""

import json

import numpy as np

from bench import social_graph


def test_small_run_reports_every_method(tmp_path, capsys):
    out = tmp_path / "sg.json"
    argv = ["--n", "2000", "--groups", "10", "--labelled", "0.05", "--max-sweeps", "60"]
    social_graph.main([*argv, "--random-seeds", "0", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert set(rows) == {
        "default",
        "random (seed 0)",
        "random (seed 1)",
        "propagation",
        "spectral",
    }
    fits = [rows[k] for k in ("default", "random (seed 0)", "random (seed 1)")]
    f_star = min(r["objective"] for r in fits)
    for r in fits:
        assert np.isclose(r["gap"], (r["objective"] - f_star) / f_star)
        assert len(r["trace"]) == len(r["clock"]) == r["iterations"]
        assert 0.0 <= r["ari_normalized"] <= 1.0 and 0.0 <= r["ari_normalized_restarts"] <= 1.0
        assert r["numerical_rank"] >= 10
    assert min(r["gap"] for r in fits) == 0.0
    assert rows["spectral"]["ari"] > 0.9  # an easy graph for the unsupervised baseline
    assert "default" in capsys.readouterr().out
    # the expensive k-means can be left out; their figures are then None, not made up
    social_graph.main(
        [
            *argv,
            "--random-seeds",
            "--skip",
            "raw",
            "restarts",
            "propagation",
            "spectral",
            "--json",
            str(out),
        ]
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ari"] is None and row["ari_normalized_restarts"] is None
    assert row["ari_normalized"] is not None


def test_block_cg_solves_every_column_as_a_direct_solve():
    """The propagation baseline's solver against scipy's sparse LU, on a shifted normalised
    Laplacian's unlabelled block (a planted partition: the benchmark's kind of graph)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve

    import npkl_dist as nk

    edges, _ = nk.planted_partition(600, 6, 10, 0.3, seed=3)
    L = nk.graph_from_edges(edges, 600, warn=False).laplacian(1e-3)
    U = np.arange(600)[np.arange(600) % 20 != 0]
    Lu = sp.csr_matrix(L)[U][:, U].tocsr()
    B = np.random.default_rng(0).normal(size=(U.size, 6))
    B[:, 3] = 0.0  # a class without labels: its column stays zero
    X, iterations = social_graph.block_cg(Lu, B, tol=1e-10)
    ref = spsolve(Lu.tocsc(), B)
    np.testing.assert_allclose(X, ref, rtol=0, atol=1e-8 * np.abs(ref).max())
    assert not X[:, 3].any() and 1 < iterations < 600
