"""The throughput benchmark's CPU readings (Linux ``/proc``): a process's own time, and a
server's whole tree — the children it has reaped and those still running — which is how
PostgreSQL's backends are counted."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.harness.cpu import proc_stat, process_cpu_seconds, server_cpu_seconds
from benchmarks.harness.targets import pg_server_pid
from tests.support.databases import POSTGRES_URL

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass"


def spawn_parent(child_code: str, then: str = "") -> subprocess.Popen[bytes]:
    """A parent process that runs ``child_code`` in a child, waits for it, then ``then``."""
    code = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {child_code!r}], check=True)\n"
        f"{then}"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


def test_a_server_counts_the_children_it_has_reaped() -> None:
    parent = spawn_parent(BURN.format(seconds=0.4), then="sys.stdin.read()")
    try:
        deadline = time.monotonic() + 30
        while (server_cpu_seconds(parent.pid) or 0) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
        alone = process_cpu_seconds(parent.pid)
        assert alone is not None and alone < 0.3, "the parent itself only waited"
        assert (server_cpu_seconds(parent.pid) or 0) >= 0.4
    finally:
        parent.communicate(b"")


def test_a_server_counts_its_running_children() -> None:
    parent = spawn_parent(BURN.format(seconds=0.6) + "\nimport sys; sys.stdin.read()")
    try:
        deadline = time.monotonic() + 30
        while (server_cpu_seconds(parent.pid) or 0) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (server_cpu_seconds(parent.pid) or 0) >= 0.5
    finally:
        parent.kill()
        parent.wait()


def test_no_process_reads_as_unknown() -> None:
    assert process_cpu_seconds(None) is None
    assert server_cpu_seconds(None) is None
    assert server_cpu_seconds(2**22 + 12345) is None  # above the largest pid Linux hands out


async def test_the_postgresql_server_is_found_by_its_backend() -> None:
    pid = await pg_server_pid(POSTGRES_URL)
    assert pid is not None
    stat = proc_stat(pid)
    assert stat is not None and stat[0] == "postgres"
    assert (server_cpu_seconds(pid) or 0) > (process_cpu_seconds(pid) or 0)
