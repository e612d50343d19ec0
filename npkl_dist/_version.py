"""The package version (one place: the root re-exports it, the run store records it)."""

__version__ = "0.1.0"
