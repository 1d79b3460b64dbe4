"""The running hub: the long-lived objects one server process shares across requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.dispatch.registry import InternalRegistry
from app.domain.services.users import Authenticator
from app.persistence.database import Database
from app.realtime.publisher import Publisher
from app.realtime.waiters import TaskWaiters
from app.settings import Settings


@dataclass
class Hub:
    settings: Settings
    db: Database
    auth: Authenticator
    waiters: TaskWaiters
    publisher: Publisher
    internal: InternalRegistry = field(default_factory=InternalRegistry)

    @classmethod
    def create(cls, settings: Settings) -> Hub:
        db = Database(settings)
        waiters = TaskWaiters()
        return cls(
            settings=settings,
            db=db,
            auth=Authenticator(db, settings.auth_cache_seconds),
            waiters=waiters,
            publisher=Publisher(waiters),
        )

    async def close(self) -> None:
        self.waiters.release_all()
        await self.db.dispose()
