"""Every fenced command and Python block of the README and docs/ runs as written.

Each page's blocks run in order in one fresh directory that stands in for the checkout
(``.venv`` is this environment; ``deploy/``, the ``Makefile`` and ``pyproject.toml`` are the
checkout's), with a fresh ``NPKL_HOME``, after docs/cli.md's first block has made its small
inputs (X.npy, y.npy, graph.csv, pairs.csv, NEW.npy). Blocks that start a Prefect server,
crash a run or download data sets run with ``-m heavy``; the two commands of the README
(``make demo``, ``make test``) are what CI itself runs. Every block of these pages is listed
in BLOCKS below, so a new one must be classified to pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_readme import ROOT, _shell_env, fenced_blocks

PAGES = [
    "README.md",
    "docs/cli.md",
    "docs/pipelines.md",
    "docs/algorithms.md",
    "docs/estimators.md",
]
RUNNABLE = {"bash", "sh", "python"}

#: (page, heading) -> how its blocks run: "default" (the default suite), "heavy", or why not
BLOCKS = {
    ("README.md", "Two commands"): "CI runs `make test` (this suite) and `make demo`",
    ("README.md", "Python quickstart"): "tests/test_readme.py",
    ("README.md", "Inductive kernel"): "tests/test_readme.py",
    ("README.md", "Command-line quickstart"): "tests/test_readme.py",
    ("README.md", "Pipeline"): "tests/test_readme.py (heavy)",
    ("docs/cli.md", "The `npkl` command"): "default",
    ("docs/cli.md", "`npkl fit`"): "default",
    ("docs/cli.md", "`npkl demo`"): "heavy",
    ("docs/cli.md", "`npkl run`"): "heavy",
    ("docs/cli.md", "`npkl status`"): "heavy",
    ("docs/cli.md", "`npkl resume`"): "heavy",
    ("docs/cli.md", "`npkl extend`"): "heavy",
    ("docs/cli.md", "`npkl export`"): "heavy",
    ("docs/cli.md", "`npkl transform`"): "heavy",
    ("docs/cli.md", "`npkl embed`"): "heavy",
    ("docs/cli.md", "`npkl active`"): "heavy",
    ("docs/cli.md", "`npkl ask`"): "heavy",
    ("docs/pipelines.md", "Run one"): "heavy",
    ("docs/pipelines.md", "Watch, crash and resume"): "heavy",
    ("docs/pipelines.md", "Runs that survive crashes"): "default",
    ("docs/pipelines.md", "Run on a cluster"): "heavy",
    ("docs/estimators.md", "Choosing γ inside a Pipeline"): "tests/estimators/test_docs_page.py",
    (
        "docs/estimators.md",
        "With metric-learn",
    ): "tests/estimators/test_docs_page.py (metric-learn's environment)",
    ("docs/estimators.md", "With npkl-dist"): "tests/estimators/test_docs_page.py",
}


def _blocks(page: str):
    return [
        (heading, body) for heading, lang, body in fenced_blocks(ROOT / page) if lang in RUNNABLE
    ]


def test_every_block_is_classified():
    found = {(page, heading) for page in PAGES for heading, _ in _blocks(page)}
    assert found == set(BLOCKS), (
        f"unclassified: {sorted(found - set(BLOCKS))}; gone: {sorted(set(BLOCKS) - found)}"
    )


def _workdir(tmp_path: Path) -> dict:
    """tmp_path as a checkout with this environment's .venv (test_readme's stand-in, plus
    the Makefile, pyproject.toml, bench/ and flows/); returns the environment."""
    env = _shell_env(tmp_path)
    for name in ("Makefile", "pyproject.toml", "bench", "flows"):
        (tmp_path / name).symlink_to(ROOT / name)
    env["NPKL_HOME"] = str(tmp_path / "home")
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # a fresh server database
    # as tests/conftest.py's servers: a page's own `prefect server start` would otherwise run
    # Prefect's telemetry heartbeat, whose SQLite writes can hit "database is locked" while
    # npkl's flows write (an ERROR traceback from Prefect's server, not from npkl)
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # `npkl`, `python`
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run(block: str, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    # a new session: what a block leaves running (`npkl run ... &`, a server) dies with it;
    # output to files, so that a process left running cannot hold the block open
    out, err = cwd / ".block-stdout", cwd / ".block-stderr"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=cwd,
            env=env,
            stdout=o,
            stderr=e,
            text=True,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, out.read_text(), err.read_text()
    )


def _run_page(page: str, tmp_path: Path, kinds: set[str]) -> list[str]:
    env = _workdir(tmp_path)
    setup = _blocks("docs/cli.md")[0][1]  # the small inputs every page's examples read
    done = []
    if page != "docs/cli.md":
        res = _run(setup, tmp_path, env, timeout=300)
        assert res.returncode == 0, res.stderr
    for heading, body in _blocks(page):
        if BLOCKS[(page, heading)] not in kinds:
            continue
        # `make install` and friends act on the checkout (this directory only stands in for
        # it: an editable install from here would point the environment here)
        make = f'make() {{ command make -C "{ROOT}" "$@"; }}\n'
        res = _run(make + body, tmp_path, env, timeout=900)
        assert res.returncode == 0, f"{page}, block under '{heading}':\n{body}\n{res.stderr}"
        assert "Traceback" not in res.stderr, res.stderr
        done.append(heading)
    return done


def test_cli_page_fit_examples_run(tmp_path):
    done = _run_page("docs/cli.md", tmp_path, {"default"})
    assert done == ["The `npkl` command", "`npkl fit`"]
    assert (tmp_path / "out" / "summary.json").is_file()


def test_pipelines_page_fit_examples_run(tmp_path):
    done = _run_page("docs/pipelines.md", tmp_path, {"default"})
    assert done == ["Runs that survive crashes"]
    for name in ("embedding.npy", "clusters.npy", "summary.json"):
        assert (tmp_path / "out" / name).is_file(), name
    assert (tmp_path / "home" / "runs" / "myrun-dask").is_dir()


@pytest.mark.heavy
@pytest.mark.parametrize("page", ["docs/cli.md", "docs/pipelines.md"])
def test_page_runs_whole(page, tmp_path):
    done = _run_page(page, tmp_path, {"default", "heavy"})
    assert done == [h for h, _ in _blocks(page)]


def test_configuration_reference_names_only_real_keys():
    """docs/pipelines.md's annotated configuration is TOML whose every key is one the
    pipeline validates (it lists alternatives side by side, so it is not one valid file)."""
    from npkl_flows._config import _TOP, SECTIONS

    (body,) = [b for h, lang, b in fenced_blocks(ROOT / "docs/pipelines.md") if lang == "toml"]
    doc = tomllib.loads(body)
    for key, value in doc.items():
        if isinstance(value, dict):
            assert key in SECTIONS, key
            assert not set(value) - set(SECTIONS[key]), (key, set(value) - set(SECTIONS[key]))
        else:
            assert key in _TOP, key
    assert set(SECTIONS) <= set(doc), set(SECTIONS) - set(doc)
