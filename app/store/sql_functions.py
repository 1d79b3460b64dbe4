"""SQL expressions spelled per engine: exact durations, and a stored document's size told
without reading it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    LargeBinary,
    and_,
    cast,
    extract,
    func,
    literal_column,
    or_,
)


def duration_microseconds(
    dialect: str, start: ColumnElement[Any], end: ColumnElement[Any]
) -> ColumnElement[int]:
    """``end - start`` (two ``UTCDateTime`` columns) in whole microseconds, exactly: the
    integer ``(end - start) // timedelta(microseconds=1)`` of the Python datetimes, NULL if
    either is NULL. For aggregates computed in the database (``sum``, ``max``) that equal
    Python's over the same rows.

    PostgreSQL: ``extract(epoch from timestamptz)`` is numeric (exact microseconds).
    SQLite stores naive UTC as SQLAlchemy's text ``YYYY-MM-DD HH:MM:SS.ffffff``: whole
    seconds from its first 19 characters (``julianday``'s difference is a double some 50 µs
    coarse at today's dates: rounded to the second it is exact), microseconds from its last
    6 (padded, should a fraction be shorter or missing). Not ``julianday``, ``unixepoch`` or
    ``strftime('%s')`` of the full text: they round it to milliseconds first, so
    ``…:00.999999`` would count as the next second. (``strftime`` of the 19 characters is
    exact too, but a quarter slower over a room's tasks; ``unixepoch`` needs SQLite 3.38.)"""
    if dialect == "postgresql":
        seconds = extract("epoch", end) - extract("epoch", start)
        return cast(seconds * literal_column("1000000"), BigInteger)

    def day_number(moment: ColumnElement[Any]) -> ColumnElement[float]:  # to the second
        return func.julianday(func.substr(moment, 1, 19))

    def microseconds(moment: ColumnElement[Any]) -> ColumnElement[int]:
        padded = moment.op("||")(literal_column("'000000'"))
        return cast(func.substr(padded, 21, 6), Integer)

    days = day_number(end) - day_number(start)
    seconds = cast(func.round(days * literal_column("86400")), Integer)
    return seconds * literal_column("1000000") + (microseconds(end) - microseconds(start))


def document_is_small(dialect: str, column: ColumnElement[Any], limit: int) -> ColumnElement[bool]:
    """Whether a stored JSON document (a ``JSONAsSent`` column; NULL counts as small) holds
    at most ``limit`` bytes, told without reading the document.

    PostgreSQL: ``json`` has no cast to text that leaves it unread (``payload::text`` goes
    through its output function: detoasted and copied, about 4 ms a MB here), so the size
    comes off the stored value (``pg_column_size``), which is the document's own only when
    it is not compressed (``pg_column_compression``, PostgreSQL 14: a compressed one counts
    as big, however small it is stored; PostgreSQL compresses only rows past about 2 kB).
    SQLite: the length of its text as bytes (it reads the text, from the page cache)."""
    if dialect == "postgresql":
        stored = func.pg_column_size(column)
        return or_(
            column.is_(None),
            and_(stored <= limit, func.pg_column_compression(column).is_(None)),
        )
    return func.coalesce(func.length(cast(column, LargeBinary)), literal_column("0")) <= limit
