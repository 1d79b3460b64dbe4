"""Benchmarks (see README.md): ``scenarios`` (``python -m benchmarks <scenario>``),
``harness`` (what they share) and ``apps`` (what they run as processes of their own)."""
