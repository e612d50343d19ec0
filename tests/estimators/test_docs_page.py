"""docs/estimators.md's blocks run as written: the GridSearchCV example, and the metric-learn
migration pair, whose metric-learn block runs in the separate environment `make test`
creates (bench/.venv-itml, metric-learn 0.7.0) and must give npkl-dist's distances."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, ".")
from test_readme import ROOT, fenced_blocks  # noqa: E402

from bench.paper import peers  # noqa: E402

PAGE = ROOT / "docs" / "estimators.md"


def block(heading: str) -> str:
    (code,) = [b for h, lang, b in fenced_blocks(PAGE) if h == heading and lang == "python"]
    return code


def run_here(heading, monkeypatch, tmp_path) -> dict:
    monkeypatch.chdir(tmp_path)
    scope = {"__name__": "__docs__"}
    exec(compile(block(heading), str(PAGE), "exec"), scope)
    return scope


def test_gridsearch_example_runs(monkeypatch, tmp_path, capsys):
    scope = run_here("Choosing γ inside a Pipeline", monkeypatch, tmp_path)
    assert scope["search"].best_params_["npkl__gamma"] in (0.1, 1.0, 10.0)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("gamma = ")


def test_metric_learn_and_npkl_blocks_give_the_same_distances(monkeypatch, tmp_path, capsys):
    py = peers.ITML_VENV / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no metric-learn environment at {peers.ITML_VENV} (make test creates it)")
    out = tmp_path / "itml.npz"
    code = block("With metric-learn") + (
        f"\nnp.savez({str(out)!r}, d=d, pairs=pairs, threshold=itml.threshold_)\n"
    )
    proc = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ITML: ")
    theirs = np.load(out)
    ours = run_here("With npkl-dist", monkeypatch, tmp_path)
    assert np.array_equal(ours["pairs"], theirs["pairs"])
    assert ours["ik"].model_.info["converged"]
    np.testing.assert_allclose(ours["d"], theirs["d"], rtol=1e-6, atol=1e-6)
    assert ours["ik"].threshold_ == pytest.approx(float(theirs["threshold"]), rel=1e-6)
    assert capsys.readouterr().out.startswith("InductiveKernel: ")
