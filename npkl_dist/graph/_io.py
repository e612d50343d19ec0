"""Reading the inputs of a fit: features, edge lists, constraints and labels.

Formats: ``.npy``; ``.csv`` (header optional for features and labels; required columns
``i, j[, w]`` for edges and ``i, j, type`` for constraints); ``.parquet``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._errors import InputFileError

__all__ = [
    "read_features",
    "iter_feature_chunks",
    "FeatureChunks",
    "read_edges",
    "read_constraints",
    "read_labels",
    "read_items",
]

#: rows per chunk of a streamed feature table: about 8 MiB of float64 (the store's chunks)
CHUNK_BYTES = 8 << 20


def _path(path, what) -> Path:
    p = Path(path)
    if p.is_dir():
        raise InputFileError(
            f"{what}: {str(path)!r} is a directory; pass the file inside it (.npy, .csv or "
            f".parquet)"
        )
    if not p.is_file():
        raise InputFileError(f"{what}: file {str(path)!r} does not exist; check the path")
    return p


def _load_npy(p: Path, what, mmap_mode=None) -> np.ndarray:
    """``np.load`` of a .npy file, any malformed file named in one line (an empty file, a
    text or pickle file named .npy, a truncated array)."""
    if p.stat().st_size == 0:
        raise InputFileError(
            f"{what}: {str(p)!r} is empty (0 bytes); write the array with numpy.save(path, a)"
        )
    try:
        return np.load(p, mmap_mode=mmap_mode, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        with p.open("rb") as f:
            head = f.read(6)
        why = (
            "it is not a .npy file (a .npy file starts with \\x93NUMPY)"
            if head != b"\x93NUMPY"
            else f"its array is truncated or damaged ({type(exc).__name__})"
        )
        raise InputFileError(
            f"{what}: cannot read {str(p)!r}: {why}; write the array with numpy.save(path, a), "
            f"or give a text table the extension .csv"
        ) from None


def _numeric(col, name, p: Path, what, start: int = 0) -> np.ndarray:
    """A table column as float64, the first non-numeric cell named (data row counted from
    ``start``, value)."""
    col = np.asarray(col)
    if col.dtype.kind in "fiub":
        return col.astype(np.float64)
    for row, v in enumerate(col):
        try:
            float(v)
        except (TypeError, ValueError):
            raise InputFileError(
                f"{what}: column {name} of {str(p)!r} holds {v!r} in data row {start + row}; every "
                f"cell of it must be a number"
            ) from None
    return col.astype(np.float64)


def _suffix(p: Path, what, allowed):
    s = p.suffix.lower()
    if s not in allowed:
        raise InputFileError(
            f"{what}: {str(p)!r} has extension {s or '(none)'!r}; expected one of "
            f"{', '.join(allowed)}"
        )
    return s


def _read_table(p: Path, what, header_required, empty_is_unlabelled=False):
    """Columns of a CSV / Parquet file as a dict name -> numpy array (in file order).

    ``empty_is_unlabelled`` (labels): a CSV's blank lines are kept as rows (pyarrow skips
    them by default, which would shift every later label onto the wrong point), and empty
    cells become -1 in a numeric column and "" in a text one: both mean unlabelled."""
    import pyarrow as pa  # lazy: pyarrow loads only to read CSV / Parquet
    import pyarrow.compute as pc  # lazy: pyarrow loads only to read CSV / Parquet
    import pyarrow.csv as pacsv  # lazy: pyarrow loads only to read CSV / Parquet
    import pyarrow.parquet as pq  # lazy: pyarrow loads only to read CSV / Parquet

    parse = pacsv.ParseOptions(ignore_empty_lines=not empty_is_unlabelled)
    try:
        if p.suffix.lower() == ".parquet":
            table = pq.read_table(p)
        else:
            table = pacsv.read_csv(p, parse_options=parse)
            if not header_required and _looks_numeric(table.column_names):
                table = pacsv.read_csv(
                    p,
                    read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                    parse_options=parse,
                )
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFileError(f"{what}: cannot read {str(p)!r}: {exc}") from exc
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if empty_is_unlabelled and col.null_count:
            if pa.types.is_null(col.type):  # a column of empty cells only
                col = pa.chunked_array([pa.array([-1] * len(col), pa.int64())])
            else:
                numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
                col = pc.fill_null(col, pa.scalar(-1 if numeric else "", col.type))
        out[name] = col.to_numpy(zero_copy_only=False)
    return out


def _looks_numeric(names):
    try:
        [float(n) for n in names]
        return True
    except ValueError:
        return False


def read_features(path) -> np.ndarray:
    """Feature rows, shape (n_samples, n_features), read whole (``npkl extend``'s new
    points; a fit streams its table with :class:`FeatureChunks`). Checked as FeatureChunks
    checks: at least one row, numeric columns, no NaN / inf / empty cell (the file and the
    rows named)."""
    p = _path(path, "features")
    s = _suffix(p, "features", (".npy", ".csv", ".parquet"))
    if s == ".npy":
        X = _load_npy(p, "features")
    else:
        cols = _read_table(p, "features", header_required=False)
        if not cols or len(next(iter(cols.values()))) == 0:  # a header alone parses as text
            raise InputFileError(f"features: {str(p)!r} has no data rows; pass at least one point")
        bad = [k for k, v in cols.items() if v.dtype.kind not in "fiub"]
        if bad:
            raise InputFileError(
                f"features: non-numeric column(s) {bad[:5]} in {str(p)!r}; encode or drop them"
            )
        X = np.column_stack([v.astype(np.float64) for v in cols.values()])
    X = np.asarray(X)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if X.ndim != 2 or X.dtype.kind not in "fiub":
        raise InputFileError(
            f"features: {str(p)!r} holds a {X.ndim}-D {X.dtype} array; expected 2-D numeric "
            f"rows (n_points, n_features)"
        )
    if X.shape[0] == 0:
        raise InputFileError(f"features: {str(p)!r} has no data rows; pass at least one point")
    return _finite_rows(X, str(p))


def _first_bad_cell(p: Path, header: bool, n_columns: int) -> str | None:
    """Where a CSV first fails to be a numeric table: 'data row R, column C holds V' or
    'data row R has K cells' (0-based, header not counted); None if it finds nothing (the
    error path only: the file is read again as text)."""
    import csv

    with open(p, newline="") as f:
        rows = csv.reader(f)
        if header:
            next(rows, None)
        for r, cells in enumerate(rows):
            if not cells:
                continue
            if len(cells) != n_columns:
                return f"data row {r} has {len(cells)} cells, not {n_columns}"
            for c, v in enumerate(cells):
                try:
                    float(v)
                except ValueError:
                    return f"data row {r}, column {c} holds {v!r}"
    return None


#: Largest magnitude of a feature: squared distances of larger values overflow float64.
FEATURE_MAX_ABS = 1e150


def _finite_rows(X, path, start=0):
    """X, after refusing NaN / inf / empty cells, naming the file and the data rows (counted
    from ``start``): the check of both feature readers."""
    bad = ~np.all(np.isfinite(X), axis=1)
    if bad.any():
        rows = (start + np.flatnonzero(bad)).tolist()
        raise InputFileError(
            f"features: {path!r} holds NaN, inf or an empty cell in data row(s) "
            f"{rows[:10]} (0-based, header not counted); impute or drop them before "
            f"learning a kernel"
        )
    huge = np.any(np.abs(X) > FEATURE_MAX_ABS, axis=1)
    if huge.any():
        rows = (start + np.flatnonzero(huge)).tolist()
        raise InputFileError(
            f"features: {path!r} holds values beyond +-{FEATURE_MAX_ABS:g} in data row(s) "
            f"{rows[:10]} (0-based, header not counted), whose squared distances overflow; "
            f"rescale those columns in the file (e.g. divide by their largest value) or fix those rows"
        )
    return X


class FeatureChunks:
    """A feature table read in row chunks, never whole: ``for start, X in FeatureChunks(p)``.

    ``.npy`` is memory-mapped and sliced; ``.csv`` is streamed by pyarrow's incremental CSV
    reader (header optional, every column parsed as float64); ``.parquet`` by record batches.
    Each chunk is a float64 array of at most ``chunk_rows`` rows, checked on arrival: errors
    name the file, the rows and the fix.

    Attributes
    ----------
    path : str
    n_features : int
        Columns (known on opening).
    n_rows : int or None
        Rows, when the format says so before reading (``.npy``, ``.parquet``); None for CSV.
    chunk_rows : int
    """

    def __init__(self, path, chunk_rows: int | None = None):
        self._p = _path(path, "features")
        self.path = str(path)
        self._kind = _suffix(self._p, "features", (".npy", ".csv", ".parquet"))
        self.n_rows = None
        if self._kind == ".npy":
            X = _load_npy(self._p, "features", mmap_mode="r")
            if X.ndim not in (1, 2) or X.dtype.kind not in "fiub":
                raise InputFileError(
                    f"features: {self.path!r} holds a {X.ndim}-D array of dtype {X.dtype}; "
                    f"expected numeric rows (n, d): save a 2-D float array"
                )
            self._X = X.reshape(-1, 1) if X.ndim == 1 else X
            self.n_rows, self.n_features = (int(v) for v in self._X.shape)
        elif self._kind == ".parquet":
            import pyarrow as pa  # lazy: pyarrow loads only to read CSV / Parquet
            import pyarrow.parquet as pq  # lazy: pyarrow loads only to read CSV / Parquet

            try:
                self._pf = pq.ParquetFile(self._p)
            except (pa.ArrowInvalid, OSError) as exc:
                raise InputFileError(f"features: cannot read {self.path!r}: {exc}") from None
            schema = self._pf.schema_arrow
            _numeric_columns(self.path, schema)
            self.n_rows, self.n_features = self._pf.metadata.num_rows, len(schema.names)
        else:
            self._csv_open()
        if chunk_rows is None:
            chunk_rows = CHUNK_BYTES // (8 * max(1, self.n_features))
        self.chunk_rows = max(1, int(chunk_rows))

    def _csv_open(self):
        import pyarrow as pa  # lazy: pyarrow loads only to read CSV / Parquet
        import pyarrow.csv as pacsv  # lazy: pyarrow loads only to read CSV / Parquet

        try:
            with pacsv.open_csv(self._p) as r:  # only the first block: the column names
                names = r.schema.names
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputFileError(
                f"features: cannot read {self.path!r}: {exc}; every row needs the same "
                f"numeric columns (header optional)"
            ) from None
        self._header = not _looks_numeric(names)
        self.n_features = len(names)
        self._names = names if self._header else [f"f{k}" for k in range(len(names))]

    def _batches(self):
        import pyarrow as pa  # lazy: pyarrow loads only to read CSV / Parquet

        if self._kind == ".parquet":
            yield from self._pf.iter_batches(batch_size=self.chunk_rows)
            return
        import pyarrow.csv as pacsv  # lazy: pyarrow loads only to read CSV / Parquet

        ro = pacsv.ReadOptions(
            block_size=max(1 << 16, min(1 << 26, self.chunk_rows * self.n_features * 24)),
            **({} if self._header else {"column_names": self._names}),
        )
        co = pacsv.ConvertOptions(column_types={c: pa.float64() for c in self._names})
        with pacsv.open_csv(self._p, read_options=ro, convert_options=co) as reader:
            yield from reader

    def __iter__(self):
        if self._kind == ".npy":
            for a in range(0, self.n_rows, self.chunk_rows):
                yield (
                    a,
                    self._check(np.asarray(self._X[a : a + self.chunk_rows], dtype=np.float64), a),
                )
            return
        import pyarrow as pa  # lazy: pyarrow loads only to read CSV / Parquet

        start = 0
        try:
            for batch in self._batches():
                cols = [
                    batch.column(k).to_numpy(zero_copy_only=False)
                    for k in range(batch.num_columns)
                ]
                B = (
                    np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])
                    if batch.num_rows
                    else np.zeros((0, self.n_features))
                )
                for a in range(0, B.shape[0], self.chunk_rows):
                    part = np.ascontiguousarray(B[a : a + self.chunk_rows])
                    yield start, self._check(part, start)
                    start += part.shape[0]
        except pa.ArrowInvalid as exc:
            where = _first_bad_cell(self._p, self._header, self.n_features)
            raise InputFileError(
                f"features: cannot read {self.path!r}: "
                + (where or f"{exc} (after data row {start})")
                + f"; every row needs the same {self.n_features} numeric columns (encode or "
                f"drop non-numeric ones, fill empty cells)"
            ) from None

    def _check(self, X, start):
        return _finite_rows(X, self.path, start)


def _numeric_columns(path, schema):
    import pyarrow as pa  # lazy: pyarrow loads only to read CSV / Parquet

    bad = [
        f.name
        for f in schema
        if not (
            pa.types.is_integer(f.type)
            or pa.types.is_floating(f.type)
            or pa.types.is_boolean(f.type)
        )
    ]
    if bad:
        raise InputFileError(
            f"features: non-numeric column(s) {bad[:5]} in {str(path)!r}; encode or drop them"
        )


def iter_feature_chunks(path, chunk_rows: int | None = None):
    """``(first_row, X_chunk)`` pairs of a feature file (see :class:`FeatureChunks`)."""
    return iter(FeatureChunks(path, chunk_rows))


def read_edges(path) -> np.ndarray:
    """Edge list, shape (m, 2) or (m, 3) (columns i, j[, w])."""
    p = _path(path, "edges")
    s = _suffix(p, "edges", (".npy", ".csv", ".parquet"))
    if s == ".npy":
        return _load_npy(p, "edges")
    cols = _read_table(p, "edges", header_required=True)
    missing = [c for c in ("i", "j") if c not in cols]
    if missing:
        raise InputFileError(
            f"edges: {str(p)!r} lacks column(s) {missing}; expected a header with i, j[, w] "
            f"(found {list(cols)[:6]})"
        )
    names = ["i", "j"] + (["w"] if "w" in cols else [])
    return np.column_stack([_numeric(cols[k], k, p, "edges") for k in names])


def read_constraints(path):
    """Constraint rows as arrays ``(i, j, type)``; validation is Constraints.from_arrays'."""
    p = _path(path, "constraints")
    s = _suffix(p, "constraints", (".csv", ".parquet", ".npy"))
    if s == ".npy":
        arr = _load_npy(p, "constraints")
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise InputFileError(
                f"constraints: {str(p)!r} has shape {arr.shape}; expected (m, 3) rows i, j, type"
            )
        return arr[:, 0], arr[:, 1], arr[:, 2]
    cols = _read_table(p, "constraints", header_required=True)
    missing = [c for c in ("i", "j", "type") if c not in cols]
    if missing:
        raise InputFileError(
            f"constraints: {str(p)!r} lacks column(s) {missing}; expected a header i,j,type with "
            f"type must/cannot or +1/-1 (found {list(cols)[:6]})"
        )
    if len(cols["i"]) == 0:
        raise InputFileError(
            f"constraints: {str(p)!r} has a header but no data rows; add rows i,j,type"
        )
    i, j = (_numeric(cols[k], k, p, "constraints") for k in ("i", "j"))
    return i, j, cols["type"]


def read_labels(path) -> np.ndarray:
    """One integer label per point (negative = unknown), from .npy, .csv/.txt or .parquet.

    A CSV / Parquet column named ``label`` (else the first); a .txt file one label per line.
    Class names (text) are coded as integers. Every line is a point: an empty line or cell
    is an unlabelled point (-1), as is a negative number."""
    p = _path(path, "labels")
    s = _suffix(p, "labels", (".npy", ".csv", ".txt", ".parquet"))
    if s == ".npy":
        y = _load_npy(p, "labels")
    elif s == ".txt":  # one label per line: numbers, or class names as in a CSV column
        lines = [line.strip() for line in p.read_text().splitlines()]  # a line, a point
        try:  # an empty line is an unlabelled point, as an empty cell is in a CSV
            y = np.array([float(v) if v else -1.0 for v in lines])
        except ValueError:
            y = np.array(lines, dtype=str)
    else:
        cols = _read_table(p, "labels", header_required=False, empty_is_unlabelled=True)
        y = cols["label"] if "label" in cols else next(iter(cols.values()))
    y = np.asarray(y)
    if y.ndim > 1 and sum(d > 1 for d in y.shape) > 1:
        raise InputFileError(
            f"labels: {str(p)!r} holds an array of shape {y.shape}; expected one label per "
            f"point (a 1-D array or a single column)"
        )
    y = y.ravel()
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise InputFileError(
                f"labels: {str(p)!r} holds non-integer values; encode classes as integers "
                f"(negative for unlabelled)"
            )
        y = y.astype(np.int64)
    elif y.dtype.kind not in "iu":
        # string class names -> codes, keeping empty strings as unlabelled
        names, y = np.unique(y.astype(str), return_inverse=True)
        if "" in names:
            y = np.where(names[y] == "", -1, y)
    return y.astype(np.int64)


def read_items(path, n_points: int, columns=None) -> dict[str, np.ndarray]:
    """What a person knows the points by (``npkl ask --items``): a CSV / Parquet table with
    a header and one row per point, in the points' order. Returns ``columns`` (every column
    when None) as name -> array of strings."""
    p = _path(path, "items")
    _suffix(p, "items", (".csv", ".parquet"))
    cols = _read_table(p, "items", header_required=True)
    if not cols:
        raise InputFileError(f"items: {str(p)!r} has no columns; give a header row")
    rows = len(next(iter(cols.values())))
    if rows != n_points:
        raise InputFileError(
            f"items: {str(p)!r} has {rows} rows and the run has {n_points} points; give one "
            f"row per point, in the order of the run's input"
        )
    names = list(cols) if columns is None else list(columns)
    unknown = [c for c in names if c not in cols]
    if unknown:
        raise InputFileError(
            f"items: no column {unknown[0]!r} in {str(p)!r}; its columns are {', '.join(cols)}"
        )
    return {c: np.asarray(cols[c]).astype(str) for c in names}
