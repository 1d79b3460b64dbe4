"""Register → submit → served → result, from sync and async code, on both backends."""

from __future__ import annotations

import time
from typing import Any

import pytest

from taskhub.sdk import AsyncClient, Client, ProblemError, TaskFailed, Worker
from taskhub.sdk.models import MAX_ERROR_CHARS, MAX_PROGRESS_MESSAGE_CHARS
from tests.sdk.conftest import Hub
from tests.sdk.extensions import (
    GATES,
    STARTED,
    AsyncCancels,
    AsyncEcho,
    Boom,
    Chatty,
    Echo,
    Flaky,
    Gate,
    Odd,
    Results,
)
from tests.support.waiting import eventually, eventually_sync

# With a 30 s backstop poll, a task served within seconds proves the Socket.IO wake-up.
SLOW_POLL = 30.0


def test_sync_worker_and_client_round_trip(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Echo], room=room, poll_interval=SLOW_POLL) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        assert worker.jobs == [f"{room}:analysis:Echo"]
        eventually_sync(lambda: worker.listening, 5, "the worker to join its job room")
        started = time.monotonic()
        handle = client.submit(Echo(text="hello"), room=room)
        result = handle.result(timeout=10)
        assert time.monotonic() - started < 5, "woken by task_available, not by polling"
    assert result == {"echo": "hello", "task_id": handle.id, "room_id": room, "sync": True}
    task = hub.task(handle.id)
    assert task["status"] == "completed"
    assert task["result"] == result
    assert task["worker_id"] is not None
    with hub.rest() as rest:
        me = rest.get("/users/me").raise_for_status().json()
    assert handle.task.submitted_by == task["submitted_by"] == me["id"]


async def test_async_worker_and_client_round_trip(hub: Hub, room: str) -> None:
    async with (
        Worker(hub.url, hub.user_token, [AsyncEcho], room=room, poll_interval=SLOW_POLL),
        AsyncClient(hub.url, hub.user_token) as client,
    ):
        handles = [await client.submit(AsyncEcho(text=str(i)), room=room) for i in range(3)]
        results = [await handle.result(timeout=10) for handle in handles]
    assert [r["echo"] for r in results] == ["0", "1", "2"]
    assert all(
        r["task_id"] == h.id and r["sync"] is False for r, h in zip(results, handles, strict=True)
    )
    assert handles[0].task.job_name == f"{room}:analysis:EchoAsync"  # the class's ``name``


def test_failure_reaches_the_submitter(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Boom, Echo], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        failing = client.submit(Boom(message="bad angle"), room=room)
        with pytest.raises(TaskFailed) as raised:
            failing.result(timeout=10)
        # the worker goes on serving after a failed run
        assert client.submit(Echo(text="after"), room=room).result(timeout=10)["echo"] == "after"
    assert raised.value.task.error == "ValueError: bad angle"
    assert hub.task(failing.id)["status"] == "failed"


def test_progress_is_reported_while_running(hub: Hub, room: str, key: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Gate], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        running = eventually_sync(
            lambda: (task := hub.task(handle.id))["progress"] == 0.5 and task, 5, "progress"
        )
        assert running["status"] == "running"
        assert running["progress_message"] == "waiting at the gate"
        GATES[key].set()
        assert handle.result(timeout=10) == "passed"


def test_an_overlong_failure_is_cut_to_what_the_hub_takes(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Boom], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        failing = client.submit(Boom(message="x" * (MAX_ERROR_CHARS + 100)), room=room)
        with pytest.raises(TaskFailed) as raised:
            failing.result(timeout=10)
    error = raised.value.task.error
    assert len(error) == MAX_ERROR_CHARS
    assert error.startswith("ValueError: xxx") and error.endswith("…")


def test_an_overlong_progress_message_is_cut_and_progress_goes_on(
    hub: Hub, room: str, key: str
) -> None:
    with (
        Worker(hub.url, hub.user_token, [Chatty], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(Chatty(key=key), room=room)
        assert STARTED[key].wait(10)
        first = eventually_sync(
            lambda: (task := hub.task(handle.id))["progress"] == 0.2 and task, 5, "progress"
        )
        assert first["progress_message"] == "m" * (MAX_PROGRESS_MESSAGE_CHARS - 1) + "…"
        GATES[key].set()
        later = eventually_sync(
            lambda: (task := hub.task(handle.id))["progress"] == 0.9 and task, 5, "more progress"
        )
        assert later["progress_message"] == "short"
        GATES[f"{key}-end"].set()
        assert handle.result(timeout=10) == "said"


@pytest.mark.parametrize(
    ("extension", "error"),
    [
        (Odd(kind="nan"), "The result is not JSON-serialisable"),
        (Odd(kind="bytes"), "The result is not JSON-serialisable"),
        (Odd(kind="surrogate"), "The result is not JSON-serialisable"),
        (Odd(kind="nul-error"), "ValueError: a\\x00b"),
        (Odd(kind="bad-str"), "BadStr"),
        (AsyncCancels(), "CancelledError"),
    ],
    ids=["nan", "bytes", "surrogate", "nul-error", "bad-str", "cancelled-error"],
)
def test_an_awkward_outcome_is_still_reported_at_once(
    hub: Hub, room: str, extension: Any, error: str
) -> None:
    """Not left running until its lease runs out, with its real cause lost."""
    with (
        Worker(hub.url, hub.user_token, [Odd, AsyncCancels], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(extension, room=room)
        with pytest.raises(TaskFailed) as raised:
            handle.result(timeout=10)
    assert raised.value.task.error.startswith(error), raised.value.task.error


def test_a_progress_message_that_is_not_text_is_sent_as_text(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Odd], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(Odd(kind="progress"), room=room)
        assert handle.result(timeout=10) == "reported"
    assert hub.task(handle.id)["progress_message"] == "123"


def test_submit_resolves_the_room_job_then_the_global_one(hub: Hub, room: str) -> None:
    other_room = f"{room}-other"
    with (
        Worker(hub.url, hub.admin_token, [Echo]) as global_worker,  # @global needs a superuser
        Worker(hub.url, hub.user_token, [Echo], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        assert global_worker.jobs == ["@global:analysis:Echo"]
        own = client.submit(Echo(text="own"), room=room)
        fallback = client.submit(Echo(text="global"), room=other_room)
        by_name = client.submit("@global:analysis:Echo", {"text": "named"}, room=room)
        assert [h.result(timeout=10)["echo"] for h in (own, fallback, by_name)] == [
            "own",
            "global",
            "named",
        ]
    assert own.task.job_name == f"{room}:analysis:Echo"
    assert fallback.task.job_name == "@global:analysis:Echo"
    assert fallback.task.room_id == other_room
    assert by_name.task.job_name == "@global:analysis:Echo"


def test_results_are_sent_as_json_or_the_task_fails(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Results], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        model = client.submit(Results(), room=room)
        opaque = client.submit(Results(opaque=True), room=room)
        assert model.result(timeout=10) == {"corners": 4, "label": "square"}
        with pytest.raises(TaskFailed, match="not JSON-serialisable"):
            opaque.result(timeout=10)


def test_retry_later_gets_another_attempt_until_attempts_run_out(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Flaky], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        retried = client.submit(Flaky(succeed_on=2), room=room, max_attempts=3, priority=2)
        assert retried.result(timeout=15) == {"attempt": 2}
        exhausted = client.submit(Flaky(succeed_on=5), room=room, max_attempts=2)
        with pytest.raises(TaskFailed) as raised:
            exhausted.result(timeout=15)
    task = hub.task(retried.id)
    assert (task["attempt"], task["max_attempts"], task["priority"]) == (2, 3, 2)
    assert raised.value.task.attempt == 2
    assert raised.value.task.error == "RetryLater: attempt 2 is too early"


def test_submit_refuses_unknown_options(hub: Hub, room: str) -> None:
    with Client(hub.url, hub.user_token) as client, pytest.raises(TypeError):
        client.submit(Flaky(), room=room, priorty=3)


def test_a_refusal_says_which_field_the_hub_refused(hub: Hub, room: str) -> None:
    """A 422's ``errors`` (which field failed, and why) are part of the error's text."""
    with (
        Worker(hub.url, hub.user_token, [Echo], room=room),
        Client(hub.url, hub.user_token) as client,
        pytest.raises(ProblemError) as raised,
    ):
        client.submit(Echo(), room=room, priority="urgent")
    assert raised.value.status == 422
    assert "body.priority: " in str(raised.value), str(raised.value)


def test_a_refused_result_is_recorded_with_the_hubs_reason(hub: Hub, room: str) -> None:
    """The task fails with what the hub said about the result (here: U+0000), not a guess."""
    with (
        Worker(hub.url, hub.user_token, [Odd], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(Odd(kind="nul"), room=room)
        with pytest.raises(TaskFailed) as raised:
            handle.result(timeout=10)
    error = raised.value.task.error
    assert error.startswith("The hub refused the result: 422"), error
    assert "NUL characters" in error, error


def test_submit_asks_for_an_instance_when_given_an_extension_class() -> None:
    """Refused before any request (the hub is never contacted)."""
    with Client("http://127.0.0.1:9", "t") as client, pytest.raises(TypeError) as raised:
        client.submit(Echo, room="r")  # type: ignore[arg-type]
    assert "pass an instance of Echo, e.g. Echo(...)" in str(raised.value)


def test_a_zero_timeout_checks_the_task_once(hub: Hub, room: str, key: str) -> None:
    """``timeout=0`` reads the task once: a finished task's result, else ``TimeoutError``."""
    with (
        Worker(hub.url, hub.user_token, [Echo, Gate], room=room, concurrency=2),
        Client(hub.url, hub.user_token) as client,
    ):
        done = client.submit(Echo(text="done"), room=room)
        done.wait(timeout=10)
        running = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        assert client.task(done.id).result(timeout=0)["echo"] == "done"
        with pytest.raises(TimeoutError):
            running.wait(timeout=0)
        GATES[key].set()


async def test_a_sub_second_wait_ends_by_its_deadline(hub: Hub, room: str, key: str) -> None:
    """A wait shorter than a second is not rounded up to the hub's whole-second long poll."""
    async with (
        Worker(hub.url, hub.user_token, [Gate], room=room),
        AsyncClient(hub.url, hub.user_token) as client,
    ):
        running = await client.submit(Gate(key=key), room=room)
        await eventually(STARTED[key].is_set, 10, "the run to start")
        for timeout in (0.0, 0.2):
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await running.wait(timeout=timeout)
            assert time.monotonic() - started < 0.9, "the hub was asked to wait a whole second"
        GATES[key].set()
        assert await running.result(timeout=10) == "passed"
