"""Job registration and discovery (PUT/GET /rooms/{room}/jobs…)."""

import asyncio
from uuid import UUID

import asyncpg
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.engine import make_url

from taskhub.store.tables import job_table, link_table, worker_table
from taskhub.validation import schema_checks
from taskhub.validation.payloads import MAX_SCHEMA_BYTES, schema_bytes
from tests.support.api import SCHEMA, assert_problem
from tests.support.databases import until_a_lock_is_waited_for
from tests.support.event_loop import assert_served_during, record_spans, watched_loop


async def test_register_creates_job_and_worker(alice):
    response = await alice.put(
        "/rooms/room1/jobs", json={"category": "modifiers", "name": "Rotate", "schema": SCHEMA}
    )
    assert response.status_code == 201
    job = response.json()
    assert job["full_name"] == "room1:modifiers:Rotate"
    assert job["room_id"] == "room1"
    assert job["schema"] == SCHEMA
    assert job["workers"] == [job["worker_id"]]


async def test_identical_reregistration_is_idempotent(alice):
    first = await alice.register()
    response = await alice.put(
        "/rooms/room1/jobs",
        json={
            "category": "modifiers",
            "name": "Rotate",
            "schema": SCHEMA,
            "worker_id": first["worker_id"],
        },
    )
    assert response.status_code == 200
    assert response.json()["id"] == first["id"]
    assert response.json()["workers"] == [first["worker_id"]]


AS_SENT = {
    "type": "object",
    "properties": {
        "zeta": {"type": "number", "maximum": 1e23},
        "a": {"type": "string"},
        "middle": {"type": "boolean"},
    },
}


async def test_a_schema_is_kept_as_sent_its_key_order_and_numbers_included(alice):
    """The order of a schema's properties is the order of the page's form fields; a number
    such as 1e23 comes back as itself (PostgreSQL's jsonb would give neither)."""
    first = await alice.register(schema=AS_SENT)
    job = (await alice.get("/rooms/room1/jobs/room1:modifiers:Rotate")).json()
    assert list(job["schema"]["properties"]) == ["zeta", "a", "middle"]
    assert job["schema"]["properties"]["zeta"]["maximum"] == 1e23
    again = await alice.register(schema=AS_SENT, worker_id=first["worker_id"])
    assert again["id"] == first["id"]  # the same schema: no conflict with itself
    task = await alice.submit("room1:modifiers:Rotate", payload={"zeta": 1e23})
    assert task["payload"]["zeta"] == 1e23


async def test_a_schema_registered_again_in_another_key_order_keeps_the_order_sent(alice, db):
    """As a schema stored before 0009 (PostgreSQL's jsonb ordered its keys), registered
    again by a worker: the same schema, now in the order sent."""
    first = await alice.register(schema=AS_SENT)
    reordered = {**AS_SENT, "properties": dict(reversed(AS_SENT["properties"].items()))}
    async with db.write() as conn:
        await conn.execute(
            update(job_table).where(job_table.c.id == UUID(first["id"])).values(schema=reordered)
        )
    await alice.register(schema=AS_SENT, worker_id=first["worker_id"])
    job = (await alice.get("/rooms/room1/jobs/room1:modifiers:Rotate")).json()
    assert list(job["schema"]["properties"]) == ["zeta", "a", "middle"]


async def test_another_worker_joins_an_existing_job(alice):
    first = await alice.register()
    second = await alice.register()
    assert second["id"] == first["id"]
    assert sorted(second["workers"]) == sorted([first["worker_id"], second["worker_id"]])


async def test_schema_conflict(alice, bob):
    await alice.register()
    response = await bob.put(
        "/rooms/room1/jobs",
        json={"category": "modifiers", "name": "Rotate", "schema": {"type": "string"}},
    )
    assert_problem(response, 409, "schema-conflict")
    (job,) = await bob.room_jobs("room1")
    assert len(job["workers"]) == 1


async def test_different_rooms_may_use_the_same_name_with_different_schemas(alice):
    a = await alice.register(room="roomA", schema={"type": "object"})
    b = await alice.register(room="roomB", schema={"type": "object", "title": "B"})
    assert a["id"] != b["id"]


@pytest.mark.parametrize("room", ["a@b", "a:b", "@other"])
async def test_invalid_room_id(alice, room):
    response = await alice.put(
        f"/rooms/{room}/jobs", json={"category": "modifiers", "name": "X", "schema": {}}
    )
    assert_problem(response, 400, "invalid-room-id")


@pytest.mark.parametrize("category", ["nope", "c" * 65, ""])
async def test_invalid_category(alice, category):
    response = await alice.put(
        "/rooms/room1/jobs", json={"category": category, "name": "X", "schema": {}}
    )
    assert_problem(response, 400, "invalid-category")


@pytest.mark.parametrize("room", ["@global", "@internal"])
async def test_reserved_rooms_need_a_superuser(alice, admin, room):
    body = {"category": "modifiers", "name": "X", "schema": {}}
    assert_problem(await alice.put(f"/rooms/{room}/jobs", json=body), 403, "forbidden")
    assert (await admin.put(f"/rooms/{room}/jobs", json=body)).status_code == 201


async def test_registering_with_someone_elses_worker_is_forbidden(alice, bob):
    job = await alice.register()
    response = await bob.put(
        "/rooms/room2/jobs",
        json={"category": "modifiers", "name": "X", "schema": {}, "worker_id": job["worker_id"]},
    )
    assert_problem(response, 403, "forbidden")
    assert await bob.room_jobs("room2") == []


async def test_registering_with_an_unknown_worker_is_404(alice):
    response = await alice.put(
        "/rooms/room1/jobs",
        json={
            "category": "modifiers",
            "name": "X",
            "schema": {},
            "worker_id": "00000000-0000-0000-0000-000000000000",
        },
    )
    assert_problem(response, 404, "worker-not-found")


async def test_a_room_lists_its_own_and_global_jobs_only(alice, admin):
    await alice.register(room="room1", name="Mine")
    await alice.register(room="room2", name="Theirs")
    await admin.register(room="@global", name="Shared")
    await admin.register(room="@internal", name="Inside")
    page = (await alice.get("/rooms/room1/jobs")).json()
    names = {item["full_name"] for item in page["items"]}
    assert names == {
        "room1:modifiers:Mine",
        "@global:modifiers:Shared",
        "@internal:modifiers:Inside",
        "@internal:analysis:RoomSummary",  # built in
        "@internal:analysis:ValidatePayload",  # built in
    }
    assert page["total"] == 5
    assert {i["full_name"] for i in (await alice.get("/rooms/@global/jobs")).json()["items"]} == {
        "@global:modifiers:Shared"
    }


async def test_job_list_is_paginated_newest_first(alice):
    for index in range(5):
        await alice.register(name=f"Job{index}")
    page = (await alice.get("/rooms/room1/jobs?limit=2&offset=1")).json()
    assert page["total"] == 5 + 2  # and the two built-in @internal jobs, registered first
    assert page["limit"] == 2 and page["offset"] == 1
    assert [item["name"] for item in page["items"]] == ["Job3", "Job2"]


async def test_get_job_by_full_name(alice, admin):
    await admin.register(room="@global", name="Shared")
    response = await alice.get("/rooms/room1/jobs/@global:modifiers:Shared")
    assert response.status_code == 200
    job = response.json()
    assert job["full_name"] == "@global:modifiers:Shared"
    assert job["worker_id"] is None
    encoded = await alice.get("/rooms/room1/jobs/@global%3Amodifiers%3AShared")
    assert encoded.json()["id"] == job["id"]


@pytest.mark.parametrize(
    "name", ["room1:modifiers", "room1:modifiers:Nope", "room2:modifiers:Rotate", "junk"]
)
async def test_unknown_malformed_or_invisible_job_is_404(alice, name):
    await alice.register(room="room2")
    assert_problem(await alice.get(f"/rooms/room1/jobs/{name}"), 404, "job-not-found")


async def test_room_workers_lists_workers_serving_visible_jobs(alice, admin):
    mine = await alice.register(room="room1")
    shared = await admin.register(room="@global", name="Shared")
    await alice.register(room="room2", name="Elsewhere")
    page = (await alice.get("/rooms/room1/workers")).json()
    assert {w["id"] for w in page["items"]} == {mine["worker_id"], shared["worker_id"]}
    assert all(w["job_count"] == 1 for w in page["items"])


async def test_a_schema_must_be_a_valid_json_schema(alice):
    response = await alice.put(
        "/rooms/room1/jobs",
        json={"category": "modifiers", "name": "Bad", "schema": {"type": "no-such-type"}},
    )
    problem = assert_problem(response, 422, "validation-error")
    assert problem["errors"][0]["loc"][:2] == ["body", "schema"]
    assert await alice.room_jobs() == []


async def test_a_schema_referring_elsewhere_is_refused_and_nothing_is_fetched(alice):
    fetched = []

    async def note(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fetched.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(note, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        schema = {"properties": {"x": {"$ref": f"http://127.0.0.1:{port}/x.json"}}}
        response = await alice.put(
            "/rooms/room1/jobs", json={"category": "modifiers", "name": "Ref", "schema": schema}
        )
        problem = assert_problem(response, 422, "validation-error")
        assert problem["errors"][0]["loc"] == ["body", "schema", "properties", "x", "$ref"]
        # A fetch started in the background would have no event of its own to wait for:
        # give one the time to reach the server here.
        await asyncio.sleep(0.1)
    assert fetched == []
    assert await alice.room_jobs() == []


async def test_a_schema_that_would_validate_without_end_is_refused(alice):
    """``{"$ref": "#"}`` resolves within the schema, but validating against it recurses
    forever: refused at registration, not a 500 at every submit."""
    response = await alice.put(
        "/rooms/room1/jobs",
        json={"category": "modifiers", "name": "Loop", "schema": {"allOf": [{"$ref": "#"}]}},
    )
    problem = assert_problem(response, 422, "validation-error")
    assert problem["errors"][0]["loc"] == ["body", "schema", "allOf", 0, "$ref"]
    assert await alice.room_jobs() == []


def schema_of(size: int) -> dict:
    """A valid schema of ``size`` bytes as compact JSON (its description in UTF-8)."""
    schema = {"type": "object", "description": ""}
    filler = size - schema_bytes(schema)
    schema["description"] = "é" * (filler // 2) + "x" * (filler % 2)
    assert schema_bytes(schema) == size
    return schema


async def row_counts(db) -> dict[str, int]:
    async with db.read() as conn:
        return {
            table.name: await conn.scalar(select(func.count()).select_from(table))
            for table in (job_table, link_table, worker_table)
        }


async def test_a_schema_beyond_256_kib_is_refused_and_leaves_nothing_behind(alice, db):
    """Parsed, a schema takes many times its JSON in memory, and every process caches the
    schemas it validates against: any user may register jobs, so their size is bounded."""
    first = await alice.register()
    before = await row_counts(db)
    for worker_id in (None, first["worker_id"]):
        body = {"category": "modifiers", "name": "Big", "schema": schema_of(MAX_SCHEMA_BYTES + 1)}
        if worker_id:
            body["worker_id"] = worker_id
        response = await alice.put("/rooms/room1/jobs", json=body)
        problem = assert_problem(response, 422, "validation-error")
        assert problem["errors"][0]["loc"] == ["body", "schema"]
        assert str(MAX_SCHEMA_BYTES) in problem["detail"]
    assert await row_counts(db) == before  # no job, no worker, no link
    assert [job["name"] for job in await alice.room_jobs()] == ["Rotate"]


async def test_a_schema_of_exactly_256_kib_as_compact_json_is_accepted(alice):
    schema = schema_of(MAX_SCHEMA_BYTES)
    job = await alice.register(name="Big", schema=schema)
    assert job["schema"] == schema
    await alice.submit("room1:modifiers:Big")


async def test_the_hub_keeps_answering_while_a_big_schema_is_checked(alice, monkeypatch):
    """A schema with thousands of subschemas takes seconds to check (half a millisecond
    each); the check runs beside the event loop, not on it."""
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(2_000)}}
    checks = record_spans(monkeypatch, schema_checks, "check_schema")
    async with watched_loop() as turns:
        await alice.register(name="Wide", schema=schema)
    assert_served_during(turns, checks)


@pytest.mark.postgres_only
async def test_registering_with_a_worker_being_removed_is_404_not_a_500(alice, database_url):
    """Another transaction (the sweeper's) holds the worker's row to remove it: the
    registration waits for it, then finds the worker gone (404), instead of failing on the
    link's foreign key (500)."""
    job = await alice.register(name="First")
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(False)
    remover = await asyncpg.connect(dsn)
    try:
        removal = remover.transaction()
        await removal.start()
        await remover.execute(
            "SELECT 1 FROM worker WHERE id = $1 FOR UPDATE", UUID(job["worker_id"])
        )
        registering = asyncio.create_task(
            alice.put(
                "/rooms/room1/jobs",
                json={
                    "category": "modifiers",
                    "name": "Second",
                    "schema": SCHEMA,
                    "worker_id": job["worker_id"],
                },
            )
        )
        await until_a_lock_is_waited_for(database_url)  # it reached the worker's row
        assert not registering.done()
        await remover.execute("DELETE FROM worker WHERE id = $1", UUID(job["worker_id"]))
        await removal.commit()
        assert_problem(await registering, 404, "worker-not-found")
    finally:
        await remover.close()


# A job is soft-deleted when its last worker leaves and no task of it is pending. On
# PostgreSQL each statement sees only what committed before it began, so the soft-delete
# locks the job row before it checks, and registrations and submits lock it too: whichever
# comes second sees what the first did (found by an audit: each race below lost a job).
SOLO = "room1:modifiers:Solo"


async def soft_delete_under_way(db, job_id: str):
    """A transaction that has locked the job and soft-deleted it, not yet committed (what
    ``soft_delete_orphans`` does between its lock and its commit)."""
    conn = await db.engine.connect()
    transaction = await conn.begin()
    await conn.exec_driver_sql("SELECT id FROM job WHERE id = $1 FOR UPDATE", (UUID(job_id),))
    await conn.exec_driver_sql(
        "UPDATE job SET deleted = true, updated_at = now() WHERE id = $1", (UUID(job_id),)
    )
    return conn, transaction


@pytest.mark.postgres_only
async def test_a_registration_under_way_keeps_the_job_its_last_worker_leaves(
    alice, monkeypatch, database_url
):
    from taskhub.store import jobs

    leaving = (await alice.register(name="Solo"))["worker_id"]
    joining = (await alice.post("/workers")).json()["id"]
    linked, release = asyncio.Event(), asyncio.Event()
    job_workers = jobs.job_workers

    async def paused(conn, job_id):  # the registration's last step, inside its transaction
        linked.set()
        await release.wait()
        return await job_workers(conn, job_id)

    monkeypatch.setattr(jobs, "job_workers", paused)
    body = {"category": "modifiers", "name": "Solo", "schema": SCHEMA, "worker_id": joining}
    registration = asyncio.create_task(alice.put("/rooms/room1/jobs", json=body))
    await linked.wait()
    removal = asyncio.create_task(alice.delete(f"/workers/{leaving}"))
    await until_a_lock_is_waited_for(database_url)  # the removal waits for the registration
    release.set()
    assert (await registration).status_code == 200
    assert (await removal).status_code == 204
    job = await alice.get(f"/rooms/room1/jobs/{SOLO}")
    assert job.status_code == 200, job.text
    assert job.json()["workers"] == [joining]


@pytest.mark.postgres_only
async def test_a_registration_waits_for_a_soft_delete_under_way_and_revives_the_job(
    alice, db, database_url
):
    job = await alice.register(name="Solo")
    conn, transaction = await soft_delete_under_way(db, job["id"])
    body = {"category": "modifiers", "name": "Solo", "schema": SCHEMA}
    registration = asyncio.create_task(alice.put("/rooms/room1/jobs", json=body))
    await until_a_lock_is_waited_for(database_url)
    assert not registration.done()  # it waits for the soft-delete's lock
    await transaction.commit()
    await conn.close()
    assert (await registration).status_code == 201  # revived
    revived = await alice.get(f"/rooms/room1/jobs/{SOLO}")
    assert revived.status_code == 200
    assert (await registration).json()["worker_id"] in revived.json()["workers"]


@pytest.mark.postgres_only
async def test_a_submit_waits_for_a_soft_delete_under_way_and_adds_nothing(alice, db, database_url):
    job = await alice.register(name="Solo")
    await alice.submit(SOLO)  # the job is known to this process: no lookup on the next
    await alice.post("/tasks/claim", json={"worker_id": job["worker_id"]})
    conn, transaction = await soft_delete_under_way(db, job["id"])
    submit = asyncio.create_task(alice.post(f"/rooms/room1/tasks/{SOLO}", json={"payload": {}}))
    await until_a_lock_is_waited_for(database_url)  # the submit waits for the job's row
    assert not submit.done()
    await transaction.commit()
    await conn.close()
    assert_problem(await submit, 404, "job-not-found")
    pending = await alice.get("/rooms/room1/tasks?status=pending")
    assert pending.json()["total"] == 0


@pytest.mark.postgres_only
async def test_the_last_two_workers_leaving_at_once_take_the_job_with_them(alice):
    for round_ in range(6):
        first = (await alice.register(name="Solo"))["worker_id"]
        second = (await alice.register(name="Solo"))["worker_id"]
        removed = await asyncio.gather(
            alice.delete(f"/workers/{first}"), alice.delete(f"/workers/{second}")
        )
        assert [r.status_code for r in removed] == [204, 204]
        assert (await alice.get(f"/rooms/room1/jobs/{SOLO}")).status_code == 404, round_
