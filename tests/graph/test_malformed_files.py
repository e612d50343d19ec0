"""Issue 74, item 4: malformed input files, generated (hypothesis): every one ends in exit
status 2 and one line naming the input, never a traceback, and nothing is written to an
existing run."""

import contextlib
import io
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from npkl_flows import cli

N = 40  # points of the good inputs
KINDS = (
    "empty", "truncated-npy", "text-as-npy", "object-npy", "3d-npy", "nan-npy", "huge-npy",
    "text-cell-csv", "ragged-csv", "header-only-csv", "garbage-csv", "garbage-parquet",
    "string-parquet", "directory", "wrong-extension",
)  # fmt: skip
ROLES = ("features", "edges", "labels", "constraints")


def _write_bad(d, kind, role, row):
    """A malformed file for ``role`` (its bad cell, if any, in data row ``row``)."""
    rng = np.random.default_rng(row)
    cols = {"features": ["a", "b"], "edges": ["i", "j"], "labels": ["label"],
            "constraints": ["i", "j", "type"]}[role]  # fmt: skip
    good_rows = [[str(int(v)) for v in rng.integers(0, N - 1, len(cols))] for _ in range(N)]
    if role == "constraints":
        for r in good_rows:
            r[2] = "must"
    if kind == "directory":
        p = d / f"{role}.csv"
        p.mkdir()
        return p
    if kind == "wrong-extension":
        p = d / f"{role}.xlsx"
        p.write_text("1,2\n")
        return p
    if kind.endswith("-npy") or kind == "empty":
        p = d / f"{role}.npy"
        shape = {"features": (N, 2), "edges": (N, 2), "labels": (N,), "constraints": (N, 3)}
        a = rng.integers(0, N - 1, shape[role]).astype(np.float64)
        if kind == "empty":
            p.write_bytes(b"")
        elif kind == "truncated-npy":
            np.save(p, a)
            p.write_bytes(p.read_bytes()[: 60 + row])
        elif kind == "text-as-npy":
            p.write_text("\n".join(",".join(r) for r in good_rows))
        elif kind == "object-npy":
            np.save(p, np.array([{"a": 1}] * N, dtype=object), allow_pickle=True)
        elif kind == "3d-npy":
            np.save(p, np.zeros((2, 2, 2)))
        elif kind == "nan-npy":
            a[row % N] = np.nan
            np.save(p, a)
        elif kind == "huge-npy":
            a[row % N] = 1e300 if role == "features" else 1.5  # edges, labels: not whole
            np.save(p, a)
        return p
    if kind.endswith("-parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = d / f"{role}.parquet"
        if kind == "garbage-parquet":
            p.write_bytes(os.urandom(64 + row))
        else:
            data = {c: [r[k] for r in good_rows] for k, c in enumerate(cols)}
            data[cols[0]][row % N] = "x"
            pq.write_table(pa.table({c: pa.array(v) for c, v in data.items()}), p)
        return p
    p = d / f"{role}.csv"
    if kind == "garbage-csv":
        p.write_bytes(b"\x00\xff" * (8 + row))
        return p
    if kind == "header-only-csv":
        p.write_text(",".join(cols) + "\n")
        return p
    rows = [list(r) for r in good_rows]
    if kind == "text-cell-csv":
        rows[row % N][0] = "oops"
    elif kind == "ragged-csv":
        rows[row % N].append("7")
    p.write_text(",".join(cols) + "\n" + "\n".join(",".join(r) for r in rows) + "\n")
    return p


def _good(d):
    rng = np.random.default_rng(0)
    np.save(d / "X.npy", rng.normal(size=(N, 2)))
    np.save(d / "y.npy", np.repeat(np.arange(4), N // 4))
    i = np.arange(N - 1)
    np.save(d / "E.npy", np.column_stack([i, i + 1]))


def _snapshot(run):
    return sorted(
        (str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    _good(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(["fit", "--features", str(d / "X.npy"), "--labels", str(d / "y.npy"),
                         "--max-sweeps", "3", "--quiet", "--run", str(d / "run")])  # fmt: skip
    assert code == 0
    return d


def _call(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                code = cli.main([str(a) for a in argv])
            except SystemExit as exc:  # argparse's own errors
                code = exc.code
    return code, [ln for ln in err.getvalue().strip().splitlines() if ln]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kind=st.sampled_from(KINDS), role=st.sampled_from(ROLES), row=st.integers(0, 30))
def test_malformed_input_is_one_line_and_exit_2(tmp_path_factory, finished_run, kind, role, row):
    # a text cell among numbers is a class name in a label column (read_labels), not an error
    assume(not (role == "labels" and kind in ("text-cell-csv", "string-parquet")))
    d = tmp_path_factory.mktemp("bad")
    _good(d)
    bad = _write_bad(d, kind, role, row)
    argv = ["fit", "--max-sweeps", "2", "--quiet"]
    argv += (
        ["--edges", bad]
        if role == "edges"
        else ["--features", bad if role == "features" else d / "X.npy"]
    )
    if role == "constraints":
        argv += ["--constraints", bad]
    else:
        argv += ["--labels", bad if role == "labels" else d / "y.npy"]
    code, lines = _call(argv)
    assert code == 2, (kind, role, lines)
    assert len(lines) == 1 or lines[0].startswith("usage:"), (kind, role, lines)
    assert "Traceback" not in "\n".join(lines)
    assert f"{role}" in lines[-1] or "--" + role in lines[-1], (kind, role, lines)
    if role == "features":  # the same file given to a finished run: nothing written to it
        run = finished_run / "run"
        before = _snapshot(run)
        code, lines = _call(["extend", run, "--features", bad, "--out", d / "out"])
        assert code == 2 and "Traceback" not in "\n".join(lines), (kind, lines)
        assert _snapshot(run) == before
