"""Configuration and authorisation errors are reported clearly, before or at start."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from taskhub.cli import main
from taskhub.sdk import (
    AsyncClient,
    AuthError,
    Client,
    Extension,
    HubUnavailable,
    TaskContext,
    Worker,
)
from taskhub.sdk.extension import JobSpec
from tests.sdk.conftest import Hub
from tests.sdk.extensions import Echo
from tests.support.server import REPO_ROOT
from tests.support.waiting import eventually_sync

URL = "http://127.0.0.1:9"  # never contacted by these checks


def test_heartbeat_interval_is_at_most_a_third_of_the_server_timeout() -> None:
    with pytest.raises(ValueError, match="at most a third"):
        Worker(URL, "t", [Echo], server_timeout=60, heartbeat_interval=21)
    with pytest.raises(ValueError, match="at most a third"):
        Worker(URL, "t", [Echo], server_timeout=3, heartbeat_interval=1.5)
    assert Worker(URL, "t", [Echo], server_timeout=60, heartbeat_interval=20).config
    assert Worker(URL, "t", [Echo], server_timeout=60).config.heartbeat_interval == 15


def test_extension_declarations() -> None:
    class Named(Extension):
        category = "analysis"
        name = "Renamed"

        def run(self, ctx: TaskContext) -> None: ...

    class HasNameField(Extension):
        category = "selections"
        name: str = "a parameter, not the job name"

        def run(self, ctx: TaskContext) -> str:
            return self.name

    class NoCategory(Extension):
        def run(self, ctx: TaskContext) -> None: ...

    class NoRun(Extension):
        category = "analysis"

    assert JobSpec.of(Named, "lab").full_name == "lab:analysis:Renamed"
    assert JobSpec.of(HasNameField).full_name == "@global:selections:HasNameField"
    assert "name" in JobSpec.of(HasNameField).schema["properties"]
    with pytest.raises(TypeError, match="category"):
        JobSpec.of(NoCategory)
    with pytest.raises(TypeError, match="run"):
        JobSpec.of(NoRun)


def test_a_bad_token_stops_the_worker_at_start(hub: Hub, room: str) -> None:
    with pytest.raises(AuthError) as raised:
        Worker(hub.url, "th_not-a-token", [Echo], room=room).start(timeout=30)
    assert raised.value.status == 401


def test_a_plain_user_may_not_register_global_jobs(hub: Hub) -> None:
    before = _worker_ids(hub)
    with pytest.raises(AuthError) as raised:
        Worker(hub.url, hub.user_token, [Echo]).start(timeout=30)
    assert raised.value.status == 403
    assert "superuser" in str(raised.value).lower() or raised.value.slug == "forbidden"
    assert _worker_ids(hub) == before, "the refused worker is not left on the hub"


def _worker_ids(hub: Hub) -> set[str]:
    with hub.rest() as rest:
        return {worker["id"] for worker in rest.get("/workers?limit=500").json()["items"]}


def test_a_stop_signal_ends_a_worker_still_trying_to_reach_its_hub(tmp_path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHUB_")}
    with socket.socket() as unused:  # bound, never listening: every connection is refused
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        command = [sys.executable, "-m", "taskhub.cli", "worker", "tests.sdk.extensions:Echo"]
        log_path = tmp_path / "worker.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*command, "--url", url, "--token", "t", "--room", "r", "--log-level", "debug"],
                cwd=REPO_ROOT,
                env=env | {"PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            eventually_sync(lambda: "retrying" in log_path.read_text() or None, 20, "a retry")
            process.send_signal(signal.SIGTERM)
            # It would otherwise retry for its 30 s start-up timeout, then exit with 1.
            assert process.wait(timeout=15) == 0, log_path.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    assert "Stopped before the worker was registered" in log_path.read_text()


@pytest.mark.parametrize("url", ["localhost:8710", "ftp://127.0.0.1:8710", "http://"])
def test_a_hub_url_that_can_never_work_is_refused_at_once(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No scheme, another protocol, no host: refused before any request, not retried."""
    assert main(["worker", "tests.sdk.extensions:Echo", "--url", url, "--token", "t"]) == 2
    assert f"invalid hub URL {url!r}" in capsys.readouterr().err
    for client in (Client, AsyncClient):
        with pytest.raises(ValueError, match="expected http://host"):
            client(url, "t")


def test_an_unreachable_hub_is_named_in_one_warning_and_in_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first retry warns at once (naming the URL), later ones do not; the error that
    ends the retries names the URL too."""
    with socket.socket() as unused:  # bound, never listening: every connection is refused
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        worker = Worker(url, "t", [Echo], room="r", startup_timeout=2)
        failed = re.escape(f"POST {url}/v1/joblib/workers failed")
        with (
            caplog.at_level(logging.WARNING, "taskhub.sdk"),
            pytest.raises(HubUnavailable, match=failed),
        ):
            worker.start(timeout=30)
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 1, [r.getMessage() for r in retries]
    assert retries[0].levelno == logging.WARNING
    assert url in retries[0].getMessage()


def test_a_port_that_cannot_exist_is_refused_at_once() -> None:
    for client in (Client, AsyncClient):
        with pytest.raises(ValueError, match="no such port 99999"):
            client("http://127.0.0.1:99999", "t")


def test_a_password_in_the_hub_url_stays_out_of_warnings_and_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as unused:  # bound, never listening: every connection is refused
        unused.bind(("127.0.0.1", 0))
        url = f"http://user:hunter2@127.0.0.1:{unused.getsockname()[1]}"
        worker = Worker(url, "t", [Echo], room="r", startup_timeout=2)
        with (
            caplog.at_level(logging.WARNING, "taskhub.sdk"),
            pytest.raises(HubUnavailable) as failed,
        ):
            worker.start(timeout=30)
    assert "user:***@127.0.0.1" in str(failed.value) and "hunter2" not in str(failed.value)
    assert caplog.records and not any("hunter2" in r.getMessage() for r in caplog.records)


def test_cli_worker_exits_with_the_hub_refusal(hub: Hub, room: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHUB_")}
    result = subprocess.run(
        [
            *(sys.executable, "-m", "taskhub.cli", "worker", "tests.sdk.extensions:Echo"),
            *("--url", hub.url, "--token", "th_not-a-token", "--room", room),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "taskhub worker: 401" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no.such.module:Thing"], "No module named 'no'"),
        (["tests.sdk.extensions:Missing"], "has no attribute 'Missing'"),
        (["tests.sdk.extensions"], "expected MODULE:CLASS"),
        (["tests.sdk.extensions:GATES"], "is not an Extension subclass"),
        (["tests.sdk.extensions:Echo", "--heartbeat-interval", "30"], "at most a third"),
    ],
)
def test_cli_worker_rejects_bad_arguments(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", *args, "--url", URL, "--token", "t"]) == 2
    assert message in capsys.readouterr().err


def test_cli_worker_refuses_an_unknown_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "worker",
                "tests.sdk.extensions:Echo",
                "--url",
                URL,
                "--token",
                "t",
                "--log-level",
                "nope",
            ]
        )
    assert exited.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_cli_worker_needs_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TASKHUB_TOKEN", raising=False)
    assert main(["worker", "tests.sdk.extensions:Echo", "--url", URL]) == 2
    assert "token is required" in capsys.readouterr().err


async def test_the_worker_adopts_a_third_or_less_of_the_hubs_timeout(hub) -> None:
    """The hub announces its worker timeout (60 s by default); a worker configured for a
    longer timeout beats every quarter of the hub's instead."""
    from taskhub.sdk.engine import WorkerConfig, WorkerEngine

    config = WorkerConfig(
        url=hub.url, token=hub.admin_token, concurrency=1, heartbeat_interval=50,
        poll_interval=1, drain_timeout=1, startup_timeout=10, sockets=False,
        socketio_path="socket.io", http_timeout=10,
    )  # fmt: skip
    engine = WorkerEngine(config, [])
    await engine._register()
    assert engine.heartbeat_interval == 15
    await engine.api.hub.request("DELETE", f"/workers/{engine.worker_id}")
    await engine._close()


def test_the_sdks_report_limits_are_the_hubs() -> None:
    """The SDK cuts what it reports to what the hub keeps (the hub would cut an error
    itself, but refuse a longer progress message)."""
    from taskhub.sdk.models import MAX_ERROR_CHARS, MAX_PROGRESS_MESSAGE_CHARS
    from taskhub.transport.http import schemas

    [limit] = [m.max_length for m in schemas.TaskUpdateIn.model_fields["progress_message"].metadata]
    assert limit == MAX_PROGRESS_MESSAGE_CHARS
    assert schemas.MAX_ERROR_CHARS == MAX_ERROR_CHARS
