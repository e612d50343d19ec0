"""``bench/fit_time_warm.py`` times the harness's own fits and prints the ratios against the
published CPU times it claims to (on chessboard, generated: no optional data needed)."""

import re

import pytest


def _rows(out):
    return [line for line in out.splitlines() if line.startswith("| chessboard")]


def test_prints_both_ratios_against_the_published_time(capsys):
    from bench import fit_time_warm as ftw  # a broken bench fails here, not skips
    from bench.paper.published import published_value

    ftw.main(["--pairs", "chessboard:SimpleNPKL-sqhinge", "chessboard:SimpleNPKL-linear",
              "--reps", "1", "--runs", "2"])
    rows = _rows(capsys.readouterr().out)
    assert len(rows) == 2
    for row, method in zip(rows, ("SimpleNPKL-sqhinge", "SimpleNPKL-linear")):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == method
        pub = published_value("chessboard", method, quantity="cpu")[0]
        assert float(cells[2]) == pytest.approx(pub)
        assert float(cells[3]) == pytest.approx(pub * 10, abs=5e-4)  # budget in ms
        warm, ctx = float(cells[4]), float(cells[6])
        assert warm > 0 and ctx > 0
        # each ratio is the published time over that median (rounded as printed)
        assert int(cells[5].rstrip("x")) == pytest.approx(pub / (warm * 1e-3), abs=1.0,
                                                          rel=0.01)
        assert int(cells[7].rstrip("x")) == pytest.approx(pub / (ctx * 1e-3), abs=1.0,
                                                          rel=0.01)
        assert float(cells[8]) == pytest.approx(ctx / warm, abs=0.01, rel=0.01)


def test_time_pair_times_the_harness_fit_after_the_method_before_it(learn_kernel_calls):
    from bench import fit_time_warm as ftw

    calls = learn_kernel_calls
    warm, ctx = ftw.time_pair("chessboard", "SimpleNPKL-linear", reps=1, runs=2)
    assert len(warm) == len(ctx) == 1
    # 1 reference + 4 untimed + 2 warm fits, then (KL-ADMM, the fit) twice: the harness's order
    assert calls == ["SimpleNPKL-linear"] * 7 + ["KL-ADMM", "SimpleNPKL-linear"] * 2
    calls.clear()
    ftw.time_pair("chessboard", "KL-ADMM", reps=1, runs=1)
    assert calls[-2:] == ["SimpleNPKL-sqhinge", "KL-ADMM"]  # cyclically: the task's last


@pytest.mark.parametrize("argv, message", [
    (["--pairs", "iris:BCD-linear"], "pair='iris:BCD-linear' must be DATASET:METHOD"),
    (["--pairs", "iris"], "pair='iris' must be DATASET:METHOD"),
    (["--reps", "0"], "--reps=0 must be >= 1"),
    (["--runs", "0"], "--runs=0 must be >= 1"),
])
def test_bad_arguments_name_the_argument(argv, message):
    from bench import fit_time_warm as ftw

    with pytest.raises(SystemExit, match=re.escape(message)):
        ftw.main(argv)
