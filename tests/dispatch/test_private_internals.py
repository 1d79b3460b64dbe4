"""taskiq-redis's private internal that ``ResilientStreamBroker`` (``app/dispatch/broker.py``)
overrides, as the pinned version has it: ``RedisStreamBroker._declare_consumer_group``, which
the broker calls again after a Redis restart, with the group reading from the stream's start.
An upgrade that changes it fails here before a restarted Redis quietly loses internal tasks:
re-test the broker against the new version, then widen the pin in pyproject.toml (and
``PINS`` below). Another taskiq or taskiq-redis private name is one more line in
``INTERNALS``."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as redis
from taskiq_redis import RedisStreamBroker

from taskhub.dispatch.broker import ResilientStreamBroker
from tests.support.private_internals import Internal, check, check_no_shadowing, check_pin
from tests.support.server import RedisServer

PINS = {"taskiq-redis": ">=1.2.4,<1.3"}

INTERNALS = [
    Internal(
        RedisStreamBroker,
        "_declare_consumer_group",
        "(self)",
        "taskiq-redis",
        "ResilientStreamBroker overrides it (from_start=True after a Redis restart) and "
        "startup() calls it",
    ),
]
QUEUE, GROUP = "canary-internal", "canary-executors"


@pytest.mark.parametrize("distribution", sorted(PINS))
def test_the_pin_is_the_tested_range_and_holds_the_installed_version(distribution: str) -> None:
    check_pin(distribution, PINS[distribution])


@pytest.mark.parametrize("internal", INTERNALS, ids=Internal.label)
def test_a_private_method_relied_on_is_there_as_it_was(internal: Internal) -> None:
    check(internal)


def test_no_private_name_of_the_broker_replaces_one_of_taskiq_redis_unawares() -> None:
    check_no_shadowing(ResilientStreamBroker, intended={"_declare_consumer_group"})


async def _groups(url: str) -> dict[str, bytes]:
    """The consumer groups of the queue's stream: each one's last delivered id."""
    async with redis.Redis.from_url(url) as client:
        groups = await client.xinfo_groups(QUEUE)
    return {group["name"].decode(): group["last-delivered-id"] for group in groups}


@pytest.mark.redis
async def test_the_group_is_declared_at_startup_and_again_from_the_streams_start(
    tmp_path: Path,
) -> None:
    """``startup`` declares the group through ``_declare_consumer_group()`` (from the
    stream's end: ``consumer_id`` "$"); the override's ``from_start=True`` declares a lost
    group anew from the start ("0"), so the messages added while it was gone are read: the
    base method must still read ``self.consumer_id`` when it creates the group."""
    with RedisServer(tmp_path) as server:
        broker = ResilientStreamBroker(server.url, queue_name=QUEUE, consumer_group_name=GROUP)
        try:
            async with redis.Redis.from_url(server.url) as client:
                last = await client.xadd(QUEUE, {"data": b"before the start"})
            await broker.startup()
            assert await _groups(server.url) == {GROUP: last}
            assert broker.consumer_id == "$"

            async with redis.Redis.from_url(server.url) as client:
                await client.xgroup_destroy(QUEUE, GROUP)  # as a Redis restarted empty
            await broker._declare_consumer_group(from_start=True)
            assert await _groups(server.url) == {GROUP: b"0-0"}
            assert broker.consumer_id == "$"  # put back for the next declaration
        finally:
            await broker.shutdown()
