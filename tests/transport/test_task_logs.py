"""Task logs over REST (both engines): a worker's batches, fenced like a PATCH, bounded per
task and per second, read page by page, published as ``task_log``, deleted with the task."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import update

from taskhub.clock import utcnow
from taskhub.realtime.event_payloads import event_payload
from taskhub.rules.events import TaskLogged
from taskhub.rules.log_limits import TRUNCATED_MARKER, LogLimits
from taskhub.services import sweeps
from taskhub.services.task_logs import LogRates
from taskhub.store.tables import task_log_table, task_table
from tests.support.api import JOB, ApiClient, assert_problem


def lines(*messages: str, level: str = "info", logger: str | None = "run") -> list[dict[str, Any]]:
    at = datetime.now(UTC).isoformat()
    return [{"at": at, "level": level, "logger": logger, "message": m} for m in messages]


async def claimed(
    alice: ApiClient, worker_id: str, *, running: bool = True, **extra: Any
) -> dict[str, Any]:
    """A task of ``JOB`` claimed by ``worker_id`` (started unless told otherwise)."""
    await alice.submit(JOB, **extra)
    task = await alice.claim(worker_id)
    assert task is not None
    if running:
        response = await alice.transition(task["id"], "running", claim_token=task["claim_token"])
        assert response.status_code == 200, response.text
    return task


async def post(client: ApiClient, task: dict[str, Any], body_lines: Any, **extra: Any) -> Any:
    body = {"claim_token": task["claim_token"], "lines": body_lines, **extra}
    return await client.post(f"/tasks/{task['id']}/logs", json=body)


async def stored(client: ApiClient, task_id: str, **params: Any) -> list[dict[str, Any]]:
    response = await client.get(f"/tasks/{task_id}/logs", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


async def count_rows(db, task_id: str) -> int:
    async with db.read() as conn:
        result = await conn.execute(
            task_log_table.select().where(task_log_table.c.task_id == uuid.UUID(task_id))
        )
        return len(result.all())


async def test_lines_are_stored_in_order_and_readable_by_anyone(alice, bob, job, published):
    task = await claimed(alice, job["worker_id"])
    response = await post(alice, task, lines("one", "two", "three"), dropped=4)
    assert response.status_code == 202
    assert response.json() == {"accepted": 3, "dropped": 0}
    items = await stored(bob, task["id"])
    assert [item["message"] for item in items] == ["one", "two", "three"]
    assert [item["dropped"] for item in items] == [4, 0, 0]  # the worker's drops, marked
    assert set(items[0]) == {"id", "attempt", "at", "level", "logger", "message", "dropped"}
    assert items[0]["attempt"] == 1 and items[0]["level"] == "info"
    assert items[0]["logger"] == "run"
    assert items[0]["id"] < items[1]["id"] < items[2]["id"]
    logged = [event for event in published if isinstance(event, TaskLogged)]
    assert len(logged) == 1  # one event per POST, not one per line
    payload = event_payload(logged[0])
    assert payload["task_id"] == task["id"] and payload["room_id"] == "room1"
    assert [line["message"] for line in payload["lines"]] == ["one", "two", "three"]
    assert [line["id"] for line in payload["lines"]] == [item["id"] for item in items]
    assert logged[0].room == "room:room1"


async def test_a_claimed_task_takes_lines_too(alice, job):
    task = await claimed(alice, job["worker_id"], running=False)
    assert (await post(alice, task, lines("claimed"))).status_code == 202
    assert [item["message"] for item in await stored(alice, task["id"])] == ["claimed"]


async def test_the_fence_refuses_and_stores_nothing(alice, bob, admin, job, db, published):
    task = await claimed(alice, job["worker_id"])
    assert_problem(await post(bob, task, lines("x")), 403, "forbidden")
    stale = {**task, "claim_token": str(uuid.uuid4())}
    assert_problem(await post(alice, stale, lines("x")), 409, "stale-claim")
    assert_problem(await post(alice, task, lines("x", level="verbose")), 422, "validation-error")
    too_many = lines(*(str(i) for i in range(501)))
    assert_problem(await post(alice, task, too_many), 422, "validation-error")
    assert_problem(await post(alice, task, []), 422, "validation-error")
    naive = [{"at": "2026-01-01T00:00:00", "level": "info", "message": "x"}]
    assert_problem(await post(alice, task, naive), 422, "validation-error")
    assert_problem(await post(alice, task, lines("x"), dropped=-1), 422, "validation-error")
    missing = {**task, "id": str(uuid.uuid4())}
    assert_problem(await post(alice, missing, lines("x")), 404, "task-not-found")
    assert await count_rows(db, task["id"]) == 0
    assert not [event for event in published if isinstance(event, TaskLogged)]
    # A superuser passes the fence (with the current token).
    assert (await post(admin, task, lines("by admin"))).status_code == 202
    done = await alice.transition(task["id"], "completed", claim_token=task["claim_token"])
    assert done.status_code == 200
    assert_problem(await post(alice, task, lines("late")), 409, "invalid-task-transition")
    assert [item["message"] for item in await stored(alice, task["id"])] == ["by admin"]


async def test_a_retried_tasks_old_token_is_stale(alice, job):
    task = await claimed(alice, job["worker_id"], max_attempts=2)
    failed = await alice.transition(
        task["id"], "failed", claim_token=task["claim_token"], error="x", retry=True
    )
    assert failed.status_code == 200
    assert failed.json()["status"] == "pending"
    assert_problem(await post(alice, task, lines("late")), 409, "stale-claim")


async def test_the_oldest_lines_beyond_a_tasks_bound_go_and_are_marked(alice, app, job):
    app.hub.log_rates = LogRates(LogLimits(max_lines_per_task=10))
    task = await claimed(alice, job["worker_id"])
    assert (await post(alice, task, lines(*(f"a{i}" for i in range(8))))).status_code == 202
    assert (await post(alice, task, lines(*(f"b{i}" for i in range(8))), dropped=1)).json() == {
        "accepted": 8,
        "dropped": 0,
    }
    items = await stored(alice, task["id"])
    assert [item["message"] for item in items] == ["a6", "a7", *(f"b{i}" for i in range(8))]
    assert items[0]["dropped"] == 6  # a0..a5 went
    assert items[2]["dropped"] == 1  # the worker's own drops before b0
    # Once more: the drops marked on a line that goes are carried to the next one kept.
    assert (await post(alice, task, lines("c0", "c1", "c2"))).status_code == 202
    items = await stored(alice, task["id"])
    assert [item["message"] for item in items][:2] == ["b1", "b2"]
    assert items[0]["dropped"] == 6 + 3 + 1  # a0..a5, a6, a7, b0, and b0's own mark


def counted(outcome: str) -> float:
    value = REGISTRY.get_sample_value("taskhub_task_log_lines_total", {"outcome": outcome})
    assert value is not None, "the series starts at zero"
    return value


async def test_a_flood_beyond_the_rate_drops_the_oldest_and_counts_them(alice, app, job):
    accepted_before, dropped_before = counted("accepted"), counted("dropped")
    clock = [100.0]
    app.hub.log_rates = LogRates(LogLimits(lines_per_second=5), clock=lambda: clock[0])
    task = await claimed(alice, job["worker_id"])
    response = await post(alice, task, lines(*(f"m{i}" for i in range(8))), dropped=2)
    assert response.json() == {"accepted": 5, "dropped": 3}
    items = await stored(alice, task["id"])
    assert [item["message"] for item in items] == [f"m{i}" for i in range(3, 8)]
    assert items[0]["dropped"] == 2 + 3
    # No time has passed: nothing more is taken; the drops are owed to the next line kept.
    assert (await post(alice, task, lines("n0", "n1"))).json() == {"accepted": 0, "dropped": 2}
    clock[0] += 0.2  # one line's worth
    assert (await post(alice, task, lines("o0", "o1"))).json() == {"accepted": 1, "dropped": 1}
    items = await stored(alice, task["id"])
    assert [item["message"] for item in items][-1] == "o1"
    assert items[-1]["dropped"] == 2 + 1
    clock[0] += 10  # the bucket refills up to its rate, not beyond
    many = lines(*(f"p{i}" for i in range(7)))
    assert (await post(alice, task, many)).json() == {"accepted": 5, "dropped": 2}
    assert counted("accepted") - accepted_before == 5 + 0 + 1 + 5
    assert counted("dropped") - dropped_before == 3 + 2 + 1 + 2


async def test_long_messages_and_logger_names_are_cut(alice, app, job):
    app.hub.log_rates = LogRates(LogLimits(max_message_bytes=64))
    task = await claimed(alice, job["worker_id"])
    long_line = lines("é" * 100, logger="x" * 300)
    assert (await post(alice, task, long_line)).status_code == 202
    (item,) = await stored(alice, task["id"])
    assert item["message"].endswith(TRUNCATED_MARKER)
    assert len(item["message"].encode()) <= 64
    assert item["message"].startswith("é" * 10)
    assert item["logger"] == "x" * 128


async def test_every_level_is_taken(alice, job):
    task = await claimed(alice, job["worker_id"])
    body = [
        *lines("d", level="debug"),
        *lines("i", level="info"),
        *lines("w", level="warning"),
        *lines("e", level="error"),
        *lines("c", level="critical", logger=None),
    ]
    assert (await post(alice, task, body)).json() == {"accepted": 5, "dropped": 0}
    items = await stored(alice, task["id"])
    assert [item["level"] for item in items] == ["debug", "info", "warning", "error", "critical"]
    assert items[-1]["logger"] is None


async def test_paging_with_after(alice, job):
    task = await claimed(alice, job["worker_id"])
    await post(alice, task, lines(*(f"m{i}" for i in range(5))))
    first = (await alice.get(f"/tasks/{task['id']}/logs", params={"limit": 2})).json()
    assert [item["message"] for item in first["items"]] == ["m0", "m1"]
    assert first["next"] == first["items"][-1]["id"]
    second = (
        await alice.get(f"/tasks/{task['id']}/logs", params={"after": first["next"], "limit": 2})
    ).json()
    assert [item["message"] for item in second["items"]] == ["m2", "m3"]
    rest = await stored(alice, task["id"], after=second["next"])
    assert [item["message"] for item in rest] == ["m4"]
    end = (await alice.get(f"/tasks/{task['id']}/logs", params={"after": rest[-1]["id"]})).json()
    assert end == {"items": [], "next": None}


async def test_reading_refuses_bad_parameters_and_unknown_tasks(alice, job):
    task = await claimed(alice, job["worker_id"])
    for params in ({"limit": 0}, {"limit": 1001}, {"after": -1}, {"after": "x"}):
        response = await alice.get(f"/tasks/{task['id']}/logs", params=params)
        assert_problem(response, 422, "validation-error")
    assert_problem(await alice.get(f"/tasks/{uuid.uuid4()}/logs"), 404, "task-not-found")
    assert_problem(await alice.get("/tasks/not-a-uuid/logs"), 422, "validation-error")
    assert (await alice.get(f"/tasks/{task['id']}/logs")).json() == {"items": [], "next": None}


async def test_lines_go_with_their_task_when_retention_purges_it(alice, job, db):
    kept, purged = [await claimed(alice, job["worker_id"]) for _ in range(2)]
    for task in (kept, purged):
        await post(alice, task, lines("a", "b"))
        await alice.transition(task["id"], "completed", claim_token=task["claim_token"])
    async with db.write() as conn:
        ended_long_ago = utcnow() - timedelta(days=30)
        await conn.execute(
            update(task_table)
            .where(task_table.c.id == uuid.UUID(purged["id"]))
            .values(completed_at=ended_long_ago)
        )
    assert await count_rows(db, purged["id"]) == 2
    removed = await sweeps.purge_old_tasks(
        db, utcnow() - timedelta(days=7), batch=10, max_batches=1
    )
    assert removed == 1
    assert await count_rows(db, purged["id"]) == 0
    assert await count_rows(db, kept["id"]) == 2


@pytest.mark.parametrize("unauthenticated", ["GET", "POST"])
async def test_logs_need_a_token(anonymous, alice, job, unauthenticated):
    task = await claimed(alice, job["worker_id"])
    if unauthenticated == "GET":
        response = await anonymous.get(f"/tasks/{task['id']}/logs")
    else:
        response = await post(anonymous, task, lines("x"))
    assert_problem(response, 401, "unauthorized")


@pytest.mark.parametrize("size", [1, 32, 33, 500])
async def test_batches_of_every_size_are_stored_in_order(alice, job, size):
    task = await claimed(alice, job["worker_id"])
    body = lines(*(f"m{i}" for i in range(size)))
    assert (await post(alice, task, body)).json() == {"accepted": size, "dropped": 0}
    items = await stored(alice, task["id"])
    assert [item["message"] for item in items] == [f"m{i}" for i in range(size)]
    assert [item["id"] for item in items] == sorted(item["id"] for item in items)
