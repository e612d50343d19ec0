"""A small abstract object store under one run prefix, and the run's writer lock.

The run store keeps its data in Zarr (arrays, groups, attributes) and a few small control
objects beside it (the checkpoint pointer, the stage record, the writer lock). This module
gives those control objects one tiny interface with two backends, in the manner of
zarr-python's ``abc/store.py``: capability flags say what a backend guarantees.

- ``LocalObjects``: a directory. Whole-object writes go to a temporary name in the same
  directory, are fsynced, then ``os.replace``d over the target (and the directory fsynced):
  readers see the old object or the new one, never a mixture. Exclusive creation links a
  fully written temporary file to the target name (``os.link`` fails if it exists).
- ``FsspecObjects``: any fsspec URL. A small object is written by a single PUT, which object
  stores apply atomically. Exclusive creation uses the backend's conditional put
  (``pipe_file(mode="create")``: S3 ``If-None-Match: *``, GCS, Azure) where the backend has
  one; elsewhere it is exists-then-write and the lock is confirmed by reading back its
  token (``exclusive_create = False``; see storage/SPEC.md for the weakness).

fsspec and zarr are imported lazily, when a store is opened.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
import warnings
from datetime import UTC, datetime

from ._errors import StoreError, StoreLockedError, StoreWarning

__all__ = ["ObjectStore", "LocalObjects", "FsspecObjects", "objects_for", "WriterLock"]

# fsspec protocols whose pipe_file(mode="create") is a server-side conditional put
_CONDITIONAL_PUT_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "abfs", "az", "abfss"}
# fsspec protocols with a listings cache that must not go stale between processes
_LISTINGS_CACHE_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "abfs", "az", "abfss"}


def utc_now() -> str:
    """ISO 8601 UTC timestamp with microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def is_local_url(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


class ObjectStore:
    """Whole-object access to the keys below one prefix (``/``-separated keys).

    Capability flags
    ----------------
    atomic_replace : bool
        ``write_atomic`` replaces an existing object so that readers see old or new bytes.
    exclusive_create : bool
        ``create_exclusive`` is atomic: of two concurrent creators exactly one succeeds.
    durable_sync : bool
        ``sync_prefix`` forces written data to stable storage (local ``fsync``).
    """

    atomic_replace = False
    exclusive_create = False
    durable_sync = False

    def __init__(self, url: str):
        self.url = url

    def describe(self, key: str = "") -> str:
        """The URL of a key, for messages."""
        return f"{self.url}/{key}" if key else self.url

    # --- the abstract interface -----------------------------------------------------------
    def read(self, key: str) -> bytes:  # raises FileNotFoundError
        raise NotImplementedError

    def write_atomic(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def create_exclusive(self, key: str, data: bytes) -> None:  # raises FileExistsError
        raise NotImplementedError

    def delete(self, key: str) -> None:  # missing is fine
        raise NotImplementedError

    def delete_prefix(self, prefix: str) -> None:  # recursive, missing is fine
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def list_dir(self, prefix: str = "") -> list[str]:
        """Names of the immediate children of a prefix (objects and sub-prefixes)."""
        raise NotImplementedError

    def list_files(self, prefix: str) -> list[str]:
        """Keys of every object below a prefix, relative to that prefix."""
        raise NotImplementedError

    def sync_prefix(self, prefix: str) -> None:
        """Force the objects below a prefix to stable storage (no-op if not supported)."""

    def zarr_store(self, read_only: bool):
        raise NotImplementedError


class LocalObjects(ObjectStore):
    atomic_replace = True
    exclusive_create = True
    durable_sync = True

    def __init__(self, url: str):
        path = url[len("file://") :] if url.startswith("file://") else url
        self.root = os.path.abspath(os.path.expanduser(path))
        super().__init__(self.root)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *[p for p in key.split("/") if p]) if key else self.root

    def read(self, key):
        with open(self._path(key), "rb") as f:
            return f.read()

    def _write_temp(self, path: str, data: bytes) -> str:
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quiet(tmp)
            raise
        os.close(fd)
        return tmp

    def write_atomic(self, key, data):
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quiet(tmp)
            raise
        _fsync_dir(os.path.dirname(path))

    def create_exclusive(self, key, data):
        # O_CREAT|O_EXCL semantics with the content complete on appearance: link() of a
        # fully written temporary file fails with FileExistsError if the target exists.
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)
        finally:
            _unlink_quiet(tmp)
        _fsync_dir(os.path.dirname(path))

    def rename(self, key: str, new_key: str) -> None:
        os.rename(self._path(key), self._path(new_key))

    def delete(self, key):
        _unlink_quiet(self._path(key))

    def delete_prefix(self, prefix):
        path = self._path(prefix)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            _unlink_quiet(path)

    def exists(self, key):
        return os.path.exists(self._path(key))

    def list_dir(self, prefix=""):
        try:
            return sorted(os.listdir(self._path(prefix)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_files(self, prefix):
        base = self._path(prefix)
        out = []
        for dirpath, _, files in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            for f in files:
                out.append(f if rel == "." else f"{rel.replace(os.sep, '/')}/{f}")
        return sorted(out)

    def sync_prefix(self, prefix):
        base = self._path(prefix)
        if os.path.isfile(base):
            fd = os.open(base, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(os.path.dirname(base))
            return
        for dirpath, _, files in os.walk(base):
            for f in files:
                fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            _fsync_dir(dirpath)
        _fsync_dir(os.path.dirname(base))

    def zarr_store(self, read_only):
        from zarr.storage import LocalStore  # optional engine (the zarr extra)

        return LocalStore(self.root, read_only=read_only)


class FsspecObjects(ObjectStore):
    def __init__(self, url: str, storage_options: dict | None = None):
        import fsspec  # optional engine (the zarr extra)

        url = url.rstrip("/")
        protocol = url.split("://", 1)[0]
        options = dict(storage_options or {})
        if protocol in _LISTINGS_CACHE_PROTOCOLS:
            # another process may have written since we listed: never answer from a cache
            options.setdefault("use_listings_cache", False)
        self.storage_options = options
        self.fs, self.root = fsspec.url_to_fs(url, **options)
        self.root = self.root.rstrip("/")
        self.exclusive_create = protocol in _CONDITIONAL_PUT_PROTOCOLS
        self.atomic_replace = True  # one PUT of a small object; see SPEC.md for others
        super().__init__(url)

    def _path(self, key):
        return f"{self.root}/{key}" if key else self.root

    def read(self, key):
        return self.fs.cat_file(self._path(key))

    def write_atomic(self, key, data):
        self.fs.pipe_file(self._path(key), bytes(data))

    def create_exclusive(self, key, data):
        self.fs.pipe_file(self._path(key), bytes(data), mode="create")

    def delete(self, key):
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            pass

    def delete_prefix(self, prefix):
        path = self._path(prefix)
        try:
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        self.fs.invalidate_cache(path)

    def exists(self, key):
        self.fs.invalidate_cache(self._path(key))
        return self.fs.exists(self._path(key))

    def list_dir(self, prefix=""):
        path = self._path(prefix)
        self.fs.invalidate_cache(path)
        try:
            entries = self.fs.ls(path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted({e.rstrip("/").rsplit("/", 1)[-1] for e in entries if e.rstrip("/") != path})

    def list_files(self, prefix):
        path = self._path(prefix)
        self.fs.invalidate_cache(path)
        try:
            found = self.fs.find(path)
        except FileNotFoundError:
            return []
        start = len(path) + 1
        return sorted(f[start:] for f in found if f.startswith(path + "/"))

    def zarr_store(self, read_only):
        from zarr.storage import FsspecStore  # optional engine (the zarr extra)

        return FsspecStore.from_url(
            self.url, storage_options=dict(self.storage_options), read_only=read_only
        )


def objects_for(url: str, storage_options: dict | None = None) -> ObjectStore:
    """The backend of a URL: a local directory (plain path or ``file://``) or fsspec."""
    if is_local_url(url):
        if storage_options:
            raise StoreError(
                f"storage_options were given for the local path {url!r}; they apply to "
                f"fsspec URLs only (e.g. s3://bucket/runs/x): drop them or use such a URL"
            )
        return LocalObjects(url)
    return FsspecObjects(url, storage_options)


def _unlink_quiet(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WriterLock:
    """One writer per run: a small lock object ``_npkl/lock.json`` created exclusively.

    The object holds ``{"host", "pid", "since", "token", "url"}``. A lock whose holder ran on
    this host and whose pid is gone is stale and is taken over with a ``StoreWarning``.
    """

    KEY = "_npkl/lock.json"

    def __init__(self, objects: ObjectStore, run_url: str):
        self.objects = objects
        self.run_url = run_url
        self.token: str | None = None

    # -- reading ---------------------------------------------------------------------------
    def holder(self) -> dict | None:
        """The lock object's content, ``None`` if nobody holds it."""
        try:
            raw = self.objects.read(self.KEY)
        except FileNotFoundError:
            return None
        try:
            info = json.loads(raw)
            if not isinstance(info, dict):
                raise ValueError
            return info
        except ValueError:
            return {"host": "?", "pid": "?", "since": "?", "token": None, "unreadable": True}

    def _locked_error(
        self, holder: dict, what: str = "is locked by another writer"
    ) -> StoreLockedError:
        return StoreLockedError(
            f"run {self.run_url} {what}: host {holder.get('host')!s}, pid {holder.get('pid')!s}, "
            f"since {holder.get('since')!s}. Only one process may write a run. Wait for that "
            f"process to finish, read the run with RunStore.open(url, mode='r'), or, if that "
            f"process is gone (killed on another host), remove the lock with "
            f"RunStore.break_lock(url) (lock object: {self.objects.describe(self.KEY)})",
            holder=holder,
        )

    def _is_stale(self, holder: dict) -> bool:
        if holder.get("unreadable"):
            return False
        pid = holder.get("pid")
        return (
            holder.get("host") == socket.gethostname()
            and isinstance(pid, int)
            and not _pid_alive(pid)
        )

    # -- acquiring / releasing -------------------------------------------------------------
    def acquire(self) -> str:
        token = uuid.uuid4().hex
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": utc_now(),
            "token": token,
            "url": self.run_url,
        }
        data = json.dumps(info, indent=1).encode()
        for _ in range(3):
            try:
                self.objects.create_exclusive(self.KEY, data)
            except FileExistsError:
                holder = self.holder()
                if holder is None:
                    continue  # released between our attempt and the read: try again
                if not self._is_stale(holder):
                    raise self._locked_error(holder) from None
                warnings.warn(
                    f"run {self.run_url}: taking over a stale writer lock (host "
                    f"{holder.get('host')}, pid {holder.get('pid')} is no longer running, "
                    f"since {holder.get('since')})",
                    StoreWarning,
                    stacklevel=4,
                )
                self._remove_stale(holder)
                continue
            if not self.objects.exclusive_create:
                # exists-then-write backends: confirm we won by reading the token back
                time.sleep(0.05)
                holder = self.holder()
                if holder is None or holder.get("token") != token:
                    raise self._locked_error(holder or {})
            self.token = token
            return token
        raise self._locked_error(self.holder() or {})

    def _remove_stale(self, holder: dict) -> None:
        if isinstance(self.objects, LocalObjects):
            # rename is atomic: of two processes taking over, one moves the stale lock away
            aside = f"{self.KEY}.stale-{uuid.uuid4().hex[:8]}"
            try:
                self.objects.rename(self.KEY, aside)
            except FileNotFoundError:
                return
            moved = self.holder_at(aside)
            if moved is not None and moved.get("token") != holder.get("token"):
                # somebody re-took the lock between our read and the rename: put it back
                try:
                    self.objects.create_exclusive(self.KEY, self.objects.read(aside))
                finally:
                    self.objects.delete(aside)
                return
            self.objects.delete(aside)
        else:
            self.objects.delete(self.KEY)

    def holder_at(self, key: str) -> dict | None:
        try:
            return json.loads(self.objects.read(key))
        except (FileNotFoundError, ValueError):
            return None

    def check(self) -> None:
        """Raise StoreLockedError unless this process still holds the lock."""
        holder = self.holder()
        if self.token is None or holder is None or holder.get("token") != self.token:
            raise self._locked_error(
                holder or {},
                what="is no longer locked by this writer (the lock was removed or taken over)",
            )

    def release(self) -> None:
        if self.token is None:
            return
        holder = self.holder()
        token, self.token = self.token, None
        if holder is not None and holder.get("token") == token:
            self.objects.delete(self.KEY)
        elif holder is not None:
            warnings.warn(
                f"run {self.run_url}: the writer lock was taken over by host "
                f"{holder.get('host')}, pid {holder.get('pid')} while this writer held it; "
                f"leaving their lock in place",
                StoreWarning,
                stacklevel=3,
            )

    def break_lock(self) -> dict | None:
        holder = self.holder()
        self.objects.delete(self.KEY)
        return holder
