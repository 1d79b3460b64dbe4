"""The unmodified zndraw-joblib 0.1.7 ``JobManager`` serves tasks from a real Taskhub."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest
from zndraw_joblib.client import Category, ClaimedTask, Extension, JobManager

from tests.support.server import HubServer

PREFIX = "/v1/joblib"
ROOM = "room1"
TERMINAL = {"completed", "failed", "cancelled"}
TASKS = 20


class Scale(Extension):
    """A modifier with a few typed parameters (they become the job's JSON schema)."""

    category: ClassVar[Category] = Category.MODIFIER
    factor: float = 1.0
    label: str = "scale"
    axes: list[int] = [0, 1, 2]

    def run(self, vis: Any, **kwargs: Any) -> Any:
        return self.factor


class Explode(Extension):
    """A modifier whose execution always fails."""

    category: ClassVar[Category] = Category.MODIFIER
    n: int = 0

    def run(self, vis: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"boom-{self.n}")


class RestApi:
    """The ``ApiManager`` protocol of zndraw-joblib over a plain ``httpx.Client``."""

    def __init__(self, base_url: str, token: str) -> None:
        self.http = httpx.Client(timeout=10.0, trust_env=False)
        self._base_url = base_url
        self._token = token

    @property
    def base_url(self) -> str:
        return self._base_url

    def get_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def raise_for_status(self, response: httpx.Response) -> None:
        """404 → KeyError, 401/403 → PermissionError, 409/422 → ValueError, else httpx's."""
        code = response.status_code
        if code == 404:
            raise KeyError(response.text)
        if code in (401, 403):
            raise PermissionError(response.text)
        if code in (409, 422):
            raise ValueError(response.text)
        response.raise_for_status()


class Executions:
    """The ``execute`` callback: runs each claimed extension and records what it saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, str, Extension]] = []

    def __call__(self, claimed: ClaimedTask) -> None:
        with self.lock:
            self.seen.append(
                (claimed.task_id, claimed.job_name, claimed.room_id, claimed.extension)
            )
        claimed.extension.run(None, **claimed.run_kwargs)


@pytest.fixture
def client(hub_server: HubServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=hub_server.base_url,
        headers=hub_server.admin_headers,
        timeout=15.0,
        trust_env=False,
    ) as http:
        yield http


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


def worker_ids(client: httpx.Client) -> dict[str, dict[str, Any]]:
    response = client.get(f"{PREFIX}/workers", params={"limit": 500})
    assert response.status_code == 200, response.text
    return {worker["id"]: worker for worker in response.json()["items"]}


def room_job_names(client: httpx.Client) -> set[str]:
    response = client.get(f"{PREFIX}/rooms/{ROOM}/jobs", params={"limit": 500})
    assert response.status_code == 200, response.text
    return {job["full_name"] for job in response.json()["items"]}


def test_job_manager_serves_tasks_and_disconnects_cleanly(
    hub_server: HubServer, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zndraw_joblib")
    api = RestApi(hub_server.base_url, hub_server.admin_token)
    executions = Executions()
    manager = JobManager(
        api, None, execute=executions, heartbeat_interval=0.2, polling_interval=0.05
    )
    try:
        manager.register(Scale)
        worker_id = str(manager.worker_id)
        assert manager.worker_id is not None
        assert "@global:modifiers:Scale" in room_job_names(client)
        job = client.get(f"{PREFIX}/rooms/{ROOM}/jobs/@global:modifiers:Scale")
        assert job.status_code == 200, job.text
        assert job.json()["schema"] == Scale.model_json_schema()
        assert job.json()["workers"] == [worker_id]

        submitted = {
            manager.submit(Scale(factor=i / 2, label=f"t{i}"), room=ROOM): i / 2
            for i in range(TASKS)
        }
        assert len(submitted) == TASKS
        for task_id, factor in submitted.items():
            task = wait_terminal(client, task_id)
            assert task["status"] == "completed", task
            assert task["job_name"] == "@global:modifiers:Scale"
            assert task["room_id"] == ROOM
            assert task["worker_id"] == worker_id
            assert task["error"] is None
            assert task["payload"]["factor"] == factor
            assert task["started_at"] is not None
            assert task["completed_at"] is not None
        with executions.lock:
            seen = list(executions.seen)
        assert sorted(task_id for task_id, *_ in seen) == sorted(submitted)
        for task_id, job_name, room_id, extension in seen:
            assert job_name == "@global:modifiers:Scale"
            assert room_id == ROOM
            assert isinstance(extension, Scale)
            assert extension.factor == submitted[task_id]

        manager.register(Explode)
        assert len(manager) == 2
        failing = manager.submit(Explode(n=7), room=ROOM)
        task = wait_terminal(client, failing)
        assert task["status"] == "failed", task
        assert "boom-7" in (task["error"] or "")
        assert task["worker_id"] == worker_id

        before = worker_ids(client)[worker_id]
        assert before["job_count"] == 2
        time.sleep(0.6)  # a few heartbeat intervals
        after = worker_ids(client)[worker_id]
        assert after["last_heartbeat"] > before["last_heartbeat"]
        assert {"@global:modifiers:Scale", "@global:modifiers:Explode"} <= room_job_names(client)
    finally:
        manager.disconnect()
        api.http.close()

    assert manager.worker_id is None
    assert worker_id not in worker_ids(client)
    names = room_job_names(client)
    assert "@global:modifiers:Scale" not in names
    assert "@global:modifiers:Explode" not in names
    gone = client.get(f"{PREFIX}/rooms/{ROOM}/jobs/@global:modifiers:Scale")
    assert gone.status_code == 404, gone.text
    history = client.get(f"{PREFIX}/rooms/{ROOM}/tasks", params={"limit": 500})
    assert history.status_code == 200, history.text
    assert history.json()["total"] == TASKS + 1  # soft delete keeps the task history

    problems = [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("zndraw_joblib") and record.levelno >= logging.WARNING
    ]
    assert problems == [f"Task {failing} failed: boom-7"]
