"""Graceful stop: no new claims, in-flight runs finish (heartbeats go on meanwhile) up to
the drain timeout, then the worker leaves the hub. A stop without drain is done within its
timeout even when the hub does not answer. Cancelling ``serve()`` stops the worker too."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from taskhub.sdk import AsyncClient, Client, Worker
from taskhub.sdk.client import AsyncTaskHandle
from taskhub.sdk.engine import SHUTDOWN_ERROR
from tests.sdk.conftest import HUB_ENV, SWEEPING_TIMEOUT, Hub, wait_status
from tests.sdk.extensions import GATES, OBSERVED_CANCEL, STARTED, Echo, Gate, Slow
from tests.support.server import HubServer, provisioned_database
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually, eventually_sync


def nothing_in_flight(worker: Worker) -> bool:
    """Whether ``worker`` has no claim (nor end report asking for its next tasks) in flight
    and no call about slots granted to the hub for pushes unanswered."""
    engine = worker._engine
    assert engine is not None
    return engine._reserved == 0 and not engine._background


def settled(worker: Worker) -> bool:
    """Whether the listening ``worker`` has nothing in flight and each of its slots runs a
    task or is held by the hub for a push (its claims found nothing more)."""
    engine = worker._engine
    assert engine is not None
    return worker.listening and nothing_in_flight(worker) and engine._free_slots == 0


def claims_nothing_more(worker: Worker) -> bool:
    """Whether the stopping ``worker`` has nothing in flight and the hub holds none of its
    slots: a task submitted from now on is neither claimed nor pushed to it."""
    engine = worker._engine
    assert engine is not None
    return engine._stopping.is_set() and nothing_in_flight(worker) and engine._granted == 0


def test_stop_finishes_in_flight_tasks_and_claims_no_more(hub: Hub, room: str, key: str) -> None:
    worker = Worker(hub.url, hub.user_token, [Gate, Echo], room=room, concurrency=2)
    with Client(hub.url, hub.user_token) as client:
        worker.start()
        worker_id = worker.worker_id
        gated = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        # The free slot's claim has come back empty and the hub has answered the grant of
        # that slot (a grant it took after the stop's take-back would push the task
        # submitted next); then the stop, and its take-back answered.
        eventually_sync(lambda: settled(worker), 10, "the free slot granted to the hub")
        worker.stop()
        eventually_sync(lambda: claims_nothing_more(worker), 10, "the worker to stop claiming")
        late = client.submit(Echo(text="too late"), room=room)
        time.sleep(1.0)  # a free slot and a 2 s poll: claimed by now, were it still claiming
        assert hub.task(late.id)["status"] == "pending"
        GATES[key].set()
        worker.wait(10)
        assert gated.result(timeout=5) == "passed"
    assert hub.task(late.id)["status"] == "pending"
    assert worker_id not in hub.worker_ids()


def test_drain_timeout_fails_what_is_still_running(hub: Hub, room: str, key: str) -> None:
    worker = Worker(hub.url, hub.user_token, [Gate], room=room, drain_timeout=0.5)
    with Client(hub.url, hub.user_token) as client:
        with worker:
            handle = client.submit(Gate(key=key), room=room)
            assert STARTED[key].wait(10)
        task = hub.task(handle.id)
    assert task["status"] == "failed"
    assert task["error"] == "Worker shut down before the task finished"
    assert OBSERVED_CANCEL[key].wait(5), "the abandoned run was told to stop"


def test_heartbeats_go_on_during_the_drain(sweeping_hub: Hub, room: str) -> None:
    hub = sweeping_hub  # the sweeper removes a worker silent for 3 s; the drain lasts longer
    worker = Worker(
        hub.url, hub.user_token, [Slow], room=room, sockets=False, server_timeout=SWEEPING_TIMEOUT
    )
    with Client(hub.url, hub.user_token) as client, worker:
        handle = client.submit(Slow(seconds=SWEEPING_TIMEOUT + 1.5), room=room)
        wait_status(hub, handle.id, {"running"}, 10)
        worker.stop()
        task = handle.wait(timeout=15)
    assert task.status == "completed", task.error


def test_a_hard_stop_while_the_hub_is_down_is_done_within_its_timeout(
    tmp_path: Path, room: str
) -> None:
    """The worker is retrying its claim against a hub that went away: a stop without drain
    cuts that short, and the worker is done within the timeout it was given."""
    with (
        provisioned_database("sqlite", tmp_path) as url,
        HubServer(url, log_dir=tmp_path, env=HUB_ENV) as server,
    ):
        worker = Worker(server.base_url, server.admin_token, [Echo], room=room, poll_interval=0.3)
        worker.start(timeout=10)
        server.stop()
        time.sleep(1)  # the claims and heartbeats now fail and are retried
        worker.close(timeout=5, drain=False)  # TimeoutError if it is not done by then


def test_a_hard_stop_during_a_network_partition_is_done_within_its_timeout(
    sqlite_hub: Hub, room: str
) -> None:
    """Nothing answers, not even the socket's acks: each step of leaving the hub gives up in
    time for the worker to be done within its timeout."""
    hub = sqlite_hub
    with TcpProxy(hub.server.port) as proxy:
        jobs = [Echo, Gate, Slow]  # three rooms to leave, none of them answering
        worker = Worker(proxy.url("http"), hub.user_token, jobs, room=room, poll_interval=0.3)
        worker.start(timeout=10)
        eventually_sync(lambda: worker.listening, 10, "the worker to join its rooms")
        proxy.partition()
        time.sleep(1)  # the claim in flight now hangs
        worker.close(timeout=5, drain=False)  # TimeoutError if it is not done by then


async def a_run_under_way(
    hub: Hub, room: str, key: str, client: AsyncClient
) -> tuple[asyncio.Task[None], str | None, AsyncTaskHandle]:
    """A worker serving ``Gate`` from a task of its own, running one task held at its gate:
    the serving task, the worker's id and the task's handle."""
    worker = Worker(hub.url, hub.user_token, [Gate], room=room)
    serving = asyncio.create_task(worker.serve(handle_signals=False))
    await eventually(lambda: worker.worker_id, 10, "the worker to register")
    handle = await client.submit(Gate(key=key), room=room)
    await eventually(STARTED[key].is_set, 10, "the run to start")
    return serving, worker.worker_id, handle


async def test_cancelling_serve_stops_the_worker_as_stop_does(
    hub: Hub, room: str, key: str
) -> None:
    """The task awaiting ``serve()`` is cancelled (e.g. by ``asyncio.timeout`` or a task
    group): the worker drains its runs, reports them and leaves the hub, then the
    cancellation goes on."""
    async with AsyncClient(hub.url, hub.user_token) as client:
        serving, worker_id, handle = await a_run_under_way(hub, room, key, client)
        serving.cancel()
        await asyncio.sleep(0.2)  # the cancellation lands while the run goes on
        GATES[key].set()
        with pytest.raises(asyncio.CancelledError):
            await serving
        assert (await handle.wait(timeout=1)).status == "completed"
    assert worker_id not in hub.worker_ids()


async def test_cancelling_serve_again_stops_without_draining(
    sqlite_hub: Hub, room: str, key: str
) -> None:
    hub = sqlite_hub
    async with AsyncClient(hub.url, hub.user_token) as client:
        serving, worker_id, handle = await a_run_under_way(hub, room, key, client)
        serving.cancel()
        await asyncio.sleep(0.2)  # draining now
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        task = await handle.wait(timeout=1)
    assert (task.status, task.error) == ("failed", SHUTDOWN_ERROR)
    assert OBSERVED_CANCEL[key].is_set(), "the abandoned run was told to stop"
    assert worker_id not in hub.worker_ids()
