"""bench/estimators_overhead.py runs end to end on a small problem: every case's estimator
and function paths give the same bytes, and the JSON has the performance page's columns."""

import json

import pytest

from bench import estimators_overhead


@pytest.mark.heavy  # (about a minute: three cases, each fitted three times per side)
def test_small_run_is_bitwise_equal_and_writes_its_table(tmp_path):
    out = tmp_path / "eo.json"
    estimators_overhead.main(["--n", "800", "--pairs", "400", "--rounds", "1", "--json", str(out)])
    res = json.loads(out.read_text())
    assert [r["estimator"] for r in res["rows"]] == [
        "NPKLClustering",
        "NPKLEmbedding",
        "InductiveKernel",
    ]
    for row in res["rows"]:
        assert row["bitwise_equal"] is True, row
        assert row["fits"] == 2 and row["estimator_s"] > 0 and row["functions_s"] > 0
    keys = {k for k, _ in res["columns"]}
    assert keys <= set(res["rows"][0])
