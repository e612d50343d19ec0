"""bench/paper/error_split.py: where a clustering's errors fall by the points' pairs."""

import io
import json

import numpy as np

import npkl_dist as nk
from bench.paper import error_split as es


def _cons(n=12):
    # must-links: 0-1-2-3 and 4-5-6 (the two largest components: "giant"), 7-8 ("other ML");
    # cannot-links: 0-9, 4-9 (9 is "CL only"); 10 and 11 are in no pair ("free")
    i = np.array([0, 1, 2, 4, 5, 7, 0, 4])
    j = np.array([1, 2, 3, 5, 6, 8, 9, 9])
    t = np.array([1, 1, 1, 1, 1, 1, -1, -1.0])
    return nk.Constraints.from_arrays(i, j, t, n, warn=False)


def test_point_groups():
    groups = es.point_groups(_cons(), 12)
    assert [es.GROUPS[g] for g in groups] == (
        ["giant"] * 7 + ["other ML"] * 2 + ["CL only"] + ["free"] * 2
    )


def test_misassigned_is_invariant_to_cluster_names_and_takes_the_best_matching():
    y = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    labels = np.array([5, 5, 7, 7, 7, 7, 9, 9])  # one class-0 point in class 1's cluster
    assert es.misassigned(y, labels).tolist() == [False, False, True] + [False] * 5
    renamed = np.choose(np.searchsorted([5, 7, 9], labels), [2, 0, 1])
    assert (es.misassigned(y, renamed) == es.misassigned(y, labels)).all()
    assert not es.misassigned(y, 1 - np.array([0, 0, 0, 1, 1, 1, 1, 1]))[:6].any()


def test_split_counts_errors_per_group_and_violated_pairs():
    y = np.array([0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1])
    labels = y.copy()
    labels[9] = 0  # the CL-only point (class 1) goes with class 0: its CL with 0 is violated
    labels[11] = 0  # a free point wrong
    labels[8] = 1  # breaks the must-link 7-8
    out = es.split(y, labels, _cons())
    assert out["wrong giant"] == 0 and out["n giant"] == 7
    assert out["wrong other ML"] == 1 and out["n other ML"] == 2
    assert out["wrong CL only"] == 1 and out["n CL only"] == 1
    assert out["wrong free"] == 1 and out["n free"] == 2
    assert out["violated ML"] == 1 and out["violated CL"] == 1


def test_run_on_a_small_set_prints_rows_and_a_table():
    buf = io.StringIO()
    rows = es.run("iris", 1, ["k-means", "SimpleNPKL-linear"], out=buf)
    assert [r["method"] for r in rows] == ["k-means", "SimpleNPKL-linear"]
    for r in rows:  # the split covers every point
        assert sum(r[f"n {g}"] for g in es.GROUPS) == 150
        assert 0 <= sum(r[f"wrong {g}"] for g in es.GROUPS) <= 150
    lines = buf.getvalue().splitlines()
    assert json.loads(lines[0])["method"] == "k-means"
    assert lines[2].startswith("| method | reps |")
    assert lines[-1].startswith("| SimpleNPKL-linear | 1 |")
