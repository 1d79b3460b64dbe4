"""Another user's service while one user floods the hub.

For each flood, a fresh hub (``taskhub serve``) and two users: a *bystander* who, in a loop,
reads a task of hers and submits a small one, and a *flooder*. First a quiet phase, then the
same loop while the flooder runs one of:

* ``preauth``: Engine.IO sessions that never send the Socket.IO CONNECT (no token at all);
* ``binary``: a signed-in socket announcing a binary event, then 1 MB frames;
* ``validations``: costly payloads, submitted and through ``@internal:analysis:ValidatePayload``;
* ``sockets``: as many signed-in sockets as the hub lets one user hold;
* ``submits``: small tasks as fast as the hub takes them;
* ``wrongtokens``: requests with a wrong bearer token.

Printed per flood: the bystander's p50/p95/max per request kind, quiet and flooded, with her
errors (any answer other than the expected one); what the flood's requests got, by status;
the hub's RSS before, during and after.

    .venv/bin/python -m benchmarks floods                         # every flood, SQLite
    .venv/bin/python -m benchmarks floods --floods sockets,submits --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import socketio
import websockets

from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.report import Results, emit, percentile
from benchmarks.harness.targets import Target, TargetOptions, hub_target, taskhub_command
from taskhub.settings import Settings

API = "/v1/joblib"
ROOM = "floods"
POINT = {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}
POINTS_SCHEMA = {"type": "object", "properties": {"points": {"type": "array", "items": POINT}}}
COSTLY = {"points": [[1.5, 2.5, 3.5]] * 10_000}  # about 0.3 s of validation CPU
JOB = f"{ROOM}:modifiers:Points"
FLOODS = ("preauth", "binary", "validations", "sockets", "submits", "wrongtokens")
# Small enough for a two-core machine to run the flood and the hub at once.
HUB_ENV = {
    "TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS": "5",
    "TASKHUB_SWEEPER_ENABLED": "false",
    # The per-user limits at their defaults (the benchmarks' hubs have them off otherwise).
    **{
        f"TASKHUB_{name.upper()}": str(Settings.model_fields[name].default)
        for name in (
            "user_submit_rate",
            "user_max_pending_tasks",
            "user_max_stored_bytes",
            "user_max_sockets",
        )
    },
}


@dataclass
class User:
    name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Samples:
    """Latencies (ms) per request kind, and the answers that were not the expected one."""

    ms: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)

    def add(self, kind: str, started: float, ok: bool, status: str) -> None:
        self.ms.setdefault(kind, []).append((time.perf_counter() - started) * 1000)
        if not ok:
            self.errors[f"{kind} {status}"] += 1

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind, values in self.ms.items():
            p50, p95 = percentile(values, 50), percentile(values, 95)
            out[kind] = {
                "n": len(values),
                "p50_ms": None if p50 is None else round(p50, 1),
                "p95_ms": None if p95 is None else round(p95, 1),
                "max_ms": round(max(values), 1),
            }
        out["errors"] = dict(self.errors)
        return out


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def create_user(target: Target, name: str) -> User:
    """``taskhub users create`` on the hub's database: the token is the last line."""
    env = {**os.environ, "TASKHUB_DATABASE_URL": target.database_url or ""}
    out = subprocess.run(
        [*taskhub_command(), "users", "create", name],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return User(name, out.stdout.strip().splitlines()[-1].strip())


async def prepare(http: httpx.AsyncClient, bystander: User) -> str:
    """The job (registered by the bystander) and one task of hers to read; its id."""
    body = {"category": "modifiers", "name": "Points", "schema": POINTS_SCHEMA}
    answer = await http.put(f"{API}/rooms/{ROOM}/jobs", json=body, headers=bystander.headers)
    answer.raise_for_status()
    answer = await http.post(
        f"{API}/rooms/{ROOM}/tasks/{JOB}", json={"payload": {}}, headers=bystander.headers
    )
    answer.raise_for_status()
    return str(answer.json()["id"])


async def bystander_loop(
    http: httpx.AsyncClient, user: User, task_id: str, samples: Samples, stop: asyncio.Event
) -> None:
    """Read her task, submit a small task, 20 times a second, until ``stop``."""
    while not stop.is_set():
        started = time.perf_counter()
        try:
            answer = await http.get(f"{API}/tasks/{task_id}", headers=user.headers)
            samples.add("read", started, answer.status_code == 200, str(answer.status_code))
        except httpx.HTTPError as exc:
            samples.add("read", started, False, type(exc).__name__)
        started = time.perf_counter()
        try:
            answer = await http.post(
                f"{API}/rooms/{ROOM}/tasks/{JOB}",
                json={"payload": {"points": [[1, 2, 3]]}},
                headers=user.headers,
            )
            samples.add("submit", started, answer.status_code == 202, str(answer.status_code))
        except httpx.HTTPError as exc:
            samples.add("submit", started, False, type(exc).__name__)
        await asyncio.sleep(0.05)


def ws_url(target: Target) -> str:
    return target.base_url.replace("http://", "ws://") + "/socket.io/?EIO=4&transport=websocket"


async def _hold_preauth(url: str, outcomes: Counter[str], stop: asyncio.Event) -> None:
    """One Engine.IO session that answers pings and never sends the Socket.IO CONNECT."""
    try:
        async with websockets.connect(url, max_size=None) as ws:
            outcomes["opened"] += 1
            while not stop.is_set():
                message = await ws.recv()
                if message == "2":
                    await ws.send("3")
    except websockets.ConnectionClosed:
        outcomes["closed by hub"] += 1
    except (OSError, websockets.InvalidStatus, websockets.InvalidHandshake) as exc:
        outcomes[f"refused: {type(exc).__name__}"] += 1


async def flood_preauth(
    target: Target, flooder: User, outcomes: Counter[str], stop: asyncio.Event, sessions: int
) -> None:
    holders = []
    for _ in range(sessions):
        if stop.is_set():
            break
        holders.append(asyncio.create_task(_hold_preauth(ws_url(target), outcomes, stop)))
        await asyncio.sleep(0.002)
    await stop.wait()
    for holder in holders:
        holder.cancel()
    await asyncio.gather(*holders, return_exceptions=True)


async def flood_binary(
    target: Target, flooder: User, outcomes: Counter[str], stop: asyncio.Event, frames: int
) -> None:
    """Sign in on a raw socket, announce a binary event of many attachments, send frames."""
    frame = b"\x00" * 1_000_000
    while not stop.is_set():
        try:
            async with websockets.connect(ws_url(target), max_size=None) as ws:
                await ws.recv()  # Engine.IO OPEN
                await ws.send("40" + json.dumps({"token": flooder.token}))
                while not str(await ws.recv()).startswith("40"):
                    pass
                await ws.send('4599999999-["room_join",{"_placeholder":true,"num":0}]')
                for _ in range(frames):
                    await ws.send(frame)
                    outcomes["frames sent"] += 1
                await asyncio.wait_for(ws.recv(), 5)
                outcomes["still open after frames"] += 1
        except websockets.ConnectionClosed:
            outcomes["closed by hub"] += 1
        except (OSError, TimeoutError, websockets.InvalidStatus) as exc:
            outcomes[f"error: {type(exc).__name__}"] += 1
        await asyncio.sleep(0.2)


async def flood_validations(
    target: Target, flooder: User, outcomes: Counter[str], stop: asyncio.Event, concurrency: int
) -> None:
    """Costly payloads, half by submit and half through ``ValidatePayload``."""
    internal = "@internal:analysis:ValidatePayload"

    async def one(http: httpx.AsyncClient, n: int) -> None:
        while not stop.is_set():
            body: dict[str, Any]
            if n % 2:
                url, body = f"{API}/rooms/{ROOM}/tasks/{JOB}", {"payload": COSTLY}
            else:
                url = f"{API}/rooms/{ROOM}/tasks/{internal}"
                body = {"payload": {"job": JOB, "payload": COSTLY}}
            try:
                answer = await http.post(url, json=body, headers=flooder.headers)
                outcomes[f"{'submit' if n % 2 else 'ValidatePayload'} {answer.status_code}"] += 1
                if answer.status_code in (429, 503):
                    await asyncio.sleep(float(answer.headers.get("Retry-After", "1")))
            except httpx.HTTPError as exc:
                outcomes[f"error: {type(exc).__name__}"] += 1

    async with httpx.AsyncClient(base_url=target.base_url, timeout=60) as http:
        await asyncio.gather(*(one(http, n) for n in range(concurrency)))


async def flood_sockets(
    target: Target, flooder: User, outcomes: Counter[str], stop: asyncio.Event, sockets: int
) -> None:
    clients: list[socketio.AsyncClient] = []
    for _ in range(sockets):
        if stop.is_set():
            break
        client = socketio.AsyncClient(reconnection=False)
        try:
            await client.connect(
                target.base_url, auth={"token": flooder.token}, transports=["websocket"]
            )
            clients.append(client)
            outcomes["connected"] += 1
        except socketio.exceptions.ConnectionError as exc:
            outcomes[f"refused: {str(exc)[:40]}"] += 1
    await stop.wait()
    await asyncio.gather(*(client.disconnect() for client in clients), return_exceptions=True)


async def flood_submits(
    target: Target, flooder: User, outcomes: Counter[str], stop: asyncio.Event, concurrency: int
) -> None:
    async def one(http: httpx.AsyncClient) -> None:
        while not stop.is_set():
            try:
                answer = await http.post(
                    f"{API}/rooms/{ROOM}/tasks/{JOB}",
                    json={"payload": {"points": [[1, 2, 3]]}},
                    headers=flooder.headers,
                )
                outcomes[str(answer.status_code)] += 1
            except httpx.HTTPError as exc:
                outcomes[f"error: {type(exc).__name__}"] += 1

    async with httpx.AsyncClient(base_url=target.base_url, timeout=60) as http:
        await asyncio.gather(*(one(http) for _ in range(concurrency)))


async def flood_wrongtokens(
    target: Target, flooder: User, outcomes: Counter[str], stop: asyncio.Event, concurrency: int
) -> None:
    async def one(http: httpx.AsyncClient) -> None:
        wrong = {"Authorization": f"Bearer th_{secrets.token_urlsafe(32)}"}
        while not stop.is_set():
            try:
                answer = await http.get(f"{API}/users/me", headers=wrong)
                outcomes[str(answer.status_code)] += 1
            except httpx.HTTPError as exc:
                outcomes[f"error: {type(exc).__name__}"] += 1

    async with httpx.AsyncClient(base_url=target.base_url, timeout=60) as http:
        await asyncio.gather(*(one(http) for _ in range(concurrency)))


Flood = Callable[[Target, User, Counter[str], asyncio.Event, int], Awaitable[None]]
FLOOD_RUNNERS: dict[str, tuple[Flood, int]] = {  # the runner and its size
    "preauth": (flood_preauth, 2000),
    "binary": (flood_binary, 200),
    "validations": (flood_validations, 8),
    "sockets": (flood_sockets, 400),
    "submits": (flood_submits, 16),
    "wrongtokens": (flood_wrongtokens, 16),
}


async def phase(
    target: Target,
    bystander: User,
    task_id: str,
    seconds: float,
    flood: Callable[[asyncio.Event], Awaitable[None]] | None,
) -> tuple[Samples, float | None]:
    """The bystander's loop for ``seconds`` (after a second of flood head start); the
    hub's RSS at the end, before the flood stops."""
    samples, stop = Samples(), asyncio.Event()
    flooding: asyncio.Future[None] | None = None
    if flood is not None:
        flooding = asyncio.ensure_future(flood(stop))
    if flooding is not None:
        await asyncio.sleep(1.0)
    async with httpx.AsyncClient(base_url=target.base_url, timeout=60) as http:
        loop_stop = asyncio.Event()
        loop = asyncio.create_task(bystander_loop(http, bystander, task_id, samples, loop_stop))
        await asyncio.sleep(seconds)
        loop_stop.set()
        await loop
    rss = rss_mib(target.pid)
    stop.set()
    if flooding is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(flooding, 30)
    return samples, rss


@contextlib.asynccontextmanager
async def flooded_hub(options: TargetOptions, engine: str) -> AsyncIterator[Target]:
    os.environ.update(HUB_ENV)  # the hub inherits them
    async with hub_target(engine, options) as target:
        yield target


async def run_flood(
    options: TargetOptions, args: argparse.Namespace, engine: str, name: str
) -> dict[str, Any]:
    runner, size = FLOOD_RUNNERS[name]
    async with flooded_hub(options, engine) as target:
        bystander = await asyncio.to_thread(create_user, target, "bystander")
        flooder = await asyncio.to_thread(create_user, target, "flooder")
        async with httpx.AsyncClient(base_url=target.base_url, timeout=60) as http:
            task_id = await prepare(http, bystander)
        rss_quiet_start = rss_mib(target.pid)
        quiet, _ = await phase(target, bystander, task_id, args.seconds, None)
        outcomes: Counter[str] = Counter()
        flooded, rss_flooded = await phase(
            target,
            bystander,
            task_id,
            args.seconds,
            lambda stop: runner(target, flooder, outcomes, stop, size),
        )
        await asyncio.sleep(2)
        return {
            "scenario": "floods",
            "engine": engine,
            "flood": name,
            "size": size,
            "quiet": quiet.summary(),
            "flooded": flooded.summary(),
            "flood_answers": dict(outcomes),
            "rss_mib": {
                "quiet": rss_quiet_start,
                "flooded": rss_flooded,
                "after": rss_mib(target.pid),
            },
        }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| engine | flood | bystander read p50 / p95 ms (quiet → flooded) "
        "| submit p50 / p95 ms (quiet → flooded) | bystander errors | flood answers "
        "| hub RSS MiB quiet / flooded / after |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        q, f = r["quiet"], r["flooded"]
        cells = []
        for kind in ("read", "submit"):
            cells.append(
                f"{q[kind]['p50_ms']} / {q[kind]['p95_ms']} → "
                f"{f[kind]['p50_ms']} / {f[kind]['p95_ms']}"
            )
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(r["flood_answers"].items()))
        errors = ", ".join(f"{k}: {v}" for k, v in f["errors"].items()) or "none"
        rss = r["rss_mib"]
        lines.append(
            f"| {r['engine']} | {r['flood']} | {cells[0]} | {cells[1]} | {errors} | {answers} "
            f"| {rss['quiet']} / {rss['flooded']} / {rss['after']} |"
        )
    return "\n".join(lines)


TARGETS = ("sqlite", "postgres")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = scenario_parser("floods", __doc__)
    parser.add_argument(
        "--targets",
        default=["sqlite"],
        type=choices(TARGETS, "targets"),
        help="comma list of sqlite, postgres (default sqlite)",
    )
    parser.add_argument(
        "--floods",
        default=list(FLOODS),
        type=choices(FLOODS, "floods"),
        help=f"comma list of {', '.join(FLOODS)}",
    )
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="length of the quiet and of the flooded phase"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    async def work(options: TargetOptions, results: Results) -> None:
        for engine in args.targets:
            for name in args.floods:
                results.append(emit(await run_flood(options, args, engine, name)))

    return run_command(args, "floods", work, table)


if __name__ == "__main__":
    sys.exit(main())
