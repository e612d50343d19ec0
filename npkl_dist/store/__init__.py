"""Run store: a run's inputs, graph, plan, checkpoints and results in one Zarr group.

The specification (layout, format version, checkpoint commit protocol, writer lock, failure
semantics) is storage/SPEC.md. Only this subpackage imports zarr and fsspec, and only when a
store is opened: ``import npkl_dist.store`` works without them installed.

Install the engine with ``pip install "npkl-dist[zarr]"``.
"""

from ._checkpointer import StoreCheckpointer, data_hashes
from ._errors import (
    RunNotFoundError,
    StoreDamagedError,
    StoreError,
    StoreLockedError,
    StoreVersionError,
    StoreWarning,
)
from ._format import (
    DEFAULT_RETENTION,
    DEFAULT_ROOT,
    FORMAT_VERSION,
    npkl_home,
    resolve_run,
    runs_root,
)
from ._runstore import RunStore

__all__ = [
    "DEFAULT_RETENTION",
    "DEFAULT_ROOT",
    "npkl_home",
    "runs_root",
    "FORMAT_VERSION",
    "RunStore",
    "StoreCheckpointer",
    "StoreDamagedError",
    "StoreError",
    "RunNotFoundError",
    "StoreLockedError",
    "StoreVersionError",
    "StoreWarning",
    "data_hashes",
    "resolve_run",
]
