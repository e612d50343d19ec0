"""The pipeline with ``[model] solver = "inductive"``: no graph, a learn stage that keeps the
model in the run store, a transform stage of row-chunk tasks that a rerun completes (only the
missing chunks), in-process or on Dask with bitwise the same z; evaluate, extend and report on
z; `npkl transform RUN` and `npkl status` on such a run; the configuration's one-line errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("zarr")

from npkl_dist import ValidationError  # noqa: E402
from npkl_dist import store as st  # noqa: E402


def _data(tmp_path, n=1100, n_new=40, seed=0):
    """Eight Gaussian classes in 6-D, only 12% of the points labelled; new points from the
    same classes and a few far away."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, 6)) * 2.5
    y = rng.integers(0, 8, n + n_new)
    X = centres[y] + rng.standard_normal((n + n_new, 6))
    part = np.where(rng.random(n) < 0.12, y[:n], -1)
    np.save(tmp_path / "X.npy", X[:n])
    np.save(tmp_path / "y.npy", part.astype(np.int64))
    np.save(tmp_path / "ytrue.npy", y[:n].astype(np.int64))
    Xnew = X[n:].copy()
    Xnew[:3] += 1e3  # far from every landmark
    np.save(tmp_path / "Xnew.npy", Xnew)
    return X[:n], y[:n], Xnew


def _cfg(tmp_path, **over):
    from npkl_flows._config import validate_config

    raw = {
        "run": str(tmp_path / "run"),
        "input": {"features": "X.npy", "labels": "y.npy", "eval_labels": "ytrue.npy"},
        "model": {"solver": "inductive", "seed": 4},
        "inductive": {"landmarks": 48, "chunk_rows": 256},
        "output": {"out": str(tmp_path / "report"), "plots": False},
        "extend": {"features": "Xnew.npy"},
    }
    for k, v in over.items():
        raw[k] = {**raw.get(k, {}), **v}
    return validate_config(raw, base_dir=str(tmp_path))


def _run(cfg, client=None, only=None):
    from npkl_flows import _stages

    rs = st.RunStore.open(st.resolve_run(cfg["run"]), mode="a") if _exists(cfg) else None
    if rs is None:
        rs = st.RunStore.create(st.resolve_run(cfg["run"]), config={"pipeline": cfg})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the far new points' warning: tested below
            ctx = _stages.Context(rs, cfg, quiet=True, client=client)
            out = _stages.run_stages(ctx, only=only)
        stages = rs.stages()
        return out, rs.read_results() if "results" in stages else None, stages
    finally:
        rs.close()


def _exists(cfg):
    try:
        st.RunStore.open(st.resolve_run(cfg["run"]), mode="r").close()
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inductive_run")
    X, y, Xnew = _data(tmp)
    cfg = _cfg(tmp)
    out, res, stages = _run(cfg)
    return tmp, cfg, X, y, Xnew, out, res, stages


def test_stages_fit_transform_evaluate_extend(finished):
    from npkl_dist.job._inductive import load_model

    tmp, cfg, X, y, Xnew, out, res, stages = finished
    assert stages["graph"]["info"]["source"] is None  # no graph built
    model = load_model(cfg["run"])  # what `npkl transform RUN` loads
    assert model.info["landmarks"] == 48
    # the stored embedding is z of every training row, bitwise the model's transform
    np.testing.assert_array_equal(res["embedding"], model.transform(X))
    tr = out["transform"]
    assert tr["n_chunks"] == 5 and tr["chunks_reused"] == 0 and tr["n_rows"] == X.shape[0]
    # clustering on z recovers 8 classes from 12% labels
    assert stages["evaluate"]["info"]["metrics"]["ari"] > 0.8
    # new points: the model's z, the 3 far ones flagged, clusters by the nearest centre
    np.testing.assert_array_equal(res["extended_embedding"], model.transform(Xnew))
    assert res["extended_far"].tolist() == [True] * 3 + [False] * (Xnew.shape[0] - 3)
    assert res["extended_clusters"].shape == (Xnew.shape[0],)
    summary = json.loads((tmp / "report" / "summary.json").read_text())
    assert summary["solver"] == "inductive" and summary["landmarks"] == 48
    assert summary["regularizer"] == "logdet" and summary["stages"]["transform"]["seconds"] >= 0


def test_transform_resumes_missing_chunks_only(tmp_path, monkeypatch, finished):
    """A crash in the middle of the transform: the rerun computes only the chunks not yet
    written, and the result is bitwise the uninterrupted run's."""
    from npkl_flows import _stages_inductive

    _data(tmp_path)
    cfg = _cfg(tmp_path)
    real = _stages_inductive.transform_block_to_store
    calls = []

    def dying(model, store, start, stop):
        if len(calls) == 3:
            raise RuntimeError("worker lost")
        calls.append(start)
        return real(model, store, start, stop)

    monkeypatch.setattr(_stages_inductive, "transform_block_to_store", dying)
    with pytest.raises(RuntimeError, match="worker lost"):
        _run(cfg)
    monkeypatch.setattr(_stages_inductive, "transform_block_to_store", real)
    out, res, _ = _run(cfg)
    assert out["learn"]["skipped"] and not out["transform"]["skipped"]
    assert out["transform"]["chunks_reused"] == 3
    np.testing.assert_array_equal(res["embedding"], finished[6]["embedding"])
    np.testing.assert_array_equal(res["extended_embedding"], finished[6]["extended_embedding"])


def test_dask_transform_equals_in_process(tmp_path, finished):
    distributed = pytest.importorskip("distributed")
    _data(tmp_path)
    cfg = _cfg(tmp_path)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        out, res, _ = _run(cfg, client=client)
    assert out["transform"]["executor"] == "dask"
    np.testing.assert_array_equal(res["embedding"], finished[6]["embedding"])


def test_status_and_damaged_model(tmp_path, finished):
    from npkl_flows import _stages, _stages_inductive
    from npkl_flows._status import run_status

    cfg = finished[1]
    s = run_status(st.resolve_run(cfg["run"]))
    assert s["stage"] == "finished" and "transform" in s["stages_done"]
    # the stored model is checked against the learn stage's sha256
    _data(tmp_path)
    cfg2 = _cfg(tmp_path)
    _run(cfg2, only=["ingest", "graph", "plan", "learn"])
    rs = st.RunStore.open(st.resolve_run(cfg2["run"]), mode="a")
    try:
        data = bytearray(rs._objects.read(_stages_inductive.RUN_MODEL_KEY))
        data[-20] ^= 1
        rs._objects.write_atomic(_stages_inductive.RUN_MODEL_KEY, bytes(data))
        with pytest.raises(st.StoreDamagedError, match="model.npz does not match") as e:
            _stages.transform(_stages.Context(rs, cfg2, quiet=True))
        assert "--redo learn" in str(e.value)
        assert "learn" in rs.verify_stages()  # `npkl status` lists the damage
    finally:
        rs.close()
    from npkl_dist.job._inductive import load_model

    with pytest.raises(st.StoreDamagedError, match="--redo learn"):
        load_model(cfg2["run"])  # `npkl transform RUN` refuses it too


def test_npkl_transform_of_a_pipeline_run(tmp_path, finished):
    """`npkl transform RUN` embeds new rows with the run's model: bitwise its stored z."""
    from npkl_flows.cli import main

    cfg, X = finished[1], finished[2]
    np.save(tmp_path / "rows.npy", X[:300])
    argv = ["transform", cfg["run"], "--features", str(tmp_path / "rows.npy")]
    assert main([*argv, "--out", str(tmp_path / "t"), "--quiet"]) == 0
    z = np.load(tmp_path / "t" / "embedding.npy")
    np.testing.assert_array_equal(z, finished[6]["embedding"][:300])


@pytest.mark.parametrize(
    "over, match",
    [
        (
            {"input": {"features": None, "edges": "E.csv"}},
            r"solver = 'inductive' learns a kernel on features",
        ),
        ({"model": {"gamma": "cv"}}, r"gamma = 'cv' is not available with solver = 'inductive'"),
        ({"inductive": {"bandwidth": "wide"}}, r"bandwidth = 'wide'; expected a number > 0"),
        ({"inductive": {"bandwidth": -1.0}}, r"bandwidth = -1.0; expected a number > 0"),
        ({"inductive": {"landmarks": 0}}, r"landmarks = 0; expected an integer >= 1"),
        ({"inductive": {"regularizer": "logdt"}}, r"did you mean 'logdet'"),
    ],
)
def test_config_errors_one_line(tmp_path, over, match):
    _data(tmp_path)
    (tmp_path / "E.csv").write_text("0,1\n")
    if over.get("input", {}).get("features", 0) is None:
        over = {**over, "extend": {"features": None}}
    with pytest.raises(ValidationError, match=match) as e:
        _cfg(tmp_path, **over)
    assert "\n" not in str(e.value)


def test_default_cap_follows_the_regularizer(tmp_path):
    _data(tmp_path)
    assert _cfg(tmp_path)["model"]["max_sweeps"] == 1000
    assert _cfg(tmp_path, inductive={"regularizer": "trace"})["model"]["max_sweeps"] == 5000
    assert _cfg(tmp_path, inductive={"bandwidth": 2})["inductive"]["bandwidth"] == 2.0
