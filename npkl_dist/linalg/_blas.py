"""BLAS thread control: run a block of code on one BLAS thread (threadpoolctl), so that numba's
threads and BLAS's do not oversubscribe the cores."""

from __future__ import annotations

from threadpoolctl import ThreadpoolController  # a scikit-learn dependency

_BLAS_CONTROLLER = None


def _blas_controller():
    """One threadpoolctl controller per process: building one scans the loaded libraries
    (more than a whole small fit; docs/decisions/small-fit-times.md)."""
    global _BLAS_CONTROLLER
    if _BLAS_CONTROLLER is None:
        _BLAS_CONTROLLER = ThreadpoolController()
    return _BLAS_CONTROLLER


class _OneBlasThread:
    """``with _OneBlasThread():`` one thread in every BLAS library of the process's
    controller, each library's own count restored on exit. threadpoolctl's ``limit()`` does
    the same through ``info()`` dictionaries of every library (a tenth of a 100-point linear
    fit); this reads and sets only the counts and leaves a library already at one thread alone."""

    __slots__ = ("saved",)

    def __enter__(self):
        self.saved = []
        for lib in _blas_controller().lib_controllers:
            if lib.user_api == "blas":
                count = lib.get_num_threads()
                if count != 1:
                    lib.set_num_threads(1)
                    self.saved.append((lib, count))
        return self

    def __exit__(self, *exc):
        for lib, count in self.saved:
            lib.set_num_threads(count)
        return False
