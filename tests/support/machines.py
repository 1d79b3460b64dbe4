"""What the Hypothesis state machines over the real service layer share: an event loop of
their own, a ``Database`` on the test's URL, emptied tables, and a stand-in for
``@internal`` executors (none)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine
from sqlalchemy import delete

from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.tables import metadata


class NoExecutors:
    def has_executor(self, full_name: str) -> bool:
        return False


class ServiceMachine(RuleBasedStateMachine):
    url: str  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.db = Database(Settings(database_url=self.url))
        self.run(self._empty_tables())

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    async def _empty_tables(self) -> None:
        async with self.db.write() as conn:
            for table in reversed(metadata.sorted_tables):
                await conn.execute(delete(table))

    def teardown(self) -> None:
        self.run(self.db.dispose())
        self.loop.close()
