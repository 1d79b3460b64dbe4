"""Socket.IO is only a hint: without it tasks still complete (polling); after a drop the
worker re-joins its rooms; a worker the hub forgot registers again (a proxy's 404 is no such
news); a claim whose answer was lost is repeated without losing its tasks."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from taskhub.sdk import AsyncClient, Client, Worker, execution, http
from taskhub.sdk.api import WorkerApi
from taskhub.sdk.errors import HubUnavailable
from taskhub.sdk.http import AsyncHub
from tests.sdk.conftest import HUB_ENV, Hub
from tests.sdk.extensions import GATES, OBSERVED_CANCEL, STARTED, Echo, Gate, Stubborn
from tests.support.server import Backend, HubServer, provisioned_database
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually_sync

FAST_POLL = 0.3


@pytest.mark.parametrize(
    "socket_options",
    [{"sockets": False}, {"socketio_path": "not-socket-io"}],
    ids=["sockets-disabled", "wrong-socket-path"],
)
def test_tasks_complete_by_polling_without_socketio(
    hub: Hub, room: str, socket_options: dict[str, object]
) -> None:
    with (
        Worker(
            hub.url, hub.user_token, [Echo], room=room, poll_interval=FAST_POLL, **socket_options
        ) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        handles = [client.submit(Echo(text=str(i)), room=room) for i in range(3)]
        started = time.monotonic()
        assert [h.result(timeout=10)["echo"] for h in handles] == ["0", "1", "2"]
        assert time.monotonic() - started < 5
        assert not worker.listening


class RestartableServer(HubServer):
    def restart(self) -> None:
        """Stop the server and start it again on the same port and database."""
        self.stop()
        self.come_back()

    def come_back(self) -> None:
        """Start the stopped server again on the same port and database."""
        self._spawn()
        self._wait_healthy()


def test_worker_rejoins_its_rooms_after_the_hub_restarts(tmp_path: Path, room: str) -> None:
    with (
        provisioned_database("sqlite", tmp_path) as url,
        RestartableServer(url, log_dir=tmp_path, env=HUB_ENV) as server,
        Worker(server.base_url, server.admin_token, [Echo], room=room, poll_interval=60) as worker,
        Client(server.base_url, server.admin_token) as client,
    ):
        eventually_sync(lambda: worker.listening, 10, "the worker to join its rooms")
        worker_id = worker.worker_id
        server.restart()
        eventually_sync(lambda: worker.listening, 20, "the worker to re-join after the restart")
        # with a 60 s backstop poll, only a task_available on the re-joined room is this fast
        started = time.monotonic()
        assert client.submit(Echo(text="again"), room=room).result(timeout=10)["echo"] == "again"
        assert time.monotonic() - started < 5
        assert worker.worker_id == worker_id, "the same worker, not a new registration"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_result_is_delivered_once_the_hub_is_back_however_long_it_was_down(
    tmp_path: Path, room: str, key: str, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that ends while the hub is down keeps trying to report its outcome beyond any
    retry budget, and stays among the worker's active tasks (so its heartbeat keeps the
    task's lease) until the hub has it."""
    monkeypatch.setattr(execution, "UPDATE_RETRY_SECONDS", 0.5)
    with (
        provisioned_database(backend, tmp_path) as url,
        RestartableServer(url, log_dir=tmp_path, env=HUB_ENV) as server,
        Worker(server.base_url, server.admin_token, [Gate], room=room, sockets=False) as worker,
        Client(server.base_url, server.admin_token) as client,
    ):
        handle = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        server.stop()
        GATES[key].set()  # the run completes while the hub is down
        time.sleep(3)  # several rounds of the (shortened) retry budget
        assert worker.active_tasks == [handle.id], "the unreported run is still held"
        server.come_back()
        assert handle.result(timeout=30) == "passed"
        eventually_sync(lambda: not worker.active_tasks, 10, "the run to be released")


def test_waiting_without_a_timeout_outlasts_a_hub_outage(
    tmp_path: Path, room: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``result()`` with no timeout waits through an outage longer than the client's retry
    budget and returns the result once the hub is back."""
    with (
        provisioned_database("sqlite", tmp_path) as url,
        RestartableServer(url, log_dir=tmp_path, env=HUB_ENV) as server,
        Worker(server.base_url, server.admin_token, [Gate], room=room, sockets=False),
    ):
        monkeypatch.setattr(http, "RETRY_SECONDS", 0.5)
        with Client(server.base_url, server.admin_token) as client, ThreadPoolExecutor(1) as pool:
            handle = client.submit(Gate(key=key), room=room)
            assert STARTED[key].wait(10)
            waiting = pool.submit(handle.result)
            server.stop()
            time.sleep(3)  # several times the (shortened) retry budget
            assert not waiting.done(), waiting.exception()
            server.come_back()
            GATES[key].set()
            assert waiting.result(timeout=30) == "passed"


def test_worker_forgotten_by_the_hub_registers_again(hub: Hub, room: str, key: str) -> None:
    with (
        Worker(
            hub.url,
            hub.user_token,
            [Echo, Gate],
            room=room,
            concurrency=2,
            heartbeat_interval=0.3,
            poll_interval=5,
        ) as worker,
        Client(hub.url, hub.user_token) as client,
        hub.rest() as rest,
    ):
        first_id = worker.worker_id
        in_flight = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        # e.g. the sweeper after a network partition: the hub fails the task and forgets us
        assert rest.delete(f"/workers/{first_id}").status_code == 204
        second_id = eventually_sync(
            lambda: worker.worker_id != first_id and worker.worker_id, 10, "a new worker id"
        )
        assert OBSERVED_CANCEL[key].wait(5), "the run of the lost task was told to stop"
        assert client.submit(Echo(text="still here"), room=room).result(timeout=10)["echo"] == (
            "still here"
        )
        workers = hub.worker_ids()
        assert second_id in workers
        assert first_id not in workers
    task = hub.task(in_flight.id)
    assert (task["status"], task["error"]) == ("failed", "Worker disconnected")
    assert task["result"] is None, "the lost run's outcome did not overwrite the failure"


class ForwardingProxy(ThreadingHTTPServer):
    """An HTTP reverse proxy in front of the hub that, while ``refusing_heartbeats`` is
    set, answers worker heartbeats with its own plain 404 (a proxy mid-redeploy, say)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        self.upstream = httpx.Client(base_url=upstream, timeout=10.0, trust_env=False)
        self.refusing_heartbeats = threading.Event()
        self.refused = 0
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ForwardingProxy

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if (
            self.server.refusing_heartbeats.is_set()
            and self.command == "PATCH"
            and self.path.startswith("/v1/joblib/workers/")
        ):
            self.server.refused += 1
            self._answer(404, {"Content-Type": "text/html"}, b"<h1>404 Not Found</h1>")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        reply = self.server.upstream.request(self.command, self.path, headers=headers, content=body)
        kept = {k: v for k, v in reply.headers.items() if k.lower() not in HOP_HEADERS}
        self._answer(reply.status_code, kept, reply.content)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, format: str, *args: object) -> None:
        pass


HOP_HEADERS = {"connection", "content-length", "transfer-encoding", "keep-alive", "host"}


def test_a_404_that_is_not_worker_not_found_is_a_failed_heartbeat_not_a_forgotten_worker(
    hub: Hub, room: str, key: str
) -> None:
    """Only the hub's ``worker-not-found`` makes the worker register again (dropping its
    runs); a proxy's plain 404 is retried like any failed beat, and the run goes on."""
    proxy = ForwardingProxy(hub.url)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        with (
            Worker(
                proxy.url,
                hub.user_token,
                [Gate],
                room=room,
                sockets=False,
                heartbeat_interval=0.3,
                poll_interval=FAST_POLL,
            ) as worker,
            Client(hub.url, hub.user_token) as client,
        ):
            first_id = worker.worker_id
            handle = client.submit(Gate(key=key), room=room)
            assert STARTED[key].wait(10)
            proxy.refusing_heartbeats.set()
            eventually_sync(lambda: proxy.refused >= 3, 10, "three refused heartbeats")
            proxy.refusing_heartbeats.clear()
            GATES[key].set()
            assert handle.result(timeout=10) == "passed"
            assert worker.worker_id == first_id
            assert not OBSERVED_CANCEL[key].is_set()
    finally:
        proxy.shutdown()
        proxy.server_close()
        proxy.upstream.close()


def test_a_task_claimed_again_while_its_earlier_run_goes_on_is_tracked_as_its_own_run(
    hub: Hub, room: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub forgets the worker while a run that looks at cancellation only now and then
    is going on: the task goes back to the queue and the worker, registered again, claims
    it again. Both runs hold a slot until they return; the retry stays tracked (its lease
    kept, cancellable, drained) after the earlier run returns, and completes."""
    with (
        Worker(
            hub.url,
            hub.user_token,
            [Stubborn, Echo],
            room=room,
            concurrency=2,
            heartbeat_interval=0.3,
            poll_interval=FAST_POLL,
        ) as worker,
        Client(hub.url, hub.user_token) as client,
        hub.rest() as rest,
    ):
        first_id = worker.worker_id
        handle = client.submit(Stubborn(key=key), room=room, max_attempts=3)
        assert STARTED[f"{key}-1"].wait(10)
        assert rest.delete(f"/workers/{first_id}").status_code == 204
        assert STARTED[f"{key}-2"].wait(10), "the retry runs while the first run goes on"
        assert hub.task(handle.id)["worker_id"] == worker.worker_id != first_id
        later = client.submit(Echo(text="later"), room=room)
        time.sleep(1)  # several polls: claimed by now, were a slot free
        assert hub.task(later.id)["status"] == "pending", "the two runs fill both slots"
        GATES[f"{key}-1"].set()  # the first run returns; its outcome is dropped
        assert later.result(timeout=10)["echo"] == "later", "its slot is free again"
        eventually_sync(lambda: worker.active_tasks == [handle.id], 5, "only the retry to be held")
        GATES[f"{key}-2"].set()
        assert handle.result(timeout=10) == {"attempt": 2}
        eventually_sync(lambda: not worker.active_tasks, 5, "the retry to be released")
    assert "InvalidStateError" not in caplog.text


def deliver_cancel_notice(worker: Worker, task_id: str, worker_id: str) -> None:
    """Hand the worker a ``task_cancelled`` notice as its socket would: the hub sends one to
    ``worker:{id}`` when an attempt's lease runs out, and a socket stays in that room after
    the worker registered again under another id."""
    engine, loop = worker._engine, worker._loop
    assert engine is not None and engine.link is not None and loop is not None
    notice = {"task_id": task_id, "job_name": "", "worker_id": worker_id}
    asyncio.run_coroutine_threadsafe(engine.link._task_cancelled(notice), loop).result(5)


def test_a_late_cancel_notice_for_an_earlier_worker_id_spares_the_tasks_retry(
    sqlite_hub: Hub, room: str, key: str
) -> None:
    hub = sqlite_hub
    with (
        Worker(
            hub.url, hub.user_token, [Stubborn], room=room, concurrency=2, heartbeat_interval=0.3
        ) as worker,
        Client(hub.url, hub.user_token) as client,
        hub.rest() as rest,
    ):
        first_id = worker.worker_id
        assert first_id is not None
        handle = client.submit(Stubborn(key=key), room=room, max_attempts=2)
        assert STARTED[f"{key}-1"].wait(10)
        assert rest.delete(f"/workers/{first_id}").status_code == 204
        assert STARTED[f"{key}-2"].wait(10)
        deliver_cancel_notice(worker, handle.id, first_id)  # about attempt 1, arriving late
        GATES[f"{key}-1"].set()
        GATES[f"{key}-2"].set()
        assert handle.result(timeout=10) == {"attempt": 2}


PARTITION_TIMEOUT = 4.5  # the hub's worker timeout in the partition test
PARTITION_ENV = {
    **HUB_ENV,
    "TASKHUB_WORKER_TIMEOUT_SECONDS": str(PARTITION_TIMEOUT),
    "TASKHUB_SWEEPER_INTERVAL_SECONDS": "0.5",
}


def last_heartbeat(server: HubServer, worker_id: str | None) -> str | None:
    with httpx.Client(
        base_url=server.base_url, headers=server.admin_headers, trust_env=False
    ) as rest:
        items = rest.get("/v1/joblib/workers", params={"limit": 500}).json()["items"]
    return next((item["last_heartbeat"] for item in items if item["id"] == worker_id), None)


def test_a_worker_cut_off_for_half_the_hubs_timeout_keeps_its_registration(
    tmp_path: Path, room: str, key: str
) -> None:
    """Sockets off, a heartbeat every third of the hub's timeout: after a partition of half
    that timeout, starting just after a beat, a beat gets through before the hub gives up
    on the worker, although the beats sent meanwhile hang on dead connections."""
    with (
        provisioned_database("sqlite", tmp_path) as url,
        HubServer(url, log_dir=tmp_path, env=PARTITION_ENV) as server,
        TcpProxy(server.port) as proxy,
        Worker(
            proxy.url("http"),
            server.admin_token,
            [Gate],
            room=room,
            sockets=False,
            server_timeout=PARTITION_TIMEOUT,
            heartbeat_interval=PARTITION_TIMEOUT / 3,
            poll_interval=0.5,
        ) as worker,
        Client(server.base_url, server.admin_token) as client,
    ):
        worker_id = worker.worker_id
        handle = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        beat = last_heartbeat(server, worker_id)
        eventually_sync(lambda: last_heartbeat(server, worker_id) != beat, 5, "a heartbeat")
        beaten_at = time.monotonic()
        proxy.partition()
        time.sleep(PARTITION_TIMEOUT / 2)
        proxy.heal()
        time.sleep(max(beaten_at + PARTITION_TIMEOUT + 1 - time.monotonic(), 0))  # and a sweep
        GATES[key].set()
        assert handle.result(timeout=10) == "passed"
        assert worker.worker_id == worker_id, "the same registration all along"


def test_waiting_on_an_unreachable_hub_times_out_as_promised() -> None:
    """``wait(timeout)`` raises ``TimeoutError`` at its deadline, not ``HubUnavailable``
    after the client's own (longer) retry budget."""
    with socket.socket() as unused:  # bound, never listening: every connection is refused
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        with Client(url, "t") as client, pytest.raises(TimeoutError, match="unreachable"):
            client.wait("00000000-0000-0000-0000-000000000000", timeout=1)


async def test_the_async_client_times_out_on_an_unreachable_hub_too() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        async with AsyncClient(url, "t") as client:
            with pytest.raises(TimeoutError, match="unreachable"):
                await client.wait("00000000-0000-0000-0000-000000000000", timeout=1)


def test_a_worker_that_does_not_start_in_time_stops_trying() -> None:
    """``start(timeout)`` raises ``TimeoutError``, and no worker goes on registering in the
    background (to serve unseen once the hub is reachable)."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        worker = Worker(url, "t", [Echo], sockets=False)
        with pytest.raises(TimeoutError, match="did not start"):
            worker.start(timeout=0.5)
        worker.wait(timeout=5)  # TimeoutError while it still tries


class LosesFirstClaimAnswer(httpx.AsyncBaseTransport):
    """Forwards to the hub, but drops the answer of the first claim as a reset connection
    would: after the hub has committed it."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.claims: list[httpx.Response] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith("/tasks/claim"):
            await response.aread()
            self.claims.append(response)
            if len(self.claims) == 1:
                raise httpx.ReadError("connection reset", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_claim_whose_answer_was_lost_gets_the_same_tasks_on_retry(
    hub: Hub, room: str
) -> None:
    with hub.rest() as rest:
        job = rest.put(
            f"/rooms/{room}/jobs", json={"category": "analysis", "name": "n", "schema": {}}
        )
        submitted = [
            rest.post(f"/rooms/{room}/tasks/{room}:analysis:n", json={"payload": {}}).json()
            for _ in range(2)
        ]
    assert job.status_code == 201, job.text
    worker_id = job.json()["worker_id"]
    transport = LosesFirstClaimAnswer()
    client = AsyncHub(hub.url, hub.user_token)
    client._http = httpx.AsyncClient(
        base_url=client._http.base_url, headers=client._http.headers, transport=transport
    )
    try:
        claimed = await WorkerApi(client).claim(worker_id, 1)
    finally:
        await client.aclose()
    assert len(transport.claims) == 2, "the lost answer was retried"
    assert [task.id for task in claimed] == [submitted[0]["id"]]
    assert hub.task(submitted[0]["id"])["attempt"] == 1
    assert hub.task(submitted[1]["id"])["status"] == "pending", "the retry claimed no other"


class FailingReports:
    """A hub API whose task updates fail as given, then succeed (``None`` in the list)."""

    def __init__(self, *failures: HubUnavailable | None) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def update_task(self, task: object, body: object, *, retry_for: float) -> None:
        self.calls += 1
        failure = self.failures.pop(0)
        if failure is not None:
            raise failure


def unavailable(status: int | None) -> HubUnavailable:
    error = HubUnavailable("PATCH …/tasks/t failed")
    error.status = status
    return error


def a_run(api: FailingReports) -> execution.TaskRun:
    task = SimpleNamespace(id="t", job_name="r:modifiers:Echo", room_id="r", attempt=1, payload={})
    return execution.TaskRun(task, None, api, worker_id="w", on_auth_lost=lambda _: None)  # type: ignore[arg-type]


async def test_an_end_report_goes_on_through_rounds_without_an_answer_but_not_past_a_500() -> None:
    """Round after round while the hub does not answer (down, or 503 while it restarts); an
    answer of 500 is the hub's own error, which the next round would get again: dropped."""
    patient = FailingReports(unavailable(None), unavailable(503), None)
    assert await a_run(patient)._report_end({"status": "completed"}) == "reported"
    assert patient.calls == 3
    broken = FailingReports(unavailable(500), None)
    assert await a_run(broken)._report_end({"status": "completed"}) == "dropped"
    assert broken.calls == 1
