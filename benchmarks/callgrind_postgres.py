"""A private PostgreSQL server run under valgrind's callgrind, so that the instructions its
backends spend can be counted as exactly as the hub's own (``benchmarks.instructions``).

The server is initialised in a temporary directory, listens on 127.0.0.1 on a free port and
runs with autovacuum off (a worker that wakes at its own moments would blur the count).
Every process it forks stays under callgrind and writes ``pg.<pid>`` when it exits; a
backend's file therefore appears once its client has disconnected. PostgreSQL refuses to
run as root, so under root it runs as the ``postgres`` user (``runuser``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.targets import LOCALHOST, TargetError, free_port

START_TIMEOUT_SECONDS = 120
DUMP_TIMEOUT_SECONDS = 120
SERVER_USER = "postgres"


@dataclass(frozen=True)
class CountedServer:
    admin_url: str
    out_dir: Path


def callgrind_total(path: Path) -> int:
    """The total instruction count a callgrind output file reports."""
    match = re.search(r"^(?:summary|totals):\s*(\d+)", path.read_text(), re.MULTILINE)
    if match is None:
        raise TargetError(f"no instruction total in {path}")
    return int(match.group(1))


async def backends_total(out_dir: Path, pids: Iterable[int]) -> int:
    """The instructions of the backends ``pids``, summed from their callgrind files, waiting
    for each to be written (a backend writes its file as it exits)."""
    total = 0
    async with asyncio.timeout(DUMP_TIMEOUT_SECONDS):
        for pid in pids:
            # Written by another process: there is nothing to await but the file itself.
            while (count := _written_total(out_dir / f"pg.{pid}")) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.2)
            total += count
    return total


def _written_total(path: Path) -> int | None:
    """The file's total once callgrind has finished writing it (the total comes last)."""
    try:
        return callgrind_total(path)
    except (OSError, TargetError):
        return None


def postgres_bindir() -> Path:
    """Where the installed PostgreSQL's programs are (``pg_config --bindir``)."""
    try:
        found = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise TargetError(f"pg_config --bindir failed ({exc}): is PostgreSQL installed?") from exc
    return Path(found)


def as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as the PostgreSQL user when this runs as root (PostgreSQL refuses root)."""
    return ["runuser", "-u", SERVER_USER, "--", *argv] if os.geteuid() == 0 else argv


@asynccontextmanager
async def callgrind_postgres() -> AsyncIterator[CountedServer]:
    """Start the server, yield its admin URL and where its counts go, then stop it."""
    if shutil.which("valgrind") is None:
        raise TargetError("valgrind is not installed (Debian: apt-get install valgrind)")
    bindir, port = postgres_bindir(), free_port()
    root = Path(tempfile.mkdtemp(prefix="taskhub-callgrind-postgres-"))
    data, out_dir = root / "data", root / "counts"
    out_dir.mkdir()
    if os.geteuid() == 0:
        user = pwd.getpwnam(SERVER_USER)
        for path in (root, out_dir):
            os.chown(path, user.pw_uid, user.pw_gid)
    initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
    setup = await asyncio.create_subprocess_exec(
        *as_server_user(initdb), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    output, _ = await setup.communicate()
    if setup.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise TargetError(f"initdb failed: {output.decode(errors='replace')[-2000:]}")
    server = [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=yes",
        f"--callgrind-out-file={out_dir}/pg.%p",
        str(bindir / "postgres"),
        *("-D", str(data), "-p", str(port), "-k", str(root)),
        *("-c", f"listen_addresses={LOCALHOST}", "-c", "autovacuum=off"),
    ]
    log = (root / "server.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        *as_server_user(server), stdout=log, stderr=subprocess.STDOUT
    )
    try:
        await _wait_ready(bindir, port, proc)
        yield CountedServer(f"postgresql://postgres@{LOCALHOST}:{port}/postgres", out_dir)
    finally:
        if proc.returncode is None:
            _stop(data)
            try:
                async with asyncio.timeout(START_TIMEOUT_SECONDS):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def _stop(data: Path) -> None:
    """Fast shutdown: SIGINT to the postmaster (its pid heads ``postmaster.pid``; signalling
    ``runuser`` would not reach it)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)


async def _wait_ready(bindir: Path, port: int, proc: asyncio.subprocess.Process) -> None:
    ready = [str(bindir / "pg_isready"), "-q", "-h", LOCALHOST, "-p", str(port)]
    async with asyncio.timeout(START_TIMEOUT_SECONDS):
        while True:
            if proc.returncode is not None:
                raise TargetError(f"PostgreSQL under callgrind exited with {proc.returncode}")
            check = await asyncio.create_subprocess_exec(*ready)
            if await check.wait() == 0:
                return
            await asyncio.sleep(0.5)
