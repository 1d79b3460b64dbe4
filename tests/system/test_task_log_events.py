"""``task_log`` over Socket.IO from a real ``taskhub serve`` (SQLite and PostgreSQL): a
member of the task's room receives each stored batch as one event, a socket in another
room nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from tests.support.api import ApiClient
from tests.support.names import unique
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe


async def test_a_room_member_receives_each_batch_as_one_event(
    shared_server: HubServer, http: httpx.AsyncClient, lab: str, job: str
) -> None:
    token = shared_server.create_user(unique("alice"))
    alice = ApiClient(http, token)
    url = shared_server.base_url
    elsewhere = unique("elsewhere")
    async with SocketProbe("browser") as browser, SocketProbe("stranger") as stranger:
        await browser.connect(url, shared_server.admin_token)
        await browser.room_join(lab)
        await stranger.connect(url, token)
        await stranger.room_join(elsewhere)
        worker_id = (await alice.register(room=lab, name="R", schema={}))["worker_id"]
        task = await alice.submit(job, room=lab)
        claimed = await alice.claim(worker_id)
        assert claimed is not None and claimed["id"] == task["id"]
        at = datetime.now(UTC).isoformat()
        for batch in (["one", "two"], ["three"]):
            body = {
                "claim_token": claimed["claim_token"],
                "lines": [{"at": at, "level": "warning", "message": text} for text in batch],
            }
            response = await alice.post(f"/tasks/{task['id']}/logs", json=body)
            assert response.status_code == 202, response.text
        first = await browser.wait_for("task_log")
        second = await browser.wait_for("task_log", after=browser.received.index(first) + 1)
        for received in (first, second):
            assert set(received.data) == {"task_id", "room_id", "lines"}
            assert received.data["task_id"] == task["id"]
            assert received.data["room_id"] == lab
        messages = [[line["message"] for line in r.data["lines"]] for r in (first, second)]
        assert sorted(messages) == [["one", "two"], ["three"]]
        stored = (await alice.get(f"/tasks/{task['id']}/logs")).json()["items"]
        sent = [line for r in (first, second) for line in r.data["lines"]]
        assert sorted(sent, key=lambda line: line["id"]) == [
            {**item, "at": datetime.fromisoformat(item["at"]).isoformat()} for item in stored
        ]
        # A later event of the room as a sentinel: nothing more of the logs is on its way.
        await alice.transition(task["id"], "running")
        await browser.wait_status(task["id"], "running")
        assert len(browser.named("task_log")) == 2
        assert stranger.named("task_log") == []
