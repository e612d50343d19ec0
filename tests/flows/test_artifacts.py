"""What a pipeline run publishes to Prefect (npkl_flows._artifacts): built from the stages'
dicts without a server here; the deployment test (tests/flows/test_deploy.py, heavy) reads
the artifacts back from a real server."""

from __future__ import annotations

import re

import pytest

from npkl_flows._artifacts import LearnProgress, artifact_key, result_markdown, run_label

RESULTS = {
    "run": "/data/runs/digits-20261206-020000",
    "flow_run": "0b6f3c9e-0000-4000-8000-000000000000",
    "stages": {
        "ingest": {"seconds": 0.41, "peak_rss_mb": 210.0, "skipped": False},
        "graph": {"seconds": 1.25, "peak_rss_mb": 260.0, "skipped": False},
        "plan": {"skipped": True, "cached": True, "seconds": 0.2},
        "learn": {
            "seconds": 9.5,
            "peak_rss_mb": 300.0,
            "skipped": False,
            "solver": "bcd",
            "method": "block",
            "loss": "square",
            "rank": 12,
            "objective": 246.70512,
            "n_sweeps": 130,
            "converged": True,
        },
        "evaluate": {
            "seconds": 0.3,
            "skipped": False,
            "metrics": {"rand_accuracy": 0.99241, "ari": 0.95733, "nmi": 0.95121},
        },
        "extend": {"seconds": 0.1, "skipped": False},
        "report": {"seconds": 1.0, "skipped": False, "dir": "/data/reports/digits-20261206"},
    },
}


def test_markdown_names_results_timings_and_where_they_are():
    md = result_markdown(RESULTS)
    assert md.startswith("# npkl run `digits-20261206-020000`")
    assert "| run store | `/data/runs/digits-20261206-020000` |" in md
    assert "| report | `/data/reports/digits-20261206` |" in md
    assert "| objective | 246.705 |" in md
    assert "| iterations | 130 outer iterations (converged) |" in md
    assert "| pairwise accuracy | 0.9924 |" in md and "| ARI | 0.9573 |" in md
    assert "| NMI | 0.9512 |" in md
    # one row per stage, in order, with its seconds and peak memory
    rows = re.findall(r"^\| (\w+) \| ([^|]+) \| ([^|]+) \| ([^|]*) \|$", md, re.M)
    assert [r[0] for r in rows] == list(RESULTS["stages"])
    assert rows[1][1:3] == ("1.2", "260") and rows[2][3].strip() == "cached by Prefect"
    assert "Failed" not in md
    assert "`npkl status /data/runs/digits-20261206-020000`" in md


def test_markdown_of_a_failed_run_says_where_it_stopped():
    partial = {
        **RESULTS,
        "stages": {k: RESULTS["stages"][k] for k in ("ingest", "graph")},
        "failed_stage": "plan",
    }
    md = result_markdown(partial, error="StoreError: graph: chunk 3 is missing")
    assert "**Failed** during stage `plan`: StoreError: graph: chunk 3 is missing" in md
    assert "npkl resume digits-20261206-020000" in md
    assert "| report | — (no report written) |" in md
    assert "objective" not in md and "| learn |" not in md


@pytest.mark.parametrize(
    ("run", "label", "key"),
    [
        ("digits", "digits", "npkl-digits"),
        ("/home/me/storage/runs/Digits_2026.v2", "Digits_2026.v2", "npkl-digits-2026-v2"),
        ("s3://bucket/runs/social-1e6/", "social-1e6", "npkl-social-1e6"),
    ],
)
def test_run_labels_and_artifact_keys(run, label, key):
    assert run_label(run) == label
    assert artifact_key(run) == key
    assert re.fullmatch(r"[a-z0-9-]+", artifact_key(run, "learn"))
    assert artifact_key(run, "learn") == key + "-learn"


def test_learn_progress_is_throttled_and_reaches_the_last_iteration(monkeypatch):
    sent = []
    clock = iter([0.0, 0.5, 1.0, 2.5, 2.6, 2.7])
    monkeypatch.setattr("npkl_flows._artifacts.time.monotonic", lambda: next(clock))
    cb = LearnProgress(lambda p, d: sent.append((p, d)), max_iterations=20, interval=2.0)
    for sweep in (1, 2, 3, 4, 5):
        cb(sweep, 10.0 / sweep, 0.1, 0.01)
    cb(20, 0.5, 1e-9, 0.01)  # the last iteration is always sent
    assert [p for p, _ in sent] == [5.0, 20.0, 100.0]
    assert sent[1][1] == "sweep 4 of at most 20: objective 2.5, change 1.0e-01"


def test_run_names_expand_from_the_flow_runs_start_time():
    """The flow run's name and its store come from one expansion of ``{date}``: the flow
    run's expected start time (npkl_flows.pipeline._expand), not the clock at each call."""
    import datetime as dt

    from npkl_flows._config import expand_run

    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    got = expand_run("runs/digits-{date}-{flow_run}", "0b6f3c9e", when=when)
    assert got == "runs/digits-20260102-010405-0b6f3c9e"  # in UTC
    assert run_label(got) == "digits-20260102-010405-0b6f3c9e"
    assert expand_run("plain", "x", when=when) == "plain"
