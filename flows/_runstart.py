"""The start of ``npkl run`` before Prefect: the run store exists, and Prefect's temporary API
server boots, while Prefect itself is still being imported.

Creating the store first makes ``npkl status RUN`` find the run from the moment the command
starts (stage ``starting``, the writer's pid). Without ``PREFECT_API_URL`` Prefect would
import its server code in this process and then start the same server in a subprocess, one
after the other, before the first task; :func:`start_local_api` starts that subprocess
first, with Prefect's own command line and settings, so the boot overlaps this process's
imports and the store's creation (docs/decisions/pipeline-orchestration.md, "Start-up").
Nothing here imports Prefect.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

from npkl_dist import store as st
from npkl_dist._errors import NpklError
from npkl_dist.job._job import config_dict
from npkl_flows._config import fit_config

__all__ = ["open_run", "check_new_run", "start_local_api", "use_local_api", "LocalAPI"]


def open_run(cfg: dict, resume: bool):
    """The run store of a pipeline, created (a new run) or opened for writing (resume).

    Returns ``(store, cfg)``; on resume ``cfg`` is the run's stored configuration.
    """

    url = st.resolve_run(cfg["run"], root=cfg["storage"]["root"])
    so = cfg["storage"]["options"]
    if resume:
        store = st.RunStore.open(url, mode="a", storage_options=so)
        return store, store.config.get("pipeline") or cfg

    check_new_run(cfg)
    store = st.RunStore.create(
        url,
        config={
            "pipeline": cfg,
            "fit": config_dict(fit_config(cfg)),
            "run": dict(cfg["execution"]),
        },
        storage_options=so,
    )
    return store, cfg


def check_new_run(cfg: dict) -> None:
    """Refuse a new run where one exists, naming `npkl resume` and `npkl status`."""

    if "{" in cfg["run"]:
        return  # expanded to a new name when the flow starts
    url = st.resolve_run(cfg["run"], root=cfg["storage"]["root"])
    try:
        with st.RunStore.open(url, mode="r", storage_options=cfg["storage"]["options"]):
            exists = True
    except st.StoreError:
        exists = False
    if exists:
        raise st.StoreError(
            f"run: {cfg['run']!r} already exists at {url}; continue it with `npkl resume "
            f"{cfg['run']}` (a deployment: resume=true), look at it with `npkl status "
            f'{cfg["run"]}`, or choose another run id (run = "name-{{date}}" makes a new one '
            f"each time)"
        )


class LocalAPIError(NpklError, RuntimeError):
    """Prefect's temporary API server did not start."""


class LocalAPI:
    """A temporary Prefect API server in a subprocess (what Prefect's ephemeral mode runs).

    ``url`` is its API URL; :meth:`wait` blocks until it answers; :meth:`stop` ends it (also
    at interpreter exit, as Prefect does for its own).
    """

    def __init__(self, proc: subprocess.Popen, port: int):
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}/api"
        atexit.register(self.stop)

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LocalAPIError(
                    f"Prefect's temporary API server exited with status {self.proc.returncode} "
                    f"before answering; run `prefect server start` and set PREFECT_API_URL, or "
                    f"look at PREFECT_HOME ({os.environ.get('PREFECT_HOME', '~/.prefect')})"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise LocalAPIError(
            f"Prefect's temporary API server did not answer within {timeout:.0f} s; set "
            f"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS higher, or run `prefect server "
            f"start` and set PREFECT_API_URL"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_STARTED: LocalAPI | None = None


def _die_with_parent() -> None:
    """In the server's process before exec (Linux): SIGTERM when the process that started it
    dies, however it dies (prctl PR_SET_PDEATHSIG)."""
    import ctypes  # lazy: Linux only, in the child

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except OSError:  # pragma: no cover - not glibc: atexit still stops it on a normal exit
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local_api() -> LocalAPI | None:
    """Start Prefect's temporary API server now, without waiting for it; None when
    ``PREFECT_API_URL`` or ``PREFECT_SERVER_EPHEMERAL_ENABLED=false`` is in the environment,
    or ``NPKL_PREFECT_EARLY_SERVER=0`` (then Prefect behaves as it always does). The caller
    checks Prefect's other setting sources once Prefect is imported (:func:`use_local_api`).

    The command line and environment are those of
    ``prefect.server.api.server.SubprocessASGIServer._run_uvicorn_command`` (prefect 3.8): the
    ASGI app factory under uvicorn, UI off, the ephemeral-server settings.
    """

    if os.environ.get("PREFECT_API_URL"):
        return None
    if os.environ.get("NPKL_PREFECT_EARLY_SERVER", "1") == "0":
        return None  # leave it to Prefect (one after the other, as before; the benchmark)
    if os.environ.get("PREFECT_SERVER_EPHEMERAL_ENABLED", "true").lower() in ("0", "false"):
        return None
    global _STARTED
    if _STARTED is not None and _STARTED.proc.poll() is None:
        return _STARTED  # one per process, as Prefect's own (several runs from Python)
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "prefect.server.api.server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ],
        env={
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
        },
        # a `npkl run` killed with SIGKILL (no atexit) must not leave the server running
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    _STARTED = LocalAPI(proc, port)
    return _STARTED


@contextlib.contextmanager
def use_local_api(api: LocalAPI | None, timeout: float):
    """Run Prefect against ``api`` inside the block, once it answers; with no ``api``, or
    when Prefect's settings (a profile, ``prefect.toml``, a test harness) name an API URL,
    Prefect's own choice stands and ``api`` is stopped. Imports Prefect."""

    from prefect.settings import PREFECT_API_URL, temporary_settings  # optional engine

    if api is not None and PREFECT_API_URL.value():
        api.stop()
        api = None
    if api is None:
        yield None
        return
    api.wait(timeout)
    with temporary_settings(updates={PREFECT_API_URL: api.url}):
        yield api
