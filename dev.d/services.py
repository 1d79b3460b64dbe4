"""Throwaway PostgreSQL and Redis for ``./dev test``.

``python dev.d/services.py COMMAND [ARG...]`` runs COMMAND (pytest) with
``TASKHUB_TEST_POSTGRES_URL`` and ``TASKHUB_TEST_REDIS_URL`` set, and exits with its status.
A URL the environment already sets (non-empty) is kept: the developer's own service. For each
one it does not, a private instance is started from the installed binaries, in a temporary
directory, on 127.0.0.1 and a port free at run time:

* PostgreSQL: a cluster made by ``initdb`` (trust authentication, superuser ``postgres``, a
  database ``test``), ``max_connections=300`` for the suite's three processes and their pools,
  no autovacuum (as the system cluster the suite grew up on: the plan tests ANALYZE themselves)
  and no fsync (nothing outlives the run). initdb and postgres refuse to run as root: under
  root they run as the ``postgres`` system user.
* Redis: ``redis-server`` without persistence.

When COMMAND ends (passed, failed, Ctrl-C, SIGTERM or SIGHUP), both are stopped and their
directory removed. The servers sit in sessions of their own, so a Ctrl-C reaches pytest
(which tears down, still using them) and not them; they get a signal if this script dies
without cleaning up (SIGKILL), and a later run removes what such a run left behind.
Standard library only: it runs before anything is installed."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

HOST = "127.0.0.1"
POSTGRES_URL_VAR = "TASKHUB_TEST_POSTGRES_URL"
REDIS_URL_VAR = "TASKHUB_TEST_REDIS_URL"
PREFIX = "taskhub-test-services-"
SERVER_USER = "postgres"  # who runs PostgreSQL when this script runs as root
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
START_ATTEMPTS = 3  # a port free when chosen may be taken before the server binds it
POSTGRES_SETTINGS = {
    "max_connections": "300",
    "autovacuum": "off",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "timezone": "Etc/UTC",
    "log_timezone": "Etc/UTC",
}


class ServiceError(RuntimeError):
    """A service could not be started."""


def log(message: str) -> None:
    print(f"[services] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``sig`` to the child when this script dies
    (Linux's PR_SET_PDEATHSIG), so a killed run leaves no server behind."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Server:
    """One server process started by this script (a direct child: signals reach it)."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def spawn(self, argv: list[str], stop_signal: signal.Signals, **options: object) -> None:
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(stop_signal),
                **options,
            )

    def wait_ready(self, ready: Callable[[], bool]) -> bool:
        """True once ``ready()`` is; False if the process exits first."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not ready():
            if self.process.poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.name} did not start: {_tail(self.log_path)}")
            time.sleep(0.1)
        return True

    def stop(self, stop_signal: signal.Signals) -> None:
        """``stop_signal``, then SIGKILL if it is still there after a while."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(stop_signal)
        try:
            self.process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            log(f"{self.name} did not stop in {STOP_TIMEOUT_SECONDS:.0f} s: killing it")
            self.process.kill()
            self.process.wait()


def _postgres_cluster() -> ModuleType:
    """``benchmarks/harness/postgres_cluster.py``, the throwaway cluster the benchmarks use
    too, loaded by its path (standard library only, as this script)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "harness" / "postgres_cluster.py"
    spec = importlib.util.spec_from_file_location("_dev_postgres_cluster", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def start_postgres(root: Path) -> tuple[Server, str]:
    clusters = _postgres_cluster()
    server = Server("PostgreSQL", root / "postgres.log")
    try:
        cluster = clusters.PostgresCluster(
            root / "postgres",
            server.log_path,
            settings=POSTGRES_SETTINGS,
            spawn_options={"preexec_fn": _die_with_parent(signal.SIGINT)},  # SIGINT: fast
            start_timeout=START_TIMEOUT_SECONDS,
            stop_timeout=STOP_TIMEOUT_SECONDS,
        )
    except clusters.ClusterError as exc:
        raise ServiceError(str(exc)) from None
    try:
        cluster.init().start()
        server.process, server.port = cluster.process, cluster.port
        (root / "postgres.pid").write_text(str(cluster.pid))
        cluster.create_database("test")
    except clusters.ClusterError as exc:
        cluster.stop()
        raise ServiceError(str(exc)) from None
    return server, cluster.url("test", "postgresql+asyncpg")


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(root: Path) -> tuple[Server, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceError("redis-server is not installed (apt-get install redis-server)")
    directory = root / "redis"
    directory.mkdir()
    server = Server("Redis", root / "redis.log")
    for _ in range(START_ATTEMPTS):
        server.port = free_port()
        server.spawn(
            [
                *(binary, "--port", str(server.port), "--bind", HOST),
                *("--save", "", "--appendonly", "no", "--daemonize", "no"),
                *("--dir", str(directory)),
            ],
            signal.SIGTERM,
            cwd=directory,
        )
        (root / "redis.pid").write_text(str(server.process.pid))
        if server.wait_ready(functools.partial(_redis_answers, server.port)):
            break
    else:
        raise ServiceError(f"redis-server did not start: {_tail(server.log_path)}")
    return server, f"redis://{HOST}:{server.port}/0"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def remove_leftovers() -> None:
    """Directories (and servers, should any still run) of earlier runs that died without
    cleaning up: their ``owner`` process is gone."""
    for root in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        owner = _read_pid(root / "owner")
        if owner is None or _alive(owner):
            continue  # being set up, or still in use
        for name, command in (("postgres.pid", "postgres"), ("redis.pid", "redis-server")):
            pid = _read_pid(root / name)
            with contextlib.suppress(OSError):
                if pid is not None and Path(f"/proc/{pid}/comm").read_text().strip() == command:
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def services() -> Iterator[dict[str, str]]:
    """The two URLs for the tests: the developer's, else of servers started here (stopped
    and removed when the block ends)."""
    urls = {var: os.environ.get(var, "") for var in (POSTGRES_URL_VAR, REDIS_URL_VAR)}
    wanted = [var for var, url in urls.items() if not url]
    for var, url in urls.items():
        if url:
            log(f"{var}={url} (yours: not started here)")
    if not wanted:
        yield urls
        return
    remove_leftovers()
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    (root / "owner").write_text(str(os.getpid()))
    started: list[tuple[Server, signal.Signals]] = []
    try:
        if os.geteuid() == 0:  # PostgreSQL runs as postgres: let it work in the directory
            user = pwd.getpwnam(SERVER_USER) if POSTGRES_URL_VAR in wanted else None
            if user is not None:
                os.chown(root, user.pw_uid, user.pw_gid)
        if POSTGRES_URL_VAR in wanted:
            server, urls[POSTGRES_URL_VAR] = start_postgres(root)
            started.append((server, signal.SIGINT))
        if REDIS_URL_VAR in wanted:
            server, urls[REDIS_URL_VAR] = start_redis(root)
            started.append((server, signal.SIGTERM))
        for var in wanted:
            log(f"{var}={urls[var]} (throwaway, in {root})")
        yield urls
    finally:
        for server, stop_signal in reversed(started):
            server.stop(stop_signal)
        shutil.rmtree(root, ignore_errors=True)


def _in_terminal_foreground() -> bool:
    """Whether a Ctrl-C typed in this script's terminal goes to its process group (which the
    command shares)."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            return os.tcgetpgrp(fd) == os.getpgrp()
    return False


def run(argv: list[str], env: dict[str, str]) -> int:
    """Run the command in this process group (a Ctrl-C in the terminal reaches it directly,
    and it tears down before the services go); SIGTERM, SIGHUP and (not from that terminal)
    SIGINT sent here are passed on to it. Its exit status, 128 + N if signal N
    ended it."""
    process: subprocess.Popen[bytes] | None = None

    def pass_on(signum: int, _frame: object) -> None:
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    def interrupt(signum: int, frame: object) -> None:
        if not _in_terminal_foreground():  # else the terminal's Ctrl-C reached it already
            pass_on(signum, frame)

    # Handlers, not SIG_IGN (which the command would inherit): this script waits for it.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, pass_on)
    signal.signal(signal.SIGHUP, pass_on)
    try:
        process = subprocess.Popen(argv, env=env)
        returncode = process.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # nothing interrupts the clean-up
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str]) -> int:
    if not argv:
        print(f"usage: {sys.argv[0]} COMMAND [ARG...]", file=sys.stderr)
        return 2

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # interrupted while starting: clean up, then exit

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        with services() as urls:
            return run(argv, {**os.environ, **urls})
    except ServiceError as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
