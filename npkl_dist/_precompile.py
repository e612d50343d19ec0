"""Compile a run's numba kernels in a second process while the run compiles the first ones.

numba compiles on the calling thread, one kernel at a time, and a first run on a machine spends
most of its time there (docs/decisions/cold-start.md). The kernels a fit needs are known from
its loss and dtype; ``background_compile(loss, dtype)`` starts a helper process that compiles
them into numba's disk cache from the *last* one a run needs to the first, while the run itself
compiles from the first: they meet in the middle, and the run loads what the helper cached
instead of compiling it. The helper runs at a lower priority, stops when the run ends, and is
started only when the cache does not already hold the manifest's last kernel (a warm run pays
nothing). The arithmetic is unchanged: a kernel loaded from the cache is the kernel compiled.

The manifests (``_precompile_manifest.py``) list, per loss and dtype, the outermost kernels the
digits demo compiles, in the order it compiles them, with their argument types; they are
recorded by ``python -m npkl_dist.job._precompile_record`` (each loss in a fresh process with
an empty cache) and a heavy test checks them against a fresh recording. A stale manifest costs
only the helper's time: the run compiles what the helper did not.

Off with ``NPKL_BACKGROUND_COMPILE=0`` (the test suite sets it), and on one-core machines.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["background_compile", "manifest", "signature", "start_helper", "stop_helper"]

#: Environment variable that turns the helper off ("0").
ENV = "NPKL_BACKGROUND_COMPILE"

_ACTIVE: list = []  # the helper of this process, while one runs
_WARM: set = set()  # manifests whose last kernel this process found in the cache


def _arg_type(spec):
    from numba import types

    kind = spec[0]
    if kind == "array":
        _, dtype, ndim, layout, readonly = spec
        return types.Array(getattr(types, dtype), ndim, layout, readonly=readonly)
    if kind == "literal":
        return types.literal(spec[1])
    return getattr(types, spec[1])


def arg_spec(ty):
    """The manifest form of a numba argument type (inverse of _arg_type)."""
    from numba import types

    if isinstance(ty, types.Array):
        return ("array", str(ty.dtype), ty.ndim, ty.layout, not ty.mutable)
    if isinstance(ty, types.IntegerLiteral):
        return ("literal", ty.literal_value)
    if isinstance(ty, (types.Integer, types.Float, types.Boolean)):
        return ("scalar", str(ty))
    raise TypeError(f"no manifest form for the numba type {ty!r}")


def signature(entry):
    """(dispatcher, argument types) of one manifest entry (module, qualified name, args)."""
    module, qualname, args = entry
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj, tuple(_arg_type(a) for a in args)


def manifest(loss: str, dtype: str):
    """The recorded entries for ``loss`` and ``dtype``, in the order a run compiles them
    (empty when none is recorded)."""
    from ._precompile_manifest import MANIFESTS

    return MANIFESTS.get(f"{loss}-{dtype}", ())


def _cached(entry) -> bool:
    """Whether numba's disk cache holds this entry (numba's cache loader; any failure of that
    private interface counts as cached, so that no helper starts on a doubt)."""
    try:
        disp, sig = signature(entry)
        return disp._cache.load_overload(sig, disp.targetctx) is not None
    except Exception:
        return True


def _wanted() -> bool:
    return os.environ.get(ENV, "1") != "0" and (os.cpu_count() or 1) > 1


def start_helper(entries, env=None) -> subprocess.Popen:
    """A helper process compiling (or loading) ``entries`` into numba's disk cache, last
    first, at a lower priority; ``env``: its environment (default: this process's)."""
    env = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "npkl_dist._precompile"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(json.dumps([list(e) for e in entries]).encode())
        proc.stdin.close()
    return proc


def stop_helper(proc: subprocess.Popen) -> None:
    """Stop a helper (numba writes a cache file to a temporary name and renames it: a stop
    between the two leaves no partial entry) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def background_compile(loss: str, dtype: str = "float64"):
    """``with background_compile(loss, dtype): <the run>``: a helper process compiles the
    run's kernels from the last while the run compiles from the first (see the module
    docstring). Yields the helper's Popen, or None when none started."""
    key = (loss, dtype)
    entries = manifest(loss, dtype) if _wanted() and not _ACTIVE and key not in _WARM else ()
    if not entries or _cached(entries[-1]):
        if entries:  # probed once per process: a fit in a loop pays no cache load each time
            _WARM.add(key)
        yield None
        return
    proc = start_helper(entries)
    _ACTIVE.append(proc)
    try:
        yield proc
    finally:
        _ACTIVE.remove(proc)
        stop_helper(proc)


def _compile_all(entries) -> int:
    """The helper: compile (or load) every entry, last first; returns the count compiled or
    loaded."""
    with contextlib.suppress(AttributeError, OSError):
        os.nice(10)
    import npkl_dist  # noqa: F401  (numba's cache locators, as the run has them)

    done = 0
    for module, qualname, args in reversed(entries):
        try:
            disp, sig = signature((module, qualname, tuple(map(tuple, args))))
            disp.compile(sig)
            done += 1
        except Exception:  # a stale entry: the run compiles what it needs itself
            continue
    return done


def main(argv=None) -> int:
    """The helper's entry point: entries as JSON on stdin."""
    _compile_all(json.loads(sys.stdin.read()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
