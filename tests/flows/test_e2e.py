"""End to end with real processes (heavy; runs in `make test-heavy`, which CI runs).

A `prefect server` on SQLite, a `dask scheduler` and two `dask worker` processes on loopback,
and moto's S3 server for the run store. The pipeline is launched from the command line on
scikit-learn's digits; one Dask worker is SIGKILLed during learning (the learn stage recovers
from its newest checkpoint on the remaining worker), then the flow's process is SIGKILLed;
`npkl resume` finishes the run, and its labels and V are identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import numpy as np
import pytest
from conftest import free_port, venv_bin

pytest.importorskip("prefect")
pytest.importorskip("zarr")
pytest.importorskip("distributed")

pytestmark = pytest.mark.heavy
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = """\
run = "{run}"

[input]
dataset = "digits"

[graph]
knn = 5

[model]
max_sweeps = {sweeps}
tol = 0.0
seed = 11

[execution]
executor = "{executor}"
{dask}checkpoint_every = 3

[output]
out = "{out}"
plots = false
{storage}"""


def _path():
    """This checkout first, then the caller's path (a worktree's import shims)."""
    return os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    from distributed import Client

    logs = tmp_path_factory.mktemp("dask")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": _path(), "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    procs = {
        "scheduler": subprocess.Popen(
            [
                venv_bin("dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            env=env,
            stdout=open(logs / "scheduler.log", "w"),
            stderr=subprocess.STDOUT,
        )
    }
    time.sleep(1.0)
    for i in range(2):
        procs[f"w{i}"] = subprocess.Popen(
            [
                venv_bin("dask"),
                "worker",
                address,
                "--nthreads",
                "1",
                "--no-dashboard",
                "--name",
                f"w{i}",
                "--no-nanny",
                "--death-timeout",
                "60",
            ],
            env=env,
            stdout=open(logs / f"w{i}.log", "w"),
            stderr=subprocess.STDOUT,
        )
    with Client(address, timeout=60) as c:
        c.wait_for_workers(2, timeout=120)
    yield address, procs
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    for p in procs.values():
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def _npkl(args, env, **kw):
    return subprocess.run(
        [sys.executable, "-m", "npkl_flows.cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        **kw,
    )


def _sweep(url, so):
    from npkl_dist import store as st

    try:
        with st.RunStore.open(url, mode="r", storage_options=so) as rs:
            ptr = rs._read_pointer()
            if not ptr.get("committed"):
                return 0
            return int(ptr["committed"][0].split("-")[1])
    except Exception:
        return 0


def _actor_worker(address):
    """Name of a worker that holds one of the learn stage's actors (its V blocks)."""
    from distributed import Client

    with Client(address, timeout=30) as c:
        held = c.run_on_scheduler(
            lambda dask_scheduler: sorted(
                ws.name for ws in dask_scheduler.workers.values() if ws.actors
            )
        )
    assert held, "no worker holds a learn actor"
    return held[0]


def _flow_runs(api):
    req = urllib.request.Request(
        f"{api}/flow_runs/filter", data=b"{}", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_pipeline_survives_worker_and_driver_kills(
    tmp_path, prefect_server, dask_cluster, s3_endpoint
):
    from npkl_dist import store as st

    address, procs = dask_cluster
    env = {**os.environ, **prefect_server, "PYTHONPATH": _path(), "NUMBA_NUM_THREADS": "1"}
    so = {"endpoint_url": s3_endpoint}
    sweeps = 180

    # the uninterrupted reference: in-process, local store (bitwise equal to Dask by design)
    ref_cfg = tmp_path / "ref.toml"
    ref_cfg.write_text(
        CONFIG.format(
            run=tmp_path / "ref-run",
            sweeps=sweeps,
            executor="inprocess",
            dask="",
            out=tmp_path / "ref-out",
            storage="",
        )
    )
    p = _npkl(["run", ref_cfg, "--quiet"], env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]

    url = f"s3://npkl-test/runs/e2e-{uuid.uuid4().hex[:8]}"
    cfg = tmp_path / "e2e.toml"
    cfg.write_text(
        CONFIG.format(
            run=url,
            sweeps=sweeps,
            executor="dask",
            dask=f'dask = "{address}"\n',
            out=tmp_path / "e2e-out",
            storage=f'\n[storage]\noptions = {{ endpoint_url = "{s3_endpoint}" }}\n',
        )
    )
    flow = subprocess.Popen(
        [sys.executable, "-m", "npkl_flows.cli", "run", str(cfg), "--quiet"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 600
        while _sweep(url, so) < 16:
            assert flow.poll() is None, flow.communicate()[1][-3000:]
            assert time.time() < deadline, "learning did not reach sweep 16"
            time.sleep(0.2)
        # the Dask worker holding the learning block dies (the workers register in either
        # order, so which one that is varies from run to run)
        procs[_actor_worker(address)].send_signal(signal.SIGKILL)
        at_kill = _sweep(url, so)
        while _sweep(url, so) < at_kill + 12:  # recovered on the other worker, going on
            assert flow.poll() is None, flow.communicate()[1][-3000:]
            assert time.time() < deadline, "learning did not continue after the worker died"
            time.sleep(0.2)
        flow.send_signal(signal.SIGKILL)  # then the flow's own process
        _, err = flow.communicate(timeout=60)
    finally:
        if flow.poll() is None:
            flow.kill()
    assert "a worker was lost" in err, err[-3000:]
    killed_at = _sweep(url, so)
    assert killed_at < sweeps, "the run finished before the driver was killed"

    # status works on the dead run and says where it stopped
    p = _npkl(["status", url, "--json", "--storage-options", json.dumps(so)], env, timeout=120)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["stage"] == "learn" and s["sweep"] == killed_at
    assert s["writer"]["alive"] is False

    runs_before = _flow_runs(prefect_server["PREFECT_API_URL"])
    stale = [r for r in runs_before if r["state_type"] == "RUNNING"]
    assert len(stale) == 1  # the killed flow run, still RUNNING in the API
    with st.RunStore.open(url, mode="r", storage_options=so) as rs:
        assert stale[0]["id"] in rs.stages()["flow"]["info"]["flow_runs"]

    p = _npkl(["resume", url, "--json", "--storage-options", json.dumps(so)], env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout)
    assert res["stages"]["ingest"]["skipped"] and res["stages"]["graph"]["skipped"]
    assert res["stages"]["learn"]["resumed_from"] == killed_at
    assert res["stages"]["learn"]["n_sweeps"] == sweeps

    with (
        st.RunStore.open(url, mode="r", storage_options=so) as a,
        st.RunStore.open(str(tmp_path / "ref-run"), mode="r") as b,
    ):
        got, ref = a.read_results(), b.read_results()
    assert np.array_equal(got["embedding"], ref["embedding"])
    assert np.array_equal(got["clusters"], ref["clusters"])
    assert got["summary"]["metrics"] == ref["summary"]["metrics"]

    after = {r["id"]: r for r in _flow_runs(prefect_server["PREFECT_API_URL"])}
    assert after[stale[0]["id"]]["state_type"] == "CRASHED"  # marked by the resume
    assert after[res["flow_run"]]["state_type"] == "COMPLETED"
