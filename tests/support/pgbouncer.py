"""A private PgBouncer in transaction pooling mode, in front of the test PostgreSQL.

``with PgBouncer() as bouncer: url = bouncer.url(database_url)`` starts ``pgbouncer``
(Debian's 1.18: no prepared statement support, so a named prepared statement reused on
another server connection fails with "prepared statement … does not exist") on a free port
of 127.0.0.1, with its config, log and auth file in a directory of its own (removed after;
run as root, it runs as ``nobody``: PgBouncer refuses to run as root), pointing at
the server of ``TASKHUB_TEST_POSTGRES_URL`` (every database on it, under the same name);
``url`` turns a direct database URL into one through the bouncer. ``default_pool_size``
server connections per database and user (2 by default: few, so that many clients share
them). Stopped (SIGTERM, then SIGKILL) on exit. A missing ``pgbouncer`` binary is an
error, never a skip. Used with ``TASKHUB_DATABASE_POOLER=transaction``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from sqlalchemy.engine import make_url

from tests.support.databases import POSTGRES_URL
from tests.support.processes import terminate
from tests.support.server import HOST, ServerError, free_port

PGBOUNCER = "/usr/sbin/pgbouncer"


def pgbouncer_binary() -> str:
    """The ``pgbouncer`` program (``dev.d/test-packages.sh`` installs it)."""
    found = shutil.which("pgbouncer") or (PGBOUNCER if Path(PGBOUNCER).exists() else None)
    if found is None:
        raise ServerError("pgbouncer is not installed (dev.d/test-packages.sh installs it)")
    return found


class PgBouncer:
    """``pgbouncer`` in transaction mode on a free port; a context manager."""

    def __init__(self, *, default_pool_size: int = 2, max_client_conn: int = 1000) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="taskhub-pgbouncer-"))
        self.default_pool_size = default_pool_size
        self.max_client_conn = max_client_conn
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.directory / "pgbouncer.log"

    def url(self, database_url: str) -> str:
        """``database_url`` (a database on the test PostgreSQL) through this bouncer."""
        return (
            make_url(database_url)
            .set(host=HOST, port=self.port)
            .render_as_string(hide_password=False)
        )

    def _write_config(self) -> Path:
        server = make_url(POSTGRES_URL)
        user = server.username or "postgres"
        password = server.password or ""
        target = f"host={server.host or HOST} port={server.port or 5432}"
        if password:
            target += f" password={password}"
        (self.directory / "users.txt").write_text(f'"{user}" "{password}"\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = {target}",
                    "[pgbouncer]",
                    f"listen_addr = {HOST}",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",  # none: nothing shared with a system PgBouncer
                    "auth_type = trust",  # (the user must still be in the auth file)
                    f"auth_file = {self.directory / 'users.txt'}",
                    f"admin_users = {user}",
                    "pool_mode = transaction",
                    f"default_pool_size = {self.default_pool_size}",
                    "min_pool_size = 0",
                    "reserve_pool_size = 0",
                    f"max_client_conn = {self.max_client_conn}",
                    "server_reset_query =",
                    f"logfile = {self.log_path}",
                    "",
                ]
            )
        )
        return config

    def start(self, startup_timeout: float = 20.0) -> PgBouncer:
        binary = pgbouncer_binary()
        as_user: list[str] = []
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.directory, nobody.pw_uid, nobody.pw_gid)
            as_user = ["-u", "nobody"]
        for attempt in range(3):
            self.port = free_port()
            config = self._write_config()
            self.process = subprocess.Popen(
                [binary, *as_user, str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + startup_timeout
            while not self._listening():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            else:
                return self
            self.stop()
            if attempt == 2:
                raise ServerError(f"pgbouncer did not start:\n{self.output()}")
        raise AssertionError("unreachable")  # pragma: no cover

    def _listening(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (it closes its server connections), then SIGKILL."""
        process, self.process = self.process, None
        terminate(process, timeout)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
