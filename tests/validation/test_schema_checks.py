"""A job's schema is checked at registration on the event loop when small, else on one
thread of its own, one schema at a time: the event loop then has a single contender for
the GIL, however many registrations come at once."""

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest

from taskhub.rules.errors import ValidationFailed
from taskhub.validation import schema_checks
from taskhub.validation.payloads import check_schema, check_schema_size
from taskhub.validation.schema_checks import check_schema_aside
from tests.support.event_loop import Spans, assert_served_during, watched_loop


def a_schema(properties: int, seed: int = 0) -> dict[str, Any]:
    """About half a millisecond of checking a property."""
    return {
        "type": "object",
        "properties": {f"p{seed}_{i}": {"type": "number", "minimum": 0} for i in range(properties)},
    }


class Checks:
    """Which thread checked each schema, and when (the real check runs)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float]] = []

    def __call__(self, schema: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            check_schema(schema)
        finally:
            self.spans.append((threading.current_thread().name, started, time.monotonic()))


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Checks:
    seen = Checks()
    monkeypatch.setattr(schema_checks, "check_schema", seen)
    return seen


async def test_big_schemas_are_checked_one_at_a_time_beside_the_event_loop(checks):
    schemas = [a_schema(400, seed) for seed in range(4)]
    async with watched_loop() as turns:
        await asyncio.gather(*(check_schema_aside(s, check_schema_size(s)) for s in schemas))
    assert {name.split("_")[0] for name, _, _ in checks.spans} == {"taskhub-schemas"}
    spans = sorted((start, end) for _, start, end in checks.spans)
    assert all(end <= later for (_, end), (later, _) in itertools.pairwise(spans)), spans
    assert_served_during(turns, Spans([(start, end) for _, start, end in checks.spans]))


async def test_a_small_schema_is_checked_on_the_event_loop(checks):
    schema = a_schema(3)
    size = check_schema_size(schema)
    assert size <= schema_checks.INLINE_SCHEMA_BYTES
    await check_schema_aside(schema, size)
    assert [name for name, _, _ in checks.spans] == [threading.current_thread().name]


@pytest.mark.parametrize("properties", [3, 400], ids=["small", "big"])
async def test_either_way_a_schema_gets_the_answer_it_would_get_on_the_event_loop(properties):
    schema = a_schema(properties)
    schema["properties"]["p0_1"] = {"type": "number", "minimum": "zero"}
    with pytest.raises(ValidationFailed) as inline:
        check_schema(schema)
    with pytest.raises(ValidationFailed) as aside:
        await check_schema_aside(schema, check_schema_size(schema))
    assert (aside.value.detail, aside.value.errors) == (inline.value.detail, inline.value.errors)
    assert aside.value.errors[0]["loc"] == ["body", "schema", "properties", "p0_1", "minimum"]
