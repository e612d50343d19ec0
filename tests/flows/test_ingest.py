"""Feature tables streamed into the run store in row chunks, never whole in one process."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

pytest.importorskip("zarr")

from npkl_dist import InputFileError, ValidationError  # noqa: E402
from npkl_dist import store as st  # noqa: E402
from npkl_dist.graph._io import FeatureChunks, read_features, read_labels  # noqa: E402


def _write(path, X, header=True):
    s = path.suffix
    if s == ".npy":
        np.save(path, X)
    elif s == ".csv":
        np.savetxt(
            path,
            X,
            delimiter=",",
            comments="",
            fmt="%.17g",
            header=",".join(f"c{k}" for k in range(X.shape[1])) if header else "",
        )
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(
            pa.table({f"c{k}": X[:, k] for k in range(X.shape[1])}), path, row_group_size=700
        )


def _sha(rs):
    rec = rs.stages()["inputs"]["items"]["features"]
    return rec["sha256"], rec["xxh3_128"]  # the identity and the fast check


@pytest.mark.parametrize(
    "name, header", [("X.npy", True), ("X.csv", True), ("Xn.csv", False), ("X.parquet", True)]
)
def test_streamed_features_equal_the_whole_file(tmp_path, name, header):
    X = np.random.default_rng(1).normal(size=(3000, 6))
    # an integer-looking column parses as float too (no -0: a whole-file read infers int64
    # for it and loses the sign of zero, a streamed one keeps it)
    X[:, 2] = np.round(np.abs(X[:, 2]))
    path = tmp_path / name.replace("Xn", "X")
    _write(path, X, header)
    fc = FeatureChunks(path, chunk_rows=256)  # the file is ~12 chunks
    sizes = [c.shape[0] for _, c in FeatureChunks(path, chunk_rows=256)]
    assert len(sizes) >= 12 and max(sizes) <= 256 and sum(sizes) == 3000
    with (
        st.RunStore.create(str(tmp_path / "a"), config={}) as a,
        st.RunStore.create(str(tmp_path / "b"), config={}) as b,
    ):
        assert a.write_features_chunks(fc, n_features=fc.n_features, n_rows=fc.n_rows) == 3000
        whole = read_features(path)
        np.testing.assert_array_equal(whole, X)
        np.testing.assert_array_equal(a.read_inputs()["features"], whole)
        b.write_inputs(features=whole)  # the same item hash as writing the whole table
        assert _sha(a) == _sha(b)
        # a retry (other chunking) is a no-op; different content is refused
        a.write_features_chunks(
            FeatureChunks(path, chunk_rows=1000), n_features=6, n_rows=fc.n_rows
        )
        with pytest.raises(st.StoreError, match="different content"):
            a.write_features_chunks([X[:10] + 1.0], n_features=6)


def test_chunks_are_recut_into_whole_store_chunks(tmp_path):
    """d = 1024: the store's chunks hold 1024 rows; reader chunks of 300 rows are re-cut."""
    X = np.random.default_rng(2).normal(size=(2500, 1024))
    np.save(tmp_path / "X.npy", X)
    for n_rows in (2500, None):  # known in advance (hashed on the way) or not (read back)
        with st.RunStore.create(str(tmp_path / f"r{n_rows}"), config={}) as rs:
            rs.write_features_chunks(
                FeatureChunks(tmp_path / "X.npy", chunk_rows=300), n_features=1024, n_rows=n_rows
            )
            import zarr

            a = zarr.open_array(rs._store(), path="inputs/features", mode="r")
            assert a.chunks == (1024, 1024) and a.shape == (2500, 1024)
            np.testing.assert_array_equal(a[...], X)
            sha = _sha(rs)
    with st.RunStore.create(str(tmp_path / "whole"), config={}) as rs:
        rs.write_inputs(features=X)
        assert _sha(rs) == sha


def test_streaming_holds_one_chunk_not_the_table(tmp_path):
    n, d = 25_000, 512  # 102 MB on disk, written in pieces (never whole here either)
    M = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=np.float64, shape=(n, d))
    rng = np.random.default_rng(3)
    for a in range(0, n, 5000):
        M[a : a + 5000] = rng.normal(size=(5000, d))
    M.flush()
    del M
    with st.RunStore.create(str(tmp_path / "r"), config={}) as rs:
        fc = FeatureChunks(tmp_path / "X.npy", chunk_rows=1000)
        tracemalloc.start()
        try:
            rs.write_features_chunks(fc, n_features=fc.n_features, n_rows=fc.n_rows)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert rs.read_inputs()["features"].shape == (n, d)
    # a few store chunks (8 MiB each: re-cutting, encoding) and one reader chunk (4 MB),
    # whatever the table's size; measured 35 MB
    assert peak < 48e6 and peak < 0.5 * n * d * 8, peak


@pytest.mark.parametrize(
    "name, content, needle",
    [
        (
            "nan.csv",
            "a,b\n1,2\n3,nan\n5,6\n",
            r"'.*nan.csv' holds NaN, inf or an empty cell in "
            r"data row\(s\) \[1\].*impute or drop",
        ),
        ("empty.csv", "a,b\n1,2\n3,\n", r"empty cell in data row\(s\) \[1\]"),
        ("text.csv", "a,b\n1,2\n3,x\n", r"cannot read '.*text.csv'.*numeric columns"),
        (
            "ragged.csv",
            "a,b\n1,2\n3,4,5\n",
            r"cannot read '.*ragged.csv'.*Expected 2 columns, got 3.*same numeric",
        ),
        ("x.txt", "1,2\n", r"extension '.txt'; expected one of .npy, .csv, .parquet"),
        ("missing.npy", None, r"file '.*missing.npy' does not exist; check the path"),
    ],
)
def test_bad_feature_files_name_file_row_and_fix(tmp_path, name, content, needle):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputFileError, match=needle):
        list(FeatureChunks(path, chunk_rows=1))


def test_bad_npy_and_parquet_inputs(tmp_path):
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2)))
    with pytest.raises(InputFileError, match=r"'.*cube.npy' holds a 3-D array .* 2-D float"):
        FeatureChunks(tmp_path / "cube.npy")
    X = np.ones((4, 2))
    X[3, 1] = np.inf
    np.save(tmp_path / "inf.npy", X)
    with pytest.raises(InputFileError, match=r"data row\(s\) \[3\]"):
        list(FeatureChunks(tmp_path / "inf.npy", chunk_rows=2))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1.0, 2.0], "name": ["x", "y"]}), tmp_path / "s.parquet")
    with pytest.raises(InputFileError, match=r"non-numeric column\(s\) \['name'\]"):
        FeatureChunks(tmp_path / "s.parquet")
    with st.RunStore.create(str(tmp_path / "r"), config={}) as rs:
        with pytest.raises(ValidationError, match="same 3 columns"):
            rs.write_features_chunks([np.ones((2, 3)), np.ones((2, 4))], n_features=3)


def test_fit_reports_a_bad_feature_file_in_one_line(tmp_path, capsys):
    from npkl_flows.cli import main

    (tmp_path / "X.csv").write_text("a,b\n" + "1,2\n" * 20 + "3,inf\n")
    np.save(tmp_path / "y.npy", np.zeros(21, np.int64))
    code = main(
        [
            "fit",
            "--features",
            str(tmp_path / "X.csv"),
            "--labels",
            str(tmp_path / "y.npy"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "X.csv' holds NaN, inf or an empty cell in data row(s) [20]" in err
    assert "Traceback" not in err
    # the file's fault, read while the run stored it: no advice about the run location
    assert "failed in run" not in err and "writable" not in err and "resume" not in err


def test_store_passes_a_bad_input_file_error_through(tmp_path):
    """A feature file read lazily by write_features_chunks raises InputFileError (an
    OSError): the store lets it through as it is instead of calling it a store failure."""
    X = np.ones((6, 2))
    X[4, 0] = np.nan
    np.save(tmp_path / "X.npy", X)
    with st.RunStore.create(str(tmp_path / "r"), config={}) as rs:
        fc = FeatureChunks(tmp_path / "X.npy", chunk_rows=2)
        with pytest.raises(InputFileError) as info:
            rs.write_features_chunks(fc, n_features=fc.n_features, n_rows=fc.n_rows)
        assert not isinstance(info.value, st.StoreError)
        assert "data row(s) [4]" in str(info.value) and "failed in run" not in str(info.value)
        assert not rs.stage_done("inputs")


@pytest.mark.parametrize(
    "name, content, needle",
    [
        (
            "nan.npy",
            np.array([[1.0, 2.0], [np.nan, 1.0], [0.0, np.inf]]),
            r"'.*nan.npy' holds NaN, inf or an empty cell in data row\(s\) \[1, 2\].*impute",
        ),
        ("empty.npy", np.zeros((0, 3)), r"'.*empty.npy' has no data rows; pass at least one"),
        ("cube.npy", np.zeros((2, 2, 2)), r"'.*cube.npy' holds a 3-D float64 array; expected 2-D"),
        ("header.csv", "a,b\n", r"'.*header.csv' has no data rows"),
        (
            "hole.csv",
            "a,b\n1,2\n3,\n",
            r"'.*hole.csv' holds NaN, inf or an empty cell in data "
            r"row\(s\) \[1\]",
        ),
    ],
)
def test_read_features_checks_as_the_streamed_reader_does(tmp_path, name, content, needle):
    """read_features (npkl extend's new points) names the file, the rows and the fix, as
    FeatureChunks does for a fit: an empty table used to reach scikit-learn's
    NearestNeighbors and a header-only CSV was called non-numeric."""
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content)
    with pytest.raises(InputFileError, match=needle):
        read_features(path)


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("a.npy", np.array([0, 1, -1]), [0, 1, -1]),
        ("b.npy", np.array([0.0, 2.0, -1.0]), [0, 2, -1]),
        ("col.npy", np.array([[0], [1], [1]]), [0, 1, 1]),
        ("n.txt", "0\n-1\n\n1\n\n", [0, -1, -1, 1, -1]),  # a blank line: unlabelled, as in a CSV
        ("names.txt", "cat\ndog\n\ncat\n", [1, 2, -1, 1]),  # class names (was a traceback)
        ("h.csv", "label\n3\n1\n3\n", [3, 1, 3]),
        ("names.csv", "label\ncat\n\ndog\n", [1, -1, 2]),
    ],
)
def test_read_labels_formats(tmp_path, name, content, expected):
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content)
    got = read_labels(path)
    assert got.dtype == np.int64 and got.tolist() == expected


@pytest.mark.parametrize(
    "name, content, needle",
    [
        ("wide.npy", np.zeros((4, 2), np.int64), r"shape \(4, 2\); expected one label per point"),
        ("frac.npy", np.array([0.0, 0.5]), r"holds non-integer values"),
        ("nan.npy", np.array([0.0, np.nan]), r"holds non-integer values"),
    ],
)
def test_read_labels_refuses_what_is_not_one_label_per_point(tmp_path, name, content, needle):
    np.save(tmp_path / name, content)
    with pytest.raises(InputFileError, match=needle):
        read_labels(tmp_path / name)


@pytest.mark.parametrize(
    "content, expected",
    [
        ("label\n3\n\n1\n", [3, -1, 1]),  # pyarrow dropped the blank line: 1 moved up a point
        ("label\ncat\n\ndog\n", [1, -1, 2]),
        ("i,label\n0,3\n1,\n2,1\n", [3, -1, 1]),  # an empty cell in a numeric column
        ("7\n\n", [7, -1]),  # no header
    ],
)
def test_csv_labels_keep_blank_lines_as_unlabelled_points(tmp_path, content, expected):
    (tmp_path / "y.csv").write_text(content)
    assert read_labels(tmp_path / "y.csv").tolist() == expected
