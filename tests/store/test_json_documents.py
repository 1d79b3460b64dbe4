"""JSON documents (payloads, results, schemas) are stored and read back exactly as the
standard library would: orjson does the work where it gives the same answer. PostgreSQL
keeps them as sent (``json``, not ``jsonb``): key order and number spellings included."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from sqlalchemy import Text, bindparam, select, update

from taskhub.clock import utcnow
from taskhub.json_codec import dump_json, has_long_digit_run, load_json
from taskhub.store.columns import stored_document
from taskhub.store.database import Database
from taskhub.store.hot_statements import hot
from taskhub.store.sql_functions import document_is_small
from taskhub.store.tables import task_table
from tests.store.test_hot_statements import FINISH, LOAD, seed_running_task

DOCUMENT = {"text": "é ✓ \\u0001", "big": 2**70, "negative": -(2**63) - 1, "float": 0.1, "n": None}
# What jsonb would change: key order (it sorts by length), 1e23 (it writes the integer
# 100000000000000000000000) and the sign of -0.0.
AS_SENT = {"b": 1, "a": 2, "n": 1e23, "z": -0.0}
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


@pytest.mark.parametrize(
    ("document", "long"),
    [
        ('{"n": 1234567890123456789}', True),  # 19 digits: orjson would read a float
        ('{"n": -9999999999999999999}', True),
        ('{"n": 123456789012345678}', False),  # 18 digits: within 64 bits
        ('{"t": "0000000000000000000"}', True),  # in a string: the slow path, still exact
        ('{"n": 1.2345678901234567}', False),
        ('{"t": "\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660'
         '\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669"}', False),
        ('{"t": "١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨٩"}', False),  # not ASCII digits: not a JSON number
        ("", False),
    ],
)  # fmt: skip
def test_a_long_run_of_digits_is_found_in_text_and_in_bytes(document: str, long: bool) -> None:
    assert has_long_digit_run(document) is long
    assert has_long_digit_run(document.encode()) is long


def test_a_long_run_of_digits_is_found_at_the_end_of_a_big_document() -> None:
    """Every request body and every stored document is looked at (by mapping digits, not by
    a regular expression, which took 12-17 ms over 650 kB here)."""
    document = json.dumps({f"k{i}": 1 for i in range(60_000)}) + ', "n": 12345678901234567890'
    assert has_long_digit_run(document) and has_long_digit_run(document.encode())
    assert load_json(dump_json({"n": 2**70, "pad": "x" * 100_000})) == {
        "n": 2**70,
        "pad": "x" * 100_000,
    }


def test_non_finite_numbers_written_by_the_standard_library_are_read() -> None:
    restored = load_json(json.dumps({"x": float("nan"), "y": float("inf")}))
    assert math.isnan(restored["x"]) and restored["y"] == math.inf


def test_non_finite_numbers_are_written_as_null_also_beside_integers_beyond_64_bits() -> None:
    """(orjson writes ``null`` for them; a document it refuses, for its big integers, is
    written by the standard library, which would write ``NaN``: not JSON, and refused by
    PostgreSQL's json and jsonb alike.)"""
    for document in ({"x": float("nan")}, {"x": float("-inf"), "big": [2**70]}):
        written = dump_json(document)
        assert json.loads(written, parse_constant=lambda c: pytest.fail(f"wrote {c}"))["x"] is None


def test_keys_that_are_not_strings_become_strings_as_with_the_standard_library() -> None:
    keyed = {1: "a", 2.5: "b", False: "c"}
    assert json.loads(dump_json(keyed)) == json.loads(json.dumps(keyed))


async def payload_read_back(db: Database, document: Any) -> tuple[Any, Any]:
    """``document`` stored as a task's payload, then read back by the hot path and through
    SQLAlchemy."""
    ids = await seed_running_task(db)
    async with db.autocommit() as conn:
        await conn.execute(SET_PAYLOAD, {"task_id": ids["task"], "doc": document})
    async with db.read() as conn:
        hot_row = (await conn.execute(LOAD, {"task_id": ids["task"]})).first()
        sa_row = (await (await conn.sa()).execute(LOAD, {"task_id": ids["task"]})).one()
    return hot_row.payload, sa_row.payload


async def test_a_document_round_trips_through_the_database(db: Database) -> None:
    hot_payload, sa_payload = await payload_read_back(db, DOCUMENT)
    assert hot_payload == sa_payload == DOCUMENT
    assert isinstance(hot_payload["big"], int)


def spelled(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Each key, in order, with its value as Python writes it (``1e+23``, ``-0.0``): equal
    lists mean the same keys in the same order, numbers of the same type and sign."""
    return [(key, repr(value)) for key, value in document.items()]


async def test_a_payload_is_read_back_in_its_key_order_with_its_numbers(db: Database) -> None:
    hot_payload, sa_payload = await payload_read_back(db, AS_SENT)
    assert spelled(hot_payload) == spelled(sa_payload) == spelled(AS_SENT)


async def test_a_result_is_read_back_in_its_key_order_with_its_numbers(db: Database) -> None:
    ids = await seed_running_task(db)
    params = {"task_id": ids["task"], "at": utcnow(), "result": AS_SENT}
    async with db.autocommit() as conn:
        returned = (await conn.execute(FINISH, params)).first()
        stored = (await conn.execute(LOAD, {"task_id": ids["task"]})).first()
    assert spelled(returned.result) == spelled(stored.result) == spelled(AS_SENT)


async def test_the_database_holds_the_text_the_hub_wrote(db: Database) -> None:
    """Not a normalised copy: on PostgreSQL the column's text is the serializer's. A None
    result is JSON ``null`` there, read back as None."""
    ids = await seed_running_task(db)
    as_text = select(task_table.c.payload.cast(Text), task_table.c.result.cast(Text)).where(
        task_table.c.id == ids["task"]
    )
    async with db.autocommit() as conn:
        await conn.execute(SET_PAYLOAD, {"task_id": ids["task"], "doc": AS_SENT})
        await conn.execute(FINISH, {"task_id": ids["task"], "at": utcnow(), "result": None})
        texts = tuple((await (await conn.sa()).execute(as_text)).one())
        read = (await conn.execute(LOAD, {"task_id": ids["task"]})).first()
    assert texts == (dump_json(AS_SENT), "null")
    assert spelled(read.payload) == spelled(AS_SENT) and read.result is None


def test_a_stored_document_goes_into_an_answer_as_its_text() -> None:
    """(Listings write payloads and results so, never decoding them.)"""
    for document in (AS_SENT, DOCUMENT, None, [1, "two"]):
        text = dump_json(document)
        assert orjson.dumps({"payload": stored_document(text)}) == b'{"payload":%s}' % text.encode()
    assert stored_document(None) is None


def test_a_stored_document_with_nan_from_an_older_version_goes_as_null() -> None:
    """An older version's standard-library fallback (integers beyond 64 bits) wrote NaN,
    which is not JSON: such a document is written again, as null (a string "NaN" stays)."""
    legacy = json.dumps({"x": float("nan"), "y": [float("-inf")], "big": 2**70, "t": "NaN"})
    written = orjson.dumps(stored_document(legacy))
    parsed = json.loads(written, parse_constant=lambda c: pytest.fail(f"wrote {c}"))
    assert parsed == {"x": None, "y": [None], "big": 2**70, "t": "NaN"}


@pytest.mark.parametrize(
    ("document", "small"),
    [
        ({"t": "é" * 200}, True),  # 412 bytes
        ({"t": "é" * 600}, False),  # 600 characters, 1,212 bytes: bytes count
        ({"t": "a" * 3000}, False),  # PostgreSQL stores it compressed, a few dozen bytes
    ],
)
async def test_a_document_is_small_up_to_a_limit_in_bytes(
    db: Database, document: Any, small: bool
) -> None:
    ids = await seed_running_task(db)
    async with db.autocommit() as conn:
        await conn.execute(SET_PAYLOAD, {"task_id": ids["task"], "doc": document})
        sa = await conn.sa()
        is_small = document_is_small(sa.dialect.name, task_table.c.payload, 1000)
        statement = select(is_small, document_is_small(sa.dialect.name, task_table.c.result, 0))
        told = (await sa.execute(statement.where(task_table.c.id == ids["task"]))).one()
    assert tuple(told) == (small, True)  # no result yet: small at any limit
