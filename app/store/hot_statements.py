"""The hot statements, run straight on the driver.

A request of the task cycle (submit, claim, running, completed) is a few short statements.
Executed through SQLAlchemy, each one also pays for the engine's per-execution machinery
(cache-key lookup, parameter construction, execution context, result metadata, a greenlet
switch) — more server CPU than the database spends on it. A statement marked ``hot`` is
compiled once per dialect and, on a ``HotConnection``, sent to the driver as it is: its
parameters and rows go through the same type processors SQLAlchemy would apply (so values
look exactly alike either way), but nothing else. Any other statement, and a hot one on a
plain ``AsyncConnection``, runs through SQLAlchemy as usual.

Relies on ``Compiled.positiontup`` and ``Compiled._result_columns`` of the SQLAlchemy 2.0
series (pinned in ``pyproject.toml``); every test of the suite runs through this path.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast
from weakref import WeakKeyDictionary

import asyncpg
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import DQLDMLClauseElement
from sqlalchemy.types import TypeEngine

if TYPE_CHECKING:
    from taskhub.store.sqlite_driver import OneHopConnection

S = TypeVar("S", bound=Executable)
_REGISTRY: dict[int, HotStatement] = {}
Processor = Callable[[Any], Any] | None


def hot(statement: S) -> S:
    """Mark ``statement`` to run straight on the driver on a ``HotConnection`` (the object
    is kept alive here, so its identity stays its key)."""
    _REGISTRY.setdefault(id(statement), HotStatement(statement))
    return statement


class HotStatement:
    """A statement and, per dialect, its compiled form."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        # Per dialect object (an engine's): it goes when its engine does.
        self._compiled: WeakKeyDictionary[Dialect, Compiled] = WeakKeyDictionary()

    def compiled(self, dialect: Dialect) -> Compiled:
        found = self._compiled.get(dialect)
        if found is None:
            found = self._compiled[dialect] = Compiled(self.statement, dialect)
        return found


_REQUIRED = object()


class Compiled:
    """SQL text, how to turn named parameters into the driver's positional ones, and how
    to turn the driver's rows into typed ones."""

    def __init__(self, statement: Executable, dialect: Dialect) -> None:
        # A hot statement is a SELECT, an INSERT/UPDATE/DELETE or a text statement: a
        # ``DQLDMLClauseElement`` as well as ``Executable`` (one type cannot say both), so
        # it compiles to a ``SQLCompiler``.
        compiled = cast(DQLDMLClauseElement, statement).compile(dialect=dialect)
        if not dialect.positional or compiled.positiontup is None:
            raise ValueError(f"{dialect.name}: hot statements need a positional paramstyle")
        if compiled.post_compile_params or compiled.literal_execute_params:
            raise ValueError("hot statements cannot expand parameters at execution time")
        self.sql = compiled.string
        binds = compiled.binds
        # Per positional parameter: its name, its default, its processor, and whether a
        # None value may skip that processor.
        self._params: list[tuple[str, Any, Processor, bool]] = []
        for name in compiled.positiontup:
            bind = binds[name]
            processor = _bind_processor(bind.type, dialect)
            default = _REQUIRED if bind.required else bind.effective_value
            skips_none = processor is not None and _keeps_none(processor)
            self._params.append((name, default, processor, skips_none))
        self._columns = [column[3] for column in compiled._result_columns]
        self._keys = [column[0] for column in compiled._result_columns] or None
        self._row_type: _RowType | None = _row_type(self._keys) if self._keys else None
        self._rows_typed = False
        # (column index, processor, whether None may skip it) of each processed column
        self._convert: list[tuple[int, Callable[[Any], Any], bool]] = []
        if dialect.name != "postgresql":  # result processors need no column type codes
            self.type_rows(dialect, [None] * len(self._columns))

    @property
    def rows_typed(self) -> bool:
        return self._rows_typed

    def type_rows(self, dialect: Dialect, type_codes: Sequence[Any]) -> None:
        """Set up the result processors, given the driver's type code of each column
        (PostgreSQL's numeric types are read differently depending on it). A text
        statement has no known columns: its values stay as the driver gives them."""
        processors = (
            [
                _result_processor(column, dialect, code)
                for column, code in zip(self._columns, type_codes, strict=True)
            ]
            if self._columns
            else []
        )
        self._convert = [
            (index, processor, _keeps_none(processor))
            for index, processor in enumerate(processors)
            if processor is not None
        ]
        self._rows_typed = True

    def arguments(self, params: dict[str, Any]) -> list[Any]:
        values = []
        for name, default, processor, skip_none in self._params:
            value = params.get(name, default)
            if value is _REQUIRED:
                raise KeyError(f"missing value for bind parameter {name!r}")
            if processor is not None and (value is not None or not skip_none):
                value = processor(value)
            values.append(value)
        return values

    def rows(self, raw: Sequence[Sequence[Any]], keys: Sequence[str] | None) -> list[Any]:
        """Typed rows with attribute access; ``keys`` names the columns of a statement whose
        columns SQLAlchemy does not know (text)."""
        row_type = self._row_type or _row_type(list(keys or ()))
        convert = self._convert
        if not convert:
            return [row_type._make(row) for row in raw]
        typed = []
        for row in raw:
            values = list(row)
            for index, processor, skip_none in convert:
                value = values[index]
                if value is not None or not skip_none:
                    values[index] = processor(value)
            typed.append(row_type._make(values))
        return typed


def _keeps_none(processor: Callable[[Any], Any]) -> bool:
    """Whether ``processor`` turns None into None (most do; JSON's bind processor does not:
    it writes JSON ``null``), so that a None value may skip the call."""
    try:
        return processor(None) is None
    except Exception:  # it cannot take None: it must always be called
        return False


def _bind_processor(type_: TypeEngine[Any], dialect: Dialect) -> Processor:
    return type_.dialect_impl(dialect).bind_processor(dialect)


def _result_processor(type_: TypeEngine[Any], dialect: Dialect, type_code: Any) -> Processor:
    return type_.dialect_impl(dialect).result_processor(dialect, type_code)


class _RowType(Protocol):
    """A row class made by ``namedtuple`` (what ``Compiled.rows`` uses of it)."""

    def _make(self, iterable: Iterable[Any]) -> tuple[Any, ...]: ...


_ROW_TYPES: dict[tuple[str, ...], _RowType] = {}


def _row_type(keys: list[str]) -> _RowType:
    key = tuple(keys)
    found = _ROW_TYPES.get(key)
    if found is None:
        # typeshed types a ``namedtuple`` made of field names known only at run time as a
        # plain ``type[tuple]``, without the namedtuple class's ``_make``.
        found = _ROW_TYPES[key] = cast(_RowType, namedtuple("HotRow", key, rename=True))
    return found


class HotResult:
    """The rows of a hot statement (the part of SQLAlchemy's ``Result`` that callers use)."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def first(self) -> Any | None:
        return self._rows[0] if self._rows else None

    def all(self) -> list[Any]:
        return self._rows

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class HotConnection:
    """A connection whose hot statements skip SQLAlchemy's execution machinery (the
    subclass of each driver sends SQL text and positional arguments to ``driver``); other
    statements run on a SQLAlchemy connection, opened by ``open_sa`` only when one is first
    needed (or given as ``sa``). ``close`` releases it."""

    def __init__(
        self,
        driver: Any,
        dialect: Dialect,
        *,
        sa: AsyncConnection | None = None,
        open_sa: Callable[[], AbstractAsyncContextManager[AsyncConnection]] | None = None,
    ) -> None:
        self._driver = driver
        self.dialect = dialect
        self._sa = sa
        self._open_sa = open_sa
        self._opened: AbstractAsyncContextManager[AsyncConnection] | None = None

    async def execute(self, statement: Executable, params: dict[str, Any] | None = None) -> Any:
        entry = _REGISTRY.get(id(statement))
        if entry is None or entry.statement is not statement:
            return await (await self.sa()).execute(statement, params)
        compiled = entry.compiled(self.dialect)
        raw, keys = await self._fetch(compiled, compiled.arguments(params or {}))
        return HotResult(compiled.rows(raw, keys))

    async def scalar(self, statement: Executable, params: dict[str, Any] | None = None) -> Any:
        return (await self.execute(statement, params)).scalar()

    async def scalars(self, statement: Executable, params: dict[str, Any] | None = None) -> Any:
        return await (await self.sa()).scalars(statement, params)

    async def sa(self) -> AsyncConnection:
        """The SQLAlchemy connection for statements that are not hot."""
        if self._sa is None:
            assert self._open_sa is not None
            self._opened = self._open_sa()
            self._sa = await self._opened.__aenter__()
        return self._sa

    async def close(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            await opened.__aexit__(None, None, None)

    async def _fetch(self, compiled: Compiled, args: list[Any]) -> tuple[Sequence[Any], list[str]]:
        raise NotImplementedError


class SQLiteHotConnection(HotConnection):
    """On ``sqlite_driver.OneHopConnection`` (grouped with other requests' statements on
    the writer)."""

    _driver: OneHopConnection

    async def _fetch(self, compiled: Compiled, args: list[Any]) -> tuple[Sequence[Any], list[str]]:
        return await self._driver.run_direct(compiled.sql, args)


def _leaves_connection_usable(error: BaseException) -> bool:
    """An error the server reported about the statement (a constraint, a type): the session
    is fine. Anything else (connection lost, protocol state, cancellation) may not be."""
    return isinstance(error, asyncpg.PostgresError) and not isinstance(
        error, asyncpg.PostgresConnectionError
    )


class AsyncpgHotConnection(HotConnection):
    """On the asyncpg connection under SQLAlchemy's adapter (asyncpg prepares and caches
    each statement itself). ``pooled`` is the SQLAlchemy connection it was checked out as:
    when a statement fails in a way that may have broken the connection (the server went
    away, a cancelled round trip), it is invalidated so that the pool does not hand it out
    again."""

    def __init__(self, driver: Any, dialect: Dialect, *, pooled: AsyncConnection, **kw: Any):
        super().__init__(driver, dialect, **kw)
        self._pooled = pooled

    async def _fetch(self, compiled: Compiled, args: list[Any]) -> tuple[Sequence[Any], list[str]]:
        driver = self._driver.driver_connection
        try:
            if not compiled.rows_typed:  # once per statement: the type of each column
                prepared = await driver.prepare(compiled.sql)
                codes = [attribute.type.oid for attribute in prepared.get_attributes()]
                compiled.type_rows(self.dialect, codes)
            records = await driver.fetch(compiled.sql, *args)
        except BaseException as error:
            if driver.is_closed() or not _leaves_connection_usable(error):
                await self._pooled.invalidate()
            raise
        return records, list(records[0].keys()) if records else []
