"""The replication harness's bookkeeping (bench/paper/run.py): resuming and partial discards."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
run = pytest.importorskip("bench.paper.run")
report_mod = pytest.importorskip("bench.paper.report")


def _rec(dataset, method, rep, acc=0.5):
    return {
        "dataset": dataset,
        "method": method,
        "rep": rep,
        "n": 10,
        "fit_seconds": 0.1,
        "rand_accuracy": acc,
    }


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _report_only(tmp_path, records, datasets):
    """The report that ``--report-only`` writes from ``records`` for ``datasets``."""
    path, report = tmp_path / "results.jsonl", tmp_path / "RESULTS.md"
    _write(path, records)
    assert (
        run.main(
            [
                "--datasets",
                *datasets,
                "--results",
                str(path),
                "--report",
                str(report),
                "--figure",
                str(tmp_path / "f.png"),
                "--report-only",
            ]
        )
        == 0
    )
    return report.read_text()


def test_discard_removes_only_the_named_methods_on_the_named_datasets(tmp_path):
    path = tmp_path / "results.jsonl"
    recs = [
        _rec(d, m, rep)
        for d in ("iris", "wine", "adult-a1a")
        for m in ("BCD-hinge", "BCD-square", "k-means")
        for rep in range(3)
    ]
    _write(path, recs)
    before = path.read_text().splitlines()
    removed = run.discard(path, ["iris", "adult-a1a"], ["BCD-hinge"])
    assert removed == 6
    after = path.read_text().splitlines()
    expected = [
        line
        for line, r in zip(before, recs)
        if not (r["dataset"] in ("iris", "adult-a1a") and r["method"] == "BCD-hinge")
    ]
    assert after == expected  # every other line kept, byte for byte and in order
    assert ("wine", "BCD-hinge", 0) in run._done(path)
    assert ("iris", "BCD-hinge", 0) not in run._done(path)
    assert ("iris", "BCD-square", 2) in run._done(path)
    assert not path.with_name(path.name + ".tmp").exists()


def test_discard_missing_file_and_no_match(tmp_path):
    assert run.discard(tmp_path / "none.jsonl", ["iris"], ["BCD-hinge"]) == 0
    path = tmp_path / "results.jsonl"
    _write(path, [_rec("iris", "k-means", 0)])
    text = path.read_text()
    assert run.discard(path, ["wine"], ["k-means"]) == 0
    assert path.read_text() == text


def test_fresh_methods_recomputes_only_those_rows(tmp_path):
    """--fresh-methods drops and recomputes one method on one data set; other rows stay."""
    path = tmp_path / "results.jsonl"
    report = tmp_path / "RESULTS.md"
    stale = _rec("iris", "k-means", 0, acc=0.123)
    other_method = _rec("iris", "spectral", 0, acc=0.456)
    other_dataset = _rec("wine", "k-means", 0, acc=0.789)
    _write(path, [stale, other_method, other_dataset])
    assert (
        run.main(
            [
                "--datasets",
                "iris",
                "--methods",
                "k-means",
                "spectral",
                "--reps",
                "1",
                "--workers",
                "1",
                "--results",
                str(path),
                "--report",
                str(report),
                "--figure",
                str(tmp_path / "fig.png"),
                "--fresh-methods",
                "k-means",
            ]
        )
        == 0
    )
    got = run.load_results(path)
    assert got[0] == other_method and got[1] == other_dataset  # untouched, not recomputed
    new = [r for r in got[2:]]
    assert [(r["dataset"], r["method"], r["rep"]) for r in new] == [("iris", "k-means", 0)]
    assert "error" not in new[0] and new[0]["rand_accuracy"] != 0.123
    assert new[0]["warm"] is True  # the worker was warmed up before its timed fits
    assert "paper-replication:begin" in report.read_text()
    assert (tmp_path / "fig.png").stat().st_size > 0


def test_unavailable_records_are_retried_and_replaced(tmp_path):
    """A method that could not run (missing package) is not a result: the next run retries
    it and its record is replaced; real results and real failures stay cached."""
    path = tmp_path / "results.jsonl"
    missing = {
        "dataset": "iris",
        "method": "k-means",
        "rep": 0,
        "n": 150,
        "error": "unavailable: some package is missing: pip install it",
    }
    failed = {
        "dataset": "iris",
        "method": "spectral",
        "rep": 0,
        "n": 150,
        "error": "ValueError: a real failure",
    }
    kept = _rec("wine", "k-means", 0, acc=0.789)
    _write(path, [missing, failed, kept])
    assert ("iris", "k-means", 0) not in run._done(path)
    assert ("iris", "spectral", 0) in run._done(path)
    assert (
        run.main(
            [
                "--datasets",
                "iris",
                "--methods",
                "k-means",
                "spectral",
                "--reps",
                "1",
                "--workers",
                "1",
                "--results",
                str(path),
                "--report",
                str(tmp_path / "RESULTS.md"),
                "--figure",
                str(tmp_path / "f.png"),
                "--no-warm-up",
            ]
        )
        == 0
    )
    got = run.load_results(path)
    assert got[:2] == [failed, kept]  # untouched, in order
    assert [(r["dataset"], r["method"], r["rep"]) for r in got[2:]] == [("iris", "k-means", 0)]
    assert "error" not in got[2] and 0 < got[2]["rand_accuracy"] <= 1
    assert "warm" not in got[2]  # --no-warm-up: timed cold, and the row does not claim it


def test_retry_failed_recomputes_only_the_failed_repetitions(tmp_path):
    """--retry-failed drops the failed rows of the named methods on the selected data sets
    and recomputes those repetitions; their successful repetitions, other methods' failures
    and other data sets stay as they were."""
    path = tmp_path / "results.jsonl"
    failed = {
        "dataset": "iris",
        "method": "k-means",
        "rep": 0,
        "n": 150,
        "error": "ValueError: a real failure",
    }
    good = _rec("iris", "k-means", 1, acc=0.123)
    other_method = {
        "dataset": "iris",
        "method": "spectral",
        "rep": 0,
        "n": 150,
        "error": "ValueError: another failure",
    }
    other_dataset = {
        "dataset": "wine",
        "method": "k-means",
        "rep": 0,
        "n": 178,
        "error": "ValueError: a failure elsewhere",
    }
    _write(path, [failed, good, other_method, other_dataset])
    assert run.discard_failed(tmp_path / "none.jsonl", ["iris"], ["k-means"]) == 0
    assert (
        run.main(
            [
                "--datasets",
                "iris",
                "--methods",
                "k-means",
                "spectral",
                "--reps",
                "2",
                "--workers",
                "1",
                "--results",
                str(path),
                "--report",
                str(tmp_path / "RESULTS.md"),
                "--figure",
                str(tmp_path / "f.png"),
                "--no-warm-up",
                "--retry-failed",
                "k-means",
            ]
        )
        == 0
    )
    got = run.load_results(path)
    assert got[:3] == [good, other_method, other_dataset]  # untouched, in order
    new = got[3:]
    assert [(r["dataset"], r["method"], r["rep"]) for r in new] == [
        ("iris", "k-means", 0),
        ("iris", "spectral", 1),
    ]
    assert all("error" not in r for r in new)


def test_report_only_runs_nothing_and_rewrites_the_tables(tmp_path):
    path = tmp_path / "results.jsonl"
    report = tmp_path / "RESULTS.md"
    report.write_text(
        "# before\n\n<!-- paper-replication:begin -->\nold\n"
        "<!-- paper-replication:end -->\nafter\n"
    )
    _write(path, [_rec("iris", "k-means", r, acc=0.9 + r / 100) for r in range(3)])
    text = path.read_text()
    assert (
        run.main(
            [
                "--datasets",
                "iris",
                "wine",
                "--reps",
                "20",
                "--results",
                str(path),
                "--report",
                str(report),
                "--figure",
                str(tmp_path / "f.png"),
                "--report-only",
            ]
        )
        == 0
    )
    assert path.read_text() == text  # nothing was run (wine has no results and stays so)
    out = report.read_text()
    # the block between the markers replaced: its old line gone (the report's own prose may
    # say "old", e.g. "older rows")
    assert out.startswith("# before") and out.rstrip().endswith("after")
    assert "\nold\n" not in out and out.count("<!-- paper-replication:begin -->") == 1
    assert "tables only, nothing run" in out
    assert "| k-means | 91.00 ± 1.00 |" in out


def test_speed_table_compares_with_the_published_cpu_time(tmp_path):
    """iris KL-ADMM: the paper reports 3.44 s (kl-admm Table 2); 0.02 s is 172x (met),
    soybean SimpleNPKL-linear 0.01 s published vs 0.005 s here is 2x (not met)."""
    recs = [dict(_rec("iris", "KL-ADMM", r), fit_seconds=0.02) for r in range(2)]
    recs += [dict(_rec("soybean", "SimpleNPKL-linear", r), fit_seconds=0.005) for r in range(2)]
    recs += [_rec("iris", "k-means", 0)]  # no published CPU time: no row
    out = _report_only(tmp_path, recs, ["iris", "soybean"])
    assert "### Fit time against the papers' CPU times" in out
    assert "| iris | KL-ADMM | 0.02 | 0.02 | 3.44 | 172x | yes | 2 | AMD EPYC |" in out
    assert (
        "| soybean | SimpleNPKL-linear | 0.005 | 0.005 | 0.01 | 2x | **no** | 2 | AMD EPYC |"
        in out
    )
    assert "Met on 1 of 2 (on 1 by the mean). Where the misses' time goes" in out
    assert "Machine by machine" in out and "`python -m bench.paper.fit_time_machines`" in out
    assert "| iris | k-means | 0.1 |" not in out


def test_speed_table_judges_the_median_and_shows_the_mean(tmp_path):
    """One slow repetition (a worker's first fit loading the compiled kernels) moves the mean
    but not the median: heart KL-ADMM (37.14 s published) at 0.1, 0.1, 0.1, 1.3 s has median
    0.1 s (371x, met) and mean 0.4 s (93x, not met by the mean)."""
    recs = [
        dict(_rec("heart", "KL-ADMM", r), fit_seconds=t)
        for r, t in enumerate([0.1, 0.1, 0.1, 1.3])
    ]
    out = _report_only(tmp_path, recs, ["heart"])
    assert "| heart | KL-ADMM | 0.1 | 0.4 | 37.14 | 371x | yes | 4 | AMD EPYC |" in out
    assert "Met on 1 of 1 (on 0 by the mean).\n" in out  # nothing missed: no pointer


def test_rows_name_the_machine_that_measured_them(tmp_path):
    """Rows without a machine field are the legacy machine's; a method whose repetitions ran
    on two machines has its fit time marked and both machines in the fit-time table."""
    recs = [dict(_rec("iris", "KL-ADMM", 0), fit_seconds=0.02)]  # legacy row
    recs += [
        dict(
            _rec("iris", "KL-ADMM", 1),
            fit_seconds=0.04,
            machine="Intel(R) Xeon(R) Processor, 2 cores",
        )
    ]
    recs += [
        dict(_rec("iris", "k-means", r), machine="Intel(R) Xeon(R) Processor, 2 cores")
        for r in range(2)
    ]
    out = _report_only(tmp_path, recs, ["iris"])
    assert (
        "Rows measured on: Intel(R) Xeon(R) Processor, 2 cores (3 rows); "
        "AMD EPYC, 2 cores (1 rows)."
    ) in out
    assert "| KL-ADMM | 50.00 ± 0.00 | 0.03 ± 0.014 ‡ | 2 |" in out
    assert "| k-means | 50.00 ± 0.00 | 0.1 ± 0 | 2 |" in out  # one machine: no mark
    assert (
        "| iris | KL-ADMM | 0.03 | 0.03 | 3.44 | 115x | yes | 2 | AMD EPYC + Intel Xeon |" in out
    )


def test_run_task_records_the_machine(monkeypatch):
    from bench.paper import report

    monkeypatch.setattr(report, "machine", lambda: "Test CPU, 7 cores")
    recs = run.run_task("chessboard", 0, ["k-means"])  # generated: no optional data
    assert [r["machine"] for r in recs] == ["Test CPU, 7 cores"]
    assert report.short_machine("Intel(R) Xeon(R) Processor, 2 cores") == "Intel Xeon"


ZEN5_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx2 avx512f avx512dq
processor\t: 1
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx2 avx512f avx512dq
"""


def test_machine_names_the_cpu_family_and_model_behind_a_generic_name(tmp_path):
    """Two AMD EPYCs with fit times 1.5-2.8x apart both call themselves "AMD EPYC": the
    label carries family, model and AVX-512, and the short names differ."""
    from bench.paper import report

    zen5 = tmp_path / "zen5"
    zen5.write_text(ZEN5_CPUINFO)
    zen3 = tmp_path / "zen3"
    zen3.write_text(
        ZEN5_CPUINFO.replace(": 26", ": 25")
        .replace("\t\t: 2\n", "\t\t: 1\n")
        .replace(" avx512f avx512dq", "")
    )
    m5, m3 = report.machine(zen5), report.machine(zen3)
    assert m5.startswith("AMD EPYC (family 26, model 2, AVX-512), ")
    assert m3.startswith("AMD EPYC (family 25, model 1), ")
    assert m5.endswith(" cores") and m3.endswith(" cores")
    assert report.short_machine(m5) == "AMD EPYC 26/2"
    assert report.short_machine(m3) == "AMD EPYC 25/1"
    assert report.short_machine(m5 + ", 2 threads per fit") == "AMD EPYC 26/2 (2 threads)"
    # a file without the numbers (other platforms), or none at all: the name alone
    plain = tmp_path / "plain"
    plain.write_text("model name\t: Some CPU\n")
    assert report.machine(plain).startswith("Some CPU, ")
    assert report.machine(tmp_path / "missing").startswith("unknown CPU, ")
    assert report.short_machine("AMD EPYC, 2 cores") == "AMD EPYC"  # rows labelled before


def test_run_task_with_threads_records_them_and_sets_the_fits_threads(monkeypatch):
    """--threads T: the task's numba and BLAS threads and its executor are T; rows say so
    (absent for 1, the harness's rows so far), and the machine label splits them."""
    import numba
    import threadpoolctl

    from bench.paper import report
    from npkl_dist.executors import InProcessExecutor

    monkeypatch.setattr(report, "machine", lambda: "Test CPU, 2 cores")
    seen = {}
    real = InProcessExecutor.__init__

    def spy(self, n_threads=None, *a, **k):
        seen["executor"] = n_threads
        seen["numba"] = numba.get_num_threads()
        real(self, n_threads, *a, **k)

    # the BLAS limit as requested (a library loaded after OPENBLAS_NUM_THREADS=1 was set,
    # e.g. by an earlier run() in this process, cannot go above 1 whatever is asked)
    real_limits = threadpoolctl.threadpool_limits

    def limits(limits=None, user_api=None):
        if user_api == "blas":
            seen["blas"] = limits
        return real_limits(limits=limits, user_api=user_api)

    monkeypatch.setattr(InProcessExecutor, "__init__", spy)
    monkeypatch.setattr(threadpoolctl, "threadpool_limits", limits)
    before = numba.get_num_threads()
    try:
        recs = run.run_task("chessboard", 0, ["k-means"], threads=2)
    finally:
        numba.set_num_threads(before)
    assert seen == {"executor": 2, "numba": 2, "blas": 2}
    assert recs[0]["threads"] == 2
    assert report.row_machine(recs[0]) == "Test CPU, 2 cores, 2 threads per fit"
    assert report.short_machine(report.row_machine(recs[0])) == "Test CPU (2 threads)"
    one = run.run_task("chessboard", 0, ["k-means"])
    assert "threads" not in one[0] and report.row_machine(one[0]) == "Test CPU, 2 cores"


def test_warm_up_fits_each_npkl_method_once_untimed(monkeypatch, capsys):
    """warm_up: every npkl method once (a "-cv" one as the method it tunes, no repeats, no
    peers), on a problem above the parallel threshold when threads > 1; a failing method is
    reported and skipped, not raised (the pool's initializer must not die)."""
    import numba

    from npkl_dist.linalg._rowops import CHUNK

    calls = []

    def fake(method, L, cons, cons_diag, *, n, k, adult, seed, executor, rec, protocol):
        calls.append((method, n, L.shape, cons_diag.diagonal, executor.n_threads, protocol))
        if method == "BCD-hinge":
            raise RuntimeError("boom")
        return np.eye(n, 2)

    monkeypatch.setattr(run, "learn_kernel", fake)
    before = numba.get_num_threads()
    try:
        done = run.warm_up(
            [
                "KL-ADMM-cv",
                "KL-ADMM",
                "k-means",
                "BCD-linear-cv",
                "BCD-hinge",
                "SimpleNPKL-linear",
                "PCKMeans",
            ],
            protocol="simplenpkl",
            threads=2,
        )
        assert numba.get_num_threads() == 2
        assert done == ["KL-ADMM", "BCD-linear", "SimpleNPKL-linear"]
        assert [c[0] for c in calls] == ["KL-ADMM", "BCD-linear", "BCD-hinge", "SimpleNPKL-linear"]
        n = calls[0][1]
        assert n > 2 * CHUNK and all(c[1:] == (n, (n, n), True, 2, "simplenpkl") for c in calls)
        assert "warm-up of BCD-hinge failed: RuntimeError: boom" in capsys.readouterr().err
        calls.clear()
        assert run.warm_up(["KL-ADMM"], threads=1) == ["KL-ADMM"]
        assert calls[0][1] <= 2 * CHUNK and calls[0][4] == 1 and calls[0][5] == "kl-admm"
        calls.clear()
        assert run.warm_up(["k-means", "ITML+k-means"], threads=2) == [] and calls == []
    finally:
        numba.set_num_threads(before)


def test_warm_up_really_fits(capsys):
    """Unmocked, on one thread: the synthetic problem is a valid input of every solver."""
    methods = ["BCD-linear", "KL-ADMM", "SimpleNPKL-linear", "SimpleNPKL-sqhinge"]
    assert run.warm_up(methods, threads=1) == methods
    assert "failed" not in capsys.readouterr().err


def test_threads_times_workers_may_not_exceed_the_cores(tmp_path):
    run.check_threads(1, 2, cores=2)
    run.check_threads(2, 1, cores=2)
    with pytest.raises(
        ValueError,
        match=r"--workers 2 x --threads 2 = 4 threads on 2 cores.*"
        r"use --workers 1 --threads 2",
    ):
        run.check_threads(2, 2, cores=2)
    with pytest.raises(ValueError, match="--threads: expected a positive integer, got 0"):
        run.check_threads(1, 0, cores=2)
    with pytest.raises(SystemExit):  # the CLI turns it into a usage error, running nothing
        run.main(
            [
                "--datasets",
                "chessboard",
                "--workers",
                "64",
                "--threads",
                "64",
                "--results",
                str(tmp_path / "r.jsonl"),
                "--report",
                str(tmp_path / "R.md"),
            ]
        )
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("reps", ["0", "-2", "two"])
def test_reps_below_one_is_a_usage_error_not_a_report_rewrite(tmp_path, capsys, reps):
    """--reps 0 ran nothing and rewrote the report (its date); now it names --report-only."""
    report = tmp_path / "R.md"
    with pytest.raises(SystemExit):
        run.main(
            [
                "--datasets",
                "chessboard",
                "--reps",
                reps,
                "--results",
                str(tmp_path / "r.jsonl"),
                "--report",
                str(report),
            ]
        )
    err = capsys.readouterr().err
    assert "argument --reps: expected an integer" in err
    assert "--report-only" in err or reps == "two"
    assert not report.exists() and not (tmp_path / "r.jsonl").exists()


def test_a_results_file_keeps_one_thread_count(tmp_path):
    """Rows resume by (data set, method, repetition): a file measured with one thread per fit
    refuses --threads 2 (it would skip those repetitions and pool both counts), naming the
    fix; other protocols' rows do not count."""
    path = tmp_path / "results.jsonl"
    _write(
        path,
        [
            _rec("iris", "KL-ADMM", 0),
            dict(_rec("iris", "KL-ADMM", 0), protocol="simplenpkl", threads=2),
        ],
    )
    run._check_same_threads(path, "kl-admm", 1)
    run._check_same_threads(path, "simplenpkl", 2)
    with pytest.raises(
        ValueError,
        match=r"holds rows measured with 1 thread\(s\) per fit; "
        r"write these to a results file of their own",
    ):
        run._check_same_threads(path, "kl-admm", 2)
    with pytest.raises(ValueError, match="--threads 1: .* with 2 thread"):
        run.run(["iris"], 1, ["k-means"], path, workers=1, protocol="simplenpkl")
    run._check_same_threads(tmp_path / "missing.jsonl", "kl-admm", 2)


def test_task_inputs_builds_the_graph_on_one_openmp_thread_whoever_calls(monkeypatch):
    """The harness's workers run with OMP_NUM_THREADS=1. scikit-learn's exact kNN splits its
    distance products by OpenMP thread, and where distances tie (adult's one-hot rows) the
    tie-breaking follows the split: a1a's graph differs in 23,128 of 117,849 Laplacian
    entries between 1 and 2 threads. So task_inputs pins one thread itself, and a direct
    caller (error_split, fit_time_floor) gets the graph the harness's rows were fitted on."""
    importlib.import_module("sklearn.neighbors")  # loads scikit-learn's OpenMP runtime
    from threadpoolctl import threadpool_info, threadpool_limits

    import npkl_dist as nk

    seen, real = [], nk.knn_graph

    def spy(*args, **kwargs):
        seen.append(
            [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "openmp"]
        )
        return real(*args, **kwargs)

    monkeypatch.setattr(nk, "knn_graph", spy)
    with threadpool_limits(limits=2, user_api="openmp"):
        run.task_inputs("chessboard", 0)  # generated: no install
        outside = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "openmp"]
    assert len(seen) == 1 and seen[0], "no OpenMP runtime seen: the test would check nothing"
    assert set(seen[0]) == {1}
    assert set(outside) == {2}  # the caller's own setting is restored


def test_runtime_table_estimates_the_whole_run(tmp_path):
    """iris: k-means 0.5 s + KL-ADMM 1.5 s per repetition -> 2 s, 20 s for 20 repetitions
    on 2 processes; a method that never ran on a data set is listed, not counted."""
    recs = [dict(_rec("iris", "k-means", r), fit_seconds=t) for r, t in ((0, 0.4), (1, 0.6))]
    recs += [dict(_rec("iris", "KL-ADMM", r), fit_seconds=1.5) for r in range(2)]
    recs += [dict(_rec("wine", "k-means", 0), fit_seconds=120.0)]
    # run only on request: in the tables, not in the estimate of the default command
    recs += [dict(_rec("iris", "SimpleNPKL-sqhinge-alg1", 0), fit_seconds=1000.0)]
    out = _report_only(tmp_path, recs, ["iris", "wine"])
    assert "| SimpleNPKL-sqhinge (Alg. 1) | 50.00 ± 0.00 | 1e+03 ± 0 | 1 |  |" in out
    assert "### Run time of the whole table" in out
    assert "| iris | 2.0 | 0.3 | KL-ADMM (2 s) | — |" in out
    assert "| wine | 120.0 | 20.0 | k-means (120 s) | KL-ADMM |" in out
    assert "Whole table: about 0.3 h." in out


def test_kmeans_restarts_reproduces_the_harness_at_its_restart_count():
    """The diagnostic learns the kernel exactly as the harness does: at the harness's 10
    restarts it reports the accuracy run_task records, for npkl methods of each family."""
    import io

    from bench.paper import kmeans_restarts

    methods = ["BCD-linear", "KL-ADMM", "SimpleNPKL-linear"]
    recs = {r["method"]: r for r in run.run_task("iris", 0, methods)}
    out = io.StringIO()
    rows = kmeans_restarts.run("iris", 1, methods, [10, 30], out=out)
    for m in methods:
        assert "error" not in recs[m], recs[m]
        assert rows[m][0][10][0] == pytest.approx(100.0 * recs[m]["rand_accuracy"], abs=1e-9)
    table = out.getvalue().splitlines()
    assert table[0].startswith("| method | reps |") and len(table) == 2 + len(methods)


def test_admm_stops_where_its_traces_first_meet_its_rule():
    """The iterates do not depend on the stopping rule: applied after the fact to the traces
    of one run to a cap, the relative rule stops exactly where a fit with that rule stops (what
    judging a stopping rule on one run's traces relies on; docs/decisions/kl-admm.md)."""
    import npkl_dist as nk
    from npkl_dist._errors import ConvergenceWarning
    from npkl_dist.solvers.admm._fit import fit_admm

    _, _, _, L, _, cons_diag = run.task_inputs("chessboard", 0)  # generated: no install
    problem = lambda: nk.NPKLProblem.build(L, cons_diag, loss="square", seed=0)  # noqa: E731
    with pytest.warns(ConvergenceWarning):  # to the cap on purpose
        long = fit_admm(problem(), max_iter=300, tol=1e-300)
    assert long.n_sweeps == 300
    primal, dual = np.asarray(long.primal_trace), np.asarray(long.dual_trace)
    change, rho = np.asarray(long.change_trace), np.asarray(long.rho_trace)
    vnorm = dual / (rho * change)  # change = ||dV|| / ||V||, dual = rho ||dV||
    for tol in (3e-3, 1e-3):
        live = fit_admm(problem(), max_iter=300, tol=tol)
        ok = (primal / vnorm < tol) & (change < tol)
        assert live.converged and int(np.flatnonzero(ok)[0]) + 1 == live.n_sweeps


def test_rows_reach_the_results_file_even_if_it_is_replaced_during_the_run(tmp_path, monkeypatch):
    """The results file replaced while the harness runs (a `git stash` of it, another run's
    atomic rewrite): every row still reaches the file at the path. The harness used to
    hold one handle for the whole run, and the rows written after the replacement went to
    the unlinked old file: three adult-a5a peer fits (about 50 minutes) were lost so."""
    import concurrent.futures

    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({"dataset": "iris", "method": "k-means", "rep": 9}) + "\n")

    class Pool:  # runs each task at submit time, in this process
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def submit(self, fn, *args):
            f = concurrent.futures.Future()
            f.set_result(fn(*args))
            return f

    def task(name, rep, todo, protocol, threads):
        copy = tmp_path / "copy"  # replace the file, as git does: a new inode at the path
        copy.write_bytes(results.read_bytes())
        os.replace(copy, results)
        return [{"dataset": name, "method": m, "rep": rep, "protocol": protocol} for m in todo]

    monkeypatch.setattr(run, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(run, "run_task", task)
    run.run(
        ["chessboard", "soybean"], 2, ["k-means"], results, workers=1, progress=False, warm=False
    )
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    assert rows[0]["rep"] == 9  # the earlier row, kept
    assert sorted((r["dataset"], r["rep"]) for r in rows[1:]) == [  # as they completed
        ("chessboard", 0),
        ("chessboard", 1),
        ("soybean", 0),
        ("soybean", 1),
    ]


def _git(root, *args):
    import subprocess

    subprocess.run(
        ["git", "-C", str(root), *args],
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


def test_code_version_is_head_and_says_when_the_code_differs_from_it(tmp_path):
    """A row records the commit of the code that computed it, "+dirty" where the package or
    the harness has uncommitted changes; the harness's own output (results, figures), other
    files and untracked files do not count; outside a git checkout there is none."""
    import shutil

    from bench.paper import report

    if shutil.which("git") is None:
        pytest.skip("git not installed")
    assert report.code_version(tmp_path) is None  # not a checkout
    for rel in (
        "npkl_dist/core.py",
        "bench/paper/run.py",
        "bench/paper/results.jsonl",
        "README.md",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    head = report.code_version.__wrapped__(tmp_path)
    assert len(head) == 12 and all(c in "0123456789abcdef" for c in head)

    def version():
        return report.code_version.__wrapped__(tmp_path)

    (tmp_path / "bench/paper/results.jsonl").write_text("x\ny\n")  # the harness's output
    (tmp_path / "README.md").write_text("y\n")
    (tmp_path / "npkl_dist/new.py").write_text("y\n")  # untracked
    assert version() == head
    (tmp_path / "npkl_dist/core.py").write_text("y\n")
    assert version() == head + "+dirty"
    _git(tmp_path, "checkout", "-q", "--", "npkl_dist/core.py")
    (tmp_path / "bench/paper/run.py").write_text("y\n")
    assert version() == head + "+dirty"
    _git(tmp_path, "commit", "-q", "-am", "two")
    assert version() not in (head, None) and not version().endswith("+dirty")


def test_rows_name_the_code_that_computed_them(tmp_path, monkeypatch):
    """run_task stamps each row with the code version; the report counts rows per version,
    rows from before the field under their own name."""
    from bench.paper import report

    monkeypatch.setattr(report, "code_version", lambda: "0123456789ab")
    recs = run.run_task("chessboard", 0, ["k-means"])
    assert recs[0]["commit"] == "0123456789ab"
    monkeypatch.setattr(report, "code_version", lambda: None)  # no checkout: no field
    assert "commit" not in run.run_task("chessboard", 0, ["k-means"])[0]
    rows = [dict(_rec("iris", "k-means", r), commit="0123456789ab") for r in range(3)]
    rows += [_rec("iris", "k-means", 3), dict(_rec("iris", "BCD-linear", 0), error="x")]
    out = _report_only(tmp_path, rows, ["iris"])
    assert (
        "Rows computed by code at: 0123456789ab (3 rows); unrecorded (rows before "
        "2026-11-30) (1 rows)"
    ) in out


def test_the_report_says_per_method_where_its_rows_come_from(tmp_path):
    """The header's table gives each method's rows, machines and code versions with their
    counts (failed rows not counted), most rows first, methods in the harness's order."""
    xeon = "Intel(R) Xeon(R) Processor, 2 cores"
    zen5 = "AMD EPYC (family 26, model 2, AVX-512), 2 cores"
    rows = [
        dict(_rec("iris", "KL-ADMM", r), machine=zen5, commit="0123456789ab") for r in range(3)
    ]
    rows += [dict(_rec("iris", "KL-ADMM", 3), machine=xeon)]
    rows += [dict(_rec("iris", "k-means", r), machine=xeon) for r in range(2)]
    rows += [dict(_rec("iris", "k-means", 2), machine=zen5, error="x")]
    out = _report_only(tmp_path, rows, ["iris"])
    table = out[out.index("| method | rows | measured on (rows) | code (rows) |") :]
    assert table.index(
        "| KL-ADMM | 4 | AMD EPYC 26/2 (3); Intel Xeon (1) | 0123456789ab (3); unrecorded (1) |"
    ) < table.index("| k-means | 2 | Intel Xeon (2) | unrecorded (2) |")
    assert 'bench/paper/README.md, "History of the committed rows"' in out


def test_a_data_set_that_is_not_installed_stops_the_run_before_any_work(
    tmp_path, monkeypatch, capsys
):
    """Every selected data set is loaded before the workers start: a missing one is an
    error naming it, the reason and the fix (--install), no task runs (it had stopped the
    run minutes in, with a worker's traceback, at its first task), and --fresh or
    --fresh-methods discard nothing."""
    from bench.paper import datasets

    real = datasets.load

    def load(name, **kw):
        if name == "glass":
            raise datasets.DatasetUnavailable("cannot read Glass.rda: pyreadr is not installed")
        return real(name, **kw)

    monkeypatch.setattr(datasets, "load", load)
    ran = []
    monkeypatch.setattr(run, "run", lambda *a, **k: ran.append(a))
    results, report = tmp_path / "results.jsonl", tmp_path / "RESULTS.md"
    earlier = [_rec("glass", "k-means", 0), _rec("iris", "k-means", 0)]
    _write(results, earlier)
    for fresh in ([], ["--fresh"], ["--fresh-methods", "k-means"]):
        with pytest.raises(SystemExit) as exc:
            run.main(
                [
                    "--datasets",
                    "iris",
                    "glass",
                    "--reps",
                    "1",
                    "--methods",
                    "k-means",
                    "--results",
                    str(results),
                    "--report",
                    str(report),
                ]
                + fresh
            )
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "data set(s) not installed:\n  glass: cannot read Glass.rda: pyreadr" in err
        assert "Add --install" in err and "iris" not in err.split("not installed:")[1]
        # nothing ran, and the earlier results are still there (the check comes first)
        assert not ran and not report.exists()
        assert [json.loads(x) for x in results.read_text().splitlines()] == earlier
    assert run.unavailable_datasets(["iris", "chessboard"]) == {}


def test_progress_says_how_long_is_left():
    from bench.paper.run import progress_times

    assert progress_times(12.0, 2, 5) == "12s elapsed, about 18s left"
    assert progress_times(30.4, 5, 5) == "30s elapsed"  # nothing left to estimate
    assert progress_times(0.0, 0, 5) == "0s elapsed"
    # two workers: the first task took all 286 s (the other ran beside it); 15 left, 2 at a
    # time, is 2145 s, not 15 x 286
    assert progress_times(286.0, 1, 16, workers=2) == "286s elapsed, about 2145s left"
    assert progress_times(289.0, 2, 16, workers=2) == "289s elapsed, about 2023s left"
    assert progress_times(1445.0, 10, 16, workers=2) == "1445s elapsed, about 867s left"


@pytest.mark.parametrize("root", [True, False])
def test_ensure_installed_only_touches_the_pieces_named(monkeypatch, root):
    """`make system-deps` installs liblinear-tools alone: r-cran-mlbench and the PyPI
    pieces stay out of the commands, and the report covers only the piece named."""
    import io

    from bench.paper import datasets

    missing = {"r-cran-mlbench": "fix m", "liblinear-tools": "fix l", "pyreadr": "fix p"}
    monkeypatch.setattr(datasets, "missing_requirements", lambda: dict(missing))
    monkeypatch.setattr(datasets, "_is_root", lambda: root)
    monkeypatch.setattr(datasets.shutil, "which", lambda name: "/usr/bin/" + name)
    out = io.StringIO()
    still = datasets.ensure_installed(only={"liblinear-tools"}, pip=False, dry_run=True, out=out)
    text = out.getvalue()
    assert still == {}
    if root:
        assert "$ apt-get install -y liblinear-tools\n" in text
    else:
        assert (
            "(not root) run: sudo apt-get update && sudo apt-get install -y liblinear-tools\n"
            in text
        )
    assert "mlbench" not in text and "pip" not in text and "all data-set sources" not in text


@pytest.fixture
def drawn(monkeypatch):
    """The paths the report's figure is drawn to (nothing is drawn)."""
    paths = []
    monkeypatch.setattr(
        report_mod, "figure", lambda agg, names, methods, path, **kw: paths.append(Path(path))
    )
    return paths


@pytest.mark.parametrize("protocol", ["kl-admm", "simplenpkl"])
def test_a_report_elsewhere_gets_its_figure_beside_it_not_over_the_committed_one(
    tmp_path, drawn, protocol
):
    """``--report /tmp/x.md`` without ``--figure`` used to rewrite the committed PNG with the
    trial run's subset of the data; the figure now goes beside that report."""
    committed = run.PROTOCOL_FILES[protocol][1]
    assert run.default_figure_for(run.DEFAULT_REPORT, committed) == committed
    assert (
        run.default_figure_for(run.ROOT / "docs" / ".." / "docs" / "replication.md", committed)
        == committed
    )
    path, report = tmp_path / "results.jsonl", tmp_path / "trial.md"
    _write(path, [dict(_rec("iris", "k-means", r), protocol=protocol) for r in range(2)])
    assert (
        run.main(
            [
                "--protocol",
                protocol,
                "--datasets",
                "iris",
                "--results",
                str(path),
                "--report",
                str(report),
                "--report-only",
            ]
        )
        == 0
    )
    assert drawn == [tmp_path / committed.name]
    assert report.exists()


def test_results_elsewhere_get_their_report_and_figure_beside_them(tmp_path, drawn):
    """``--results /tmp/x.jsonl`` without ``--report`` used to rewrite the committed report's
    tables from that file's subset; the report (and so the figure) now goes beside it."""
    default_results = run.PROTOCOL_FILES["kl-admm"][0]
    assert run.default_report_for(None, default_results) == run.DEFAULT_REPORT
    assert run.default_report_for(default_results, default_results) == run.DEFAULT_REPORT
    assert (
        run.default_report_for(tmp_path / "x.md", default_results) == tmp_path / "x.md.report.md"
    )
    committed = run.DEFAULT_REPORT.read_bytes()
    path = tmp_path / "trial.jsonl"
    _write(path, [_rec("iris", "k-means", r) for r in range(2)])
    assert run.main(["--datasets", "iris", "--results", str(path), "--report-only"]) == 0
    assert "| k-means |" in (tmp_path / "trial.md").read_text()
    assert drawn == [tmp_path / "accuracy_vs_time.png"]
    assert run.DEFAULT_REPORT.read_bytes() == committed


@pytest.mark.parametrize("protocol", ["kl-admm", "simplenpkl"])
def test_write_report_without_a_figure_draws_the_protocols_committed_one(
    tmp_path, drawn, protocol
):
    """Called without ``figure_path`` (as a script would), the report draws the protocol's
    figure, the same file the CLI defaults to: one table of defaults (``report.FIGURES``)."""
    assert run.PROTOCOL_FILES[protocol][1] == report_mod.FIGURES[protocol]
    rows = [dict(_rec("iris", "k-means", r), protocol=protocol) for r in range(2)]
    report_mod.write_report(
        rows,
        ["iris"],
        ["k-means"],
        tmp_path / "r.md",
        wall_seconds=1.0,
        reps=2,
        command="test",
        protocol=protocol,
    )
    assert drawn == [
        report_mod.HERE
        / ("accuracy_vs_time.png" if protocol == "kl-admm" else "accuracy_vs_time_simplenpkl.png")
    ]
    assert "| k-means |" in (tmp_path / "r.md").read_text()
