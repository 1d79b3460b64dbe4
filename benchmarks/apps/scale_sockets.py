"""One client process of the scale benchmark's sockets and workers dimensions: many raw
Socket.IO sessions (``benchmarks/harness/sockets.py``), so that several such processes,
not one, carry the client's side.

    TASKHUB_BENCH_TOKEN=… python -m benchmarks.apps.scale_sockets < plan

Reads its plan, one JSON line, from stdin, opens its sessions (each signed in with the
token), prints ``{"ready": n, "watching": k}`` and then works until stdin closes; then
closes its sessions and prints ``{"closed": true}`` (workers: with ``pushed``, the tasks
pushed to them, and ``failed_updates``, the pushes whose update or new grant failed).

- ``{"mode": "watchers", "count": n, "first": g, "rooms": [...], "urls": [...],
  "watch": room, "deflate": true}``: session ``j`` is the scale's socket ``g + j``; it
  joins ``rooms[(g + j) % len(rooms)]`` on ``urls[(g + j) // len(rooms) % len(urls)]`` (a
  room's sockets alternate between replicas). Each ``task_status_event`` of a ``pending``
  task in ``watch`` is timed (``time.monotonic``, which every process of the machine
  shares) as it is read; once each of the ``k`` sessions watching that room has it, one
  line ``{"task": id, "at": [seconds, …]}``.
- ``{"mode": "workers", "urls": [...], "workers": [[worker_id, job_name], …]}``: a session
  per worker (on ``urls`` in turn) joins its job room and grants the hub one slot
  (``worker_ready``); each task pushed to it (``task_pushed``) is completed over the
  socket (``task_update``) and the slot granted again.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import defaultdict
from typing import Any

import orjson

from benchmarks.harness.sockets import Session, SessionError, close_sessions, open_in_batches

TOKEN_ENV = "TASKHUB_BENCH_TOKEN"


def say(line: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()


class Watchers:
    """Sessions in rooms; the watched room's task events timed at each of its sessions."""

    def __init__(self, plan: dict[str, Any]) -> None:
        rooms, urls, first = plan["rooms"], plan["urls"], plan["first"]
        self.watch: str = plan["watch"]
        self.placed = [
            (urls[(first + j) // len(rooms) % len(urls)], rooms[(first + j) % len(rooms)])
            for j in range(plan["count"])
        ]
        self.sessions = [
            Session(url, deflate=plan["deflate"], on_event=self.heard) for url, _ in self.placed
        ]
        self.watching = sum(room == self.watch for _, room in self.placed)
        self.arrivals: dict[str, list[float]] = defaultdict(list)

    async def open(self, token: str) -> None:
        rooms = {
            id(session): room for session, (_, room) in zip(self.sessions, self.placed, strict=True)
        }

        async def opened(session: Session) -> None:
            await session.open(token)
            room = rooms[id(session)]
            ack = await session.call("room_join", {"room_id": room})
            if ack != {"room_id": room}:
                raise SessionError(f"room_join refused: {ack}")

        await open_in_batches(self.sessions, opened)

    def heard(self, _session: Session, event: str, data: Any) -> None:
        at = time.monotonic()
        if event != "task_status_event" or data.get("room_id") != self.watch:
            return
        if data.get("status") != "pending":
            return
        times = self.arrivals[data["id"]]
        times.append(at)
        if len(times) == self.watching:
            say({"task": data["id"], "at": self.arrivals.pop(data["id"])})


class Workers:
    """A session per worker, holding a push grant of one slot, completing what it gets."""

    def __init__(self, plan: dict[str, Any]) -> None:
        urls = plan["urls"]
        self.workers: list[tuple[str, str]] = [tuple(pair) for pair in plan["workers"]]
        self.sessions = [
            Session(urls[index % len(urls)], deflate=False, on_event=self.heard)
            for index in range(len(self.workers))
        ]
        self.pushed = 0
        self.failed_updates = 0
        self._running: set[asyncio.Task[None]] = set()

    async def open(self, token: str) -> None:
        workers = {id(s): worker for s, worker in zip(self.sessions, self.workers, strict=True)}

        async def opened(session: Session) -> None:
            await session.open(token)
            worker_id, job_name = workers[id(session)]
            joined = await session.call(
                "join_job_room", {"job_name": job_name, "worker_id": worker_id}
            )
            if joined != {"job_name": job_name, "worker_id": worker_id}:
                raise SessionError(f"join_job_room refused: {joined}")
            await self.grant(session, worker_id, 1)

        await open_in_batches(self.sessions, opened)

    async def grant(self, session: Session, worker_id: str, slots: int) -> None:
        ack = await session.call("worker_ready", {"worker_id": worker_id, "slots": slots})
        if "slots" not in ack:
            raise SessionError(f"worker_ready refused: {ack}")

    def heard(self, session: Session, event: str, data: Any) -> None:
        if event == "task_pushed":
            run = asyncio.create_task(self.complete(session, data))
            self._running.add(run)
            run.add_done_callback(self._running.discard)

    async def complete(self, session: Session, pushed: dict[str, Any]) -> None:
        """Complete the pushed tasks and grant their slots again; a refusal or a lost
        session counts as a failed update (and is logged on stderr)."""
        tasks = pushed["tasks"]
        self.pushed += len(tasks)
        try:
            for task in tasks:
                token = task["claim_token"]
                update = {"task_id": task["id"], "status": "completed", "claim_token": token}
                answer = await session.call("task_update", update)
                if answer.get("status") != "completed":
                    raise SessionError(f"task_update refused: {answer}")
            await self.grant(session, pushed["worker_id"], len(tasks))
        except (SessionError, TimeoutError) as exc:
            self.failed_updates += 1
            print(f"scale_sockets: {exc!r}", file=sys.stderr, flush=True)


async def serve(plan: dict[str, Any], token: str) -> None:
    clients = Watchers(plan) if plan["mode"] == "watchers" else Workers(plan)
    try:
        await clients.open(token)
        say({"ready": len(clients.sessions), "watching": getattr(clients, "watching", 0)})
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await close_sessions(clients.sessions)
    closed: dict[str, Any] = {"closed": True}
    if isinstance(clients, Workers):
        closed.update(pushed=clients.pushed, failed_updates=clients.failed_updates)
    say(closed)


def main() -> None:
    plan = orjson.loads(sys.stdin.readline())
    try:
        asyncio.run(serve(plan, os.environ[TOKEN_ENV]))
    except Exception as exc:
        say({"error": repr(exc)})
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
