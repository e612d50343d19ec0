"""The cold-start levers (docs/decisions/cold-start.md): kernels specialised on a constant loss
(``literal_arg``) and the background compile helper (``npkl_dist._precompile``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit, types

from npkl_dist import _precompile
from npkl_dist._precompile_manifest import MANIFESTS
from npkl_dist.linalg._rowops import literal_arg, serial_variant
from npkl_dist.problem._terms import LOSS_CODES
from npkl_dist.solvers import _kkt, _sweeps


@njit(cache=False)
def _scaled(x, loss, out):
    for k in range(x.shape[0]):
        out[k] = x[k] * (loss + 1)


def test_literal_arg_compiles_one_specialisation_per_value_and_computes_the_kernel():
    wrapped = literal_arg(_scaled, "loss")
    x = np.arange(4.0)
    for loss in (0, 2, 2, 3):
        got, want = np.empty(4), np.empty(4)
        wrapped(x, loss, got)
        _scaled.py_func(x, loss, want)
        np.testing.assert_array_equal(got, want)
    literal = [s for s in _scaled.signatures if isinstance(s[1], types.IntegerLiteral)]
    assert sorted(s[1].literal_value for s in literal) == [0, 2, 3]
    # another argument type is another specialisation of the same value
    got32 = np.empty(4, np.float32)
    wrapped(x.astype(np.float32), 2, got32)
    np.testing.assert_array_equal(got32, (x * 3).astype(np.float32))
    assert len([s for s in _scaled.signatures if isinstance(s[1], types.IntegerLiteral)]) == 4


def test_serial_variant_of_a_literal_arg_kernel_stays_literal():
    serial = serial_variant(_kkt.lv_kkt_row_terms)
    assert isinstance(serial, literal_arg) and serial.arg == "loss"
    assert serial.kernel.py_func.__qualname__.endswith("_serial")


@pytest.mark.parametrize(
    "ol, hinges",
    [(_sweeps._ol_hinge_column, ("hinge", "squared_hinge")), (_kkt._ol_kink_min_norm, ("hinge",))],
)
def test_a_constant_loss_types_the_hinge_qp_only_for_the_hinges(ol, hinges):
    """The typing-time choice that keeps box_qp out of the other losses' compiles: the stub
    resolves to the QP for a hinge constant and for a run-time loss, to nothing else."""
    n_args = ol.__code__.co_argcount
    names = ol.__code__.co_varnames[:n_args]
    for name, code in LOSS_CODES.items():
        args = [types.float64] * n_args
        args[names.index("loss")] = types.literal(code)
        impl = ol(*args)
        assert (impl.__name__ == "hinge") == (name in hinges), name
    args = [types.float64] * n_args
    args[names.index("loss")] = types.int64
    assert ol(*args).__name__ == "hinge"


def test_every_manifest_entry_names_a_kernel_with_its_arity():
    assert {"square-float64", "hinge-float64", "squared_hinge-float64", "linear-float64"} <= set(
        MANIFESTS
    )
    for key, entries in MANIFESTS.items():
        assert entries, key
        for entry in entries:
            disp, sig = _precompile.signature(entry)
            assert hasattr(disp, "compile"), entry[:2]
            assert disp.py_func.__code__.co_argcount == len(sig), entry[:2]


def _index_files(cache, name):
    return list(cache.rglob(f"*{name}-*.nbi"))


def test_the_helper_fills_an_empty_cache(tmp_path):
    entries = [
        (
            "npkl_dist.linalg._memory",
            "touch_pages",
            (("array", "uint8", 1, "C", False), ("scalar", "int64")),
        ),
        ("npkl_dist.linalg._rowops", "block_sums", (("array", "float64", 1, "C", False),)),
    ]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    proc = _precompile.start_helper(entries, env)
    assert proc.wait(timeout=300) == 0
    assert _index_files(tmp_path, "touch_pages") and _index_files(tmp_path, "block_sums")


def test_background_compile_starts_only_when_wanted_and_the_cache_is_cold(tmp_path, monkeypatch):
    entries = (("npkl_dist.linalg._rowops", "block_sums", (("array", "float64", 1, "C", False),)),)
    monkeypatch.setattr(_precompile, "manifest", lambda loss, dtype: entries)
    monkeypatch.setattr(_precompile, "_WARM", set())
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the helper's cache only
    monkeypatch.setenv(_precompile.ENV, "0")
    monkeypatch.setattr(_precompile, "_cached", lambda entry: False)
    with _precompile.background_compile("square") as proc:
        assert proc is None  # turned off
    monkeypatch.setenv(_precompile.ENV, "1")
    monkeypatch.setattr(_precompile, "_cached", lambda entry: True)
    with _precompile.background_compile("square") as proc:
        assert proc is None  # warm
    monkeypatch.setattr(_precompile, "_cached", lambda entry: False)
    with _precompile.background_compile("hinge") as proc:
        assert isinstance(proc, subprocess.Popen)
        with _precompile.background_compile("hinge") as inner:
            assert inner is None  # one helper per process
    assert proc.returncode is not None  # stopped and reaped with the run


def test_a_warm_cache_is_probed_once_per_process(monkeypatch):
    """A fit in a loop (an estimator's cross-validation, the active loop) loads nothing from
    the cache to decide: the first probe that finds the manifest's last kernel is kept."""
    entries = (("npkl_dist.linalg._rowops", "block_sums", (("array", "float64", 1, "C", False),)),)
    probes = []
    monkeypatch.setattr(_precompile, "manifest", lambda loss, dtype: entries)
    monkeypatch.setattr(_precompile, "_WARM", set())
    monkeypatch.setattr(_precompile, "_cached", lambda entry: probes.append(entry) or True)
    monkeypatch.setenv(_precompile.ENV, "1")
    for _ in range(3):
        with _precompile.background_compile("square") as proc:
            assert proc is None
    assert len(probes) == 1


def test_cached_reads_numba_cache_of_this_process():
    """_cached is True for a kernel this process compiled into its cache, False for a
    signature nobody compiled."""
    entry = ("npkl_dist.linalg._rowops", "block_sums", (("array", "float64", 1, "C", False),))
    disp, sig = _precompile.signature(entry)
    disp.compile(sig)  # compiled or loaded: in the cache either way
    assert _precompile._cached(entry)
    never = ("npkl_dist.linalg._rowops", "block_sums", (("array", "int16", 1, "A", True),))
    assert not _precompile._cached(never)


@pytest.mark.heavy
@pytest.mark.parametrize("loss", ["square", "hinge"])
def test_manifest_is_what_a_cold_fit_compiles(loss, tmp_path):
    """The committed manifest equals a fresh recording (an empty cache, a new process):
    regenerate with ``python -m npkl_dist.job._precompile_record`` after changing kernels."""
    code = (
        "import json, sys; from npkl_dist.job._precompile_record import record; "
        f"json.dump(record({loss!r}), sys.stdout)"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), _precompile.ENV: "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout

    fresh = [(m, q, tuple(tuple(a) for a in args)) for m, q, args in json.loads(out)]
    assert fresh == list(MANIFESTS[f"{loss}-float64"])
