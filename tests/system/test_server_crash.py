"""Killing the server with SIGKILL under load loses no acknowledged task (docs/protocol.md,
"Guarantees": a submit answered 202 is committed and survives a crash of the server).

A real ``taskhub serve`` process on SQLite and on PostgreSQL takes submits from four
concurrent clients; after about a second and a half it is killed with SIGKILL, a new process
is started on the same database, and every task the first process acknowledged (202 with a
task body) must be there, pending, with the payload that was sent. Submits that were in
flight at the kill may or may not have been stored, but nothing is half-written and nothing
is stored twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import PREFIX
from tests.support.server import Backend, HubServer, provisioned_database

ROOM = "crash"
JOB = f"{ROOM}:modifiers:Stamp"
SUBMITTERS = 4
LOAD_SECONDS = 1.5
# Submits before the kill: enough that the kill lands mid-stream, not on an idle server.
MIN_ACKNOWLEDGED = 40
SLOW_MACHINE_SECONDS = 20.0
PAGE = 500


@dataclass
class Submitter:
    """One client's record: every payload it sent, and the acknowledged ones by task id."""

    index: int
    sent: list[dict[str, Any]] = field(default_factory=list)
    acknowledged: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped_by: str = ""


async def submit_until_failure(
    base_url: str, headers: dict[str, str], submitter: Submitter, stop: asyncio.Event
) -> None:
    """Submit ``{"submitter": i, "n": k}`` for k = 0, 1, … until the server goes away (or
    ``stop`` is set, as a bound). A task counts as acknowledged only with a 202 and its body."""
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=10.0, trust_env=False
    ) as client:
        counter = 0
        while not stop.is_set():
            payload = {"submitter": submitter.index, "n": counter}
            counter += 1
            submitter.sent.append(payload)
            try:
                response = await client.post(
                    f"{PREFIX}/rooms/{ROOM}/tasks/{JOB}", json={"payload": payload}
                )
                body = response.json() if response.status_code == 202 else None
            except (httpx.TransportError, ValueError) as exc:
                submitter.stopped_by = repr(exc)
                return
            assert response.status_code == 202, response.text
            assert isinstance(body, dict) and body["payload"] == payload, body
            assert body["id"] not in submitter.acknowledged, body
            submitter.acknowledged[body["id"]] = payload
        submitter.stopped_by = "stop"


async def all_room_tasks(client: httpx.AsyncClient) -> tuple[list[dict[str, Any]], int]:
    """Every task of the room, paging with ``limit=500``; and the ``total`` the pages report."""
    items: list[dict[str, Any]] = []
    totals: set[int] = set()
    offset = 0
    while True:
        response = await client.get(
            f"{PREFIX}/rooms/{ROOM}/tasks", params={"limit": PAGE, "offset": offset}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        totals.add(page["total"])
        items.extend(page["items"])
        if len(page["items"]) < PAGE:
            break
        offset += PAGE
    assert len(totals) == 1, totals  # nothing is written any more, so the total is stable
    return items, totals.pop()


def acknowledged_so_far(submitters: list[Submitter]) -> int:
    return sum(len(submitter.acknowledged) for submitter in submitters)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_sigkill_under_submit_load_loses_no_acknowledged_task(
    backend: Backend, tmp_path: Path
) -> None:
    with provisioned_database(backend, tmp_path) as url:
        server = HubServer(url, log_dir=tmp_path)
        try:
            await asyncio.to_thread(server.start)
            headers = server.admin_headers
            async with httpx.AsyncClient(
                base_url=server.base_url, headers=headers, timeout=10.0, trust_env=False
            ) as client:
                registered = await client.put(
                    f"{PREFIX}/rooms/{ROOM}/jobs",
                    json={"category": "modifiers", "name": "Stamp", "schema": {"type": "object"}},
                )
                assert registered.status_code == 201, registered.text

            submitters = [Submitter(index) for index in range(SUBMITTERS)]
            stop = asyncio.Event()
            runs = [
                asyncio.create_task(submit_until_failure(server.base_url, headers, s, stop))
                for s in submitters
            ]
            await asyncio.sleep(LOAD_SECONDS)
            # On a loaded machine, give the load a while longer to reach its size.
            deadline = time.monotonic() + SLOW_MACHINE_SECONDS
            while acknowledged_so_far(submitters) < MIN_ACKNOWLEDGED:
                assert time.monotonic() < deadline, acknowledged_so_far(submitters)
                await asyncio.sleep(0.1)
            assert not any(run.done() for run in runs), [s.stopped_by for s in submitters]
            killed_at = time.monotonic()
            await asyncio.to_thread(server.kill)
            assert server.killed and server.returncode == -9, server.returncode
            stop.set()  # a bound only: the submitters stop on their own when the server is gone
            await asyncio.wait_for(asyncio.gather(*runs), 15)
            assert time.monotonic() - killed_at < 15
            for submitter in submitters:
                assert submitter.stopped_by not in ("", "stop"), submitter.stopped_by

            acknowledged: dict[str, dict[str, Any]] = {}
            for submitter in submitters:
                acknowledged.update(submitter.acknowledged)
            assert len(acknowledged) == sum(len(s.acknowledged) for s in submitters)
            assert len(acknowledged) >= MIN_ACKNOWLEDGED, len(acknowledged)
            sent = {(p["submitter"], p["n"]) for s in submitters for p in s.sent}

            await asyncio.to_thread(server.start)  # a new process on the same database
            async with httpx.AsyncClient(
                base_url=server.base_url, headers=headers, timeout=10.0, trust_env=False
            ) as client:
                for task_id, payload in acknowledged.items():
                    response = await client.get(f"{PREFIX}/tasks/{task_id}")
                    assert response.status_code == 200, (task_id, response.text)
                    task = response.json()
                    assert task["status"] == "pending", task
                    assert task["payload"] == payload, task
                    assert task["job_name"] == JOB, task

                items, total = await all_room_tasks(client)
        finally:
            server.stop()

    ids = [item["id"] for item in items]
    assert len(set(ids)) == len(ids) == total, (len(set(ids)), len(ids), total)
    assert set(acknowledged) <= set(ids), set(acknowledged) - set(ids)
    for item in items:
        assert item["job_name"] == JOB, item
        assert item["room_id"] == ROOM, item
        assert item["status"] == "pending", item
        assert item["created_at"], item
        payload = item["payload"]
        assert isinstance(payload, dict) and set(payload) == {"submitter", "n"}, item
        assert (payload["submitter"], payload["n"]) in sent, item
        if item["id"] in acknowledged:
            assert payload == acknowledged[item["id"]], item
    stored = Counter((item["payload"]["submitter"], item["payload"]["n"]) for item in items)
    duplicates = {key: count for key, count in stored.items() if count > 1}
    assert not duplicates, duplicates
    # Unacknowledged submits are only those in flight at the kill: at most one per client.
    assert total - len(acknowledged) <= SUBMITTERS, (total, len(acknowledged))
