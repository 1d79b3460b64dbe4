"""The hub's memory per connected socket.

Starts ``taskhub serve`` on a fresh SQLite database, opens ``--sockets`` raw websocket
sessions (``/socket.io/?EIO=4&transport=websocket``) and reads the server's resident memory
(``VmRSS`` of ``/proc/<pid>/status``) before and after; prints KiB per socket. Kinds:

- ``authenticated``: each session completes a Socket.IO CONNECT with the admin token (a
  superuser: not held to ``TASKHUB_USER_MAX_SOCKETS``) and joins one room, as a browser
  page does;
- ``pending``: each session stays before sign-in (no CONNECT), the state the hub closes
  after ``TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS``: here the timeout and the per-address
  cap are raised so that all of them stay while measured.

Clients offer permessage-deflate as browsers do (the hub's uvicorn accepts it: about
40 KiB of zlib state per socket); ``--no-deflate`` measures clients that do not, as
python-socketio's (aiohttp) does not.

A warm-up of ``--warmup`` sessions of the same kind, closed again, comes first, so that
what the first sessions allocate once (imports, caches, the allocator's first arenas) is
not charged to the measured ones. Clients answer the server's pings, so the sessions stay
open however long the run takes.

    .venv/bin/python -m benchmarks socket_memory
    .venv/bin/python -m benchmarks socket_memory --sockets 2000 --kinds authenticated
    .venv/bin/python -m benchmarks socket_memory --no-deflate
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import websockets

from benchmarks.harness.cli import choices, raise_fd_limit, run_command, scenario_parser
from benchmarks.harness.report import Results, emit, log, markdown_table
from benchmarks.harness.targets import Target, TargetOptions, hub_target

KINDS = ("authenticated", "pending")
SETTLE_SECONDS = 1.0  # after the last socket, before RSS is read (late allocations)
BATCH = 50  # sessions opened at once


def rss_kib(pid: int) -> int:
    """The process's resident set (``VmRSS``) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


class Session:
    """One raw Engine.IO websocket session: opened, optionally signed in (Socket.IO
    CONNECT) and in one room, answering pings until closed."""

    def __init__(self, url: str, deflate: bool) -> None:
        self.url = url
        self.deflate = deflate
        self.ws: Any = None
        self._pong: asyncio.Task[None] | None = None

    async def open(self, token: str | None, room: str) -> None:
        compression = "deflate" if self.deflate else None
        self.ws = await websockets.connect(
            self.url, max_size=None, open_timeout=30, compression=compression
        )
        opening = await self.ws.recv()
        assert isinstance(opening, str) and opening.startswith("0"), opening
        if token is not None:
            await self.ws.send("40" + json.dumps({"token": token}))
            answer = await self._next_message()
            assert answer.startswith("40"), answer
            await self.ws.send(f'421["room_join",{{"room_id":"{room}"}}]')
            ack = await self._next_message()
            assert ack.startswith("431"), ack
        self._pong = asyncio.create_task(self._answer_pings())

    async def _next_message(self) -> str:
        """The next Socket.IO message, answering pings that come first."""
        while True:
            message = await self.ws.recv()
            if message == "2":
                await self.ws.send("3")
                continue
            return str(message)

    async def _answer_pings(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self.ws:
                if message == "2":
                    await self.ws.send("3")

    async def close(self) -> None:
        if self._pong is not None:
            self._pong.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pong
        if self.ws is not None:
            await self.ws.close()


async def open_sessions(
    url: str, count: int, token: str | None, room: str, deflate: bool
) -> list[Session]:
    sessions = []
    for start in range(0, count, BATCH):
        batch = [Session(url, deflate) for _ in range(min(BATCH, count - start))]
        await asyncio.gather(*(session.open(token, room) for session in batch))
        sessions += batch
    return sessions


async def close_sessions(sessions: list[Session]) -> None:
    await asyncio.gather(*(session.close() for session in sessions))


async def measure(
    kind: str, sockets: int, warmup: int, deflate: bool, options: TargetOptions
) -> dict[str, Any]:
    """Start a hub, warm up, open ``sockets`` sessions of ``kind``: the RSS per session."""
    async with hub_target("sqlite", options) as target:
        return await _measure_on(target, kind, sockets, warmup, deflate)


async def _measure_on(
    target: Target, kind: str, sockets: int, warmup: int, deflate: bool
) -> dict[str, Any]:
    assert target.pid is not None
    url = target.base_url.replace("http://", "ws://") + "/socket.io/?EIO=4&transport=websocket"
    token = target.token if kind == "authenticated" else None
    warm = await open_sessions(url, warmup, token, "bench-memory", deflate)
    await close_sessions(warm)
    await asyncio.sleep(SETTLE_SECONDS)
    before = rss_kib(target.pid)
    sessions = await open_sessions(url, sockets, token, "bench-memory", deflate)
    try:
        await asyncio.sleep(SETTLE_SECONDS)
        after = rss_kib(target.pid)
    finally:
        await close_sessions(sessions)
    return {
        "scenario": "socket_memory",
        "kind": kind,
        "deflate": deflate,
        "sockets": sockets,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_socket": round((after - before) / sockets, 1),
    }


def render(results: Results) -> str:
    rows = [
        (
            r["kind"],
            "yes" if r["deflate"] else "no",
            r["sockets"],
            r["rss_before_kib"],
            r["rss_after_kib"],
            r["kib_per_socket"],
        )
        for r in results
        if not r.get("error")
    ]
    headers = (
        "kind",
        "deflate",
        "sockets",
        "RSS before (KiB)",
        "RSS after (KiB)",
        "KiB per socket",
    )
    return markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = scenario_parser("socket_memory", __doc__)
    parser.add_argument("--sockets", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--kinds",
        type=choices(KINDS, "kinds"),
        default=list(KINDS),
        help="comma-separated: " + ", ".join(KINDS),
    )
    parser.add_argument(
        "--no-deflate",
        dest="deflate",
        action="store_false",
        help="clients do not offer permessage-deflate",
    )
    args = parser.parse_args(argv)
    if args.sockets < 1 or args.warmup < 0:
        parser.error("--sockets must be at least 1, --warmup at least 0")
    # The hub inherits these (``benchmarks.harness.targets`` passes the environment on).
    os.environ["TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS"] = "300"
    os.environ["TASKHUB_MAX_UNAUTHENTICATED_PER_ADDRESS"] = str(args.sockets + args.warmup)
    raise_fd_limit(2 * (args.sockets + args.warmup) + 256)

    async def work(options: TargetOptions, results: Results) -> None:
        for kind in args.kinds:
            log(f"socket_memory: {kind}, {args.sockets} sockets")
            try:
                result = await measure(kind, args.sockets, args.warmup, args.deflate, options)
            except Exception as exc:  # reported, the other kinds still run
                result = {"scenario": "socket_memory", "kind": kind, "error": repr(exc)}
            results.append(emit(result))

    return run_command(args, "socket-memory", work, render)


if __name__ == "__main__":
    raise SystemExit(main())
