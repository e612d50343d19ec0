"""`npkl active`, `npkl ask`, `npkl answer` (issue 78 items 2 and 3): the simulated loop on a
finished run, recorded round by round so that a crash mid-refit loses no answer and a rerun
ends bitwise as an uninterrupted loop; a person's round trip; every error path in one line,
with nothing recorded."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

pytest.importorskip("zarr")

from npkl_dist import store as st  # noqa: E402
from npkl_dist.job import _active  # noqa: E402
from npkl_flows.cli import main  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::npkl_dist.ConvergenceWarning"),
    pytest.mark.filterwarnings("ignore::npkl_dist.GraphWarning"),
]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A finished run on wine (scaled), pairs from a fifth of the labels."""
    from sklearn.datasets import load_wine

    d = tmp_path_factory.mktemp("active")
    X, y = load_wine(return_X_y=True)
    part = np.where(np.arange(y.size) % 5 == 0, y, -1)
    np.save(d / "X.npy", X)
    np.save(d / "y.npy", y)
    np.save(d / "part.npy", part)
    argv = ["fit", "--features", str(d / "X.npy"), "--labels", str(d / "part.npy")]
    argv += ["--eval-labels", str(d / "y.npy"), "--scale", "standard", "--run", str(d / "run")]
    assert main([*argv, "--quiet", "--max-sweeps", "300"]) == 0
    return d, y


def _copy(fitted, tmp_path, name):
    d, _ = fitted
    shutil.copytree(d / "run", tmp_path / name)
    return tmp_path / name


def _argv(run, d, *extra):
    return ["active", str(run), "--oracle", str(d / "y.npy"), "--pairs", "8", *extra]


def _V(run, r):
    with st.RunStore.open(str(run), mode="r") as rs:
        state = _active.read_state(rs)
        rec = state["rounds"][r - 1]
        return np.load(run / rec["V"]), state


class _Killed(Exception):
    pass


def test_loop_crashed_mid_refit_reruns_bitwise_and_keeps_the_answers(fitted, tmp_path, capsys):
    d, y = fitted
    full = _copy(fitted, tmp_path, "full")
    assert main([*_argv(full, d, "--rounds", "3", "--json", "--quiet")]) == 0
    rows = json.loads(capsys.readouterr().out)["rounds"]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert [r["n_constraints"] for r in rows] == sorted(r["n_constraints"] for r in rows)
    assert all(0 <= r["metrics"]["rand_accuracy"] <= 1 for r in rows)
    V_full, state_full = _V(full, 3)

    half = _copy(fitted, tmp_path, "half")
    orig = _active._Run.refit

    def dying(self, rounds, rec):
        if rec["round"] == 2:
            raise _Killed
        orig(self, rounds, rec)

    _active._Run.refit = dying
    try:
        with pytest.raises(_Killed):
            main([*_argv(half, d, "--rounds", "3", "--quiet")])
    finally:
        _active._Run.refit = orig
    with st.RunStore.open(str(half), mode="r") as rs:
        crashed = _active.read_state(rs)
    assert len(crashed["rounds"]) == 2 and crashed["rounds"][1]["V"] is None  # answers kept
    assert crashed["rounds"][1]["answers"] == state_full["rounds"][1]["answers"]
    assert main([*_argv(half, d, "--rounds", "3", "--quiet")]) == 0
    V_half, state_half = _V(half, 3)
    np.testing.assert_array_equal(V_half, V_full)
    assert [r["queries"] for r in state_half["rounds"]] == [
        r["queries"] for r in state_full["rounds"]
    ]


def test_ask_and_answer_round_trip(fitted, tmp_path, capsys):
    d, y = fitted
    run = _copy(fitted, tmp_path, "person")
    q = tmp_path / "q.csv"
    assert main(["ask", str(run), "--pairs", "6", "--out", str(q), "--quiet"]) == 0
    rows = list(csv.DictReader(q.open()))
    assert [r["pair"] for r in rows] == [str(k) for k in range(6)]
    for r in rows:
        r["answer"] = "must" if y[int(r["i"])] == y[int(r["j"])] else "cannot"
    rows[0]["answer"] = "skip"
    _write(tmp_path / "a.csv", rows)
    capsys.readouterr()
    assert main(["answer", str(run), str(tmp_path / "a.csv"), "--json", "--quiet"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["round"] == 1 and rec["answers"][0] == 0 and len(rec["answers"]) == 6
    assert rec["points_moved"] >= 0 and rec["V"].startswith("active/V-0001")
    p = main(["answer", str(run), str(tmp_path / "a.csv"), "--quiet"])
    assert p == 2 and "has no questions waiting; ask some first" in capsys.readouterr().err


def test_skipped_questions_are_not_asked_again(fitted, tmp_path, capsys):
    """Skipped pairs add no constraint, so the refit leaves V where it was and the same
    pairs would top the order again; they are left out of the next questions."""
    run = _copy(fitted, tmp_path, "skipper")
    q = tmp_path / "q.csv"
    assert main(["ask", str(run), "--pairs", "6", "--out", str(q), "--quiet"]) == 0
    rows = list(csv.DictReader(q.open()))
    for r in rows:
        r["answer"] = "skip"
    _write(tmp_path / "a.csv", rows)
    assert main(["answer", str(run), str(tmp_path / "a.csv"), "--quiet"]) == 0
    q2 = tmp_path / "q2.csv"
    assert main(["ask", str(run), "--pairs", "6", "--out", str(q2), "--quiet"]) == 0
    again = {tuple(sorted((int(r["i"]), int(r["j"])))) for r in csv.DictReader(q2.open())}
    before = {tuple(sorted((int(r["i"]), int(r["j"])))) for r in rows}
    assert len(again) == 6 and not again & before


def test_ask_shows_the_items_a_person_knows(fitted, tmp_path, capsys):
    d, y = fitted
    run = _copy(fitted, tmp_path, "items")
    items = tmp_path / "wines.csv"
    with open(items, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "name", "cellar"])
        w.writerows([[f"W{k:03d}", f"wine, no. {k}", k % 7] for k in range(y.size)])
    q = tmp_path / "q.csv"
    argv = ["ask", str(run), "--pairs", "5", "--out", str(q), "--quiet"]
    assert main([*argv, "--items", str(items), "--columns", "name,id"]) == 0
    rows = list(csv.DictReader(q.open()))
    assert list(rows[0]) == ["pair", "i", "j", "i_name", "i_id", "j_name", "j_id", "answer"]
    for r in rows:
        i, j = int(r["i"]), int(r["j"])
        assert (r["i_name"], r["i_id"]) == (f"wine, no. {i}", f"W{i:03d}")
        assert (r["j_name"], r["j_id"]) == (f"wine, no. {j}", f"W{j:03d}")
        r["answer"] = "must" if y[i] == y[j] else "cannot"
    with open(tmp_path / "a.csv", "w", newline="") as fh:  # the file as a person returns it
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert main(["answer", str(run), str(tmp_path / "a.csv"), "--json", "--quiet"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["round"] == 1 and len(rec["answers"]) == 5


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--items", "short"], "has 100 rows and the run has 178 points; give one row per point"),
        (["--items", "ok", "--columns", "nom"], "items: no column 'nom' in"),
        (["--columns", "name"], "--columns: name names columns of the --items table; give"),
    ],
)
def test_ask_items_errors_record_nothing(fitted, tmp_path, capsys, extra, message):
    d, y = fitted
    run = _copy(fitted, tmp_path, "items-bad")
    for name, n in (("ok", y.size), ("short", 100)):
        with open(tmp_path / f"{name}.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "name"])
            w.writerows([[k, f"wine {k}"] for k in range(n)])
    extra = [str(tmp_path / f"{v}.csv") if v in ("ok", "short") else v for v in extra]
    q = tmp_path / "q.csv"
    capsys.readouterr()
    assert main(["ask", str(run), "--pairs", "5", "--out", str(q), "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not q.exists()
    with st.RunStore.open(str(run), mode="r") as rs:
        assert _active.read_state(rs)["pending"] is None


def _write(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["pair", "i", "j", "answer"])
        w.writeheader()
        w.writerows(rows)


def test_answer_errors_name_the_rows_and_record_nothing(fitted, tmp_path, capsys):
    d, y = fitted
    run = _copy(fitted, tmp_path, "errors")
    q = tmp_path / "q.csv"
    assert main(["ask", str(run), "--pairs", "4", "--out", str(q), "--quiet"]) == 0
    # the pending questions replaced by a chain a-b, b-c over an existing cannot-link (a, c)
    with st.RunStore.open(str(run), mode="a") as rs:
        cons = rs.read_inputs()["constraints"]
        k = int(np.flatnonzero(cons.t < 0)[0])
        a, c = int(cons.i[k]), int(cons.j[k])
        b = next(x for x in range(y.size) if x not in (a, c))
        state = _active.read_state(rs)
        state["pending"]["queries"] = [[a, b], [b, c], [a, b], [0, 1]]
        _active._commit(rs, state)
    base = [{"pair": 0, "i": a, "j": b, "answer": "must"},
            {"pair": 1, "i": b, "j": c, "answer": "must"}]  # fmt: skip
    cases = [
        (base + [{"pair": 9, "i": 0, "j": 0, "answer": "must"}],
         "answers: rows 4 name no question of this run (pairs 0 to 3)"),
        (base[:1] + [{"pair": 1, "i": b, "j": c, "answer": "yes"}],
         "answers: rows 3 ('yes') are not must, cannot or skip"),
        (base + [{"pair": 0, "i": a, "j": b, "answer": "cannot"}],
         "answers: pair 0 is answered twice, differently (rows 2 and 4)"),
        (base, f"answers: rows 3 (pair 1: {b}, {c}) contradict the answers so far"),
    ]  # fmt: skip
    for rows, msg in cases:
        _write(tmp_path / "bad.csv", rows)
        assert main(["answer", str(run), str(tmp_path / "bad.csv"), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err, err
        with st.RunStore.open(str(run), mode="r") as rs:
            after = _active.read_state(rs)
        assert after["rounds"] == [] and after["pending"]["queries"][0] == [a, b]
    p = main(["active", str(run), "--oracle", str(d / "y.npy"), "--quiet"])
    assert p == 2 and "questions waiting for a person" in capsys.readouterr().err


def test_damaged_record_is_named_and_restart_repairs_it(fitted, tmp_path, capsys):
    d, _ = fitted
    run = _copy(fitted, tmp_path, "damaged")
    assert main([*_argv(run, d, "--rounds", "1", "--quiet")]) == 0
    latest = run / "active" / "latest.json"
    pointer = json.loads(latest.read_text())
    pointer["state"]["rounds"][0]["answers"][0] *= -1
    latest.write_text(json.dumps(pointer))
    capsys.readouterr()
    assert main([*_argv(run, d, "--rounds", "2", "--quiet")]) == 2
    err = capsys.readouterr().err
    assert "active/latest.json does not match the sha256" in err and "--restart" in err
    assert main([*_argv(run, d, "--rounds", "1", "--restart", "--quiet")]) == 0
    with st.RunStore.open(str(run), mode="r") as rs:
        assert len(_active.read_state(rs)["rounds"]) == 1
