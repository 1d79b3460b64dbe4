"""``taskhub serve`` with several uvicorn workers (PostgreSQL and Redis): ``/metrics`` sums
what every worker process counted, whichever worker answers the scrape, and the queue depth
(read from the database by the scraping process) is not multiplied by the worker count."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.multiprocess import MultiProcessCollector

from tests.support.databases import REDIS_URL
from tests.support.metrics import Samples
from tests.support.server import HubServer, ServerError, provisioned_database, running_hub

PREFIX = "/v1/joblib"
JOB = "lab:modifiers:Spread"
EMPTY_CLAIMS = "taskhub_claim_seconds_count"
# Until both worker processes have answered: on a loaded machine the second one may still be
# starting, or lose every accept to the first, for a while (seen at 300 claims under -n 4).
MAX_CLAIMS = 3000
CONCURRENT_CLAIMS = 8
_PID = re.compile(r"_(\d+)\.db$")


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    with redis.Redis.from_url(REDIS_URL) as client:
        keys = list(client.scan_iter(f"{name}:*"))
        if keys:
            client.delete(*keys)


def empty_claims_by_process(directory: Path, scratch: Path) -> dict[int, float]:
    """Each process's own count of empty claims, read from its files alone."""
    pids = {int(m.group(1)) for f in directory.glob("*.db") if (m := _PID.search(f.name))}
    counts: dict[int, float] = {}
    for pid in pids:
        own = scratch / str(pid)
        own.mkdir(parents=True, exist_ok=True)
        for file in directory.glob(f"*_{pid}.db"):
            shutil.copy(file, own / file.name)
        for family in MultiProcessCollector(None, path=str(own)).collect():
            for sample in family.samples:
                if sample.name == EMPTY_CLAIMS and sample.labels == {"outcome": "empty"}:
                    counts[pid] = sample.value
        shutil.rmtree(own)
    return counts


def test_metrics_are_summed_across_two_workers(tmp_path: Path, namespace: str) -> None:
    metrics_dir = tmp_path / "prometheus"
    env = {
        "TASKHUB_WORKERS": "2",
        "TASKHUB_REDIS_URL": REDIS_URL,
        "TASKHUB_REDIS_NAMESPACE": namespace,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        # The claiming worker never heartbeats, and on a loaded machine the claims go on
        # until both processes answered (up to MAX_CLAIMS): held off, the worker timeout
        # cannot let the sweeper remove it (404 worker-not-found) however long that takes.
        "TASKHUB_WORKER_TIMEOUT_SECONDS": str(24 * 3600),
    }
    with running_hub("postgres", tmp_path, env=env) as server:
        # No keep-alive: every request is a new connection, taken by whichever worker
        # accepts it first. Sent several at once: one after another, a busy machine can
        # leave the worker that answered the last one the first to accept the next, every
        # time.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(
            base_url=server.base_url, timeout=10, trust_env=False, limits=limits
        ) as client:
            headers = server.admin_headers
            registered = client.put(
                f"{PREFIX}/rooms/lab/jobs",
                headers=headers,
                json={"category": "modifiers", "name": "Spread", "schema": {}},
            )
            assert registered.status_code == 201, registered.text
            worker_id = registered.json()["worker_id"]

            def claim(_: int) -> httpx.Response:
                return client.post(
                    f"{PREFIX}/tasks/claim", headers=headers, json={"worker_id": worker_id}
                )

            claims = 0
            by_process: dict[int, float] = {}
            with ThreadPoolExecutor(CONCURRENT_CLAIMS) as pool:
                while claims < MAX_CLAIMS:
                    for answer in pool.map(claim, range(20)):
                        assert answer.status_code == 200 and answer.json()["task"] is None
                        claims += 1
                    by_process = empty_claims_by_process(metrics_dir, tmp_path / "scratch")
                    if sum(1 for count in by_process.values() if count > 0) >= 2:
                        break
            busy = {pid: count for pid, count in by_process.items() if count > 0}
            assert len(busy) == 2, f"one worker took all {claims} connections: {by_process}"
            assert sum(busy.values()) == claims

            for _ in range(3):
                submitted = client.post(f"{PREFIX}/rooms/lab/tasks/{JOB}", headers=headers, json={})
                assert submitted.status_code == 202, submitted.text

            for _ in range(8):  # scrapes land on either worker; each sees the sum
                samples = Samples(client.get("/metrics").text)
                assert samples.value(EMPTY_CLAIMS, {"outcome": "empty"}) == claims
                assert samples.labelled("taskhub_queue_depth", "job")[JOB] == 3
                to_pending = samples.value(
                    "taskhub_task_transitions_total",
                    {"from_status": "none", "to_status": "pending"},
                )
                assert to_pending == 3

        assert server.stop() == 0, server.output()
        assert not server.killed


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_several_workers_need_postgres_and_redis(tmp_path: Path, backend: str) -> None:
    with provisioned_database(backend, tmp_path) as url:  # type: ignore[arg-type]
        server = HubServer(url, log_dir=tmp_path, env={"TASKHUB_WORKERS": "2"})
        with pytest.raises(ServerError):
            server.start(attempts=1)
        assert server.returncode == 2
        expected = "need PostgreSQL and Redis" if backend == "sqlite" else "TASKHUB_REDIS_URL"
        assert expected in server.output()


def _process_state(pid: int, started: str | None = None) -> tuple[str, str] | None:
    """(state, start time) of a live process ``pid`` (None: gone, a zombie, or another process
    that took the pid since ``started``), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, start_time = fields[0], fields[19]
    if state in ("Z", "X") or (started is not None and start_time != started):
        return None
    return state, start_time


def _children(pid: int) -> dict[int, str]:
    """The child processes of ``pid`` with their start times."""
    children: dict[int, str] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if (state := _process_state(int(child))) is not None:
                children[int(child)] = state[1]
    return children


def test_workers_exit_soon_after_their_supervisor_is_killed(tmp_path: Path, namespace: str) -> None:
    """SIGKILL to ``taskhub serve --workers 2`` (nothing can be done in that process) must not
    leave its worker processes serving on as orphans: they stop by themselves, and the port
    is free for the next ``taskhub serve``."""
    env = {
        "TASKHUB_WORKERS": "2",
        "TASKHUB_REDIS_URL": REDIS_URL,
        "TASKHUB_REDIS_NAMESPACE": namespace,
    }
    with provisioned_database("postgres", tmp_path) as url:
        server = HubServer(url, log_dir=tmp_path, env=env)
        with server:
            assert server.process is not None
            children = _children(server.process.pid)
            assert len(children) >= 2, children  # the workers (and multiprocessing's helper)
            server.kill()
        try:
            deadline = time.monotonic() + 60  # a graceful stop of each: seconds, not a minute
            while time.monotonic() < deadline and any(
                _process_state(pid, started) for pid, started in children.items()
            ):
                time.sleep(0.2)
            left = [pid for pid, started in children.items() if _process_state(pid, started)]
            assert left == [], f"orphaned worker processes still running: {left}"
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", server.port))  # nobody listens there any more
        finally:
            for pid, started in children.items():
                if _process_state(pid, started):
                    os.kill(pid, signal.SIGKILL)
