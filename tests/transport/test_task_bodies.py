"""Task answers are written from dicts (``task_body``), not models: they must be the very
bytes the documented models (``TaskOut``, ``ClaimedTaskOut``, ``PageOut[TaskOut]``) write."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import asyncpg.pgproto.pgproto
import pytest

from taskhub.rules.records import Page, TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.store.columns import stored_document
from taskhub.transport.http.api import dump_body, json_response
from taskhub.transport.http.schemas import (
    ClaimedTaskOut,
    PageOut,
    TaskOut,
    claimed_task_body,
    task_body,
    task_page_body,
)
from tests.support.records import a_task_record

RECORDS = {
    "running": a_task_record(),
    "pending with a position": a_task_record(
        status=TaskStatus.PENDING, worker_id=None, claim_token=None, queue_position=7
    ),
    "completed, a result beyond 64 bits": a_task_record(
        status=TaskStatus.COMPLETED,
        completed_at=datetime(2026, 11, 22, 10, 0, 3, 5, tzinfo=UTC),
        result={"big": 2**70, "small": -(2**63), "float": 1e20},
        version=3,
    ),
    "failed, scheduled again": a_task_record(
        status=TaskStatus.FAILED,
        error="boom",
        run_at=datetime(2026, 11, 22, 11, 0, tzinfo=UTC),
        priority=-5,
        max_attempts=3,
    ),
}


def written(content: Any) -> bytes:
    return bytes(json_response(content).body)


@pytest.mark.parametrize("record", RECORDS.values(), ids=RECORDS.keys())
def test_a_task_is_written_as_its_model_writes_it(record: TaskRecord) -> None:
    body = task_body(record)
    assert set(body) == set(TaskOut.model_fields)
    assert written(body) == written(TaskOut.model_validate(body))


@pytest.mark.parametrize("record", RECORDS.values(), ids=RECORDS.keys())
def test_a_claimed_task_is_written_as_its_model_writes_it(record: TaskRecord) -> None:
    body = claimed_task_body(record)
    assert set(body) == set(ClaimedTaskOut.model_fields)
    assert written(body) == written(ClaimedTaskOut.model_validate(body))


def test_a_page_of_tasks_is_written_as_its_model_writes_it() -> None:
    page = Page(items=list(RECORDS.values()), total=40, limit=4, offset=8)
    body = task_page_body(page)
    assert written(body) == written(PageOut[TaskOut].model_validate(body))


def test_ids_as_the_postgresql_driver_reads_them_are_written_as_uuids() -> None:
    driver_id = asyncpg.pgproto.pgproto.UUID(str(uuid4()))
    assert dump_body({"id": driver_id}) == f'{{"id":"{driver_id}"}}'.encode()


def test_integers_beyond_64_bits_are_written_exactly_beside_stored_documents() -> None:
    """orjson refuses them; they are written as their digits, also in an answer that holds
    a document as stored (which pydantic, the earlier fallback, could not write)."""
    body = {
        "result": {"big": [2**64, -(2**63) - 1, 2**64 - 1, True]},
        "payload": stored_document('{"a": 1}'),
        "id": asyncpg.pgproto.pgproto.UUID(str(uuid4())),
    }
    written = dump_body(body)
    assert json.loads(written)["result"] == {"big": [2**64, -(2**63) - 1, 2**64 - 1, True]}
    assert b'"payload":{"a": 1}' in written
