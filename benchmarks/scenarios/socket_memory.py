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
import os
from typing import Any

from benchmarks.harness.cli import choices, raise_fd_limit, run_command, scenario_parser
from benchmarks.harness.cpu import rss_kib
from benchmarks.harness.report import Results, emit, log, markdown_table
from benchmarks.harness.sockets import close_sessions, open_sessions, websocket_url
from benchmarks.harness.targets import Target, TargetOptions, hub_target

KINDS = ("authenticated", "pending")
SETTLE_SECONDS = 1.0  # after the last socket, before RSS is read (late allocations)


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
    url = websocket_url(target.base_url)
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
