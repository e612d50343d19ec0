"""Benchmarks of npkl-dist (not installed; run from a checkout)."""
