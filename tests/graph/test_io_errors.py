"""Issue 74, item 4: every malformed input file ends in exit status 2 and one line naming the
file, the row or column, the value and the fix: never a traceback."""

import warnings

import numpy as np
import pytest

import npkl_dist as nk
from npkl_dist import store as st
from npkl_flows import cli


@pytest.fixture
def good(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = np.repeat(np.arange(3), 20)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    i = np.arange(59)
    np.save(tmp_path / "E.npy", np.column_stack([i, i + 1]))
    return tmp_path


def _fit(capsys, *args):
    code = cli.main(["fit", *map(str, args), "--max-sweeps", "2", "--quiet"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln]
    return code, lines


@pytest.mark.parametrize("role", ["features", "edges", "labels", "constraints"])
def test_empty_npy_file(good, capsys, role):
    (good / "empty.npy").write_bytes(b"")
    args = {
        "features": ["--features", good / "empty.npy", "--labels", good / "y.npy"],
        "edges": ["--edges", good / "empty.npy", "--labels", good / "y.npy"],
        "labels": ["--features", good / "X.npy", "--labels", good / "empty.npy"],
        "constraints": ["--features", good / "X.npy", "--constraints", good / "empty.npy"],
    }[role]
    code, lines = _fit(capsys, *args)
    assert code == 2 and len(lines) == 1, lines
    assert f"{role}: " in lines[0] and "is empty (0 bytes)" in lines[0]
    assert "numpy.save" in lines[0]


def test_text_file_named_npy(good, capsys):
    (good / "text.npy").write_text("1,2,3\n4,5,6\n")
    code, lines = _fit(capsys, "--features", good / "text.npy", "--labels", good / "y.npy")
    assert code == 2 and len(lines) == 1, lines
    assert "is not a .npy file" in lines[0] and "pickle" not in lines[0]
    assert "extension .csv" in lines[0]


def test_directory_as_features(good, capsys):
    (good / "dir").mkdir()
    code, lines = _fit(capsys, "--features", good / "dir", "--labels", good / "y.npy")
    assert code == 2 and len(lines) == 1, lines
    assert "--features: " in lines[0] and "is a directory" in lines[0]
    assert "does not exist" not in lines[0]


def test_non_numeric_cell_in_an_edge_csv_names_its_row(good, capsys):
    rows = ["i,j"] + [f"{k},{k + 1}" for k in range(59)]
    rows[11] = "10,eleven"  # data row 10
    (good / "e.csv").write_text("\n".join(rows) + "\n")
    code, lines = _fit(capsys, "--edges", good / "e.csv", "--labels", good / "y.npy")
    assert code == 2 and len(lines) == 1, lines
    assert "column j" in lines[0] and "'eleven'" in lines[0] and "data row 10" in lines[0]


def test_constraints_with_a_header_only(good, capsys):
    (good / "c.csv").write_text("i,j,type\n")
    code, lines = _fit(capsys, "--features", good / "X.npy", "--constraints", good / "c.csv")
    assert code == 2 and len(lines) == 1, lines
    assert "has a header but no data rows" in lines[0]


def test_text_index_in_constraints_names_row_and_value(good, capsys):
    (good / "c.csv").write_text("i,j,type\n0,1,must\n2,three,cannot\n")
    code, lines = _fit(capsys, "--features", good / "X.npy", "--constraints", good / "c.csv")
    assert code == 2 and len(lines) == 1, lines
    assert "column j" in lines[0] and "'three'" in lines[0] and "data row 1" in lines[0]


# ---- item 5: warnings where reading changes the input --------------------------------
def _edge_warnings(fn):
    import warnings

    import npkl_dist as nk

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        g = fn()
    return g, [str(w.message) for w in seen if issubclass(w.category, nk.GraphWarning)]


def test_edge_cleanup_is_warned_and_symmetric_listings_are_not():
    import npkl_dist as nk

    sym = np.array([[0, 1], [1, 0], [1, 2], [2, 1], [2, 3], [3, 2]], float)
    _, msgs = _edge_warnings(lambda: nk.graph_from_edges(sym))
    assert not [m for m in msgs if m.startswith("edges: ")]
    dirty = np.array([[0, 1, 1], [0, 1, 1], [1, 2, 1], [2, 1, 4], [3, 3, 1], [2, 3, 1]], float)
    g, msgs = _edge_warnings(lambda: nk.graph_from_edges(dirty))
    (msg,) = [m for m in msgs if m.startswith("edges: ")]
    assert "dropped 1 self-loop" in msg and "merged 1 repeated edge" in msg
    assert "1 listing(s) of a pair carried another weight" in msg and "largest" in msg
    assert g.S[1, 2] == 4.0 and g.S[3, 3] == 0.0


def test_streamed_edges_report_what_the_whole_list_reports():
    """The streaming reader (batches merged as they come) against graph_from_edges on the
    whole list: same graph, same warning or error, for random dirty lists cut anywhere and
    every duplicates rule (weights 1 and 2: sums are exact in any order)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st_

    import npkl_dist as nk
    from npkl_dist.graph._blocks import graph_from_edge_batches

    @settings(max_examples=40, deadline=None)
    @given(
        st_.lists(
            st_.tuples(st_.integers(0, 6), st_.integers(0, 6), st_.sampled_from([1.0, 2.0])),
            min_size=2,
            max_size=30,
        ),
        st_.integers(1, 29),
        st_.sampled_from(["max", "sum", "mean", "error"]),
    )
    def check(rows, cut, rule):
        E = np.array(rows, float)
        if np.all(E[:, 0] == E[:, 1]):
            return  # only self-loops: no graph to compare
        cut = min(cut, len(E) - 1)
        parts = iter(
            [(E[:cut, 0], E[:cut, 1], E[:cut, 2], 0), (E[cut:, 0], E[cut:, 1], E[cut:, 2], cut)]
        )
        try:
            whole, w1 = _edge_warnings(lambda: nk.graph_from_edges(E, 7, duplicates=rule))
        except nk.GraphError as exc:  # 'error' and a pair with two weights: the same refusal
            with pytest.raises(nk.GraphError) as streamed_exc:
                graph_from_edge_batches(parts, 7, duplicates=rule)
            assert str(streamed_exc.value) == str(exc)
            return
        streamed, w2 = _edge_warnings(lambda: graph_from_edge_batches(parts, 7, duplicates=rule))
        assert (whole.S != streamed.S).nnz == 0
        assert [m for m in w1 if m.startswith("edges: ")] == [
            m for m in w2 if m.startswith("edges: ")
        ]

    check()


@pytest.mark.parametrize("run", [False, True])
def test_duplicates_option_on_the_command_line(good, capsys, tmp_path, run):
    """--duplicates reaches both readers (the whole-list one of a plain fit, the streamed
    one of a run's graph stage); 'error' is one line in npkl's terms."""
    i = np.arange(59)
    E = np.column_stack([np.r_[i, 5], np.r_[i + 1, 6], np.r_[np.ones(59), 3.0]])
    np.save(good / "dup.npy", E)
    where = ["--run", tmp_path / "r"] if run else []
    code, lines = _fit(capsys, "--edges", good / "dup.npy", "--labels", good / "y.npy",
                       "--duplicates", "error", *where)  # fmt: skip
    assert code == 2 and len(lines) == 1, lines
    assert "(5, 6) 2 times, largest 3, mean 2" in lines[0]
    assert lines[0].endswith("say how to combine them: --duplicates max, sum or mean")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code, _ = _fit(capsys, "--edges", good / "dup.npy", "--labels", good / "y.npy",
                       "--duplicates", "sum", *([] if not run else ["--run", tmp_path / "s"]))  # fmt: skip
    assert code == 0
    assert any("summed them" in str(w.message) for w in seen if w.category is nk.GraphWarning)
    if run:
        S = st.RunStore.open(str(tmp_path / "s"), mode="r").read_graph()
        assert S[5, 6] == 4.0 and S[6, 5] == 4.0 and S[0, 1] == 1.0


def test_a_fit_without_constraints_warns():
    import npkl_dist as nk

    X = np.random.default_rng(0).normal(size=(30, 2))
    L = nk.knn_graph(X, 5, warn=False).laplacian(1e-3)
    empty = nk.Constraints.from_arrays(np.zeros(0), np.zeros(0), np.zeros(0), 30)
    with pytest.warns(nk.ConstraintWarning, match="the set is empty.*graph alone"):
        nk.NPKLProblem.build(L, empty)


@pytest.mark.parametrize("value", ["inf", "nan", "1e999"])
def test_gamma_must_be_finite_and_positive(good, capsys, value):
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "--features", str(good / "X.npy"), "--labels", str(good / "y.npy"),
                  "--gamma", value])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --gamma: expected a finite number > 0 or 'cv', got '{value}'" in err


def test_huge_feature_values_name_the_row(good, capsys):
    X = np.random.default_rng(1).normal(size=(60, 3))
    X[17, 2] = 1e308
    np.save(good / "huge.npy", X)
    code, lines = _fit(capsys, "--features", good / "huge.npy", "--labels", good / "y.npy")
    assert code == 2 and len(lines) == 1, lines
    assert "beyond +-1e+150 in data row(s) [17]" in lines[0] and "graph" not in lines[0]


def test_bad_csv_cell_names_its_own_row(good, capsys):
    X = np.random.default_rng(1).normal(size=(60, 3))
    rows = ["a,b,c"] + [",".join(f"{v:.3f}" for v in r) for r in X]
    rows[11] = "0.1,oops,0.3"  # data row 10
    (good / "X.csv").write_text("\n".join(rows) + "\n")
    code, lines = _fit(capsys, "--features", good / "X.csv", "--labels", good / "y.npy")
    assert code == 2 and len(lines) == 1, lines
    assert "data row 10, column 1 holds 'oops'" in lines[0]


def test_trailing_isolated_nodes_suggest_n_points(good, capsys):
    i = np.arange(49)
    np.save(good / "short.npy", np.column_stack([i, i + 1]))  # nodes 0..49; 60 labels
    code, lines = _fit(capsys, "--edges", good / "short.npy", "--labels", good / "y.npy")
    assert code == 2 and len(lines) == 1, lines
    assert "60 labels for 50 points" in lines[0] and "--n-points 60" in lines[0]


def test_cli_errors_give_commands_not_python_calls():
    from npkl_flows.cli import in_cli_terms

    msgs = [
        "start a new run (RunStore.create(url, config=..., overwrite=True) or another run id)",
        "restart it from its inputs (RunStore.create(url, config=..., overwrite=True)) or",
        "read the run with RunStore.open(url, mode='r'), or RunStore.break_lock(url) (lock",
        "free space, then resume the run (RunStore.open(url, mode='a'))",
    ]
    for m in msgs:
        out = in_cli_terms(m)
        assert "RunStore" not in out and "`npkl " in out, out
