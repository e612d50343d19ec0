"""Replication of the NPKL papers' clustering tables (data sets, published numbers, runner)."""
