"""`npkl run`'s start-up without PREFECT_API_URL: seconds from the command's start to its
first stage, and what Prefect alone costs (the floor).

    python bench/bench_startup.py --runs 3

Each run is a fresh `npkl run` process on a tiny configuration (iris, one sweep, no report
files) in a new run store, with one warm ``PREFECT_HOME`` (created by an untimed first run,
so no run pays the database's creation). Modes, alternated run by run:

- ``prefect``: ``NPKL_PREFECT_EARLY_SERVER=0``, Prefect starts its temporary server itself
  when the flow starts (imports the server code in the command's process, then starts the
  server in a subprocess; the behaviour before issue 75);
- ``early`` (the default): the command starts that server first and creates the run store
  while Prefect is imported (``npkl_flows._runstart``);
- ``running server``: ``PREFECT_API_URL`` set to a server that is already up (the floor of a
  Prefect flow: the Prefect import and the flow machinery, no server start).

Also measured in the same session: ``import prefect`` alone and the temporary server's boot
alone (process start to its health check answering), each in a fresh process.

"to first stage" = the ingest stage's completion stamp in the run store (the stage itself
takes ~0.2 s here) minus the moment the process was started; "total" = the process's wall
time. Stamped JSON in ``bench/results/startup.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _results  # noqa: E402

PY = sys.executable


def _env(home, **extra):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="WARNING",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **extra,
    )
    return env


def _run_once(tmp: Path, k: int, env) -> dict:
    from npkl_dist import store as st

    run = tmp / f"run{k}"
    cfg = tmp / f"c{k}.toml"
    cfg.write_text(
        f'run = "{run}"\n[input]\ndataset = "iris"\n[model]\nmax_sweeps = 1\n'
        f"[output]\nfiles = false\n"
    )
    t0 = dt.datetime.now(dt.UTC)
    w0 = time.perf_counter()
    p = subprocess.run(
        [PY, "-m", "npkl_flows.cli", "run", str(cfg), "--quiet"],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    total = time.perf_counter() - w0
    if p.returncode != 0:
        raise SystemExit(f"npkl run failed:\n{p.stderr[-3000:]}")
    with st.RunStore.open(str(run)) as rs:
        at = dt.datetime.fromisoformat(rs.stages()["ingest"]["at"])
    return {"first_stage_s": (at - t0).total_seconds(), "total_s": total}


def _timed(code: str, env) -> float:
    w0 = time.perf_counter()
    subprocess.run([PY, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - w0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(env):
    """Prefect's temporary server, as npkl_flows._runstart starts it; (process, url, boot s)."""
    port = _free_port()
    w0 = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app"]
        + ["--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"],
        env={**env, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1"},
    )
    url = f"http://127.0.0.1:{port}/api"
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, url, time.perf_counter() - w0
        except OSError:
            time.sleep(0.05)
        if time.perf_counter() - w0 > 300:
            proc.kill()
            raise SystemExit("the Prefect server did not start in 300 s")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--json", default=None, help="output path (default bench/results/startup.json)"
    )
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="npkl-startup-") as d:
        tmp = Path(d)
        home = tmp / "prefect-home"
        base = _env(home)
        _run_once(tmp, 0, base)  # untimed: creates PREFECT_HOME's database, warms caches
        times: dict[str, list] = {"prefect": [], "early": [], "running server": []}
        imports, boots = [], []
        k = 1
        for _ in range(args.runs):
            times["prefect"].append(_run_once(tmp, k, {**base, "NPKL_PREFECT_EARLY_SERVER": "0"}))
            times["early"].append(_run_once(tmp, k + 1, base))
            proc, url, boot = _start_server(base)
            boots.append(boot)
            try:
                times["running server"].append(
                    _run_once(tmp, k + 2, {**base, "PREFECT_API_URL": url})
                )
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            imports.append(_timed("import prefect", base))
            k += 3

    def med(xs):
        return round(statistics.median(xs), 2)

    what = {
        "prefect": "Prefect starts its temporary server in the flow (before issue 75)",
        "early": "the temporary server started first, overlapping imports (default)",
        "running server": "PREFECT_API_URL: a server already up (the floor with Prefect)",
    }
    rows = [
        {
            "mode": mode,
            "what": what[mode],
            "first_stage_s": med([r["first_stage_s"] for r in rs]),
            "total_s": med([r["total_s"] for r in rs]),
            "first_stage_all": [round(r["first_stage_s"], 2) for r in rs],
        }
        for mode, rs in times.items()
    ]
    notes = [
        f"`import prefect` alone: {med(imports)} s; the temporary server's boot alone "
        f"(process start to health answering): {med(boots)} s (medians of {args.runs}).",
        "Without an API URL the floor is the server's boot: `npkl run` now waits for it while "
        "it imports Prefect and creates the run store, instead of after.",
    ]
    for r in rows:
        print(r)
    print(notes[0])
    path = _results.write(
        "startup",
        title="`npkl run` start-up without PREFECT_API_URL (iris, one sweep)",
        measures="seconds from the command's start to its first stage (ingest done), and total",
        reference="the same command with Prefect starting its own temporary server (before), "
        "and against an already running server (the floor)",
        command=_results.command("bench/bench_startup.py", argv),
        columns=[
            ("mode", "mode"),
            ("what", "what"),
            ("first_stage_s", "to first stage (s)"),
            ("total_s", "total (s)"),
        ],
        rows=rows,
        notes=notes,
        args=vars(args),
        path=args.json,
        extra={"import_prefect_s": imports, "server_boot_s": boots},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
