"""A private HAProxy in front of hub replicas, as production puts one.

``with Balancer([server.port for server in servers]) as balancer:`` starts ``haproxy`` on
a free port of 127.0.0.1 with its config (and admin socket) in a directory of its own:
requests go round-robin to replicas ``r0``, ``r1``, … that answer ``GET /readyz`` (checked
every 0.5 s); a response sets the cookie ``taskhub_replica`` naming its replica, and a
request that carries it goes there (stickiness: Engine.IO's polling transport needs every
request of a session on one replica; a websocket is one tunnel, kept for an hour).

- ``balancer.base_url`` (``http://127.0.0.1:<port>``) and ``balancer.url_on(host)``:
  browsers (Playwright) keep the cookie; aiohttp's cookie jar (Taskhub's SDK) drops
  cookies of an IP address, so give it ``url_on("localhost")``, as production gives it a
  host name; the test clients with websocket-only sockets need no cookie.
- ``balancer.pin(i)``: the ``Cookie`` header that sends a request to replica ``i``
  (``SocketProbe.connect(..., headers=...)``, ``httpx``'s ``headers=``), and
  ``pin_cookie(i)`` the same for Playwright's ``context.add_cookies``.
- ``balancer.servers()``: each replica's state as HAProxy sees it (``"UP"``, ``"DOWN"``…);
  ``start`` waits until all are ``UP``.

Stopped (SIGTERM, then SIGKILL) and its directory removed on exit. A missing ``haproxy``
binary is an error, never a skip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks.harness.servers import HOST, ServerError, free_port, terminate

HAPROXY = "/usr/sbin/haproxy"
COOKIE = "taskhub_replica"


def haproxy_binary() -> str:
    """The ``haproxy`` program (``dev.d/test-packages.sh`` installs it)."""
    found = shutil.which("haproxy") or (HAPROXY if Path(HAPROXY).exists() else None)
    if found is None:
        raise ServerError("haproxy is not installed (dev.d/test-packages.sh installs it)")
    return found


class Balancer:
    """``haproxy`` on a free port, sticky by cookie, in front of replicas on ``ports``."""

    def __init__(self, ports: Sequence[int], *, health_path: str = "/readyz") -> None:
        self.ports = list(ports)
        self.health_path = health_path
        self.directory = Path(tempfile.mkdtemp(prefix="taskhub-haproxy-"))
        self.admin_socket = self.directory / "admin.sock"
        self.log_path = self.directory / "haproxy.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return self.url_on(HOST)

    def url_on(self, host: str) -> str:
        """The balancer's URL under another name of 127.0.0.1 (``localhost``)."""
        return f"http://{host}:{self.port}"

    @staticmethod
    def replica(index: int) -> str:
        return f"r{index}"

    def pin(self, index: int) -> dict[str, str]:
        """Headers that send a request (or a socket's handshake) to replica ``index``."""
        return {"Cookie": f"{COOKIE}={self.replica(index)}"}

    def pin_cookie(self, index: int) -> dict[str, Any]:
        """A cookie for Playwright's ``BrowserContext.add_cookies``: to replica ``index``."""
        return {"name": COOKIE, "value": self.replica(index), "url": self.base_url}

    def _config(self) -> str:
        servers = [
            f"    server {self.replica(i)} {HOST}:{port} cookie {self.replica(i)} check"
            for i, port in enumerate(self.ports)
        ]
        return "\n".join(
            [
                "global",
                "    maxconn 4096",
                f"    stats socket {self.admin_socket} mode 600 level admin",
                "defaults",
                "    mode http",
                "    timeout connect 5s",
                "    timeout client 90s",
                "    timeout server 90s",  # past a long-poll's longest wait (60 s)
                "    timeout tunnel 1h",  # a websocket, once upgraded
                "    timeout http-keep-alive 10s",
                "frontend hub",
                f"    bind {HOST}:{self.port}",
                "    default_backend replicas",
                "backend replicas",
                "    balance roundrobin",
                f"    cookie {COOKIE} insert indirect nocache httponly",
                "    option httpchk",
                f"    http-check send meth GET uri {self.health_path}",
                "    http-check expect status 200",
                "    default-server inter 500ms fastinter 200ms fall 2 rise 1",
                *servers,
                "",
            ]
        )

    def start(self, startup_timeout: float = 30.0) -> Balancer:
        binary = haproxy_binary()
        for attempt in range(3):
            self.port = free_port()
            config = self.directory / "haproxy.cfg"
            config.write_text(self._config())
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    [binary, "-db", "-f", str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + startup_timeout
            while not self._all_up():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            else:
                return self
            self.stop()
            taken = "cannot bind" in self.output().lower()
            if not taken or attempt == 2:
                raise ServerError(f"haproxy did not start:\n{self.output()}\n{self.servers()}")
        raise AssertionError("unreachable")  # pragma: no cover

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _admin(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5.0)
            sock.connect(str(self.admin_socket))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def servers(self) -> dict[str, str]:
        """Each replica's state in HAProxy (``UP``, ``DOWN``, ``UP 1/2``…); empty while
        HAProxy is not answering."""
        try:
            lines = self._admin("show stat").splitlines()
        except OSError:
            return {}
        if not lines:
            return {}
        header = lines[0].lstrip("# ").split(",")
        name, state = header.index("svname"), header.index("status")
        states = {}
        for line in lines[1:]:
            fields = line.split(",")
            if len(fields) > state and fields[0] == "replicas" and fields[name].startswith("r"):
                states[fields[name]] = fields[state]
        return states

    def _all_up(self) -> bool:
        states = self.servers()
        return len(states) == len(self.ports) and all(s == "UP" for s in states.values())

    def stop(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        terminate(process, timeout)

    def __enter__(self) -> Balancer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
