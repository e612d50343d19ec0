"""Issue 6's convergence figure (bench/block_figure.py): the curves' time accounting equals
the benchmark's time to the gap, and the figure is drawn from real fits' traces."""

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
from bench import bench_block, block_figure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::npkl_dist._errors.ConvergenceWarning")


def _fits():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 60)
    X = rng.standard_normal((y.size, 4)) + 2.5 * y[:, None]
    L = knn_graph(X, 5, seed=0, warn=False).laplacian(1e-3)
    P = NPKLProblem.build(L, sample_constraints(y, seed=0), loss="square", rank=6, seed=0)
    ex = InProcessExecutor(n_threads=1)
    blk = fit_bcd(P, method="block", max_sweeps=60, tol=0, executor=ex)
    swp = fit_bcd(P, method="sweeps", max_sweeps=60, tol=0, executor=ex)
    return blk, swp


def test_curve_is_the_benchmarks_time_accounting():
    blk, swp = _fits()
    for res in (blk, swp):
        c = block_figure.curve(res)
        t, f = np.asarray(c["t"]), np.asarray(c["f"])
        assert len(t) == len(f) == res.n_sweeps
        assert c["setup"] == res.setup_seconds and t[0] > res.setup_seconds
        assert np.all(np.diff(t) > 0)
        # the last point's time is the set-up plus every sweep's and objective's time
        assert t[-1] == pytest.approx(
            res.setup_seconds + sum(res.sweep_seconds) + sum(res.objective_seconds), rel=1e-12
        )
        # without the objective evaluations: the set-up plus every sweep's time
        ts = np.asarray(c["t_steps"])
        assert len(ts) == len(t) and np.all(ts <= t) and np.all(np.diff(ts) > 0)
        assert ts[-1] == pytest.approx(res.setup_seconds + sum(res.sweep_seconds), rel=1e-12)
        f_star = min(f) - 1e-9 * abs(min(f))
        for gap in (1e-1, 1e-3):
            k = np.flatnonzero((f - f_star) / abs(f_star) <= gap)
            assert bench_block.time_to_gap(res, f_star, gap) == (t[k[0]] if k.size else None)
            assert bench_block.time_to_gap(res, f_star, gap, steps_only=True) == (
                ts[k[0]] if k.size else None
            )


def test_curve_refuses_an_untraced_fit():
    blk, _ = _fits()
    blk.objective_trace = blk.objective_trace[:1]
    with pytest.raises(ValueError, match="res: .*trace=True"):
        block_figure.curve(blk)


def test_figure_from_real_traces(tmp_path):
    blk, swp = _fits()
    f_star = min(min(blk.objective_trace), min(swp.objective_trace))
    case = {
        "n": 180,
        "frac": "protocol",
        "loss": "square",
        "f_star": f_star,
        "t_sweep": float(np.median(swp.sweep_seconds)),
        "block": block_figure.curve(blk),
        "sweeps": block_figure.curve(swp),
    }
    traces = tmp_path / "c.json"
    traces.write_text(json.dumps({"cases": [case, dict(case, frac="0.01")]}))
    out = tmp_path / "c.png"
    block_figure.main([str(traces), "--out", str(out)])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    g = block_figure.gap_series(case["block"]["f"] + case["sweeps"]["f"], f_star)
    assert g.min() == 1e-12 and np.all(g > 0)  # f = f* is drawn, not dropped by the log
    assert block_figure.case_label(dict(case, frac="0.01")) == "n = 180, 1.0% constrained, square"


@pytest.mark.parametrize("n_cases", [1, 2, 3])
def test_figure_holds_its_title_and_legend(n_cases):
    """The suptitle and the figure legend lie inside the figure (a one-case figure once cut
    both off at its sides)."""
    import matplotlib.pyplot as plt

    blk, swp = _fits()
    f_star = min(min(blk.objective_trace), min(swp.objective_trace))
    case = {
        "n": 180,
        "frac": "0.01",
        "loss": "square",
        "f_star": f_star,
        "t_sweep": float(np.median(swp.sweep_seconds)),
        "block": block_figure.curve(blk),
        "sweeps": block_figure.curve(swp),
    }
    fig = block_figure.draw([case] * n_cases)
    try:
        fig.canvas.draw()
        box = fig.bbox
        for artist in (fig.legends[0], fig._suptitle):
            ext = artist.get_window_extent()
            assert box.x0 <= ext.x0 and ext.x1 <= box.x1, (artist, ext, box)
            assert box.y0 <= ext.y0 and ext.y1 <= box.y1, (artist, ext, box)
        for ax in fig.axes[:n_cases]:  # the panels clear the legend below them
            assert ax.get_tightbbox().y0 >= fig.legends[0].get_window_extent().y1
    finally:
        plt.close(fig)


def test_figure_without_cases_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="cases: expected at least one"):
        block_figure.figure([], tmp_path / "x.png")


def test_figure_option_names_the_argument(capsys, tmp_path):
    with pytest.raises(SystemExit):  # before any benchmark work
        bench_block.main(
            [
                "--n",
                "100",
                "--json",
                str(tmp_path / "r.json"),
                "--figure",
                str(tmp_path / "curves.jpg"),
            ]
        )
    err = capsys.readouterr().err
    assert "--figure: expected a path ending in .png" in err and "curves.jpg" in err
    assert not (tmp_path / "r.json").exists()
