"""Which workers have a live socket in this process, and the grace period after a drop.

When a worker's last socket here disconnects, it is removed after ``grace`` seconds unless
it was heard of meanwhile: a re-join (on any replica) or a heartbeat touches
``last_heartbeat``, and the removal is guarded by ``last_heartbeat < disconnected_at``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import datetime
from uuid import UUID

from app.persistence.types import utcnow

log = logging.getLogger(__name__)
Cleanup = Callable[[UUID, datetime], Awaitable[None]]


class WorkerPresence:
    def __init__(self, grace: float, cleanup: Cleanup) -> None:
        self._grace = grace
        self._cleanup = cleanup
        self._sockets: defaultdict[UUID, set[str]] = defaultdict(set)
        self._pending: dict[UUID, asyncio.Task[None]] = {}

    def attach(self, worker_id: UUID, sid: str) -> None:
        self._sockets[worker_id].add(sid)
        pending = self._pending.pop(worker_id, None)
        if pending is not None:
            pending.cancel()

    def detach(self, sid: str, workers: set[UUID]) -> None:
        """The socket ``sid`` is gone; start the grace period of workers it was the last
        socket of."""
        disconnected_at = utcnow()
        for worker_id in workers:
            sockets = self._sockets.get(worker_id)
            if sockets is not None:
                sockets.discard(sid)
                if sockets:
                    continue
                del self._sockets[worker_id]
            if worker_id not in self._pending:
                self._pending[worker_id] = asyncio.create_task(
                    self._expire(worker_id, disconnected_at), name=f"grace-{worker_id}"
                )

    async def _expire(self, worker_id: UUID, disconnected_at: datetime) -> None:
        try:
            await asyncio.sleep(self._grace)
            if worker_id in self._sockets:  # came back on this replica
                return
            await self._cleanup(worker_id, disconnected_at)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cleanup of disconnected worker %s failed", worker_id)
        finally:
            if self._pending.get(worker_id) is asyncio.current_task():
                del self._pending[worker_id]

    async def close(self) -> None:
        for task in self._pending.values():
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)
        self._pending.clear()

    @property
    def connected_workers(self) -> int:
        return len(self._sockets)
