"""The run store's stage data: inputs (features, constraints, labels), the graph, the sweep
plan and the results, each written once by its stage and read back verified."""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .._errors import ValidationError
from ..problem._constraints import Constraints
from ..solvers._plan import SweepPlan
from ._errors import StoreDamagedError
from ._format import (
    _ITEM_NAME,
    _KEY_ENCODING,
    _TARGET_CHUNK_BYTES,
    Digests,
    _chunks_1d,
    _item_record,
    _jsonable,
    _le,
    _positive_int,
    _put_array,
    _sha_arrays,
    _sha_json,
    _xxh_arrays,
)

#: Verify whole-stage reads against their recorded hashes. Only bench/integrity.py turns it
#: off, to measure what the checks cost (docs/performance.md); never off in use.
VERIFY = True

#: The pipeline stage that recomputes each stored stage's data (``npkl resume RUN --redo``).
REDO_STAGE = {"inputs": "ingest", "graph": "graph", "plan": "plan", "results": "learn"}


def _row_sums(indptr, data, n: int) -> np.ndarray:
    """The graph's degrees (float64 row sums of CSR data), as stored with it."""
    rows = np.repeat(np.arange(n), np.diff(indptr))
    return np.bincount(rows, weights=np.asarray(data, np.float64), minlength=n)


class StageData:
    """Mixin of :class:`~npkl_dist.store.RunStore`: the arrays of the pipeline's stages.

    Every whole read is verified against the sha256 recorded when the stage was written:
    storage that lost a chunk (read back as the fill value), truncated one (a decode error)
    or holds other valid data gives a StoreError naming the stage, the array and the fix,
    never the data."""

    def verify_stages(self) -> dict:
        """``{stage: message}`` for each written stage whose data does not match its record
        (inputs, graph, plan, results; checkpoints are verified when read): empty when
        every stage is intact. Reads every stage whole."""
        readers = {
            "inputs": self.read_inputs,
            "graph": self.read_graph,
            "plan": self.read_plan,
            "results": self.read_results,
        }
        record = self.stages()
        damaged = {}
        for stage, read in readers.items():
            if record.get(stage, {}).get("items"):
                try:
                    read()
                except StoreDamagedError as exc:
                    damaged[stage] = str(exc)
        learn = record.get("learn", {}).get("info", {}) or {}
        if learn.get("model_key") and learn.get("model_sha256"):  # an inductive run's model
            try:
                self.read_stage_object("learn", learn["model_key"], learn["model_sha256"])
            except StoreDamagedError as exc:
                damaged["learn"] = str(exc)
        return damaged

    def read_stage_object(
        self, stage: str, key: str, sha256: str, *, what: str | None = None, repair=None
    ) -> bytes:
        """The object ``key`` a stage wrote (e.g. an inductive run's model), checked against
        the sha256 its record holds; ``what`` and ``repair`` as :meth:`_damaged`."""
        import hashlib

        with self._io(f"reading {key}"):
            try:
                data = self._objects.read(key)
            except FileNotFoundError:
                raise self._damaged(stage, key, "is missing", what=what, repair=repair) from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise self._damaged(
                stage, key, "does not match the sha256 recorded when it was written",
                what=what, repair=repair,
            )  # fmt: skip
        return data

    def _damaged(self, stage: str, name: str, why: str, *, what=None, repair=None):
        """Damage of ``stage``'s item ``name``; ``what`` names the record instead of "the
        <stage> stage's", ``repair`` replaces the ``--redo`` advice (records outside the
        stages, e.g. active learning's)."""
        repair = repair or (
            f"recompute that stage and the ones after it with `npkl resume {self.url} --redo "
            f"{REDO_STAGE.get(stage, stage)}`"
        )
        return StoreDamagedError(
            f"run {self.url}: {what or f'the {stage} stage'}'s {name} {why}: the storage lost "
            f"or changed data after it was written; {repair}"
        )

    def _read(self, stage: str, name: str, array, sel=Ellipsis) -> np.ndarray:
        """``array[sel]``, a decode failure named as damage of ``stage``'s ``name``."""
        try:
            return np.asarray(array[sel])
        except OSError:
            raise  # the caller's _io names disk errors and their fixes
        except Exception as exc:  # a truncated or corrupt chunk: zstd, crc32c, shape, ...
            raise self._damaged(stage, name, f"is unreadable ({type(exc).__name__})") from None

    def _verify(self, stage: str, name: str, recorded: dict, digest) -> None:
        """Check an item against its record (skipped with VERIFY off). ``digest``: its
        sha256, or ``digest(hasher)`` hashing the item's arrays with ``hasher``: xxh3-128
        where the record has one, else sha256 (runs written before it had one)."""
        if not VERIFY:
            return
        if isinstance(digest, str):
            ok = recorded.get("sha256") == digest
        elif "xxh3_128" in recorded:
            ok = recorded["xxh3_128"] == digest(_xxh_arrays)
        else:
            ok = recorded.get("sha256") == digest(_sha_arrays)
        if not ok:
            raise self._damaged(
                stage, name, "does not match the sha256 recorded when it was written"
            )

    # ------------------------------------------------------------------ inputs
    def write_inputs(
        self, *, features=None, constraints=None, labels=None, eval_labels=None
    ) -> None:
        """Write the run's inputs (each item once; same content again is a no-op).

        Parameters
        ----------
        features : array-like of float, shape (n, d), optional
            Stored chunked by rows.
        constraints : Constraints, optional
        labels, eval_labels : array-like of int, shape (n,), optional
            Stored as int64 (negative = unlabelled).
        """
        self._require_writer("write_inputs")
        arrays, sizes = {}, {}
        if features is not None:
            X = np.asarray(features)
            if X.ndim != 2 or X.dtype.kind != "f":
                raise ValidationError(
                    f"features: expected a 2-D float array (n, d), got dtype {X.dtype} shape "
                    f"{X.shape}; convert with np.asarray(X, dtype=np.float64)"
                )
            if not np.all(np.isfinite(X)):
                raise ValidationError("features: holds NaN/inf; clean or impute them first")
            arrays["features"] = X
            sizes["features"] = X.shape[0]
        if constraints is not None:
            if not isinstance(constraints, Constraints):
                raise ValidationError(
                    f"constraints: expected a Constraints, got {type(constraints).__name__}; "
                    f"build one with Constraints.from_arrays(i, j, t, n_points)"
                )
            sizes["constraints"] = constraints.n_points
        for name, value in (("labels", labels), ("eval_labels", eval_labels)):
            if value is not None:
                y = np.asarray(value)
                if y.ndim != 1 or y.dtype.kind not in "iu":
                    raise ValidationError(
                        f"{name}: expected a 1-D integer array, got dtype {y.dtype} shape "
                        f"{y.shape}; encode classes as 0..K-1 and unlabelled points as -1"
                    )
                arrays[name] = y.astype(np.int64)
                sizes[name] = y.shape[0]
        with self._io("writing the inputs"):
            recorded_n = self._read_stages().get("inputs", {}).get("info", {}).get("n_points")
            ns = set(sizes.values()) | ({recorded_n} if recorded_n is not None else set())
            if len(ns) > 1:
                raise ValidationError(
                    f"write_inputs: the inputs disagree on the number of points: "
                    f"{sizes}"
                    + (f", recorded {recorded_n}" if recorded_n is not None else "")
                    + "; every input must describe the same n points"
                )
            records = {name: _item_record(name, a) for name, a in arrays.items()}
            if constraints is not None:
                c = constraints
                records["constraints"] = _item_record(
                    "constraints",
                    c.i,
                    c.j,
                    c.t,
                    extra={
                        "n_points": c.n_points,
                        "diagonal": c.diagonal,
                        "n_duplicates": c.n_duplicates,
                    },
                )
            todo = self._plan_items("inputs", {k: v["sha256"] for k, v in records.items()})
            group = self._group("inputs")
            for name in todo:
                if name == "features":
                    X = arrays[name]
                    rows = max(
                        1, min(X.shape[0], _TARGET_CHUNK_BYTES // max(1, X.shape[1] * X.itemsize))
                    )
                    _put_array(group, name, X, (rows, max(1, X.shape[1])))
                elif name == "constraints":
                    c = constraints
                    cg = group.create_group(
                        "constraints",
                        overwrite=True,
                        attributes={
                            "n_points": c.n_points,
                            "diagonal": bool(c.diagonal),
                            "n_duplicates": int(c.n_duplicates),
                        },
                    )
                    for key, arr in (("i", c.i), ("j", c.j), ("t", c.t)):
                        arr = np.asarray(arr)
                        _put_array(cg, key, arr, _chunks_1d(arr.shape[0], arr.itemsize))
                else:
                    y = arrays[name]
                    _put_array(group, name, y, _chunks_1d(y.shape[0], y.itemsize))
            if todo:
                info = {"n_points": next(iter(ns))} if ns else {}
                self._record_items("inputs", {k: records[k] for k in todo}, info)

    def write_features_chunks(self, chunks, *, n_features: int, n_rows: int | None = None) -> int:
        """Write ``inputs/features`` from row chunks, holding at most one store chunk.

        Same array, chunking and item hash as ``write_inputs(features=X)`` for the
        concatenated chunks (storage/SPEC.md §5), so a retry is a no-op and different
        content is refused. Chunks are re-cut into whole store chunks (one write each).

        Parameters
        ----------
        chunks : iterable of ``(first_row, X)`` or of ``X``
            float64 arrays (m, n_features) in row order (e.g. :class:`npkl_dist.graph._io.
            FeatureChunks`), already checked for NaN/inf.
        n_features : int
        n_rows : int, optional
            Total rows when known before reading (``.npy``, ``.parquet``): the hash is then
            computed on the way; otherwise the written array is read back once to hash it.

        Returns
        -------
        int
            The number of rows (points).
        """
        self._require_writer("write_features_chunks")
        d = _positive_int(int(n_features), "n_features")
        dtype = np.dtype("<f8")
        rows = max(1, _TARGET_CHUNK_BYTES // (d * dtype.itemsize))
        with self._io("writing the features"):
            recorded = self._read_stages().get("inputs", {}).get("items", {}).get("features")
            group = self._group("inputs")
            if recorded is not None:  # hash only, against the recorded array's shape
                n_hdr, a = int(group["features"].shape[0]), None
            else:
                n_hdr = n_rows
                if n_rows is not None:
                    rows = max(1, min(int(n_rows), rows))
                a = group.create_array(
                    "features",
                    shape=(int(n_rows or 0), d),
                    dtype=dtype,
                    chunks=(rows, d),
                    fill_value=0,
                    overwrite=True,
                    config={"write_empty_chunks": True},
                    chunk_key_encoding=_KEY_ENCODING,
                )
            h = Digests(f"{dtype.str}{(n_hdr, d)};".encode()) if n_hdr is not None else None
            n, pending, held = 0, [], 0

            def flush(block):
                nonlocal n
                if h is not None:
                    h.update(_le(block).reshape(-1).view(np.uint8))
                if a is not None:
                    if n_rows is None:
                        a.append(block, axis=0)
                    else:
                        a[n : n + block.shape[0]] = block
                n += block.shape[0]

            for item in chunks:
                X = item[1] if isinstance(item, tuple) else item
                X = np.asarray(X, dtype=dtype)
                if X.ndim != 2 or X.shape[1] != d:
                    raise ValidationError(
                        f"features: a chunk of shape {X.shape} after row {n + held}; every "
                        f"chunk must have the same {d} columns"
                    )
                pending.append(X)
                held += X.shape[0]
                while held >= rows:  # whole store chunks: one writer, one write each
                    buf = np.concatenate(pending) if len(pending) > 1 else pending[0]
                    flush(buf[:rows])
                    rest = buf[rows:]
                    pending, held = ([rest] if rest.shape[0] else []), rest.shape[0]
            if held:
                flush(np.concatenate(pending) if len(pending) > 1 else pending[0])
            if n == 0:
                raise ValidationError("features: the table has no rows; pass at least 2 points")
            if n_rows is not None and n != n_rows:
                raise ValidationError(
                    f"features: {n} rows read where the file announced {n_rows}; the file "
                    f"changed while it was read or is damaged: read it again"
                )
            if h is None:  # rows unknown before reading: hash the written array back
                h = Digests(f"{dtype.str}{(n, d)};".encode())
                for s0 in range(0, n, rows):
                    h.update(_le(np.asarray(a[s0 : s0 + rows])).reshape(-1).view(np.uint8))
            if recorded is not None and n != n_hdr:
                h = Digests(f"{dtype.str}{(n, d)};".encode())  # differs: refused
            todo = self._plan_items("inputs", {"features": h.hexdigest()})
            if todo:
                recorded_n = self._read_stages().get("inputs", {}).get("info", {}).get("n_points")
                if recorded_n is not None and recorded_n != n:
                    raise ValidationError(
                        f"write_features_chunks: {n} feature rows, but the run's other "
                        f"inputs describe {recorded_n} points; every input must describe "
                        f"the same n points"
                    )
                self._record_items(
                    "inputs",
                    {"features": h.record("features")},
                    {"n_points": n},
                )
            return n

    def read_inputs(self) -> dict:
        """The inputs written so far: keys among features, constraints, labels, eval_labels."""
        with self._io("reading the inputs"):
            items = self._stage_items("inputs", "write_inputs")
            group = self._group("inputs")
            out = {}
            for name in items:
                try:
                    node = group[name]
                except KeyError:
                    raise self._damaged("inputs", name, "is missing") from None
                if name == "constraints":
                    at = dict(node.attrs)
                    i, j, t = (self._read("inputs", f"constraints/{k}", node[k]) for k in "ijt")
                    extra = {
                        "n_points": at["n_points"],
                        "diagonal": at["diagonal"],
                        "n_duplicates": at["n_duplicates"],
                    }
                    self._verify("inputs", name, items[name], lambda h: h(i, j, t, extra=extra))
                    c = Constraints.from_arrays(
                        i, j, t, int(at["n_points"]), diagonal=bool(at["diagonal"]), warn=False
                    )
                    out[name] = dataclasses.replace(c, n_duplicates=int(at["n_duplicates"]))
                else:
                    a = self._read("inputs", name, node)
                    self._verify("inputs", name, items[name], lambda h: h(a))
                    out[name] = a
            return out

    # ------------------------------------------------------------------ graph
    def write_graph(self, S, *, row_block: int = 65536) -> None:
        """Write the manifold graph S (n x n sparse) as CSR in row blocks, plus degrees.

        ``indptr`` (n+1,) int64 chunked by ``row_block``; ``indices`` and ``data`` (nnz,)
        chunked by about 8 MiB; ``block_ptr`` (n_blocks+1,) int64: nnz offset of each row
        block; ``degrees`` (n,) float64 row sums. A row block is read with
        ``read_graph(rows=(start, stop))`` touching O(block * degree) data.
        """
        self._require_writer("write_graph")
        if not sp.issparse(S):
            raise ValidationError(
                f"S: expected a scipy.sparse matrix, got {type(S).__name__}; pass "
                f"scipy.sparse.csr_matrix(S)"
            )
        S = S.tocsr() if S.format != "csr" else S
        if S.shape[0] != S.shape[1]:
            raise ValidationError(f"S: expected a square matrix, got shape {S.shape}")
        row_block = _positive_int(row_block, "row_block")
        n = S.shape[0]
        indptr = S.indptr.astype(np.int64)
        indices = np.asarray(S.indices)
        data = np.asarray(S.data)
        if data.size and not np.all(np.isfinite(data)):
            raise ValidationError("S: holds NaN/inf weights; fix the graph first")
        with self._io("writing the graph"):
            rec = _item_record("csr", indptr, indices, data, extra={"shape": list(S.shape)})
            if not self._plan_items("graph", {"S": rec["sha256"]}):
                return
            degrees = _row_sums(indptr, data, n)
            n_blocks = -(-n // row_block)
            block_ptr = indptr[np.minimum(np.arange(n_blocks + 1) * row_block, n)]
            group = self._replace_group(
                "graph",
                {
                    "format": "csr",
                    "shape": [int(n), int(n)],
                    "nnz": int(S.nnz),
                    "row_block": row_block,
                },
            )
            _put_array(group, "indptr", indptr, (min(row_block, n + 1),))
            _put_array(group, "indices", indices, _chunks_1d(indices.size, indices.itemsize))
            _put_array(group, "data", data, _chunks_1d(data.size, data.itemsize))
            _put_array(group, "degrees", degrees, (max(1, min(row_block, n)),))
            _put_array(group, "block_ptr", block_ptr, _chunks_1d(block_ptr.size, 8))
            self._record_items(
                "graph",
                {
                    "S": rec,
                    # its own hash: read_degrees verifies n floats, not the whole graph
                    "degrees": _item_record("array", degrees),
                },
                {"n_points": int(n), "nnz": int(S.nnz), "row_block": row_block},
            )

    def read_graph(self, rows=None) -> sp.csr_matrix:
        """The graph as CSR; ``rows=(start, stop)`` reads only those rows.

        Returns
        -------
        scipy.sparse.csr_matrix, shape (n, n) or (stop - start, n)
        """
        with self._io("reading the graph"):
            items = self._stage_items("graph", "write_graph")
            g = self._group("graph")
            n = int(g.attrs["shape"][0])
            if rows is None:
                for k in ("indptr", "indices", "data"):
                    if k not in g:
                        raise self._damaged("graph", k, "is missing")
                indptr, indices, data = (
                    self._read("graph", k, g[k]) for k in ("indptr", "indices", "data")
                )
                self._verify(
                    "graph",
                    "CSR arrays (indptr, indices, data)",
                    items["S"],
                    lambda h: h(indptr, indices, data, extra={"shape": [n, n]}),
                )
                return sp.csr_matrix((data, indices, indptr), shape=(n, n))
            start, stop = (
                (rows.start or 0, n if rows.stop is None else rows.stop)
                if isinstance(rows, slice)
                else rows
            )
            if not (0 <= start <= stop <= n):
                raise ValidationError(f"rows: ({start}, {stop}) is not within [0, {n}]")
            ptr = g["indptr"][start : stop + 1]
            lo, hi = int(ptr[0]), int(ptr[-1])
            return sp.csr_matrix(
                (g["data"][lo:hi], g["indices"][lo:hi], ptr - lo), shape=(stop - start, n)
            )

    def read_degrees(self) -> np.ndarray:
        """Row sums of the graph, (n,) float64, verified against their recorded hash (a run
        written before the degrees had one: against the row sums of the verified graph)."""
        with self._io("reading the graph degrees"):
            items = self._stage_items("graph", "write_graph")
            g = self._group("graph")
            if not VERIFY:
                return np.asarray(g["degrees"][...])
            if "degrees" in items:
                if "degrees" not in g:
                    raise self._damaged("graph", "degrees", "is missing")
                stored = self._read("graph", "degrees", g["degrees"])
                self._verify("graph", "degrees", items["degrees"], lambda h: h(stored))
                return stored
        S = self.read_graph()  # verified; the stored degrees must be its row sums
        with self._io("reading the graph degrees"):
            g = self._group("graph")
            if "degrees" not in g:
                raise self._damaged("graph", "degrees", "is missing")
            stored = self._read("graph", "degrees", g["degrees"])
            if not np.array_equal(stored, _row_sums(S.indptr, S.data, S.shape[0])):
                raise self._damaged("graph", "degrees", "are not the row sums of its graph")
            return stored

    # ------------------------------------------------------------------ plan
    _PLAN_FIELDS = ("order", "rank_of", "colour", "colour_ptr", "colour_rows", "block_ptr")

    def write_plan(self, plan: SweepPlan, partition: np.ndarray | None = None) -> None:
        """Write the sweep plan (relabelling, blocks, colouring, scheme) and an optional row
        partition (n,)."""
        self._require_writer("write_plan")
        if not isinstance(plan, SweepPlan):
            raise ValidationError(
                f"plan: expected a SweepPlan (npkl_dist.make_plan), got {type(plan).__name__}"
            )
        arrays = {f: np.asarray(getattr(plan, f), dtype=np.int64) for f in self._PLAN_FIELDS}
        n = arrays["order"].shape[0]
        if partition is not None:
            part = np.asarray(partition)
            if part.ndim != 1 or part.shape[0] != n or part.dtype.kind not in "iu":
                raise ValidationError(
                    f"partition: expected a 1-D integer array of length n={n}, got dtype "
                    f"{part.dtype} shape {part.shape}"
                )
            arrays["partition"] = part.astype(np.int64)
        with self._io("writing the plan"):
            rec = _item_record("plan", *arrays.values(), extra=[*sorted(arrays), plan.scheme])
            if not self._plan_items("plan", {"plan": rec["sha256"]}):
                return
            group = self._replace_group(
                "plan",
                {
                    "n_points": int(n),
                    "n_colours": int(plan.n_colours),
                    "n_blocks": int(plan.n_blocks),
                    "scheme": plan.scheme,
                    "has_partition": partition is not None,
                },
            )
            for name, arr in arrays.items():
                _put_array(group, name, arr, _chunks_1d(arr.shape[0], 8))
            self._record_items(
                "plan",
                {"plan": rec},
                {"n_points": int(n), "n_colours": int(plan.n_colours)},
            )

    def read_plan(self) -> tuple[SweepPlan, np.ndarray | None]:
        """``(plan, partition or None)``."""
        with self._io("reading the plan"):
            items = self._stage_items("plan", "write_plan")
            g = self._group("plan")
            arrays = {f: self._read("plan", f, g[f]) for f in self._PLAN_FIELDS}
            if g.attrs.get("has_partition"):
                arrays["partition"] = self._read("plan", "partition", g["partition"])
            extra = [*sorted(arrays), g.attrs["scheme"]]
            self._verify(
                "plan", "arrays", items["plan"], lambda h: h(*arrays.values(), extra=extra)
            )
            part = arrays.pop("partition", None)
            return SweepPlan(*arrays.values(), scheme=g.attrs["scheme"]), part

    # ------------------------------------------------------------------ results
    def write_results(self, **items) -> None:
        """Write results: numpy arrays become Zarr arrays, other values JSON attributes.

        Each name is written once; the same content again is a no-op.
        """
        self._require_writer("write_results")
        arrays, values, hashes = {}, {}, {}
        for name, value in items.items():
            if not _ITEM_NAME.match(name):
                raise ValidationError(f"write_results: {name!r} is not a valid result name")
            if isinstance(value, np.ndarray) and value.ndim > 0:
                if value.dtype.kind not in "biuf":
                    raise ValidationError(
                        f"write_results: {name} has dtype {value.dtype}; arrays must be "
                        f"bool, integer or float"
                    )
                arrays[name] = value
                hashes[name] = _item_record("array", value)
            else:
                values[name] = _jsonable(value, f"write_results: {name}")
                hashes[name] = {"sha256": _sha_json(values[name]), "kind": "json"}
        with self._io("writing the results"):
            todo = self._plan_items("results", {k: v["sha256"] for k, v in hashes.items()})
            if not todo:
                return
            group = self._group("results")
            for name in todo:
                if name in arrays:
                    a = arrays[name]
                    rows = max(
                        1,
                        min(a.shape[0], _TARGET_CHUNK_BYTES // max(1, a[:1].nbytes or a.itemsize)),
                    )
                    _put_array(group, name, a, (rows,) + tuple(max(1, s) for s in a.shape[1:]))
            new_values = {k: v for k, v in values.items() if k in todo}
            if new_values:
                merged = {**dict(group.attrs).get("values", {}), **new_values}
                group.update_attributes({"values": merged})
            self._record_items("results", {k: hashes[k] for k in todo})

    def read_results(self) -> dict:
        """Every result written: arrays and JSON values by name."""
        with self._io("reading the results"):
            items = self._stage_items("results", "write_results")
            group = self._group("results")
            values = dict(group.attrs).get("values", {})
            out = {}
            for name, meta in items.items():
                if meta["kind"] == "array":
                    if name not in group:
                        raise self._damaged("results", name, "is missing")
                    out[name] = self._read("results", name, group[name])
                    self._verify("results", name, meta, lambda h: h(out[name]))
                else:
                    if name not in values:
                        raise self._damaged("results", name, "is missing")
                    out[name] = values[name]
                    self._verify("results", name, meta, _sha_json(out[name]))
            return out
