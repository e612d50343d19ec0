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


# ---- npkl embed --method npkl --run: the pipeline's checkpointed fit ------------------------
class _Killed(Exception):
    pass


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A 600-node planted partition in 6 groups (mix 0.3: not separable from the edges alone),
    memberships of a third of the nodes (a few in two groups) as the side information."""
    import npkl_dist as nk

    d = tmp_path_factory.mktemp("planted")
    edges, g = nk.planted_partition(600, 6, degree=10.0, mix=0.3, seed=3)
    np.save(d / "E.npy", edges)
    rng = np.random.default_rng(0)
    known = np.sort(rng.choice(600, 200, replace=False))
    rows = [(int(i), int(g[i])) for i in known] + [(int(i), 6) for i in known[:10]]
    (d / "groups.csv").write_text("node,group\n" + "".join(f"{i},{k}\n" for i, k in rows))
    return d, g


def _embed_run(d, run, out, *extra):
    return [
        "embed", "--edges", str(d / "E.npy"), "--groups", str(d / "groups.csv"),
        "--method", "npkl", "--max-iter", "12", "--dim", "6", "--run", str(run),
        "--out", str(out), "--no-plot", "--json", "--quiet", *extra,
    ]  # fmt: skip


def _kill_then_repeat(argv, kill_at: int, capsys) -> tuple[dict, list]:
    """``npkl <argv>`` killed right after the checkpointer's call of sweep ``kill_at``, then
    the same command again: (its summary, the sweeps the repeat went through)."""
    from npkl_dist import store as st

    orig = st.StoreCheckpointer.on_sweep

    def dying(self, state, session):
        orig(self, state, session)
        if state["sweep"] == kill_at:
            raise _Killed

    st.StoreCheckpointer.on_sweep = dying
    try:
        with pytest.raises(_Killed):
            main(argv)
    finally:
        st.StoreCheckpointer.on_sweep = orig
    capsys.readouterr()
    seen = []

    def spy(self, state, session):
        seen.append(state["sweep"])
        orig(self, state, session)

    st.StoreCheckpointer.on_sweep = spy
    try:
        assert main(argv) == 0
    finally:
        st.StoreCheckpointer.on_sweep = orig
    return json.loads(capsys.readouterr().out), seen


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_run_crashed_and_repeated_ends_bitwise_as_uninterrupted(planted, tmp_path, capsys):
    """`npkl embed --method npkl --run RUN` killed after the checkpoint of sweep 5; the same
    command again continues from it and writes the uninterrupted run's embedding, bitwise."""
    d, g = planted
    assert main(_embed_run(d, tmp_path / "full", tmp_path / "o-full")) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["resumed"] is False and full["n_groups"] == 7 and full["iterations"] == 12
    Z_full = np.load(tmp_path / "o-full" / "embedding.npy")

    again, seen = _kill_then_repeat(
        _embed_run(d, tmp_path / "half", tmp_path / "o-half"), 5, capsys
    )
    assert seen == list(range(6, 13))  # continued after the checkpoint, not from the start
    assert again["resumed"] is True and again["iterations"] == 12
    np.testing.assert_array_equal(np.load(tmp_path / "o-half" / "embedding.npy"), Z_full)
    assert again["objective"] == full["objective"]
    # the groups are learned from a third of the nodes: the other nodes' groups follow
    nc = full["node_classification"]
    assert nc["micro_f1_mean"][1] > 0.6, nc


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_checkpoint_every_n_sweeps_resumes_from_the_last_multiple(planted, tmp_path, capsys):
    """--checkpoint-every 5: a run killed at sweep 7 kept sweep 5's checkpoint only, so the
    same command continues from sweep 6 and ends bitwise as an uninterrupted run."""
    d, _ = planted
    every = ("--checkpoint-every", "5")
    assert main(_embed_run(d, tmp_path / "full", tmp_path / "o-full", *every)) == 0
    full = json.loads(capsys.readouterr().out)
    half = _embed_run(d, tmp_path / "half", tmp_path / "o-half", *every)
    again, seen = _kill_then_repeat(half, 7, capsys)
    assert seen == list(range(6, 13))
    assert again["resumed"] is True and again["objective"] == full["objective"]
    np.testing.assert_array_equal(
        np.load(tmp_path / "o-half" / "embedding.npy"),
        np.load(tmp_path / "o-full" / "embedding.npy"),
    )


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_run_refuses_other_options_spe_and_holdout(planted, tmp_path, capsys):
    d, _ = planted
    assert main(_embed_run(d, tmp_path / "r", tmp_path / "o", "--max-iter", "3")) == 0
    capsys.readouterr()
    cases = [
        (_embed_run(d, tmp_path / "r", tmp_path / "o", "--max-iter", "3", "--seed", "1"),
         "was started with other options (model.seed: run 0, now 1)"),
        (_embed_run(d, tmp_path / "s", tmp_path / "o", "--method", "spe"),
         "--run: checkpoints the npkl method's learning; --method spe runs in one go"),
        (_embed_run(d, tmp_path / "h", tmp_path / "o", "--holdout", "0.1"),
         "holdout: a checkpointed run (--run) learns on the whole edge list"),
    ]  # fmt: skip
    for argv, msg in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err, err


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_fit_and_pipeline_take_groups(planted, tmp_path, capsys):
    """`npkl fit --groups` (and `[input] groups` of a pipeline) sample the pairs of
    group_constraints from the memberships; exactly one source of pairs."""
    import npkl_dist as nk
    from npkl_flows._config import validate_config

    d, _ = planted
    argv = ["fit", "--edges", str(d / "E.npy"), "--groups", str(d / "groups.csv")]
    assert main([*argv, "--max-sweeps", "3", "--json", "--quiet"]) == 0
    s = json.loads(capsys.readouterr().out)
    from npkl_dist.embedding import group_constraints, read_memberships

    ref = group_constraints(read_memberships(d / "groups.csv", n_nodes=600), seed=0)
    assert s["n_constraints"] == ref.m and s["n_points"] == 600
    assert main([*argv, "--labels", str(d / "groups.csv"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "give exactly one of --constraints PATH" in err and "--groups PATH" in err
    with pytest.raises(nk.ValidationError, match='or groups = "memberships.csv"'):
        validate_config({"run": "r", "input": {"edges": str(d / "E.npy")}})
    inp = {"edges": str(d / "E.npy"), "groups": str(d / "groups.csv")}
    cfg = validate_config({"run": "r", "input": inp})
    assert cfg["input"]["groups"] == str(d / "groups.csv")


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
@pytest.mark.filterwarnings("ignore::npkl_dist.ConstraintWarning")
def test_npkl_embedding_of_a_few_labelled_nodes_uses_the_normalised_kernel(planted, tmp_path):
    """With 10% of the nodes' groups known, the free nodes' rows of V are short (they decay
    away from the labelled ones): the coordinates are the cosine-normalised kernel's, and
    the free nodes' groups are then predicted from the labelled ones (0.86 here; V's own
    principal coordinates gave 0.59)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    d, g = planted
    known = np.sort(np.random.default_rng(0).choice(600, 60, replace=False))
    (tmp_path / "g.csv").write_text("node,group\n" + "".join(f"{i},{g[i]}\n" for i in known))
    argv = ["embed", "--edges", str(d / "E.npy"), "--groups", str(tmp_path / "g.csv")]
    argv += ["--method", "npkl", "--dim", "6", "--out", str(tmp_path / "o"), "--no-plot"]
    assert main([*argv, "--quiet"]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["normalized_kernel"] is True
    Z = np.load(tmp_path / "o" / "embedding.npy")
    free = np.setdiff1d(np.arange(600), known)
    clf = LogisticRegression(max_iter=1000).fit(Z[known], g[known])
    assert f1_score(g[free], clf.predict(Z[free]), average="micro") > 0.8


# ---- npkl embed --manifold spectral ------------------------------------------------------
def test_spectral_manifold_equals_a_dense_reference():
    """The kNN graph of the row-normalised leading eigenvectors of D^-1/2 S D^-1/2, the first
    left out: equal to the same graph from numpy's dense eigh (distances between the rows do
    not depend on the eigenvectors' signs)."""
    import scipy.sparse as sp

    import npkl_dist as nk
    from npkl_dist.job._embed import spectral_manifold

    edges, g = nk.planted_partition(300, 3, degree=12.0, mix=0.6, seed=5)
    S = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(300, 300))
    S = (S + S.T).tocsr()
    got = spectral_manifold(S, dim=8, k=6, seed=0).S
    d = np.asarray(S.sum(axis=1)).ravel()
    M = (S.multiply(1 / np.sqrt(d)[:, None]).multiply(1 / np.sqrt(d)[None, :])).toarray()
    w, Q = np.linalg.eigh(M)
    Phi = Q[:, ::-1][:, 1:9]
    X = Phi / np.linalg.norm(Phi, axis=1, keepdims=True)
    want = nk.knn_graph(X, k=6, seed=0, warn=False).S.tocsr()
    assert (got != 0).nnz == (want != 0).nnz and abs((got != 0) - (want != 0)).nnz == 0
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-6, atol=1e-9)
    # with the informative eigenvectors (groups - 1 of them), the manifold joins a node with
    # its own group far more often than the graph's edges do
    same = lambda A: np.mean(g[sp.triu(A, 1).tocoo().row] == g[sp.triu(A, 1).tocoo().col])  # noqa: E731
    edges, g = nk.planted_partition(300, 3, degree=12.0, mix=0.3, seed=5)
    S = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(300, 300))
    S = (S + S.T).tocsr()
    assert same(spectral_manifold(S, dim=2, k=6).S) > same(S) + 0.2


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_manifold_spectral_in_process_and_in_a_run(planted, tmp_path, capsys):
    """--manifold spectral: npkl learns over the manifold's graph, in one go and in a
    checkpointed run (which reads the manifold's edge file written to --out); both learn the
    same pairs over the same graph, so their embeddings agree; other methods refuse it."""
    d, _ = planted
    base = [
        "embed", "--edges", str(d / "E.npy"), "--groups", str(d / "groups.csv"),
        "--method", "npkl", "--max-iter", "12", "--dim", "6", "--no-plot", "--json",
        "--quiet", "--manifold", "spectral",
    ]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["manifold"]["kind"] == "spectral" and one["manifold"]["n_edges"] > 0
    assert main([*base, "--out", str(tmp_path / "b"), "--run", str(tmp_path / "run")]) == 0
    two = json.loads(capsys.readouterr().out)
    assert (tmp_path / "b" / "manifold_edges.npy").exists()
    assert two["manifold"] == one["manifold"]
    Za, Zb = np.load(tmp_path / "a" / "embedding.npy"), np.load(tmp_path / "b" / "embedding.npy")
    np.testing.assert_allclose(np.abs(Za), np.abs(Zb), rtol=1e-6, atol=1e-8)
    with pytest.raises(SystemExit):
        main([*base[:-2], "--manifold", "bogus", "--out", str(tmp_path / "c")])
    capsys.readouterr()
    rc = main(
        ["embed", "--edges", str(d / "E.npy"), "--method", "spe", "--manifold", "spectral",
         "--out", str(tmp_path / "d"), "--no-plot", "--quiet"]
    )  # fmt: skip
    assert rc != 0
    assert "manifold: only method 'npkl' learns over a manifold" in capsys.readouterr().err


def test_manifold_errors_name_the_argument(planted, tmp_path):
    """In Python: a checkpointed run over the spectral manifold needs ``out`` (its graph is
    kept there); a graph too small for the manifold's neighbours says to use the graph."""
    import scipy.sparse as sp

    from npkl_dist import ValidationError
    from npkl_dist.job._embed import embed_job, spectral_manifold

    d, _ = planted
    with pytest.raises(ValidationError, match=r"^out: a checkpointed run over the spectral"):
        embed_job(
            edges=str(d / "E.npy"), method="npkl", groups=str(d / "groups.csv"),
            manifold="spectral", learn_npkl=lambda **kw: None,
        )  # fmt: skip
    ring = sp.diags([np.ones(9), np.ones(9)], [1, -1], shape=(10, 10)).tocsr()
    with pytest.raises(ValidationError, match=r"^edges: 10 nodes; the spectral manifold needs"):
        spectral_manifold(ring)
    from npkl_dist._errors import interface

    with interface("toml"), pytest.raises(ValidationError, match=r'\[graph\] manifold = "graph"$'):
        spectral_manifold(ring)  # as npkl run reports it for a configuration


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_pipeline_graph_manifold_spectral_learns_as_npkl_embed(planted, tmp_path):
    """``[graph] manifold = "spectral"`` in a pipeline configuration: the graph stage stores
    spectral_manifold of the given graph, and the fit over it equals, bitwise, the factor
    ``npkl embed --manifold spectral --run`` learns from the manifold's edge file; the
    configuration's errors name the section and the fix."""
    import argparse

    import scipy.sparse as sp

    from npkl_dist import ValidationError
    from npkl_dist import store as st
    from npkl_dist.job._embed import spectral_manifold, write_edges
    from npkl_flows._config import validate_config
    from npkl_flows._embed import _learn_in_run
    from npkl_flows._fit import run_fit_stages

    d, _ = planted
    raw = {
        "run": str(tmp_path / "pipe"),
        "input": {"edges": str(d / "E.npy"), "groups": str(d / "groups.csv")},
        "graph": {"manifold": "spectral"},
        "model": {"solver": "bcd", "loss": "square", "seed": 0, "max_sweeps": 12},
        "output": {"plots": False, "files": False},
    }
    summary, V, _ = run_fit_stages(validate_config(raw, base_dir=str(d)))
    E = np.load(d / "E.npy")
    S = sp.coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(600, 600))
    want = spectral_manifold((S + S.T).tocsr(), seed=0).S
    with st.RunStore.open(st.resolve_run(raw["run"]), mode="r") as rs:
        stored = rs.read_graph()
        meta = rs.stages()["graph"]["info"]
    assert abs(stored - want).max() == 0 and stored.nnz == want.nnz
    assert meta["manifold"] == "spectral" and meta["given_n_edges"] == len(E)
    assert meta["n_edges"] == want.nnz // 2
    ns = argparse.Namespace(
        method="npkl", edges=str(d / "E.npy"), n_points=None, labels=None,
        groups=str(d / "groups.csv"), seed=0, max_iter=12, run=str(tmp_path / "emb"), quiet=True,
        checkpoint_every=1, n_must=None, n_cannot=None,
    )  # fmt: skip
    path = write_edges(want, tmp_path / "manifold_edges.npy")
    V2, _, _ = _learn_in_run(ns)(edges=str(path))
    np.testing.assert_array_equal(V, V2)

    feats = {**raw, "input": {"features": str(d / "X.npy"), "groups": str(d / "groups.csv")}}
    np.save(d / "X.npy", np.zeros((600, 2)))
    with pytest.raises(ValidationError, match=r"\[graph\]: manifold = 'spectral' is built from a"):
        validate_config(feats, base_dir=str(d))
    spe = {**raw, "input": {"edges": str(d / "E.npy")}, "model": {"solver": "spe"}}
    with pytest.raises(ValidationError, match=r"\[graph\]: solver = 'spe' embeds the given"):
        validate_config(spe, base_dir=str(d))
    with pytest.raises(ValidationError, match=r"manifold"):
        validate_config({**raw, "graph": {"manifold": "bogus"}}, base_dir=str(d))


@pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning")
def test_n_must_n_cannot_set_the_pairs(planted, tmp_path, capsys):
    """`--n-must` / `--n-cannot`: npkl's pairs drawn from the groups, in one go and in a run
    (the pipeline's [input] n_must / n_cannot); a run keeps its counts; other methods refuse."""
    from npkl_dist import store as st
    from npkl_dist.embedding import group_constraints, read_memberships

    d, _ = planted
    ref = group_constraints(read_memberships(d / "groups.csv", n_nodes=600), 40, 25, seed=0)
    counts = ["--n-must", "40", "--n-cannot", "25"]
    argv = _embed_run(d, tmp_path / "r", tmp_path / "o", *counts)
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["n_constraints"] == 65
    with st.RunStore.open(st.resolve_run(str(tmp_path / "r")), mode="r") as rs:
        got = rs.read_inputs()["constraints"]
    for a in ("i", "j", "t"):
        np.testing.assert_array_equal(getattr(got, a), getattr(ref, a))
    inproc = [a for a in argv if a not in ("--run", str(tmp_path / "r"))]
    assert main(inproc) == 0
    assert json.loads(capsys.readouterr().out)["n_constraints"] == 65
    cases = [
        (_embed_run(d, tmp_path / "r", tmp_path / "o", "--n-must", "41", "--n-cannot", "25"),
         "was started with other options (input.n_must: run 40, now 41)"),
        (["embed", "--edges", str(d / "E.npy"), "--n-must", "4", "--out", str(tmp_path / "s")],
         "n_must: only method 'npkl' learns from pairs; drop --n-must for method 'spe'"),
    ]  # fmt: skip
    for argv, msg in cases:
        assert main([*argv, "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err, err
    from npkl_dist import ValidationError
    from npkl_dist.job._embed import embed_job

    with pytest.raises(ValidationError, match=r"^n_cannot: expected an integer >= 0, got -1"):
        embed_job(edges=str(d / "E.npy"), method="npkl", groups=str(d / "groups.csv"), n_cannot=-1)
    with pytest.raises(SystemExit) as exc:  # argparse's own usage error
        main([*inproc, "--n-cannot", "-1"])
    assert exc.value.code == 2
    assert "--n-cannot: expected an integer >= 0, got -1" in capsys.readouterr().err
