"""bench/auto_real.py (sweeps vs block solves on real data): its measurements agree with
the fits' own traces, its JSON says what it measured, and bad options are refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from npkl_dist import NPKLProblem, fit_bcd, knn_graph, sample_constraints
from npkl_dist.executors import InProcessExecutor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench import auto_real  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist._errors.ConvergenceWarning")


def _problem():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 60)
    X = rng.standard_normal((y.size, 4)) + 2.5 * y[:, None]
    L = knn_graph(X, 5, seed=0, warn=False).laplacian(1e-3)
    return NPKLProblem.build(L, sample_constraints(y, seed=0), loss="square", rank=6, seed=0)


def test_measure_agrees_with_the_fits():
    P = _problem()
    ex = InProcessExecutor(n_threads=1)
    gaps = [1e-3, 1e-5]
    out = auto_real.measure(P, ex, gaps, runs=2, max_iters=3000, ref_iters=2000, max_default=3000)
    f_star = out["f_star"]
    for m in auto_real.METHODS:
        res = fit_bcd(P, method=m, max_sweeps=3000, tol=0.0, executor=ex)
        trace = np.asarray(res.objective_trace)
        assert trace.min() >= f_star - 1e-9 * abs(f_star)
        for g in gaps:
            k = out[(m, g, "iters")]
            assert k is not None, (m, g)
            # the first iterate within the gap, and the one before it not (same iterates:
            # the fits are deterministic)
            assert (trace[k - 1] - f_star) / abs(f_star) <= g
            assert k == 1 or (trace[k - 2] - f_star) / abs(f_star) > g
            # the objective evaluations cost time: the traced time is the larger
            assert 0 < out[(m, g, "t_steps")] <= out[(m, g, "t")]
        # a smaller gap takes at least as long
        assert out[(m, 1e-5, "iters")] >= out[(m, 1e-3, "iters")]
        d = out[(m, "default")]
        res = fit_bcd(P, method=m, max_sweeps=3000, tol=1e-5, trace=False, executor=ex)
        assert d["iters"] == res.n_sweeps and d["converged"] == res.converged
        assert d["gap"] == pytest.approx((res.objective - f_star) / abs(f_star), abs=1e-12)


def test_table_reports_the_measurements(tmp_path, monkeypatch, capsys):
    P = _problem()
    monkeypatch.setattr(auto_real, "inputs", lambda name: (P.L, P.constraints))
    out = tmp_path / "r.json"
    assert (
        auto_real.main(
            [
                "--datasets",
                "iris",
                "--gaps",
                "1e-3",
                "--runs",
                "1",
                "--max-iters",
                "2000",
                "--max-default",
                "2000",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    got = json.loads(out.read_text())
    assert got["benchmark"] == "auto_real" and got["machine"] and "commit" in got
    assert "--json" in got["command"]
    rows = got["rows"]
    assert [(r["name"], r["n"], r["gap"]) for r in rows] == [
        ("iris", 180, "0.001"),
        ("iris", 180, "default stop"),
    ]
    # the untraced fit with the default stopping rule, both methods, with the gap it stops at
    default = rows[1]
    for m in auto_real.METHODS:
        assert default[f"{m}_iters"] > 0 and default[f"{m}_s"] > 0
        assert isinstance(default[f"{m}_converged"], bool)
        assert default[f"{m}_gap_at_stop"] >= -1e-12
    keys = [c[0] for c in got["columns"]]
    assert all(k in rows[0] for k in keys)


@pytest.mark.parametrize(
    "argv, name",
    [
        (["--runs", "0"], "--runs"),
        (["--gaps", "2"], "--gaps"),
        (["--max-default", "0"], "--max-default"),
        (["--datasets", "digits", "nope"], "'nope'"),
    ],
)
def test_bad_options_name_the_option(argv, name, capsys):
    with pytest.raises(SystemExit):
        auto_real.main(argv)
    assert name in capsys.readouterr().err
