"""Running the hub under uvicorn (``taskhub serve``): one process or several workers on one
socket, logs through ``taskhub.observability.logging``, metrics shared between workers through
prometheus-client's multiprocess directory, and a graceful stop that exits with status 0."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from taskhub.observability.logging import log_config
from taskhub.settings import Settings
from taskhub.store.deployment import database_file, is_embedded

try:
    import fcntl
except ImportError:  # not on this platform (Windows): no lock against a second serve
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from taskhub.main import TaskhubApp

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# A temporary metrics directory is named METRICS_DIR_PREFIX + "<pid of its serve>-<random>".
METRICS_DIR_PREFIX = "taskhub-metrics-"
WORKER_APP = "taskhub.serving:worker_app"
# The pid of the ``taskhub serve`` process supervising several workers, for the workers.
SUPERVISOR_ENV = "_TASKHUB_SUPERVISOR_PID"
PR_SET_PDEATHSIG = 1
# ``taskhub serve`` on an SQLite file holds an exclusive flock on the file named after it
# with this suffix; the descriptor stays open (and the lock held) until the process exits.
SERVE_LOCK_SUFFIX = ".serve.lock"
_serve_lock: int | None = None


def workers_problem(settings: Settings) -> str | None:
    """Why these settings cannot run ``settings.workers`` workers, or None."""
    if settings.workers == 1:
        return None
    if is_embedded(settings.database_url):
        return (
            f"{settings.workers} workers need PostgreSQL and Redis; SQLite serves from one "
            "process (set TASKHUB_WORKERS=1, or use TASKHUB_DATABASE_URL=postgresql+asyncpg://…)"
        )
    if not settings.redis_url:
        return (
            f"{settings.workers} workers need TASKHUB_REDIS_URL: long-poll wake-ups and "
            "Socket.IO events must reach every worker process"
        )
    return None


def serve_lock_problem(settings: Settings) -> str | None:
    """Take, for the rest of this process's life, the lock that keeps a second ``taskhub
    serve`` off the same SQLite file (it would run a sweeper of its own and neither wake the
    other's long-polls nor know its sockets), or say why not: another serve holds it. A
    flock, not a pid file: the kernel drops it when the holder exits, even by SIGKILL.
    Nothing to lock for PostgreSQL, an in-memory database, or a platform without fcntl.
    The other commands (migrate, users, tokens) do not take it."""
    global _serve_lock
    database = database_file(settings.database_url)
    if database is None or fcntl is None or _serve_lock is not None:
        return None
    path = database.resolve()  # one lock whatever name (relative, symlink) reaches it
    lock_path = path.with_name(path.name + SERVE_LOCK_SUFFIX)
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(descriptor, 32).decode(errors="replace").strip()
        os.close(descriptor)
        which = f" (pid {holder})" if holder.isdigit() else ""
        return (
            f"another taskhub serve{which} is using {path} (it holds {lock_path}): SQLite "
            "serves from one process; stop that one first, or use PostgreSQL and Redis"
        )
    except BaseException:
        os.close(descriptor)
        raise
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()}\n".encode())
    _serve_lock = descriptor
    return None


def listen_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (taken, or an address not of this machine),
    or None: checked, as uvicorn will bind, before anything is created or printed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def worker_app() -> TaskhubApp:
    """The application of one worker process (uvicorn imports this factory in each)."""
    from taskhub.main import create_app

    exit_with_supervisor()
    return create_app(Settings(), drain_on_signals=True, freeze_start_up=True)


def exit_with_supervisor() -> None:
    """Stop this worker process (SIGTERM: uvicorn's graceful stop) soon after the ``taskhub
    serve`` process supervising it dies, even by SIGKILL, instead of serving on as an
    orphan that holds the port. Linux: the kernel sends the signal (PR_SET_PDEATHSIG);
    elsewhere a thread compares the parent's pid with the supervisor's every second."""
    supervisor = int(os.environ.get(SUPERVISOR_ENV) or 0)
    if not supervisor or supervisor == os.getpid():
        return
    if not _parent_death_signal(signal.SIGTERM):
        threading.Thread(
            target=_watch_parent, args=(supervisor,), name="supervisor-watchdog", daemon=True
        ).start()
    if os.getppid() != supervisor:  # it died before we asked to be told
        os.kill(os.getpid(), signal.SIGTERM)


def _parent_death_signal(sig: int) -> bool:
    """Ask Linux to send ``sig`` when the parent exits; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(supervisor: int) -> None:
    while os.getppid() == supervisor:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)


def serve(settings: Settings) -> int:
    """Serve until SIGTERM or SIGINT; return the process's exit status."""
    import uvicorn

    options = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "log_config": log_config(settings.log_format, settings.log_level, settings.access_log),
        "access_log": settings.access_log,
        "timeout_graceful_shutdown": settings.graceful_shutdown_seconds,
        # The largest websocket message uvicorn reads (its payload, in bytes; uvicorn's
        # default is 16 MiB): past it the connection is closed with 1009 before more is
        # buffered, where Engine.IO would refuse the message only once read whole.
        "ws_max_size": settings.max_socket_message_bytes,
    }
    # The metrics module is imported only once the multiprocess directory is ready (its
    # metrics open their files on import); the supervisor of several workers never does.
    with metrics_directory(settings.workers), sigterm_exits_cleanly():
        if settings.workers == 1:
            from taskhub.main import create_app

            app = create_app(settings, drain_on_signals=True, freeze_start_up=True)
            uvicorn.run(app, **options)  # type: ignore[arg-type]
        else:
            os.environ[SUPERVISOR_ENV] = str(os.getpid())  # inherited by the workers
            try:
                uvicorn.run(WORKER_APP, factory=True, workers=settings.workers, **options)  # type: ignore[arg-type]
            finally:
                os.environ.pop(SUPERVISOR_ENV, None)
    return 0


@contextmanager
def metrics_directory(workers: int) -> Iterator[Path | None]:
    """prometheus-client's multiprocess directory: the one in ``PROMETHEUS_MULTIPROC_DIR``
    (emptied of metric files first, as the library requires between runs) or, for several
    workers, a fresh temporary one removed afterwards. None: one process, in memory."""
    configured = os.environ.get(MULTIPROC_ENV)
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink(missing_ok=True)
        yield path
        return
    if workers == 1:
        yield None
        return
    remove_orphaned_metrics_directories(Path(tempfile.gettempdir()))
    path = Path(tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-"))
    os.environ[MULTIPROC_ENV] = str(path)  # inherited by the worker processes
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


def remove_orphaned_metrics_directories(parent: Path) -> list[Path]:
    """Remove the temporary metrics directories in ``parent`` whose ``taskhub serve`` is
    gone: one killed outright (SIGKILL, OOM) never reaches its own clean-up. Each directory
    is named after the pid of the process that made it; those still running keep theirs.
    Returns what was removed."""
    removed = []
    for path in parent.glob(f"{METRICS_DIR_PREFIX}*-*"):
        owner = path.name.removeprefix(METRICS_DIR_PREFIX).split("-", 1)[0]
        if path.is_dir() and owner.isdigit() and not _running(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        pass
    return True


def _stopped(_sig: int, _frame: FrameType | None) -> None:
    """SIGTERM after the server has shut down: nothing left to do."""


@contextmanager
def sigterm_exits_cleanly() -> Iterator[None]:
    """uvicorn re-raises the signal that stopped it once it is done, under the handler that
    was there before it; with this one a SIGTERM ends ``taskhub serve`` with status 0."""
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        yield
    finally:
        if previous is signal.SIG_DFL:
            # The process is about to exit: a repeated stop signal now (a supervisor
            # sending SIGTERM again) must not turn a clean stop into status 143. (The
            # event loop's close may have reset the handlers to their defaults already.)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, previous)
