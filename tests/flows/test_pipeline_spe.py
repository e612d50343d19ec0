"""The pipeline with ``[model] solver = "spe"`` (issue 77 item 4): the graph's structure
preserving embedding at scale as the learn stage, checkpointed in the run store; a crash
resumes after the newest checkpoint and ends bitwise as an uninterrupted run (and as the
library's embed_spe_lowrank); damage to a checkpoint is named with its repair; the
configuration's one-line errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("zarr")

from npkl_dist import ValidationError  # noqa: E402
from npkl_dist import store as st  # noqa: E402
from npkl_dist.embedding import embed_spe_lowrank  # noqa: E402


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    import npkl_dist as nk

    d = tmp_path_factory.mktemp("spe_graph")
    edges, groups = nk.planted_partition(400, 4, degree=10.0, mix=0.1, seed=2)
    np.savetxt(d / "graph.csv", edges, fmt="%d", delimiter=",", header="i,j", comments="")
    np.save(d / "groups.npy", groups)
    W = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(400, 400))
    return d, (W + W.T).tocsr(), groups


SPE = {"rank": 6, "triplets": 4, "max_iter": 30}


def _cfg(d, run, **over):
    from npkl_flows._config import validate_config

    raw = {
        "run": str(run),
        "input": {"edges": str(d / "graph.csv"), "eval_labels": str(d / "groups.npy")},
        "model": {"solver": "spe", "seed": 3, "max_sweeps": 6},
        "spe": dict(SPE),
        "output": {"plots": False, "files": False},
    }
    for k, v in over.items():
        raw[k] = {**raw.get(k, {}), **v}
    return validate_config(raw, base_dir=str(d))


def _run(cfg, resume=False):
    from npkl_flows._fit import run_fit_stages

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short fit: the gap is still open
        return run_fit_stages(cfg, resume=resume)


class _Killed(Exception):
    pass


def test_crash_and_resume_end_bitwise_as_uninterrupted_and_as_the_library(graph, tmp_path):
    from npkl_flows import _stages_spe

    d, W, groups = graph
    summary, V, clusters = _run(_cfg(d, tmp_path / "full"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = embed_spe_lowrank(W, dim=6, max_sweeps=6, seed=3, **_lib(SPE))
    np.testing.assert_array_equal(V, ref.factor)
    assert summary["objective"] == ref.objective
    # the planted groups come out of the connectivity alone
    assert summary["metrics"]["ari"] > 0.9, summary["metrics"]

    orig = _stages_spe.save_state

    def dying(store, state):
        orig(store, state)
        if state["sweeps"] == 3:
            raise _Killed

    _stages_spe.save_state = dying
    try:
        with pytest.raises(_Killed):
            _run(_cfg(d, tmp_path / "half"))
    finally:
        _stages_spe.save_state = orig
    with st.RunStore.open(str(tmp_path / "half"), mode="r") as rs:
        assert _stages_spe.load_state(rs)["sweeps"] == 3
    again, V2, _ = _run(_cfg(d, tmp_path / "half"), resume=True)
    np.testing.assert_array_equal(V2, V)
    with st.RunStore.open(str(tmp_path / "half"), mode="r") as rs:
        learn = rs.stages()["learn"]["info"]
    assert learn["resumed_from"] == 3 and learn["checkpoints_written"] == 2  # sweeps 4, 5
    assert again["objective"] == summary["objective"]


def _lib(cfg):
    return {
        "rank": cfg["rank"],
        "triplets_per_node": cfg["triplets"],
        "max_iter": cfg["max_iter"],
    }


def test_damaged_checkpoint_is_named_with_its_repair(graph, tmp_path):
    from npkl_flows import _stages_spe

    d, _, _ = graph
    orig = _stages_spe.save_state

    def dying(store, state):
        orig(store, state)
        if state["sweeps"] == 2:
            raise _Killed

    _stages_spe.save_state = dying
    try:
        with pytest.raises(_Killed):
            _run(_cfg(d, tmp_path / "r"))
    finally:
        _stages_spe.save_state = orig
    latest = tmp_path / "r" / "spe" / "latest.json"
    pointer = json.loads(latest.read_text())
    pointer["record"]["J"] += 1.0  # parses, and is not what was written
    latest.write_text(json.dumps(pointer))
    with pytest.raises(
        st.StoreDamagedError, match=r"spe/latest.json does not match .*--redo learn"
    ):
        _run(_cfg(d, tmp_path / "r"), resume=True)
    state = tmp_path / "r" / pointer["state"]
    latest.write_text(
        json.dumps({**pointer, "record": {**pointer["record"], "J": pointer["record"]["J"] - 1.0}})
    )
    state.write_bytes(state.read_bytes()[:-7])
    with pytest.raises(st.StoreDamagedError, match=r"state-000002.npz does not match"):
        _run(_cfg(d, tmp_path / "r"), resume=True)


@pytest.mark.parametrize(
    "over, message",
    [
        ({"input": {"labels": "groups.npy"}}, "solver = 'spe' embeds the graph from its connectivity alone and takes no pairs; drop labels"),
        ({"spe": {"triplets": 0}}, "[spe]: triplets"),
        ({"extend": {"features": "X.npy"}}, "[extend]: solver = 'spe' has no map for new points; drop [extend]"),
    ],
)  # fmt: skip
def test_configuration_errors_are_one_line(graph, tmp_path, over, message):
    d, _, _ = graph
    with pytest.raises(ValidationError) as info:
        _cfg(d, tmp_path / "x", **over)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_rank_the_graph_cannot_hold_is_refused_in_one_line(graph, tmp_path):
    d, _, _ = graph
    with pytest.raises(ValidationError) as info:
        _run(_cfg(d, tmp_path / "r", spe={"rank": 399}))
    msg = str(info.value)
    assert "[spe] rank: 399 for a graph of 400 nodes; give 1 <= rank <= 398" in msg
    assert "\n" not in msg
