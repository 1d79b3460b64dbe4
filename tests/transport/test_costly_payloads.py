"""A costly payload (up to seconds of validation) neither stops the hub's other requests nor
holds a database connection while it is validated; past a bound of them waiting in one
process, a costly submit is refused with 503 and changes nothing."""

import asyncio

import httpx
import pytest

from taskhub.main import create_app
from taskhub.settings import Settings
from taskhub.validation import payload_checks
from tests.support.api import ApiClient, assert_problem
from tests.support.costly_payloads import COSTLY, POINTS_SCHEMA, until_checks_waiting

JOB = "room1:modifiers:Points"


@pytest.fixture
def settings(database_url: str) -> Settings:
    # One pooled connection: a submit that held it while its payload is validated would
    # leave none for the other requests.
    return Settings(database_url=database_url, db_pool_size=1)


def submitting(client, payload: dict) -> asyncio.Task:  # type: ignore[no-untyped-def]
    return asyncio.create_task(client.post(f"/rooms/room1/tasks/{JOB}", json={"payload": payload}))


async def test_the_hub_reads_and_writes_for_others_while_a_costly_payload_is_validated(alice, bob):
    await alice.register(name="Points", schema=POINTS_SCHEMA)
    costly = submitting(alice, COSTLY)
    await until_checks_waiting(payload_checks.PROCESS_CHECKS, 1)
    listed = await bob.get("/rooms/room1/tasks")
    await bob.register(room="room2", name="Other")
    small = await bob.submit(JOB, payload={"points": [[1, 2, 3]]})
    assert not costly.done(), "the others were answered while it was still being validated"
    assert listed.json()["total"] == 0
    response = await costly
    assert response.status_code == 202, response.text[:300]
    assert {task["id"] for task in (await bob.get("/rooms/room1/tasks")).json()["items"]} == {
        small["id"],
        response.json()["id"],
    }


async def test_past_a_user_s_bound_a_costly_submit_is_refused_with_503_and_changes_nothing(
    alice, bob
):
    """Two of one user's costly payloads may wait for the payload thread at once; another
    user's still get in."""
    await alice.register(name="Points", schema=POINTS_SCHEMA)
    first, second = submitting(alice, COSTLY), submitting(alice, COSTLY)
    await until_checks_waiting(payload_checks.PROCESS_CHECKS, 2)
    refused = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": COSTLY})
    assert_problem(refused, 503, "validation-busy")
    assert refused.headers["retry-after"] == "1"
    assert (
        await bob.post(f"/rooms/room1/tasks/{JOB}", json={"payload": COSTLY})
    ).status_code == 202
    assert [(await task).status_code for task in (first, second)] == [202, 202]
    tasks = (await alice.get("/rooms/room1/tasks")).json()
    assert tasks["total"] == 3


async def test_the_validation_deadline_is_a_setting(settings, tokens):
    """``TASKHUB_PAYLOAD_VALIDATION_SECONDS``: this payload takes about 0.3 s here."""
    app = create_app(settings.model_copy(update={"payload_validation_seconds": 0.05}))
    try:
        async with app.lifespan_context():
            transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
            async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as http:
                alice = ApiClient(http, tokens.alice)
                await alice.register(name="Points", schema=POINTS_SCHEMA)
                refused = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": COSTLY})
        problem = assert_problem(refused, 422, "validation-error")
        assert "0.05 seconds" in problem["detail"]
    finally:
        payload_checks.PROCESS_CHECKS.deadline_seconds = settings.payload_validation_seconds
