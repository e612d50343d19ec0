"""bench/integrity.py on a small run: both arms measured, the switch restored."""

import json

from bench import integrity
from npkl_dist.store import _stage_data


def test_small_run_measures_both_arms(tmp_path):
    out = tmp_path / "i.json"
    integrity.main(["--n", "3000", "--repeats", "1", "--json", str(out)])
    rows = {r["operation"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"resume", "export", "extend", "crash reads"}
    for r in rows.values():
        assert r["on"] > 0 and r["off"] > 0 and len(r["on_all"]) == len(r["off_all"]) == 1
        assert abs(r["overhead"] - (r["on"] / r["off"] - 1)) < 1e-12
    assert _stage_data.VERIFY is True
