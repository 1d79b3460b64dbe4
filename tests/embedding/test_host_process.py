"""The example host served by uvicorn in a process of its own (``uvicorn
examples.host_app.main:asgi_app``), on SQLite: through its one port and its one Socket.IO
server, the unmodified zndraw-joblib 0.1.7 ``JobManager`` and Taskhub's SDK serve jobs,
woken over the host's socket, and a browser on the host's page sees a task's
``task_status_event``s."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from taskhub.sdk import Worker
from tests.embedding.hosts import ADMIN_PASSWORD, HostServer, bearer, sign_in
from tests.page.browser import CHROMIUM, LAUNCH_ARGS, missing_prerequisites
from tests.page.extensions import Ping
from tests.support.api import ApiClient
from tests.support.server import provisioned_database
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually
from tests.system.test_zndraw_joblib_compat import JobManagerProcess

TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostServer]:
    directory = tmp_path_factory.mktemp("host")
    with (
        provisioned_database("sqlite", directory, migrated=True) as url,
        HostServer(url, log_dir=directory) as started,
    ):
        yield started


@pytest.fixture
async def http(server: HostServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30, trust_env=False) as client:
        yield client


@pytest.fixture
async def room(http: httpx.AsyncClient) -> str:
    """A room of the host's, created by alice."""
    room = f"lab-{uuid.uuid4().hex[:8]}"
    created = await http.post(f"/rooms/{room}", headers=bearer(await sign_in(http, "alice")))
    assert created.status_code == 201, created.text
    return room


async def terminal(api: ApiClient, task_id: str) -> dict[str, Any]:
    async def ended() -> dict[str, Any] | None:
        answer = await api.get(f"/tasks/{task_id}", headers={"Prefer": "wait=10"})
        assert answer.status_code == 200, answer.text
        task: dict[str, Any] = answer.json()
        return task if task["status"] in TERMINAL else None

    return dict(await eventually(ended, 30, f"task {task_id} to end"))


async def test_both_sdks_serve_jobs_through_the_hosts_one_socket_and_port(
    server: HostServer, http: httpx.AsyncClient, room: str, tmp_path: Path
) -> None:
    """Both workers poll only every 30 s: a task served within 15 s was pushed or woken
    over the host's Socket.IO server."""
    token = await sign_in(http, "alice")
    alice = ApiClient(http, token)
    admin = await sign_in(http, "admin", ADMIN_PASSWORD)  # zndraw-joblib's jobs are @global
    async with contextlib.AsyncExitStack() as stack:
        member = await stack.enter_async_context(SocketProbe("member"))
        await member.connect(server.base_url, token)
        assert await member.call("room_join", {"room_id": room}) == {
            "room_id": room,
            "locked": False,
        }

        worker = Worker(server.base_url, token, [Ping], room=room, poll_interval=30)
        await asyncio.to_thread(worker.start)
        stack.push_async_callback(asyncio.to_thread, worker.close)
        await eventually(lambda: worker.listening, 30, "Taskhub's SDK worker to listen")

        hub = SimpleNamespace(base_url=server.base_url, admin_token=admin)
        manager = JobManagerProcess(hub, tmp_path / "joblib.log", socket=True)  # type: ignore[arg-type]
        stack.callback(manager.close)
        await asyncio.to_thread(manager.call, "register", name="Scale")
        scale = "@global:modifiers:Scale"

        async def joined() -> bool:
            return scale in await asyncio.to_thread(manager.call, "joined")

        await eventually(joined, 30, "zndraw-joblib's socket in its job room")

        started = asyncio.get_running_loop().time()
        by_sdk = (await alice.submit(f"{room}:modifiers:Ping", room=room))["id"]
        by_joblib = await asyncio.to_thread(
            manager.call, "submit", name="Scale", params={"factor": 2.0}, room=room
        )
        for task_id in (by_sdk, by_joblib):
            task = await terminal(alice, task_id)
            assert task["status"] == "completed", (task, manager.output())
            await member.wait_status(task_id, "completed", within=15)
        assert asyncio.get_running_loop().time() - started < 15
        assert (await alice.task(by_sdk))["result"] == "pong"
        executions = await asyncio.to_thread(manager.call, "executions")
        assert [execution["task_id"] for execution in executions] == [by_joblib]
        assert await asyncio.to_thread(manager.call, "problems") == []


async def test_a_browser_on_the_hosts_page_sees_the_rooms_task_events(
    server: HostServer, http: httpx.AsyncClient, room: str
) -> None:
    from playwright.async_api import async_playwright, expect

    assert not missing_prerequisites(), missing_prerequisites()
    alice = ApiClient(http, await sign_in(http, "alice"))
    job = await alice.register(room=room, name="Rotate")
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            page = await chromium.new_page()
            await page.goto(f"{server.base_url}/?room={room}")
            await page.locator("#name").fill("bob")
            await page.get_by_role("button", name="Join").click()
            await expect(page.locator("#state")).to_have_attribute("data-state", "joined")

            task = await alice.submit(job["full_name"], room=room)
            item = page.locator(f'li[data-task-id="{task["id"]}"]')
            await expect(item).to_have_attribute("data-status", "pending")
            assert (await alice.claim(job["worker_id"]) or {})["id"] == task["id"]
            assert (await alice.transition(task["id"], "running")).status_code == 200
            assert (await alice.transition(task["id"], "completed")).status_code == 200
            await expect(item).to_have_attribute("data-status", "completed")

            await page.goto(f"{server.base_url}/?room=nowhere")
            await page.get_by_role("button", name="Join").click()
            await expect(page.locator("#state")).to_have_attribute("data-state", "refused")
        finally:
            await chromium.close()
