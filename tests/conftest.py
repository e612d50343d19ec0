"""Shared fixtures of the test suite."""

from __future__ import annotations

import os

import pytest


def _global_seeds():
    """Seeds of ``global_random_seed`` (scikit-learn's convention).

    ``NPKL_TESTS_GLOBAL_RANDOM_SEED`` may be a single seed (``7``), a list (``1,5,9``), an
    inclusive range (``0-19``) or ``all`` (0-99). Default: 42.
    """
    spec = os.environ.get("NPKL_TESTS_GLOBAL_RANDOM_SEED", "42").strip()
    if spec == "all":
        return list(range(100))
    if "-" in spec:
        lo, hi = (int(s) for s in spec.split("-", 1))
        return list(range(lo, hi + 1))
    return [int(s) for s in spec.split(",") if s.strip()]


@pytest.fixture(params=_global_seeds(), ids=lambda s: f"seed{s}")
def global_random_seed(request):
    """A seed every random test must pass with; run many with NPKL_TESTS_GLOBAL_RANDOM_SEED."""
    return request.param
