"""The provider of ``python -m benchmarks.scenarios.providers``: the unmodified zndraw-joblib
0.1.7 ``JobManager`` with a real Socket.IO client, serving two ``Provider`` classes of its
own in a room — ``Listing`` (a small JSON answer) and ``Frames`` (``size`` bytes) — as
ZnDraw serves its file browser and its frames. The same process serves Taskhub and the
reference server.

    python -m benchmarks.apps.provider_joblib BASE_URL TOKEN ROOM

Prints ``ready`` once the hub has put its socket in both providers' rooms (it asks for the
acknowledgement of ``join_provider_room``; a host that gives none is waited for a moment),
then serves until stdin closes. Never imports Taskhub.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, ClassVar

import httpx
import socketio
from zndraw_joblib.client import JobManager
from zndraw_joblib.provider import Provider
from zndraw_socketio.wrapper import SyncClientWrapper

NO_ACK_WAIT_SECONDS = 1.0  # a host without acknowledgements: time for the joins to land


class Listing(Provider):
    category: ClassVar[str] = "filesystem"
    path: str = "/"

    def read(self, handler: Any) -> Any:
        return {"path": self.path, "entries": [f"{self.path}/{n}.xyz" for n in range(8)]}


class Frames(Provider):
    category: ClassVar[str] = "frames"
    content_type: ClassVar[str] = "application/octet-stream"
    index: int = 0
    size: int = 1024

    def read(self, handler: Any) -> Any:
        return bytes([self.index % 256]) * self.size


class Api:
    """zndraw-joblib's ``ApiManager`` protocol over a plain ``httpx.Client``."""

    def __init__(self, base_url: str, token: str) -> None:
        self.http = httpx.Client(timeout=30.0, trust_env=False)
        self._base_url = base_url
        self._token = token

    @property
    def base_url(self) -> str:
        return self._base_url

    def get_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def raise_for_status(self, response: httpx.Response) -> None:
        if response.status_code == 404:
            raise KeyError(response.text)
        if response.status_code in (401, 403):
            raise PermissionError(response.text)
        if response.status_code in (409, 422):
            raise ValueError(response.text)
        response.raise_for_status()


class JoinAcks(socketio.Client):
    """Asks for the acknowledgement of each ``join_provider_room`` the manager emits."""

    def __init__(self) -> None:
        super().__init__()
        self.acks = 0
        self.lock = threading.Lock()

    def emit(
        self, event: str, data: Any = None, namespace: str | None = None, callback: Any = None
    ) -> None:
        if event == "join_provider_room" and callback is None:
            callback = self._acknowledged
        super().emit(event, data, namespace=namespace, callback=callback)

    def _acknowledged(self, *_ack: Any) -> None:
        with self.lock:
            self.acks += 1


def main(base_url: str, token: str, room: str) -> int:
    sio = JoinAcks()
    sio.connect(base_url, auth={"token": token}, transports=["websocket"], wait_timeout=10)
    manager = JobManager(Api(base_url, token), SyncClientWrapper(sio), heartbeat_interval=5.0)
    manager.register_provider(Listing, name="listing", handler=None, room=room)
    manager.register_provider(Frames, name="frames", handler=None, room=room)
    deadline = time.monotonic() + NO_ACK_WAIT_SECONDS
    while time.monotonic() < deadline:
        with sio.lock:
            if sio.acks >= 2:
                break
        time.sleep(0.01)
    print("ready", flush=True)
    try:
        sys.stdin.read()
    finally:
        manager.disconnect()
        sio.disconnect()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
