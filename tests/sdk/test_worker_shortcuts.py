"""The SDK's worker uses the hub's worker shortcuts (a claim that starts its tasks, an end
report that claims the next ones) and falls back to the plain requests on a hub that
ignores them; cancels still reach runs of started batches, and a killed worker's batch
is not lost."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from taskhub.sdk import Client, TaskCancelled, Worker
from tests.sdk.conftest import HUB_ENV, TERMINAL, Hub, _hub, wait_status
from tests.sdk.extensions import GATES, OBSERVED_CANCEL, STARTED, Echo, Gate, Slow
from tests.sdk.test_worker_process import worker_process


@pytest.fixture(scope="module")
def older_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """A hub that ignores the shortcuts, as one from before them does."""
    env = {**HUB_ENV, "TASKHUB_WORKER_SHORTCUTS": "false"}
    yield from _hub("sqlite", tmp_path_factory.mktemp("hub-older"), env)


def counter(hub: Hub, name: str, **labels: str) -> float:
    """A counter's value off the hub's ``/metrics`` (0 if the series is not there)."""
    text = httpx.get(f"{hub.url}/metrics", timeout=10, trust_env=False).text
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    series = rf"{name}\{{{re.escape(wanted)}\}}" if labels else name
    match = re.search(rf"^{series} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def shortcut_counts(hub: Hub) -> tuple[float, float, float, float]:
    """Tasks claimed-and-started, claimed by end reports, PATCH-running transitions
    (claimed → running, which a claim-and-start counts too), and pushed tasks."""
    return (
        counter(hub, "taskhub_worker_shortcuts_total", kind="claim_start"),
        counter(hub, "taskhub_worker_shortcuts_total", kind="claim_next"),
        counter(hub, "taskhub_task_transitions_total", from_status="claimed", to_status="running"),
        counter(hub, "taskhub_worker_shortcuts_total", kind="push"),
    )


def serve_many(
    hub: Hub, room: str, count: int, concurrency: int, *, push: bool = True
) -> list[str]:
    with (
        Worker(hub.url, hub.user_token, [Echo], room=room, concurrency=concurrency, push=push),
        Client(hub.url, hub.user_token) as client,
    ):
        handles = [client.submit(Echo(text=str(i)), room=room) for i in range(count)]
        results = [handle.result(timeout=30)["echo"] for handle in handles]
    assert results == [str(i) for i in range(count)]
    return [handle.id for handle in handles]


def test_the_worker_uses_the_shortcuts(sqlite_hub: Hub, room: str) -> None:
    started, nexts, transitions, pushed = shortcut_counts(sqlite_hub)
    # Without push (tests/sdk/test_task_push.py), so that end reports claim the next.
    ids = serve_many(sqlite_hub, room, 30, concurrency=4, push=False)
    after = shortcut_counts(sqlite_hub)
    # Every task was started by a claim (no PATCH running): by the claimer's claims, or,
    # many of them, by the claims of end reports.
    assert (after[0] - started) + (after[1] - nexts) == len(ids)
    assert after[3] == pushed
    assert after[1] - nexts > 0
    assert after[2] - transitions == len(ids)  # the metrics count them as started all the same
    for task_id in ids:
        task = sqlite_hub.task(task_id)
        assert task["status"] == "completed" and task["attempt"] == 1


def test_runs_ending_together_each_claim_their_successor(sqlite_hub: Hub, room: str) -> None:
    """Every slot of a full worker frees at once with tasks waiting: each end report claims
    the next task for its own slot, none is left to a claim of the claimer's."""
    hub = sqlite_hub
    keys = [f"{room}-{i}" for i in range(4)]
    with (
        Worker(hub.url, hub.user_token, [Gate, Echo], room=room, concurrency=4, push=False),
        Client(hub.url, hub.user_token) as client,
    ):
        gated = [client.submit(Gate(key=key), room=room) for key in keys]
        for key in keys:
            assert STARTED[key].wait(10)
        waiting = [client.submit(Echo(text=str(i)), room=room) for i in range(4)]
        started, nexts, _, _ = shortcut_counts(hub)
        for key in keys:
            GATES[key].set()
        assert [handle.result(timeout=30)["echo"] for handle in waiting] == ["0", "1", "2", "3"]
        assert [handle.result(timeout=10) for handle in gated] == ["passed"] * 4
    after = shortcut_counts(hub)
    assert (after[0] - started, after[1] - nexts) == (0, 4)


def test_the_worker_falls_back_on_a_hub_without_the_shortcuts(older_hub: Hub, room: str) -> None:
    before = shortcut_counts(older_hub)
    ids = serve_many(older_hub, room, 12, concurrency=3)
    after = shortcut_counts(older_hub)
    assert after[:2] == before[:2] == (0.0, 0.0)
    assert after[3] == before[3] == 0.0
    assert after[2] - before[2] == len(ids), "each task started by its own PATCH running"


def test_a_cancel_reaches_a_run_of_a_started_batch(sqlite_hub: Hub, room: str) -> None:
    hub = sqlite_hub
    keys = [f"{room}-{i}" for i in range(3)]
    with (
        Worker(hub.url, hub.user_token, [Gate, Echo], room=room, concurrency=3),
        Client(hub.url, hub.user_token) as client,
    ):
        handles = [client.submit(Gate(key=key), room=room) for key in keys]
        for key in keys:
            assert STARTED[key].wait(10)
        assert handles[1].cancel().status == "cancelled"
        assert OBSERVED_CANCEL[keys[1]].wait(5), "the run never saw the cancel"
        with pytest.raises(TaskCancelled):
            handles[1].result(timeout=5)
        for key in (keys[0], keys[2]):
            GATES[key].set()
        assert [handles[i].result(timeout=10) for i in (0, 2)] == ["passed", "passed"]
        # The freed slots serve on.
        assert client.submit(Echo(text="next"), room=room).result(timeout=10)["echo"] == "next"
    assert hub.task(handles[1].id)["status"] == "cancelled"


def test_a_killed_worker_loses_none_of_its_batch(
    sqlite_hub: Hub, room: str, tmp_path: Path
) -> None:
    """SIGKILL of a worker holding a started batch: each task's attempt ends (retried, as
    it has attempts left), and another worker completes them all."""
    hub = sqlite_hub
    with Client(hub.url, hub.user_token) as client:
        with worker_process(hub, room, tmp_path / "first.log", "--concurrency", "3") as process:
            # Long enough to be running still when the kill comes, short for the second worker.
            ids = [client.submit(Slow(seconds=5), room=room, max_attempts=2).id for _ in range(3)]
            first = [wait_status(hub, task_id, {"running"}, 10) for task_id in ids]
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            for task_id in ids:
                wait_status(hub, task_id, {"pending"}, 15)
        with worker_process(hub, room, tmp_path / "second.log", "--concurrency", "3"):
            done = [wait_status(hub, task_id, TERMINAL, 60) for task_id in ids]
    assert {task["worker_id"] for task in first}.isdisjoint(task["worker_id"] for task in done)
    assert [(task["status"], task["attempt"]) for task in done] == [("completed", 2)] * 3
