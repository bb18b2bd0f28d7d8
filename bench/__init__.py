"""Benchmarks for issue 7: scripts that print ratios (never timed unit tests)."""
