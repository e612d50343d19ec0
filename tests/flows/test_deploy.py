"""deploy/ holds what can be checked without a cluster: checked here.

* the manifests parse, and name the image deploy/Dockerfile builds and commands that exist
  (their options are accepted by the installed `dask` / `prefect`);
* the dask-jobqueue SLURM configuration generates the job script we expect;
* (heavy) the Prefect deployments register with a real `prefect server` and a process worker
  runs one to completion.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import venv_bin

yaml = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _image_tag():
    m = re.search(
        r"docker build -f deploy/Dockerfile -t (\S+) \.", (DEPLOY / "Dockerfile").read_text()
    )
    assert m, "the Dockerfile documents its build command and tag"
    return m.group(1)


def test_dockerfile_base_installs_the_extras():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    m = re.search(r'pip install "\.\[(\w+)\]"', text)
    assert m and m.group(1) in extras
    for path in re.findall(r"^COPY (\S+) ", text, re.M):
        assert (ROOT / path).exists(), path
    assert "npkl-worker" in _image_tag()


def _help(*cmd):
    p = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_daskcluster_manifest_names_image_and_real_commands():
    doc = yaml.safe_load((DEPLOY / "kubernetes" / "daskcluster.yaml").read_text())
    assert doc["apiVersion"] == "kubernetes.dask.org/v1" and doc["kind"] == "DaskCluster"
    name = doc["metadata"]["name"]
    w = doc["spec"]["worker"]["spec"]["containers"][0]
    s = doc["spec"]["scheduler"]["spec"]["containers"][0]
    assert w["image"] == s["image"] == _image_tag()
    assert doc["spec"]["worker"]["replicas"] >= 1
    assert doc["spec"]["scheduler"]["service"]["selector"]["dask.org/cluster-name"] == name
    for c, sub in ((w, "worker"), (s, "scheduler")):
        assert c["args"][:2] == ["dask", sub]
        text = _help(venv_bin("dask"), sub)
        for opt in (a for a in c["args"] if a.startswith("--")):
            assert opt in text, f"dask {sub} has no option {opt}"
    ports = {p["name"]: p["containerPort"] for p in s["ports"]}
    assert ports["tcp-comm"] == 8786 and "8786" in s["args"]


def test_prefect_yaml_entrypoints_parameters_and_pool():
    from npkl_flows._config import load_config

    doc = yaml.safe_load((DEPLOY / "prefect.yaml").read_text())
    assert doc["prefect-version"].startswith("3.")
    names = set()
    for d in doc["deployments"]:
        names.add(d["name"])
        path, func = d["entrypoint"].split(":")
        assert (ROOT / path).is_file()
        import importlib

        mod = importlib.import_module(path[:-3].replace("/", "."))
        assert getattr(mod, func).name == "npkl-pipeline"
        load_config(ROOT / d["parameters"]["config"])  # the configs validate
        # a deployment is named after the configuration it runs (issue 75)
        assert Path(d["parameters"]["config"]).stem == d["name"], d
        assert d["work_pool"]["name"] == "npkl-process"
    assert names == {"digits", "nightly"}
    nightly = next(d for d in doc["deployments"] if d["name"] == "nightly")
    assert nightly["schedules"][0]["cron"] == "0 2 * * *"
    assert "{date}" in load_config(ROOT / "deploy/configs/nightly.toml")["run"]
    _help(venv_bin("prefect"), "worker", "start")


def test_slurm_job_script_from_jobqueue_config():
    pytest.importorskip("dask_jobqueue")
    import dask
    from dask_jobqueue import SLURMCluster

    conf = yaml.safe_load((DEPLOY / "jobqueue.yaml").read_text())
    # merged over dask-jobqueue's defaults, as Dask does with a file in its config directory
    with dask.config.set({f"jobqueue.slurm.{k}": v for k, v in conf["jobqueue"]["slurm"].items()}):
        cluster = SLURMCluster(scheduler_options={"host": "127.0.0.1"})
        try:
            script = cluster.job_script()
        finally:
            cluster.close()
    lines = script.splitlines()
    assert lines[0].startswith("#!/")
    for directive in (
        "#SBATCH -J npkl-worker",
        "#SBATCH -p compute",
        "#SBATCH -n 1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH -t 04:00:00",
        "#SBATCH --exclusive",
    ):
        assert directive in lines, (directive, script)
    assert any(ln.startswith("#SBATCH --mem=") for ln in lines)
    assert "source ${NPKL_VENV:-$HOME/npkl-venv}/bin/activate" in lines
    assert any("OMP_NUM_THREADS=1" in ln for ln in lines)
    cmd = lines[-1]
    assert "distributed.cli.dask_worker" in cmd and "--nthreads 8" in cmd
    assert "--death-timeout 120" in cmd and "--local-directory /tmp" in cmd


def _post(api, path, body):
    req = urllib.request.Request(
        f"{api}/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.heavy
def test_deployments_register_and_a_process_worker_runs_one(tmp_path, prefect_server):
    # this checkout first, then the caller's path (a worktree's import shims)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, **prefect_server, "PYTHONPATH": path, "NPKL_HOME": str(ROOT)}
    prefect = venv_bin("prefect")

    def run(*args, timeout=300):
        p = subprocess.run(
            [prefect, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert p.returncode == 0, (args, p.stdout[-2000:], p.stderr[-2000:])
        return p.stdout

    run("work-pool", "create", "npkl-process", "--type", "process")
    out = run("--no-prompt", "deploy", "--all", "--prefect-file", "deploy/prefect.yaml")
    assert "npkl-pipeline/digits" in out and "npkl-pipeline/nightly" in out
    cfg = tmp_path / "smoke.toml"
    cfg.write_text(
        f'run = "{tmp_path / "run"}"\n[input]\ndataset = "iris"\n[model]\n'
        f'max_sweeps = 5\n[output]\nout = "{tmp_path / "out"}"\nplots = false\n'
    )
    out = run(
        "deployment",
        "run",
        "npkl-pipeline/digits",
        "--param",
        f"config={cfg}",
        "--param",
        f"run={tmp_path / 'run'}",
    )
    worker = subprocess.run(
        [prefect, "worker", "start", "--pool", "npkl-process", "--run-once"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    api = prefect_server["PREFECT_API_URL"]
    deadline = time.time() + 120
    while True:
        req = urllib.request.Request(
            f"{api}/flow_runs/filter", data=b"{}", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            runs = json.loads(r.read())
        # only runs of the deployments (the server is shared with the end-to-end test)
        states = [r["state_type"] for r in runs if r.get("deployment_id")]
        if states and all(s in ("COMPLETED", "FAILED", "CRASHED") for s in states):
            break
        assert time.time() < deadline, (states, worker.stdout[-2000:], worker.stderr[-2000:])
        time.sleep(1)
    assert states == ["COMPLETED"], (worker.stdout[-3000:], worker.stderr[-3000:])
    (flow_run,) = [r for r in runs if r.get("deployment_id")]
    assert flow_run["name"] == "run"  # named after the run id, not "voracious-wildebeest"
    arts = _post(
        api, "artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}}
    )
    by_type = {}
    for a in arts:
        by_type.setdefault(a["type"], []).append(a)
    (md,) = by_type["markdown"]
    assert md["key"] == "npkl-run"
    text = md["data"]
    assert text.startswith("# npkl run `run`")
    assert f"| run store | `{tmp_path / 'run'}` |" in text
    assert f"| report | `{tmp_path / 'out'}` |" in text
    assert "| iterations | 5 sweeps (not converged) |" in text
    assert re.search(r"\| objective \| [0-9.e+-]+ \|", text)
    assert re.search(r"\| pairwise accuracy \| 0\.\d{4} \|", text)
    for stage in ("ingest", "graph", "plan", "learn", "transform", "evaluate", "extend", "report"):
        assert re.search(rf"^\| {stage} \| \d+\.\d \| \d+ \|", text, re.M), stage
    # the learning progress artifact ends at 100 %
    (prog,) = [a for a in by_type["progress"] if a["key"] == "npkl-run-learn"]
    assert prog["data"] == 100.0 and prog["description"].startswith("learning finished")
    # the log says what happened, not only "Completed()"
    logs = _post(api, "logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run["id"]]}}})
    messages = "\n".join(lg["message"] for lg in logs)
    assert "learn: " in messages and "objective" in messages and "report in " in messages
    from npkl_dist import store as st

    with st.RunStore.open(str(tmp_path / "run")) as rs:
        res = rs.read_results()
    assert res["embedding"].shape[0] == 150 and res["summary"]["n_sweeps"] == 5
    assert (tmp_path / "out" / "summary.json").is_file()
