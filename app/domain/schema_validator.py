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
- Every keyword application counts against the validation's budget, if it has one
  (``errors_within``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextvars import ContextVar
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


def _pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, _schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = sorted(
        key
        for key in instance
        if key not in named and not any(_matches(pattern, key) for pattern in patterns)
    )
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in extras)
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


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
        key = _json_key(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


class TooCostly(Exception):
    """Validating a payload took more keyword applications than its budget allows."""


class Budget:
    """Keyword applications one validation may still make (``counted``)."""

    def __init__(self, applications: int) -> None:
        self.remaining = applications


_BUDGET: ContextVar[Budget | None] = ContextVar("validation_budget", default=None)


def errors_within(validator: Any, instance: Any, applications: int) -> list[Any]:
    """``validator``'s errors for ``instance``, applying at most ``applications`` keywords
    (``TooCostly`` past them)."""
    token = _BUDGET.set(Budget(applications))
    try:
        return list(validator.iter_errors(instance))
    finally:
        _BUDGET.reset(token)


def _counted(keyword: Any) -> Any:
    @functools.wraps(keyword)
    def apply(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        spent = _BUDGET.get()
        if spent is not None:
            spent.remaining -= 1
            if spent.remaining < 0:
                raise TooCostly
        return keyword(validator, value, instance, schema)

    return apply


_LINEAR_TIME_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}
# Every keyword counts against the budget of the validation it runs in (if any): a bound on
# the work of one payload whatever its schema (``app/domain/schema_cost.py`` bounds the
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
