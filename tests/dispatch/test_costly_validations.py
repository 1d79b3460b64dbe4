"""``@internal:analysis:ValidatePayload`` is bounded per user like a costly submit: a user's
unfinished tasks of it count against their bound of costly validations
(``TASKHUB_USER_MAX_COSTLY_VALIDATIONS``, hub-wide: a submit past it is refused with 503
``validation-busy`` and stores nothing), and the costly payload it validates takes one of
its submitter's places on the payload thread. One user's flood of them leaves the hub's
costly validations to everyone else."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

from taskhub.validation import payload_checks
from tests.support.api import ApiClient, assert_problem
from tests.support.costly_payloads import COSTLY, POINTS_SCHEMA
from tests.support.waiting import eventually

VALIDATE = "@internal:analysis:ValidatePayload"
POINTS = "room1:modifiers:Points"


@pytest.fixture(autouse=True)
def process_bound_restored() -> Iterator[None]:
    """The process's payload checks are shared: put their per-user bound back."""
    yield
    payload_checks.PROCESS_CHECKS.most_waiting_per_user = 2


def validating(payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"payload": {"job": POINTS, "payload": payload}, **extra}


async def tasks_of(client: ApiClient, submitter: str) -> list[dict[str, Any]]:
    listed = await client.get("/rooms/room1/tasks", params={"submitted_by": submitter})
    assert listed.status_code == 200, listed.text
    return listed.json()["items"]


async def wait_done(client: ApiClient, task_id: str) -> dict[str, Any]:
    async def ended() -> dict[str, Any] | None:
        task = await client.task(task_id)
        return task if task["status"] in ("completed", "failed", "cancelled") else None

    done: dict[str, Any] = await eventually(ended, 60, f"task {task_id} ended")
    return done


async def test_past_a_user_s_unfinished_validations_a_submit_is_refused_and_stores_nothing(
    alice, bob
):
    """Delayed, the two tasks stay unfinished: the third is refused (503, ``Retry-After``);
    another user's goes through; once one of the two ends there is room again."""
    await alice.register(name="Points", schema=POINTS_SCHEMA)
    waiting = [
        (
            await alice.post(
                f"/rooms/room1/tasks/{VALIDATE}", json=validating({}, delay_seconds=3600)
            )
        )
        for _ in range(2)
    ]
    assert [response.status_code for response in waiting] == [202, 202]
    refused = await alice.post(f"/rooms/room1/tasks/{VALIDATE}", json=validating({}))
    problem = assert_problem(refused, 503, "validation-busy")
    assert "2 of your costly validations" in problem["detail"]
    assert refused.headers["retry-after"] == "1"
    assert len(await tasks_of(alice, "me")) == 2, "the refused submit stored nothing"

    other = await bob.post(f"/rooms/room1/tasks/{VALIDATE}", json=validating(COSTLY))
    assert other.status_code == 202, other.text
    assert (await wait_done(bob, other.json()["id"]))["result"]["valid"] is True

    ended = await alice.transition(waiting[0].json()["id"], "cancelled")
    assert ended.status_code == 200, ended.text
    again = await alice.post(f"/rooms/room1/tasks/{VALIDATE}", json=validating({"points": []}))
    assert again.status_code == 202, again.text
    assert (await wait_done(alice, again.json()["id"]))["result"]["valid"] is True


class TestOnePlaceAtTheThread:
    @pytest.fixture
    def settings(self, settings):
        """One costly validation per user at once."""
        return settings.model_copy(update={"user_max_costly_validations": 1})

    async def test_its_costly_payload_takes_the_submitter_s_place_on_the_thread(self, alice, bob):
        """While alice's ``ValidatePayload`` validates a costly payload, her own costly
        submit is refused (her one place is taken), bob's is not."""
        await alice.register(name="Points", schema=POINTS_SCHEMA)
        alice_id = UUID((await alice.get("/users/me")).json()["id"])
        task = await alice.submit(VALIDATE, payload={"job": POINTS, "payload": COSTLY})
        checks = payload_checks.PROCESS_CHECKS
        await eventually(lambda: checks.waiting_of(alice_id) == 1, 30, "hers at the thread", 0.005)
        mine = await alice.post(f"/rooms/room1/tasks/{POINTS}", json={"payload": COSTLY})
        assert_problem(mine, 503, "validation-busy")
        theirs = await bob.post(f"/rooms/room1/tasks/{POINTS}", json={"payload": COSTLY})
        assert theirs.status_code == 202, theirs.text
        done = await wait_done(alice, task["id"])
        assert done["result"] == {"job": POINTS, "valid": True, "errors": []}

    async def test_a_second_one_is_refused_while_the_first_is_unfinished(self, alice):
        first = await alice.post(
            f"/rooms/room1/tasks/{VALIDATE}", json=validating({}, delay_seconds=3600)
        )
        assert first.status_code == 202, first.text
        refused = await alice.post(f"/rooms/room1/tasks/{VALIDATE}", json=validating({}))
        assert (
            "1 of your costly validations"
            in assert_problem(refused, 503, "validation-busy")["detail"]
        )


async def test_a_flood_of_validations_is_refused_while_another_user_is_served(alice, bob):
    """Alice submits ``ValidatePayload`` with a costly payload again and again; meanwhile
    bob submits costly payloads of his own and reads the room: every one of his requests
    is answered as if she were not there (no 503, no 5xx); hers are accepted or refused
    with ``validation-busy``, the refused ones storing nothing, the accepted ones done."""
    await alice.register(name="Points", schema=POINTS_SCHEMA)
    flooding = True
    bobs: list[int] = []

    async def bystander() -> None:
        while flooding:
            submitted = await bob.post(f"/rooms/room1/tasks/{POINTS}", json={"payload": COSTLY})
            listed = await bob.get("/rooms/room1/tasks")
            bobs.extend([submitted.status_code, listed.status_code])

    watching = asyncio.create_task(bystander())
    answers = []
    for _ in range(8):
        response = await alice.post(f"/rooms/room1/tasks/{VALIDATE}", json=validating(COSTLY))
        if response.status_code != 202:
            assert_problem(response, 503, "validation-busy")
        answers.append(response)
    flooding = False
    await watching

    accepted = [response.json()["id"] for response in answers if response.status_code == 202]
    assert 2 <= len(accepted) < len(answers), [response.status_code for response in answers]
    assert bobs and set(bobs) <= {200, 202}, bobs
    assert {task["id"] for task in await tasks_of(alice, "me")} == set(accepted)
    for task_id in accepted:
        assert (await wait_done(alice, task_id))["result"]["valid"] is True
