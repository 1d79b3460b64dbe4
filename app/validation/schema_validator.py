"""The validator of job payloads: jsonschema's draft 2020-12 validator with the keywords
that could take more than linear time in the payload replaced.

Any user may register a job, and any member of its room may submit a payload, so neither is
trusted, and validation runs on the event loop (every request in the process waits):

- Patterns (``pattern``, ``patternProperties``) are matched by RE2 in time linear in the
  input. Python's ``re`` backtracks: ``^(a+)+$`` against 30 characters takes seconds.
  Registration refuses what RE2 cannot run (lookaround, backreferences) and the one keyword
  left that would still match with ``re`` (``unevaluatedProperties`` beside
  ``patternProperties``).
- ``uniqueItems`` compares the items by a hashable key (JSON equality: ``1`` equals
  ``1.0``, ``true`` is not ``1``, objects regardless of key order); jsonschema compares
  object items pair by pair, seconds for a few thousand (pydantic writes ``uniqueItems``
  for every ``set`` field).
- ``enum`` looks the value up among the members' keys (a set, by the same JSON equality)
  instead of comparing it with every member: a 20,000-member enum against 100,000 payload
  items had taken minutes. ``const`` compares by the same keys.
- ``properties`` walks the smaller side, the schema's names or the object's keys: a schema
  may name thousands of properties.
- Messages quote values cut short (``_shown``): jsonschema's quote whole values, and a
  union of failing branches quoted a big value once per branch.
- ``anyOf`` and ``oneOf`` stop reading a branch at its first error: only whether it matched
  counts (a failing branch had been read to its end, every error built and kept).
- Every keyword application counts against the validation's budget, if it has one
  (``errors_within``): a number of applications and a deadline. The deadline bounds what no
  count of applications does: keywords whose own work grows with the schema or the value
  (``required``, ``properties``, ``patternProperties`` over many keys, ``$ref`` lookups,
  error messages that quote a big value); the loops written here check it as they go.
"""

from __future__ import annotations

import functools
import itertools
import reprlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators

# Keywords whose values are instances, not schemas (a "pattern" in there is data).
INSTANCE_KEYWORDS = frozenset({"const", "enum", "examples", "default"})
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the client's 422, not a log line


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern, _OPTIONS)


def _matches(pattern: str, text: str) -> bool:
    return _regex(pattern).search(text) is not None


class _ShortRepr(reprlib.Repr):
    """reprlib's cut-short reprs, with an object's first keys in their own order (reprlib
    sorts every key of a dict to pick the first few)."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        pairs = [
            f"{self.repr1(key, level - 1)}: {self.repr1(x[key], level - 1)}"
            for key in itertools.islice(x, self.maxdict)
        ]
        if len(x) > self.maxdict:
            pairs.append("...")
        return "{" + ", ".join(pairs) + "}"


_SHORT = _ShortRepr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlist = _SHORT.maxdict = 8


def _shown(value: Any) -> str:
    """``value`` as a message quotes it: its repr, cut short (a payload may be a mebibyte)."""
    return _SHORT.repr(value)


def _check_deadline() -> None:
    """A step of a loop within one keyword application: spends on the budget of the
    validation this runs in, if it has one, so that its deadline is looked at."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.spend(0)


def _pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{_shown(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, _schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            _check_deadline()
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = sorted(key for key in instance if key not in named and not _matches_any(patterns, key))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in extras)
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


def _matches_any(patterns: list[str], key: str) -> bool:
    if not patterns:
        return False
    _check_deadline()
    return any(_matches(pattern, key) for pattern in patterns)


def _json_key(value: Any) -> Any:
    """A hashable key equal for JSON-equal values, and only for those."""
    if isinstance(value, bool):  # before numbers: True == 1 in Python, not in JSON
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_json_key(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _json_key(item)) for key, item in value.items()))
    return ("null",)


def _unique_items(validator: Any, unique: Any, instance: Any, _schema: Any) -> Iterator[Any]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        _check_deadline()
        key = _json_key(item)
        if key in seen:
            yield ValidationError(f"{_shown(instance)} has non-unique elements")
            return
        seen.add(key)


@dataclass(frozen=True)
class _Members:
    """An ``enum``'s members as ``_json_key``s."""

    keys: frozenset[Any]
    containers: bool  # whether any member is an array or an object


class _EnumMembers:
    """The members of the enums met lately, by the list's identity (an entry holds its list,
    so the id is not reused while the entry lasts), up to ``budget`` members in all: the
    oldest go first, and an enum bigger than the budget is looked at anew each time."""

    def __init__(self, budget: int = 500_000) -> None:
        self._budget = budget
        self._held = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, tuple[list[Any], _Members]] = OrderedDict()

    def of(self, enum: list[Any]) -> _Members:
        entry = self._entries.get(id(enum))
        if entry is not None and entry[0] is enum:
            return entry[1]
        members = _Members(
            keys=frozenset(_json_key(member) for member in enum),
            containers=any(isinstance(member, dict | list) for member in enum),
        )
        if len(enum) > self._budget:
            return members
        with self._lock:  # the event loop and the validation thread both validate
            if id(enum) not in self._entries:  # (unless the other one just put it there)
                self._entries[id(enum)] = (enum, members)
                self._held += len(enum)
                while self._held > self._budget:
                    _, (gone, _) = self._entries.popitem(last=False)
                    self._held -= len(gone)
        return members


_ENUM_MEMBERS = _EnumMembers()


def _enum(validator: Any, enum: list[Any], instance: Any, _schema: Any) -> Iterator[Any]:
    members = _ENUM_MEMBERS.of(enum)
    container = isinstance(instance, dict | list)
    if (container and not members.containers) or _json_key(instance) not in members.keys:
        yield ValidationError(f"{_shown(instance)} is not one of {_shown(enum)}")


def _type(validator: Any, types: Any, instance: Any, _schema: Any) -> Iterator[Any]:
    names = types if isinstance(types, list) else [types]
    if not any(validator.is_type(instance, name) for name in names):
        listed = ", ".join(repr(name) for name in names)
        yield ValidationError(f"{_shown(instance)} is not of type {listed}")


def _properties(
    validator: Any, properties: dict[str, Any], instance: Any, _schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    # Whichever side is smaller is walked: a schema may name thousands of properties.
    keys = instance if len(instance) < len(properties) else properties
    for key in keys:
        if key in instance and key in properties:
            yield from validator.descend(instance[key], properties[key], path=key, schema_path=key)


def _const(validator: Any, const: Any, instance: Any, _schema: Any) -> Iterator[Any]:
    if _json_key(instance) != _json_key(const):
        yield ValidationError(f"{_shown(const)} was expected")


def _first_error(validator: Any, instance: Any, subschema: Any, index: int) -> Any:
    """The first error of ``instance`` against the branch ``subschema`` (None: it matches);
    the rest of the branch is not read."""
    return next(iter(validator.descend(instance, subschema, schema_path=index)), None)


def _any_of(validator: Any, branches: list[Any], instance: Any, _schema: Any) -> Iterator[Any]:
    failures = []
    for index, subschema in enumerate(branches):
        error = _first_error(validator, instance, subschema, index)
        if error is None:
            return
        failures.append(error)
    yield ValidationError(
        f"{_shown(instance)} is not valid under any of the given schemas", context=failures
    )


def _one_of(validator: Any, branches: list[Any], instance: Any, _schema: Any) -> Iterator[Any]:
    failures, matched = [], []
    for index, subschema in enumerate(branches):
        error = _first_error(validator, instance, subschema, index)
        if error is not None:
            failures.append(error)
            continue
        matched.append(subschema)
        if len(matched) == 2:
            yield ValidationError(f"{_shown(instance)} is valid under each of {_shown(matched)}")
            return
    if not matched:
        yield ValidationError(
            f"{_shown(instance)} is not valid under any of the given schemas", context=failures
        )


class TooCostly(Exception):
    """Validating a payload took more keyword applications, or more time, than its budget
    allows."""


class Budget:
    """What one validation may still spend: keyword applications (``counted``), and CPU time
    of the thread validating until its deadline (``time.thread_time``, seconds: the work
    done, however busy the machine). The clock is a system call (~0.8 µs here, a keyword
    application 2 to 7 µs), so it is looked at on every 32nd spend."""

    _LOOK_EVERY = 32

    def __init__(self, applications: int, seconds: float) -> None:
        self.remaining = applications
        self.deadline = time.thread_time() + seconds
        self._spends = 0

    def spend(self, applications: int = 1) -> None:
        """Count ``applications`` (0: a step of a loop within one); ``TooCostly`` past
        either bound."""
        self.remaining -= applications
        self._spends += 1
        if self.remaining < 0 or (
            self._spends % self._LOOK_EVERY == 0 and time.thread_time() > self.deadline
        ):
            raise TooCostly


_BUDGET: ContextVar[Budget | None] = ContextVar("validation_budget", default=None)


def errors_within(
    validator: Any, instance: Any, applications: int, seconds: float, most: int
) -> list[Any]:
    """``validator``'s first ``most`` errors for ``instance``, applying at most
    ``applications`` keywords within ``seconds`` (``TooCostly`` past either)."""
    token = _BUDGET.set(Budget(applications, seconds))
    try:
        return list(itertools.islice(validator.iter_errors(instance), most))
    finally:
        _BUDGET.reset(token)


def _counted(keyword: Any) -> Any:
    @functools.wraps(keyword)
    def apply(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.spend()
        return keyword(validator, value, instance, schema)

    return apply


_LINEAR_TIME_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
    "type": _type,
    "properties": _properties,
    "enum": _enum,
    "const": _const,
    "anyOf": _any_of,
    "oneOf": _one_of,
}
# Every keyword counts against the budget of the validation it runs in (if any): a bound on
# the work of one payload whatever its schema (``app/validation/schema_cost.py`` bounds the
# schema itself at registration).
LinearTimeValidator = validators.extend(
    Draft202012Validator,
    {name: _counted(keyword) for name, keyword in _LINEAR_TIME_KEYWORDS.items()},
)


def unusable_patterns(schema: Any) -> list[tuple[list[str | int], str]]:
    """``(path, reason)`` for each pattern of ``schema`` the hub will not run."""
    problems: list[tuple[list[str | int], str]] = []
    uses_pattern_properties = False
    unevaluated_at: list[str | int] | None = None
    for node, path in _schemas(schema, []):
        if isinstance(node.get("pattern"), str):
            problems += _compile_problem(node["pattern"], [*path, "pattern"])
        if isinstance(node.get("patternProperties"), dict):
            uses_pattern_properties = True
            for pattern in node["patternProperties"]:
                problems += _compile_problem(pattern, [*path, "patternProperties", pattern])
        if "unevaluatedProperties" in node and unevaluated_at is None:
            unevaluated_at = [*path, "unevaluatedProperties"]
    if uses_pattern_properties and unevaluated_at is not None:
        problems.append(
            (unevaluated_at, "not supported together with patternProperties in one schema")
        )
    return problems


def _compile_problem(pattern: str, path: list[str | int]) -> list[tuple[list[str | int], str]]:
    try:
        _regex(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        return [(path, f"a pattern the hub cannot run in linear time: {reason}")]
    return []


def _schemas(node: Any, path: list[str | int]) -> Iterator[tuple[dict[str, Any], list[str | int]]]:
    """Every schema object within ``node``, with its path (instance values left out)."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _schemas(item, [*path, index])
    elif isinstance(node, dict):
        yield node, path
        for key, value in node.items():
            if key not in INSTANCE_KEYWORDS:
                yield from _schemas(value, [*path, key])
