"""`npkl fit --solver inductive` and `npkl transform`: the JSON contract, the files, the run
store, chunked output equal to the model, one-line errors."""

import json
import logging

import numpy as np
import pytest
from sklearn.datasets import load_digits

from npkl_dist.job._inductive import load_model
from npkl_flows.cli import main


@pytest.fixture(scope="module")
def digits_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("digits")
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    tr, te = perm[:1000], perm[1000:]
    np.save(d / "X.npy", X[tr])
    np.save(d / "y.npy", y[tr])
    np.save(d / "Xnew.npy", X[te])
    np.save(d / "ynew.npy", y[te])
    return d


def test_fit_inductive_json_files_and_transform(digits_files, tmp_path, capsys):
    d = digits_files
    out = tmp_path / "out"
    argv = ["fit", "--solver", "inductive", "--features", str(d / "X.npy"), "--labels"]
    argv += [str(d / "y.npy"), "--eval-labels", str(d / "y.npy"), "--landmarks", "100"]
    argv += ["--max-sweeps", "30", "--out", str(out), "--json", "--quiet"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (out / "embedding.png").stat().st_size > 10_000
    for key in ("objective", "fit_seconds", "transform_seconds", "n_points", "rank", "metrics"):
        assert key in summary, key
    assert summary["n_points"] == 1000 and summary["solver"] == "inductive"
    assert summary["metrics"]["rand_accuracy"] > 0.9
    for f in ("model.npz", "embedding.npy", "clusters.npy", "summary.json"):
        assert (out / f).is_file(), f
    model = load_model(out)
    Z = np.load(out / "embedding.npy")
    np.testing.assert_array_equal(Z, model.transform(np.load(d / "X.npy")))
    # new points, from the --out directory, in chunks
    new = tmp_path / "new"
    argv = ["transform", str(out), "--features", str(d / "Xnew.npy"), "--out", str(new)]
    assert main([*argv, "--chunk-rows", "300", "--json", "--quiet"]) == 0
    tr = json.loads(capsys.readouterr().out)
    assert tr["n_points"] == 797 and tr["chunks"] == 2  # 300 rounds up to 512 rows
    np.testing.assert_array_equal(
        np.load(new / "embedding.npy"), model.transform(np.load(d / "Xnew.npy"))
    )
    # and to a Zarr array: a rerun computes nothing
    zout = str(tmp_path / "z.zarr")
    argv = ["transform", str(out / "model.npz"), "--features", str(d / "Xnew.npy")]
    assert main([*argv, "--out", zout, "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks_computed"] == 1
    assert main([*argv, "--out", zout, "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks_computed"] == 0


def test_fit_inductive_into_a_run_then_transform_by_run_id(digits_files, tmp_path, capsys):
    d = digits_files
    argv = ["fit", "--solver", "inductive", "--features", str(d / "X.npy"), "--labels"]
    argv += [str(d / "y.npy"), "--landmarks", "50", "--max-sweeps", "5", "--run", "ind1"]
    assert main([*argv, "--quiet"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("inductive kernel (logdet, rbf): objective")
    new = tmp_path / "new"
    argv = ["transform", "ind1", "--features", str(d / "Xnew.npy"), "--out", str(new)]
    assert main([*argv, "--quiet"]) == 0
    assert "embedded 797 points" in capsys.readouterr().out
    assert np.load(new / "embedding.npy").shape[0] == 797


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--edges", "E.npy"], "--edges: --solver inductive learns a kernel on feature rows"),
        (["--landmarks", "5000"], "landmarks: 5000 is larger than the number of points"),
        (["--gamma", "cv"], "--gamma: cv is not available for --solver inductive"),
    ],
)
def test_fit_inductive_errors_are_one_line(digits_files, capsys, extra, message):
    d = digits_files
    argv = ["fit", "--solver", "inductive", "--labels", str(d / "y.npy"), "--quiet"]
    if "--edges" not in extra:
        argv += ["--features", str(d / "X.npy")]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err


def test_transform_errors_name_both_widths_and_missing_models(digits_files, tmp_path, capsys):
    d = digits_files
    out = tmp_path / "m"
    argv = ["fit", "--solver", "inductive", "--features", str(d / "X.npy"), "--labels"]
    argv += [str(d / "y.npy"), "--landmarks", "20", "--max-sweeps", "2", "--out", str(out)]
    assert main([*argv, "--quiet", "--no-plot"]) == 0
    np.save(tmp_path / "narrow.npy", np.zeros((5, 10)))
    argv = ["transform", str(out), "--features", str(tmp_path / "narrow.npy")]
    assert main([*argv, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "fitted on 64 features" in err and "has 10" in err and "\n" not in err
    argv = ["transform", str(tmp_path / "nothing"), "--features", str(d / "Xnew.npy")]
    assert main([*argv, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no inductive model at" in err and "\n" not in err


def test_transform_on_dask_equals_in_process(digits_files, tmp_path, capsys, caplog):
    """`npkl transform --executor dask` (the executor's own LocalCluster, closed in order):
    the Zarr output equals the in-process .npy bitwise, and stderr holds no traceback."""
    import zarr

    d = digits_files
    out = tmp_path / "m"
    argv = ["fit", "--solver", "inductive", "--features", str(d / "X.npy"), "--labels"]
    argv += [str(d / "y.npy"), "--landmarks", "30", "--max-sweeps", "3", "--out", str(out)]
    assert main([*argv, "--quiet", "--no-plot"]) == 0
    zout = str(tmp_path / "z.zarr")
    argv = ["transform", str(out), "--features", str(d / "Xnew.npy"), "--out", zout]
    assert main([*argv, "--executor", "dask", "--chunk-rows", "256", "--quiet"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    # the scattered model is released before the cluster closes (else the scheduler logs the
    # loss of scattered data at ERROR, which a console handler prints)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    model = load_model(out)
    np.testing.assert_array_equal(
        zarr.open_group(zout)["z"][:], model.transform(np.load(d / "Xnew.npy"))
    )


def test_fit_inductive_takes_groups(digits_files, tmp_path, capsys):
    """--groups: the pairs of group_constraints on the memberships, as npkl fit's other
    solvers; here every other digit's class as its one group."""
    from npkl_dist.embedding import group_constraints, read_memberships

    d = digits_files
    y = np.load(d / "y.npy")
    half = np.arange(0, y.size, 2)
    (tmp_path / "g.csv").write_text("node,group\n" + "".join(f"{i},{y[i]}\n" for i in half))
    argv = ["fit", "--solver", "inductive", "--features", str(d / "X.npy"), "--groups"]
    argv += [str(tmp_path / "g.csv"), "--eval-labels", str(d / "y.npy"), "--landmarks", "100"]
    assert main([*argv, "--max-sweeps", "10", "--json", "--quiet"]) == 0
    s = json.loads(capsys.readouterr().out)
    ref = group_constraints(read_memberships(tmp_path / "g.csv", n_nodes=1000), seed=0)
    assert s["n_constraints"] == ref.m
    assert s["metrics"]["ari"] > 0.5, s["metrics"]
