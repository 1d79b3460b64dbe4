"""Graceful stop: no new claims, in-flight runs finish (heartbeats go on meanwhile) up to
the drain timeout, then the worker leaves the hub."""

from __future__ import annotations

import time

from app.sdk import Client, Worker
from tests.sdk.conftest import SWEEPING_TIMEOUT, Hub, wait_status
from tests.sdk.extensions import GATES, OBSERVED_CANCEL, STARTED, Echo, Gate, Slow


def test_stop_finishes_in_flight_tasks_and_claims_no_more(hub: Hub, room: str, key: str) -> None:
    worker = Worker(hub.url, hub.user_token, [Gate, Echo], room=room, concurrency=2)
    with Client(hub.url, hub.user_token) as client:
        worker.start()
        worker_id = worker.worker_id
        gated = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        # The claim that follows the first one (a slot is free) must come back empty before
        # the stop: one still in flight could claim the task submitted next (and run it).
        time.sleep(0.5)
        worker.stop()
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
