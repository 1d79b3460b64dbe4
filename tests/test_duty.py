"""The loop shapes of ``taskhub.duty``: ``Reconnecting`` runs a listener's body again after
each lost connection (a warning for the first loss of an outage, debug for the next ones,
one line when connected again) and stops on cancel; ``Every`` runs an action on a period
and outlives its failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

import pytest

from taskhub.duty import Every, Reconnecting
from tests.support.waiting import eventually


class Flaky:
    """A listener body whose first ``losses`` runs lose their connection."""

    def __init__(self, reconnecting: Reconnecting, losses: int) -> None:
        self.reconnecting = reconnecting
        self.losses = losses
        self.runs = 0
        self.reconnected: list[bool] = []
        self.listening = asyncio.Event()

    async def body(self) -> None:
        self.runs += 1
        if self.runs <= self.losses:
            raise ConnectionError(f"lost #{self.runs}")
        self.reconnected.append(self.reconnecting.connected())
        self.listening.set()
        await asyncio.Event().wait()  # reads until cancelled


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "taskhub.duty"]


async def test_a_listener_is_run_again_after_each_loss_and_says_so_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="taskhub.duty")
    reconnecting = Reconnecting("test listener", 0.0)
    flaky = Flaky(reconnecting, losses=3)
    task = asyncio.create_task(reconnecting.run(flaky.body))
    await asyncio.wait_for(flaky.listening.wait(), 5)
    assert flaky.runs == 4
    assert flaky.reconnected == [True]  # the run that connected ended the outage
    assert reconnecting.failing is False
    assert lines(caplog) == [
        (logging.WARNING, "test listener: connection lost (lost #1); retrying every 0 s"),
        (logging.DEBUG, "test listener: still no connection (lost #2)"),
        (logging.DEBUG, "test listener: still no connection (lost #3)"),
        (logging.INFO, "test listener: connected again"),
    ]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_a_connection_without_an_outage_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="taskhub.duty")
    reconnecting = Reconnecting("test listener", 0.0)
    flaky = Flaky(reconnecting, losses=0)
    task = asyncio.create_task(reconnecting.run(flaky.body))
    await asyncio.wait_for(flaky.listening.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert flaky.reconnected == [False]
    assert lines(caplog) == []


async def test_an_error_retry_if_refuses_ends_the_listener() -> None:
    reconnecting = Reconnecting(
        "test listener", 0.0, retry_if=lambda error: isinstance(error, ConnectionError)
    )
    runs = 0

    async def body() -> None:
        nonlocal runs
        runs += 1
        raise (ConnectionError if runs == 1 else ValueError)("boom")

    with pytest.raises(ValueError, match="boom"):
        await asyncio.wait_for(reconnecting.run(body), 5)
    assert runs == 2


async def test_a_stream_goes_on_across_losses_and_closing_it_closes_the_body() -> None:
    reconnecting = Reconnecting("test stream", 0.0)
    connections = 0
    closed = 0

    async def body() -> AsyncGenerator[str, None]:
        nonlocal connections, closed
        connections += 1
        reconnecting.connected()
        try:
            yield f"{connections}a"
            if connections < 3:
                raise ConnectionError("lost")
            yield f"{connections}b"
            await asyncio.Event().wait()
        finally:
            closed += 1

    items = reconnecting.stream(body)
    assert [await anext(items) for _ in range(4)] == ["1a", "2a", "3a", "3b"]
    assert closed == 2
    await items.aclose()
    assert closed == 3  # the body's connection given up too, not left to the collector
    assert reconnecting.failing is False


async def test_every_runs_its_action_on_its_period_and_outlives_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskhub.duty")
    runs = 0

    async def action() -> None:
        nonlocal runs
        runs += 1
        if runs in (2, 3):
            raise RuntimeError("re-check failed")

    duty = Every("test-every", 0.0, action)
    duty.start()
    try:
        await eventually(lambda: runs >= 5, 5, "the action to run five times")
    finally:
        await duty.stop()
    assert not duty.running
    assert [r.levelno for r in caplog.records if r.name == "taskhub.duty"] == [
        logging.ERROR,  # once for the two failures in a row
        logging.INFO,  # and once when it succeeds again
    ]
