"""Large work arrays mapped in one call on base pages.

numpy asks the kernel for transparent huge pages on every large array (``madvise
MADV_HUGEPAGE``). In a VM whose free memory goes back to the host (virtio-balloon free page
reporting, as on the machines this project is measured on), a huge page's first touch is
expensive, and base pages mapped in one call are far cheaper, with the block solve's streaming
passes no slower on them (docs/decisions/block-fit-at-1e6.md).

:func:`populated_empty` gives such an array: an anonymous mapping, no huge pages, its pages
mapped up front (where the kernel cannot populate, they are touched one by one). Read it as
``np.empty``'s, or with ``zeros=True`` as ``np.zeros``' (a fresh mapping is zeros already:
only the small arrays numpy makes are then zeroed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys

import numpy as np
from numba import njit

#: Arrays below this size come from numpy (their page faults are not worth a mapping).
MIN_BYTES = 1 << 22

MADV_NOHUGEPAGE = 15
MADV_POPULATE_WRITE = 23  # Linux 5.14+

PAGE = 4096

_libc = None


def _madvise(addr: int, length: int, advice: int) -> bool:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        _libc.madvise.restype = ctypes.c_int
    return _libc.madvise(addr, length, advice) == 0


@njit(nogil=True, cache=True)
def touch_pages(b, step):
    """b[0], b[step], b[2 step], ... = 0: one write per page (b: an array's bytes)."""
    for p in range(0, b.shape[0], step):
        b[p] = 0


def populated_empty(shape, dtype=np.float64, zeros: bool = False) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` with every page mapped: on base pages in one
    ``madvise`` call where the system allows (Linux), else numpy's, touched page by page.
    Read it as uninitialised (``np.empty``), or with ``zeros`` as all zeros."""
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES or not sys.platform.startswith("linux"):
        a = np.zeros(shape, dtype) if zeros else np.empty(shape, dtype)
        if nbytes:
            touch_pages(a.reshape(-1).view(np.uint8), PAGE)
        return a
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    a = np.frombuffer(m, dtype=dtype, count=count).reshape(shape)
    addr = a.ctypes.data
    _madvise(addr, nbytes, MADV_NOHUGEPAGE)
    if not _madvise(addr, nbytes, MADV_POPULATE_WRITE):  # an older kernel: one write a page
        touch_pages(a.reshape(-1).view(np.uint8), PAGE)
    return a
