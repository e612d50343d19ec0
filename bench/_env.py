"""What every timing script sets up first: its thread counts, and the line naming the machine."""

from __future__ import annotations

import platform


def pin_threads(threads: int = 1) -> str:
    """numba's and BLAS's threads set to ``threads`` (threadpoolctl's limit stays for the
    process); returns the header line '# <CPU>, <cores> cores, Python <version>, <threads>'."""
    import numba
    from threadpoolctl import threadpool_limits

    from bench.paper.report import machine

    numba.set_num_threads(threads)
    threadpool_limits(threads, user_api="blas")
    what = "one thread" if threads == 1 else f"{threads} threads"
    return f"# {machine()}, Python {platform.python_version()}, {what}"
