"""Run store conformance tests (storage/SPEC.md), run against every backend.

``StoreConformance`` holds the tests; each backend subclasses it and provides the ``url``
(and ``storage_options``) fixtures, as zarr-python's ``testing/store.py`` does:
``TestLocalStore`` (a temporary directory) and ``TestS3Store`` (moto's standalone S3 server
on loopback, one per test session).
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import socket
import subprocess
import sys
import uuid
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("zarr")
pytest.importorskip("fsspec")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from npkl_dist import Constraints, SweepPlan, ValidationError, sample_constraints  # noqa: E402
from npkl_dist.store import (  # noqa: E402
    FORMAT_VERSION,
    RunNotFoundError,
    RunStore,
    StoreError,
    StoreLockedError,
    StoreVersionError,
    StoreWarning,
    resolve_run,
)
from npkl_dist.store._format import POINTER_KEY  # noqa: E402
from npkl_dist.store._objects import WriterLock  # noqa: E402

CONFIG = {"solver": "bcd", "rank": 4, "gamma": 0.5, "seed": 7, "loss": "square"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A second process that tries to become the writer and reads the run; it tries again when
# told to (one line on stdin), so that one process start covers both cases.
_SECOND_PROCESS = r"""
import json, sys
from npkl_dist.store import RunStore, StoreLockedError
url, so = sys.argv[1], json.loads(sys.argv[2]) or None

def attempt():
    out = {}
    try:
        w = RunStore.open(url, "a", storage_options=so)
        out["writer"] = "acquired"
        w.close()
    except StoreLockedError as exc:
        out["writer"] = "refused"
        out["message"] = str(exc)
        out["holder"] = exc.holder
    with RunStore.open(url, "r", storage_options=so) as r:
        got = r.latest_checkpoint()
        out["latest"] = got[0]["id"] if got else None
        out["V_sum"] = float(got[1].sum()) if got else None
    return out

print(json.dumps(attempt()), flush=True)
sys.stdin.readline()
print(json.dumps(attempt()), flush=True)
"""


def _small_inputs(seed=0, n=40, d=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.integers(0, 3, n).astype(np.int64)
    c = sample_constraints(y, 8, 8, seed=seed)
    return X, c, y


def _graph(seed=0, n=40, dtype=np.float64):
    S = sp.random(n, n, density=0.15, format="csr", random_state=seed, dtype=dtype)
    S = (S + S.T).tocsr()
    S.setdiag(0)
    S.eliminate_zeros()
    return S


def _plan(seed=0, n=40, n_colours=5, scheme="colours"):
    rng = np.random.default_rng(seed)
    order = rng.permutation(n).astype(np.int64)
    rank_of = np.empty(n, np.int64)
    rank_of[order] = np.arange(n)
    colour = rng.integers(0, n_colours, n).astype(np.int64)
    colour_rows = np.lexsort((np.arange(n), colour)).astype(np.int64)
    colour_ptr = np.zeros(n_colours + 1, np.int64)
    np.cumsum(np.bincount(colour, minlength=n_colours), out=colour_ptr[1:])
    if scheme == "colours":
        return SweepPlan(order, rank_of, colour, colour_ptr, colour_rows)
    block_ptr = np.array([0, 7, 19, 30, n], np.int64)
    return SweepPlan(order, rank_of, colour, colour_ptr, colour_rows, block_ptr, scheme)


def _commit(rs, step, V, row_block, *, rng_seed=0, order=None):
    """Begin, write every block (optionally in a given order) and commit a checkpoint."""
    n, r = V.shape
    ckpt = rs.begin_checkpoint(step, n, r, V.dtype, row_block=row_block)
    starts = list(range(0, n, row_block))
    for s in starts if order is None else [starts[k] for k in order]:
        rs.write_V_block(ckpt, s, V[s : s + row_block])
    rng = np.random.default_rng(rng_seed)
    rs.commit_checkpoint(
        ckpt,
        {
            "sweep": step,
            "objective": float(np.sum(V * V)),
            "rng_state": rng.bit_generator.state,
            "parameters": {"gamma": 0.5},
        },
    )
    return ckpt


class StoreConformance:
    """Every backend must pass these. Subclasses provide ``url`` and ``storage_options``."""

    hypothesis_examples = 10

    @pytest.fixture
    def url(self):
        raise NotImplementedError

    @pytest.fixture
    def storage_options(self):
        return None

    @pytest.fixture
    def store(self, url, storage_options):
        rs = RunStore.create(url, config=CONFIG, storage_options=storage_options)
        yield rs
        rs.close()

    # ---- hooks a backend may need for fault injection ----------------------------------
    def delete_object(self, rs, key):
        rs._objects.delete(key)

    def overwrite_object(self, rs, key, data: bytes):
        rs._objects.write_atomic(key, data)

    # ---- life cycle ---------------------------------------------------------------------
    def test_create_records_attributes(self, store, url, storage_options):
        store.close()
        with RunStore.open(url, storage_options=storage_options) as r:
            assert r.config == CONFIG
            assert r.url == store.url
            attrs = dict(r._group().attrs)
        assert attrs["format_version"] == FORMAT_VERSION == 2
        assert attrs["config"] == CONFIG
        assert {"created", "npkl_version"} <= set(attrs)

    def test_create_refuses_existing_run_unless_overwrite(self, store, url, storage_options):
        X, c, y = _small_inputs()
        store.write_inputs(features=X)
        store.close()
        with pytest.raises(StoreError, match="already exists") as info:
            RunStore.create(url, config=CONFIG, storage_options=storage_options)
        assert store.url in str(info.value) and "overwrite=True" in str(info.value)
        with RunStore.create(
            url, config={"new": 1}, overwrite=True, storage_options=storage_options
        ) as rs:
            assert rs.config == {"new": 1}
            assert not rs.stage_done("inputs")

    def test_open_missing_run_names_url_and_fix(self, url, storage_options):
        with pytest.raises(StoreError, match="no run at") as info:
            RunStore.open(url + "-missing", storage_options=storage_options)
        assert "-missing" in str(info.value) and "RunStore.create" in str(info.value)
        assert isinstance(info.value, RunNotFoundError)
        assert info.value.url.endswith("-missing")

    @pytest.mark.parametrize("mode", ["r", "a"])
    @pytest.mark.parametrize("other", [1, 3])
    def test_other_format_version_refused(self, store, url, storage_options, mode, other):
        """Format 1 (colour-scheme plans without blocks, before the block sweep) and any
        future format are refused, naming both versions."""
        store._group().update_attributes({"format_version": other})
        store.close()
        with pytest.raises(StoreVersionError) as info:
            RunStore.open(url, mode, storage_options=storage_options)
        msg = str(info.value)
        assert f"format version {other}" in msg and "format version 2" in msg
        assert "start a new run" in msg
        assert isinstance(info.value, StoreError) and isinstance(info.value, OSError)

    def test_read_only_store_refuses_writes(self, store, url, storage_options):
        with RunStore.open(url, "r", storage_options=storage_options) as r:
            with pytest.raises(StoreError, match="not open for writing"):
                r.write_inputs(labels=np.zeros(3, np.int64))
            with pytest.raises(StoreError, match="not open for writing"):
                r.begin_checkpoint(1, 4, 1, np.float64, row_block=4)
            with pytest.raises(StoreError, match="not open for writing"):
                r.mark_stage("x", {})

    def test_lock_free_handle_writes_blocks_of_uncommitted_checkpoints(
        self, store, url, storage_options
    ):
        # a Dask worker opens the run with mode="r" and writes its own row blocks
        a = _commit(store, 1, np.ones((8, 2)), 4)
        ck = store.begin_checkpoint(2, 8, 2, np.float64, row_block=4)
        with RunStore.open(url, "r", storage_options=storage_options) as r:
            r.write_V_block(ck, 0, 2 * np.ones((4, 2)))
            r.write_V_block(ck, 4, 2 * np.ones((4, 2)))
            with pytest.raises(StoreError, match="already committed"):
                r.write_V_block(a, 0, np.zeros((4, 2)))
        store.commit_checkpoint(ck, {"sweep": 2})
        assert np.array_equal(store.latest_checkpoint()[1], 2 * np.ones((8, 2)))

    # ---- written-once stages ----------------------------------------------------------
    def test_inputs_round_trip(self, store):
        X, c, y = _small_inputs()
        ev = np.where(y > 0, y, -1)
        store.write_inputs(features=X, constraints=c, labels=y, eval_labels=ev)
        got = store.read_inputs()
        assert np.array_equal(got["features"], X) and got["features"].dtype == X.dtype
        assert np.array_equal(got["labels"], y) and got["labels"].dtype == np.int64
        assert np.array_equal(got["eval_labels"], ev)
        gc = got["constraints"]
        assert isinstance(gc, Constraints)
        for f in ("i", "j", "t"):
            assert np.array_equal(getattr(gc, f), getattr(c, f))
        assert (gc.n_points, gc.diagonal, gc.n_duplicates) == (
            c.n_points,
            c.diagonal,
            c.n_duplicates,
        )
        assert store.stage_done("inputs")

    def test_stage_writes_are_idempotent_and_never_change(self, store):
        X, c, y = _small_inputs()
        assert not store.stage_done("inputs")
        store.write_inputs(features=X)
        store.write_inputs(features=X.copy(), labels=y)  # same features: no-op; labels added
        assert set(store.read_inputs()) == {"features", "labels"}
        with pytest.raises(StoreError, match="different content"):
            store.write_inputs(features=X + 1.0)
        with pytest.raises(ValidationError, match="number of points"):
            store.write_inputs(eval_labels=y[:-1])
        with pytest.raises(ValidationError, match="NaN"):
            store.write_inputs(features=np.full((2, 2), np.nan))

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_graph_round_trip_exact(self, store, dtype):
        S = _graph(dtype=dtype)
        store.write_graph(S, row_block=7)
        G = store.read_graph()
        assert G.shape == S.shape and G.dtype == S.dtype
        assert np.array_equal(G.indptr, S.indptr) and np.array_equal(G.indices, S.indices)
        assert np.array_equal(G.data, S.data)
        for lo, hi in ((0, 7), (7, 14), (35, 40), (3, 3)):
            B = store.read_graph(rows=(lo, hi))
            assert B.shape == (hi - lo, 40) and (B != S[lo:hi]).nnz == 0
        deg = store.read_degrees()
        assert deg.dtype == np.float64
        np.testing.assert_allclose(
            deg, np.asarray(S.astype(np.float64).sum(axis=1)).ravel(), rtol=1e-12
        )
        store.write_graph(S, row_block=7)  # same graph again: no-op
        with pytest.raises(StoreError, match="different content"):
            store.write_graph(S * 2, row_block=7)

    def test_reads_check_xxh3_and_runs_without_it_sha256(self, store):
        """Each array item records its sha256 (identity) and xxh3-128 (the fast check of
        every whole read); a run recorded before the xxh3-128 is checked by its sha256, and
        damage is found either way."""
        from npkl_dist.store import StoreDamagedError
        from npkl_dist.store._format import _sha_arrays, _xxh_arrays

        V = np.random.default_rng(0).normal(size=(50, 4))
        store.write_results(embedding=V)
        rec = store.stages()["results"]["items"]["embedding"]
        assert rec["sha256"] == _sha_arrays(V) and rec["xxh3_128"] == _xxh_arrays(V)
        W = V.copy()
        W[7, 2] = np.nextafter(W[7, 2], np.inf)  # one bit
        assert len(rec["xxh3_128"]) == 32 and rec["xxh3_128"] != _xxh_arrays(W)
        for old in (False, True):
            if old:
                record = store._read_stages()
                del record["results"]["items"]["embedding"]["xxh3_128"]
                store._write_stages(record)
            store._group("results")["embedding"][0, 0] = V[0, 0] + 1.0
            with pytest.raises(StoreDamagedError, match="results stage's embedding does not"):
                store.read_results()
            store._group("results")["embedding"][0, 0] = V[0, 0]
            assert np.array_equal(store.read_results()["embedding"], V)

    def test_degrees_are_verified_on_their_own(self, store):
        """read_degrees (npkl extend) checks the degrees' own recorded hash, not the whole
        graph's (issue 74's cost); a run recorded without it is checked against the graph."""
        from npkl_dist.store import StoreDamagedError

        store.write_graph(_graph(), row_block=7)
        g = store._group("graph")
        good = np.asarray(g["degrees"][...])
        g["degrees"][...] = good + 1.0
        with pytest.raises(StoreDamagedError, match="graph stage's degrees does not match"):
            store.read_degrees()
        record = store._read_stages()
        del record["graph"]["items"]["degrees"]
        store._write_stages(record)
        with pytest.raises(StoreDamagedError, match="degrees are not the row sums"):
            store.read_degrees()
        g["degrees"][...] = good
        assert np.array_equal(store.read_degrees(), good)

    @pytest.mark.parametrize("scheme", ["colours", "blocks"])
    @pytest.mark.parametrize("with_partition", [True, False])
    def test_plan_round_trip(self, store, with_partition, scheme):
        plan = _plan(scheme=scheme)
        part = np.arange(40) // 10 if with_partition else None
        store.write_plan(plan, part)
        got, gpart = store.read_plan()
        for f in ("order", "rank_of", "colour", "colour_ptr", "colour_rows", "block_ptr"):
            assert np.array_equal(getattr(got, f), getattr(plan, f))
        assert got.n_colours == plan.n_colours and got.scheme == plan.scheme
        store.write_plan(plan, part)  # the same plan again: no-op
        other = SweepPlan(
            plan.order,
            plan.rank_of,
            plan.colour,
            plan.colour_ptr,
            plan.colour_rows,
            plan.block_ptr,
            "colours" if scheme == "blocks" else "blocks",
        )
        with pytest.raises(StoreError, match="different content"):
            store.write_plan(other, part)  # the scheme is part of the plan's identity
        if with_partition:
            assert np.array_equal(gpart, part)
        else:
            assert gpart is None

    def test_results_and_stage_marks(self, store):
        labels = np.arange(40) % 3
        emb = np.random.default_rng(1).normal(size=(40, 2)).astype(np.float32)
        store.write_results(
            labels=labels,
            embedding=emb,
            metrics={"ari": np.float64(0.5), "rand": 0.75},
            n_iter=np.int64(12),
        )
        got = store.read_results()
        assert np.array_equal(got["labels"], labels) and got["embedding"].dtype == np.float32
        assert np.array_equal(got["embedding"], emb)
        assert got["metrics"] == {"ari": 0.5, "rand": 0.75} and got["n_iter"] == 12
        store.write_results(metrics={"ari": 0.5, "rand": 0.75})  # same: no-op
        with pytest.raises(StoreError, match="different content"):
            store.write_results(metrics={"ari": 0.6})
        with pytest.raises(ValidationError, match="JSON"):
            store.write_results(bad=object())
        assert not store.stage_done("colouring")
        store.mark_stage("colouring", {"n_colours": 5})
        assert store.stage_done("colouring")
        assert store.stages()["colouring"]["info"] == {"n_colours": 5}

    def test_reading_a_missing_stage_names_the_fix(self, store):
        with pytest.raises(StoreError, match="write_graph"):
            store.read_graph()

    # ---- checkpoints --------------------------------------------------------------------
    def test_no_checkpoint_yet(self, store):
        assert store.latest_checkpoint() is None
        assert store.committed_checkpoints() == []

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_checkpoint_round_trip(self, store, dtype):
        V = np.random.default_rng(3).normal(size=(23, 4)).astype(dtype)
        ckpt = _commit(store, 12, V, 5, rng_seed=99, order=[4, 0, 3, 1, 2])
        assert ckpt.startswith("ckpt-000012-")
        manifest, got = store.latest_checkpoint()
        assert got.dtype == dtype and np.array_equal(got, V)
        assert manifest["id"] == ckpt and manifest["step"] == 12 and manifest["sweep"] == 12
        assert (manifest["n"], manifest["r"], manifest["row_block"]) == (23, 4, 5)
        assert manifest["objective"] == float(np.sum(V * V))
        assert manifest["parameters"] == {"gamma": 0.5}
        assert manifest["format_version"] == 2 and "numpy" in manifest["versions"]
        assert {"created", "committed"} <= set(manifest)
        assert len(manifest["hashes"]["blocks"]) == 5
        # the RNG state restores the generator exactly
        rng = np.random.default_rng()
        rng.bit_generator.state = manifest["rng_state"]
        assert np.array_equal(rng.random(4), np.random.default_rng(99).random(4))
        store.commit_checkpoint(ckpt, {"sweep": 12})  # retried commit: no-op
        assert store.committed_checkpoints() == [ckpt]

    def test_uncommitted_checkpoint_is_invisible(self, store):
        V = np.ones((10, 2))
        a = _commit(store, 1, V, 4)
        b = store.begin_checkpoint(2, 10, 2, np.float64, row_block=4)
        for s in (0, 4, 8):
            store.write_V_block(b, s, 2 * V[s : s + 4])
        manifest, got = store.latest_checkpoint()  # no warning: nothing torn was committed
        assert manifest["id"] == a and np.array_equal(got, V)

    def test_commit_refuses_missing_blocks(self, store):
        V = np.ones((10, 2))
        a = _commit(store, 1, V, 4)
        b = store.begin_checkpoint(2, 10, 2, np.float64, row_block=4)
        store.write_V_block(b, 0, V[:4])
        store.write_V_block(b, 8, V[8:])
        with pytest.raises(StoreError, match=r"incomplete.*\[4, 8\)"):
            store.commit_checkpoint(b, {"sweep": 2})
        assert store.committed_checkpoints() == [a]
        assert store.latest_checkpoint()[0]["id"] == a

    def test_deleted_shard_falls_back_to_previous(self, store):
        V1, V2 = np.ones((12, 3)), 2 * np.ones((12, 3))
        a = _commit(store, 1, V1, 4)
        b = _commit(store, 2, V2, 4)
        self.delete_object(store, f"checkpoints/{b}/V/c/1/0")
        with pytest.warns(StoreWarning, match=rf"{b} is torn.*falling back.*{a}"):
            manifest, got = store.latest_checkpoint()
        assert manifest["id"] == a and np.array_equal(got, V1)

    def test_corrupt_shard_falls_back_to_previous(self, store):
        V1, V2 = np.ones((12, 3)), 2 * np.ones((12, 3))
        a = _commit(store, 1, V1, 4)
        b = _commit(store, 2, V2, 4)
        key = f"checkpoints/{b}/V/c/2/0"
        raw = bytearray(store._objects.read(key))
        raw[: len(raw) // 2] = os.urandom(len(raw) // 2)
        self.overwrite_object(store, key, bytes(raw))
        with pytest.warns(StoreWarning, match="torn or corrupt"):
            manifest, got = store.latest_checkpoint()
        assert manifest["id"] == a and np.array_equal(got, V1)

    def test_valid_but_wrong_data_is_caught_by_hashes(self, store):
        import zarr

        V1, V2 = np.ones((12, 3)), 2 * np.ones((12, 3))
        a = _commit(store, 1, V1, 4)
        b = _commit(store, 2, V2, 4)
        # rewrite one block through Zarr: decodes fine, but is not what was committed
        arr = zarr.open_array(store._store(), path=f"checkpoints/{b}/V", mode="r+")
        arr[4:8] = 5.0
        with pytest.warns(StoreWarning, match=r"rows \[4, 8\) do not match"):
            manifest, got = store.latest_checkpoint()
        assert manifest["id"] == a

    def test_tampered_manifest_is_caught_by_pointer(self, store):
        V1, V2 = np.ones((12, 3)), 2 * np.ones((12, 3))
        a = _commit(store, 1, V1, 4)
        b = _commit(store, 2, V2, 4)
        g = store._group("checkpoints")[b]
        m = dict(g.attrs)["manifest"]
        g.update_attributes({"manifest": {**m, "objective": -1.0}})
        with pytest.warns(StoreWarning, match="manifest does not match"):
            assert store.latest_checkpoint()[0]["id"] == a

    def test_commit_after_fallback_drops_the_torn_checkpoint(self, store):
        a = _commit(store, 1, np.ones((8, 2)), 4)
        b = _commit(store, 2, 2 * np.ones((8, 2)), 4)
        self.delete_object(store, f"checkpoints/{b}/V/c/0/0")
        with pytest.warns(StoreWarning):
            assert store.latest_checkpoint()[0]["id"] == a  # the resume point
        c = _commit(store, 2, 3 * np.ones((8, 2)), 4)
        assert store.committed_checkpoints() == [c, a]
        assert b not in store._objects.list_dir("checkpoints")

    def test_no_intact_checkpoint_raises(self, store):
        b = _commit(store, 1, np.ones((8, 2)), 4)
        self.delete_object(store, f"checkpoints/{b}/V/c/0/0")
        with pytest.warns(StoreWarning), pytest.raises(StoreError, match="none of the"):
            store.latest_checkpoint()

    # ---- the pointer is a cache of the manifests (issue 74) -----------------------------
    def test_missing_pointer_is_rebuilt_and_nothing_is_pruned(self, store):
        a = _commit(store, 1, np.ones((8, 2)), 4)
        b = _commit(store, 2, 2 * np.ones((8, 2)), 4)
        self.delete_object(store, POINTER_KEY)
        with pytest.warns(StoreWarning, match=rf"pointer.*is missing; rebuilt.*2 .*{b}"):
            manifest, V = store.latest_checkpoint()
        assert manifest["id"] == b and np.all(V == 2.0)
        assert store.committed_checkpoints() == [b, a]
        # a checkpoint begun but never committed is not a resume point
        store.begin_checkpoint(3, 8, 2, np.float64, row_block=4)
        assert store.committed_checkpoints() == [b, a]
        c = _commit(store, 3, 3 * np.ones((8, 2)), 4)
        assert store.committed_checkpoints() == [c, b]  # retention 2: a goes only now
        assert store._read_pointer()["committed"] == [c, b]
        on_disk = [x for x in store._objects.list_dir("checkpoints") if x.startswith("ckpt-")]
        assert sorted(on_disk) == sorted([b, c])

    def test_damaged_pointer_is_rebuilt(self, store):
        _commit(store, 1, np.ones((8, 2)), 4)
        b = _commit(store, 2, 2 * np.ones((8, 2)), 4)
        self.overwrite_object(store, POINTER_KEY, b'{"committed": [')
        with pytest.warns(StoreWarning, match=r"pointer.*is damaged.*rebuilt"):
            assert store.latest_checkpoint()[0]["id"] == b

    def test_rebuilt_pointer_still_verifies_every_block(self, store):
        a = _commit(store, 1, np.ones((8, 2)), 4)
        b = _commit(store, 2, 2 * np.ones((8, 2)), 4)
        self.delete_object(store, POINTER_KEY)
        self.delete_object(store, f"checkpoints/{b}/V/c/1/0")
        with pytest.warns(StoreWarning) as seen:
            manifest, V = store.latest_checkpoint()
        assert manifest["id"] == a and np.all(V == 1.0)
        text = " ".join(str(w.message) for w in seen)
        assert "is missing; rebuilt" in text and f"{b} is torn" in text

    def test_damaged_pointer_without_checkpoints_starts_over_with_a_warning(self, store):
        self.overwrite_object(store, POINTER_KEY, b"not json")
        with pytest.warns(StoreWarning, match="nothing is lost"):
            assert store.latest_checkpoint() is None

    def test_retention_keeps_the_newest(self, url, storage_options):
        with RunStore.create(
            url, config=CONFIG, retention=3, storage_options=storage_options
        ) as rs:
            ids = [_commit(rs, k, np.full((6, 2), float(k)), 4) for k in range(5)]
            assert rs.committed_checkpoints() == ids[::-1][:3]
            on_disk = [x for x in rs._objects.list_dir("checkpoints") if x.startswith("ckpt-")]
            assert sorted(on_disk) == sorted(ids[2:])
            manifest, V = rs.latest_checkpoint()
            assert manifest["id"] == ids[-1] and np.all(V == 4.0)

    def test_abandoned_checkpoints_are_pruned(self, store):
        x = store.begin_checkpoint(1, 8, 2, np.float32, row_block=4)
        store.write_V_block(x, 0, np.ones((4, 2), np.float32))
        later = store.begin_checkpoint(9, 8, 2, np.float32, row_block=4)
        y = _commit(store, 2, np.ones((8, 2), np.float32), 4)
        names = store._objects.list_dir("checkpoints")
        assert x not in names and y in names and later in names  # later step: kept

    def test_write_block_validation(self, store):
        ck = store.begin_checkpoint(1, 10, 3, np.float32, row_block=4)
        with pytest.raises(ValidationError, match="whole row blocks"):
            store.write_V_block(ck, 2, np.ones((4, 3), np.float32))
        with pytest.raises(ValidationError, match="whole row blocks"):
            store.write_V_block(ck, 0, np.ones((3, 3), np.float32))
        with pytest.raises(ValidationError, match=r"shape \(rows, 3\)"):
            store.write_V_block(ck, 0, np.ones((4, 2), np.float32))
        with pytest.raises(ValidationError, match="NaN"):
            store.write_V_block(ck, 0, np.full((4, 3), np.nan, np.float32))
        with pytest.raises(ValidationError, match="precision"):
            store.write_V_block(ck, 0, np.ones((4, 3), np.float64))
        with pytest.raises(ValidationError, match="float32 or float64"):
            store.begin_checkpoint(1, 10, 3, np.int64, row_block=4)
        with pytest.raises(StoreError, match="no checkpoint"):
            store.write_V_block("ckpt-000001-deadbeef", 0, np.ones((4, 3)))
        store.write_V_block(ck, 0, np.ones((8, 3), np.float32))  # two whole blocks at once
        store.write_V_block(ck, 8, np.ones((2, 3), np.float32))  # the short last block

    def test_worker_handle_writes_blocks_only(self, store):
        ck = store.begin_checkpoint(3, 8, 2, np.float64, row_block=4)
        worker = pickle.loads(pickle.dumps(store))
        assert worker.mode == "worker" and worker.url == store.url
        worker.write_V_block(ck, 0, np.ones((4, 2)))
        worker.write_V_block(ck, 4, np.ones((4, 2)))
        for call in (
            lambda: worker.commit_checkpoint(ck, {}),
            lambda: worker.mark_stage("x", {}),
            lambda: worker.begin_checkpoint(4, 8, 2, np.float64, row_block=4),
        ):
            with pytest.raises(StoreError, match="worker"):
                call()
        worker.close()  # must not release the driver's lock
        assert WriterLock(store._objects, store.url).holder()["token"] == store._lock.token
        store.commit_checkpoint(ck, {"sweep": 3})
        assert np.array_equal(store.latest_checkpoint()[1], np.ones((8, 2)))

    # ---- the writer lock -----------------------------------------------------------------
    def test_second_writer_refused_first_keeps_working(self, store, url, storage_options):
        a = _commit(store, 1, np.ones((8, 2)), 4)
        with pytest.raises(StoreLockedError) as info:
            RunStore.open(url, "a", storage_options=storage_options)
        msg = str(info.value)
        assert store.url in msg and socket.gethostname() in msg and str(os.getpid()) in msg
        assert "since" in msg and "mode='r'" in msg and "break_lock" in msg
        assert info.value.holder["pid"] == os.getpid()
        with pytest.raises(StoreLockedError):
            RunStore.create(url, config=CONFIG, overwrite=True, storage_options=storage_options)
        # a reader works while the writer holds the lock
        with RunStore.open(url, "r", storage_options=storage_options) as r:
            assert r.latest_checkpoint()[0]["id"] == a
        b = _commit(store, 2, 2 * np.ones((8, 2)), 4)  # the first writer is unaffected
        assert store.committed_checkpoints() == [b, a]
        store.close()
        with RunStore.open(url, "a", storage_options=storage_options) as again:
            assert again.latest_checkpoint()[0]["id"] == b

    def test_stale_lock_of_dead_process_is_taken_over(self, store, url, storage_options):
        store.close()
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        lock = {
            "host": socket.gethostname(),
            "pid": dead.pid,
            "since": "2026-01-01T00:00:00",
            "token": "stale",
            "url": url,
        }
        store._objects.write_atomic(WriterLock.KEY, json.dumps(lock).encode())
        with pytest.warns(StoreWarning, match="stale writer lock"):
            rs = RunStore.open(url, "a", storage_options=storage_options)
        assert WriterLock(rs._objects, rs.url).holder()["pid"] == os.getpid()
        rs.close()

    def test_lock_of_another_host_needs_break_lock(self, store, url, storage_options):
        store.close()
        lock = {
            "host": "elsewhere.example",
            "pid": 1,
            "since": "2026-01-01T00:00:00",
            "token": "theirs",
            "url": url,
        }
        store._objects.write_atomic(WriterLock.KEY, json.dumps(lock).encode())
        with pytest.raises(StoreLockedError, match="elsewhere.example"):
            RunStore.open(url, "a", storage_options=storage_options)
        removed = RunStore.break_lock(url, storage_options=storage_options)
        assert removed["host"] == "elsewhere.example"
        RunStore.open(url, "a", storage_options=storage_options).close()

    def test_writer_that_lost_its_lock_cannot_commit(self, store, url, storage_options):
        ck = store.begin_checkpoint(1, 4, 2, np.float64, row_block=4)
        store.write_V_block(ck, 0, np.ones((4, 2)))
        RunStore.break_lock(url, storage_options=storage_options)
        with pytest.raises(StoreLockedError, match="no longer locked"):
            store.commit_checkpoint(ck, {})
        assert store.latest_checkpoint() is None

    # ---- failures while checkpointing ----------------------------------------------------
    @pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
    def test_failed_block_write_keeps_previous_checkpoint(self, store, monkeypatch, code):
        V1 = np.ones((8, 2))
        a = _commit(store, 1, V1, 4)
        b = store.begin_checkpoint(2, 8, 2, np.float64, row_block=4)
        zstore_cls = type(store._store())
        real_set = zstore_cls.set

        async def failing_set(self, key, value, *args, **kwargs):
            if "/V/c/" in key:
                raise OSError(code, os.strerror(code), key)
            return await real_set(self, key, value, *args, **kwargs)

        monkeypatch.setattr(zstore_cls, "set", failing_set)
        with pytest.raises(StoreError) as info:
            store.write_V_block(b, 0, 3 * V1[:4])
        err = info.value
        assert err.errno == code and isinstance(err, OSError)
        msg = str(err)
        assert os.strerror(code) in msg and store.url in msg
        assert f"rows [0, 4) of checkpoint {b}" in msg
        assert f"checkpoint {a} is intact" in msg and "resume" in msg
        assert ("free space" in msg) if code == errno.ENOSPC else ("permissions" in msg)
        monkeypatch.undo()
        manifest, got = store.latest_checkpoint()
        assert manifest["id"] == a and np.array_equal(got, V1)
        # once the cause is fixed the run goes on
        c = _commit(store, 3, 3 * V1, 4)
        assert store.latest_checkpoint()[0]["id"] == c

    @pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
    def test_failed_pointer_switch_keeps_previous_checkpoint(self, store, monkeypatch, code):
        V1 = np.ones((8, 2))
        a = _commit(store, 1, V1, 4)
        objs_cls = type(store._objects)
        real_write = objs_cls.write_atomic

        def failing_write(self, key, data):
            if key == POINTER_KEY:
                raise OSError(code, os.strerror(code))
            return real_write(self, key, data)

        monkeypatch.setattr(objs_cls, "write_atomic", failing_write)
        with pytest.raises(StoreError, match="committing checkpoint") as info:
            _commit(store, 2, 2 * V1, 4)
        assert info.value.errno == code and f"{a} is intact" in str(info.value)
        monkeypatch.undo()
        assert store.committed_checkpoints() == [a]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            manifest, got = store.latest_checkpoint()
        assert manifest["id"] == a and np.array_equal(got, V1)

    def test_failed_manifest_write_keeps_previous_checkpoint(self, store, monkeypatch):
        V1 = np.ones((8, 2))
        a = _commit(store, 1, V1, 4)
        zstore_cls = type(store._store())
        real_set = zstore_cls.set

        async def failing_set(self, key, value, *args, **kwargs):
            if (
                key.startswith("checkpoints/ckpt-000002")
                and key.endswith("zarr.json")
                and b"manifest" in value.to_bytes()
            ):
                raise OSError(errno.ENOSPC, "No space left on device")
            return await real_set(self, key, value, *args, **kwargs)

        monkeypatch.setattr(zstore_cls, "set", failing_set)
        with pytest.raises(StoreError, match="No space left"):
            _commit(store, 2, 2 * V1, 4)
        monkeypatch.undo()
        assert store.latest_checkpoint()[0]["id"] == a

    # ---- property: V blocks round trip exactly -----------------------------------------
    def test_V_round_trip_property(self, url, storage_options):
        runs = iter(range(10**6))

        @settings(
            max_examples=self.hypothesis_examples,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            n=st.integers(1, 60),
            r=st.integers(1, 6),
            row_block=st.integers(1, 25),
            dtype=st.sampled_from([np.float32, np.float64]),
            seed=st.integers(0, 2**32 - 1),
        )
        def check(n, r, row_block, dtype, seed):
            rng = np.random.default_rng(seed)
            V = rng.normal(size=(n, r)).astype(dtype)
            n_blocks = -(-n // row_block)
            with RunStore.create(
                f"{url}-h{next(runs)}", config={}, storage_options=storage_options
            ) as rs:
                _commit(rs, 1, V, row_block, order=list(rng.permutation(n_blocks)))
                manifest, got = rs.latest_checkpoint()
            assert got.dtype == V.dtype and np.array_equal(got, V)
            assert len(manifest["hashes"]["blocks"]) == n_blocks

        check()


# =============================================================================== backends
class TestLocalStore(StoreConformance):
    @pytest.fixture
    def url(self, tmp_path):
        return str(tmp_path / "run")

    def test_second_writer_refused_across_processes(self, store, url, storage_options):
        # (local only to keep the suite fast; S3's conditional put is covered in-process)
        a = _commit(store, 1, np.ones((8, 2)), 4)
        proc = subprocess.Popen(
            [sys.executable, "-c", _SECOND_PROCESS, url, json.dumps(storage_options)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        try:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            out = json.loads(line)
            assert out["writer"] == "refused" and out["holder"]["pid"] == os.getpid()
            assert store.url in out["message"] and "mode='r'" in out["message"]
            assert out["latest"] == a and out["V_sum"] == 16.0  # reading works while locked
            b = _commit(store, 2, 2 * np.ones((8, 2)), 4)  # the first writer keeps working
            assert store.latest_checkpoint()[0]["id"] == b
            store.close()
            proc.stdin.write("\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            out = json.loads(line)
            assert out["writer"] == "acquired" and out["latest"] == b
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def test_lock_file_is_exclusive_json(self, store):
        path = os.path.join(store.url, "_npkl", "lock.json")
        info = json.load(open(path))
        assert info["host"] == socket.gethostname() and info["pid"] == os.getpid()
        assert {"since", "token"} <= set(info)
        with pytest.raises(FileExistsError):
            store._objects.create_exclusive(WriterLock.KEY, b"{}")
        store.close()
        assert not os.path.exists(path)

    def test_pointer_switch_leaves_no_temporaries(self, store):
        for k in range(3):
            _commit(store, k, np.ones((4, 2)), 4)
        leftovers = [f for f in os.listdir(os.path.join(store.url, "_npkl")) if f.endswith(".tmp")]
        assert leftovers == []
        ptr = json.load(open(os.path.join(store.url, "_npkl", "pointer.json")))
        assert ptr["current"] == ptr["committed"][0] and len(ptr["committed"]) == 2

    def test_refuses_to_overwrite_a_non_run_directory(self, tmp_path):
        (tmp_path / "precious.txt").write_text("keep me")
        with pytest.raises(StoreError, match="not empty and not an npkl-dist run"):
            RunStore.create(str(tmp_path), config={}, overwrite=True)
        assert (tmp_path / "precious.txt").read_text() == "keep me"

    def test_real_disk_full_on_tmpfs(self, tmp_path):
        mnt = tmp_path / "small"
        mnt.mkdir()
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
        )
        if res.returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)")
        try:
            with RunStore.create(str(mnt / "run"), config={}) as rs:
                V1 = np.ones((16, 2))
                a = _commit(rs, 1, V1, 8)
                big = np.random.default_rng(0).normal(size=(20_000, 4))  # 640 kB, random
                b = rs.begin_checkpoint(2, 20_000, 4, np.float64, row_block=10_000)
                with pytest.raises(StoreError, match="No space left") as info:
                    rs.write_V_block(b, 0, big[:10_000])
                    rs.write_V_block(b, 10_000, big[10_000:])
                assert info.value.errno == errno.ENOSPC
                assert f"checkpoint {a} is intact" in str(info.value)
                manifest, got = rs.latest_checkpoint()
                assert manifest["id"] == a and np.array_equal(got, V1)
        finally:
            subprocess.run(["umount", str(mnt)], check=False)

    def test_npkl_home_and_legacy_runs(self, tmp_path, monkeypatch):
        """Run ids resolve under $NPKL_HOME/runs (else $XDG_DATA_HOME/npkl, else
        ~/.local/share/npkl), wherever the command runs; a run id that only exists in
        ./storage/runs (the earlier default) is still found there."""
        from npkl_dist.store import npkl_home

        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("NPKL_HOME", str(tmp_path / "home"))
        assert resolve_run("a") == str(tmp_path / "home" / "runs" / "a")
        monkeypatch.delenv("NPKL_HOME")
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        assert npkl_home() == str(tmp_path / "xdg" / "npkl")
        monkeypatch.delenv("XDG_DATA_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "user"))
        assert npkl_home() == str(tmp_path / "user" / ".local" / "share" / "npkl")
        (tmp_path / "storage" / "runs" / "old").mkdir(parents=True)
        assert resolve_run("old") == str(tmp_path / "storage" / "runs" / "old")
        (tmp_path / "user" / ".local" / "share" / "npkl" / "runs" / "old").mkdir(parents=True)
        assert resolve_run("old") == str(npkl_home() + "/runs/old")  # the home wins

    def test_resolve_run(self, tmp_path):
        assert resolve_run("exp-1.a_b", root=str(tmp_path)) == str(tmp_path / "exp-1.a_b")
        assert resolve_run("x") == os.path.join(os.environ["NPKL_HOME"], "runs", "x")
        assert resolve_run("x", root="s3://bucket/runs/") == "s3://bucket/runs/x"
        assert resolve_run("some/dir/run") == "some/dir/run"
        assert resolve_run("s3://bucket/runs/x") == "s3://bucket/runs/x"
        for bad in ("", "..", ".hidden", "a b", "-x"):
            with pytest.raises(ValidationError, match="run id"):
                resolve_run(bad)

    def test_storage_options_rejected_for_local_paths(self, url):
        with pytest.raises(StoreError, match="storage_options"):
            RunStore.create(url, config={}, storage_options={"anon": True})

    def test_core_and_store_import_without_zarr(self):
        code = (
            "import sys, npkl_dist, npkl_dist.store; "
            "assert 'zarr' not in sys.modules and 'fsspec' not in sys.modules, "
            "[m for m in sys.modules if m.startswith(('zarr', 'fsspec'))]"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr


# s3_endpoint (moto's S3 server on loopback) lives in conftest.py: the e2e test uses it too


class TestS3Store(StoreConformance):
    hypothesis_examples = 6

    @pytest.fixture
    def storage_options(self, s3_endpoint):
        return {"endpoint_url": s3_endpoint}

    @pytest.fixture
    def url(self, s3_endpoint):
        return f"s3://npkl-test/runs/{uuid.uuid4().hex[:12]}"

    def test_lock_uses_conditional_put(self, store):
        assert store._objects.exclusive_create
        with pytest.raises(FileExistsError):
            store._objects.create_exclusive(WriterLock.KEY, b"{}")
