"""``GET /tasks/{id}`` with ``Prefer: wait=N`` (RFC 7240)."""

import asyncio
import time

import pytest

from taskhub.settings import Settings
from tests.support.api import JOB
from tests.support.metrics import Samples
from tests.support.waiting import eventually


@pytest.fixture
def settings(database_url: str) -> Settings:
    # A small pool proves long-polls do not hold connections while they wait.
    return Settings(database_url=database_url, long_poll_max_wait_seconds=3, db_pool_size=2)


def wait(seconds: int) -> dict[str, str]:
    return {"Prefer": f"wait={seconds}"}


async def waiters(http) -> float:
    return Samples((await http.get("/metrics")).text).count("taskhub_long_poll_waiters")


async def until_waiting(http, count: float) -> None:
    """Until ``count`` long-polls wait (a fixed sleep would only hope they got there)."""

    async def counted() -> bool:
        return await waiters(http) == count

    await eventually(counted, 10, f"{count} long-polls waiting", 0.01)


async def test_terminal_task_answers_at_once(alice, job):
    task = await alice.submit(JOB)
    await alice.transition(task["id"], "cancelled")
    started = time.monotonic()
    response = await alice.get(f"/tasks/{task['id']}", headers=wait(3))
    assert time.monotonic() - started < 1
    assert response.json()["status"] == "cancelled"
    assert "preference-applied" not in response.headers


async def test_wakes_when_the_task_ends(alice, job, http):
    task = await alice.submit(JOB)
    before = await waiters(http)
    poll = asyncio.create_task(alice.get(f"/tasks/{task['id']}", headers=wait(3)))
    await until_waiting(http, before + 1)
    assert not poll.done()
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    # No event says the wait went on past the change: give a wrong wake-up time to end it.
    await asyncio.sleep(0.1)
    assert not poll.done(), "a non-terminal transition must not end the wait"
    await alice.transition(task["id"], "completed")
    response = await asyncio.wait_for(poll, 1)
    assert response.json()["status"] == "completed"
    assert response.headers["preference-applied"] == "wait=3"


async def test_times_out_with_the_current_state(alice, job):
    task = await alice.submit(JOB)
    started = time.monotonic()
    response = await alice.get(f"/tasks/{task['id']}", headers=wait(1))
    assert 0.9 <= time.monotonic() - started < 3
    assert response.json()["status"] == "pending"
    assert response.headers["preference-applied"] == "wait=1"


async def test_wait_is_capped_by_the_setting(alice, job):
    task = await alice.submit(JOB)
    started = time.monotonic()
    response = await alice.get(
        f"/tasks/{task['id']}", headers={"Prefer": "respond-async, wait=100"}
    )
    assert time.monotonic() - started < 5
    assert response.headers["preference-applied"] == "wait=3"


@pytest.mark.parametrize("asked", ["9" * 5000, "0" * 5000 + "2"])
async def test_a_wait_of_any_length_is_read_against_the_cap(alice, job, asked):
    task = await alice.submit(JOB)
    response = await alice.get(f"/tasks/{task['id']}", headers={"Prefer": f"wait={asked}"})
    assert response.status_code == 200
    assert response.headers["preference-applied"] == ("wait=3" if asked[0] == "9" else "wait=2")


async def test_without_prefer_there_is_no_wait(alice, job):
    task = await alice.submit(JOB)
    response = await alice.get(f"/tasks/{task['id']}", headers={"Prefer": "handling=lenient"})
    assert response.json()["status"] == "pending"
    assert "preference-applied" not in response.headers


async def test_waiting_polls_hold_no_database_connection(alice, job, http):
    tasks = [await alice.submit(JOB) for _ in range(8)]
    before = await waiters(http)
    polls = [asyncio.create_task(alice.get(f"/tasks/{t['id']}", headers=wait(3))) for t in tasks]
    await until_waiting(http, before + 8)
    # Eight waiting polls and a pool of two: other requests still go through promptly.
    started = time.monotonic()
    for task in tasks:
        assert (await alice.transition(task["id"], "cancelled")).status_code == 200
    assert time.monotonic() - started < 2
    answers = await asyncio.wait_for(asyncio.gather(*polls), 2)
    assert {a.json()["status"] for a in answers} == {"cancelled"}


async def test_unknown_task_is_404_even_when_waiting(alice):
    response = await alice.get("/tasks/00000000-0000-0000-0000-000000000000", headers=wait(2))
    assert response.status_code == 404
