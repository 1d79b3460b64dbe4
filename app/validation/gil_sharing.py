"""Work on a thread of its own that holds the GIL for long (a costly payload, a big schema:
up to seconds of pure Python) hands it back to the event loop sooner while it runs.

CPython makes the thread holding the GIL give it up once another has waited for it the
switch interval (5 ms by default). A request the event loop serves needs the GIL many times
(on SQLite every statement hands over to the driver's thread and back), each time waiting
up to that interval behind the busy thread. While such work runs, the process's switch
interval is 1 ms instead (and back to what it was when the last of them ends). Measured with
``python -m benchmarks documents`` (six 250 kB schemas registered at once, a bystander
submitting small tasks): its p50 went from 38 to 12 ms on SQLite and from 18 to 5-6 ms on
PostgreSQL, and it got about 2.5 times as many submits through, the registrations taking
as long.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

SHARING_INTERVAL_SECONDS = 0.001

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_sharing = 0  # threads inside ``sharing_the_gil``
_usual = sys.getswitchinterval()  # the interval to go back to


@contextlib.contextmanager
def sharing_the_gil() -> Iterator[None]:
    """While the block runs (on any thread), the GIL changes hands within 1 ms."""
    global _sharing, _usual
    with _lock:
        if _sharing == 0:
            _usual = sys.getswitchinterval()
            sys.setswitchinterval(min(_usual, SHARING_INTERVAL_SECONDS))
        _sharing += 1
    try:
        yield
    finally:
        with _lock:
            _sharing -= 1
            if _sharing == 0:
                sys.setswitchinterval(_usual)


def shared(function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``function(*args, **kwargs)`` inside ``sharing_the_gil`` (for an executor)."""
    with sharing_the_gil():
        return function(*args, **kwargs)
