"""Instruction counts by valgrind's callgrind: a count file's total, and a private
PostgreSQL server run under callgrind, so that the instructions its backends spend can be
counted as exactly as the hub's own (``python -m benchmarks instructions``).

The server is a throwaway cluster (``postgres_cluster``) with autovacuum off (a worker that
wakes at its own moments would blur the count). Every process it forks stays under
callgrind and writes ``pg.<pid>`` when it exits; a backend's file therefore appears once
its client has disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.postgres_cluster import hand_to_server_user, throwaway_cluster
from benchmarks.harness.targets import TargetError

START_TIMEOUT_SECONDS = 120.0  # everything runs some 50 times slower under callgrind
DUMP_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class CountedServer:
    admin_url: str
    out_dir: Path


def callgrind_total(path: Path) -> int:
    """The total instruction count a callgrind output file reports."""
    match = re.search(r"^(?:summary|totals):\s*(\d+)", path.read_text(), re.MULTILINE)
    if match is None:
        raise TargetError(f"no instruction total in {path}")
    return int(match.group(1))


async def backends_total(out_dir: Path, pids: Iterable[int]) -> int:
    """The instructions of the backends ``pids``, summed from their callgrind files, waiting
    for each to be written (a backend writes its file as it exits)."""
    total = 0
    async with asyncio.timeout(DUMP_TIMEOUT_SECONDS):
        for pid in pids:
            # Written by another process: there is nothing to await but the file itself.
            while (count := _written_total(out_dir / f"pg.{pid}")) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.2)
            total += count
    return total


def _written_total(path: Path) -> int | None:
    """The file's total once callgrind has finished writing it (the total comes last)."""
    try:
        return callgrind_total(path)
    except (OSError, TargetError):
        return None


@asynccontextmanager
async def callgrind_postgres() -> AsyncIterator[CountedServer]:
    """Start the server under callgrind, yield its admin URL and where its counts go, then
    stop it and remove its directory."""
    if shutil.which("valgrind") is None:
        raise TargetError("valgrind is not installed (Debian: apt-get install valgrind)")
    root = Path(tempfile.mkdtemp(prefix="taskhub-callgrind-postgres-"))
    out_dir = root / "counts"
    out_dir.mkdir()
    hand_to_server_user(out_dir)
    wrapper = ["valgrind", "--tool=callgrind", "--trace-children=yes"]
    wrapper.append(f"--callgrind-out-file={out_dir}/pg.%p")
    cluster = throwaway_cluster(
        root,
        settings={"autovacuum": "off"},
        wrapper=wrapper,
        start_timeout=START_TIMEOUT_SECONDS,
        stop_timeout=START_TIMEOUT_SECONDS,
    )
    with contextlib.ExitStack() as stack:
        try:
            started = await asyncio.to_thread(stack.enter_context, cluster)
            yield CountedServer(started.url(), out_dir)
        finally:
            await asyncio.to_thread(stack.close)
