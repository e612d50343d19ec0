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


def time_alternately(cases, runs: int, unit: str = "s", before=None) -> dict:
    """Time each of ``cases`` (name -> callable) ``runs`` times, the cases alternating within
    each run so that all see the same minutes of a noisy host; ``before`` (optional) is called
    untimed before every call. Prints every run and the median per case (``unit``: 's' or
    'ms') and returns the medians in seconds."""
    import time

    import numpy as np

    scale = 1e3 if unit == "ms" else 1.0
    times = {name: [] for name in cases}
    for _ in range(runs):
        for name, f in cases.items():
            if before is not None:
                before()
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    digits = 1 if unit == "ms" else 3
    for k, v in times.items():
        runs_text = " ".join(f"{scale * x:.{digits}f}" for x in v)
        print(f"{k}: {runs_text} {unit}, median {scale * med[k]:.{digits}f} {unit}")
    return med


def time_method(cls, name: str, acc, key: str | None = None) -> None:
    """Replace ``cls.name`` by a wrapper that adds its seconds into ``acc[key or name]`` (a
    ``collections.defaultdict(float)``); values and exceptions pass through unchanged."""
    import functools
    import time

    f = getattr(cls, name)
    key = key or name

    @functools.wraps(f)
    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[key] += time.perf_counter() - t

    setattr(cls, name, timed)
