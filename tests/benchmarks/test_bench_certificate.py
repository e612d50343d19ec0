"""bench/certificate.py: a small run writes both certificates' figures, and the shifted one's
value is that of the library's descent_certificate."""

import json

import numpy as np

from bench import certificate


def test_small_run_writes_both_certificates(tmp_path):
    out = tmp_path / "certificate.json"
    certificate.main(["--n", "10000", "--json", str(out)])
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert row["n"] == 10000 and row["numerical_rank"] <= row["rank"]
    assert np.isfinite(row["deflated_value"]) and row["deflated_s"] >= 0
    assert row["deflated_value"] > -1e-3  # the default fit is no rank trap
    assert data["command"].startswith("python bench/certificate.py")
