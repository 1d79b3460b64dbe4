"""The scenarios, one module each, each with its own command line:
``python -m benchmarks <scenario> --help`` (or ``python -m benchmarks.scenarios.<scenario>``).
``suite`` runs several of them at once (``python -m benchmarks``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

# name: what it measures (``python -m benchmarks --help`` lists them).
COMMANDS = {
    "throughput": "end-to-end tasks/s of HTTP workers, against the ceiling app",
    "realtime": "long-poll wake-ups, task_available and room fan-out latency",
    "backlog": "get, submit and claim with a deep queue",
    "documents": "big payloads, results and schemas, and a bystander meanwhile",
    "dashboard": "the room dashboard's reads over a big room",
    "fair": "a fair-by-submitter job next to a FIFO one",
    "logs": "task logs of a real worker, and what logging costs",
    "sdk": "real SDK and zndraw-joblib worker processes at full speed",
    "instructions": "instructions per task cycle, counted by callgrind",
    "chaos": "faults under load: lost tasks, double outcomes, recovery",
    "floods": "another user's service while one user floods the hub",
    "providers": "provider reads, cached and round trips, against zndraw-joblib's server",
    "socket_memory": "the hub's memory per connected socket",
    "scale": "thousands of sockets and workers, a long history, a long run",
    "versus": "the throughput of two checkouts side by side",
    "peers": "Taskhub against procrastinate, PgQueuer, SAQ and taskiq",
}


def scenario_main(name: str) -> Callable[[list[str] | None], int]:
    """The ``main`` of scenario ``name`` (imported only now: each has its own imports)."""
    module = importlib.import_module(f"benchmarks.scenarios.{name}")
    main: Callable[[list[str] | None], int] = module.main
    return main
