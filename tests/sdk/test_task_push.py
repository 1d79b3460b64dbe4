"""The SDK's worker and task push (docs/protocol.md, "Task push"): an idle worker grants
the hub its free slots, and the hub sends it each task as it is submitted, already
started; a worker without push, or against a hub that refuses the grant, claims instead
(promptly, not at its next poll); cancels reach pushed runs; a killed worker's pushed
tasks are retried; and pushes and claims together never run more than the concurrency.

Every worker here polls only every 30 s and every wait for a result is far shorter, so
what serves the tasks is a push or a claim woken by the hub, never the backstop poll."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from taskhub.sdk import Client, Extension, TaskCancelled, TaskContext, Worker
from tests.sdk.conftest import TERMINAL, Hub, wait_status
from tests.sdk.extensions import ACTIVE, GATES, LOCK, OBSERVED_CANCEL, STARTED, Echo, Gate, Slow
from tests.sdk.test_worker_process import worker_process
from tests.sdk.test_worker_shortcuts import counter, older_hub  # noqa: F401  (a fixture)
from tests.support.waiting import eventually_sync

SLOW_POLL = 30.0  # the backstop poll; every result below is awaited for far less
WAIT = 10.0  # generous, and a third of the poll
IDLE_GAP = 0.3  # between bursts: time for an idle worker to grant its slots (not required)


class Counted(Extension):
    """Counts its runs under ``key`` while they last (``ACTIVE[key]``: now, most at once),
    holding each at the gate ``gate`` until the test opens it."""

    category = "analysis"
    key: str
    gate: str

    def run(self, ctx: TaskContext) -> str:
        with LOCK:
            counts = ACTIVE[self.key]
            counts[0] += 1
            counts[1] = max(counts[1], counts[0])
        try:
            GATES[self.gate].wait(WAIT)
            return self.gate
        finally:
            with LOCK:
                ACTIVE[self.key][0] -= 1


def pushed(hub: Hub) -> float:
    """Tasks the hub has pushed so far (its ``taskhub_worker_shortcuts_total``)."""
    return counter(hub, "taskhub_worker_shortcuts_total", kind="push")


def claimed(hub: Hub) -> float:
    """Tasks the hub has handed out by claims so far: a worker's claim, or an end report's."""
    return counter(hub, "taskhub_worker_shortcuts_total", kind="claim_start") + counter(
        hub, "taskhub_worker_shortcuts_total", kind="claim_next"
    )


def settle_idle(worker: Worker, client: Client, room: str) -> None:
    """Wait until ``worker`` listens, then let it serve one task: once a listening worker
    has found nothing more to do, every free slot of its is granted to the hub (its own
    claims stop), so each task submitted to it from then on is pushed."""
    eventually_sync(lambda: worker.listening, WAIT, "the worker to listen")
    assert client.submit(Echo(text="warm-up"), room=room).result(timeout=WAIT)["echo"] == "warm-up"


def serve_alone_then_in_a_burst(client: Client, room: str) -> None:
    """3 tasks one at a time, then a burst of 6: each served within ``WAIT``."""
    for i in range(3):
        assert client.submit(Echo(text=str(i)), room=room).result(timeout=WAIT)["echo"] == str(i)
    handles = [client.submit(Echo(text=f"burst-{i}"), room=room) for i in range(6)]
    assert [h.result(timeout=WAIT)["echo"] for h in handles] == [f"burst-{i}" for i in range(6)]


def test_an_idle_worker_is_pushed_each_task(hub: Hub, room: str) -> None:
    """One task at a time to an idle worker: each one is pushed (the push counter grows
    by one per task), served at its first attempt."""
    ids: list[str] = []
    with (
        Worker(
            hub.url, hub.user_token, [Echo], room=room, concurrency=2, poll_interval=SLOW_POLL
        ) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        settle_idle(worker, client, room)
        for i in range(5):
            before = pushed(hub)
            handle = client.submit(Echo(text=str(i)), room=room)
            assert handle.result(timeout=WAIT)["echo"] == str(i)
            assert pushed(hub) - before == 1, f"task {i} was not pushed"
            ids.append(handle.id)
    for task_id in ids:
        task = hub.task(task_id)
        assert (task["status"], task["attempt"]) == ("completed", 1)


def test_a_worker_without_push_claims_everything(sqlite_hub: Hub, room: str) -> None:
    """``push=False``: no task is ever pushed to the worker, which claims them all as the
    hub's wake-ups come (one at a time while idle, then a burst)."""
    hub = sqlite_hub
    before = pushed(hub), claimed(hub)
    with (
        Worker(
            hub.url,
            hub.user_token,
            [Echo],
            room=room,
            concurrency=2,
            poll_interval=SLOW_POLL,
            push=False,
        ) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        settle_idle(worker, client, room)
        serve_alone_then_in_a_burst(client, room)
    assert pushed(hub) == before[0], "a task was pushed to a worker that did not grant slots"
    assert claimed(hub) - before[1] == 1 + 3 + 6


def test_a_worker_falls_back_to_claims_on_a_hub_without_push(
    older_hub: Hub,  # noqa: F811
    room: str,
) -> None:
    """A hub that refuses ``worker_ready`` pushes nothing, and the worker claims every task
    as soon as the hub's wake-up comes: right after it starts listening (while its grant
    is being refused) too, not at its next poll."""
    hub = older_hub
    assert pushed(hub) == 0.0
    with (
        Worker(
            hub.url, hub.user_token, [Echo], room=room, concurrency=2, poll_interval=SLOW_POLL
        ) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        eventually_sync(lambda: worker.listening, WAIT, "the worker to listen")
        serve_alone_then_in_a_burst(client, room)
    assert pushed(hub) == 0.0


def test_a_cancel_reaches_a_pushed_run(sqlite_hub: Hub, room: str, key: str) -> None:
    """A task pushed to an idle worker and then cancelled: the run sees the cancel, the task
    stays ``cancelled``, and the freed slot serves the next task."""
    hub = sqlite_hub
    with (
        Worker(hub.url, hub.user_token, [Gate, Echo], room=room, poll_interval=SLOW_POLL) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        settle_idle(worker, client, room)
        before = pushed(hub)
        handle = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(WAIT), "the pushed task never ran"
        assert pushed(hub) - before == 1, "the task was not pushed"
        assert handle.cancel().status == "cancelled"
        assert OBSERVED_CANCEL[key].wait(5), "the run never saw the cancel"
        with pytest.raises(TaskCancelled):
            handle.result(timeout=5)
        # The freed slot serves on (pushed, or claimed while the run was still ending).
        assert client.submit(Echo(text="next"), room=room).result(timeout=WAIT)["echo"] == "next"
    task = hub.task(handle.id)
    assert (task["status"], task["result"]) == ("cancelled", None)


def test_a_killed_worker_loses_none_of_its_pushed_tasks(
    sweeping_hub: Hub, room: str, tmp_path: Path
) -> None:
    """SIGKILL of a ``taskhub worker`` process running tasks the hub pushed to it: each
    one's attempt is ended by the hub (retried, as it has attempts left) and another
    worker completes them all at their second attempt."""
    hub = sweeping_hub

    with Client(hub.url, hub.user_token) as client:
        with worker_process(hub, room, tmp_path / "first.log", "--concurrency", "3") as process:

            def a_probe_is_pushed() -> bool:
                # A worker process cannot be asked whether it listens: probe until a task
                # is pushed to it; idle after that one, it has granted all its slots.
                before = pushed(hub)
                assert client.submit(Slow(seconds=0), room=room).result(timeout=WAIT)
                return pushed(hub) > before

            eventually_sync(a_probe_is_pushed, 20, "a task pushed to the idle worker", 0.1)
            before = pushed(hub)
            # Long enough to be running still when the kill comes, short for the second worker.
            ids = [client.submit(Slow(seconds=5), room=room, max_attempts=2).id for _ in range(3)]
            first = [wait_status(hub, task_id, {"running"}, WAIT) for task_id in ids]
            assert pushed(hub) - before == 3, "the tasks were not pushed"
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            retried = [wait_status(hub, task_id, {"pending"}, 15) for task_id in ids]
        with worker_process(hub, room, tmp_path / "second.log", "--concurrency", "3"):
            done = [wait_status(hub, task_id, TERMINAL, 30) for task_id in ids]
    assert [task["attempt"] for task in first] == [1, 1, 1]
    for task in retried:  # the killed attempt ended: back in the queue, held by no one
        assert (task["worker_id"], task["error"]) == (None, "Worker disconnected")
    assert {task["worker_id"] for task in first}.isdisjoint(task["worker_id"] for task in done)
    assert [(task["status"], task["attempt"]) for task in done] == [("completed", 2)] * 3


def test_pushes_and_claims_together_never_exceed_the_concurrency(
    sqlite_hub: Hub, room: str, key: str
) -> None:
    """Bursts of 5 short tasks, with idle gaps between them, to a worker of concurrency 3:
    the slots it idles with are pushed tasks, the rest wait for claims (the end reports',
    the worker's own). Every other burst is held at a gate until its runs fill the slots,
    so 2 of its tasks wait in the queue meanwhile (a push too many would start them). All
    complete, and never more than 3 run at once."""
    hub = sqlite_hub
    bursts, size = 6, 5
    with (
        Worker(
            hub.url,
            hub.user_token,
            [Echo, Counted],
            room=room,
            concurrency=3,
            poll_interval=SLOW_POLL,
        ) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        settle_idle(worker, client, room)
        before = pushed(hub), claimed(hub)
        for burst in range(bursts):
            gate, held = f"{key}-{burst}", burst % 2 == 0
            if not held:
                GATES[gate].set()
            handles = [client.submit(Counted(key=key, gate=gate), room=room) for _ in range(size)]
            if held:
                eventually_sync(lambda: ACTIVE[key][0] >= 3, WAIT, "3 runs at the gate")
                GATES[gate].set()
            assert [handle.result(timeout=WAIT) for handle in handles] == [gate] * size
            time.sleep(IDLE_GAP)  # the worker idles: its free slots are granted again
        pushes, claims = pushed(hub) - before[0], claimed(hub) - before[1]
    assert ACTIVE[key] == [0, 3], "more runs at once than the concurrency"
    assert pushes + claims == bursts * size, "each task started once, by a push or a claim"
    assert pushes >= 1, "no task was pushed"
    assert claims >= (size - 3) * (bursts // 2), "the tasks a held burst queued were claimed"
