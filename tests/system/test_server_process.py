"""The ``taskhub serve`` process itself: start-up, admin token, refusal, graceful stop."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.server import HubServer, ServerError, run_async

PREFIX = "/v1/joblib"


def test_server_answers_with_admin_token_and_stops_on_sigterm(hub_server: HubServer) -> None:
    with httpx.Client(base_url=hub_server.base_url, timeout=10.0, trust_env=False) as client:
        assert client.get("/readyz").status_code == 200
        anonymous = client.get(f"{PREFIX}/workers")
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"].startswith("application/problem+json")
        registered = client.put(
            f"{PREFIX}/rooms/@global/jobs",
            headers=hub_server.admin_headers,
            json={"category": "modifiers", "name": "Probe", "schema": {}},
        )
        assert registered.status_code == 201, registered.text  # the admin is a superuser

    returncode = hub_server.stop()
    assert not hub_server.killed, hub_server.output()
    assert returncode in (0, -signal.SIGTERM), hub_server.output()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{hub_server.base_url}/healthz", timeout=2.0, trust_env=False)


def test_serve_refuses_an_unmigrated_postgres_database(tmp_path: Path) -> None:
    url = run_async(create_postgres_database("taskhub_system"))
    try:
        server = HubServer(url, log_dir=tmp_path, startup_timeout=60.0)
        with pytest.raises(ServerError, match="taskhub migrate"):
            server.start()
        assert server.returncode == 2
    finally:
        run_async(drop_postgres_database(url))
