"""A worker process around the unmodified zndraw-joblib 0.1.7 ``JobManager``.

Run as ``python -m tests.system.joblib_worker BASE_URL TOKEN [--socket]``: with
``--socket`` the manager gets a real Socket.IO client (zndraw-socketio's wrapper around
python-socketio's, as ZnDraw gives it) and polls only every 30 s, so what it serves
promptly it was woken for. It never imports ``app``
(zndraw-joblib's SQLAlchemy models share ``SQLModel.metadata`` with Taskhub's, so the two
cannot be imported into one process). The test drives it over stdin/stdout, one JSON
object per line: ``{"op": ..., "args": {...}}`` in, ``{"ok": bool, "result"|"error": ...}``
out.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import socketio
from zndraw_joblib.client import Category, ClaimedTask, Extension, JobManager
from zndraw_socketio.wrapper import SyncClientWrapper

from benchmarks.apps.joblib_rest import RestApi


class Scale(Extension):
    """A modifier with a few typed parameters (they become the job's JSON schema)."""

    category: ClassVar[Category] = Category.MODIFIER
    factor: float = 1.0
    label: str = "scale"
    axes: list[int] = [0, 1, 2]

    def run(self, vis: Any, **kwargs: Any) -> Any:
        return self.factor


class Explode(Extension):
    """A modifier whose execution always fails."""

    category: ClassVar[Category] = Category.MODIFIER
    n: int = 0

    def run(self, vis: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"boom-{self.n}")


class Garble(Extension):
    """A modifier that fails with a message the hub could not store as it is: a NUL
    character and ``length`` characters in all."""

    category: ClassVar[Category] = Category.MODIFIER
    length: int = 70_000

    def run(self, vis: Any, **kwargs: Any) -> Any:
        raise RuntimeError(("garbled\x00" + "x" * self.length)[: self.length])


EXTENSIONS: dict[str, type[Extension]] = {"Scale": Scale, "Explode": Explode, "Garble": Garble}


class JoinAcks(socketio.Client):
    """python-socketio's client, asking for the hub's acknowledgement of each
    ``join_job_room`` the manager emits (it asks for none itself): ``joined_jobs()`` are the
    job rooms the hub has put the socket in, so a test can wait for that instead of guessing
    how long it takes."""

    def __init__(self) -> None:
        super().__init__()
        self.joined: list[str] = []
        self._lock = threading.Lock()

    def emit(
        self, event: str, data: Any = None, namespace: str | None = None, callback: Any = None
    ) -> None:
        if event == "join_job_room" and callback is None:
            callback = self._acknowledged
        super().emit(event, data, namespace=namespace, callback=callback)

    def _acknowledged(self, ack: Any = None) -> None:
        if isinstance(ack, dict) and "job_name" in ack and "status" not in ack:
            with self._lock:
                self.joined.append(ack["job_name"])

    def joined_jobs(self) -> list[str]:
        with self._lock:
            return sorted(set(self.joined))


class Executions:
    """The ``execute`` callback: runs each claimed extension and records what it saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[dict[str, Any]] = []

    def __call__(self, claimed: ClaimedTask) -> None:
        with self.lock:
            self.seen.append(
                {
                    "task_id": claimed.task_id,
                    "job_name": claimed.job_name,
                    "room_id": claimed.room_id,
                    "extension": type(claimed.extension).__name__,
                    "params": claimed.extension.model_dump(),
                }
            )
        claimed.extension.run(None, **claimed.run_kwargs)


class Problems(logging.Handler):
    """Collects zndraw-joblib's warnings and errors (claim failures, task failures …)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main(base_url: str, token: str, socket: bool = False) -> int:
    problems = Problems()
    logging.getLogger("zndraw_joblib").addHandler(problems)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    api = RestApi(base_url, token)
    executions = Executions()
    sio = None
    if socket:
        sio = JoinAcks()
        sio.connect(base_url, auth={"token": token}, transports=["websocket"], wait_timeout=10)
        manager = JobManager(
            api,
            SyncClientWrapper(sio),
            execute=executions,
            heartbeat_interval=1.0,
            polling_interval=30.0,
        )
    else:
        manager = JobManager(
            api, None, execute=executions, heartbeat_interval=0.2, polling_interval=0.05
        )

    def register(name: str, room: str | None = None) -> str:
        manager.register(EXTENSIONS[name], room=room)
        return str(manager.worker_id)

    def submit(name: str, params: dict[str, Any], room: str) -> str:
        return manager.submit(EXTENSIONS[name](**params), room=room)

    def executed() -> list[dict[str, Any]]:
        with executions.lock:
            return list(executions.seen)

    def disconnect() -> str | None:
        manager.disconnect()
        return None if manager.worker_id is None else str(manager.worker_id)

    ops: dict[str, Callable[..., Any]] = {
        "register": register,
        "submit": submit,
        "registered": lambda: sorted(manager),
        "schema": lambda name: EXTENSIONS[name].model_json_schema(),
        "stopped": lambda: manager._stop.is_set(),
        "executions": executed,
        "problems": lambda: list(problems.messages),
        "joined": lambda: [] if sio is None else sio.joined_jobs(),
        "disconnect": disconnect,
        "exit": lambda: None,
    }
    try:
        for line in sys.stdin:
            command = json.loads(line)
            try:
                reply = {"ok": True, "result": ops[command["op"]](**command.get("args", {}))}
            except Exception as exc:
                reply = {"ok": False, "error": repr(exc)}
            print(json.dumps(reply), flush=True)
            if command["op"] == "exit":
                break
    finally:
        manager.disconnect()
        if sio is not None:
            sio.disconnect()
        api.http.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], socket="--socket" in sys.argv[3:]))
