"""The pipeline: configuration validation, the stages over a run store, status and extend.

The stages run here without Prefect (they are plain functions); the Prefect flow itself, a
crash and a resume run in tests/flows/test_e2e.py (heavy).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("zarr")

from npkl_dist import ValidationError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _data(tmp_path, n=400, n_new=30, seed=0):
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    rng = np.random.default_rng(seed)
    pick = rng.permutation(X.shape[0])[: n + n_new]
    np.save(tmp_path / "X.npy", X[pick[:n]])
    np.save(tmp_path / "y.npy", y[pick[:n]].astype(np.int64))
    np.save(tmp_path / "Xnew.npy", X[pick[n:]])
    np.save(tmp_path / "ynew.npy", y[pick[n:]].astype(np.int64))
    return X[pick[:n]], y[pick[:n]], X[pick[n:]]


def _raw(tmp_path, **over):
    raw = {
        "run": str(tmp_path / "run"),
        "input": {"features": "X.npy", "labels": "y.npy", "eval_labels": "y.npy"},
        "model": {"max_sweeps": 15, "seed": 3},
        "execution": {"checkpoint_every": 4},
        "output": {"out": str(tmp_path / "report")},
        "extend": {"features": "Xnew.npy"},
    }
    for k, v in over.items():
        raw[k] = {**raw.get(k, {}), **v} if isinstance(v, dict) else v
    return raw


def _cfg(tmp_path, **over):
    from npkl_flows._config import validate_config

    return validate_config(_raw(tmp_path, **over), base_dir=str(tmp_path))


# ------------------------------------------------------------------ configuration
def test_config_defaults_and_paths(tmp_path):
    _data(tmp_path)
    cfg = _cfg(tmp_path)
    assert cfg["input"]["features"] == str(tmp_path / "X.npy")
    assert cfg["graph"]["knn"] == 5 and cfg["model"]["solver"] == "bcd"
    assert cfg["execution"]["executor"] == "auto"


@pytest.mark.parametrize(
    "over, match",
    [
        ({"model": {"los": "square"}}, r"\[model\]: unknown key 'los'; did you mean 'loss'"),
        ({"model": {"loss": "sqare"}}, r"loss = 'sqare' is not one of .*did you mean 'square'"),
        ({"model": {"max_sweeps": "ten"}}, r"max_sweeps = 'ten' has type str; expected int"),
        ({"model": {"max_sweeps": 0}}, r"max_sweeps = 0; expected an integer >= 1"),
        ({"graph": {"delta": -1.0}}, r"delta = -1.0; expected a finite number > 0"),
        ({"input": {"features": "missing.npy"}}, r"features = '.*missing.npy' does not exist"),
        ({"input": {"edges": "X.npy"}}, r"exactly one of features"),
        ({"input": {"constraints": "y.npy"}}, r"exactly one of constraints"),
        ({"execution": {"executor": "inprocess", "dask": "tcp://h:8786"}}, r"executor = \"dask\""),
        ({"execution": {"dask": "nonsense"}}, r"neither a scheduler address"),
        ({"model": {"solver": "admm", "loss": "hinge"}}, r"fits the square loss only"),
        ({"model": {"anderson": 5}}, r"anderson = 5 accelerates solver = 'admm' only"),
        (
            {"model": {"solver": "admm", "anderson": -1}},
            r"anderson = -1; expected an integer >= 0",
        ),
        ({"storage": {"options": {"anon": True}}}, r"options apply to store URLs only"),
        ({"colour": {}}, r"unknown top-level key 'colour'"),
        ({"output": {"normalize_kernel": "yes"}}, r"normalize_kernel = 'yes' has type str"),
        ({"output": {"cluster_method": "pckmeans"}}, r"cluster_method = 'pckmeans' is not one of"),
    ],
)
def test_config_errors_name_key_value_and_fix(tmp_path, over, match):
    from npkl_flows._config import validate_config

    _data(tmp_path)
    with pytest.raises(ValidationError, match=match):
        validate_config(_raw(tmp_path, **over), source="p.toml", base_dir=str(tmp_path))


def test_config_needs_run_and_reads_toml(tmp_path):
    from npkl_flows._config import load_config, validate_config

    with pytest.raises(ValidationError, match=r"missing run = "):
        validate_config({"input": {"dataset": "iris"}})
    (tmp_path / "c.toml").write_text('run = "x"\n[input]\ndataset = "iris"\n[model]\nseed = 2\n')
    cfg = load_config(tmp_path / "c.toml")
    assert cfg["input"]["features"] == "dataset:iris" and cfg["model"]["seed"] == 2
    (tmp_path / "bad.toml").write_text("run = \n")
    with pytest.raises(ValidationError, match="not valid TOML"):
        load_config(tmp_path / "bad.toml")


def test_expand_run():
    from npkl_flows._config import expand_run

    assert expand_run("a") == "a"
    got = expand_run("runs/a-{date}-{flow_run}", "brave-owl")
    assert got.startswith("runs/a-20") and got.endswith("-brave-owl")


# ------------------------------------------------------------------ stages


@contextlib.contextmanager
def _learn_dies_at(sweep, exc, check=None):
    """Patch the store checkpointer so that learning stops (raises ``exc``) right after the
    checkpoint of ``sweep`` is committed, like a process killed there; ``check(state)`` runs
    first."""
    from npkl_dist.store import StoreCheckpointer

    orig = StoreCheckpointer.on_sweep

    def dying(self, state, session):
        orig(self, state, session)
        if state["sweep"] == sweep:
            if check is not None:
                check(state)
            raise exc

    StoreCheckpointer.on_sweep = dying
    try:
        with pytest.raises(exc), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        StoreCheckpointer.on_sweep = orig


def _run_stages(cfg, create=True):
    from npkl_dist import store as st
    from npkl_flows import _stages

    url = st.resolve_run(cfg["run"])
    if create:
        rs = st.RunStore.create(url, config={"pipeline": cfg})
    else:
        rs = st.RunStore.open(url, mode="a")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _stages.run_stages(_stages.Context(rs, cfg, quiet=True))
    finally:
        rs.close()


def test_scale_standard_runs_as_on_prestandardised_features(tmp_path):
    """[graph] scale = "standard": the graph is built from the standardised columns, the
    stored features stay as given, and new points are scaled with the training columns'
    parameters, in the pipeline's extend stage and in `npkl extend` alike. The run equals,
    bit for bit, one on features standardised beforehand with the same parameters."""
    from npkl_dist import store as st
    from npkl_dist.graph._graph import apply_feature_scale, feature_scale

    X, y, Xnew = _data(tmp_path)
    cols = np.linspace(0.01, 1000.0, X.shape[1])  # columns on wildly different scales
    raw, raw_new = X * cols + 5.0, Xnew * cols + 5.0
    params = feature_scale(raw, "standard")
    np.save(tmp_path / "raw.npy", raw)
    np.save(tmp_path / "raw_new.npy", raw_new)
    np.save(tmp_path / "pre.npy", apply_feature_scale(raw, params))
    np.save(tmp_path / "pre_new.npy", apply_feature_scale(raw_new, params))
    a = _cfg(
        tmp_path,
        run=str(tmp_path / "a"),
        graph={"scale": "standard"},
        input={"features": "raw.npy"},
        extend={"features": "raw_new.npy"},
    )
    b = _cfg(
        tmp_path,
        run=str(tmp_path / "b"),
        input={"features": "pre.npy"},
        extend={"features": "pre_new.npy"},
        output={"out": str(tmp_path / "report_b")},
    )
    _run_stages(a)
    _run_stages(b)
    with st.RunStore.open(a["run"], mode="r") as ra, st.RunStore.open(b["run"], mode="r") as rb:
        A, B = ra.read_results(), rb.read_results()
        assert np.array_equal(ra.read_inputs()["features"], raw)  # stored as given
        ginfo = ra.stages()["graph"]["info"]
    assert ginfo["scale"]["kind"] == "standard"
    assert np.allclose(ginfo["scale"]["std"], raw.std(axis=0))
    for key in ("embedding", "clusters", "extended_embedding", "extended_clusters"):
        assert np.array_equal(A[key], B[key]), key
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["graph"]["scale"] == "standard"
    # `npkl extend` in a new process (no cached index): the new rows scaled alike
    p = _cli("extend", a["run"], "--features", tmp_path / "raw_new.npy", "--out", tmp_path / "ext")
    assert p.returncode == 0, p.stderr
    assert np.array_equal(
        np.load(tmp_path / "ext" / "extended_embedding.npy"), A["extended_embedding"]
    )


def test_unscaled_columns_warn_in_the_graph_stage(tmp_path):
    from npkl_dist import GraphWarning
    from npkl_dist import store as st
    from npkl_flows import _stages

    X, y, Xnew = _data(tmp_path)
    X = X.copy()
    X[:, 3] = 1e4 * X[:, 3] + 1e3  # one column dwarfs the others
    np.save(tmp_path / "X.npy", X)
    cfg = _cfg(tmp_path)
    rs = st.RunStore.create(st.resolve_run(cfg["run"]), config={"pipeline": cfg})
    from npkl_dist._errors import interface

    try:
        # as under `npkl run` (a configuration's keys are the fix's syntax)
        with interface("toml"), pytest.warns(GraphWarning) as rec:  # (components warn too)
            _stages.run_stages(_stages.Context(rs, cfg, quiet=True), only=["ingest", "graph"])
    finally:
        rs.close()
    text = [str(w.message) for w in rec if "standard deviation" in str(w.message)]
    assert len(text) == 1 and "column 3 has a standard deviation" in text[0]
    assert '[graph] scale = "standard"' in text[0]


def test_evaluate_chooses_the_normalised_kernel_when_free_rows_are_short(tmp_path):
    """Issue 72's default fit: on a planted partition with 3% labelled, the evaluate stage
    without [output] normalize_kernel clusters the unit rows (the free nodes' rows of V are
    short; V itself lumps them), records that it did, and recovers the groups; `false` keeps
    V's rows (ARI < 0.1; the warning: tests/job/test_clustering.py)."""
    import npkl_dist as nk

    edges, y = nk.planted_partition(3000, 20, 20.0, 0.3, seed=0)
    part = np.where(np.random.default_rng(0).random(y.size) < 0.03, y, -1)
    np.save(tmp_path / "E.npy", edges)
    np.save(tmp_path / "p.npy", part)
    np.save(tmp_path / "y.npy", y)
    inp = {"features": None, "edges": "E.npy", "labels": "p.npy", "eval_labels": "y.npy"}
    base = dict(input=inp, extend={"features": None}, model={"max_sweeps": 60, "seed": 0})
    res = _run_stages(_cfg(tmp_path, **base))
    assert res["evaluate"]["normalize_kernel"] is True
    assert res["evaluate"]["metrics"]["ari"] > 0.8
    out = {"normalize_kernel": False, "out": str(tmp_path / "report-raw")}
    res = _run_stages(_cfg(tmp_path, run=str(tmp_path / "raw"), output=out, **base))
    assert res["evaluate"]["normalize_kernel"] is False
    assert res["evaluate"]["metrics"]["ari"] < 0.1


def test_stages_cluster_with_the_normalised_kernel(tmp_path):
    """[output] normalize_kernel: the evaluate stage clusters the unit rows of V (the same
    labels as pck_kmeans(V, k, constraints, normalize=True), the default with constraints,
    or kernel_kmeans(V, k, normalize=True) with cluster_method = "kmeans"), says so in the
    summary, and the extend stage assigns the new points to the unit rows' centres."""
    from npkl_dist import kernel_kmeans, pck_kmeans
    from npkl_dist import store as st
    from npkl_dist.evaluate import nearest_centre

    _data(tmp_path)
    cfg = _cfg(tmp_path, output={"normalize_kernel": True})
    res = _run_stages(cfg)
    assert res["evaluate"]["normalize_kernel"] is True
    assert res["evaluate"]["cluster_method"] == "pck"
    with st.RunStore.open(cfg["run"], mode="r") as rs:
        out = rs.read_results()
        cons = rs.read_inputs()["constraints"]
    V, k = out["embedding"], int(out["clusters"].max()) + 1
    assert np.array_equal(out["clusters"], pck_kmeans(V, k, cons, seed=3, normalize=True))
    km = {"normalize_kernel": True, "cluster_method": "kmeans", "out": str(tmp_path / "km")}
    cfg_km = _cfg(tmp_path, run=str(tmp_path / "km-run"), output=km)
    assert _run_stages(cfg_km)["evaluate"]["cluster_method"] == "kmeans"
    with st.RunStore.open(cfg_km["run"], mode="r") as rs:
        km_out = rs.read_results()
    assert np.array_equal(
        km_out["clusters"], kernel_kmeans(km_out["embedding"], k, seed=3, normalize=True)
    )
    assert np.array_equal(
        out["extended_clusters"],
        nearest_centre(V, out["clusters"], out["extended_embedding"], normalize=True),
    )
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["normalize_kernel"] is True


def test_stages_match_the_library_and_skip_when_done(tmp_path):
    from npkl_dist import store as st
    from npkl_dist.job._job import FitConfig, run_fit

    X, y, Xnew = _data(tmp_path)
    cfg = _cfg(tmp_path)
    res = _run_stages(cfg)
    assert all(not v["skipped"] for v in res.values())
    assert set(res) == {
        "ingest",
        "graph",
        "plan",
        "learn",
        "transform",
        "evaluate",
        "extend",
        "report",
    }
    for v in res.values():
        assert v["seconds"] >= 0 and v["peak_rss_mb"] > 0
    with st.RunStore.open(cfg["run"], mode="r") as rs:
        out = rs.read_results()
    # the same fit through the library's one-shot path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary, V, clusters = run_fit(
            FitConfig(X=X, y_constraints=y, y_eval=y, seed=3, max_sweeps=15)
        )
    np.testing.assert_allclose(out["embedding"], V, rtol=1e-10, atol=1e-12)
    assert out["extended_embedding"].shape == (30, V.shape[1])
    assert out["extended_clusters"].shape == (30,)
    assert res["evaluate"]["metrics"]["rand_accuracy"] > 0.8
    rep = tmp_path / "report"
    for f in (
        "summary.json",
        "objective.png",
        "embedding.png",
        "embedding.npy",
        "extended_embedding.npy",
    ):
        assert (rep / f).is_file(), f
    s = json.loads((rep / "summary.json").read_text())
    assert s["n_sweeps"] == 15 and set(s["stages"]) == set(res) - {"report"}
    again = _run_stages(cfg, create=False)
    assert all(v["skipped"] for v in again.values())


def _learn_killed_after(cfg, sweep):
    """A new run of ``cfg`` whose learn stage dies right after ``sweep``'s checkpoint."""
    from npkl_dist import store as st
    from npkl_flows import _stages

    rs = st.RunStore.create(cfg["run"], config={"pipeline": cfg})
    ctx = _stages.Context(rs, cfg, quiet=True)
    for f in (_stages.ingest, _stages.build_graph, _stages.colour):
        f(ctx)

    class Killed(Exception):
        pass

    try:
        with _learn_dies_at(sweep, Killed):
            _stages.learn(ctx)
    finally:
        rs.close()


def test_learn_resumes_from_checkpoint_bitwise(tmp_path):
    """Learning interrupted after a checkpoint (here: stopped at 8 of 15 sweeps by running it
    with max_sweeps=8 in the same store, then continued) ends equal to an uninterrupted run."""
    from npkl_dist import store as st

    _data(tmp_path)
    full = _cfg(tmp_path, run=str(tmp_path / "full"), extend={"features": None})
    _run_stages(full)
    part = _cfg(tmp_path, run=str(tmp_path / "part"), extend={"features": None})
    _learn_killed_after(part, 8)  # a learn that dies right after sweep 8's checkpoint
    res = _run_stages(part, create=False)
    assert res["learn"]["resumed_from"] == 8
    with st.RunStore.open(full["run"]) as a, st.RunStore.open(part["run"]) as b:
        ra, rb = a.read_results(), b.read_results()
    assert np.array_equal(ra["embedding"], rb["embedding"])
    assert np.array_equal(ra["clusters"], rb["clusters"])


def test_learn_resumes_bitwise_with_its_pointer_deleted(tmp_path):
    """Issue 74: the checkpoint pointer deleted after the crash: the resume rebuilds it from
    the manifests on storage (with a warning), continues from sweep 8, not 0, and ends
    equal to an uninterrupted run."""
    from npkl_dist import store as st
    from npkl_dist.store._format import POINTER_KEY

    _data(tmp_path)
    full = _cfg(tmp_path, run=str(tmp_path / "full"), extend={"features": None})
    _run_stages(full)
    part = _cfg(tmp_path, run=str(tmp_path / "part"), extend={"features": None})
    _learn_killed_after(part, 8)
    os.remove(os.path.join(part["run"], *POINTER_KEY.split("/")))
    from npkl_flows import _stages

    with st.RunStore.open(part["run"], mode="a") as rs, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = _stages.run_stages(_stages.Context(rs, part, quiet=True))
    rebuilt = [x for x in w if issubclass(x.category, st.StoreWarning)]
    assert len(rebuilt) == 1 and "pointer" in str(rebuilt[0].message)
    assert "is missing; rebuilt" in str(rebuilt[0].message)
    assert res["learn"]["resumed_from"] == 8
    with st.RunStore.open(full["run"]) as a, st.RunStore.open(part["run"]) as b:
        assert np.array_equal(a.read_results()["embedding"], b.read_results()["embedding"])
        assert b._read_pointer()["committed"]  # written again by the next commit


def test_resume_refuses_a_configuration_edited_after_learning_started(tmp_path):
    """Issue 74: gamma changed from 1 to 5 in a half-learned run's stored configuration:
    continuing the gamma = 1 checkpoint under gamma = 5 would be a wrong answer, so the resume
    stops, naming both values and the fix (`npkl resume`: exit 2, one line)."""
    import copy

    from npkl_dist import store as st
    from npkl_flows import _stages

    _data(tmp_path)
    part = _cfg(tmp_path, run=str(tmp_path / "part"), extend={"features": None})
    _learn_killed_after(part, 8)
    edited = copy.deepcopy(part)
    edited["model"]["gamma"] = 5.0
    with st.RunStore.open(part["run"], mode="a") as rs:
        with pytest.raises(st.StoreError, match=r"gamma: checkpoint 1\.0, configuration 5\.0"):
            _stages.run_stages(_stages.Context(rs, edited, quiet=True))
    # the same through the command line, the configuration edited where it is stored
    root = os.path.join(part["run"], "zarr.json")
    meta = json.load(open(root))
    meta["attributes"]["config"]["pipeline"]["model"]["gamma"] = 5.0
    json.dump(meta, open(root, "w"))
    p = _cli("resume", part["run"])
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert "gamma: checkpoint 1.0, configuration 5.0" in p.stderr
    assert "start a new run" in p.stderr
    assert "npkl resume RUN --force-config" in p.stderr


def test_force_config_continues_from_the_checkpoint_and_survives_a_crash(tmp_path):
    """`npkl resume RUN --force-config` after gamma was edited 1 -> 5: learning starts again
    (sweeps from 1) from the gamma = 1 checkpoint's V, the change is recorded and shown by
    `npkl status`; a forced resume that dies after 3 sweeps continues with a plain `npkl
    resume` to the same V bitwise; a rank change cannot be forced."""
    import shutil

    from npkl_dist import store as st
    from npkl_flows import _stages

    _data(tmp_path)
    part = _cfg(tmp_path, run=str(tmp_path / "a"), extend={"features": None})
    _learn_killed_after(part, 8)
    root = os.path.join(part["run"], "zarr.json")
    meta = json.load(open(root))
    meta["attributes"]["config"]["pipeline"]["model"]["gamma"] = 5.0
    json.dump(meta, open(root, "w"))
    for name in ("b", "c"):
        shutil.copytree(part["run"], tmp_path / name)
    p = _cli("resume", part["run"], "--force-config", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    n_sweeps = json.loads(p.stdout)["stages"]["learn"]["n_sweeps"]
    status = json.loads(_cli("status", part["run"], "--json").stdout)
    (forced,) = status["forced_config"]
    assert forced["from"] == {"gamma": 1.0} and forced["to"] == {"gamma": 5.0}
    assert forced["sweep"] == 8
    assert "forced    gamma 1.0 -> 5.0: learning restarted from checkpoint" in _cli(
        "status", part["run"]).stdout  # fmt: skip
    # the same forced resume, dying after its third sweep, then a plain resume
    b = {**_cfg(tmp_path, run=str(tmp_path / "b"), extend={"features": None})}
    b["model"] = {**b["model"], "gamma": 5.0}
    with st.RunStore.open(b["run"], mode="a") as rs:
        rs.request_force_config()
        ctx = _stages.Context(rs, b, quiet=True)

        class Killed(Exception):
            pass

        with _learn_dies_at(3, Killed):
            _stages.learn(ctx)
    p = _cli("resume", b["run"], "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["stages"]["learn"]["n_sweeps"] == n_sweeps
    with st.RunStore.open(part["run"]) as x, st.RunStore.open(b["run"]) as y:
        assert np.array_equal(x.read_results()["embedding"], y.read_results()["embedding"])
        assert len(y.forced_config) == 1 and not y.force_config_requested
    # a rank change keeps no row or column of the checkpoint: refused even when forced
    meta = json.load(open(tmp_path / "c" / "zarr.json"))
    meta["attributes"]["config"]["pipeline"]["model"]["rank"] = 3
    json.dump(meta, open(tmp_path / "c" / "zarr.json", "w"))
    p = _cli("resume", tmp_path / "c", "--force-config")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--force-config cannot continue checkpoint" in p.stderr and "another rank" in p.stderr
    with st.RunStore.open(str(tmp_path / "c")) as z:
        assert not z.force_config_requested and not z.forced_config


def test_edge_list_pipeline(tmp_path):
    from npkl_dist import knn_graph

    X, y, _ = _data(tmp_path, n=200)
    S = knn_graph(X, 5, warn=False).S.tocoo()
    up = S.row < S.col
    import pyarrow as pa
    import pyarrow.csv as pacsv

    pacsv.write_csv(
        pa.table({"i": S.row[up], "j": S.col[up], "w": S.data[up]}), tmp_path / "edges.csv"
    )
    cfg = _cfg(tmp_path, input={"features": None, "edges": "edges.csv"}, extend={"features": None})
    res = _run_stages(cfg)
    assert res["graph"]["source"] == "edges" and res["graph"]["n_edges"] == int(up.sum())
    assert res["evaluate"]["metrics"]["rand_accuracy"] > 0.7


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "npkl_flows.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        # this checkout first, then the caller's path (a worktree's import shims)
        env={
            **(env or os.environ),
            "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        },
    )


def test_status_and_extend_commands(tmp_path):
    X, y, Xnew = _data(tmp_path)
    cfg = _cfg(tmp_path)
    _run_stages(cfg)
    p = _cli("status", cfg["run"], "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["stage"] == "finished" and s["sweep"] == 15 and "eta_seconds" not in s
    p = _cli("status", cfg["run"])
    assert "stage     finished" in p.stdout and "sweep     15/15" in p.stdout
    p = _cli("extend", cfg["run"], "--features", tmp_path / "Xnew.npy", "--out", tmp_path / "ext")
    assert p.returncode == 0, p.stderr
    from npkl_dist import store as st

    with st.RunStore.open(cfg["run"]) as rs:
        stored = rs.read_results()["extended_embedding"]
    assert np.array_equal(np.load(tmp_path / "ext" / "extended_embedding.npy"), stored)
    p = _cli("extend", cfg["run"], "--features", tmp_path / "y.npy", "--out", tmp_path / "e2")
    assert (
        p.returncode == 2 and "new points have 1 features, the run was trained on 64" in p.stderr
    )
    # --eval-labels scores the new points' clusters, printed and written
    p = _cli(
        "extend",
        cfg["run"],
        "--features",
        tmp_path / "Xnew.npy",
        "--eval-labels",
        tmp_path / "ynew.npy",
        "--out",
        tmp_path / "e3",
    )
    assert p.returncode == 0, p.stderr
    from npkl_dist import clustering_metrics

    want = clustering_metrics(
        np.load(tmp_path / "ynew.npy"), np.load(tmp_path / "e3" / "extended_clusters.npy")
    )
    got = json.loads((tmp_path / "e3" / "extended_metrics.json").read_text())
    assert got == {"n_points": 30, "n_labelled": 30, **want}
    assert f"pairwise accuracy {want['rand_accuracy']:.4f}" in p.stdout
    # labels that do not match the new rows: refused before anything is written
    p = _cli(
        "extend",
        cfg["run"],
        "--features",
        tmp_path / "Xnew.npy",
        "--eval-labels",
        tmp_path / "y.npy",
        "--out",
        tmp_path / "e4",
    )
    assert p.returncode == 2 and "--eval-labels: 400 labels for 30 new points" in p.stderr
    assert not (tmp_path / "e4").exists()
    one = np.full(30, -1)
    one[0] = 2
    np.save(tmp_path / "one.npy", one)
    p = _cli(
        "extend",
        cfg["run"],
        "--features",
        tmp_path / "Xnew.npy",
        "--eval-labels",
        tmp_path / "one.npy",
        "--out",
        tmp_path / "e5",
    )
    assert p.returncode == 2 and "1 of the 30 new points have a label" in p.stderr
    assert not (tmp_path / "e5").exists()


def test_status_while_learning_reports_eta(tmp_path):
    """A run stopped inside learn: status names the stage, the sweep and the time left."""
    from npkl_dist import store as st
    from npkl_flows import _stages
    from npkl_flows._status import format_status, run_status

    _data(tmp_path)
    cfg = _cfg(tmp_path, model={"max_sweeps": 40}, execution={"checkpoint_every": 2})
    rs = st.RunStore.create(cfg["run"], config={"pipeline": cfg})
    ctx = _stages.Context(rs, cfg, quiet=True)
    for f in (_stages.ingest, _stages.build_graph, _stages.colour):
        f(ctx)

    def check(state):
        s = run_status(cfg["run"])  # from the same process, while the writer holds the lock
        assert s["stage"] == "learn" and s["sweep"] == 6
        assert s["writer"]["alive"] is True
        assert s["sweeps_left_at_most"] == 34 and s["eta_seconds"] > 0
        assert "time left at most" in format_status(s)

    try:
        with _learn_dies_at(6, KeyboardInterrupt, check):
            _stages.learn(ctx)
    finally:
        rs.close()
    s = run_status(cfg["run"])
    assert s["stage"] == "learn" and "writer" not in s
    assert "`npkl resume` continues it" in format_status(s)


def test_run_command_rejects_bad_config(tmp_path):
    (tmp_path / "c.toml").write_text('run = "x"\n[input]\ndataset = "iris"\n[model]\nlos = 1\n')
    p = _cli("run", tmp_path / "c.toml")
    assert p.returncode == 2
    assert "c.toml [model]: unknown key 'los'; did you mean 'loss'?" in p.stderr


def test_validated_config_validates_again_unchanged(tmp_path):
    from npkl_flows._config import validate_config

    cfg = validate_config({"run": "x", "input": {"dataset": "digits"}})
    assert validate_config(cfg) == cfg


def test_progress_bar_only_on_a_terminal():
    import io

    from npkl_flows._progress import Bar, progress_enabled

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert not progress_enabled(stream=io.StringIO())
    assert not progress_enabled(quiet=True, stream=Tty())
    assert progress_enabled(stream=Tty())
    out = Tty()
    bar = Bar("learn", 10, stream=out)
    cb = bar.sweep_callback()
    for s in range(1, 11):
        cb(s, 1.0 / s, 0.1, 0.01)
    bar.close()
    text = out.getvalue()
    assert "learn  [########################] 10/10" in text and text.endswith("\n")
    silent = io.StringIO()
    Bar("graph", 3, enabled=False, stream=silent).update(3)
    assert silent.getvalue() == ""


def test_admm_pipeline_matches_library(tmp_path):
    from npkl_dist import store as st
    from npkl_dist.job._job import FitConfig, run_fit

    X, y, _ = _data(tmp_path, n=250)
    cfg = _cfg(tmp_path, model={"solver": "admm", "max_sweeps": 10}, extend={"features": None})
    res = _run_stages(cfg)
    assert res["learn"]["n_sweeps"] == 10
    with st.RunStore.open(cfg["run"]) as rs:
        V = rs.read_results()["embedding"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ref, _ = run_fit(FitConfig(X=X, y_constraints=y, solver="admm", seed=3, max_sweeps=10))
    np.testing.assert_allclose(V, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_admm_anderson_pipeline_matches_library_and_resumes(tmp_path, dtype):
    """anderson through the pipeline: the library's fit, and a run whose learn stage was
    interrupted resumes from its checkpoint (V, U, Lam and the accelerator's float64 memory)
    to the same V bit for bit."""
    from npkl_dist import store as st
    from npkl_dist.job._job import FitConfig, run_fit
    from npkl_dist.solvers.admm._fit import admm_checkpoint_width

    X, y, _ = _data(tmp_path, n=250)
    model = {"solver": "admm", "max_sweeps": 40, "anderson": 4, "tol": 0.0, "dtype": dtype}
    cfg = _cfg(tmp_path, model=model, extend={"features": None})
    res = _run_stages(cfg)
    assert res["learn"]["n_sweeps"] == 40
    with st.RunStore.open(cfg["run"]) as rs:
        V = rs.read_results()["embedding"]
        manifest, W = rs.latest_checkpoint()
    r = V.shape[1]
    assert W.shape == (250, admm_checkpoint_width(r, 4)) and W.dtype == np.float64
    assert manifest["state"]["anderson"]["ints"][3] > 0  # extrapolated steps were taken
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ref, _ = run_fit(
            FitConfig(
                X=X,
                y_constraints=y,
                solver="admm",
                seed=3,
                max_sweeps=40,
                anderson=4,
                tol=0.0,
                dtype=dtype,
            )
        )
    np.testing.assert_array_equal(V, ref)
    # the same run, learning killed right after iteration 16's checkpoint (every 4), resumed
    part = _cfg(tmp_path, run=str(tmp_path / "part"), model=model, extend={"features": None})
    _learn_killed_after(part, 16)
    again = _run_stages(part, create=False)
    assert again["learn"]["resumed_from"] == 16
    with st.RunStore.open(part["run"]) as rs2:
        np.testing.assert_array_equal(rs2.read_results()["embedding"], V)


def test_new_run_over_an_existing_one_names_resume(tmp_path):
    pytest.importorskip("prefect")
    from npkl_dist.store import StoreError
    from npkl_flows.pipeline import open_run

    _data(tmp_path)
    cfg = _cfg(tmp_path)
    store, _ = open_run(cfg, resume=False)
    store.close()
    with pytest.raises(StoreError, match=r"already exists .*`npkl resume .*`npkl status"):
        open_run(cfg, resume=False)
    store, got = open_run(cfg, resume=True)
    store.close()
    assert got == cfg


def test_prefect_env_waits_longer_for_the_ephemeral_server(monkeypatch):
    """`npkl run` without PREFECT_API_URL starts Prefect's ephemeral server, whose first
    start (a fresh PREFECT_HOME) outlasted Prefect's 20 s default on a busy machine: the
    CLI asks for 90 s unless the user set a value, and Prefect reads it."""
    from npkl_flows import cli

    key = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
    monkeypatch.delenv(key, raising=False)
    cli._prefect_env()
    assert os.environ[key] == str(cli.EPHEMERAL_STARTUP_TIMEOUT) == "90"
    code = (
        "import npkl_flows.cli as c; c._prefect_env(); "
        "from prefect.settings import get_current_settings as g; "
        "print(g().server.ephemeral.startup_timeout_seconds)"
    )
    env = {k: v for k, v in os.environ.items() if k != key}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert out.strip() == "90"
    env[key] = "33"  # the user's own value wins
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert out.strip() == "33"


def test_run_and_resume_through_prefect(tmp_path_factory, tmp_path):
    """The CLI's Prefect flow (temporary local server): a run, a resume that only reuses
    cached stages, and an input error that ends in one line naming the fix."""
    pytest.importorskip("prefect")
    home = tmp_path_factory.mktemp("prefect-home")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    (tmp_path / "c.toml").write_text(
        f'run = "{tmp_path / "run"}"\n[input]\ndataset = "iris"\n[model]\nmax_sweeps = 5\n'
        f'[output]\nout = "{tmp_path / "out"}"\nplots = false\n'
    )
    # `npkl status` finds the run from the start (issue 75): the store exists, stage
    # "starting", while Prefect is still starting (the flow run later marks it running)
    proc = subprocess.Popen(
        [sys.executable, "-m", "npkl_flows.cli", "run", str(tmp_path / "c.toml"), "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        },
    )
    from npkl_dist import store as st
    from npkl_flows._status import format_status, run_status

    first = None  # the first status that finds the run, then the first saying "starting"
    while (first is None or first["stage"] != "starting") and proc.poll() is None:
        try:
            first = run_status(str(tmp_path / "run"))
        except st.StoreError:  # not created yet
            continue
        # found from the start: before the flow's first stage
        assert first["stage"] in ("ingest", "starting") and not first["stages_done"], first
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert first is not None and first["stage"] == "starting", first
    assert first["writer"]["pid"] == proc.pid and first["writer"]["alive"] is True
    assert "Prefect is starting the flow" in format_status(first)
    res = json.loads(stdout)
    assert not any(v["skipped"] for v in res["stages"].values())
    assert run_status(str(tmp_path / "run"))["stage"] == "finished"
    assert res["stages"]["learn"]["n_sweeps"] == 5
    p = _cli("resume", tmp_path / "run", "--json", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    again = json.loads(p.stdout)
    assert all(v.get("cached") for v in again["stages"].values())
    assert again["stages"]["learn"]["objective"] == res["stages"]["learn"]["objective"]
    p = _cli("run", tmp_path / "c.toml", env=env)
    assert p.returncode == 2 and "already exists" in p.stderr and "npkl resume" in p.stderr
    np.save(tmp_path / "y.npy", np.zeros(10, np.int64))
    (tmp_path / "bad.toml").write_text(
        f'run = "{tmp_path / "bad"}"\n[input]\ndataset = "iris"\nlabels = "y.npy"\n'
    )
    p = _cli("run", tmp_path / "bad.toml", env=env)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "npkl run: error: labels: 10 labels for 150 points" in p.stderr
    assert "Traceback" not in p.stderr
    # --quiet on a Dask executor (issue 74): Dask's ~30 INFO lines and Prefect's are gone,
    # the one result line stays
    (tmp_path / "dask.toml").write_text(
        f'run = "{tmp_path / "dask"}"\n[input]\ndataset = "iris"\n[model]\nmax_sweeps = 3\n'
        f'[execution]\nexecutor = "dask"\nworkers = 1\n[output]\nfiles = false\n'
    )
    p = _cli("run", tmp_path / "dask.toml", "--quiet", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    (line,) = p.stdout.strip().splitlines()
    assert line.startswith(f"run {tmp_path / 'dask'}: objective ")
    assert not [ln for ln in p.stderr.splitlines() if "INFO" in ln], p.stderr[-3000:]


def test_graph_blocks_resume_after_a_crash(tmp_path, monkeypatch):
    """kNN row blocks land in the store one by one; a build that died after 3 blocks
    computes only the other 5 and gives the graph of an uninterrupted build."""
    from npkl_dist import knn_graph
    from npkl_dist import store as st
    from npkl_flows import _stages

    X, _, _ = _data(tmp_path)
    cfg = _cfg(tmp_path, graph={"block": 50}, extend={"features": None})
    rs = st.RunStore.create(cfg["run"], config={"pipeline": cfg})
    ctx = _stages.Context(rs, cfg, quiet=True)
    _stages.ingest(ctx)
    real = _stages.knn_block_to_store
    calls = []

    def dies_after_three(index, store, s, e):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(s)
        return real(index, store, s, e)

    monkeypatch.setattr(_stages, "knn_block_to_store", dies_after_three)
    with pytest.raises(KeyboardInterrupt):
        _stages.build_graph(ctx)
    monkeypatch.setattr(_stages, "knn_block_to_store", real)
    rs.close()
    rs = st.RunStore.open(cfg["run"], mode="a")
    info = _stages.build_graph(_stages.Context(rs, cfg, quiet=True))
    assert info["n_blocks"] == 8 and info["blocks_reused"] == 3
    S = rs.read_graph()
    rs.close()
    ref = knn_graph(X, 5, method="exact", warn=False).S
    assert (S != ref).nnz == 0


@pytest.mark.parametrize(
    "threshold, method, processes",
    [
        (50_000, "exact", False),  # threads: fast
        # worker processes (the index pickled and shipped); pynndescent compiles for 35-70 s
        pytest.param(100, "pynndescent", True, marks=pytest.mark.heavy),
    ],
)
def test_knn_blocks_as_dask_tasks_equal_in_process(tmp_path, threshold, method, processes):
    """One index (above the exact-search threshold, lowered here to 100 points: one
    pynndescent index), built once and shipped to two Dask worker processes; each task
    answers the queries of one row block and writes it into the store. Same index, same
    rows: the same neighbours and graph as the in-process loop, which is also the fallback
    without a Dask client."""
    distributed = pytest.importorskip("distributed")
    from npkl_dist import store as st
    from npkl_dist.store._rows import read_row_arrays
    from npkl_flows import _stages

    _data(tmp_path, n=400)
    cfg = _cfg(
        tmp_path, graph={"exact_max_points": threshold, "block": 64}, extend={"features": None}
    )

    def build(name, client=None, index=None):
        c = {**cfg, "run": str(tmp_path / name)}
        rs = st.RunStore.create(c["run"], config={"pipeline": c})
        ctx = _stages.Context(rs, c, quiet=True, client=client)
        if index is not None:
            ctx.cache["index"] = index
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _stages.ingest(ctx)
                info = _stages.build_graph(ctx)
            nb = read_row_arrays(rs, _stages.KNN_GROUP, ("idx", "dist"))
            return info, nb, rs.read_graph(), ctx.cache["index"]
        finally:
            rs.close()

    info, nb, S, index = build("local")
    assert info["method"] == method and info["n_blocks"] == 7
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        info2, nb2, S2, _ = build("dask", client=client, index=index)
        ran = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert "knn_block_to_store" in ran
    assert info2["method"] == method and info2["blocks_reused"] == 0
    np.testing.assert_array_equal(nb2["idx"], nb["idx"])
    np.testing.assert_array_equal(nb2["dist"], nb["dist"])
    assert (S2 != S).nnz == 0 and info2["sigma"] == info["sigma"]


@pytest.mark.parametrize("rank, eval_labels", [(1, "y.npy"), (2, None)])
def test_report_plots_a_rank_one_kernel_and_an_unclustered_run(
    tmp_path, rank, eval_labels, monkeypatch
):
    """The report's embedding plot: a rank-1 kernel has one principal component (the stage
    crashed taking the second), and a run without clusters is drawn in one colour (matplotlib
    warned that the colour map was ignored). With evaluation labels the points are coloured
    by them (the legend says so) and the title carries the metrics; the objective is drawn
    on a log axis."""
    from npkl_dist import plotting
    from npkl_dist import store as st
    from npkl_flows import _stages

    drawn = {}
    save = plotting.save_figure

    def recording_save(fig, path, **kw):
        drawn[path.name] = fig.axes[0]
        return save(fig, path, **kw)

    monkeypatch.setattr(plotting, "save_figure", recording_save)

    _data(tmp_path, n=120, n_new=5)
    inp = {"features": "X.npy", "labels": "y.npy"}
    if eval_labels:
        inp["eval_labels"] = eval_labels
    raw = _raw(tmp_path, model={"rank": rank})
    raw["input"] = inp
    raw.pop("extend")
    from npkl_flows._config import validate_config

    cfg = validate_config(raw, base_dir=str(tmp_path))
    rs = st.RunStore.create(st.resolve_run(cfg["run"]), config={"pipeline": cfg})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = _stages.Context(rs, cfg, quiet=True)
            _stages.run_stages(ctx, only=[s for s in _stages.STAGES if s != "report"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the report itself warns about nothing
            _stages.run_stages(ctx, only=["report"])
        assert ("clusters" in rs.read_results()) == bool(eval_labels)
    finally:
        rs.close()
    png = tmp_path / "report" / "embedding.png"
    assert png.stat().st_size > 1000
    ax = drawn["embedding.png"]
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    if eval_labels:
        assert ax.get_legend().get_title().get_text() == "true label"
        assert ax.get_title().splitlines()[-1] == plotting.metrics_text(summary["metrics"])
    else:
        assert ax.get_legend() is None and "coloured" not in ax.get_title()
    assert drawn["objective.png"].get_yscale() == "log"


@pytest.mark.parametrize(
    "summary, xlabel, title",
    [
        (
            {"solver": "bcd", "method": "sweeps", "n_sweeps": 40},
            "sweep",
            "objective trace (40 sweeps)",
        ),
        (
            {"solver": "bcd", "method": "block", "n_sweeps": 12},
            "outer iteration",
            "objective trace (12 outer iterations)",
        ),
        ({"solver": "admm", "n_sweeps": 500}, "iteration", "objective trace (500 iterations)"),
        (
            {"solver": "simplenpkl", "method": "sweeps", "n_sweeps": 3},
            "iteration",
            "objective trace (3 iterations)",
        ),
    ],
)
def test_objective_plot_counts_in_the_solvers_own_unit(summary, xlabel, title):
    from npkl_flows._stages import trace_labels

    assert trace_labels(summary) == (xlabel, title)


def test_a_run_configured_before_graph_scale_existed_still_runs(tmp_path):
    """A run's stored configuration from before [graph] scale has no such key: its stages
    (a resume, a later extend) run as unscaled."""
    from npkl_flows._config import fit_config

    _data(tmp_path)
    cfg = _cfg(tmp_path)
    del cfg["graph"]["scale"]
    assert fit_config(cfg).scale == "none"
    res = _run_stages(cfg)
    assert res["graph"]["scale"] is None and res["extend"]["n_new"] == 30


def test_extend_eval_labels_needs_a_clustered_run(tmp_path):
    _data(tmp_path)
    cfg = _cfg(tmp_path, input={"eval_labels": None}, extend={"features": None})
    res = _run_stages(cfg)
    assert res["evaluate"]["n_clusters"] is None
    p = _cli(
        "extend",
        cfg["run"],
        "--features",
        tmp_path / "Xnew.npy",
        "--eval-labels",
        tmp_path / "ynew.npy",
        "--out",
        tmp_path / "ext",
    )
    assert p.returncode == 2 and "has no clusters to score" in p.stderr
    assert "leave --eval-labels out" in p.stderr and not (tmp_path / "ext").exists()
    p = _cli("extend", cfg["run"], "--features", tmp_path / "Xnew.npy", "--out", tmp_path / "ext")
    assert p.returncode == 0, p.stderr
    # no clusters.npy: the run has none to extend
    assert sorted(f.name for f in (tmp_path / "ext").iterdir()) == [
        "extended.json",
        "extended_embedding.npy",
        "extended_far.npy",
    ]


# ------------------------------------------------------------------ extension, end to end
def test_dataset_scaling_is_recorded_and_extend_takes_raw_rows(tmp_path):
    """`dataset = "digits"` is read raw and standardised by the graph stage, which records
    it (scale "standard" unless the configuration says otherwise); raw digits rows that are
    copies of training rows come back with their training rows and clusters, not flagged
    (they came back with rows of norm 1e-51, in one cluster, when the scaling was silent)."""
    from sklearn.datasets import load_digits

    from npkl_dist import store as st

    raw_cfg = {
        "run": str(tmp_path / "digits"),
        "input": {"dataset": "digits"},
        "model": {"max_sweeps": 60, "seed": 0},
        "output": {"out": str(tmp_path / "report"), "plots": False},
    }
    from npkl_flows._config import validate_config

    cfg = validate_config(raw_cfg, base_dir=str(tmp_path))
    assert cfg["graph"]["scale"] == "standard"
    kept = validate_config({**raw_cfg, "graph": {"scale": "none"}}, base_dir=str(tmp_path))
    assert kept["graph"]["scale"] == "none"  # an explicit choice is kept
    _run_stages(cfg)
    X, _ = load_digits(return_X_y=True)
    pick = np.arange(0, 1797, 90)  # 20 training rows, raw
    np.save(tmp_path / "copies.npy", X[pick])
    p = _cli("extend", cfg["run"], "--features", tmp_path / "copies.npy", "--out", tmp_path / "e")
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr
    with st.RunStore.open(cfg["run"], mode="r") as rs:
        res = rs.read_results()
        assert np.array_equal(rs.read_inputs()["features"], X)  # stored as shipped
        assert rs.stages()["graph"]["info"]["scale"]["kind"] == "standard"
    np.testing.assert_array_equal(
        np.load(tmp_path / "e" / "extended_embedding.npy"), res["embedding"][pick]
    )
    np.testing.assert_array_equal(
        np.load(tmp_path / "e" / "extended_clusters.npy"), res["clusters"][pick]
    )
    summary = json.loads((tmp_path / "e" / "extended.json").read_text())
    assert summary["n_copies"] == 20 and summary["n_far"] == 0


def test_extend_reaches_the_training_accuracy_on_held_back_digits(tmp_path):
    """The digits pipeline trained on 1,597 raw digits ([graph] scale = "standard"),
    extended to the 200 held back (raw): their clusters score the training accuracy (within
    0.01); the same rows shifted far from the data are flagged, with one warning."""
    from sklearn.datasets import load_digits

    from npkl_dist import clustering_metrics
    from npkl_dist import store as st

    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(y.size)
    hold, train = perm[:200], np.sort(perm[200:])
    np.save(tmp_path / "X.npy", X[train])
    np.save(tmp_path / "y.npy", y[train].astype(np.int64))
    np.save(tmp_path / "Xnew.npy", X[hold])
    cfg = _cfg(
        tmp_path,
        graph={"scale": "standard"},
        model={"max_sweeps": 500, "seed": 0},
        output={"plots": False},
    )
    _run_stages(cfg)
    with st.RunStore.open(cfg["run"], mode="r") as rs:
        res = rs.read_results()
        trained = rs.stages()["evaluate"]["info"]["metrics"]["rand_accuracy"]
        ext_info = rs.stages()["extend"]["info"]
    held = clustering_metrics(y[hold], res["extended_clusters"])["rand_accuracy"]
    assert trained > 0.95
    assert held >= trained - 0.01, (held, trained)
    assert ext_info["n_new"] == 200 and ext_info["n_far"] < 10  # a few odd digits at most
    np.save(tmp_path / "shifted.npy", X[hold[:10]] + 200.0)
    p = _cli("extend", cfg["run"], "--features", tmp_path / "shifted.npy", "--out", tmp_path / "s")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("warning (GraphWarning): extend: 10 of 10 new point(s) lie farther") == 1
    assert np.load(tmp_path / "s" / "extended_far.npy").all()
