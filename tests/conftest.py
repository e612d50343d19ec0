"""Shared fixtures of the test suite."""

from __future__ import annotations

import os
import tempfile

import pytest

# Runs and reports that a test leaves at its default place (a run id, no [output] out) go to
# a fresh npkl home of this test process, never the user's (~/.local/share/npkl).
os.environ["NPKL_HOME"] = tempfile.mkdtemp(prefix="npkl-home-tests-")
# No background compile helper per fit (npkl_dist._precompile): the suite's workers already
# use every core; tests/test_precompile.py turns it on where it is the subject.
os.environ["NPKL_BACKGROUND_COMPILE"] = "0"


def _global_seeds():
    """Seeds of ``global_random_seed`` (scikit-learn's convention).

    ``NPKL_TESTS_GLOBAL_RANDOM_SEED`` may be a single seed (``7``), a list (``1,5,9``), an
    inclusive range (``0-19``) or ``all`` (0-99). Default: 42.
    """
    spec = os.environ.get("NPKL_TESTS_GLOBAL_RANDOM_SEED", "42").strip()
    if spec == "all":
        return list(range(100))
    if "-" in spec:
        lo, hi = (int(s) for s in spec.split("-", 1))
        return list(range(lo, hi + 1))
    return [int(s) for s in spec.split(",") if s.strip()]


@pytest.fixture(params=_global_seeds(), ids=lambda s: f"seed{s}")
def global_random_seed(request):
    """A seed every random test must pass with; run many with NPKL_TESTS_GLOBAL_RANDOM_SEED."""
    return request.param


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's standalone S3 server on a random loopback port, one bucket, dummy credentials."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    mp = pytest.MonkeyPatch()
    for var, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_SESSION_TOKEN", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        mp.setenv(var, value)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    import s3fs

    s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir("npkl-test")
    yield endpoint
    server.stop()
    mp.undo()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_bin(name: str) -> str:
    """A console script of this interpreter's environment (prefect, dask), or skip."""
    import shutil
    import sys
    from pathlib import Path

    p = Path(sys.executable).parent / name
    if p.exists():
        return str(p)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed next to {sys.executable}")
    return found


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real `prefect server start` on SQLite and loopback, its own PREFECT_HOME.

    Yields the environment variables that point a process at it.
    """
    pytest.importorskip("prefect")
    import subprocess
    import time
    import urllib.request

    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_UI_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "w")
    proc = subprocess.Popen(
        [venv_bin("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{api}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(
                f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}"
            )
        time.sleep(0.5)
    yield {
        "PREFECT_API_URL": api,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def learn_kernel_calls(monkeypatch):
    """The methods ``bench.paper.run.learn_kernel`` is called with, in order, while the test
    runs (the real fit still runs): for the benchmarks that time the harness's own fits."""
    from bench.paper import run

    calls = []
    real = run.learn_kernel

    def spy(method, *args, **kwargs):
        calls.append(method)
        return real(method, *args, **kwargs)

    monkeypatch.setattr(run, "learn_kernel", spy)
    return calls


#: The environment the test session started with.
_START_ENV = dict(os.environ)


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves ``os.environ`` as it found it, and the variables a Dask nanny sets
    before spawning a worker (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS = 1,
    ``distributed.nanny.pre-spawn-environ``) as the session started: the nanny leaves them in
    the parent's environment, also from a module-scoped cluster, and a later test's
    subprocess then ran on one BLAS thread while the in-process fit ran on two, whose last
    bits differ (a CI run of the fault-injection matrix saw a 'wrong' resume)."""
    import dask
    import numba

    from npkl_dist.linalg._blas import _blas_controller

    saved = dict(os.environ)
    # and the thread counts of numba and of BLAS: a benchmark's main() once left every BLAS
    # at one thread for the rest of the heavy session (bench/embed_table8.py)
    blas = [(lib, lib.get_num_threads()) for lib in _blas_controller().lib_controllers]
    numba_threads = numba.get_num_threads()
    # and numpy's floating-point error handling: importing active-semi-supervised-clustering
    # (the PCKMeans peer) runs np.seterr('raise') in its mpckmeans module, after which a later
    # test's harmless overflow in np.exp raised FloatingPointError
    import numpy as np

    errstate = np.geterr()
    yield
    if np.geterr() != errstate:
        np.seterr(**errstate)
    for lib, count in blas:
        if lib.get_num_threads() != count:
            lib.set_num_threads(count)
    if numba.get_num_threads() != numba_threads:
        numba.set_num_threads(numba_threads)
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
    for key in dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}:
        if key in _START_ENV:
            os.environ[key] = _START_ENV[key]
        else:
            os.environ.pop(key, None)
