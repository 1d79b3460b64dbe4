"""JSON documents (payloads, results, schemas) are stored and read back exactly as the
standard library would: orjson does the work where it gives the same answer."""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import bindparam, update

from app.persistence.database import Database
from app.persistence.models import task_table
from app.persistence.prepared import hot
from app.persistence.types import dump_json, load_json
from tests.persistence.test_prepared import LOAD, seed_running_task

DOCUMENT = {"text": "é ✓ \\u0001", "big": 2**70, "negative": -(2**63) - 1, "float": 0.1, "n": None}
SET_PAYLOAD = hot(
    update(task_table)
    .where(task_table.c.id == bindparam("task_id"))
    .values(payload=bindparam("doc"))
)


def test_documents_read_back_as_the_standard_library_reads_them() -> None:
    for document in (DOCUMENT, [1, [2, {"3": 4.5}]], "text", 12, None, {"u64": 2**64 - 1}):
        assert load_json(dump_json(document)) == json.loads(json.dumps(document))


def test_integers_beyond_64_bits_stay_exact() -> None:
    restored = load_json(dump_json({"big": 2**70, "neg": -(2**63) - 1}))
    assert restored == {"big": 2**70, "neg": -(2**63) - 1}
    assert isinstance(restored["big"], int)


def test_non_finite_numbers_written_by_the_standard_library_are_read() -> None:
    restored = load_json(json.dumps({"x": float("nan"), "y": float("inf")}))
    assert math.isnan(restored["x"]) and restored["y"] == math.inf


def test_non_finite_numbers_are_written_as_null_also_beside_integers_beyond_64_bits() -> None:
    """(orjson writes ``null`` for them; a document it refuses, for its big integers, is
    written by the standard library, which would write ``NaN``: not JSON, and refused by
    PostgreSQL's jsonb.)"""
    for document in ({"x": float("nan")}, {"x": float("-inf"), "big": [2**70]}):
        written = dump_json(document)
        assert json.loads(written, parse_constant=lambda c: pytest.fail(f"wrote {c}"))["x"] is None


def test_keys_that_are_not_strings_become_strings_as_with_the_standard_library() -> None:
    keyed = {1: "a", 2.5: "b", False: "c"}
    assert json.loads(dump_json(keyed)) == json.loads(json.dumps(keyed))


async def test_a_document_round_trips_through_the_database(db: Database) -> None:
    ids = await seed_running_task(db)
    async with db.autocommit() as conn:
        await conn.execute(SET_PAYLOAD, {"task_id": ids["task"], "doc": DOCUMENT})
    async with db.read() as conn:
        hot_row = (await conn.execute(LOAD, {"task_id": ids["task"]})).first()
        sa_row = (await (await conn.sa()).execute(LOAD, {"task_id": ids["task"]})).one()
    assert hot_row.payload == sa_row.payload == DOCUMENT
    assert isinstance(hot_row.payload["big"], int)
