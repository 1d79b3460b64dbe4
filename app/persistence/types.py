"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

import orjson
import uuid_utils.compat as uuid_compat
from sqlalchemy import JSON, DateTime, Text, TypeDecorator, cast


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use UTC-aware ones")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


# Kept as sent, key order and the spelling of numbers included: PostgreSQL's json, not
# jsonb (which orders keys by length, keeps the last of duplicate keys and writes 1e23 as
# 100000000000000000000000). For job schemas, whose property order is the order of the
# page's form fields, and task payloads and results, which a worker and a submitter read as
# they were sent, on SQLite as on PostgreSQL.
JSONAsSent = JSON()


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


class StoredJSONText(TypeDecorator[Any]):
    """A stored JSON document read as its text, to be written into an answer as it is
    (``orjson.Fragment``) instead of decoded and encoded again: for the reads whose rows go
    into answers (a task read alone, claimed or patched, pages of tasks), where a big
    payload or result would otherwise cost milliseconds a MB of the event loop and several
    times its size in Python objects. Select it with ``stored_text(column)``."""

    impl = Text()
    cache_ok = True

    def process_result_value(self, value: str | None, dialect: Any) -> Any:
        return stored_document(value, maybe_not_json=dialect.name == "sqlite")


def stored_text(column: Any) -> Any:
    """A JSON document column (``JSONAsSent``) read as its stored text, for an answer."""
    return cast(column, StoredJSONText())


def stored_document(text: str | None, *, maybe_not_json: bool = True) -> Any:
    """A stored JSON document's text as ``orjson`` writes it into an answer: as it is.
    ``maybe_not_json``: it may hold NaN or an infinity, which an older version's standard
    library fallback (integers beyond 64 bits) wrote on SQLite; PostgreSQL's ``json``
    refuses them (looking costs about a millisecond a MB)."""
    if text is None:
        return None
    if maybe_not_json and ("NaN" in text or "Infinity" in text):
        text = dump_json(load_json(text))  # written again: as null, as answers always have
    return orjson.Fragment(text)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_id() -> UUID:
    """A time-ordered UUIDv7."""
    return uuid_compat.uuid7()
