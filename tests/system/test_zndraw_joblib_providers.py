"""The unmodified zndraw-joblib 0.1.7 ``JobManager.register_provider`` serves reads through
a real Taskhub (docs/protocol.md, "Providers"): REST readers get its answers, JSON and
binary, from one hub on both engines, and from three replicas sharing Redis and PostgreSQL
(the read on replica A, the provider's socket on B, another reader on C).

The ``JobManager`` runs in its own process (``tests/system/joblib_provider.py``), as in
``test_zndraw_joblib_compat.py``.
"""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
import redis

from tests.support.databases import REDIS_URL
from tests.support.names import unique
from tests.support.server import REPO_ROOT, HubServer, running_replicas
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually
from tests.system.joblib_provider import frame_bytes

PREFIX = "/v1/joblib"
WAIT = {"Prefer": "wait=20"}
READERS = 50


class ProviderProcess:
    """Drives ``tests.system.joblib_provider`` over its stdin/stdout, one JSON line each way."""

    def __init__(self, base_url: str, token: str, log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.system.joblib_provider", base_url, token],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._replies: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        threading.Thread(target=self._pump, args=(self.process.stdout,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._replies.put(line)

    def call(self, op: str, timeout: float = 30.0, **args: Any) -> Any:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.process.stdin.flush()
        try:
            reply = json.loads(self._replies.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"{op!r} got no reply in {timeout}s:\n{self.output()}") from None
        assert reply["ok"], f"{op!r} failed: {reply['error']}\n{self.output()}"
        return reply["result"]

    async def acall(self, op: str, **args: Any) -> Any:
        return await asyncio.to_thread(self.call, op, **args)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def register(self, provider: str, name: str, room: str) -> dict[str, str]:
        """Register through the manager and wait until the hub has put its socket in the
        provider's room (the manager's own ``join_provider_room``, acknowledged)."""
        registered: dict[str, str] = await self.acall(
            "register", provider=provider, name=name, room=room
        )
        category = {"Listing": "filesystem", "Frames": "frames", "Never": "filesystem"}[provider]
        full_name = f"{room}:{category}:{name}"

        async def joined() -> bool:
            return full_name in await self.acall("joined")

        await eventually(
            joined, 15, lambda: f"{full_name} joined (refused: {self.call('refused')})"
        )
        return registered

    def close(self, timeout: float = 20.0) -> None:
        if self.process.poll() is None:
            try:
                self.call("exit", timeout=timeout)
                self.process.wait(timeout)
            except (AssertionError, OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(10)
        self._log.close()


@pytest.fixture
def provider(shared_server: HubServer, tmp_path: Path) -> Iterator[ProviderProcess]:
    """A ``JobManager`` of its own user, on the module's server."""
    token = shared_server.create_user(unique("zndraw"))
    process = ProviderProcess(shared_server.base_url, token, tmp_path / "provider.log")
    try:
        yield process
    finally:
        process.close()


@pytest.fixture
async def reader(shared_server: HubServer) -> AsyncIterator[httpx.AsyncClient]:
    """A REST reader: another user than the provider's."""
    token = shared_server.create_user(unique("reader"))
    async with httpx.AsyncClient(
        base_url=shared_server.base_url + PREFIX,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30.0,
        trust_env=False,
        limits=httpx.Limits(max_connections=READERS + 10),
    ) as client:
        yield client


async def read(
    client: httpx.AsyncClient, room: str, full_name: str, **params: Any
) -> httpx.Response:
    return await client.get(f"/rooms/{room}/providers/{full_name}", params=params, headers=WAIT)


async def test_json_and_binary_reads_are_answered_by_the_joblib_provider(
    provider: ProviderProcess, reader: httpx.AsyncClient, lab: str
) -> None:
    listing = await provider.register("Listing", "local", lab)
    await provider.register("Frames", "traj", lab)

    info = await reader.get(f"/rooms/{lab}/providers/{lab}:filesystem:local/info")
    assert info.status_code == 200, info.text
    assert info.json()["id"] == listing["id"]
    assert info.json()["worker_id"] == listing["worker_id"]
    assert info.json()["schema"]["properties"]["path"]["type"] == "string"

    answered = await read(reader, lab, f"{lab}:filesystem:local", path="/data")
    assert answered.status_code == 200, answered.text
    assert answered.headers["content-type"] == "application/json"
    assert answered.headers["preference-applied"] == "wait=20"
    assert answered.json() == {"path": "/data", "entries": [f"/data/{n}.xyz" for n in range(3)]}

    frame = await read(reader, lab, f"{lab}:frames:traj", index=7, size=300_000)
    assert frame.status_code == 200, frame.text
    assert frame.headers["content-type"] == "application/octet-stream"
    assert frame.content == frame_bytes(7, 300_000)

    cached = await read(reader, lab, f"{lab}:filesystem:local", path="/data")
    assert cached.content == answered.content
    assert "preference-applied" not in cached.headers  # answered from the cache at once
    assert await provider.acall("reads") == {"listing:/data": 1, "frame:7:300000": 1}


async def test_readers_of_one_read_cause_one_provider_request_each_read_its_own(
    provider: ProviderProcess, reader: httpx.AsyncClient, lab: str
) -> None:
    await provider.register("Frames", "traj", lab)
    name = f"{lab}:frames:traj"

    same = await asyncio.gather(
        *(read(reader, lab, name, index=1, size=64) for _ in range(READERS))
    )
    assert {response.status_code for response in same} == {200}
    assert {response.content for response in same} == {frame_bytes(1, 64)}

    different = await asyncio.gather(
        *(read(reader, lab, name, index=index, size=64) for index in range(2, 7) for _ in range(5))
    )
    assert [r.content for r in different] == [
        frame_bytes(index, 64) for index in range(2, 7) for _ in range(5)
    ]
    assert await provider.acall("reads") == {f"frame:{index}:64": 1 for index in range(1, 7)}


async def test_a_removed_worker_takes_its_providers_along(
    provider: ProviderProcess, reader: httpx.AsyncClient, shared_server: HubServer, lab: str
) -> None:
    """``JobManager.disconnect`` deletes its worker: its providers are gone, the room hears
    ``providers_invalidate``, and a read is 404 ``provider-not-found``."""
    await provider.register("Listing", "local", lab)
    async with SocketProbe("browser") as browser:
        await browser.connect(shared_server.base_url, shared_server.admin_token)
        await browser.room_join(lab)
        start = browser.mark()
        await provider.acall("disconnect")
        assert (await browser.wait_for("providers_invalidate", after=start)).data == {}

    listed = await reader.get(f"/rooms/{lab}/providers")
    assert listed.json()["items"] == []
    gone = await read(reader, lab, f"{lab}:filesystem:local", path="/")
    assert gone.status_code == 404
    assert gone.json()["type"] == "/v1/problems/provider-not-found"


async def test_a_provider_that_never_answers_times_its_readers_out(
    provider: ProviderProcess, reader: httpx.AsyncClient, lab: str
) -> None:
    await provider.register("Never", "stuck", lab)
    waits = {"Prefer": "wait=1"}
    answers = await asyncio.gather(
        *(
            reader.get(f"/rooms/{lab}/providers/{lab}:filesystem:stuck", params={"path": "/"},
                       headers=waits)
            for _ in range(10)
        )
    )  # fmt: skip
    for answer in answers:
        assert answer.status_code == 504, answer.text
        assert answer.headers["retry-after"] == "2"
        assert answer.json()["type"] == "/v1/problems/provider-timeout"
    # Within the in-flight lock's 30 s, one provider_request for all of them.
    assert await provider.acall("reads") == {"never:/": 1}


# --- Three replicas with Redis ----------------------------------------------------------


@dataclass
class Cluster:
    a: HubServer
    b: HubServer
    c: HubServer
    namespace: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Replicas A, B and C on one PostgreSQL database (SQLite serves from one process),
    sharing Redis under a namespace of their own."""
    directory: Path = tmp_path_factory.mktemp("provider-replicas")
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    env = {"TASKHUB_REDIS_URL": REDIS_URL, "TASKHUB_REDIS_NAMESPACE": namespace}
    try:
        with running_replicas("postgres", directory, 3, env=env) as (a, b, c):
            yield Cluster(a, b, c, namespace)
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = list(client.scan_iter(f"{namespace}:*"))
            if keys:
                client.delete(*keys)


async def test_reads_on_other_replicas_are_answered_by_the_provider_on_b(
    cluster: Cluster, tmp_path: Path
) -> None:
    room = unique("replicas")
    token = cluster.a.create_user(unique("zndraw"))
    reader_token = cluster.a.create_user(unique("reader"))
    process = ProviderProcess(cluster.b.base_url, token, tmp_path / "provider.log")
    headers = {"Authorization": f"Bearer {reader_token}"}
    limits = httpx.Limits(max_connections=READERS + 10)
    try:
        await process.register("Frames", "traj", room)
        await process.register("Listing", "local", room)
        async with (
            httpx.AsyncClient(
                base_url=cluster.a.base_url + PREFIX, headers=headers, timeout=30.0,
                trust_env=False, limits=limits,
            ) as on_a,
            httpx.AsyncClient(
                base_url=cluster.c.base_url + PREFIX, headers=headers, timeout=30.0,
                trust_env=False, limits=limits,
            ) as on_c,
        ):  # fmt: skip
            name = f"{room}:frames:traj"
            size = 3 * 1024 * 1024  # several MB, fetched once per replica
            answers = await asyncio.gather(
                *(read(on_a, room, name, index=5, size=size) for _ in range(READERS // 2)),
                *(read(on_c, room, name, index=5, size=size) for _ in range(READERS // 2)),
            )
            expected = frame_bytes(5, size)
            for answer in answers:
                assert answer.status_code == 200, answer.text[:500]
                assert answer.content == expected

            listing = await read(on_c, room, f"{room}:filesystem:local", path="/x")
            assert listing.json()["path"] == "/x"
            cached = await read(on_a, room, f"{room}:filesystem:local", path="/x")
            assert cached.content == listing.content
            assert "preference-applied" not in cached.headers
        assert await process.acall("reads") == {f"frame:5:{size}": 1, "listing:/x": 1}
    finally:
        process.close()
