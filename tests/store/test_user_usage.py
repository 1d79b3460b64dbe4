"""The database keeps ``user_usage`` exact: each user's unfinished tasks, those of them of a
costly job, and the bytes of their tasks' payloads, results and log lines, through a
task's whole life (submit, claim, end with a result, log lines appended and trimmed,
purge), whichever statement makes the change; a claim leaves it alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import insert, select, text, update

from taskhub.clock import new_id, utcnow
from taskhub.json_codec import dump_json
from taskhub.rules.user_limits import SubmitQuota, Usage
from taskhub.services.users import create_user
from taskhub.store import sweeps, task_logs
from taskhub.store.database import Database
from taskhub.store.tables import job_table, task_table, user_usage_table
from taskhub.store.user_usage import usage_of

PAYLOAD = {"points": [[1.5, 2.5, 3.5]] * 20, "name": "bébé"}  # not ASCII: bytes, not chars
RESULT = {"rotated": [[3.5, 2.5, 1.5]] * 10}


def text_bytes(document: Any) -> int:
    """The bytes of a document as the hub stores it."""
    return len(dump_json(document).encode())


async def usage(db: Database, user_id: UUID) -> Usage:
    async with db.read() as conn:
        return await usage_of(conn, user_id)


async def recounted(db: Database, user_id: UUID) -> Usage:
    """The same figures counted from the rows themselves."""
    async with db.read() as conn:
        tasks = (
            await conn.execute(
                select(task_table.c.status, task_table.c.job_id, task_table.c.id).where(
                    task_table.c.submitted_by == user_id
                )
            )
        ).all()
        costly_jobs = set(
            await conn.scalars(select(job_table.c.id).where(job_table.c.costly.is_(True)))
        )
        documents = await conn.execute(
            text(
                "SELECT CAST(payload AS TEXT), CAST(result AS TEXT) FROM task"
                " WHERE submitted_by = :user"
            ).bindparams(user=user_id.hex if db.is_sqlite else user_id)
        )
        stored = sum(
            len(document.encode()) for row in documents for document in row if document is not None
        )
        ids = [row.id for row in tasks]
        lines = await conn.execute(
            select(task_logs.log.c.message, task_logs.log.c.logger).where(
                task_logs.log.c.task_id.in_(ids)
            )
        )
        stored += sum(len(m.encode()) + len((logger or "").encode()) for m, logger in lines)
    unfinished = [row for row in tasks if row.status in ("pending", "claimed", "running")]
    return Usage(
        unfinished_tasks=len(unfinished),
        unfinished_costly_tasks=sum(row.job_id in costly_jobs for row in unfinished),
        stored_bytes=stored,
    )


async def add_job(db: Database, *, costly: bool = False) -> UUID:
    job_id, now = new_id(), utcnow()
    async with db.write() as conn:
        await conn.execute(
            insert(job_table).values(
                id=job_id, room_id="room1", category="modifiers", name=f"Job{job_id.hex}",
                schema={}, deleted=False, created_at=now, updated_at=now, costly=costly,
            )
        )  # fmt: skip
    return job_id


async def add_task(db: Database, job_id: UUID, user_id: UUID | None, **values: Any) -> UUID:
    task_id, now = new_id(), utcnow()
    row = {
        "id": task_id,
        "job_id": job_id,
        "room_id": "room1",
        "status": "pending",
        "payload": PAYLOAD,
        "created_at": now,
        "turn_at": now,
        "attempt": 0,
        "submitted_by": user_id,
        **values,
    }
    async with db.write() as conn:
        await conn.execute(insert(task_table).values(**row))
    return task_id


async def set_values(db: Database, task_id: UUID, **values: Any) -> None:
    async with db.write() as conn:
        await conn.execute(update(task_table).where(task_table.c.id == task_id).values(**values))


def line(message: str, logger: str | None = "job") -> dict[str, Any]:
    return {
        "logged_at": utcnow(),
        "level": "info",
        "logger": logger,
        "message": message,
        "dropped": 0,
    }


async def test_the_figures_follow_a_task_from_submit_to_purge(db: Database) -> None:
    alice, _ = await create_user(db, "alice")
    job_id = await add_job(db)
    payload_bytes = text_bytes(PAYLOAD)

    task_id = await add_task(db, job_id, alice)
    assert await usage(db, alice) == Usage(1, 0, payload_bytes)

    await set_values(db, task_id, status="claimed", result=None, attempt=1)
    await set_values(db, task_id, status="running")
    assert await usage(db, alice) == Usage(1, 0, payload_bytes), "a claim and a start: alike"

    lines = [line("début"), line("x" * 300, logger=None), line("end", logger="a.b")]
    async with db.autocommit() as conn:
        await task_logs.insert_lines(conn, task_id, 1, lines)
    logged = sum(
        len(item["message"].encode()) + len((item["logger"] or "").encode()) for item in lines
    )
    assert await usage(db, alice) == Usage(1, 0, payload_bytes + logged)

    await set_values(db, task_id, status="completed", result=RESULT, completed_at=utcnow())
    ended = payload_bytes + logged + text_bytes(RESULT)
    assert await usage(db, alice) == Usage(0, 0, ended)
    assert await usage(db, alice) == await recounted(db, alice)

    async with db.write() as conn:
        assert await task_logs.trim(conn, task_id, keep=1) == 2
    kept = len(b"end") + len(b"a.b")
    assert await usage(db, alice) == Usage(0, 0, payload_bytes + text_bytes(RESULT) + kept)
    assert await usage(db, alice) == await recounted(db, alice)

    async with db.write() as conn:
        assert await sweeps.delete_oldest_ended(conn, utcnow() + timedelta(hours=1), 10) == 1
    assert await usage(db, alice) == Usage(0, 0, 0), "its lines counted off once, with it"


async def test_each_user_is_charged_for_their_own_tasks_only(db: Database) -> None:
    alice, _ = await create_user(db, "alice")
    bob, _ = await create_user(db, "bob")
    job_id = await add_job(db)
    for user in (alice, alice, bob):
        await add_task(db, job_id, user)
    await add_task(db, job_id, None)  # a task whose submitter is gone: nobody's
    assert (await usage(db, alice)).unfinished_tasks == 2
    assert (await usage(db, bob)).unfinished_tasks == 1
    for user in (alice, bob):
        assert await usage(db, user) == await recounted(db, user)


async def test_a_costly_job_s_unfinished_tasks_are_counted_apart(db: Database) -> None:
    alice, _ = await create_user(db, "alice")
    plain, costly = await add_job(db), await add_job(db, costly=True)
    first = await add_task(db, costly, alice)
    second = await add_task(db, costly, alice, run_at=utcnow() + timedelta(hours=1), waiting=True)
    await add_task(db, plain, alice)
    assert await usage(db, alice) == Usage(3, 2, 3 * text_bytes(PAYLOAD))

    await set_values(db, first, status="claimed")
    await set_values(db, first, status="running")
    await set_values(db, first, status="completed", result={"valid": True}, completed_at=utcnow())
    await set_values(db, second, status="cancelled", completed_at=utcnow())
    figures = await usage(db, alice)
    assert (figures.unfinished_tasks, figures.unfinished_costly_tasks) == (1, 0)
    assert figures == await recounted(db, alice)


async def test_a_user_who_never_submitted_uses_nothing(db: Database) -> None:
    carol, _ = await create_user(db, "carol")
    assert await usage(db, carol) == Usage()
    async with db.read() as conn:
        rows = await conn.execute(
            select(user_usage_table).where(user_usage_table.c.user_id == carol)
        )
        assert rows.first() is None


async def test_the_submit_s_insert_is_refused_at_a_bound_and_stores_nothing(db: Database) -> None:
    """``tasks.insert_task`` with a quota: refused (False) at a bound, as the figures stand;
    stored otherwise."""
    from taskhub.rules.records import TaskRecord
    from taskhub.rules.states import TaskStatus
    from taskhub.store import tasks as store

    alice, _ = await create_user(db, "alice")
    job_id = await add_job(db)
    async with db.read() as conn:
        version = await conn.scalar(select(job_table.c.updated_at).where(job_table.c.id == job_id))

    async def insert(quota: SubmitQuota) -> bool:
        now = utcnow()
        record = TaskRecord(
            id=new_id(), job_id=job_id, job_name="room1:modifiers:x", room_id="room1",
            status=TaskStatus.PENDING, payload=PAYLOAD, created_at=now, started_at=None,
            completed_at=None, worker_id=None, error=None, submitted_by=alice,
            claim_token=None, attempt=0,
        )  # fmt: skip
        async with db.autocommit() as conn:
            return await store.insert_task(
                conn, record, job_version=version, idempotency_key=None, request_digest=None,
                max_attempts=None, now=now, quota=quota,
            )  # fmt: skip

    assert await insert(SubmitQuota(unfinished_tasks=2))
    assert await insert(SubmitQuota(unfinished_tasks=2))
    assert not await insert(SubmitQuota(unfinished_tasks=2))
    assert not await insert(SubmitQuota(stored_bytes=2 * text_bytes(PAYLOAD)))
    assert not await insert(SubmitQuota(costly_tasks=0))
    assert await insert(SubmitQuota(unfinished_tasks=3, stored_bytes=10**6, costly_tasks=1))
    assert await usage(db, alice) == Usage(3, 0, 3 * text_bytes(PAYLOAD))
