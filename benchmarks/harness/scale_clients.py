"""The scale benchmark's client processes (``benchmarks/apps/scale_sockets.py``), each
holding many raw Socket.IO sessions, so that the client side is not the bound.

``async with ClientProcesses(plans, token, workdir) as clients:`` starts one process per
plan and returns once every process has opened its sessions; ``await
clients.arrivals(task_id)`` gives the watched room's arrival times of a task's event
(``time.monotonic``, shared by the machine's processes) once every watching process has
reported it; ``await clients.close()`` closes the sessions and returns each process's
closing report. The processes are killed if the block is left otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from benchmarks.harness.cpu import process_cpu_seconds
from benchmarks.harness.targets import REPO_ROOT

APP = "benchmarks.apps.scale_sockets"
TOKEN_ENV = "TASKHUB_BENCH_TOKEN"
READY_TIMEOUT_SECONDS = 900.0  # thousands of sessions per process on a loaded machine
ARRIVAL_TIMEOUT_SECONDS = 60.0  # a task's event at every watching session
LINE_LIMIT = 16 * 1024 * 1024  # a report line holds a time per watching session


class ClientError(RuntimeError):
    """A client process failed (its message carries the end of its log)."""


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """``count`` items in ``parts`` contiguous runs as even as can be: ``(first, size)``
    each, empty runs left out."""
    runs, first = [], 0
    for part in range(parts):
        size = count // parts + (part < count % parts)
        if size:
            runs.append((first, size))
        first += size
    return runs


class ClientProcesses:
    """One ``scale_sockets`` process per plan (see the app's docstring for the plans)."""

    def __init__(self, plans: Sequence[dict[str, Any]], token: str, workdir: Path) -> None:
        self.plans = list(plans)
        self.token = token
        self.logs = [workdir / f"scale-client-{index}.log" for index in range(len(plans))]
        self.procs: list[asyncio.subprocess.Process] = []
        self.watching: list[int] = []
        self._arrivals: dict[str, list[float]] = defaultdict(list)
        self._reports: dict[str, int] = defaultdict(int)
        self._complete: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._closing: list[dict[str, Any]] = []
        self._readers: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> ClientProcesses:
        env = {**os.environ, TOKEN_ENV: self.token}
        try:
            for plan, log in zip(self.plans, self.logs, strict=True):
                with log.open("ab") as errors:
                    proc = await asyncio.create_subprocess_exec(
                        *(sys.executable, "-m", APP),
                        cwd=REPO_ROOT,
                        env=env,
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=errors,
                        limit=LINE_LIMIT,
                    )
                self.procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(orjson.dumps(plan) + b"\n")
                await proc.stdin.drain()
            for index in range(len(self.procs)):
                ready = await self._line(index)
                self.watching.append(int(ready["watching"]))
        except BaseException:
            await self._kill()
            raise
        self._readers = [asyncio.create_task(self._read(index)) for index in range(len(self.procs))]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._kill()

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def cpu_seconds(self) -> float | None:
        """CPU time so far of every client process together."""
        readings = [process_cpu_seconds(pid) for pid in self.pids()]
        return None if None in readings else sum(r for r in readings if r is not None)

    async def arrivals(self, task_id: str) -> list[float]:
        """The arrival times of ``task_id``'s event at every watching session."""
        try:
            await asyncio.wait_for(self._complete[task_id].wait(), ARRIVAL_TIMEOUT_SECONDS)
        except TimeoutError:
            got = len(self._arrivals.get(task_id, []))
            raise ClientError(f"{got}/{sum(self.watching)} sessions had {task_id}") from None
        self._complete.pop(task_id)
        self._reports.pop(task_id)
        return self._arrivals.pop(task_id)

    async def close(self) -> list[dict[str, Any]]:
        """Close every process's sessions; their closing reports."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        await asyncio.wait_for(asyncio.gather(*self._readers), READY_TIMEOUT_SECONDS)
        for index, proc in enumerate(self.procs):
            if await proc.wait() != 0:
                raise ClientError(
                    f"client {index} exited with {proc.returncode}: {self._tail(index)}"
                )
        return self._closing

    async def _line(self, index: int) -> dict[str, Any]:
        stdout = self.procs[index].stdout
        assert stdout is not None
        raw = await asyncio.wait_for(stdout.readline(), READY_TIMEOUT_SECONDS)
        if not raw:
            raise ClientError(f"client {index} ended: {self._tail(index)}")
        line: dict[str, Any] = orjson.loads(raw)
        if "error" in line:
            raise ClientError(f"client {index}: {line['error']} {self._tail(index)}")
        return line

    async def _read(self, index: int) -> None:
        """A process's reports after it is ready: arrivals, then its closing line."""
        stdout = self.procs[index].stdout
        assert stdout is not None
        while raw := await stdout.readline():
            line = orjson.loads(raw)
            if "task" in line:
                task_id = line["task"]
                self._arrivals[task_id] += line["at"]
                self._reports[task_id] += 1
                if self._reports[task_id] == sum(count > 0 for count in self.watching):
                    self._complete[task_id].set()
            elif "closed" in line:
                self._closing.append(line)
            elif "error" in line:
                raise ClientError(f"client {index}: {line['error']}")

    def _tail(self, index: int) -> str:
        text = self.logs[index].read_text(errors="replace") if self.logs[index].exists() else ""
        return "\n".join(text.splitlines()[-15:])

    async def _kill(self) -> None:
        for reader in self._readers:
            reader.cancel()
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
