"""Numba's disk cache, made stale by a change to any kernel module of the package.

Numba keys a cached kernel by its own source file only (mtime, size and content hash of the file
that defines it). A kernel that calls a kernel from another module compiles the callee into its
own machine code, so after a change to ``_kernels.box_qp`` the cached ``_blocksolve`` and ``_kkt``
kernels still run the old QP until their caches are deleted by hand. That bites whoever upgrades
an installed copy in place, or checks out another commit of a working tree.

``cover(root)`` fixes it for every function defined under ``root``: their cache entries carry,
beside numba's own stamp, a hash of every ``.py`` file under ``root`` that mentions numba (the
modules that define kernels and the compile-time constants they read). A change to any of them
makes numba treat the whole package's index as stale and recompile on first call. Functions
outside covered roots (pynndescent's, a user's) keep numba's own locators untouched.

Only numba's documented cache-locator hook is used (the locator class list that
``NUMBA_CACHE_LOCATOR_CLASSES`` also overrides); when a user sets that variable, their locators
win and this module does nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from numba.core import caching

__all__ = ["cover", "covered_stamp", "package_stamp"]

_MENTIONS_NUMBA = re.compile(rb"\b(numba|njit)\b")
_IMPL = getattr(caching, "CacheImpl", None) or caching._CacheImpl
_ROOTS: dict[str, bytes] = {}  # resolved root directory -> stamp of its kernel sources
_WRAPPED: dict[type, type] = {}  # numba locator class -> its covering subclass


def package_stamp(root) -> bytes:
    """SHA-256 over the relative paths and contents of the ``.py`` files under ``root`` that
    mention numba, in sorted path order."""
    root = Path(root)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        data = path.read_bytes()
        if _MENTIONS_NUMBA.search(data):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(b"\0")
            digest.update(hashlib.sha256(data).digest())
    return digest.digest()


def _root_of(py_file) -> str | None:
    if not _ROOTS or not py_file:
        return None
    path = os.path.realpath(py_file)
    for root in _ROOTS:
        if path.startswith(root + os.sep):
            return root
    return None


def covered_stamp(py_file) -> bytes | None:
    """The package stamp a function defined in ``py_file`` is cached under (None: not covered)."""
    root = _root_of(py_file)
    return None if root is None else _ROOTS[root]


def _covering(base: type) -> type:
    if base in _WRAPPED:
        return _WRAPPED[base]

    class Covering(base):
        @classmethod
        def from_function(cls, py_func, py_file):
            if _root_of(py_file) is None:
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return (super().get_source_stamp(), covered_stamp(getattr(self, "_py_file", None)))

    Covering.__name__ = Covering.__qualname__ = f"PackageStamped{base.__name__}"
    _WRAPPED[base] = Covering
    return Covering


def cover(root) -> bytes:
    """Cache every numba function defined under ``root`` with the stamp of ``root``'s kernel
    sources (see the module docstring). Call before the kernels are decorated, i.e. before the
    package imports its kernel modules. Returns the stamp."""
    real = os.path.realpath(root)
    stamp = package_stamp(real)
    _ROOTS[real] = stamp
    classes = _IMPL._locator_classes
    if not any(cls in _WRAPPED.values() for cls in classes):
        _IMPL._locator_classes = [_covering(cls) for cls in classes] + list(classes)
    return stamp
