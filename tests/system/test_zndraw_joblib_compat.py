"""The unmodified zndraw-joblib 0.1.7 ``JobManager`` serves tasks from a real Taskhub.

The ``JobManager`` runs in its own process (``tests/system/joblib_worker.py``): zndraw-joblib
cannot be imported next to Taskhub's models, see ``test_sdk_importable_next_to_hub_models``.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import jwt
import pytest

from tests.support.server import REPO_ROOT, HubServer, running_hub
from tests.support.waiting import eventually_sync

PREFIX = "/v1/joblib"
ROOM = "room1"
SCALE = "@global:modifiers:Scale"
EXPLODE = "@global:modifiers:Explode"
GARBLE = "@global:modifiers:Garble"
TERMINAL = {"completed", "failed", "cancelled"}
TASKS = 20


class JobManagerProcess:
    """Drives ``tests.system.joblib_worker`` over its stdin/stdout, one JSON line each way."""

    def __init__(
        self,
        server: HubServer,
        log_path: Path,
        *,
        socket: bool = False,
        token: str | None = None,
    ) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.system.joblib_worker",
                server.base_url,
                token or server.admin_token,
                *(["--socket"] if socket else []),
            ],
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
        """Run one operation in the worker process and return its result."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.process.stdin.flush()
        try:
            reply = json.loads(self._replies.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"{op!r} got no reply in {timeout}s:\n{self.output()}") from None
        assert reply["ok"], f"{op!r} failed: {reply['error']}\n{self.output()}"
        return reply["result"]

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            try:
                self.call("exit", timeout=timeout)
                self.process.wait(timeout)
            except (AssertionError, OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        return self.process.returncode


@pytest.fixture
def client(hub_server: HubServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=hub_server.base_url,
        headers=hub_server.admin_headers,
        timeout=15.0,
        trust_env=False,
    ) as http:
        yield http


@pytest.fixture
def manager(hub_server: HubServer, tmp_path: Path) -> Iterator[JobManagerProcess]:
    process = JobManagerProcess(hub_server, tmp_path / "joblib_worker.log")
    try:
        yield process
    finally:
        process.close()


def wait_terminal(client: httpx.Client, task_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Long-poll ``GET /tasks/{id}`` until the task ends (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"{PREFIX}/tasks/{task_id}", headers={"Prefer": "wait=10"})
        assert response.status_code == 200, response.text
        task = response.json()
        if task["status"] in TERMINAL:
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {task['status']}"


def listed_workers(client: httpx.Client) -> dict[str, dict[str, Any]]:
    response = client.get(f"{PREFIX}/workers", params={"limit": 500})
    assert response.status_code == 200, response.text
    return {worker["id"]: worker for worker in response.json()["items"]}


def room_job_names(client: httpx.Client) -> set[str]:
    response = client.get(f"{PREFIX}/rooms/{ROOM}/jobs", params={"limit": 500})
    assert response.status_code == 200, response.text
    return {job["full_name"] for job in response.json()["items"]}


def test_job_manager_serves_tasks_and_disconnects_cleanly(
    client: httpx.Client, manager: JobManagerProcess
) -> None:
    worker_id = manager.call("register", name="Scale")
    assert worker_id not in (None, "None")
    assert SCALE in room_job_names(client)
    job = client.get(f"{PREFIX}/rooms/{ROOM}/jobs/{SCALE}")
    assert job.status_code == 200, job.text
    assert job.json()["workers"] == [worker_id]

    submitted: dict[str, float] = {}
    for i in range(TASKS):
        params = {"factor": i / 2, "label": f"t{i}"}
        submitted[manager.call("submit", name="Scale", params=params, room=ROOM)] = i / 2
    assert len(submitted) == TASKS
    for task_id, factor in submitted.items():
        task = wait_terminal(client, task_id)
        assert task["status"] == "completed", task
        assert task["job_name"] == SCALE
        assert task["room_id"] == ROOM
        assert task["worker_id"] == worker_id
        assert task["error"] is None
        assert task["payload"]["factor"] == factor
        assert task["started_at"] is not None
        assert task["completed_at"] is not None
    executions = manager.call("executions")
    assert sorted(e["task_id"] for e in executions) == sorted(submitted)
    for execution in executions:
        assert execution["job_name"] == SCALE
        assert execution["room_id"] == ROOM
        assert execution["extension"] == "Scale"
        assert execution["params"]["factor"] == submitted[execution["task_id"]]

    assert manager.call("register", name="Explode") == worker_id
    assert manager.call("registered") == [EXPLODE, SCALE]
    failing = manager.call("submit", name="Explode", params={"n": 7}, room=ROOM)
    task = wait_terminal(client, failing)
    assert task["status"] == "failed", task
    assert "boom-7" in (task["error"] or "")
    assert task["worker_id"] == worker_id

    before = listed_workers(client)[worker_id]
    assert before["job_count"] == 2
    eventually_sync(  # the manager beats every 0.2 s
        lambda: listed_workers(client)[worker_id]["last_heartbeat"] > before["last_heartbeat"],
        15,
        "a heartbeat of the manager's",
    )
    assert {SCALE, EXPLODE} <= room_job_names(client)
    assert manager.call("stopped") is False  # the SDK never decided its registration was lost
    assert manager.call("problems") == [f"Task {failing} failed: boom-7"]

    # A failure report is never refused for its text (the SDK would not send it again, and
    # the task would stay running): a NUL becomes U+FFFD, an over-long text is cut.
    assert manager.call("register", name="Garble") == worker_id
    garbled = manager.call("submit", name="Garble", params={"length": 70_000}, room=ROOM)
    task = wait_terminal(client, garbled, timeout=20)
    assert task["status"] == "failed", task
    assert task["error"].startswith("garbled\ufffdxxx"), task["error"][:40]
    assert task["error"].endswith("characters cut)"), task["error"][-60:]
    assert len(task["error"]) <= 65_536

    assert manager.call("disconnect") is None
    assert worker_id not in listed_workers(client)
    names = room_job_names(client)
    assert not {SCALE, EXPLODE, GARBLE} & names
    gone = client.get(f"{PREFIX}/rooms/{ROOM}/jobs/{SCALE}")
    assert gone.status_code == 404, gone.text
    history = client.get(f"{PREFIX}/rooms/{ROOM}/tasks", params={"limit": 500})
    assert history.status_code == 200, history.text
    assert history.json()["total"] == TASKS + 2  # soft delete keeps the task history
    assert manager.call("problems")[0] == f"Task {failing} failed: boom-7"
    assert manager.close() == 0


def test_sdk_registration_keeps_the_extension_schema(
    client: httpx.Client, manager: JobManagerProcess
) -> None:
    """``JobManager.register`` sends ``JobRegisterRequest.model_dump()``, whose key is the
    field name ``schema_`` (not the alias ``schema``); the reference server accepts both
    (``populate_by_name``), so the job's schema must be the Extension's JSON schema."""
    manager.call("register", name="Scale")
    job = client.get(f"{PREFIX}/rooms/{ROOM}/jobs/{SCALE}")
    assert job.status_code == 200, job.text
    assert job.json()["schema"] == manager.call("schema", name="Scale")


def test_sdk_importable_next_to_hub_models() -> None:
    """zndraw-joblib and Taskhub's models must coexist in one process (an embedding server,
    or a test driving the SDK in-process). Both declare tables on the global
    ``SQLModel.metadata`` with the same names (``worker_job_link``, ``worker``, ``job``,
    ``task``), so importing the second fails."""
    result = subprocess.run(
        [sys.executable, "-c", "import taskhub.store.tables, zndraw_joblib.client"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_job_manager_with_a_socket_is_woken_by_task_available(
    hub_server: HubServer, client: httpx.Client, tmp_path: Path
) -> None:
    """With a real Socket.IO client (as ZnDraw runs it) the manager joins its job's room and
    serves a task at once: it polls only every 30 s, so it was woken by ``task_available``."""
    manager = JobManagerProcess(hub_server, tmp_path / "joblib_socket.log", socket=True)
    try:
        manager.call("register", name="Scale")
        # The manager's join of the job room (sent without asking for an answer) must be in
        # before the submit, or the wake-up goes to nobody: wait for the hub's answer to it.
        deadline = time.monotonic() + 30
        while SCALE not in manager.call("joined"):
            assert time.monotonic() < deadline, f"never joined {SCALE}:\n{manager.output()}"
            time.sleep(0.05)
        started = time.monotonic()
        response = client.post(
            f"{PREFIX}/rooms/{ROOM}/tasks/{SCALE}", json={"payload": {"factor": 3.0}}
        )
        assert response.status_code == 202, response.text
        task = wait_terminal(client, response.json()["id"], timeout=20)
        served_in = time.monotonic() - started
        assert task["status"] == "completed", (task, manager.output())
        assert served_in < 15, f"served after {served_in:.1f}s: by polling, not a wake-up"
        assert manager.call("problems") == []
    finally:
        assert manager.close() == 0, manager.output()


JWT_SECRET = "a-shared-secret-of-the-host-application-0123456789"


def test_job_manager_serves_tasks_signed_in_with_a_jwt(tmp_path: Path) -> None:
    """The unmodified ``JobManager`` with a bearer JWT of a shared-secret issuer (ZnDraw's
    case) instead of a Taskhub token: registered, served, gone, as with a ``th_`` token."""
    env = {"TASKHUB_JWT_SECRET": JWT_SECRET, "TASKHUB_JWT_SUPERUSER_CLAIM": "is_superuser"}
    claims = {
        "sub": str(uuid.uuid4()),
        "preferred_username": "zndraw-user",
        "is_superuser": True,  # registers @global jobs, as ZnDraw's own user does
        "exp": int(time.time()) + 3600,
    }
    token = jwt.encode(claims, JWT_SECRET, algorithm="HS256")
    with running_hub("sqlite", tmp_path, env=env) as server:
        manager = JobManagerProcess(server, tmp_path / "joblib_worker.log", token=token)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(
            base_url=server.base_url, headers=headers, timeout=15.0, trust_env=False
        ) as http:
            try:
                worker_id = manager.call("register", name="Scale")
                tasks = [
                    manager.call("submit", name="Scale", params={"factor": i}, room=ROOM)
                    for i in range(3)
                ]
                for task_id in tasks:
                    task = wait_terminal(http, task_id)
                    assert task["status"] == "completed", task
                    assert task["worker_id"] == worker_id
                me = http.get(f"{PREFIX}/users/me").json()
                assert me["name"] == "zndraw-user" and me["id"] == claims["sub"]
                assert manager.call("disconnect") is None
                assert worker_id not in listed_workers(http)
            finally:
                assert manager.close() == 0
