"""Crash safety of runs: the driver SIGKILLed at random moments, resumed to the identical end."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

NPKL = [sys.executable, "-m", "npkl_flows.cli"]
ROOT = Path(__file__).resolve().parents[2]


def _data(tmp_path, n=20_000):
    rng = np.random.default_rng(7)
    X = np.vstack([rng.normal(c, 0.6, size=(n // 4, 4)) for c in (0, 2, 4, 6)])
    y = np.repeat(np.arange(4), n // 4)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return [
        "--features",
        str(tmp_path / "X.npy"),
        "--labels",
        str(tmp_path / "y.npy"),
        "--eval-labels",
        str(tmp_path / "y.npy"),
        "--max-sweeps",
        "40",
        "--tol",
        "0",
        "--rank",
        "12",
        "--quiet",
        "--threads",
        "1",
    ]


def _run(args, **kw):
    return subprocess.run(NPKL + args, cwd=ROOT, capture_output=True, text=True, **kw)


@pytest.mark.heavy
def test_sigkilled_driver_resumes_bitwise(tmp_path):
    args = _data(tmp_path)
    ref_run = tmp_path / "ref"
    t0 = time.perf_counter()
    done = _run(["fit", *args, "--run", str(ref_run)])
    total = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr
    ref = np.load(_export(ref_run, tmp_path / "ref_out") / "embedding.npy")

    run = tmp_path / "killed"
    rng = np.random.default_rng(0)
    kills = 0
    first = True
    fresh = 0
    moments = []
    while kills < 20:
        cmd = ["fit", *args, "--run", str(run)] if first else ["resume", str(run), "--quiet"]
        proc = subprocess.Popen(
            NPKL + cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        delay = float(rng.uniform(0.3, total))
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
            moments.append(round(delay, 2))
            first = False
            continue
        # finished before the kill (a loaded machine varies the fit's time): fine, but a
        # finished first fit leaves nothing to resume, so start over with a fresh run (fit,
        # not resume: `first` stays True)
        assert proc.returncode == 0, proc.stderr.read()
        if first:
            fresh += 1
            run = tmp_path / f"killed-fresh{fresh}"
    done = _run(["resume", str(run), "--quiet"])
    assert done.returncode == 0, done.stderr
    got = np.load(_export(run, tmp_path / "got_out") / "embedding.npy")
    np.testing.assert_array_equal(got, ref)
    assert kills >= 20, moments


def _export(run, out):
    done = _run(["export", str(run), "--out", str(out)])
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.heavy
def test_second_writer_is_refused_and_first_unharmed(tmp_path):
    args = _data(tmp_path, n=8_000)
    run = tmp_path / "run"
    first = subprocess.Popen(
        NPKL + ["fit", *args, "--run", str(run)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(100):  # wait until the run exists and is locked
        if (run / "zarr.json").exists():
            break
        time.sleep(0.1)
    second = _run(["resume", str(run), "--quiet"])
    assert second.returncode == 2
    assert "lock" in second.stderr.lower()
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert np.load(_export(run, tmp_path / "out") / "embedding.npy").shape == (8_000, 12)


@pytest.mark.parametrize("method, width", [("sweeps", 12), ("block", 48), ("auto", 48)])
def test_checkpoint_manifest_records_state_and_parameters(tmp_path, method, width):
    """A block fit's checkpoint holds V and its state arrays S, L S and R (4 x rank columns,
    npkl_dist.solvers.bcd._fit.checkpoint_width); 'auto' picks block solves here (2,000 points)."""
    from npkl_dist.store import RunStore

    args = _data(tmp_path, n=2_000)
    args[args.index("--max-sweeps") + 1] = "3"
    done = _run(["fit", *args, "--method", method, "--run", str(tmp_path / "run")])
    assert done.returncode == 0, done.stderr
    store = RunStore.open(str(tmp_path / "run"))
    try:
        manifest, V = store.latest_checkpoint()
    finally:
        store.close()
    assert manifest["sweep"] == 3 and V.shape == (2_000, width)
    assert {"rng_state", "objective", "objective_trace"} <= set(manifest["state"])
    assert manifest["parameters"]["loss"] == "square" and manifest["parameters"]["rank"] == 12
    assert manifest["hashes"] and manifest["versions"]
