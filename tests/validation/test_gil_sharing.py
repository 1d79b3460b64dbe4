"""While work on a validation thread holds the GIL for long, the process's switch interval is
1 ms, so that the event loop gets the GIL back within a millisecond, not five; once the last
such work ends, the interval is what it was."""

import asyncio
import sys
import threading

import pytest

from taskhub.validation.gil_sharing import SHARING_INTERVAL_SECONDS, sharing_the_gil
from taskhub.validation.payload_checks import PayloadChecks
from taskhub.validation.schema_checks import check_schema_aside
from tests.support.costly_payloads import COSTLY, POINTS_SCHEMA
from tests.validation.test_schema_checks import a_schema

USUAL = 0.004  # not the default, to tell "restored" from "reset"


@pytest.fixture(autouse=True)
def usual_interval():
    before = sys.getswitchinterval()
    sys.setswitchinterval(USUAL)
    yield
    sys.setswitchinterval(before)


def test_the_interval_is_short_until_the_last_block_ends():
    first_in, first_may_leave = threading.Event(), threading.Event()

    def first() -> None:
        with sharing_the_gil():
            first_in.set()
            first_may_leave.wait(5)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_in.wait(5)
    with sharing_the_gil():
        first_may_leave.set()
        thread.join(5)
        assert sys.getswitchinterval() == pytest.approx(SHARING_INTERVAL_SECONDS)
    assert sys.getswitchinterval() == pytest.approx(USUAL)


def test_an_interval_shorter_already_is_kept():
    sys.setswitchinterval(0.0005)
    with sharing_the_gil():
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert sys.getswitchinterval() == pytest.approx(0.0005)


async def intervals_while(work) -> list[float]:  # type: ignore[no-untyped-def]
    """The switch interval, read every millisecond on the event loop while ``work`` runs."""
    task = asyncio.ensure_future(work)
    seen = []
    while not task.done():
        seen.append(sys.getswitchinterval())
        await asyncio.sleep(0.001)
    await task
    return seen


async def test_a_costly_payload_shares_the_gil_while_it_is_validated():
    seen = await intervals_while(PayloadChecks().check(object(), POINTS_SCHEMA, COSTLY))
    assert pytest.approx(SHARING_INTERVAL_SECONDS) in seen
    assert sys.getswitchinterval() == pytest.approx(USUAL)


async def test_a_big_schema_shares_the_gil_while_it_is_checked():
    schema = a_schema(400)
    seen = await intervals_while(check_schema_aside(schema, 10_000))
    assert pytest.approx(SHARING_INTERVAL_SECONDS) in seen
    assert sys.getswitchinterval() == pytest.approx(USUAL)
