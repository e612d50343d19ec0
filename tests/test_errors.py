"""Advice in the syntax of the interface in use (npkl_dist._errors.fix / interface)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from npkl_dist._errors import current_interface, fix, interface

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_fix_follows_the_interface_and_restores_it():
    args = ("max_sweeps=1000", "--max-sweeps 1000", "[model] max_sweeps = 1000")
    assert fix(*args) == "max_sweeps=1000"
    with interface("cli"):
        assert fix(*args) == "--max-sweeps 1000"
        with interface("toml"):
            assert fix(*args) == "[model] max_sweeps = 1000"
        assert current_interface() == "cli"
    assert current_interface() == "python"
    with pytest.raises(ValueError, match="interface: 'gui' is not one of"):
        with interface("gui"):
            pass


def test_library_messages_do_not_mix_syntaxes():
    """No string literal of the library writes a command-line flag and a Python keyword for
    the same fix side by side ('(npkl fit --x, [model] x, x=...)'): fixes go through fix()."""
    offenders = []
    for path in (ROOT / "npkl_dist").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and "npkl fit --" in node.value
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
