"""The no-op job of ``benchmarks.sdk`` served by the unmodified zndraw-joblib 0.1.7
``JobManager`` (one manager per slot: a manager runs one task at a time), polling for tasks
(no Socket.IO):

    python -m benchmarks.sdk_joblib_worker URL TOKEN ROOM CONCURRENCY POLL_SECONDS

Prints ``ready`` once every manager has registered the job, and serves until stdin closes.
Never imports Taskhub (zndraw-joblib's models and Taskhub's share SQLModel's metadata).
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

import httpx
from zndraw_joblib.client import Category, ClaimedTask, Extension, JobManager


class Noop(Extension):
    """Does nothing."""

    category: ClassVar[Category] = Category.MODIFIER

    def run(self, vis: Any, **kwargs: Any) -> Any:
        return None


class RestApi:
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
        code = response.status_code
        if code == 404:
            raise KeyError(response.text)
        if code in (401, 403):
            raise PermissionError(response.text)
        if code in (409, 422):
            raise ValueError(response.text)
        response.raise_for_status()


def execute(claimed: ClaimedTask) -> None:
    claimed.extension.run(None, **claimed.run_kwargs)


def main(url: str, token: str, room: str, concurrency: int, poll: float) -> int:
    managers = []
    for _ in range(concurrency):
        manager = JobManager(RestApi(url, token), None, execute=execute, polling_interval=poll)
        manager.register(Noop, room=room)
        managers.append(manager)
    print("ready", flush=True)
    try:
        sys.stdin.read()  # until the benchmark closes it
    finally:
        for manager in managers:
            manager.disconnect()
    return 0


if __name__ == "__main__":
    url, token, room, concurrency, poll = sys.argv[1:6]
    sys.exit(main(url, token, room, int(concurrency), float(poll)))
