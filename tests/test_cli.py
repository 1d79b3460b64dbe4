"""The operator contract of the ``taskhub`` command line (docs/protocol.md, "Operator
contract").

Commands run as real subprocesses (``python -m taskhub.cli``) in a scratch directory, with
``TASKHUB_DATABASE_URL`` pointing at a database of its own: a SQLite file, or a fresh
PostgreSQL database that is dropped afterwards. The ``users`` and ``tokens`` tests that run
many commands in a row call the CLI's ``main()`` in this process instead (``cli``: the same
parser, settings from the same environment, the same output and exit status, without a
Python start-up per command); what only a process shows (serve, signals, a traceback at
exit, nothing created) stays with subprocesses. Tokens printed by the CLI are checked against
the application, either in-process (ASGI) or against a ``taskhub serve`` on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import secrets
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from taskhub.cli import main
from taskhub.main import create_app
from taskhub.services import users
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.migrations import current_revision, head_revision
from tests.support.api import ApiClient, assert_problem
from tests.support.databases import (
    POSTGRES_URL,
    create_postgres_database,
    drop_postgres_database,
)
from tests.support.server import Backend, provisioned_database
from tests.support.waiting import eventually

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
COMMAND_TIMEOUT = 60.0
STARTUP_TIMEOUT = 60.0
SHUTDOWN_TIMEOUT = 20.0
GLOBAL_JOB = {"category": "modifiers", "name": "X", "schema": {}}
# The test server (it answers), a database it does not have.
NO_SUCH_DATABASE_URL = (
    make_url(POSTGRES_URL).set(database="taskhub_no_such_db").render_as_string(hide_password=False)
)


@dataclass
class Result:
    """A finished ``taskhub`` command."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def last_line(self) -> str:
        lines = self.stdout.strip().splitlines()
        return lines[-1].strip() if lines else ""

    def __str__(self) -> str:
        return (
            f"exit {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


@dataclass
class Server:
    """A ``taskhub serve`` process; output and exit status are filled in once it stopped."""

    process: asyncio.subprocess.Process
    port: int
    result: Result | None = field(default=None)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"


def cli_env(database_url: str, **settings: str) -> dict[str, str]:
    """Our environment without inherited ``TASKHUB_*`` settings, plus the given ones."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHUB_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["TASKHUB_DATABASE_URL"] = database_url
    env.update({f"TASKHUB_{name.upper()}": value for name, value in settings.items()})
    return env


async def taskhub(
    database_url: str,
    cwd: Path,
    *args: str,
    time_limit: float = COMMAND_TIMEOUT,
    stdin: str | None = None,
    **settings: str,
) -> Result:
    """Run ``taskhub ARGS…`` to completion (failing the test if it outlives ``time_limit``),
    with ``stdin`` as its input (none: an empty input)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "taskhub.cli",
        *args,
        cwd=cwd,
        env=cli_env(database_url, **settings),
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(
            process.communicate(None if stdin is None else stdin.encode()), time_limit
        )
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"`taskhub {' '.join(args)}` did not finish within {time_limit}s")
    assert process.returncode is not None
    return Result(process.returncode, stdout.decode(), stderr.decode())


# One ``cli`` call at a time: it swaps this process's environment and standard streams.
_IN_PROCESS = threading.Lock()


def _main_in_process(args: tuple[str, ...], env: dict[str, str], stdin: str | None) -> Result:
    """``main(args)`` with ``env``'s ``TASKHUB_*`` settings in place of ours and the standard
    streams captured; a ``SystemExit`` (argparse's usage errors) ends it as it would the
    process."""
    out, err = io.StringIO(), io.StringIO()
    saved = {key: value for key, value in os.environ.items() if key.startswith("TASKHUB_")}
    with _IN_PROCESS:
        for key in saved:
            del os.environ[key]
        os.environ.update({k: v for k, v in env.items() if k.startswith("TASKHUB_")})
        real_stdin = sys.stdin
        sys.stdin = io.StringIO(stdin or "")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    status = main(list(args))
                except SystemExit as exc:
                    if exc.code is None or isinstance(exc.code, int):
                        status = exc.code or 0
                    else:
                        print(exc.code, file=sys.stderr)
                        status = 1
        finally:
            sys.stdin = real_stdin
            for key in [key for key in os.environ if key.startswith("TASKHUB_")]:
                del os.environ[key]
            os.environ.update(saved)
    return Result(status, out.getvalue(), err.getvalue())


async def cli(database_url: str, *args: str, stdin: str | None = None, **settings: str) -> Result:
    """``taskhub ARGS…`` as ``taskhub`` would run it, but by its ``main()`` in this process
    (in a thread: the commands run event loops of their own)."""
    env = cli_env(database_url, **settings)
    return await asyncio.to_thread(_main_in_process, args, env, stdin)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def wait_until_healthy(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=2, trust_env=False) as client:

        async def healthy_or_exited() -> bool:
            if server.process.returncode is not None:
                return True  # exited during start-up; the caller reports its output
            try:
                return (await client.get("/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(
            healthy_or_exited, STARTUP_TIMEOUT, "taskhub serve to answer /healthz", 0.1
        )


async def stop(server: Server) -> Result:
    """SIGTERM, and insist that the server exits (SIGKILL and fail otherwise)."""
    process = server.process
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # (os.kill: see the test below)
            os.kill(process.pid, signal.SIGTERM)
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), SHUTDOWN_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"taskhub serve ignored SIGTERM for {SHUTDOWN_TIMEOUT}s")
    assert process.returncode is not None
    server.result = Result(process.returncode, stdout.decode(), stderr.decode())
    return server.result


async def start_serve(database_url: str, cwd: Path, **settings: str) -> Server:
    """``taskhub serve`` on a free port, once it answers /healthz or has exited."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "taskhub.cli",
        "serve",
        "--host",
        HOST,
        "--port",
        str(port),
        cwd=cwd,
        env=cli_env(database_url, **settings),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    server = Server(process, port)
    try:
        await wait_until_healthy(server)
    except BaseException:
        await stop(server)
        raise
    return server


@asynccontextmanager
async def serving(database_url: str, cwd: Path, **settings: str) -> AsyncIterator[Server]:
    """``taskhub serve`` on a free port, answering /healthz; stopped with SIGTERM on exit."""
    server = await start_serve(database_url, cwd, **settings)
    try:
        if server.process.returncode is not None:
            pytest.fail(f"taskhub serve exited during start-up:\n{await stop(server)}")
        yield server
    finally:
        if server.result is None:
            await stop(server)
    result = server.result
    # uvicorn shuts down gracefully, then re-raises the SIGTERM it caught.
    assert result.returncode in (0, -signal.SIGTERM), str(result)
    assert "Application shutdown complete" in result.stderr, str(result)


@asynccontextmanager
async def in_process_hub(database_url: str, **settings: str) -> AsyncIterator[httpx.AsyncClient]:
    """The application with its lifespan running, reached through ASGI."""
    app = create_app(Settings(database_url=database_url, **settings))  # type: ignore[arg-type]
    async with app.lifespan_context():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as http:
            yield http


async def app_tables(database_url: str) -> set[str]:
    db = Database(Settings(database_url=database_url))
    try:
        async with db.read() as conn:
            return set(
                await (await conn.sa()).run_sync(lambda sync: inspect(sync).get_table_names())
            )
    finally:
        await db.dispose()


def printed_token(result: Result) -> str:
    """The token a command printed on its last line."""
    assert result.returncode == 0, str(result)
    token = result.last_line
    assert token.startswith("th_") and " " not in token, str(result)
    return token


def assert_clean_failure(result: Result, *fragments: str) -> None:
    """Non-zero exit with a one-line explanation on stderr, not a traceback."""
    assert result.returncode != 0, str(result)
    for fragment in fragments:
        assert fragment in result.stderr, str(result)
    assert "Traceback" not in result.stderr, str(result)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def empty_url(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    """A database of its own for this test, with no schema yet."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
        return
    url = await create_postgres_database("taskhub_cli")
    try:
        yield url
    finally:
        await drop_postgres_database(url)


@pytest.fixture
def migrated_url(backend: Backend, tmp_path: Path) -> Iterator[str]:
    """A database of its own at this code's head: a copy of one that ``taskhub migrate``
    built once per test process."""
    with provisioned_database(backend, tmp_path, migrated=True) as url:
        yield url


async def test_migrate_brings_an_empty_database_to_this_codes_head(
    empty_url: str, tmp_path: Path
) -> None:
    result = await taskhub(empty_url, tmp_path, "migrate")
    assert result.returncode == 0, str(result)
    assert head_revision() in result.stdout
    db = Database(Settings(database_url=empty_url))
    try:
        assert await current_revision(db) == head_revision()
    finally:
        await db.dispose()
    again = await taskhub(empty_url, tmp_path, "migrate")
    assert again.returncode == 0, str(again)


async def test_users_create_prints_a_token_that_authenticates(migrated_url: str) -> None:
    """``users create NAME [--superuser]`` prints the new token on its last line; the token
    is a bearer token for the API, and only ``--superuser`` grants superuser rights."""
    alice = printed_token(await cli(migrated_url, "users", "create", "alice"))
    root = printed_token(await cli(migrated_url, "users", "create", "root", "--superuser"))
    assert alice != root

    async with in_process_hub(migrated_url) as http:
        for token in (alice, root):
            response = await ApiClient(http, token).get("/workers")
            assert response.status_code == 200, response.text
        wrong = await ApiClient(http, "th_" + secrets.token_urlsafe(32)).get("/workers")
        assert_problem(wrong, 401, "unauthorized")

        denied = await ApiClient(http, alice).put("/rooms/@global/jobs", json=GLOBAL_JOB)
        assert_problem(denied, 403, "forbidden")
        created = await ApiClient(http, root).put("/rooms/@global/jobs", json=GLOBAL_JOB)
        assert created.status_code == 201, created.text


async def test_tokens_create_issues_another_working_token(migrated_url: str) -> None:
    """``tokens create NAME`` adds a token (the first keeps working); an unknown user is a
    clean error."""
    first = printed_token(await cli(migrated_url, "users", "create", "alice"))
    second = printed_token(await cli(migrated_url, "tokens", "create", "alice"))
    assert second != first

    unknown = await cli(migrated_url, "tokens", "create", "nobody")
    assert_clean_failure(unknown, "nobody")
    assert "th_" not in unknown.stdout

    async with in_process_hub(migrated_url) as http:
        for token in (first, second):
            response = await ApiClient(http, token).get("/workers")
            assert response.status_code == 200, response.text


async def test_tokens_revoke_refuses_the_token_from_then_on(migrated_url: str) -> None:
    """``tokens revoke TOKEN`` (or ``-``, read from stdin) ends one token; ``--user NAME``
    all of a user's; other users' tokens keep working."""
    first = printed_token(await cli(migrated_url, "users", "create", "alice"))
    second = printed_token(await cli(migrated_url, "tokens", "create", "alice"))
    third = printed_token(await cli(migrated_url, "tokens", "create", "alice"))
    bob = printed_token(await cli(migrated_url, "users", "create", "bob"))

    revoked = await cli(migrated_url, "tokens", "revoke", first)
    assert revoked.returncode == 0, revoked
    from_stdin = await cli(migrated_url, "tokens", "revoke", "-", stdin=second + "\n")
    assert from_stdin.returncode == 0, from_stdin
    again = await cli(migrated_url, "tokens", "revoke", first)
    assert_clean_failure(again, "no such token")

    async with in_process_hub(migrated_url) as http:
        for token in (first, second):
            assert_problem(await ApiClient(http, token).get("/workers"), 401, "unauthorized")
        for token in (third, bob):
            assert (await ApiClient(http, token).get("/workers")).status_code == 200

    everything = await cli(migrated_url, "tokens", "revoke", "--user", "alice")
    assert everything.returncode == 0, everything
    assert "Revoked 1 token of 'alice'" in everything.stdout
    assert_clean_failure(await cli(migrated_url, "tokens", "revoke", "--user", "nobody"), "nobody")
    async with in_process_hub(migrated_url) as http:
        assert_problem(await ApiClient(http, third).get("/workers"), 401, "unauthorized")
        assert (await ApiClient(http, bob).get("/workers")).status_code == 200


async def test_users_list_shows_every_user_with_its_rights_and_token_count(
    migrated_url: str,
) -> None:
    printed_token(await cli(migrated_url, "users", "create", "bob"))
    printed_token(await cli(migrated_url, "users", "create", "alice", "--superuser"))
    printed_token(await cli(migrated_url, "tokens", "create", "alice"))
    listed = await cli(migrated_url, "users", "list")
    assert listed.returncode == 0, str(listed)
    header, *rows = [line.split() for line in listed.stdout.strip().splitlines()]
    assert header == ["NAME", "SUPERUSER", "TOKENS", "CREATED"]
    assert [row[:3] for row in rows] == [["alice", "yes", "2"], ["bob", "no", "1"]]
    for row in rows:
        assert datetime.fromisoformat(row[3]).utcoffset() is not None
    assert "th_" not in listed.stdout  # tokens are never shown again


async def test_users_update_grants_and_takes_away_superuser_rights(migrated_url: str) -> None:
    alice = printed_token(await cli(migrated_url, "users", "create", "alice"))
    granted = await cli(migrated_url, "users", "update", "alice", "--superuser")
    assert granted.returncode == 0 and "now a superuser" in granted.stdout, str(granted)
    async with in_process_hub(migrated_url) as http:
        created = await ApiClient(http, alice).put("/rooms/@global/jobs", json=GLOBAL_JOB)
        assert created.status_code == 201, created.text

    taken = await cli(migrated_url, "users", "update", "alice", "--no-superuser")
    assert taken.returncode == 0 and "no longer a superuser" in taken.stdout, str(taken)
    assert "no superuser is left" in taken.stderr, str(taken)
    async with in_process_hub(migrated_url) as http:
        denied = await ApiClient(http, alice).put("/rooms/@global/jobs", json=GLOBAL_JOB)
        assert_problem(denied, 403, "forbidden")
        me = await ApiClient(http, alice).get("/users/me")
        assert me.json()["is_superuser"] is False

    unknown = await cli(migrated_url, "users", "update", "nobody", "--superuser")
    assert_clean_failure(unknown, "nobody")
    unsaid = await cli(migrated_url, "users", "update", "alice")
    assert_clean_failure(unsaid, "--superuser")


async def test_users_create_refuses_a_taken_name(migrated_url: str) -> None:
    """Creating the same user twice fails the second time and says why."""
    printed_token(await cli(migrated_url, "users", "create", "alice"))
    again = await cli(migrated_url, "users", "create", "alice")
    assert_clean_failure(again, "alice", "already exists")
    assert "th_" not in again.stdout


async def test_users_create_on_an_empty_database_migrates_sqlite_and_refuses_postgres(
    empty_url: str, tmp_path: Path
) -> None:
    """As ``serve`` does: the embedded SQLite default migrates itself; PostgreSQL's schema
    is the operator's step, so the command says to run ``taskhub migrate``."""
    result = await taskhub(empty_url, tmp_path, "users", "create", "alice")
    if empty_url.startswith("sqlite"):
        printed_token(result)
    else:
        assert_clean_failure(result, "taskhub migrate")
        assert result.returncode == 2
        assert await app_tables(empty_url) == set()


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (f"postgresql+asyncpg://postgres@{HOST}:1/test", "Connect call failed"),  # nobody there
        pytest.param(NO_SUCH_DATABASE_URL, "does not exist", id="no-such-postgres-database"),
        ("sqlite+aiosqlite:////no/such/directory/taskhub.db", "unable to open database file"),
    ],
)
@pytest.mark.parametrize("command", [["migrate"], ["users", "create", "a"], ["serve"]])
async def test_an_unusable_database_is_one_line_not_a_traceback(
    tmp_path: Path, url: str, fragment: str, command: list[str]
) -> None:
    result = await taskhub(url, tmp_path, *command, time_limit=30)
    assert_clean_failure(result, "cannot use the database", fragment)
    assert result.returncode == 2


async def test_an_invalid_setting_is_named_not_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    result = await taskhub(url, tmp_path, "serve", log_format="xml")
    assert_clean_failure(result, "invalid settings", "TASKHUB_LOG_FORMAT")
    assert result.returncode == 2


@pytest.mark.parametrize(
    ("settings", "fragments"),
    [
        ({"log_level": "verbose"}, ("invalid settings", "TASKHUB_LOG_LEVEL")),
        (
            {"internal_job_modules": "no_such_module"},
            ("TASKHUB_INTERNAL_JOB_MODULES", "no_such_module"),
        ),
        (
            {"internal_job_modules": "json"},  # importable, but no JOBS list
            ("TASKHUB_INTERNAL_JOB_MODULES", "json"),
        ),
    ],
    ids=["unknown log level", "missing job module", "module without jobs"],
)
async def test_serve_refuses_settings_it_could_not_run_with_before_anything_is_created(
    tmp_path: Path, settings: dict[str, str], fragments: tuple[str, ...]
) -> None:
    """(Seen: a traceback after the admin token and the "listening" line.)"""
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    result = await taskhub(url, tmp_path, "serve", "--port", str(free_port()), **settings)
    assert_clean_failure(result, *fragments)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, str(result)
    assert result.stdout == "", str(result)
    assert await asyncio.to_thread(os.listdir, tmp_path) == [], "nothing is created"


async def test_the_log_level_may_be_written_in_capitals() -> None:
    assert Settings(log_level="DEBUG").log_level == "debug"


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("database_url", "postgresql://postgres:secret@127.0.0.1/taskhub"),  # psycopg2
        ("database_url", "mysql://127.0.0.1/taskhub"),
        ("database_url", "garbage"),
        ("database_url", "sqlite:///taskhub.db"),  # not an async driver
        ("redis_url", "notaurl"),
    ],
)
@pytest.mark.parametrize("command", [["migrate"], ["users", "create", "a"], ["serve"]])
async def test_an_unusable_url_is_one_line_naming_the_setting_and_the_accepted_forms(
    tmp_path: Path, setting: str, value: str, command: list[str]
) -> None:
    if setting == "database_url":
        result = await taskhub(value, tmp_path, *command, time_limit=30)
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
        result = await taskhub(url, tmp_path, *command, time_limit=30, **{setting: value})
    name = f"TASKHUB_{setting.upper()}"
    accepted = "postgresql+asyncpg://" if setting == "database_url" else "redis://"
    assert_clean_failure(result, "invalid settings", name, accepted)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, str(result)
    assert "secret" not in result.stderr
    assert await asyncio.to_thread(os.listdir, tmp_path) == [], "nothing is created"


async def test_serve_with_redis_unreachable_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    nobody = f"redis://{HOST}:{free_port()}/0"
    result = await taskhub(url, tmp_path, "serve", "--port", str(free_port()), redis_url=nobody)
    assert_clean_failure(result, "cannot reach Redis at", nobody)
    assert result.returncode == 2
    assert "listening" not in result.stdout


async def test_serve_on_a_port_in_use_is_one_line_before_anything_is_created(
    tmp_path: Path,
) -> None:
    """The port is checked first: no "listening" line, no admin token, no database file."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = await taskhub(url, tmp_path, "serve", "--host", HOST, "--port", str(port))
    assert_clean_failure(result, f"cannot listen on {HOST}:{port}", "in use")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, str(result)
    assert result.stdout == "", str(result)
    assert await asyncio.to_thread(os.listdir, tmp_path) == [], "nothing is created"


@pytest.mark.parametrize(
    ("arguments", "settings", "fragment"),
    [
        (["--port", "99999"], {}, "must be 1 to 65535"),
        (["--port", "0"], {}, "must be 1 to 65535"),
        (["--port", "http"], {}, "not a port number"),
        ([], {"port": "99999"}, "TASKHUB_PORT"),
        ([], {"port": "-1"}, "TASKHUB_PORT"),
    ],
)
async def test_serve_refuses_a_port_that_is_not_one(
    tmp_path: Path, arguments: list[str], settings: dict[str, str], fragment: str
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    result = await taskhub(url, tmp_path, "serve", *arguments, **settings)
    assert_clean_failure(result, fragment)
    assert result.returncode == 2
    assert result.stdout == "", str(result)
    assert await asyncio.to_thread(os.listdir, tmp_path) == [], "nothing is created"


async def test_stop_signals_repeated_by_a_supervisor_still_end_with_status_0(
    tmp_path: Path,
) -> None:
    """After the graceful stop, the process lives on briefly while it exits: a SIGTERM
    then must not turn the clean stop into status 143."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    async with serving(url, tmp_path) as server:
        process = server.process
        while process.returncode is None:
            # os.kill, not process.send_signal: that polls (waitpid) the child first and
            # may reap it under asyncio's child watcher, which then reports status 255
            # ("Unknown child process").
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 0.02)
        server.result = await stop(server)
    assert server.result.returncode == 0, str(server.result)


async def test_serve_on_postgres_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    """On PostgreSQL ``serve`` neither migrates nor starts on an outdated schema: it exits
    at once telling the operator to run ``taskhub migrate``; after that it starts."""
    url = await create_postgres_database("taskhub_cli_serve")
    try:
        port = str(free_port())
        refused = await taskhub(url, tmp_path, "serve", "--port", port, time_limit=20)
        assert_clean_failure(refused, "taskhub migrate")
        assert await app_tables(url) == set()

        migrated = await taskhub(url, tmp_path, "migrate")
        assert migrated.returncode == 0, str(migrated)
        async with serving(url, tmp_path) as server, httpx.AsyncClient(trust_env=False) as http:
            response = await http.get(f"{server.base_url}/healthz", timeout=5)
            assert response.status_code == 200
    finally:
        await drop_postgres_database(url)


async def stamp_revision(database_url: str, revision: str) -> None:
    """Mark the database as migrated to ``revision`` (as a newer Taskhub would have)."""
    db = Database(Settings(database_url=database_url))
    try:
        async with db.engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    finally:
        await db.dispose()


@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["users", "create", "alice"]])
async def test_a_database_migrated_by_a_newer_taskhub_is_one_line_asking_to_upgrade(
    migrated_url: str, tmp_path: Path, command: list[str]
) -> None:
    """A revision this code does not know (``9999``, say) was written by a newer Taskhub:
    ``taskhub migrate`` cannot help (only the newer code knows that revision), so every
    command says to upgrade Taskhub, on both engines, and leaves the database as it was."""
    await stamp_revision(migrated_url, "9999")
    extra = ["--port", str(free_port())] if command == ["serve"] else []
    result = await taskhub(migrated_url, tmp_path, *command, *extra, time_limit=30)
    assert_clean_failure(result, "migrated by a newer Taskhub", "9999", "upgrade Taskhub")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, str(result)
    assert "taskhub migrate" not in result.stderr
    assert "listening" not in result.stdout and "th_" not in result.stdout, str(result)
    db = Database(Settings(database_url=migrated_url))
    try:
        assert await current_revision(db) == "9999"
    finally:
        await db.dispose()


async def test_serve_on_a_fresh_sqlite_file_migrates_and_creates_an_admin(
    tmp_path: Path,
) -> None:
    """The embedded default looks after itself: the first ``serve`` migrates the file, says
    where it listens and prints an admin token once; a restart keeps that admin."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"

    async with serving(url, tmp_path) as first, httpx.AsyncClient(trust_env=False) as http:
        assert (await http.get(f"{first.base_url}/healthz", timeout=5)).status_code == 200
    assert first.result is not None
    assert f"http://{HOST}:{first.port}/" in first.result.stdout, str(first.result)
    admin_lines = [line for line in first.result.stdout.splitlines() if "admin token" in line]
    assert len(admin_lines) == 1, str(first.result)
    admin = admin_lines[0].split()[-1]
    assert admin.startswith("th_"), admin_lines

    async with serving(url, tmp_path) as second, httpx.AsyncClient(trust_env=False) as http:
        headers = {"Authorization": f"Bearer {admin}"}
        response = await http.put(
            f"{second.base_url}/v1/joblib/rooms/@global/jobs",
            json=GLOBAL_JOB,
            headers=headers,
            timeout=5,
        )
        assert response.status_code == 201, response.text
    assert second.result is not None
    assert f"http://{HOST}:{second.port}/" in second.result.stdout, str(second.result)
    assert "admin token" not in second.result.stdout, str(second.result)
    assert "th_" not in second.result.stdout, str(second.result)


async def test_a_second_serve_on_the_same_sqlite_file_is_refused_while_the_first_runs(
    tmp_path: Path,
) -> None:
    """SQLite serves from one process: a second ``serve`` on the same file (another port,
    another terminal) is one line and status 2, before it prints or creates anything; the
    first serves on, and the other commands still work beside it. (Seen: the second one
    served, with a sweeper of its own, deaf to the first's wake-ups and sockets.) The lock
    goes with its holder, even one killed outright: then a new ``serve`` starts (after a
    graceful stop too: the restart in the test above)."""
    database = tmp_path / "taskhub.db"
    url = f"sqlite+aiosqlite:///{database}"
    first = await start_serve(url, tmp_path)
    try:
        assert first.process.returncode is None, str(await stop(first))
        second = await start_serve(url, tmp_path)
        if second.process.returncode is None:
            await stop(second)
            pytest.fail("a second taskhub serve on the same SQLite file answered /healthz")
        refused = await stop(second)
        assert_clean_failure(refused, "another taskhub serve", f"is using {database.resolve()}")
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1, str(refused)
        assert refused.stdout == "", str(refused)

        async with httpx.AsyncClient(base_url=first.base_url, trust_env=False, timeout=5) as http:
            assert (await http.get("/healthz")).status_code == 200
            alice = printed_token(await taskhub(url, tmp_path, "users", "create", "alice"))
            response = await http.get(
                "/v1/joblib/workers", headers={"Authorization": f"Bearer {alice}"}
            )
            assert response.status_code == 200, response.text
    finally:
        with contextlib.suppress(ProcessLookupError):  # (os.kill: see the test below)
            os.kill(first.process.pid, signal.SIGKILL)  # no clean-up of its own runs
        await first.process.communicate()

    async with serving(url, tmp_path) as after_a_kill:
        assert after_a_kill.process.returncode is None


async def test_serve_makes_the_configured_admin_token_a_superuser(tmp_path: Path) -> None:
    """With ``TASKHUB_ADMIN_TOKEN`` set, ``serve`` prints no generated token and the
    configured one may register ``@global`` jobs."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'admin.db'}"
    admin = "th_" + secrets.token_urlsafe(32)

    async with (
        serving(url, tmp_path, admin_token=admin) as server,
        httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=5) as http,
    ):
        anonymous = await http.put("/v1/joblib/rooms/@global/jobs", json=GLOBAL_JOB)
        assert anonymous.status_code == 401, anonymous.text
        response = await http.put(
            "/v1/joblib/rooms/@global/jobs",
            json=GLOBAL_JOB,
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert response.status_code == 201, response.text
    assert server.result is not None
    assert "admin token" not in server.result.stdout, str(server.result)
    assert admin not in server.result.stdout + server.result.stderr


async def test_app_lifespan_makes_the_configured_admin_token_a_superuser(
    migrated_url: str,
) -> None:
    """``create_app`` honours ``TASKHUB_ADMIN_TOKEN`` too (on both backends), and doing so
    again at the next start-up is harmless."""
    admin = "th_" + secrets.token_urlsafe(32)
    for name in ("X", "Y"):
        async with in_process_hub(migrated_url, admin_token=admin) as http:
            response = await ApiClient(http, admin).put(
                "/rooms/@global/jobs", json={**GLOBAL_JOB, "name": name}
            )
            assert response.status_code == 201, response.text


async def test_help_is_plain_text_and_serve_names_its_defaults(tmp_path: Path) -> None:
    """``--help`` shows no reStructuredText markup; ``serve --help`` names the variable and
    the default behind each option."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    top = await taskhub(url, tmp_path, "--help")
    assert top.returncode == 0, str(top)
    assert "``" not in top.stdout and "taskhub" in top.stdout.lower(), str(top)
    serve = await taskhub(url, tmp_path, "serve", "--help")
    assert serve.returncode == 0, str(serve)
    text = " ".join(serve.stdout.split())
    for fragment in ("TASKHUB_HOST, else 127.0.0.1", "TASKHUB_PORT, else 8000", "TASKHUB_WORKERS"):
        assert fragment in text, str(serve)


@pytest.mark.parametrize("name", ["", "  ", "\t", " alice", "alice "])
async def test_users_create_refuses_a_blank_or_padded_name(migrated_url: str, name: str) -> None:
    result = await cli(migrated_url, "users", "create", name)
    assert_clean_failure(result, "user name")
    assert result.returncode == 2
    assert "th_" not in result.stdout
    db = Database(Settings(database_url=migrated_url))
    try:
        assert await users.count_users(db) == 0
    finally:
        await db.dispose()
