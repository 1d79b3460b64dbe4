"""Benchmarks (see README.md)."""
