"""``@internal`` jobs across real processes: ``taskhub serve`` and ``taskiq worker
taskhub.internal_jobs.broker:broker`` on PostgreSQL and Redis (and the embedded SQLite default).

docs/protocol.md, "``@internal`` jobs": submit checks that an executor is registered (else
503 and no task row), enqueues the task on the taskiq broker and marks it CLAIMED, or FAILED
"Failed to dispatch to internal executor" when the broker cannot take it; no
``task_available``; the taskiq worker process moves the task to RUNNING and to its end;
internal tasks stuck beyond ``internal_task_timeout_seconds`` fail "Internal worker
timeout"; the stream broker does not lose a message when its worker is killed, and executing
the same ``(task_id, attempt)`` twice has no second effect.

Every hub here has a Redis namespace of its own (``TASKHUB_REDIS_NAMESPACE``), so other hubs
on the same Redis never consume its messages; its keys are deleted afterwards. The extra jobs
of ``tests.dispatch.slow_jobs`` are loaded by both the server and the taskiq worker.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import redis
from sqlalchemy.engine import make_url

from taskhub.dispatch.broker import TASK_NAME, make_broker
from taskhub.services.internal_tasks import DISPATCH_FAILED, INTERNAL_TIMEOUT
from taskhub.settings import Settings
from tests.dispatch import slow_jobs
from tests.support.api import ApiClient, assert_problem
from tests.support.databases import REDIS_URL
from tests.support.server import HubServer, RedisServer, TaskiqWorker, running_hub
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

SUMMARY = "@internal:analysis:RoomSummary"
SLEEP = "@internal:modifiers:Sleep"
TALLY = "@internal:modifiers:Tally"
JOB_MODULES = {"TASKHUB_INTERNAL_JOB_MODULES": slow_jobs.MODULE}
# Short enough to watch the sweeper act within a test, long enough for a loaded machine.
INTERNAL_TIMEOUT_SECONDS = 2.0
SWEEPER_INTERVAL_SECONDS = 0.5


@dataclass
class Deployment:
    """A hub and (when started) its taskiq worker, sharing ``env``; ``alice`` is a user."""

    server: HubServer
    worker: TaskiqWorker | None
    env: dict[str, str]
    namespace: str
    alice: str

    def key(self, name: str) -> str:
        return f"{self.namespace}:{name}"

    @property
    def stream(self) -> str:
        """The taskiq stream of ``@internal`` messages (``taskhub.dispatch.broker``)."""
        return self.key("internal")

    @property
    def group(self) -> str:
        return self.key("executors")

    def logs(self) -> str:
        """What the server and the taskiq worker have written, for failure messages."""
        worker = self.worker.output() if self.worker else ""
        return f"--- server ---\n{self.server.output()}\n--- taskiq worker ---\n{worker}"


@contextmanager
def redis_namespace() -> Iterator[str]:
    """A fresh ``TASKHUB_REDIS_NAMESPACE``; every key under it (and taskiq-redis's autoclaim
    lock for its stream) is deleted afterwards."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    try:
        yield namespace
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = [
                *client.scan_iter(f"{namespace}:*"),
                *client.scan_iter(f"autoclaim:{namespace}:*"),
            ]
            if keys:
                client.delete(*keys)


@contextmanager
def deployment(
    directory: Path, *, worker: bool = True, settings: dict[str, str] | None = None
) -> Iterator[Deployment]:
    """PostgreSQL + Redis (a namespace of its own) + the extra jobs, and a taskiq worker."""
    with redis_namespace() as namespace:
        env = {
            "TASKHUB_REDIS_URL": REDIS_URL,
            "TASKHUB_REDIS_NAMESPACE": namespace,
            **JOB_MODULES,
            **(settings or {}),
        }
        with running_hub("postgres", directory, env=env) as server:
            alice = server.create_user("alice")
            if not worker:
                yield Deployment(server, None, env, namespace, alice)
                return
            with TaskiqWorker(server.database_url, env=env, log_dir=directory) as process:
                yield Deployment(server, process, env, namespace, alice)


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One hub with its taskiq worker, default timeouts, shared by tests using own rooms."""
    with deployment(tmp_path_factory.mktemp("internal-production")) as hub:
        yield hub


@pytest.fixture
def room() -> str:
    return f"internal-{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def api(server: HubServer, token: str) -> AsyncIterator[ApiClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30.0, trust_env=False) as http:
        yield ApiClient(http, token)


async def outcome(client: ApiClient, task_id: str, wait: int = 10) -> dict[str, Any]:
    """``GET /tasks/{id}`` with ``Prefer: wait``: the task once it ended (or after ``wait``)."""
    response = await client.get(f"/tasks/{task_id}", headers={"Prefer": f"wait={wait}"})
    assert response.status_code == 200, response.text
    return response.json()


async def reaches(
    client: ApiClient, task_id: str, status: str, within: float = 15.0
) -> dict[str, Any]:
    """The task as soon as it shows ``status`` (a test-side poll; the hub itself never polls)."""
    seen: dict[str, Any] = {}

    async def shows_status() -> dict[str, Any] | None:
        seen["task"] = task = await client.task(task_id)
        return task if task["status"] == status else None

    return await eventually(  # type: ignore[no-any-return]
        shows_status, within, lambda: f"task {status} (last seen: {seen.get('task')})", 0.05
    )


def consumer_group(hub: Deployment) -> dict[str, Any]:
    """``XINFO GROUPS`` of the hub's stream: ``pending`` = delivered, not yet acknowledged."""
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
        (group,) = [g for g in client.xinfo_groups(hub.stream) if g["name"] == hub.group]
        return group


async def until_drained(hub: Deployment, within: float = 15.0) -> None:
    """Until every message on the hub's stream was delivered to a worker and acknowledged."""
    seen: dict[str, Any] = {}

    def drained() -> bool:
        with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
            last = client.xinfo_stream(hub.stream)["last-generated-id"]
        seen["group"] = group = consumer_group(hub)
        return bool(group["last-delivered-id"] == last and group["pending"] == 0)

    await eventually(drained, within, lambda: f"the stream drained ({seen.get('group')})", 0.05)


@dataclass
class LockingSession:
    """The test's view of PostgreSQL while it holds a row lock on one task (from another
    session: within a transaction, ``pg_stat_activity`` would stay a snapshot)."""

    observer: asyncpg.Connection

    async def wait_for_lock_waiter(self, within: float = 20.0) -> None:
        """Until another session of this database waits for a lock (ours)."""
        await eventually(
            lambda: self.observer.fetchval(LOCK_WAITERS.format(what="count(*)")),
            within,
            "a session waiting for the task's row lock",
            0.05,
        )

    async def terminate_lock_waiters(self) -> None:
        await self.observer.fetch(LOCK_WAITERS.format(what="pg_terminate_backend(pid)"))


LOCK_WAITERS = (
    "SELECT {what} FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
)


@asynccontextmanager
async def row_locked(database_url: str, task_id: str) -> AsyncIterator[LockingSession]:
    """``SELECT … FOR UPDATE`` on the task's row until the block ends (then rolled back)."""
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(False)
    holder = await asyncpg.connect(dsn)
    observer = await asyncpg.connect(dsn)
    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT 1 FROM task WHERE id = $1 FOR UPDATE", uuid.UUID(task_id))
        try:
            yield LockingSession(observer)
        finally:
            await transaction.rollback()
    finally:
        await observer.close()
        await holder.close()


def settings_of(hub: Deployment) -> dict[str, Any]:
    """The hub's Redis settings, as ``Settings`` keyword arguments."""
    return {
        "database_url": hub.server.database_url,
        "redis_url": hub.env["TASKHUB_REDIS_URL"],
        "redis_namespace": hub.env["TASKHUB_REDIS_NAMESPACE"],
    }


# --- submit → completed ------------------------------------------------------------------


async def test_internal_task_runs_on_the_taskiq_worker_process_and_completes_with_result(
    production: Deployment, room: str
) -> None:
    """Answered ``claimed`` (or later); the worker process runs it; the result reaches
    long-polls and the room's sockets (through Redis); nobody is sent ``task_available``."""
    server = production.server
    async with (
        api(server, server.admin_token) as admin,
        api(server, production.alice) as alice,
        SocketProbe("browser-and-job-room") as socket,
    ):
        schema = (await admin.get(f"/rooms/{room}/jobs/{SUMMARY}")).json()["schema"]
        remote = await admin.register(
            room="@internal", category="analysis", name="RoomSummary", schema=schema
        )
        await socket.connect(server.base_url, server.admin_token)
        await socket.room_join(room)
        await socket.join_job_room(SUMMARY, remote["worker_id"])

        response = await alice.post(f"/rooms/{room}/tasks/{SUMMARY}", json={"payload": {}})
        assert response.status_code == 202, response.text
        submitted = response.json()
        assert submitted["status"] in {"claimed", "running", "completed"}, submitted

        done = await outcome(alice, submitted["id"])
        assert done["status"] == "completed", (done, production.logs())
        assert done["error"] is None
        assert done["started_at"] and done["completed_at"]
        summary = done["result"]
        assert summary["room_id"] == room
        assert summary["total"] == 1  # the summary task itself, RUNNING while it counted
        assert summary["by_status"]["running"] == 1

        completed = await socket.wait_status(submitted["id"], "completed")
        assert completed.data["result"] == summary
        sentinel = socket.mark()
        await alice.register(room=room, name="Sentinel", schema={})  # a later room event
        end = (await socket.wait_for("jobs_invalidate", after=sentinel)).index
        assert [event for event, _ in socket.between(0, end)].count("task_available") == 0
        # The events come from two processes (the hub, the taskiq worker): "pending" goes
        # out before the task is enqueued, and versions order the rest whatever the order
        # of their arrival.
        changes = [
            data
            for event, data in socket.between(0, end)
            if event == "task_status_event" and data["id"] == submitted["id"]
        ]
        assert changes[0]["status"] == "pending"
        in_order = sorted(changes, key=lambda data: data["version"])
        assert [data["status"] for data in in_order] in (
            ["pending", "claimed", "running", "completed"],
            ["pending", "running", "completed"],  # the executor started before the mark
        )
        assert len({data["version"] for data in changes}) == len(changes)
        await until_drained(production)  # acknowledged after execution


async def test_internal_task_completes_in_process_on_the_embedded_default(
    tmp_path: Path, room: str
) -> None:
    """SQLite, no Redis, no taskiq process: the in-memory broker runs the job in the server."""
    with running_hub("sqlite", tmp_path) as server:
        async with api(server, server.admin_token) as admin:
            submitted = await admin.submit(SUMMARY, room=room, payload={"failures": 1})
            assert submitted["status"] in {"claimed", "running", "completed"}
            done = await outcome(admin, submitted["id"])
    assert done["status"] == "completed", (done, server.output())
    assert done["result"]["room_id"] == room
    assert done["result"]["total"] == 1


# --- refused or failed at submit ---------------------------------------------------------


async def test_broker_down_at_submit_fails_the_task_and_the_server_stays_up(
    tmp_path: Path, room: str
) -> None:
    """Redis gone after start-up: 202 with the task FAILED "Failed to dispatch to internal
    executor" (GET agrees), and the server keeps answering."""
    with (
        RedisServer(tmp_path / "redis") as private_redis,
        running_hub(
            "postgres", tmp_path, env={"TASKHUB_REDIS_URL": private_redis.url, **JOB_MODULES}
        ) as server,
    ):
        private_redis.stop()
        async with api(server, server.admin_token) as admin:
            response = await admin.post(f"/rooms/{room}/tasks/{SUMMARY}", json={"payload": {}})
            assert response.status_code == 202, response.text
            failed = response.json()
            assert failed["status"] == "failed"
            assert failed["error"] == DISPATCH_FAILED
            assert failed["completed_at"] is not None
            assert await admin.task(failed["id"]) == failed
            assert (await admin.http.get("/healthz")).status_code == 200
            listed = (await admin.get(f"/rooms/{room}/tasks")).json()
            assert [task["id"] for task in listed["items"]] == [failed["id"]]
        assert server.process is not None and server.process.poll() is None


async def test_readyz_is_not_ready_while_redis_is_down(tmp_path: Path) -> None:
    """docs/protocol.md, "Routes outside the API": ``/readyz`` checks the database and Redis
    (which carries the broker), so a replica whose Redis is gone is taken out of the load
    balancer."""
    with (
        RedisServer(tmp_path / "redis") as private_redis,
        running_hub("sqlite", tmp_path, env={"TASKHUB_REDIS_URL": private_redis.url}) as server,
    ):
        async with httpx.AsyncClient(base_url=server.base_url, trust_env=False) as http:
            assert (await http.get("/readyz")).status_code == 200
            private_redis.stop()
            response = await http.get("/readyz", timeout=30.0)
        assert response.status_code == 503, response.text
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_internal_job_without_executor_is_refused_with_503_and_leaves_no_task(
    production: Deployment, room: str
) -> None:
    """A superuser may register an ``@internal`` job no process can execute; submitting to
    it is 503 ``internal-job-not-configured``: no task row, nothing enqueued."""
    server = production.server
    async with api(server, server.admin_token) as admin, api(server, production.alice) as alice:
        response = await admin.put(
            "/rooms/@internal/jobs",
            json={"category": "modifiers", "name": "Unserved", "schema": {}},
        )
        assert response.status_code in (200, 201), response.text
        with redis.Redis.from_url(REDIS_URL) as client:
            enqueued = client.xlen(production.stream)
            response = await alice.post(
                f"/rooms/{room}/tasks/@internal:modifiers:Unserved", json={"payload": {}}
            )
            assert_problem(response, 503, "internal-job-not-configured")
            assert client.xlen(production.stream) == enqueued
        assert (await alice.get(f"/rooms/{room}/tasks")).json()["total"] == 0


# --- the worker process dies, the task is cancelled, the message comes twice --------------


async def test_taskiq_worker_killed_mid_task_fails_it_with_internal_worker_timeout(
    tmp_path: Path, room: str
) -> None:
    """kill -9 of the taskiq worker (its whole process group) while the job runs: the
    sweeper fails the task "Internal worker timeout" once the timeout has passed; the
    unacknowledged message stays in the stream (not lost, and harmless: the row decides)."""
    settings = {
        "TASKHUB_INTERNAL_TASK_TIMEOUT_SECONDS": str(INTERNAL_TIMEOUT_SECONDS),
        "TASKHUB_SWEEPER_INTERVAL_SECONDS": str(SWEEPER_INTERVAL_SECONDS),
        "TASKHUB_INTERNAL_REDELIVERY_SECONDS": "3600",
    }
    marker = tmp_path / "slept"
    with deployment(tmp_path, settings=settings) as hub:
        assert hub.worker is not None
        async with api(hub.server, hub.alice) as alice:
            task = await alice.submit(
                SLEEP, room=room, payload={"seconds": 30, "marker": str(marker)}
            )
            await reaches(alice, task["id"], "running")
            hub.worker.kill()
            killed_at = time.monotonic()
            done = await outcome(alice, task["id"], wait=15)
            failed_after = time.monotonic() - killed_at
        assert consumer_group(hub)["pending"] == 1
    assert done["status"] == "failed", done
    assert done["error"] == INTERNAL_TIMEOUT
    assert done["result"] is None
    ran_for = datetime.fromisoformat(done["completed_at"]) - datetime.fromisoformat(
        done["started_at"]
    )
    assert ran_for.total_seconds() >= INTERNAL_TIMEOUT_SECONDS  # the sweeper, not the kill
    assert failed_after < INTERNAL_TIMEOUT_SECONDS + SWEEPER_INTERVAL_SECONDS + 3.0
    assert not marker.exists()


async def test_a_lost_database_connection_does_not_lose_an_internal_tasks_outcome(
    tmp_path: Path, room: str
) -> None:
    """Every database session but the test's is terminated while the job runs (a database
    restart, an operator's ``pg_terminate_backend``): the taskiq worker still writes the
    outcome (a pooled connection is tested before use; a write that lost its connection is
    tried again) instead of leaving the task running until the internal timeout."""
    with deployment(tmp_path) as hub:
        async with api(hub.server, hub.alice) as alice:
            task = await alice.submit(SLEEP, room=room, payload={"seconds": 2})
            await reaches(alice, task["id"], "running")
            dsn = make_url(hub.server.database_url).set(drivername="postgresql")
            observer = await asyncpg.connect(dsn.render_as_string(False))
            try:
                await observer.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            finally:
                await observer.close()
            seen: dict[str, httpx.Response] = {}

            async def no_longer_running() -> dict[str, Any] | None:
                # The hub's own pooled sessions went too: it may answer 500 once.
                seen["response"] = response = await alice.get(f"/tasks/{task['id']}")
                if response.status_code == 200 and response.json()["status"] != "running":
                    return response.json()
                return None

            done = await eventually(
                no_longer_running,
                20,
                lambda: f"the task past running ({seen['response'].text}, {hub.logs()})",
                0.1,
            )
    assert (done["status"], done["result"]) == ("completed", {"slept": 2}), hub.logs()


async def test_internal_task_cancelled_while_running_stays_cancelled(
    production: Deployment, room: str, tmp_path: Path
) -> None:
    """The submitter cancels while the job runs; the job still runs to its end in the
    worker process, but its completion changes nothing: cancelled, no result."""
    marker = tmp_path / "slept"
    async with api(production.server, production.alice) as alice:
        task = await alice.submit(SLEEP, room=room, payload={"seconds": 2, "marker": str(marker)})
        await reaches(alice, task["id"], "running")
        response = await alice.transition(task["id"], "cancelled")
        assert response.status_code == 200, response.text
        cancelled = response.json()
        assert cancelled["status"] == "cancelled"

        await until_drained(production)  # acknowledged once the executor is done with it
        after = await alice.task(task["id"])
    assert marker.exists()  # the job's run reached its end: its completion was refused
    assert after["status"] == "cancelled"
    assert after["result"] is None and after["error"] is None
    assert after["completed_at"] == cancelled["completed_at"]


async def test_the_same_task_and_attempt_delivered_twice_runs_once(
    production: Deployment, room: str, tmp_path: Path
) -> None:
    """A second message for a finished ``(task_id, attempt)`` (as a redelivery would be)
    reaches the worker process, is acknowledged, and changes nothing: the job ran once."""
    tally = tmp_path / "tally"
    async with api(production.server, production.alice) as alice:
        task = await alice.submit(TALLY, room=room, payload={"path": str(tally)})
        done = await outcome(alice, task["id"])
        assert done["status"] == "completed", done
        assert done["result"] == {"runs": 1}

        broker = make_broker(Settings(**settings_of(production)))
        await broker.startup()
        try:
            await broker.find_task(TASK_NAME).kiq(task["id"], done["attempt"])  # type: ignore[union-attr]
        finally:
            await broker.shutdown()
        await until_drained(production)
        again = await alice.task(task["id"])
    assert tally.read_text().splitlines() == [task["id"]]
    assert again == done


async def test_a_message_whose_worker_died_before_running_it_is_redelivered(
    tmp_path: Path, room: str
) -> None:
    """The stream broker does not lose a message when its worker is killed: a worker takes
    the message and dies before the task starts (its first write waits on a row lock we
    hold); after ``TASKHUB_INTERNAL_REDELIVERY_SECONDS`` the next worker runs the task.

    taskiq-redis looks for unacknowledged messages only after a read that returned new
    ones, so a second task nudges the next worker."""
    redelivery = 1.0
    tally = tmp_path / "tally"
    settings = {"TASKHUB_INTERNAL_REDELIVERY_SECONDS": str(redelivery)}
    with deployment(tmp_path, worker=False, settings=settings) as hub:
        async with api(hub.server, hub.alice) as alice:
            task = await alice.submit(TALLY, room=room, payload={"path": str(tally)})
            assert task["status"] == "claimed"
            async with row_locked(hub.server.database_url, task["id"]) as database:
                first = TaskiqWorker(hub.server.database_url, env=hub.env, log_dir=tmp_path)
                with first:
                    await database.wait_for_lock_waiter()
                    first.kill()
                await database.terminate_lock_waiters()  # the dead worker's session
            assert (await alice.task(task["id"]))["status"] == "claimed"
            assert consumer_group(hub)["pending"] == 1

            # No event says the message has been idle long enough to be redelivered: only
            # the clock does.
            await asyncio.sleep(redelivery)
            second = TaskiqWorker(
                hub.server.database_url, env=hub.env, log_dir=tmp_path, log_name="second.log"
            )
            with second:
                nudge = await alice.submit(TALLY, room=room, payload={"path": str(tally)})
                assert (await outcome(alice, nudge["id"]))["status"] == "completed"
                done = await outcome(alice, task["id"])
                assert done["status"] == "completed", (done, hub.logs(), second.output())
    assert sorted(tally.read_text().splitlines()) == sorted([task["id"], nudge["id"]])
