"""Where a submitted payload is validated: on the event loop while that stays cheap (almost
every payload: microseconds), else on a thread of its own, so that one costly payload (up
to ``MAX_VALIDATION_SECONDS`` of CPU) does not stop every other request of the process.

A payload that has not passed after ``INLINE_VALIDATION_SECONDS`` on the event loop starts
over on the validation thread with the full budget. The thread takes one payload at a time
(the GIL lets no more run at once) and its deadline counts only its own CPU time, so a
payload waiting its turn is judged as if it had been first. At most ``MOST_WAITING``
payloads wait or run there per process; past that, a costly one is refused with 503 and
``Retry-After`` (each holds its parsed payload meanwhile), while cheap ones go on as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

from app.domain.errors import ValidationBusy
from app.domain.payloads import (
    compiled_validator,
    errors_in_full,
    errors_within_seconds,
    raise_for,
)
from app.domain.schema_validator import TooCostly

# CPU seconds a payload may take on the event loop before it goes to the thread (1,000 to
# 2,500 keyword applications here: far more than any real payload of a real schema needs).
INLINE_VALIDATION_SECONDS = 0.005
MOST_WAITING = 8


class PayloadChecks:
    """Validates payloads on the event loop or, when costly, on a thread of its own (see the
    module). One per process; methods are called on the event loop's thread."""

    def __init__(
        self, inline_seconds: float = INLINE_VALIDATION_SECONDS, most_waiting: int = MOST_WAITING
    ) -> None:
        self._inline_seconds = inline_seconds
        self._most_waiting = most_waiting
        self._waiting = 0
        self._waiting_lock = threading.Lock()  # released on the thread
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="taskhub-payloads"
        )

    @property
    def waiting(self) -> int:
        """Payloads waiting for the validation thread or running on it."""
        return self._waiting

    async def check(self, version: Any, schema: dict[str, Any], payload: dict[str, Any]) -> None:
        """422 unless ``payload`` matches this ``version`` of a job's ``schema``
        (``payloads.validate_payload``); 503 ``validation-busy`` if it is costly and the
        thread already has ``most_waiting`` payloads."""
        raise_for(await self.errors(version, schema, payload))

    async def errors(
        self, version: Any, schema: dict[str, Any], payload: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """``payloads.payload_errors``, found on the event loop or on the thread."""
        if not schema:  # {} accepts every payload
            return []
        validator = compiled_validator(version, schema)
        try:
            return errors_within_seconds(validator, payload, self._inline_seconds)
        except TooCostly:
            return await self._on_the_thread(validator, payload)

    async def _on_the_thread(self, validator: Any, payload: dict[str, Any]) -> list[dict[str, Any]]:
        if self._waiting >= self._most_waiting:
            raise ValidationBusy(
                f"{self._waiting} costly payloads are being validated here already; try again "
                "shortly (or send a smaller payload)."
            )
        with self._waiting_lock:
            self._waiting += 1
        done = self._thread.submit(errors_in_full, validator, payload)
        # Counted until the thread is done with it, even if the request goes away first
        # (a running validation cannot be stopped): a client that hangs up and submits
        # again does not get past the bound.
        done.add_done_callback(self._release)
        return await asyncio.wrap_future(done)

    def _release(self, _done: concurrent.futures.Future[Any]) -> None:
        with self._waiting_lock:
            self._waiting -= 1


PROCESS_CHECKS = PayloadChecks()


async def check_payload(version: Any, schema: dict[str, Any], payload: dict[str, Any]) -> None:
    """``PayloadChecks.check`` of this process."""
    await PROCESS_CHECKS.check(version, schema, payload)


async def payload_errors_here(
    version: Any, schema: dict[str, Any], payload: dict[str, Any]
) -> list[dict[str, Any]]:
    """``PayloadChecks.errors`` of this process."""
    return await PROCESS_CHECKS.errors(version, schema, payload)
