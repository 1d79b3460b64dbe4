"""A provider process around the unmodified zndraw-joblib 0.1.7 ``JobManager``.

Run as ``python -m tests.system.joblib_provider BASE_URL TOKEN``: the manager gets a real
Socket.IO client (zndraw-socketio's wrapper around python-socketio's, as ZnDraw gives it)
and serves ``Provider`` subclasses of its own (zndraw-joblib's ``Provider`` base, as ZnDraw
defines its file browser and frames): ``Listing`` answers JSON, ``Frames`` bytes. Like
``tests.system.joblib_worker`` it never imports ``app`` and is driven over stdin/stdout,
one JSON object per line: ``{"op": ..., "args": {...}}`` in, ``{"ok": bool,
"result"|"error": ...}`` out.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import socketio
from zndraw_joblib.client import JobManager
from zndraw_joblib.provider import Provider
from zndraw_socketio.wrapper import SyncClientWrapper

from tests.system.joblib_worker import Problems, RestApi


class Store:
    """The handler the providers read from; counts every read it serves."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reads: Counter[str] = Counter()

    def count(self, what: str) -> None:
        with self.lock:
            self.reads[what] += 1

    def listing(self, path: str) -> dict[str, Any]:
        self.count(f"listing:{path}")
        return {"path": path, "entries": [f"{path.rstrip('/')}/{n}.xyz" for n in range(3)]}

    def frame(self, index: int, size: int) -> bytes:
        self.count(f"frame:{index}:{size}")
        return frame_bytes(index, size)


def frame_bytes(index: int, size: int) -> bytes:
    """A frame's bytes: every byte value, from ``index`` on (the test computes the same)."""
    return bytes((index + i) % 256 for i in range(size))


class Listing(Provider):
    """A file listing (JSON), as ZnDraw's file browser."""

    category: ClassVar[str] = "filesystem"
    path: str = "/"

    def read(self, handler: Any) -> Any:
        return handler.listing(self.path)


class Frames(Provider):
    """A trajectory's frames (bytes), as ZnDraw's mounted trajectories."""

    category: ClassVar[str] = "frames"
    content_type: ClassVar[str] = "application/octet-stream"
    index: int = 0
    size: int = 16

    def read(self, handler: Any) -> Any:
        return handler.frame(self.index, self.size)


class Never(Provider):
    """A provider whose reads never answer (its read fails, so the manager posts nothing)."""

    category: ClassVar[str] = "filesystem"
    path: str = "/"

    def read(self, handler: Any) -> Any:
        handler.count(f"never:{self.path}")
        raise RuntimeError("this provider never answers")


PROVIDERS: dict[str, type[Provider]] = {"Listing": Listing, "Frames": Frames, "Never": Never}


class JoinAcks(socketio.Client):
    """python-socketio's client, asking for the hub's acknowledgement of each
    ``join_provider_room`` the manager emits (it asks for none itself): ``joined()`` are the
    providers the hub has put the socket in the room of."""

    def __init__(self) -> None:
        super().__init__()
        self.acks: list[Any] = []
        self._lock = threading.Lock()

    def emit(
        self, event: str, data: Any = None, namespace: str | None = None, callback: Any = None
    ) -> None:
        if event == "join_provider_room" and callback is None:
            callback = self._acknowledged
        super().emit(event, data, namespace=namespace, callback=callback)

    def _acknowledged(self, ack: Any = None) -> None:
        with self._lock:
            self.acks.append(ack)

    def joined(self) -> list[str]:
        with self._lock:
            return sorted(
                {a["provider_name"] for a in self.acks if isinstance(a, dict) and "status" not in a}
            )

    def refused(self) -> list[Any]:
        with self._lock:
            return [a for a in self.acks if isinstance(a, dict) and "status" in a]


def main(base_url: str, token: str) -> int:
    problems = Problems()
    logging.getLogger("zndraw_joblib").addHandler(problems)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    api = RestApi(base_url, token)
    sio = JoinAcks()
    sio.connect(base_url, auth={"token": token}, transports=["websocket"], wait_timeout=10)
    manager = JobManager(api, SyncClientWrapper(sio), heartbeat_interval=1.0)
    store = Store()

    def register(provider: str, name: str, room: str = "@global") -> dict[str, str]:
        provider_id = manager.register_provider(
            PROVIDERS[provider], name=name, handler=store, room=room
        )
        return {"id": str(provider_id), "worker_id": str(manager.worker_id)}

    def reads() -> dict[str, int]:
        with store.lock:
            return dict(store.reads)

    ops: dict[str, Callable[..., Any]] = {
        "register": register,
        "unregister": lambda full_name: manager.unregister_provider(full_name),
        "reads": reads,
        "joined": sio.joined,
        "refused": sio.refused,
        "problems": lambda: list(problems.messages),
        "disconnect": lambda: manager.disconnect(),
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
        sio.disconnect()
        api.http.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
