"""Real Taskhub processes, started and stopped synchronously (from a thread of an event
loop, or a test): ``taskhub serve`` (``HubServer``), the taskiq worker of ``@internal``
tasks (``TaskiqWorker``), a private ``redis-server`` (``RedisServer``), and what they need:
free ports, admin tokens, a migrated SQLite file to copy. The chaos scenario deploys hubs
with these; the system tests use them too (through ``tests.support.server``).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import httpx

from taskhub.services import users
from taskhub.settings import Settings
from taskhub.store.database import Database

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
T = TypeVar("T")


class ServerError(RuntimeError):
    """The server (or its migration) failed to start; the message carries its output."""


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a fresh loop in a helper thread (safe inside a running loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def new_admin_token() -> str:
    return "th_" + secrets.token_urlsafe(32)


def server_env(
    database_url: str, admin_token: str, extra: Mapping[str, str] | None
) -> dict[str, str]:
    """The process environment: ours without inherited ``TASKHUB_*`` settings, plus the hub's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHUB_")}
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "TASKHUB_DATABASE_URL": database_url,
            "TASKHUB_ADMIN_TOKEN": admin_token,
            "TASKHUB_LOG_LEVEL": "warning",
        }
    )
    env.update(extra or {})
    return env


def taskhub_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "taskhub.cli", *args]


def migrate(database_url: str, timeout: float = 120.0) -> None:
    """Run ``taskhub migrate`` against ``database_url`` in a subprocess."""
    env = server_env(database_url, new_admin_token(), None)
    try:
        result = subprocess.run(
            taskhub_command("migrate"),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ServerError(f"taskhub migrate timed out after {timeout}s: {exc.output!r}") from exc
    if result.returncode != 0:
        raise ServerError(
            f"taskhub migrate exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )


def create_user(database_url: str, name: str, *, superuser: bool = False) -> str:
    """Create a user straight in the database (as ``taskhub users create`` does, without a
    process start per user; ``tests/test_cli.py`` covers the command) and return its token.
    The database must be migrated already (on SQLite, a started server has done that)."""

    async def create() -> str:
        db = Database(Settings(database_url=database_url))
        try:
            _user_id, token = await users.create_user(db, name, superuser=superuser)
            return token
        finally:
            await db.dispose()

    return run_async(create())


def revoke_token(database_url: str, token: str) -> None:
    """Delete ``token`` straight in the database (as ``taskhub tokens revoke`` does)."""

    async def revoke() -> None:
        db = Database(Settings(database_url=database_url))
        try:
            assert await users.revoke_token(db, token)
        finally:
            await db.dispose()

    run_async(revoke())


_sqlite_template: list[Path] = []


def migrated_sqlite_template() -> Path:
    """An SQLite file migrated by ``taskhub migrate``, once per test process (removed at
    exit); tests that need a migrated file get copies of it."""
    if not _sqlite_template:
        directory = Path(tempfile.mkdtemp(prefix="taskhub-template-"))
        path = directory / "template.db"
        migrate(f"sqlite+aiosqlite:///{path}")
        atexit.register(shutil.rmtree, directory, True)
        _sqlite_template.append(path)
    return _sqlite_template[0]


class HubServer:
    """One ``taskhub serve`` process on 127.0.0.1; a context manager (start, then stop)."""

    def __init__(
        self,
        database_url: str,
        *,
        admin_token: str | None = None,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
        log_name: str = "server.log",
    ) -> None:
        self.database_url = database_url
        self.admin_token = admin_token or new_admin_token()
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="taskhub-server-"))
        self.log_path = self.log_dir / log_name
        self.extra_env = dict(env or {})
        self.startup_timeout = startup_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self.killed = False
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}

    def create_user(self, name: str, *, superuser: bool = False) -> str:
        """A new user of this server's database; returns the user's token."""
        return create_user(self.database_url, name, superuser=superuser)

    def revoke_token(self, token: str) -> None:
        revoke_token(self.database_url, token)

    def output(self) -> str:
        """Everything the server has written to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, attempts: int = 3) -> HubServer:
        """Spawn the server and wait until ``GET /healthz`` answers 200."""
        if self.process is not None and self.process.poll() is None:
            raise ServerError("server already running")
        for attempt in range(attempts):
            self.port = free_port()
            log_offset = len(self.output())
            self._spawn()
            try:
                self._wait_healthy()
                return self
            except ServerError as exc:
                self.stop()
                port_taken = "address already in use" in self.output()[log_offset:].lower()
                if not port_taken or attempt == attempts - 1:
                    raise ServerError(f"{exc}\n--- server output ---\n{self.output()}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _spawn(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.returncode = None
        self.killed = False
        self.process = subprocess.Popen(
            taskhub_command("serve", "--host", HOST, "--port", str(self.port)),
            cwd=REPO_ROOT,
            env=server_env(self.database_url, self.admin_token, self.extra_env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(base_url=self.base_url, timeout=2.0, trust_env=False) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise ServerError(f"taskhub serve exited with {code} during start-up")
                try:
                    if client.get("/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"taskhub serve did not answer /healthz within {self.startup_timeout}s"
                    )
                time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited after ``timeout`` seconds."""
        process = self.process
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.killed = True
                    process.kill()
                    process.wait(10)
            self.returncode = process.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.returncode

    def kill(self) -> int | None:
        """SIGKILL the server at once (crash simulation)."""
        if self.process is not None and self.process.poll() is None:
            self.killed = True
            self.process.kill()
            self.process.wait(10)
        return self.stop()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` has exited, without reaping it: while it stays unreaped its pid
    (and so its process-group id) cannot be reused, so signalling the group stays safe."""
    if process.returncode is not None:
        return True
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


TASKIQ_WORKER = (sys.executable, "-m", "taskiq", "worker", "taskhub.internal_jobs.broker:broker")


class TaskiqWorker:
    """``taskiq worker taskhub.internal_jobs.broker:broker --workers 1``: the process that executes
    ``@internal`` tasks, with the same ``TASKHUB_*`` settings as the hub (pass the hub's
    ``env``). It runs in a session of its own, so ``kill`` takes taskiq's child worker
    process down with it; a context manager (start, then stop)."""

    READY = "Listening started."

    def __init__(
        self,
        database_url: str,
        *,
        env: Mapping[str, str] | None = None,
        log_dir: Path | None = None,
        log_name: str = "taskiq-worker.log",
        startup_timeout: float = 60.0,
    ) -> None:
        self.database_url = database_url
        self.extra_env = dict(env or {})
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="taskhub-taskiq-"))
        self.log_path = self.log_dir / log_name
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self) -> TaskiqWorker:
        """Spawn the worker and wait until its child process listens on the broker."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        offset = len(self.output())
        env = server_env(self.database_url, new_admin_token(), self.extra_env)
        env.pop("TASKHUB_ADMIN_TOKEN")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [*TASKIQ_WORKER, "--workers", "1", "--shutdown-timeout", "5"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout
        while self.READY not in self.output()[offset:]:
            if _exited(self.process) or time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"taskiq worker did not start:\n{self.output()[offset:]}")
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        """SIGKILL the whole process group at once (a crash of the worker host)."""
        if self.process is not None and not _exited(self.process):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.stop()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (taskiq drains its child), then SIGKILL to whatever is left of the group."""
        process = self.process
        if process is not None:
            if not _exited(process):
                process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while not _exited(process) and time.monotonic() < deadline:
                time.sleep(0.05)
            with suppress(ProcessLookupError):  # the leader is not reaped yet: still our group
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return None if process is None else process.returncode

    def __enter__(self) -> TaskiqWorker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class RedisServer:
    """A private ``redis-server`` on a free port of 127.0.0.1 (no persistence), for tests that
    take Redis away; a context manager (start, then stop)."""

    def __init__(self, directory: Path, *, startup_timeout: float = 10.0) -> None:
        self.directory = directory
        self.startup_timeout = startup_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> RedisServer:
        """Start on a free port (or, started before, on the same port again: a restart)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        log = (self.directory / f"redis-{self.port}.log").open("ab")
        with log:
            self.process = subprocess.Popen(
                [
                    *("redis-server", "--port", str(self.port), "--bind", HOST),
                    *("--save", "", "--appendonly", "no", "--daemonize", "no"),
                    *("--dir", str(self.directory)),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.startup_timeout
        while not self._answers_ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL; afterwards nothing listens on ``port``."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused server could not stop
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def restart(self) -> None:
        """Stop and start again on the same port, empty (no persistence)."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing is answered (a stalled Redis)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM, so it can close its connections, then SIGKILL past ``timeout``."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
