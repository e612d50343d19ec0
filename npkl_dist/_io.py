"""Reading the inputs of a fit: features, edge lists, constraints and labels.

Formats: ``.npy``; ``.csv`` (header optional for features and labels; required columns
``i, j[, w]`` for edges and ``i, j, type`` for constraints); ``.parquet``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._errors import InputFileError

__all__ = ["read_features", "read_edges", "read_constraints", "read_labels"]


def _path(path, what) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InputFileError(f"{what}: file {str(path)!r} does not exist; check the path")
    return p


def _suffix(p: Path, what, allowed):
    s = p.suffix.lower()
    if s not in allowed:
        raise InputFileError(
            f"{what}: {str(p)!r} has extension {s or '(none)'!r}; expected one of "
            f"{', '.join(allowed)}"
        )
    return s


def _read_table(p: Path, what, header_required):
    """Columns of a CSV / Parquet file as a dict name -> numpy array (in file order)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        if p.suffix.lower() == ".parquet":
            table = pq.read_table(p)
        else:
            table = pacsv.read_csv(p)
            if not header_required and _looks_numeric(table.column_names):
                table = pacsv.read_csv(
                    p, read_options=pacsv.ReadOptions(autogenerate_column_names=True)
                )
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFileError(f"{what}: cannot read {str(p)!r}: {exc}") from exc
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def _looks_numeric(names):
    try:
        [float(n) for n in names]
        return True
    except ValueError:
        return False


def read_features(path) -> np.ndarray:
    """Feature rows, shape (n_samples, n_features), float64."""
    p = _path(path, "features")
    s = _suffix(p, "features", (".npy", ".csv", ".parquet"))
    if s == ".npy":
        X = np.load(p, allow_pickle=False)
    else:
        cols = _read_table(p, "features", header_required=False)
        bad = [k for k, v in cols.items() if v.dtype.kind not in "fiub"]
        if bad:
            raise InputFileError(
                f"features: non-numeric column(s) {bad[:5]} in {str(p)!r}; encode or drop them"
            )
        X = np.column_stack([v.astype(np.float64) for v in cols.values()])
    X = np.asarray(X)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    return X


def read_edges(path) -> np.ndarray:
    """Edge list, shape (m, 2) or (m, 3) (columns i, j[, w])."""
    p = _path(path, "edges")
    s = _suffix(p, "edges", (".npy", ".csv", ".parquet"))
    if s == ".npy":
        return np.load(p, allow_pickle=False)
    cols = _read_table(p, "edges", header_required=True)
    missing = [c for c in ("i", "j") if c not in cols]
    if missing:
        raise InputFileError(
            f"edges: {str(p)!r} lacks column(s) {missing}; expected a header with i, j[, w] "
            f"(found {list(cols)[:6]})"
        )
    parts = [cols["i"], cols["j"]] + ([cols["w"]] if "w" in cols else [])
    return np.column_stack([np.asarray(c, dtype=np.float64) for c in parts])


def read_constraints(path):
    """Constraint rows as arrays ``(i, j, type)``; validation is Constraints.from_arrays'."""
    p = _path(path, "constraints")
    s = _suffix(p, "constraints", (".csv", ".parquet", ".npy"))
    if s == ".npy":
        arr = np.load(p, allow_pickle=False)
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
    return cols["i"], cols["j"], cols["type"]


def read_labels(path) -> np.ndarray:
    """One integer label per point (negative = unknown), from .npy, .csv/.txt or .parquet."""
    p = _path(path, "labels")
    s = _suffix(p, "labels", (".npy", ".csv", ".txt", ".parquet"))
    if s == ".npy":
        y = np.load(p, allow_pickle=False)
    elif s == ".txt":
        y = np.loadtxt(p)
    else:
        cols = _read_table(p, "labels", header_required=False)
        y = cols["label"] if "label" in cols else next(iter(cols.values()))
    y = np.asarray(y).ravel()
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
