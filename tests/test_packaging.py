"""The package's shape (issue 73): what installs, how big a module may grow, where the
layers are checked."""

from __future__ import annotations

import tomllib
from pathlib import Path

import npkl_dist

ROOT = Path(npkl_dist.__file__).resolve().parent.parent
MAX_MODULE_LINES = 1200


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_is_installed():
    """pyproject's explicit package list (needed for the flows/ -> npkl_flows mapping) names
    every package of the tree and nothing else, so a new sub-package cannot be left out of
    the wheel."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    tree = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "npkl_dist").rglob("__init__.py")
    }
    assert listed == tree | {"npkl_flows"}


def test_flows_installs_under_a_name_that_cannot_collide():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"npkl_flows": "flows"}
    assert "flows" not in setuptools["packages"]
    assert _pyproject()["project"]["scripts"]["npkl"] == "npkl_flows.cli:main"


def test_no_module_over_the_size_limit():
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for d in ("npkl_dist", "flows")
        for p in (ROOT / d).rglob("*.py")
    }
    over = {k: v for k, v in sizes.items() if v > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_layer_contracts_are_declared():
    """`make test` runs lint-imports on these; the contracts must keep covering the layers."""
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    kinds = {c["type"] for c in contracts}
    assert {"layers", "forbidden", "acyclic_siblings"} <= kinds
    layers = next(c for c in contracts if c["name"].startswith("Library layers"))["layers"]
    for pkg in (
        "npkl_dist.job",
        "npkl_dist.executors",
        "npkl_dist.store",
        "npkl_dist.solvers",
        "npkl_dist.linalg",
    ):
        assert any(pkg in layer.split(" | ") for layer in layers), pkg
