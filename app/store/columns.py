"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from sqlalchemy import JSON, DateTime, Text, TypeDecorator, cast

from taskhub.json_codec import dump_json, load_json


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
