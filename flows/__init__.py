"""Orchestration of npkl-dist: the ``npkl`` command line now, Prefect flows later.

Thin: no numerics here. Prefect is imported only by the flow modules that need it.
"""
