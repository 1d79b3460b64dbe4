"""The SDK's providers (docs/protocol.md, "Providers"): ``Worker.provide`` (and ``taskhub
worker MODULE:Provider``) serves reads that ``Client.read`` / ``AsyncClient.read`` make,
JSON and bytes, long-polling until the answer comes; a failed read raises its problem."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from taskhub.sdk import AsyncClient, Client, ProblemError, Worker
from tests.sdk.conftest import Hub
from tests.sdk.extensions import Echo
from tests.sdk.providers import Broken, Frame, Reads, Silent, Squares
from tests.support.server import REPO_ROOT
from tests.support.waiting import eventually, eventually_sync


def test_a_worker_serves_reads_that_a_client_makes(hub: Hub, room: str) -> None:
    reads = Reads()
    worker = Worker(hub.url, hub.user_token, [Echo], room=room)
    worker.provide(Squares, name="squares", handler=reads)
    worker.provide(Frame, name="traj")
    worker.provide(Broken)
    with worker, Client(hub.url, hub.user_token) as client:
        assert worker.providers == [
            f"{room}:numbers:squares",
            f"{room}:frames:traj",
            f"{room}:numbers:Broken",
        ]
        eventually_sync(lambda: worker.listening, 5, "the worker to join its rooms")
        assert client.read(f"{room}:numbers:squares", {"n": 4}, room=room) == [0, 1, 4, 9]
        assert client.read(f"{room}:numbers:squares", {"n": 4}, room=room) == [0, 1, 4, 9]
        frame = client.read(f"{room}:frames:traj", {"index": 250, "size": 10}, room=room)
        assert frame == bytes((250 + i) % 256 for i in range(10))
        with pytest.raises(ProblemError) as failed:
            client.read(f"{room}:numbers:Broken", room=room)
        assert failed.value.status == 400
        assert "ValueError: no such frame" in str(failed.value)
        assert client.submit(Echo(text="both"), room=room).result(timeout=10)["echo"] == "both"
    assert reads.seen == {"squares:4": 1}  # the second read came from the hub's cache


async def test_an_async_client_reads_and_times_out(hub: Hub, room: str) -> None:
    worker = Worker(hub.url, hub.user_token, room=room)
    worker.provide(Frame, name="traj")
    worker.provide(Silent)
    async with worker, AsyncClient(hub.url, hub.user_token) as client:
        await eventually(lambda: worker.listening, 5, "the worker to join its rooms")
        frame = await client.read(f"{room}:frames:traj", {"size": 3}, room=room)
        assert frame == b"\x00\x01\x02"
        with pytest.raises(TimeoutError):
            await client.read(f"{room}:numbers:Silent", room=room, timeout=1.5)


def test_taskhub_worker_serves_a_provider_class(hub: Hub, room: str, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHUB_")}
    env.update({"TASKHUB_URL": hub.url, "TASKHUB_TOKEN": hub.user_token})
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "taskhub.cli", "worker", "tests.sdk.providers:Squares",
             "--room", room],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def listening() -> bool:  # registered, and in its provider's room (it logs so)
            assert process.poll() is None, log_path.read_text()
            return "Socket.IO: listening" in log_path.read_text()

        eventually_sync(listening, 20, "the worker to join its provider's room")
        with Client(hub.url, hub.user_token) as client:
            answer = client.read(f"{room}:numbers:Squares", {"n": 3}, room=room, timeout=20)
        assert answer == [0, 1, 4], log_path.read_text()
    finally:
        process.terminate()
        process.wait(20)
