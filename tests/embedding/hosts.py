"""The example host (examples/host_app) for tests: built in process on the test's database,
or served by uvicorn in a process of its own (``HostServer``), and signing in to it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.servers import HOST, REPO_ROOT, HubServer, server_env
from examples.host_app.config import HostConfig

SECRET = "a host secret of at least thirty-two characters"
ADMIN_PASSWORD = "the superuser's password"
CONFIG = HostConfig(secret=SECRET, admin_password=ADMIN_PASSWORD)
HOST_ENV = {"HOST_APP_SECRET": SECRET, "HOST_APP_ADMIN_PASSWORD": ADMIN_PASSWORD}


async def sign_in(http: httpx.AsyncClient, name: str, password: str | None = None) -> str:
    """The host's JWT for ``name`` (``POST /auth/login``)."""
    response = await http.post("/auth/login", json={"name": name, "password": password})
    assert response.status_code == 200, response.text
    return str(response.json()["access_token"])


def sign_in_sync(base_url: str, name: str, password: str | None = None) -> str:
    with httpx.Client(base_url=base_url, timeout=10, trust_env=False) as http:
        response = http.post("/auth/login", json={"name": name, "password": password})
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class HostServer(HubServer):
    """``uvicorn examples.host_app.main:asgi_app`` on a free port of 127.0.0.1 (with the
    lifespan on), started and stopped as ``HubServer`` starts ``taskhub serve``; ready when
    ``GET /healthz`` answers."""

    def __init__(
        self,
        database_url: str,
        *,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        log_name: str = "host.log",
        admin_token: str | None = None,
    ) -> None:
        super().__init__(
            database_url,
            admin_token=admin_token,
            log_dir=log_dir,
            env={**HOST_ENV, **(env or {})},
            log_name=log_name,
        )

    def __enter__(self) -> HostServer:
        self.start()
        return self

    def _spawn(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.returncode = None
        self.killed = False
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "uvicorn", "examples.host_app.main:asgi_app"),
                *("--host", HOST, "--port", str(self.port), "--lifespan", "on"),
                *("--log-level", "warning"),
            ],
            cwd=REPO_ROOT,
            env=server_env(self.database_url, self.admin_token, self.extra_env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )


def assert_host_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """A problem document of the host's own (its types are ``/problems/{slug}``)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"/problems/{slug}", body
    assert (body["status"], bool(body["title"]), bool(body["detail"])) == (status, True, True)
    return body
