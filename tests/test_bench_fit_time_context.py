"""``bench/fit_time_context.py`` times the harness's own fit after each kind of preceding work
and prints each way's ratio to the warm time (chessboard: generated, no optional data)."""

import pytest


def test_prints_every_way_against_the_warm_fit(capsys):
    from bench import fit_time_context as ftc  # a broken bench fails here, not skips

    ftc.main(["--pair", "chessboard:SimpleNPKL-linear", "--reps", "1", "--runs", "2"])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| before")]
    cells = {r.strip("|").split("|")[0].strip(): [float(c) for c in r.strip("|").split("|")[1:]]
             for r in rows}
    assert list(cells) == ["nothing", "previous fit", "kernel k-means", "harness work",
                           "sleep 10 ms", "sleep 10 ms, then the fit", "read 32 MB"]
    warm = cells["nothing"][0]
    assert cells["nothing"][1] == 1.0
    for t, ratio in cells.values():
        assert t > 0
        assert ratio == pytest.approx(t / warm, abs=0.01, rel=0.01)


def test_each_way_runs_its_work_before_the_timed_fit(learn_kernel_calls):
    """The work of each way runs before every timed fit, and the timed fit is the pair's."""
    from bench import fit_time_context as ftc

    calls = learn_kernel_calls
    out = ftc.time_ways("chessboard", "SimpleNPKL-linear", reps=1, runs=2)
    assert set(out) == {"nothing", "previous fit", "kernel k-means", "harness work",
                        "sleep 10 ms", "sleep 10 ms, then the fit", "read 32 MB"}
    assert all(len(v) == 1 and v[0] > 0 for v in out.values())
    # the method before SimpleNPKL-linear in the fit-time runs' order is KL-ADMM: fitted once
    # for kernel k-means' V, then twice each for "previous fit" and "harness work"
    assert calls.count("KL-ADMM") == 1 + 2 + 2
    # 5 untimed warm fits, 7 ways x 2 timed fits, 2 untimed ones before "sleep, then the fit"
    assert calls.count("SimpleNPKL-linear") == 5 + 7 * 2 + 2


@pytest.mark.parametrize("argv, message", [
    (["--pair", "iris:BCD-linear"], "pair='iris:BCD-linear' must be DATASET:METHOD"),
    (["--reps", "0"], "fit_time_context: --reps=0 must be >= 1"),
    (["--runs", "0"], "fit_time_context: --runs=0 must be >= 1"),
])
def test_bad_arguments_name_the_argument(argv, message):
    import re

    from bench import fit_time_context as ftc

    with pytest.raises(SystemExit, match=re.escape(message)):
        ftc.main(argv)
