"""The JSON module Socket.IO and Engine.IO encode and decode packets with (the ``json``
option of ``socketio.AsyncServer``): orjson, where the standard library took 27 ms of the
event loop for a ``task_status_event`` carrying a 0.8 MB result (36,000 3-D points), which
every room that watches the task gets; orjson takes 1.7 ms.

The text differs from the standard library's only in spelling, not in value: characters
beyond ASCII are written as they are (not as ``\\u`` escapes), and NaN or an infinity as
``null`` (the standard library wrote ``NaN``, which is not JSON). Integers beyond 64 bits
are exact, and records read as in HTTP answers (``wire_json``: datetimes with ``Z``); what
comes in is read exactly as the standard library reads it.
"""

from __future__ import annotations

from typing import Any

from taskhub.json_codec import load_json, wire_json


def dumps(value: Any, **_options: Any) -> str:
    """JSON text of ``value``, compact (the ``separators`` the callers pass are orjson's)."""
    return wire_json(value).decode()


def loads(text: str, **_options: Any) -> Any:
    return load_json(text)
