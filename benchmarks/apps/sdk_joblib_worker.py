"""The no-op job of ``python -m benchmarks sdk`` served by the unmodified zndraw-joblib 0.1.7
``JobManager`` (one manager per slot: a manager runs one task at a time), polling for tasks
(no Socket.IO):

    python -m benchmarks.apps.sdk_joblib_worker URL TOKEN ROOM CONCURRENCY POLL_SECONDS

Prints ``ready`` once every manager has registered the job, and serves until stdin closes.
Never imports Taskhub (zndraw-joblib's models and Taskhub's share SQLModel's metadata).
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from zndraw_joblib.client import Category, ClaimedTask, Extension, JobManager

from benchmarks.apps.joblib_rest import RestApi


class Noop(Extension):
    """Does nothing."""

    category: ClassVar[Category] = Category.MODIFIER

    def run(self, vis: Any, **kwargs: Any) -> Any:
        return None


def execute(claimed: ClaimedTask) -> None:
    claimed.extension.run(None, **claimed.run_kwargs)


def main(url: str, token: str, room: str, concurrency: int, poll: float) -> int:
    managers = []
    for _ in range(concurrency):
        manager = JobManager(
            RestApi(url, token, timeout=30.0), None, execute=execute, polling_interval=poll
        )
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
