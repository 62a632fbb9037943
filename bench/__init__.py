"""Benchmarks: each compares against plain runc in the same run and prints medians and ratios."""
