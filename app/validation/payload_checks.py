"""Where a submitted payload is validated: on the event loop while that stays cheap (almost
every payload: microseconds), else on a thread of its own, so that one costly payload (up
to ``TASKHUB_PAYLOAD_VALIDATION_SECONDS`` of CPU) does not stop every other request of the
process. The caller holds no database connection meanwhile.

A payload that has not passed after ``INLINE_VALIDATION_SECONDS`` on the event loop starts
over on the validation thread with the full budget. The thread takes one payload at a time
(the GIL lets no more run at once) and its deadline counts only its own CPU time, so a
payload waiting its turn is judged as if it had been first. At most ``MOST_WAITING``
payloads of submits wait or run there per process, and at most ``most_waiting_per_user``
of one user's (``TASKHUB_USER_MAX_COSTLY_VALIDATIONS``, so that one user's stream of them
leaves room for everyone else's); past either, a costly submit is refused with 503 and
``Retry-After`` (each holds its parsed payload meanwhile), while cheap ones go on as before.

A payload validated for a task that runs in the background (``ValidatePayload``) is not
refused: it waits for its turn in a queue of its user's, and takes one of that same
user's places on the thread when it gets there. A user's background payloads never hold
more than the user's share of the thread; while they hold it, that user's costly submits
are the ones refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections import Counter, deque
from typing import Any, Protocol

from taskhub.rules.errors import ValidationBusy
from taskhub.settings import Settings
from taskhub.validation.gil_sharing import shared
from taskhub.validation.payloads import (
    MAX_VALIDATION_SECONDS,
    compiled_validator,
    errors_in_full,
    errors_within_seconds,
    raise_for,
)
from taskhub.validation.schema_validator import TooCostly

# CPU seconds a payload may take on the event loop before it goes to the thread (1,000 to
# 2,500 keyword applications here: a typical payload of a few KiB needs far fewer).
INLINE_VALIDATION_SECONDS = 0.005
MOST_WAITING = 8
# Until the process's settings say (``create_app``): the setting's default.
_DEFAULT_PER_USER: int = Settings.model_fields["user_max_costly_validations"].default


class ThreadObserver(Protocol):
    """What the process's metrics learn of the payload thread (called on either thread)."""

    def queued(self) -> None: ...  # a costly payload goes to the thread

    def finished(self) -> None: ...  # the thread is done with one (valid or not)

    def refused(self) -> None: ...  # a costly payload refused with 503 (too many waiting)


class _Unobserved:
    def queued(self) -> None:
        pass

    def finished(self) -> None:
        pass

    def refused(self) -> None:
        pass


class _Turn:
    """A background payload waiting for its user's place on the thread: woken (on its own
    loop) whenever it may have one."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.woken = asyncio.Event()

    def wake(self) -> None:
        """From any thread (nothing if its loop has closed: nobody waits there any more)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.woken.set)


class PayloadChecks:
    """Validates payloads on the event loop or, when costly, on a thread of its own (see the
    module). One per process; methods are called on the event loop's thread."""

    def __init__(
        self,
        inline_seconds: float = INLINE_VALIDATION_SECONDS,
        most_waiting: int = MOST_WAITING,
        most_waiting_per_user: int = _DEFAULT_PER_USER,
    ) -> None:
        self._inline_seconds = inline_seconds
        self.deadline_seconds = MAX_VALIDATION_SECONDS  # on the thread (a setting's)
        self._most_waiting = most_waiting
        # One user's payloads at the thread at once (a setting's).
        self.most_waiting_per_user = most_waiting_per_user
        self._waiting: Counter[Any] = Counter()  # by user (None: a payload of nobody's)
        self._turns: dict[Any, deque[_Turn]] = {}  # background payloads waiting, by user
        self._waiting_lock = threading.Lock()  # released on the thread
        self._observer: ThreadObserver = _Unobserved()
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="taskhub-payloads"
        )

    def configure(self, settings: Settings) -> None:
        """Take the process's bounds from its settings."""
        self.deadline_seconds = settings.payload_validation_seconds
        self.most_waiting_per_user = settings.user_max_costly_validations

    def observe(self, observer: ThreadObserver) -> None:
        """Tell ``observer`` what goes on at the thread from now on (the process's metrics)."""
        self._observer = observer

    @property
    def waiting(self) -> int:
        """Payloads waiting for the validation thread or running on it."""
        return self._waiting.total()

    def waiting_of(self, user: Any) -> int:
        """``user``'s payloads waiting for the validation thread or running on it (not
        those of its background ones still waiting for the user's turn)."""
        with self._waiting_lock:
            return self._waiting[user]

    async def check(
        self, version: Any, schema: dict[str, Any], payload: dict[str, Any], user: Any = None
    ) -> None:
        """422 unless ``payload`` matches this ``version`` of a job's ``schema``
        (``payloads.validate_payload``); 503 ``validation-busy`` if it is costly and the
        thread already has ``most_waiting`` payloads, or ``most_waiting_per_user`` of
        ``user``'s."""
        raise_for(await self.errors(version, schema, payload, user))

    async def errors(
        self,
        version: Any,
        schema: dict[str, Any],
        payload: dict[str, Any],
        user: Any = None,
        *,
        bounded: bool = True,
    ) -> list[dict[str, Any]]:
        """``payloads.payload_errors``, found on the event loop or on the thread; not
        ``bounded``: a costly payload is not refused but waits for ``user``'s turn (see the
        module)."""
        if not schema:  # {} accepts every payload
            return []
        validator = compiled_validator(version, schema)
        try:
            return errors_within_seconds(validator, payload, self._inline_seconds)
        except TooCostly:
            return await self._on_the_thread(validator, payload, user, bounded)

    async def _on_the_thread(
        self, validator: Any, payload: dict[str, Any], user: Any, bounded: bool
    ) -> list[dict[str, Any]]:
        if bounded:
            with self._waiting_lock:
                self._refuse_past_the_bounds(user)
                self._waiting[user] += 1
        else:
            await self._take_turn(user)
        self._observer.queued()
        deadline = self.deadline_seconds
        done = self._thread.submit(shared, errors_in_full, validator, payload, deadline)
        # Counted until the thread is done with it, even if the request goes away first
        # (a running validation cannot be stopped): a client that hangs up and submits
        # again does not get past the bound.
        done.add_done_callback(functools.partial(self._release, user))
        return await asyncio.wrap_future(done)

    async def _take_turn(self, user: Any) -> None:
        """Wait until this payload is the first of ``user``'s background ones and ``user``
        has fewer than ``most_waiting_per_user`` at the thread, then count it there."""
        turn = _Turn(asyncio.get_running_loop())
        with self._waiting_lock:
            queue = self._turns.setdefault(user, deque())
            queue.append(turn)
        try:
            while True:
                with self._waiting_lock:
                    if queue[0] is turn and self._waiting[user] < self.most_waiting_per_user:
                        queue.popleft()
                        if not queue:
                            del self._turns[user]
                        self._waiting[user] += 1
                        self._wake_next(user)  # room for more than one
                        return
                    turn.woken.clear()
                await turn.woken.wait()
        except BaseException:  # cancelled while waiting: the next one may have its place
            with self._waiting_lock:
                if turn in queue:
                    queue.remove(turn)
                    if not queue and self._turns.get(user) is queue:
                        del self._turns[user]
                self._wake_next(user)
            raise

    def _wake_next(self, user: Any) -> None:
        """Wake ``user``'s first background payload if the user has room at the thread
        (with the lock held, on either thread)."""
        queue = self._turns.get(user)
        if queue and self._waiting[user] < self.most_waiting_per_user:
            queue[0].wake()

    def _refuse_past_the_bounds(self, user: Any) -> None:
        """503 if the thread has ``most_waiting`` payloads, or ``user``'s bound of them."""
        if user is not None and self._waiting[user] >= self.most_waiting_per_user:
            self._observer.refused()
            raise ValidationBusy(
                f"{self._waiting[user]} of your costly payloads are being validated "
                "already; send the next one when they are done (or send a smaller payload)."
            )
        if self._waiting.total() >= self._most_waiting:
            self._observer.refused()
            raise ValidationBusy(
                f"{self._waiting.total()} costly payloads are being validated here "
                "already; try again shortly (or send a smaller payload)."
            )

    def _release(self, user: Any, _done: concurrent.futures.Future[Any]) -> None:
        with self._waiting_lock:
            self._waiting[user] -= 1
            if not self._waiting[user]:
                del self._waiting[user]
            self._wake_next(user)
        self._observer.finished()


PROCESS_CHECKS = PayloadChecks()


async def check_payload(
    version: Any, schema: dict[str, Any], payload: dict[str, Any], user: Any = None
) -> None:
    """``PayloadChecks.check`` of this process."""
    await PROCESS_CHECKS.check(version, schema, payload, user)


async def payload_errors_here(
    version: Any, schema: dict[str, Any], payload: dict[str, Any], user: Any = None
) -> list[dict[str, Any]]:
    """``PayloadChecks.errors`` of this process for a task that runs in the background,
    submitted by ``user``: not refused, a costly payload waits for ``user``'s turn."""
    return await PROCESS_CHECKS.errors(version, schema, payload, user, bounded=False)
