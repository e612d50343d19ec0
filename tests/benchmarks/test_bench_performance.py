"""docs/performance.md is generated from bench/results/ (bench/performance.py): the committed
page equals the regenerated one and stays within its length, a benchmark's stamped JSON
(bench/_results.py) becomes its table, and bench/README.md lists every script in bench/."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench import _results, performance  # noqa: E402


def test_committed_page_equals_the_regenerated_one(tmp_path):
    out = tmp_path / "performance.md"
    assert performance.main(["--out", str(out)]) == 0
    text = out.read_text()
    assert text == performance.PAGE.read_text(), (
        "docs/performance.md is stale: run `python -m bench.performance` and commit it"
    )
    assert text.count("\n") <= performance.MAX_LINES == 300
    assert performance.main(["--check"]) == 0


def test_every_results_table_is_on_the_page():
    page = performance.PAGE.read_text()
    tables = [json.loads(p.read_text()) for p in sorted(performance.RESULTS.glob("*.json"))]
    tables = [t for t in tables if t.get("columns")]
    assert len(tables) >= 10
    for t in tables:
        assert f"## {t['title']}\n" in page
        assert f"`{t['command']}`" in page


def _write(tmp_path, name, **kw):
    fields = dict(
        title=f"Title of {name}",
        measures="seconds per widget",
        reference="the reference widget in the same run",
        command=f"python bench/{name}.py --n 3",
        columns=[("a", "A"), ("b", "B s")],
        rows=[{"a": 1000000, "b": 0.1511}, {"a": 2, "b": None}],
        notes=["a note"],
    )
    fields.update(kw)
    return _results.write(name, path=tmp_path / f"{name}.json", **fields)


def test_a_benchmarks_json_becomes_its_table(tmp_path):
    path = _write(tmp_path, "sweep")
    got = json.loads(path.read_text())
    # stamped with the machine, the commit and the date it was measured on
    assert got["machine"] and got["date"].endswith("UTC") and "commit" in got
    assert got["columns"] == [["a", "A"], ["b", "B s"]]
    (tmp_path / "curves.json").write_text(json.dumps({"cases": []}))  # figure data: no table
    text = performance.render(tmp_path)
    assert "## Title of sweep\n" in text and "`python bench/sweep.py --n 3`" in text
    assert f"commit {got['commit']}" in text and got["machine"] in text
    assert "| A | B s |" in text
    assert "| 1,000,000 | 0.1511 |" in text and "| 2 | - |" in text
    assert "- a note" in text and "curves" not in text


def test_sections_follow_the_benchmark_order(tmp_path):
    for name in ("pipeline_1000", "block_gap_1000", "block_1000", "sweep", "zzz"):
        _write(tmp_path, name)
    text = performance.render(tmp_path)
    heads = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert heads == [
        f"Title of {n}" for n in ("sweep", "block_1000", "block_gap_1000", "pipeline_1000", "zzz")
    ]


def test_a_stale_or_long_page_is_refused(tmp_path, capsys):
    _write(tmp_path, "sweep")
    out = tmp_path / "page.md"
    assert performance.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    assert performance.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 0
    _write(tmp_path, "sweep", rows=[{"a": 3, "b": 0.2}])  # a new measurement
    assert performance.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    _write(tmp_path, "admm", rows=[{"a": k, "b": 1.0} for k in range(300)])
    assert performance.main(["--results", str(tmp_path), "--out", str(out)]) == 1
    assert "more than 300" in capsys.readouterr().err


@pytest.mark.parametrize(
    "value, cell",
    [
        (None, "-"),
        (True, "yes"),
        (12345, "12,345"),
        (0.0, "0"),
        (7661.7, "7,661.7"),
        (0.0071, "0.0071"),
        (2.0, "2.0"),
        (3.2e-06, "3.2e-06"),
        ("a|b", "a\\|b"),
        ([3.2, 3.8], "3.2, 3.8"),
    ],
)
def test_cells(value, cell):
    assert performance._cell(value) == cell


def test_bench_readme_lists_every_script():
    readme = (ROOT / "bench" / "README.md").read_text()
    scripts = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "bench").rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
        and not any(
            part.startswith(".") or part == "__pycache__" for part in p.relative_to(ROOT).parts
        )
    )
    assert len(scripts) > 20
    missing = [s for s in scripts if f"`{s}`" not in readme]
    assert not missing, f"bench/README.md does not list {missing}"
