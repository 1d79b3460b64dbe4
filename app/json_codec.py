"""Exact JSON for every layer: stored documents, answers, Socket.IO packets (orjson, with
integers beyond 64 bits kept exact)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

import orjson


def exact_json(value: Any, option: int = 0, default: Callable[[Any], Any] | None = None) -> bytes:
    """JSON of ``value`` by orjson (``option``, ``default`` as orjson takes them), integers
    beyond 64 bits included: orjson refuses them, so they are then written as their digits.
    NaN and infinities are written as ``null`` (valid JSON, which PostgreSQL requires)."""
    try:
        return orjson.dumps(value, default=default, option=option)
    except orjson.JSONEncodeError:
        return orjson.dumps(_big_integers_as_digits(value), default=default, option=option)


_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


def _big_integers_as_digits(value: Any) -> Any:
    """``value`` with each integer beyond 64 bits as JSON text of its digits."""
    if isinstance(value, dict):
        return {key: _big_integers_as_digits(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_big_integers_as_digits(item) for item in value]
    if isinstance(value, int) and not _INT64_MIN <= value <= _UINT64_MAX:
        return orjson.Fragment(str(value))
    return value


def wire_json(value: Any) -> bytes:
    """JSON as pydantic writes it (datetimes with ``Z``), by ``exact_json``: HTTP answers
    and Socket.IO packets alike, so that a record reads the same over both."""
    return exact_json(value, orjson.OPT_UTC_Z, _uuid_subclass)


def _uuid_subclass(value: Any) -> str:
    """orjson writes ``uuid.UUID`` itself, not a subclass (asyncpg reads UUIDs as one)."""
    if isinstance(value, UUID):
        return str(value)
    raise TypeError


def dump_json(value: Any) -> str:
    """The engines' JSON serializer: ``exact_json`` (orjson is several times faster than
    the standard library on every task's payload and result); keys that are not strings
    become strings, as with the standard library."""
    return exact_json(value, orjson.OPT_NON_STR_KEYS).decode()


# orjson reads an integer beyond 64 bits as a float: a document with a run of 19 digits
# or more (rare) is read by the standard library, which keeps it exact. The run is found by
# mapping every digit to "0" and looking for 19 of them: over a 650 kB document a regular
# expression took 12-17 ms here, this 0.8 ms (and about as long as it over a short one).
_BYTES_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_TEXT_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")


def has_long_digit_run(document: str | bytes) -> bool:
    """Whether ``document`` holds 19 ASCII digits in a row (an integer orjson would read
    as a float)."""
    if isinstance(document, bytes):
        return b"0" * 19 in document.translate(_BYTES_DIGITS_AS_ZERO)
    return "0" * 19 in document.translate(_TEXT_DIGITS_AS_ZERO)


def load_json(text: str) -> Any:
    """The engines' JSON deserializer (see ``dump_json``), reading exactly what the
    standard library would."""
    if not has_long_digit_run(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # NaN or Infinity, written by the standard library
            pass
    return json.loads(text)
