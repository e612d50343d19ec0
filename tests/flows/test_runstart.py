"""The start of `npkl run` before Prefect (npkl_flows._runstart): when the early temporary
server is started, and that Prefect's own settings win over it. The server itself, the run
and `npkl status` during the start are exercised in
tests/flows/test_pipeline.py::test_run_and_resume_through_prefect."""

from __future__ import annotations

import subprocess
import sys

import pytest

from npkl_flows import _runstart


@pytest.mark.parametrize(
    "env",
    [
        {"PREFECT_API_URL": "http://127.0.0.1:4200/api"},
        {"NPKL_PREFECT_EARLY_SERVER": "0"},
        {"PREFECT_SERVER_EPHEMERAL_ENABLED": "false"},
    ],
)
def test_no_early_server_when_prefect_is_told_otherwise(monkeypatch, env):
    popen = []
    monkeypatch.setattr(_runstart.subprocess, "Popen", lambda *a, **k: popen.append(a))
    for key in (
        "PREFECT_API_URL",
        "NPKL_PREFECT_EARLY_SERVER",
        "PREFECT_SERVER_EPHEMERAL_ENABLED",
    ):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert _runstart.start_local_api() is None
    assert popen == []


def test_a_configured_api_url_wins_and_the_early_server_stops():
    pytest.importorskip("prefect")
    from prefect.settings import PREFECT_API_URL, temporary_settings

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    api = _runstart.LocalAPI(proc, 1)
    try:
        with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
            with _runstart.use_local_api(api, timeout=1) as used:
                assert used is None
                assert PREFECT_API_URL.value() == "http://127.0.0.1:9/api"
        assert proc.poll() is not None  # stopped, unused
    finally:
        api.stop()


def test_a_server_that_dies_is_named_with_the_fix():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(_runstart.LocalAPIError, match=r"exited with status 3.*PREFECT_API_URL"):
        _runstart.LocalAPI(proc, 1).wait(timeout=5)
