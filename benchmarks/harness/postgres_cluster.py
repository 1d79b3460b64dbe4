"""A throwaway PostgreSQL cluster: ``initdb`` in a directory of its own, one server on
127.0.0.1 and a port free when it starts (TCP only: no Unix socket), stopped at the end.
Used by ``./dev test`` (``dev.d/services.py``), the database faults of the chaos scenario
and the callgrind count of PostgreSQL's side (``benchmarks.harness.callgrind``).

Standard library only, and importing nothing of the package: ``dev.d/services.py`` loads
this file by its path, before anything is installed.

initdb and postgres refuse to run as root: under root they run as the ``postgres`` system
user, and the cluster's directory is handed to it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
SERVER_USER = "postgres"  # who runs PostgreSQL when this runs as root
START_ATTEMPTS = 3  # a port free when chosen may be taken before the server binds it
# ``pg_ctl stop -m MODE`` sends the postmaster these.
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


class ClusterError(RuntimeError):
    """The cluster could not be made, started or stopped."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def postgres_bindir() -> Path:
    """The installed PostgreSQL server's programs: the newest of Debian's
    ``/usr/lib/postgresql/*/bin``, else ``pg_config --bindir``."""
    found = sorted(
        (path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")),
        key=lambda bindir: int(bindir.parent.name) if bindir.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    try:
        done = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise ClusterError(
            "no PostgreSQL server in /usr/lib/postgresql/*/bin nor from pg_config --bindir "
            "(apt-get install postgresql)"
        ) from None
    return Path(done.stdout.strip())


def server_user_options() -> dict[str, Any]:
    """``subprocess`` options that run a PostgreSQL program as ``postgres`` when this runs
    as root (nothing otherwise)."""
    if os.geteuid() != 0:
        return {}
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise ClusterError(
            f"PostgreSQL will not run as root and there is no {SERVER_USER!r} user to run it"
        ) from None
    env = {**os.environ, "HOME": user.pw_dir, "USER": SERVER_USER, "LOGNAME": SERVER_USER}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "env": env}


def hand_to_server_user(*paths: Path) -> None:
    """Under root, give ``paths`` to the ``postgres`` user (the server writes there)."""
    if os.geteuid() == 0:
        user = pwd.getpwnam(SERVER_USER)
        for path in paths:
            os.chown(path, user.pw_uid, user.pw_gid)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class PostgresCluster:
    """One cluster in ``data`` (which must not exist yet; its parent must be reachable by
    the server's user), its server's output appended to ``log_path``.

    ``settings``: ``-c name=value`` options of the server. ``wrapper``: a command the
    server runs under (``valgrind …``; it must run the postmaster in its own process).
    ``spawn_options``: more ``subprocess.Popen`` options of the server's process (say a
    ``preexec_fn``). The server is a child of this process, in a session of its own (a
    Ctrl-C in the terminal does not reach it: whoever started it stops it)."""

    def __init__(
        self,
        data: Path,
        log_path: Path,
        *,
        settings: Mapping[str, str] | None = None,
        wrapper: Sequence[str] = (),
        spawn_options: Mapping[str, Any] | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.data = data
        self.log_path = log_path
        self.settings = dict(settings or {})
        self.wrapper = list(wrapper)
        self.spawn_options = dict(spawn_options or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.bindir = postgres_bindir()
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while it runs."""
        return None if self.process is None or self.process.poll() is not None else self.process.pid

    def url(self, database: str = "postgres", scheme: str = "postgresql") -> str:
        """A URL of ``database`` as the superuser ``postgres`` (``scheme``
        ``postgresql+asyncpg`` for SQLAlchemy)."""
        return f"{scheme}://{SERVER_USER}@{HOST}:{self.port}/{database}"

    def init(self) -> PostgresCluster:
        """``initdb``: trust authentication, superuser ``postgres``, UTF-8, no fsync."""
        initdb = [str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust"]
        initdb += ["-U", SERVER_USER, "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]
        with self.log_path.open("ab") as out:
            done = subprocess.run(
                initdb,
                cwd=self.data.parent,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
                **server_user_options(),
            )
        if done.returncode != 0:
            raise ClusterError(f"initdb failed: {_tail(self.log_path)}")
        return self

    def start(self) -> PostgresCluster:
        """Start the server and wait until it answers: on a free port, or (started before)
        on its port again, as a restart does."""
        pinned = self.port != 0
        for _ in range(1 if pinned else START_ATTEMPTS):
            self.port = self.port if pinned else free_port()
            self._spawn()
            if self._wait_ready():
                return self
        raise ClusterError(f"PostgreSQL did not start: {_tail(self.log_path)}")

    def _spawn(self) -> None:
        argv = [*self.wrapper, str(self.bindir / "postgres"), "-D", str(self.data)]
        argv += ["-h", HOST, "-p", str(self.port), "-k", ""]
        for name, value in self.settings.items():
            argv += ["-c", f"{name}={value}"]
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                argv,
                cwd=self.data.parent,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **{**server_user_options(), **self.spawn_options},
            )

    def _answers(self) -> bool:
        ready = [str(self.bindir / "pg_isready"), "-q", "-h", HOST, "-p", str(self.port)]
        return subprocess.run(ready, check=False).returncode == 0

    def _wait_ready(self) -> bool:
        """True once the server answers; False if it exits first (its port was taken)."""
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        while not self._answers():
            if self.process.poll() is not None:
                return False
            if time.monotonic() > deadline:
                self.stop("immediate")
                raise ClusterError(f"PostgreSQL did not answer: {_tail(self.log_path)}")
            time.sleep(0.2)
        return True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server as ``pg_ctl stop -m mode`` would; SIGKILL if it is still there
        after ``stop_timeout``."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(STOP_SIGNALS[mode])
        try:
            process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self, mode: str) -> None:
        """``pg_ctl restart -m mode``: stopped, then started again on the same port."""
        self.stop(mode)
        self.start()

    def create_database(self, name: str) -> None:
        createdb = [str(self.bindir / "createdb"), "-h", HOST, "-p", str(self.port)]
        createdb += ["-U", SERVER_USER, name]
        done = subprocess.run(createdb, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ClusterError(f"createdb {name} failed: {done.stderr.strip()}")


@contextlib.contextmanager
def throwaway_cluster(root: Path, **options: Any) -> Iterator[PostgresCluster]:
    """A started cluster in ``root`` (a new directory, handed to the server's user; the
    data in ``root/data``, the server's output in ``root/postgres.log``), with the
    ``PostgresCluster`` ``options``; stopped, and ``root`` removed, after."""
    try:
        hand_to_server_user(root)
        cluster = PostgresCluster(root / "data", root / "postgres.log", **options)
        try:
            yield cluster.init().start()
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
