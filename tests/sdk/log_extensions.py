"""Extensions that log, for the task-log tests (in-process and in ``taskhub worker``)."""

from __future__ import annotations

import asyncio
import logging
import threading

from taskhub.sdk import Extension, TaskContext
from tests.sdk.extensions import BARRIERS

RUN_LOGGER = "chatty.run"
logging.getLogger("chatty").setLevel(logging.DEBUG)  # records below INFO are made, too


class Chatty(Extension):
    """Logs ``count`` numbered lines through ``ctx.log`` and ``logging`` in turn (each
    tagged with ``tag``), after meeting the other runs of ``key`` at a barrier (if any)."""

    category = "analysis"
    tag: str
    count: int = 5
    key: str = ""

    def run(self, ctx: TaskContext) -> str:
        if self.key in BARRIERS:
            BARRIERS[self.key].wait(10)
        run_log = logging.getLogger(RUN_LOGGER)
        for i in range(self.count):
            ctx.log(f"{self.tag} ctx {i}", level="warning" if i % 2 else "info")
            run_log.info("%s logging %d", self.tag, i)
            run_log.debug("%s below the capture level %d", self.tag, i)
            logging.getLogger("taskhub.sdk.mine").warning("%s sdk %d", self.tag, i)
            logging.getLogger("httpx").warning("%s httpx %d", self.tag, i)
        lost = threading.Thread(target=lambda: run_log.warning("%s thread", self.tag))
        lost.start()
        lost.join()
        return self.tag


class AsyncChatty(Extension):
    """``Chatty`` as a coroutine, with a child task (whose lines are the run's)."""

    category = "analysis"
    name = "ChattyAsync"
    tag: str
    count: int = 5

    async def run(self, ctx: TaskContext) -> str:
        run_log = logging.getLogger(RUN_LOGGER)
        for i in range(self.count):
            ctx.log(f"{self.tag} ctx {i}")
            await asyncio.sleep(0.01)
            run_log.info("%s logging %d", self.tag, i)

        async def child() -> None:
            run_log.error("%s child", self.tag)

        await asyncio.create_task(child())
        return self.tag


class Flood(Extension):
    """Logs ``count`` lines as fast as it can, then ends at once."""

    category = "analysis"
    count: int = 1500

    def run(self, ctx: TaskContext) -> int:
        for i in range(self.count):
            ctx.log(f"line {i}")
        return self.count


class Traceback(Extension):
    """Logs an exception with its traceback, then a very long line."""

    category = "analysis"

    def run(self, ctx: TaskContext) -> None:
        try:
            raise ValueError("inside the run")
        except ValueError:
            logging.getLogger(RUN_LOGGER).exception("it broke")
        ctx.log("x" * 100_000, level="bogus")
        ctx.log(object())
