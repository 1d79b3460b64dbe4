"""What every peer program shares: the no-op job's record of its start, and the command
line (``setup``, ``work``, ``enqueue``) with the enqueuer's stdin/stdout protocol.

Configuration comes from the environment the benchmark sets: ``BENCH_PEERS_URL`` (the
database or Redis the system uses), ``BENCH_PEERS_QUEUE`` (a name of the run's own),
``BENCH_PEERS_STARTS`` (the file each job appends its start to) and
``BENCH_PEERS_CONCURRENCY`` (the worker's slots, the enqueuers at once).

The enqueuer connects, prints ``{"ready": true}``, then reads one JSON command a line:
``{"tag", "count", "rate", "retry"}``: submit ``count`` jobs ``(tag, 0..count-1)`` from
``BENCH_PEERS_CONCURRENCY`` concurrent enqueuers, as fast as they go or paced to ``rate``
a second in all, each retried on failure if ``retry`` (a worker not ready yet); it answers
``{"sent": [...]}``, the ``time.time()`` taken just before each enqueue call, in job order.
End of input ends it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

Submit = Callable[[str, int], Awaitable[object]]
RETRY_SECONDS = 0.2

_starts_fd: int | None = None


def setting(name: str) -> str:
    value = os.environ.get(f"BENCH_PEERS_{name}")
    if not value:
        raise SystemExit(f"BENCH_PEERS_{name} is not set")
    return value


def concurrency() -> int:
    return int(setting("CONCURRENCY"))


def record_start(tag: str, seq: int) -> None:
    """The job's whole work: append ``tag seq time.time()`` to the starts file (one
    ``O_APPEND`` write, atomic for a line this short)."""
    global _starts_fd
    now = time.time()
    if _starts_fd is None:
        _starts_fd = os.open(setting("STARTS"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_starts_fd, f"{tag} {seq} {now:.6f}\n".encode())


class Peer(Protocol):
    """One system's side of the benchmark."""

    async def setup(self) -> None:
        """Create what its queue needs (a schema), before any worker or enqueuer runs."""

    async def work(self, slots: int) -> None:
        """Run one worker with ``slots`` jobs at once until cancelled."""

    async def open_submitters(self, count: int) -> Sequence[Submit]:
        """``count`` enqueue functions, one per concurrent enqueuer, connected."""

    async def close(self) -> None:
        """Close what ``open_submitters`` opened."""


async def _submit_all(
    submitters: Sequence[Submit], tag: str, count: int, rate: float | None, retry: bool
) -> list[float]:
    sent = [0.0] * count
    indexes = iter(range(count))
    start = time.perf_counter()

    async def enqueuer(submit: Submit) -> None:
        for seq in indexes:
            if rate is not None:
                delay = start + seq / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            while True:
                sent[seq] = time.time()
                try:
                    await submit(tag, seq)
                    break
                except Exception:
                    if not retry:
                        raise
                    await asyncio.sleep(RETRY_SECONDS)

    await asyncio.gather(*(enqueuer(submit) for submit in submitters))
    return sent


async def _enqueue(peer: Peer) -> None:
    submitters = await peer.open_submitters(concurrency())
    loop = asyncio.get_running_loop()
    try:
        print(json.dumps({"ready": True}), flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command: dict[str, Any] = json.loads(line)
            sent = await _submit_all(
                submitters,
                command["tag"],
                command["count"],
                command.get("rate"),
                bool(command.get("retry")),
            )
            print(json.dumps({"sent": sent}), flush=True)
    finally:
        await peer.close()


async def _work(peer: Peer) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await peer.work(concurrency())


COMMANDS = ("setup", "work", "enqueue")


def main(peer: Peer, commands: Sequence[str] = COMMANDS, argv: list[str] | None = None) -> None:
    """Run one of ``commands``: ``setup``, ``work`` (until SIGTERM) or ``enqueue`` (until
    end of input)."""
    command = (sys.argv[1:] if argv is None else argv)[:1]
    actions: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
        "setup": peer.setup,
        "work": lambda: _work(peer),
        "enqueue": lambda: _enqueue(peer),
    }
    if not command or command[0] not in commands:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(commands)}")
    asyncio.run(actions[command[0]]())
