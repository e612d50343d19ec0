"""The run store's format: its constants, key names, and the helpers that hash, encode and
write its arrays (shared by the store's bookkeeping and its stage data)."""

from __future__ import annotations

import errno as _errno
import hashlib
import json
import os
import re
import sys
from importlib import metadata

import numpy as np

from .._errors import ValidationError, fmt_value
from .._version import __version__

FORMAT_VERSION = 2
#: Run ids resolve under ``<npkl home>/runs`` (:func:`npkl_home`) unless a root is given.
DEFAULT_ROOT = None
#: Where run ids lived before NPKL_HOME (relative to the working directory): still found.
LEGACY_ROOT = "storage/runs"
DEFAULT_RETENTION = 2


def npkl_home() -> str:
    """The directory that runs (``runs/``) and reports (``reports/``) default to: the
    environment variable ``NPKL_HOME``, else ``$XDG_DATA_HOME/npkl``, else
    ``~/.local/share/npkl`` (absolute; created by the first command that writes)."""
    home = os.environ.get("NPKL_HOME")
    if not home:
        base = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
        home = os.path.join(base, "npkl")
    return os.path.abspath(os.path.expanduser(home))


def runs_root() -> str:
    """The default root of run ids: ``<npkl home>/runs``."""
    return os.path.join(npkl_home(), "runs")


POINTER_KEY = "_npkl/pointer.json"
STAGES_KEY = "_npkl/stages.json"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CKPT_ID = re.compile(r"^ckpt-(\d{6,})-([0-9a-f]{8})$")
_STAGE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_ITEM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_ENCODING = {"name": "default", "separator": "/"}
_TARGET_CHUNK_BYTES = 8 << 20  # inputs/graph/results chunks: about 8 MiB uncompressed
_HASH_BATCH_BYTES = 64 << 20  # V is read back in batches of whole blocks of about this size
_V_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_RESERVED_MANIFEST_KEYS = (
    "id",
    "step",
    "n",
    "r",
    "dtype",
    "row_block",
    "format_version",
    "created",
    "versions",
    "hashes",
)


def resolve_run(run, root=DEFAULT_ROOT) -> str:
    """The store URL of a run.

    Parameters
    ----------
    run : str or path-like
        A run id (``[A-Za-z0-9][A-Za-z0-9._-]*``), resolved to ``<root>/<id>``; a path
        containing ``/`` or an fsspec URL (containing ``://``) is returned as is.
    root : str or path-like, optional
        Local directory (made absolute against the working directory) or fsspec URL under
        which run ids live; by default ``<npkl home>/runs`` (:func:`npkl_home`), where an id
        not found there is looked up in ``./storage/runs`` (the earlier default) too.

    Returns
    -------
    str
        An absolute local path, or a URL.
    """
    if not isinstance(run, (str, os.PathLike)):
        raise ValidationError(
            f"run: expected a run id, a path or a URL (str), got {fmt_value(run)}"
        )
    run = os.fspath(run)
    if "://" in run or "/" in run or os.sep in run:
        return run
    if not _RUN_ID.match(run):
        raise ValidationError(
            f"run: {run!r} is not a valid run id; use letters, digits, '.', '_' and '-' "
            f"(not starting with '.' or '-'), or pass a path or URL"
        )
    if root is None:
        home = os.path.join(runs_root(), run)
        legacy = os.path.abspath(os.path.join(LEGACY_ROOT, run))
        return legacy if not os.path.exists(home) and os.path.isdir(legacy) else home
    root = os.fspath(root)
    if "://" in root:
        return f"{root.rstrip('/')}/{run}"
    return os.path.abspath(os.path.join(os.path.expanduser(root), run))


# --- small helpers ---------------------------------------------------------------------------
def _json_default(o):
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"object of type {type(o).__name__} is not JSON serializable")


def _jsonable(value, where: str):
    """A deep copy of ``value`` made of JSON types (numpy scalars converted), or an error."""
    try:
        return json.loads(json.dumps(value, default=_json_default, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            f"{where}: {exc}; pass JSON-able values (numbers, strings, bools, None, lists, "
            f"dicts with string keys; no NaN/inf, no arbitrary objects)"
        ) from None


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _sha_json(value) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def _le(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def _sha_data(arr: np.ndarray) -> str:
    """sha256 of an array's C-order little-endian bytes (data only)."""
    return hashlib.sha256(_le(arr).reshape(-1).view(np.uint8)).hexdigest()


def _hash_arrays(h, arrays, extra=None):
    for a in arrays:
        a = _le(np.asarray(a))
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.reshape(-1).view(np.uint8))
    if extra is not None:
        h.update(_canonical(extra))
    return h.hexdigest()


def _sha_arrays(*arrays, extra=None) -> str:
    """sha256 over several arrays, their dtypes and shapes, and JSON extras: an item's
    identity (a rewrite with the same hash is a no-op, another is refused)."""
    return _hash_arrays(hashlib.sha256(), arrays, extra)


def _xxh_arrays(*arrays, extra=None) -> str:
    """xxh3-128 over the same bytes as :func:`_sha_arrays`: the check every whole read of a
    stage makes (storage damage, not an adversary; faster: docs/decisions/run-store-integrity.md)."""
    import xxhash  # the zarr extra's, as the store is

    return _hash_arrays(xxhash.xxh3_128(), arrays, extra)


class Digests:
    """sha256 and xxh3-128 of one byte stream (``update``), for an item's record:
    ``record(kind)`` gives ``{"sha256", "xxh3_128", "kind"}``."""

    def __init__(self, prefix: bytes = b""):
        import xxhash  # the zarr extra's, as the store is

        self.sha, self.xxh = hashlib.sha256(prefix), xxhash.xxh3_128(prefix)

    def update(self, data) -> None:
        self.sha.update(data)
        self.xxh.update(data)

    def hexdigest(self) -> str:
        return self.sha.hexdigest()

    def record(self, kind: str) -> dict:
        return {"sha256": self.sha.hexdigest(), "xxh3_128": self.xxh.hexdigest(), "kind": kind}


def _item_record(kind: str, *arrays, extra=None) -> dict:
    """The record of an array item: its sha256 and xxh3-128, one pass over the data."""
    d = Digests()
    _hash_arrays(d, arrays, extra)
    return d.record(kind)


def _package_versions() -> dict:
    out = {"python": sys.version.split()[0], "npkl-dist": __version__}
    for name in ("numpy", "scipy", "numba", "zarr", "numcodecs", "fsspec", "s3fs"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


_FIXES = {
    _errno.ENOSPC: "the volume holding the run is full: free space there (e.g. delete old "
    "runs) or move the run to a larger volume or an object store",
    _errno.EDQUOT: "the disk quota of the run location is exhausted: free space or raise "
    "the quota",
    _errno.EACCES: "this process may not write there: fix the permissions (or the object "
    "store credentials) of the run location, or choose another root",
    _errno.EPERM: "this process may not write there: fix the permissions (or the object "
    "store credentials) of the run location, or choose another root",
    _errno.EROFS: "the run location is on a read-only file system: choose a writable root",
}


def _positive_int(value, name) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValidationError(f"{name}: expected a positive integer, got {fmt_value(value)}")
    return int(value)


def _chunks_1d(length: int, itemsize: int) -> tuple[int]:
    return (max(1, min(length, _TARGET_CHUNK_BYTES // max(1, itemsize))),)


def _put_array(group, name: str, arr: np.ndarray, chunks: tuple) -> None:
    """Create (or replace) one array of a written-once stage and fill it."""
    a = group.create_array(
        name,
        shape=arr.shape,
        dtype=arr.dtype,
        chunks=chunks,
        fill_value=0,
        overwrite=True,
        config={"write_empty_chunks": True},
        chunk_key_encoding=_KEY_ENCODING,
    )
    if arr.size:
        a[...] = arr


class _Torn(Exception):
    """A committed checkpoint failed verification (internal)."""
