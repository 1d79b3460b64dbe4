"""``taskhub worker`` processes killed mid-task: SIGKILL fails the task promptly (through
the Socket.IO disconnect grace, or the sweeper when the worker had no socket); SIGTERM
lets the task finish, then the worker leaves and its orphaned job is soft-deleted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from taskhub.sdk import Client
from tests.sdk.conftest import SWEEPING_TIMEOUT, Hub, wait_status
from tests.sdk.extensions import Slow
from tests.support.server import REPO_ROOT
from tests.support.waiting import eventually_sync

JOB = "modifiers:Slow"


@contextmanager
def worker_process(
    hub: Hub, room: str, log_path: Path, *options: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m taskhub.cli worker tests.sdk.extensions:Slow`` (URL and token from the
    environment), running until its job is registered with a live worker."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHUB_")}
    env.update({"TASKHUB_URL": hub.url, "TASKHUB_TOKEN": hub.user_token, "PYTHONUNBUFFERED": "1"})
    command = [sys.executable, "-m", "taskhub.cli", "worker", "tests.sdk.extensions:Slow"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "--room", room, "--poll-interval", "0.2", *options],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually_sync(
            lambda: process.poll() is not None or any(j["workers"] for j in hub.room_jobs(room)),
            20,
            "the worker to register",
        )
        assert process.poll() is None, log_path.read_text()
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def _start_slow_task(hub: Hub, client: Client, room: str, seconds: float) -> str:
    task_id = client.submit(Slow(seconds=seconds), room=room).id
    wait_status(hub, task_id, {"running"}, 10)
    return task_id


def test_sigkill_mid_task_fails_it_after_the_socket_grace(
    sqlite_hub: Hub, room: str, tmp_path: Path
) -> None:
    hub = sqlite_hub  # worker timeout 60 s: only the 1 s disconnect grace can act this fast
    with (
        worker_process(hub, room, tmp_path / "worker.log") as process,
        Client(hub.url, hub.user_token) as client,
    ):
        task_id = _start_slow_task(hub, client, room, seconds=60)
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        task = wait_status(hub, task_id, {"failed", "completed", "cancelled"}, 15)
        assert time.monotonic() - killed_at < 8
    assert (task["status"], task["error"]) == ("failed", "Worker disconnected")
    assert task["worker_id"] not in hub.worker_ids()
    assert hub.room_jobs(room) == [], "the orphaned job is soft-deleted"


def test_sigkill_of_a_socketless_worker_is_swept_within_the_timeout(
    sweeping_hub: Hub, room: str, tmp_path: Path
) -> None:
    hub = sweeping_hub  # no socket, so no disconnect: only the sweeper (3 s timeout) can act
    options = ("--no-sockets", "--server-timeout", str(SWEEPING_TIMEOUT))
    with (
        worker_process(hub, room, tmp_path / "worker.log", *options) as process,
        Client(hub.url, hub.user_token) as client,
    ):
        task_id = _start_slow_task(hub, client, room, seconds=60)
        time.sleep(SWEEPING_TIMEOUT + 1)  # heartbeats keep a live worker past the timeout
        assert hub.task(task_id)["status"] == "running"
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        task = wait_status(hub, task_id, {"failed", "completed", "cancelled"}, 15)
        assert time.monotonic() - killed_at < SWEEPING_TIMEOUT + 4
    assert (task["status"], task["error"]) == ("failed", "Worker disconnected")
    assert hub.room_jobs(room) == []


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_mid_task_drains_then_leaves(
    sqlite_hub: Hub, room: str, tmp_path: Path, stop: signal.Signals
) -> None:
    """Ctrl-C too: the Socket.IO client must not take SIGINT over (it cancelled every
    task, the run included)."""
    hub = sqlite_hub
    log_path = tmp_path / "worker.log"
    with (
        worker_process(hub, room, log_path) as process,
        Client(hub.url, hub.user_token) as client,
    ):
        task_id = _start_slow_task(hub, client, room, seconds=1.5)
        worker_id = hub.task(task_id)["worker_id"]
        process.send_signal(stop)
        assert process.wait(20) == 0, log_path.read_text()
    task = hub.task(task_id)
    assert task["status"] == "completed", log_path.read_text()
    assert task["result"] == {"slept": 1.5, "cancelled": False}
    assert worker_id not in hub.worker_ids()
    assert hub.room_jobs(room) == [], "the orphaned job is soft-deleted"
    assert "draining" in log_path.read_text()
