"""Ending a helper process of the tests (a balancer, a pooler): ``terminate`` lives in
``benchmarks/harness/servers.py``, shared with the benchmarks' balancer."""

from __future__ import annotations

from benchmarks.harness.servers import terminate

__all__ = ["terminate"]
