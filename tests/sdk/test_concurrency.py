"""``concurrency=N`` runs N tasks at once (one batch claim), and never more."""

from __future__ import annotations

import threading

from taskhub.sdk import Client, Worker
from taskhub.sdk.extension import JobSpec
from tests.sdk.conftest import Hub
from tests.sdk.extensions import ACTIVE, BARRIERS, Overlap


def test_concurrency_runs_n_tasks_at_once(hub: Hub, room: str, key: str) -> None:
    # Each run waits at a 3-party barrier: a cycle completes only when 3 runs are in it at
    # once; otherwise the barrier times out and the tasks fail.
    BARRIERS[key] = threading.Barrier(3)
    spec = JobSpec.of(Overlap, room)
    with hub.rest() as rest:  # the job exists before the worker: queue the tasks up front
        body = {"category": spec.category, "name": spec.name, "schema": spec.schema}
        assert rest.put(f"/rooms/{room}/jobs", json=body).status_code == 201
    with Client(hub.url, hub.user_token) as client:
        handles = [client.submit(Overlap(key=key), room=room) for _ in range(6)]
        # No socket and a 30 s poll: only a batch claim at start (then one per finished
        # cycle) can start 3 runs together before the barrier's 10 s timeout.
        with Worker(
            hub.url,
            hub.user_token,
            [Overlap],
            room=room,
            concurrency=3,
            sockets=False,
            poll_interval=30,
        ):
            spans = [handle.result(timeout=20) for handle in handles]
    assert ACTIVE[key] == [0, 3], "at most 3 at once, and 3 did run together"
    first_cycle = sorted(spans, key=lambda span: span["started"])[:3]
    assert max(s["started"] for s in first_cycle) < min(s["ended"] for s in first_cycle)
