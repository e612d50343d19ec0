"""bench/embed_table8.py --quick on one set (simplenpkl Tables 8 and 9): every method embeds,
the cvxpy solves finish, and the stamped JSON has one row with the paper's figures beside ours.
Heavy: about a minute (cvxpy's SDPs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytest.importorskip("cvxpy")
pytest.importorskip("sklearn")


@pytest.mark.heavy
def test_quick_run_on_the_spiral(tmp_path):
    from bench import embed_table8

    out = tmp_path / "t8.json"
    raw = embed_table8.main(["--quick", "--m", "1", "--datasets", "spiral", "--json", str(out)])
    got = json.loads(out.read_text())
    assert got["benchmark"] == "embed_table8" and got["finished"] is True
    assert [r["dataset"] for r in got["rows"]] == ["spiral"]
    row = got["rows"][0]
    assert "(98.8 ± 2.4)" in row["mve"] and "(99.8×)" in row["spe_x"]  # the paper's figures
    methods = raw["spiral"]["methods"]
    assert set(methods) == set(embed_table8.METHODS)
    for m, rec in methods.items():
        assert rec["seconds"] > 0
        assert 0 <= rec["acc_mean"] <= 100, m  # every method embedded (no cap hit)
    assert methods["spe_sdp"]["solver"] in ("SCS", "CLARABEL")
    # ours and cvxpy solve the same SPE problem: objectives agree to SCS's accuracy
    ours, sdp = methods["spe"]["objective"], methods["spe_sdp"]["objective"]
    assert abs(ours - sdp) <= 1e-2 * (abs(sdp) + 1)
