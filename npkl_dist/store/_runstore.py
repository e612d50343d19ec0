"""The run store: one Zarr group per run, with checkpoints committed through a pointer.

The layout, the commit protocol and the failure semantics are specified in storage/SPEC.md;
this module implements format version 2. In short:

- inputs, graph, plan and results are written once each by the orchestrating process (the
  writer-lock holder); completion is recorded in the small JSON object ``_npkl/stages.json``
  with a sha256 per item, so a retried write of the same content is a no-op and a write of
  different content is refused;
- a checkpoint of V (n x r) is a Zarr array sharded by row blocks (one shard = one row block
  = one writer); the driver commits it by verifying every shard, recording per-block sha256
  hashes in the checkpoint's manifest, then replacing the pointer object
  ``_npkl/pointer.json`` in one atomic step; readers follow the pointer and verify hashes,
  falling back to the previous committed checkpoint if the newest is torn.

zarr (and fsspec for URLs) are imported here lazily, when a store is opened.
"""

from __future__ import annotations

import errno as _errno
import json
import uuid
import warnings
from contextlib import contextmanager

import numpy as np

from .._errors import NpklError, ValidationError, fmt_value
from ._errors import RunNotFoundError, StoreError, StoreVersionError, StoreWarning
from ._format import (
    _CKPT_ID,
    _FIXES,
    _HASH_BATCH_BYTES,
    _KEY_ENCODING,
    _RESERVED_MANIFEST_KEYS,
    _STAGE_NAME,
    _V_DTYPES,
    DEFAULT_RETENTION,
    FORMAT_VERSION,
    POINTER_KEY,
    STAGES_KEY,
    _jsonable,
    _package_versions,
    _positive_int,
    _sha_data,
    _sha_json,
    _Torn,
)
from ._objects import WriterLock, objects_for, utc_now
from ._stage_data import StageData


class RunStore(StageData):
    """One run: inputs, graph, plan, checkpoints of V and results in a Zarr group.

    Construct with :meth:`create` (a new run, takes the writer lock) or :meth:`open`
    (``mode="r"``: read only, no lock; ``mode="a"``: resume writing, takes the lock).
    Use as a context manager, or call :meth:`close`, to release the lock.

    A RunStore pickles to a *worker handle* (no lock): on another process it may call
    :meth:`write_V_block` and the read methods, nothing that writes attributes, stages,
    commits or the pointer. A ``mode="r"`` store may also write V blocks (the one lock-free
    write); it writes nothing else.

    Attributes
    ----------
    url : str
        Absolute local path or fsspec URL of the run.
    config : dict
        The run configuration given to :meth:`create`.
    mode : {"r", "a", "worker"}
    retention : int
        Number of committed checkpoints kept (older ones are pruned at commit).
    """

    def __init__(
        self, url, *, mode, retention=DEFAULT_RETENTION, storage_options=None, _attrs=None
    ):
        # private: use create() / open()
        self._objects = objects_for(url, storage_options)
        self.url = self._objects.url
        self.mode = mode
        self.retention = _positive_int(retention, "retention")
        self.storage_options = dict(storage_options or {}) or None
        self._lock = WriterLock(self._objects, self.url)
        self._zstore = None
        self._zstore_w = None
        self._root = None
        self._arrays = {}
        self._groups = {}
        self._known_torn = set()  # committed ids found torn by latest_checkpoint
        self._pointer_warned = False  # the rebuilt-pointer warning, once per handle
        self._attrs = _attrs or {}
        self.config = self._attrs.get("config", {})

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        url,
        *,
        config: dict,
        overwrite: bool = False,
        retention: int = DEFAULT_RETENTION,
        storage_options: dict | None = None,
    ) -> RunStore:
        """Create a new run and take its writer lock.

        Parameters
        ----------
        url : str
            Local path or fsspec URL (see :func:`resolve_run`).
        config : dict
            JSON-able run configuration, stored in the root group's attributes.
        overwrite : bool, default False
            Replace an existing *run* at ``url``. A location holding anything that is not a
            run is never deleted.
        retention : int, default 2
            Committed checkpoints kept.
        storage_options : dict, optional
            fsspec options for URLs (e.g. ``{"endpoint_url": ...}`` for S3).
        """
        if not isinstance(config, dict):
            raise ValidationError(f"config: expected a dict, got {fmt_value(config)}")
        config = _jsonable(config, "config")
        self = cls(url, mode="a", retention=retention, storage_options=storage_options)
        objs = self._objects
        with self._io("creating the run"):
            exists = objs.exists("zarr.json")
            if exists:
                if not overwrite:
                    raise StoreError(
                        f"run {self.url} already exists; resume it with "
                        f"RunStore.open(url, mode='a'), or pass overwrite=True to discard it"
                    )
                attrs = self._read_root_attrs()
                if "format_version" not in attrs:
                    raise StoreError(
                        f"{self.url} holds a Zarr group that is not an npkl-dist run; "
                        f"refusing to overwrite it: choose another location"
                    )
            else:
                others = [n for n in objs.list_dir("") if n != "_npkl"]
                if others:
                    raise StoreError(
                        f"{self.url} is not empty and not an npkl-dist run (it holds "
                        f"{others[:5]}); refusing to write there: choose a new or empty "
                        f"location"
                    )
            self._lock.acquire()
        try:
            with self._io("creating the run"):
                if exists:
                    self._wipe_except_lock()
                import zarr  # optional engine (the zarr extra)

                self._attrs = {
                    "format_version": FORMAT_VERSION,
                    "created": utc_now(),
                    "npkl_version": _package_versions()["npkl-dist"],
                    "config": config,
                }
                self.config = config
                root = zarr.Group.from_store(
                    self._store(), attributes=self._attrs, overwrite=False, zarr_format=3
                )
                # _npkl holds non-Zarr control objects; making it a group keeps a listing of
                # the root clean. The other groups are created when first written.
                if not objs.exists("_npkl/zarr.json"):  # (left over by an aborted create)
                    root.create_group(
                        "_npkl",
                        attributes={
                            "description": "npkl-dist control objects: lock.json, pointer.json, "
                            "stages.json (storage/SPEC.md)"
                        },
                    )
                self._root = root
        except BaseException:
            self._lock.release()
            raise
        return self

    @classmethod
    def open(
        cls,
        url,
        mode: str = "r",
        *,
        retention: int = DEFAULT_RETENTION,
        storage_options: dict | None = None,
    ) -> RunStore:
        """Open an existing run.

        Parameters
        ----------
        url : str
        mode : {"r", "a"}, default "r"
            ``"r"`` reads without a lock (a writer may be active); ``"a"`` takes the writer
            lock (resume).
        retention : int, default 2
        storage_options : dict, optional

        Raises
        ------
        StoreError
            No run at ``url``.
        StoreVersionError
            The run was written with another format version.
        StoreLockedError
            ``mode="a"`` and another live process holds the writer lock.
        """
        if mode not in ("r", "a"):
            raise ValidationError(
                f"mode: {mode!r} is not one of 'r' (read only) or 'a' (resume writing)"
            )
        self = cls(url, mode=mode, retention=retention, storage_options=storage_options)
        with self._io("opening the run"):
            if not self._objects.exists("zarr.json"):
                raise RunNotFoundError(
                    f"no run at {self.url} (no zarr.json there): create it with "
                    f"RunStore.create(url, config=...), or check the run id and the store "
                    f"root (resolve_run)",
                    url=self.url,
                )
            attrs = self._read_root_attrs()
        version = attrs.get("format_version")
        if version is None:
            raise StoreError(
                f"{self.url} is a Zarr group but not an npkl-dist run (no format_version "
                f"attribute); check the run id / URL"
            )
        if version != FORMAT_VERSION:
            raise StoreVersionError(
                f"run {self.url} was written with run-store format version {version!r} (by "
                f"npkl-dist {attrs.get('npkl_version', '?')!s}), but this npkl-dist "
                f"({_package_versions()['npkl-dist']}) reads format version {FORMAT_VERSION} "
                f"only; open the run with an npkl-dist release that reads format version "
                f"{version!r}, or start a new run"
            )
        self._attrs = attrs
        self.config = attrs.get("config", {})
        if mode == "a":
            with self._io("taking the writer lock"):
                self._lock.acquire()
        return self

    @classmethod
    def break_lock(cls, url, *, storage_options: dict | None = None) -> dict | None:
        """Remove a run's writer lock (after its holder died on another host).

        Returns the removed lock's content, or ``None`` if the run was not locked.
        """
        objs = objects_for(url, storage_options)
        return WriterLock(objs, objs.url).break_lock()

    def close(self) -> None:
        """Release the writer lock (if held). Idempotent."""
        if self.mode == "a":
            with self._io("releasing the writer lock"):
                self._lock.release()
        self._arrays.clear()
        self._groups.clear()
        self._root = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"RunStore({self.url!r}, mode={self.mode!r})"

    def __getstate__(self):
        # A pickled store is a worker handle: same run, no lock, no attribute writes.
        return {
            "url": self.url,
            "mode": "r" if self.mode == "r" else "worker",
            "retention": self.retention,
            "storage_options": self.storage_options,
            "attrs": self._attrs,
        }

    def __setstate__(self, state):
        self.__init__(
            state["url"],
            mode=state["mode"],
            retention=state["retention"],
            storage_options=state["storage_options"],
            _attrs=state["attrs"],
        )

    # ------------------------------------------------------------------ internals
    def _store(self):
        if self._zstore is None:
            self._zstore = self._objects.zarr_store(read_only=self.mode == "r")
        return self._zstore

    def _block_store(self):
        """A writable Zarr store for block writes (lock-free handles included)."""
        if self.mode != "r":
            return self._store()
        if self._zstore_w is None:
            self._zstore_w = self._objects.zarr_store(read_only=False)
        return self._zstore_w

    def _group(self, name: str | None = None):
        """The root group or one of its stage groups (created on first use by the writer).

        The writer caches group handles (it is the only process changing them); readers and
        workers fetch fresh metadata on every call.
        """
        import zarr  # optional engine (the zarr extra)

        if self._root is None:
            self._root = zarr.open_group(
                self._store(), mode="r" if self.mode == "r" else "r+", zarr_format=3
            )
        if name is None:
            return self._root
        if self.mode != "a":
            return self._root[name]
        group = self._groups.get(name)
        if group is None:
            group = self._groups[name] = self._root.require_group(name)
        return group

    def _replace_group(self, name: str, attributes: dict):
        """Create (or replace) a stage group whose attributes describe its arrays."""
        group = self._group().create_group(name, overwrite=True, attributes=attributes)
        self._groups[name] = group
        return group

    def _read_root_attrs(self) -> dict:
        try:
            meta = json.loads(self._objects.read("zarr.json"))
        except ValueError as exc:
            raise StoreError(
                f"run {self.url}: the root zarr.json is not valid JSON ({exc}); the run's "
                f"metadata is damaged: start a new run"
            ) from None
        if meta.get("zarr_format") != 3:
            raise StoreVersionError(
                f"run {self.url} is Zarr format {meta.get('zarr_format')!r}; run-store format "
                f"version {FORMAT_VERSION} uses Zarr format 3: start a new run"
            )
        return meta.get("attributes", {}) or {}

    def _wipe_except_lock(self):
        objs = self._objects
        for name in objs.list_dir(""):
            if name == "_npkl":
                for sub in objs.list_dir("_npkl"):
                    if f"_npkl/{sub}" != WriterLock.KEY:
                        objs.delete_prefix(f"_npkl/{sub}")
            else:
                objs.delete_prefix(name)

    def _require_writer(self, what: str) -> None:
        if self.mode != "a" or self._lock.token is None:
            how = (
                "this handle was sent to a worker: only the driver holding the writer lock "
                "may do that (workers may call write_V_block)"
                if self.mode == "worker"
                else "open it with RunStore.open(url, mode='a') (or create it) to write"
            )
            raise StoreError(f"{what}: run {self.url} is not open for writing; {how}")

    @contextmanager
    def _io(self, what: str, *, checkpoint: bool = False):
        """Translate OSErrors (disk full, permission denied, ...) into StoreError.

        The package's own errors pass unchanged: an ``InputFileError`` (an OSError too) raised
        by a lazily read input file while it is written, e.g. a NaN in a feature row, is about
        that file, not the run location, and must not come with advice to fix the store."""
        try:
            yield
        except NpklError:
            raise
        except OSError as exc:
            raise self._os_error(exc, what, checkpoint) from exc

    def _os_error(self, exc: OSError, what: str, checkpoint: bool) -> StoreError:
        code = exc.errno
        name = _errno.errorcode.get(code, "") if code is not None else ""
        reason = exc.strerror or str(exc) or type(exc).__name__
        fix = _FIXES.get(code, "check that the run location is reachable and writable")
        msg = f"{what} failed in run {self.url}: {reason}" + (f" [{name}]" if name else "")
        msg += f"; {fix}, then resume the run (RunStore.open(url, mode='a'))"
        if checkpoint:
            try:
                committed = self._read_pointer().get("committed", [])
            except Exception:  # best effort: the message must not fail
                committed = None
            if committed:
                msg += (
                    f". Nothing committed was touched: checkpoint {committed[0]} is intact "
                    f"and is what a resume loads"
                )
            elif committed is not None:
                msg += ". No checkpoint had been committed yet: a resume starts from the inputs"
        err = StoreError(msg)
        err.errno = code
        return err

    # ------------------------------------------------------------------ stages
    def _read_stages(self) -> dict:
        try:
            raw = self._objects.read(STAGES_KEY)
        except FileNotFoundError:
            return {}
        try:
            return json.loads(raw).get("stages", {})
        except ValueError:
            raise StoreError(
                f"run {self.url}: {STAGES_KEY} is not valid JSON; the stage record is damaged: "
                f"start a new run"
            ) from None

    def _write_stages(self, stages: dict) -> None:
        self._lock.check()
        data = {"format_version": FORMAT_VERSION, "updated": utc_now(), "stages": stages}
        self._objects.write_atomic(STAGES_KEY, json.dumps(data, indent=1).encode())

    def stage_done(self, name: str) -> bool:
        """Whether stage ``name`` has been recorded as complete."""
        with self._io(f"reading stage {name!r}"):
            return bool(self._read_stages().get(name, {}).get("done"))

    def stages(self) -> dict:
        """The whole stage record: ``{name: {"done", "at", "info", "items"}}``."""
        with self._io("reading the stage record"):
            return self._read_stages()

    def mark_stage(self, name: str, info: dict | None = None) -> None:
        """Record stage ``name`` as complete with a JSON-able ``info`` dict (driver only)."""
        self._require_writer(f"mark_stage({name!r})")
        if not isinstance(name, str) or not _STAGE_NAME.match(name):
            raise ValidationError(
                f"name: {fmt_value(name)} is not a valid stage name; use letters, digits, "
                f"'_' and '-', starting with a letter"
            )
        info = _jsonable(dict(info or {}), f"mark_stage({name!r}) info")
        with self._io(f"recording stage {name!r}"):
            stages = self._read_stages()
            entry = stages.get(name, {})
            merged = {**entry.get("info", {}), **info}
            entry.update({"done": True, "at": utc_now(), "info": merged})
            entry.setdefault("items", {})
            stages[name] = entry
            self._write_stages(stages)

    def forget(self, stages, groups) -> None:
        """Drop the records of ``stages`` and delete the data ``groups`` (store paths, e.g.
        ``"graph"``; ``"checkpoints"`` also drops the pointer), so that those stages are
        computed again (driver only; ``npkl resume RUN --redo STAGE``). The records go
        first: a crash in between leaves stages to recompute, never records without data."""
        self._require_writer("forget")
        with self._io("forgetting stages"):
            record = self._read_stages()
            kept = {k: v for k, v in record.items() if k not in set(stages)}
            if kept != record:
                self._write_stages(kept)
            # the run's redo log: cached results keyed on the run (Prefect's) must not
            # outlive the data they describe
            redone = [*self._attrs.get("redo", []), {"at": utc_now(), "stages": list(stages)}]
            self._set_attrs({"redo": redone})
            for name in groups:
                if name == "checkpoints":
                    self._objects.delete(POINTER_KEY)
                self._objects.delete_prefix(name)
                self._groups.pop(name, None)
            self._arrays.clear()
            self._root = None

    @property
    def forced_config(self) -> list:
        """The run's log of checkpoints continued under other parameters than they were
        learned with (``npkl resume RUN --force-config``), oldest first."""
        return list(self._attrs.get("forced_config", []))

    @property
    def force_config_requested(self) -> bool:
        """Whether the next resume may continue a checkpoint learned under other parameters
        than the configuration now holds (:meth:`request_force_config`)."""
        return bool(self._attrs.get("force_config_requested"))

    def request_force_config(self, on: bool = True) -> None:
        """Allow (``on``) or withdraw the next resume's continuing a checkpoint learned under
        other parameters (``npkl resume RUN --force-config``; driver only)."""
        self._require_writer("request_force_config")
        with self._io("recording the --force-config request"):
            self._set_attrs({"force_config_requested": utc_now() if on else None})

    def record_forced_config(self, entry: dict) -> None:
        """Append ``entry`` (a checkpoint continued under other parameters than it was
        learned with) to the run's ``forced_config`` log and withdraw the request."""
        self._require_writer("record_forced_config")
        with self._io("recording a forced configuration"):
            log = [*self.forced_config, {"at": utc_now(), **entry}]
            self._set_attrs({"forced_config": log, "force_config_requested": None})

    def _set_attrs(self, values: dict) -> None:
        """Update the run's root attributes (one write) and this handle's copy of them."""
        self._group().update_attributes(values)
        self._attrs = {**self._attrs, **values}

    def _plan_items(self, stage: str, items: dict) -> dict:
        """Which items to write: same hash -> skip, new -> write, different -> refuse."""
        recorded = self._read_stages().get(stage, {}).get("items", {})
        todo = {}
        for name, sha in items.items():
            old = recorded.get(name)
            if old is None:
                todo[name] = sha
            elif old["sha256"] != sha:
                raise StoreError(
                    f"run {self.url}: {stage}/{name} is already written with different "
                    f"content (sha256 {old['sha256'][:12]}... vs {sha[:12]}...); what a run "
                    f"has recorded never changes: start a new run "
                    f"(RunStore.create(url, config=..., overwrite=True) or another run id)"
                )
        return todo

    def _record_items(self, stage: str, items: dict, info: dict | None = None) -> None:
        stages = self._read_stages()
        entry = stages.get(stage, {"items": {}, "info": {}})
        entry.setdefault("items", {}).update(items)
        entry["info"] = {**entry.get("info", {}), **(info or {})}
        entry.update({"done": True, "at": utc_now()})
        stages[stage] = entry
        self._write_stages(stages)

    def _stage_items(self, stage: str, what: str) -> dict:
        entry = self._read_stages().get(stage)
        if not entry or not entry.get("done"):
            raise StoreError(
                f"run {self.url} has no {stage} yet (stage {stage!r} is not done); write it "
                f"first with {what}"
            )
        return entry.get("items", {})

    # ------------------------------------------------------------------ checkpoints
    def _read_pointer(self) -> dict:
        try:
            raw = self._objects.read(POINTER_KEY)
        except FileNotFoundError:
            return {}
        try:
            ptr = json.loads(raw)
            if not isinstance(ptr, dict) or not isinstance(ptr.get("committed"), list):
                raise ValueError("no committed list")
            return ptr
        except ValueError as exc:
            raise StoreError(
                f"run {self.url}: the checkpoint pointer {POINTER_KEY} is damaged ({exc}); "
                f"it is only ever replaced atomically, so the storage itself lost data: "
                f"inspect checkpoints/ and start a new run"
            ) from None

    def _scan_committed(self) -> list[str]:
        """Ids of the checkpoints on storage that carry a manifest (the commit's last step
        before the pointer), newest first by step, then by commit time."""
        found = []
        for name in self._objects.list_dir("checkpoints"):
            if not _CKPT_ID.match(name):
                continue
            try:
                meta = json.loads(self._objects.read(f"checkpoints/{name}/zarr.json"))
                manifest = meta["attributes"]["manifest"]
                found.append((int(manifest["step"]), str(manifest.get("committed", "")), name))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # begun, never committed, or torn: not a resume point
        return [name for *_, name in sorted(found, reverse=True)]

    def _pointer(self) -> dict:
        """The pointer; where it is missing or damaged while committed checkpoints are on
        storage, one rebuilt from their manifests (the pointer is a cache of them: a
        StoreWarning says so once per handle, and the next commit writes it again)."""
        try:
            pointer = self._read_pointer()
            problem = None if pointer else "missing"
        except StoreError as exc:
            pointer, problem = {}, str(exc)
        if problem is None:
            return pointer
        found = self._scan_committed()
        if not found:
            if problem != "missing":
                warnings.warn(
                    f"{problem}; no committed checkpoint is on storage either, so nothing "
                    f"is lost: the run continues from its inputs",
                    StoreWarning,
                    stacklevel=4,
                )
            return {}
        if not self._pointer_warned:
            self._pointer_warned = True
            what = "is missing" if problem == "missing" else f"is damaged ({problem})"
            warnings.warn(
                f"run {self.url}: the checkpoint pointer {POINTER_KEY} {what}; rebuilt it "
                f"from the {len(found)} checkpoint manifest(s) on storage, newest {found[0]}; "
                f"each is verified block by block before it is used, and the next commit "
                f"writes the pointer again",
                StoreWarning,
                stacklevel=4,
            )
        return {"committed": found, "manifest_sha256": {}, "rebuilt": True}

    def committed_checkpoints(self) -> list[str]:
        """Ids of the committed checkpoints, newest first (at most ``retention``, unless
        the pointer was rebuilt from the manifests on storage)."""
        with self._io("reading the checkpoint pointer"):
            return list(self._pointer().get("committed", []))

    def _V(self, ckpt_id: str, *, write: bool = False):
        a = self._arrays.get((ckpt_id, write))
        if a is None:
            import zarr  # optional engine (the zarr extra)

            if not isinstance(ckpt_id, str) or not _CKPT_ID.match(ckpt_id):
                raise ValidationError(
                    f"ckpt_id: {fmt_value(ckpt_id)} is not a checkpoint id (begin_checkpoint "
                    f"returns one, e.g. 'ckpt-000012-1a2b3c4d')"
                )
            try:
                a = zarr.open_array(
                    self._block_store() if write else self._store(),
                    path=f"checkpoints/{ckpt_id}/V",
                    mode="r+" if write or self.mode != "r" else "r",
                    zarr_format=3,
                )
            except FileNotFoundError:
                raise StoreError(
                    f"run {self.url} has no checkpoint {ckpt_id}; begin it with "
                    f"begin_checkpoint(step, n, r, dtype, row_block=...) on the driver"
                ) from None
            self._arrays[(ckpt_id, write)] = a
        return a

    def begin_checkpoint(self, step: int, n: int, r: int, dtype, *, row_block: int) -> str:
        """Create the (empty) arrays of a new checkpoint of V (n x r) and return its id.

        V is stored with ``chunks = shards = (row_block, r)``: one shard is one row block
        and has exactly one writer. Nothing is visible to readers until
        :meth:`commit_checkpoint`.
        """
        self._require_writer("begin_checkpoint")
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValidationError(f"step: expected an integer >= 0, got {fmt_value(step)}")
        n = _positive_int(n, "n")
        r = _positive_int(r, "r")
        row_block = _positive_int(row_block, "row_block")
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt not in _V_DTYPES:
            raise ValidationError(
                f"dtype: {fmt_value(dtype)} is not a V dtype; use float32 or float64"
            )
        ckpt_id = f"ckpt-{int(step):06d}-{uuid.uuid4().hex[:8]}"
        meta = {
            "id": ckpt_id,
            "step": int(step),
            "n": n,
            "r": r,
            "dtype": dt.name,
            "row_block": row_block,
            "created": utc_now(),
        }
        with self._io(f"creating checkpoint {ckpt_id}", checkpoint=True):
            group = self._group("checkpoints").create_group(
                ckpt_id, attributes={"checkpoint": meta}
            )
            self._arrays[(ckpt_id, False)] = group.create_array(
                "V",
                shape=(n, r),
                dtype=dt,
                chunks=(row_block, r),
                shards=(row_block, r),
                fill_value=np.nan,
                config={"write_empty_chunks": True},
                chunk_key_encoding=_KEY_ENCODING,
                dimension_names=("point", "rank"),
            )
        return ckpt_id

    def write_V_block(self, ckpt_id: str, start: int, block: np.ndarray) -> None:
        """Write rows ``[start, start + len(block))`` of a begun checkpoint.

        The one write that needs no lock: callable on the driver's store, on a pickled
        worker handle, or on ``RunStore.open(url, mode="r")`` in another process (a Dask
        worker). It writes whole shards only (``start`` a multiple of ``row_block``; the
        length a multiple of ``row_block`` or reaching ``n``) of a checkpoint not yet
        committed, and never attributes or the pointer. Writing the same block again
        replaces it whole (idempotent retries).
        """
        a = self._V(ckpt_id, write=True)
        n, r = a.shape
        rb = a.shards[0]
        block = np.asarray(block)
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
            raise ValidationError(f"start: expected an integer, got {fmt_value(start)}")
        start = int(start)
        if block.ndim != 2 or block.shape[1] != r or block.shape[0] == 0:
            raise ValidationError(
                f"block: expected shape (rows, {r}) with rows >= 1, got {block.shape}"
            )
        stop = start + block.shape[0]
        if start < 0 or start % rb or stop > n or (block.shape[0] % rb and stop != n):
            raise ValidationError(
                f"write_V_block: rows [{start}, {stop}) are not whole row blocks of "
                f"checkpoint {ckpt_id} (n={n}, row_block={rb}); start must be a multiple of "
                f"{rb} and the length a multiple of {rb} or reach n (one writer per shard)"
            )
        if block.dtype.kind != "f" or not np.can_cast(block.dtype, a.dtype, "same_kind"):
            raise ValidationError(
                f"block: dtype {block.dtype} cannot be stored in a {a.dtype} checkpoint"
            )
        if block.dtype.itemsize > a.dtype.itemsize:
            raise ValidationError(
                f"block: dtype {block.dtype} would lose precision in the {a.dtype} "
                f"checkpoint {ckpt_id}; begin the checkpoint with dtype={block.dtype}"
            )
        if not np.all(np.isfinite(block)):
            raise ValidationError(
                f"block: rows [{start}, {stop}) of V hold NaN/inf; the solver diverged, "
                f"do not checkpoint it"
            )
        with self._io(f"writing rows [{start}, {stop}) of checkpoint {ckpt_id}", checkpoint=True):
            if ckpt_id in self._read_pointer().get("committed", []):
                raise StoreError(
                    f"write_V_block: checkpoint {ckpt_id} of run {self.url} is already "
                    f"committed and never changes; begin a new checkpoint for new rows"
                )
            a[start:stop] = block

    def _missing_blocks(self, ckpt_id: str, n: int, rb: int) -> list[int]:
        present = set(self._objects.list_files(f"checkpoints/{ckpt_id}/V/c"))
        return [k for k in range(-(-n // rb)) if f"{k}/0" not in present]

    def _block_hashes(self, a, n: int, rb: int) -> list[str]:
        per = max(1, _HASH_BATCH_BYTES // max(1, rb * a.shape[1] * a.dtype.itemsize))
        hashes = []
        for lo in range(0, n, per * rb):
            hi = min(n, lo + per * rb)
            data = a[lo:hi]
            hashes.extend(_sha_data(data[s : s + rb]) for s in range(0, hi - lo, rb))
        return hashes

    def commit_checkpoint(self, ckpt_id: str, manifest: dict) -> None:
        """Make a checkpoint the newest complete one (driver only).

        Verifies every row block was written, computes the sha256 of each block's data,
        writes the manifest (``manifest`` plus id, step, n, r, dtype, row_block, hashes,
        package versions, created time, format version) into the checkpoint group's
        attributes, then atomically replaces the pointer object. Older checkpoints beyond
        ``retention`` and abandoned ones are pruned afterwards. Committing a committed
        checkpoint again is a no-op.
        """
        self._require_writer("commit_checkpoint")
        if not isinstance(manifest, dict):
            raise ValidationError(f"manifest: expected a dict, got {fmt_value(manifest)}")
        user = _jsonable(manifest, "manifest")
        what = f"committing checkpoint {ckpt_id}"
        with self._io(what, checkpoint=True):
            self._lock.check()
            pointer = self._pointer()
            committed = list(pointer.get("committed", []))
            if ckpt_id in committed and not pointer.get("rebuilt"):
                return
            committed = [k for k in committed if k != ckpt_id]
            a = self._V(ckpt_id)
            group = self._group("checkpoints")[ckpt_id]
            meta = dict(group.attrs)["checkpoint"]
            n, rb = meta["n"], meta["row_block"]
            for key in _RESERVED_MANIFEST_KEYS:
                if key in user and (key not in meta or user[key] != meta[key]):
                    raise ValidationError(
                        f"manifest[{key!r}] = {fmt_value(user[key])} disagrees with checkpoint "
                        f"{ckpt_id} ({key}={meta.get(key, '(set at commit)')!r}); leave it out, "
                        f"the store records it"
                    )
            missing = self._missing_blocks(ckpt_id, n, rb)
            if missing:
                spans = [f"[{k * rb}, {min(n, (k + 1) * rb)})" for k in missing[:10]]
                raise StoreError(
                    f"checkpoint {ckpt_id} of run {self.url} is incomplete: {len(missing)} of "
                    f"{-(-n // rb)} row blocks were never written (rows {', '.join(spans)}"
                    f"{', ...' if len(missing) > 10 else ''}); write them with write_V_block "
                    f"before committing"
                )
            hashes = self._block_hashes(a, n, rb)
            self._objects.sync_prefix(f"checkpoints/{ckpt_id}")
            full = {
                **user,
                **meta,
                "format_version": FORMAT_VERSION,
                "committed": utc_now(),
                "versions": _package_versions(),
                "hashes": {
                    "algorithm": "sha256",
                    "of": "row-block data, C order, little-endian",
                    "row_block": rb,
                    "blocks": hashes,
                },
            }
            group.update_attributes({"manifest": full})
            self._objects.sync_prefix(f"checkpoints/{ckpt_id}/zarr.json")
            # a committed checkpoint found torn is not worth a retention slot
            torn = [k for k in committed if k in self._known_torn]
            retained = [ckpt_id] + [k for k in committed if k not in self._known_torn]
            dropped = retained[self.retention :] + torn
            retained = retained[: self.retention]
            sums = dict(pointer.get("manifest_sha256", {}))
            sums[ckpt_id] = _sha_json(full)
            new_pointer = {
                "format_version": FORMAT_VERSION,
                "current": ckpt_id,
                "committed": retained,
                "manifest_sha256": {k: sums[k] for k in retained if k in sums},
                "updated": utc_now(),
            }
            self._lock.check()
            # the commit point: one atomic replace of a small object
            self._objects.write_atomic(POINTER_KEY, json.dumps(new_pointer, indent=1).encode())
        self._prune(retained, dropped, meta["step"])

    def _prune(self, retained: list[str], dropped: list[str], step: int) -> None:
        """Delete checkpoints beyond retention and abandoned ones not newer than ``step``."""
        victims = set(dropped)
        try:
            for name in self._objects.list_dir("checkpoints"):
                m = _CKPT_ID.match(name)
                if m and name not in retained and int(m.group(1)) <= step:
                    victims.add(name)
            for name in sorted(victims):
                self._arrays.pop((name, False), None)
                self._arrays.pop((name, True), None)
                self._objects.delete_prefix(f"checkpoints/{name}")
        except OSError as exc:  # the commit already succeeded; leftovers are harmless
            warnings.warn(
                f"run {self.url}: pruning old checkpoints failed ({exc}); they will be "
                f"pruned at the next commit",
                StoreWarning,
                stacklevel=3,
            )

    def _load_checkpoint(self, ckpt_id: str, manifest_sha: str | None):
        import zarr  # optional engine (the zarr extra)

        try:
            group = zarr.open_group(
                self._store(), path=f"checkpoints/{ckpt_id}", mode="r", zarr_format=3
            )
            manifest = dict(group.attrs).get("manifest")
        except OSError as exc:
            if exc.errno in (_errno.EACCES, _errno.EPERM):
                raise
            raise _Torn(f"its group is missing or unreadable ({type(exc).__name__})") from None
        except Exception as exc:
            raise _Torn(f"its group is missing or unreadable ({type(exc).__name__})") from None
        if not manifest:
            raise _Torn("it has no manifest")
        if manifest_sha is not None and _sha_json(manifest) != manifest_sha:
            raise _Torn("its manifest does not match the pointer's sha256")
        n, r, rb = manifest["n"], manifest["r"], manifest["row_block"]
        blocks = manifest["hashes"]["blocks"]
        missing = self._missing_blocks(ckpt_id, n, rb)
        if missing:
            raise _Torn(
                f"{len(missing)} row block(s) are missing, first rows "
                f"[{missing[0] * rb}, {min(n, (missing[0] + 1) * rb)})"
            )
        try:
            a = zarr.open_array(
                self._store(), path=f"checkpoints/{ckpt_id}/V", mode="r", zarr_format=3
            )
            if a.shape != (n, r) or a.dtype != np.dtype(manifest["dtype"]):
                raise _Torn(
                    f"V has shape {a.shape} dtype {a.dtype}, the manifest says "
                    f"({n}, {r}) {manifest['dtype']}"
                )
            V = np.asarray(a[...])
        except _Torn:
            raise
        except OSError as exc:
            if exc.errno in (_errno.EACCES, _errno.EPERM):
                raise
            raise _Torn(f"reading V failed ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # a corrupt shard fails to decode (crc32c, zstd, ...)
            raise _Torn(f"reading V failed ({type(exc).__name__}: {exc})") from None
        for k, s in enumerate(range(0, n, rb)):
            if _sha_data(V[s : s + rb]) != blocks[k]:
                raise _Torn(f"rows [{s}, {min(n, s + rb)}) do not match their sha256")
        return manifest, V

    def latest_checkpoint(self) -> tuple[dict, np.ndarray] | None:
        """Manifest and V (n, r) of the newest complete checkpoint, or None if none committed.

        Every block's sha256 is verified. If the newest committed checkpoint is torn
        (missing or corrupt objects), a StoreWarning is issued and the previous committed
        one is tried; a torn checkpoint is never returned.

        Raises
        ------
        StoreError
            Checkpoints were committed but none of those retained is intact.
        """
        with self._io("reading the latest checkpoint"):
            # A writer may replace the pointer and prune old checkpoints while we read: if
            # every listed checkpoint failed and the pointer moved meanwhile, read it again.
            for _attempt in range(2):
                pointer = self._pointer()
                committed = pointer.get("committed", [])
                sums = pointer.get("manifest_sha256", {})
                problems = []
                for k, ckpt_id in enumerate(committed):
                    try:
                        return self._load_checkpoint(ckpt_id, sums.get(ckpt_id))
                    except _Torn as exc:
                        problems.append(f"{ckpt_id}: {exc}")
                        self._known_torn.add(ckpt_id)
                        nxt = committed[k + 1] if k + 1 < len(committed) else None
                        warnings.warn(
                            f"run {self.url}: checkpoint {ckpt_id} is torn or corrupt ({exc}); "
                            + (
                                f"falling back to the previous checkpoint {nxt}"
                                if nxt
                                else "no older checkpoint is retained"
                            ),
                            StoreWarning,
                            stacklevel=3,
                        )
                if not committed or self._pointer().get("updated") == pointer.get("updated"):
                    break
        if committed:
            raise StoreError(
                f"run {self.url}: none of the retained checkpoints is intact "
                f"({'; '.join(problems)}); the run cannot resume from a checkpoint: restart "
                f"it from its inputs (RunStore.create(url, config=..., overwrite=True)) or "
                f"raise retention to keep more checkpoints"
            )
        return None
