"""`npkl embed`: a graph's edge list embedded by SPE, MVE, colored MVU or NPKL; the files, the
JSON contract, the downstream scores, and the one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from npkl_dist.embedding import embed_spe
from npkl_flows.cli import main

nx = pytest.importorskip("networkx")


@pytest.fixture(scope="module")
def karate(tmp_path_factory):
    d = tmp_path_factory.mktemp("karate")
    G = nx.karate_club_graph()
    E = np.array(sorted(G.edges()), dtype=np.int64)
    y = np.array([0 if G.nodes[i]["club"] == "Mr. Hi" else 1 for i in G], dtype=np.int64)
    np.save(d / "E.npy", E)
    np.save(d / "y.npy", y)
    # two groups by club, node 0 in both (a node may be in several groups), node 33 in none
    rows = [(i, f"club{y[i]}") for i in range(33)] + [(0, "club1")]
    (d / "groups.csv").write_text("node,group\n" + "".join(f"{i},{g}\n" for i, g in rows))
    return d, E, y


@pytest.mark.parametrize("method", ["spe", "mve", "cmvu", "npkl"])
def test_each_method_writes_files_and_json(karate, tmp_path, capsys, method):
    d, E, y = karate
    argv = ["embed", "--edges", str(d / "E.npy"), "--labels", str(d / "y.npy")]
    argv += ["--method", method, "--out", str(tmp_path), "--json", "--quiet"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    Z = np.load(tmp_path / "embedding.npy")
    assert Z.shape == (34, 2) and np.isfinite(Z).all()
    assert summary["n_points"] == 34 and summary["n_edges"] == 78
    assert {"objective", "fit_seconds", "iterations", "converged"} <= set(summary)
    assert (tmp_path / "embedding.png").stat().st_size > 5000
    assert json.loads((tmp_path / "summary.json").read_text())["method"] == method
    nc = summary["node_classification"]
    assert nc["train_fractions"] == [0.1, 0.5, 0.9]
    # the two clubs are the karate graph's two communities: SPE (connectivity), and the
    # methods that learn from the labels, separate them; MVE's unit edge lengths unfold the
    # graph (leaves pushed outward) without regard to communities: chance level, not asserted
    if method != "mve":
        assert nc["micro_f1_mean"][1] > 0.75, nc
    assert nc["labels_were_side_information"] == (method in ("npkl", "cmvu"))


def test_spe_equals_the_library(karate, tmp_path, capsys):
    """The CLI's SPE is the library's on the 0/1 connectivity, bitwise."""
    import scipy.sparse as sp

    d, E, _ = karate
    argv = ["embed", "--edges", str(d / "E.npy"), "--out", str(tmp_path), "--quiet"]
    assert main([*argv, "--no-plot", "--dim", "3"]) == 0
    W = sp.coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(34, 34))
    ref = embed_spe((W + W.T).tocsr(), dim=3)
    np.testing.assert_array_equal(np.load(tmp_path / "embedding.npy"), ref.embedding)
    assert "node_classification" not in json.loads((tmp_path / "summary.json").read_text())


def test_groups_and_holdout(karate, tmp_path, capsys):
    d, *_ = karate
    argv = ["embed", "--edges", str(d / "E.npy"), "--groups", str(d / "groups.csv")]
    argv += ["--method", "npkl", "--holdout", "0.15", "--out", str(tmp_path), "--json"]
    assert main([*argv, "--quiet", "--no-plot"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["n_groups"] == 2 and s["n_edges_held_out"] == round(0.15 * 78)
    assert s["node_classification"]["multilabel"] is True
    fs = s["friend_suggestion"]
    assert 0.5 < fs["auc"] <= 1.0 and 0.0 <= fs["precision_at_10"] <= 1.0


@pytest.mark.parametrize(
    "extra, msg",
    [
        (["--method", "cmvu"], "labels: method 'cmvu' learns from side information"),
        (["--method", "npkl"], "or --groups FILE"),
        (["--labels", "y5.npy"], "labels: 5 labels for a graph of 34 nodes"),
        (["--labels", "y.npy", "--groups", "groups.csv"], "not both"),
        (["--edges", "big.npy", "--method", "mve"], "takes at most 3000 nodes; use method 'spe'"),
    ],
)
def test_errors_one_line(karate, tmp_path, capsys, extra, msg):
    d, *_ = karate
    np.save(d / "y5.npy", np.zeros(5, dtype=np.int64))
    path = np.arange(3001)
    np.save(d / "big.npy", np.column_stack([path[:-1], path[1:]]))
    extra = [str(d / a) if a.endswith((".npy", ".csv")) else a for a in extra]
    argv = ["embed", "--edges", str(d / "E.npy"), *extra, "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err, err


@pytest.mark.heavy
def test_spe_above_the_exact_bound_runs_low_rank(tmp_path, capsys):
    """Above 3,000 nodes --method spe is the low-rank, sampled SPE: a planted partition of
    3,200 nodes in 4 groups is embedded and its groups classified far above chance."""
    import npkl_dist as nk

    edges, groups = nk.planted_partition(3200, 4, degree=12.0, mix=0.1, seed=1)
    np.save(tmp_path / "E.npy", edges)
    np.save(tmp_path / "g.npy", groups)
    argv = ["embed", "--edges", str(tmp_path / "E.npy"), "--labels", str(tmp_path / "g.npy")]
    argv += ["--dim", "4", "--out", str(tmp_path / "o"), "--json", "--quiet", "--no-plot"]
    assert main(argv) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["solver"] == "spe-lowrank" and s["rank"] == 16 and s["n_points"] == 3200
    assert s["node_classification"]["micro_f1_mean"][1] > 0.8
