"""Scratch arrays of row blocks written by workers: the kNN blocks of a graph build.

The driver (writer-lock holder) creates a group of 2-D arrays chunked by ``block`` rows (one
chunk = one row block = one object = one writer); any process holding a worker handle writes
whole row blocks (:func:`write_row_block`), as with ``write_V_block``. Which blocks exist is
read from the object listing, so a graph build that died resumes with the missing blocks
only. These arrays are scratch: readers trust them only through the stage that consumes them
(``graph``), per storage/SPEC.md §5.
"""

from __future__ import annotations

import numpy as np

from .._errors import ValidationError

__all__ = ["create_row_arrays", "write_row_block", "row_blocks_present", "read_row_arrays"]


def create_row_arrays(store, group: str, arrays: dict, n: int, block: int) -> None:
    """Create (once) ``group/<name>`` arrays of shape ``(n, width)`` chunked by ``block`` rows.

    ``arrays`` maps name -> (width, dtype). Existing arrays of the same shape, dtype and
    chunking are kept (their written blocks are reused); others are replaced.
    """
    store._require_writer(f"create_row_arrays({group!r})")
    with store._io(f"creating {group}"):
        root = store._group()
        g = root.require_group(group)
        for name, (width, dtype) in arrays.items():
            shape, chunks = (int(n), int(width)), (int(block), int(width))
            if name in g:
                a = g[name]
                if a.shape == shape and a.dtype == np.dtype(dtype) and a.chunks == chunks:
                    continue
            g.create_array(
                name,
                shape=shape,
                dtype=dtype,
                chunks=chunks,
                fill_value=0,
                overwrite=True,
                config={"write_empty_chunks": True},
                chunk_key_encoding={"name": "default", "separator": "/"},
            )


def write_row_block(store, path: str, start: int, rows: np.ndarray) -> None:
    """Write rows ``[start, start + len(rows))`` of ``path`` (a whole chunk; any process)."""
    import zarr  # optional engine (the zarr extra)

    with store._io(f"writing rows [{start}, {start + len(rows)}) of {path}"):
        a = zarr.open_array(store._block_store(), path=path, mode="r+", zarr_format=3)
        block = a.chunks[0]
        stop = start + rows.shape[0]
        if start % block or (rows.shape[0] != block and stop != a.shape[0]):
            raise ValidationError(
                f"rows: [{start}, {stop}) is not one whole row block of {path} (block "
                f"{block}, n {a.shape[0]}); one writer writes one whole block"
            )
        a[start:stop] = rows


def row_blocks_present(store, path: str, n: int, block: int) -> set[int]:
    """Indices of the row blocks of ``path`` already written (from the object listing)."""
    with store._io(f"listing {path}"):
        names = set(store._objects.list_files(f"{path}/c"))
    return {k for k in range(-(-n // block)) if f"{k}/0" in names}


def read_row_arrays(store, group: str, names) -> dict:
    """The whole arrays ``group/<name>`` (driver side, O(n * width) memory)."""
    import zarr  # optional engine (the zarr extra)

    with store._io(f"reading {group}"):
        return {
            nm: np.asarray(
                zarr.open_array(store._store(), path=f"{group}/{nm}", mode="r", zarr_format=3)[...]
            )
            for nm in names
        }
