"""The numba disk cache goes stale across modules unless the package stamp covers it.

A kernel that calls a kernel from another module compiles the callee into its own code; numba
stamps the cache with the caller's file only. ``npkl_dist._numba_cache.cover`` adds a stamp of
all the package's kernel sources, so editing the callee's module recompiles the caller.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import npkl_dist
from npkl_dist import _numba_cache
from npkl_dist.linalg import _smallqp as _kernels_smallqp

REPO = Path(npkl_dist.__file__).resolve().parent.parent

CALLEE = "from numba import njit\n\n\n@njit(cache=True)\ndef value():\n    return {v}\n"
CALLER = textwrap.dedent("""\
    from numba import njit

    from .callee import value


    @njit(cache=True)
    def outer():
        return value() * 10
    """)
INIT_COVERED = textwrap.dedent("""\
    from pathlib import Path

    from npkl_dist import _numba_cache

    _numba_cache.cover(Path(__file__).resolve().parent)
    """)


def _package(tmp_path, name, init):
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(init)
    (pkg / "callee.py").write_text(CALLEE.format(v=1))
    (pkg / "caller.py").write_text(CALLER)
    return pkg


def _run(tmp_path, name, cache_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    if cache_dir is None:
        env.pop("NUMBA_CACHE_DIR", None)
    else:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    code = f"from {name}.caller import outer\nprint(outer(), sum(outer.stats.cache_hits.values()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.parametrize("where", ["in-tree", "NUMBA_CACHE_DIR"])
def test_editing_a_callee_module_recompiles_its_cached_callers(tmp_path, where):
    cache_dir = tmp_path / "numba-cache" if where == "NUMBA_CACHE_DIR" else None
    pkg = _package(tmp_path, "covered_pkg", INIT_COVERED)
    assert _run(tmp_path, "covered_pkg", cache_dir) == (10, 0)  # compiled, then cached
    assert _run(tmp_path, "covered_pkg", cache_dir) == (10, 1)  # the cache is used
    # Same size, so numba's own stamp of the callee's file would not even see a size change;
    # the caller's file is untouched.
    (pkg / "callee.py").write_text(CALLEE.format(v=2))
    assert _run(tmp_path, "covered_pkg", cache_dir) == (20, 0)  # recompiled, not stale 10
    assert _run(tmp_path, "covered_pkg", cache_dir) == (20, 1)


def test_the_package_kernels_use_the_covering_locator():
    locator = _kernels_smallqp.box_qp._cache._impl._locator
    assert type(locator).__name__.startswith("PackageStamped")
    stamp = _numba_cache.package_stamp(Path(npkl_dist.__file__).resolve().parent)
    assert locator.get_source_stamp()[1] == stamp


def test_functions_outside_covered_roots_keep_numbas_locators(tmp_path):
    from numba import njit

    def plain():  # defined in this test file, outside npkl_dist
        return 3

    locator = njit(cache=True)(plain)._cache._impl._locator
    assert not type(locator).__name__.startswith("PackageStamped")


def test_stamp_follows_kernel_sources_only(tmp_path):
    (tmp_path / "kern.py").write_text("from numba import njit\nX = 1\n")
    (tmp_path / "plain.py").write_text("Y = 1\n")
    before = _numba_cache.package_stamp(tmp_path)
    (tmp_path / "plain.py").write_text("Y = 2\n")  # no numba: not a kernel source
    assert _numba_cache.package_stamp(tmp_path) == before
    (tmp_path / "kern.py").write_text("from numba import njit\nX = 2\n")
    assert _numba_cache.package_stamp(tmp_path) != before
