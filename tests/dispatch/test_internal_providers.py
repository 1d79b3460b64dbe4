"""``@internal`` providers (docs/protocol.md, "Providers"): the hub's own, registered at
its start with no worker, answered by its taskiq executor (here the embedded broker, in the
hub's process; with Redis the ``taskiq worker`` process), never registered or deleted over
REST."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import insert

from taskhub.clock import new_id, utcnow
from taskhub.main import TaskhubApp
from taskhub.settings import Settings
from taskhub.store.tables import provider_table
from tests.dispatch import internal_providers
from tests.support.api import ApiClient, assert_problem
from tests.support.databases import REDIS_URL
from tests.support.server import TaskiqWorker, running_hub

SQUARES = "@internal:numbers:Squares"
BLOB = "@internal:blobs:Blob"


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, internal_job_modules=[internal_providers.MODULE])


async def test_internal_providers_are_listed_with_no_worker_from_every_room(alice):
    for room in ("lab", "@internal"):
        listed = (await alice.get(f"/rooms/{room}/providers")).json()["items"]
        by_name = {provider["full_name"]: provider for provider in listed}
        assert set(by_name) == {SQUARES, BLOB}
        assert by_name[SQUARES]["worker_id"] is None
        assert by_name[SQUARES]["schema"]["properties"]["n"]["maximum"] == 1000
        assert by_name[BLOB]["content_type"] == "application/octet-stream"
    assert (await alice.get("/rooms/@global/providers")).json()["items"] == []


async def test_the_executor_answers_json_and_bytes(alice, bob):
    squares = await bob.get(f"/rooms/lab/providers/{SQUARES}", params={"n": "5"},
                            headers={"Prefer": "wait=10"})  # fmt: skip
    assert squares.status_code == 200, squares.text
    assert squares.json() == [0, 1, 4, 9, 16]
    assert squares.headers["preference-applied"] == "wait=10"
    blob = await alice.get(
        f"/rooms/lab/providers/{BLOB}", params={"size": "3", "fill": "7"},
        headers={"Prefer": "wait=10"},
    )  # fmt: skip
    assert blob.headers["content-type"] == "application/octet-stream"
    assert blob.content == b"\x07\x07\x07"
    cached = await alice.get(f"/rooms/lab/providers/{SQUARES}", params={"n": "5"})
    assert cached.json() == [0, 1, 4, 9, 16]


async def test_a_read_the_definition_refuses_is_a_failed_read(bob):
    refused = await bob.get(f"/rooms/lab/providers/{SQUARES}", params={"n": "many"},
                            headers={"Prefer": "wait=10"})  # fmt: skip
    body = assert_problem(refused, 400, "provider-execution-failed")
    assert body["detail"].startswith("ValidationError")


async def test_internal_providers_are_not_registered_nor_deleted_over_rest(app, admin, alice):
    listed = (await admin.get("/rooms/@internal/providers")).json()["items"]
    squares = next(p for p in listed if p["full_name"] == SQUARES)
    body = {"category": "numbers", "name": "Squares", "schema": {}}
    assert_problem(await admin.put("/rooms/@internal/providers", json=body), 403, "forbidden")
    assert_problem(await admin.delete(f"/providers/{squares['id']}"), 403, "forbidden")
    posted = await alice.post(
        f"/providers/{squares['id']}/results", content=b"[]", headers={"X-Request-Hash": "a" * 64}
    )
    assert_problem(posted, 403, "forbidden")  # nobody's but the hub's
    assert (await admin.get("/rooms/@internal/providers")).json()["items"] == listed


async def test_an_internal_provider_without_an_executor_is_unavailable(app: TaskhubApp, bob):
    async with app.hub.db.write() as conn:
        await conn.execute(
            insert(provider_table).values(
                id=new_id(), room_id="@internal", category="numbers", name="Gone", schema={},
                content_type="application/json", user_id=None, worker_id=None,
                created_at=utcnow(),
            )
        )  # fmt: skip
    missing = await bob.get("/rooms/lab/providers/@internal:numbers:Gone")
    assert_problem(missing, 503, "internal-job-not-configured")
    # The lock was let go: the next read asks again (and is refused again), not a 504.
    again = await bob.get("/rooms/lab/providers/@internal:numbers:Gone")
    assert_problem(again, 503, "internal-job-not-configured")


async def test_with_redis_the_taskiq_worker_process_answers(tmp_path: Path) -> None:
    """``taskhub serve`` with Redis enqueues the read on the stream; ``taskiq worker``
    answers it, and the hub's reader (and one on another replica's cache) gets it."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    env = {
        "TASKHUB_REDIS_URL": REDIS_URL,
        "TASKHUB_REDIS_NAMESPACE": namespace,
        "TASKHUB_INTERNAL_JOB_MODULES": internal_providers.MODULE,
    }
    try:
        with (
            running_hub("postgres", tmp_path, env=env) as server,
            TaskiqWorker(server.database_url, env=env, log_dir=tmp_path) as worker,
        ):
            token = server.create_user("reader")
            async with httpx.AsyncClient(
                base_url=server.base_url, timeout=30.0, trust_env=False
            ) as http:
                reader = ApiClient(http, token)
                answered = await reader.get(
                    f"/rooms/lab/providers/{SQUARES}",
                    params={"n": "4"},
                    headers={"Prefer": "wait=20"},
                )
                assert answered.status_code == 200, f"{answered.text}\n{worker.output()}"
                assert answered.json() == [0, 1, 4, 9]
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = [
                *client.scan_iter(f"{namespace}:*"),
                *client.scan_iter(f"autoclaim:{namespace}:*"),
            ]
            if keys:
                client.delete(*keys)
