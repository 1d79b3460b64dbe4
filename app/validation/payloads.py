"""Payloads are validated against their job's JSON Schema (draft 2020-12) at submit, and a
job's schema must itself be a valid JSON Schema at registration, whose references
(``$ref``, ``$dynamicRef``) all resolve within it and never loop on the same payload
(``app/validation/schema_references.py``), that applies a bounded number of its subschemas to
any one payload value (``app/validation/schema_cost.py``), and whose patterns run in linear
time (``app/validation/schema_validator.py``). A payload's validation has a budget of keyword
applications besides."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, TypeVar

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from taskhub.json_codec import exact_json
from taskhub.rules.errors import ValidationFailed
from taskhub.validation.schema_cost import MAX_APPLICATIONS_PER_VALUE, applications_per_value
from taskhub.validation.schema_references import endless_references, unresolved_references
from taskhub.validation.schema_validator import (
    LinearTimeValidator,
    TooCostly,
    errors_within,
    unusable_patterns,
)

_MAX_ERRORS = 20
# Errors read before the first _MAX_ERRORS by path are chosen: the rest are not built.
_ERRORS_READ = 1_000
_MESSAGE_CHARACTERS = 500
# Bounds on one payload's validation, whatever its schema and payload; past either, 422.
# These are the defaults: ``TASKHUB_PAYLOAD_VALIDATION_SECONDS`` sets the seconds, and the
# applications go with them (``applications_within``).
# Keyword applications: 2 to 7 µs each here; a 1 MiB payload of 3-D points (17,000 of
# them) against its plain schema makes about 120,000 in 0.6 to 0.8 s (a slow spell).
MAX_KEYWORD_APPLICATIONS = 1_000_000
# CPU seconds of the validating thread (``payload_checks.py``: a costly payload's is not the
# event loop's): what the count does not bound, since some keywords do work that grows with
# the schema or the value in one application.
MAX_VALIDATION_SECONDS = 2.0
# Schema bytes (compact JSON) a ``SchemaCache`` keeps by default: thousands of real schemas,
# and at ~24 times in memory under ~400 MB however large the schemas a process meets.
SCHEMA_CACHE_BYTES = 16 * 1024 * 1024
V = TypeVar("V")


class SchemaCache(Generic[V]):
    """Values by key, each counted by its schema's size as compact JSON: while they pass
    ``budget`` bytes the least recently used go, and past ``limit`` entries it starts
    afresh. A value whose schema alone passes the budget is not kept (it would push out
    every other, then itself). Any user may register big schemas: the caches that hold
    them (parsed, up to ~24 times their JSON in memory) are bounded by what they hold."""

    def __init__(self, budget: int = SCHEMA_CACHE_BYTES, limit: int = 10_000) -> None:
        self._budget, self._limit = budget, limit
        self._entries: OrderedDict[Any, tuple[V, int]] = OrderedDict()
        self._bytes = 0

    @property
    def schema_bytes(self) -> int:
        """The kept values' schemas as compact JSON, in bytes."""
        return self._bytes

    def get(self, key: Any) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: Any, value: V, schema: Any) -> None:
        self.forget(key)
        size = schema_bytes(schema)
        if size > self._budget:
            return
        if len(self._entries) >= self._limit:
            self._entries.clear()
            self._bytes = 0
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self._budget:
            _key, (_value, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def forget(self, key: Any) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry[1]


class _Validators(SchemaCache[Any]):
    """Compiled validators by job version (each holds its schema)."""

    def __init__(self, budget: int = SCHEMA_CACHE_BYTES, limit: int = 1024) -> None:
        super().__init__(budget, limit)

    def compiled(self, version: Any, schema: dict[str, Any]) -> Any:
        validator = self.get(version)
        if validator is None:
            validator = LinearTimeValidator(schema, registry=_WITHIN_THE_SCHEMA)
            self.put(version, validator, schema)
        return validator


_validators = _Validators()
# No retrieval: a reference to anything but the schema itself or the JSON Schema
# metaschemas does not resolve (the library's default would fetch URLs, blocking the hub,
# from wherever a schema points).
_WITHIN_THE_SCHEMA: Registry[Any] = METASCHEMAS


# A job's schema, as compact JSON, at registration (422 beyond). Real ones (pydantic's) are
# a few KiB; parsed, a schema takes up to ~24 times its JSON in memory (``[{}, {}, …]``, a
# dict per 3 bytes), and every process caches the schemas it validates against.
MAX_SCHEMA_BYTES = 256 * 1024


def schema_bytes(schema: Any) -> int:
    """The size of ``schema`` as compact JSON, in bytes (UTF-8)."""
    return len(exact_json(schema, orjson.OPT_NON_STR_KEYS))


def check_schema_size(schema: dict[str, Any]) -> int:
    """The schema's size as compact JSON; 422 when larger than ``MAX_SCHEMA_BYTES``."""
    size = schema_bytes(schema)
    if size > MAX_SCHEMA_BYTES:
        raise ValidationFailed(
            f"The job's schema is too large: at most {MAX_SCHEMA_BYTES} bytes "
            f"({MAX_SCHEMA_BYTES // 1024} KiB) as compact JSON.",
            errors=[
                {
                    "loc": ["body", "schema"],
                    "msg": f"{size} bytes as compact JSON; at most {MAX_SCHEMA_BYTES}",
                }
            ],
        )
    return size


def check_schema(schema: dict[str, Any]) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValidationFailed(
            "The job's schema is not a valid JSON Schema.",
            errors=[{"loc": ["body", "schema", *exc.absolute_path], "msg": exc.message}],
        ) from None
    unusable = unusable_patterns(schema)
    if unusable:
        raise ValidationFailed(
            "The job's schema has a pattern the hub will not run.",
            errors=[
                {"loc": ["body", "schema", *path], "msg": reason}
                for path, reason in unusable[:_MAX_ERRORS]
            ],
        )
    root = DRAFT202012.create_resource(schema)
    base = root.id() or ""
    registry = _WITHIN_THE_SCHEMA.with_resource(base, root).crawl()
    unresolved = list(unresolved_references(schema, registry.resolver(base)))
    if unresolved:
        raise ValidationFailed(
            "The job's schema refers to something outside itself or to nothing; only "
            "references within the schema (or to the JSON Schema metaschemas) are allowed.",
            errors=[
                {"loc": ["body", "schema", *path], "msg": f"cannot resolve {ref!r}"}
                for path, ref in unresolved[:_MAX_ERRORS]
            ],
        )
    endless = endless_references(schema, registry.resolver(base))
    if endless:
        raise ValidationFailed(
            "The job's schema refers back to itself without descending into the payload; "
            "validating any payload would never end.",
            errors=[
                {"loc": ["body", "schema", *path], "msg": "leads back to where it started"}
                for path in endless[:_MAX_ERRORS]
            ],
        )
    heaviest = applications_per_value(schema, registry.resolver(base))
    if heaviest > MAX_APPLICATIONS_PER_VALUE:
        raise ValidationFailed(
            f"The job's schema applies more than {MAX_APPLICATIONS_PER_VALUE:,} of its "
            "subschemas to one payload value (its references multiply): validating a payload "
            "would take too long.",
            errors=[
                {
                    "loc": ["body", "schema"],
                    "msg": f"more than {MAX_APPLICATIONS_PER_VALUE:,} subschemas for one value",
                }
            ],
        )


def _cut(message: str) -> str:
    """A message as the 422 lists it: jsonschema's own keywords quote whole values."""
    if len(message) <= _MESSAGE_CHARACTERS:
        return message
    return f"{message[: _MESSAGE_CHARACTERS - 1]}…"


def validate_payload(version: Any, schema: dict[str, Any], payload: dict[str, Any]) -> None:
    """Raise 422 listing the failing paths. ``version`` identifies this schema of this job
    (e.g. ``(job_id, updated_at)``) so its compiled validator is reused. This and
    ``payload_errors`` validate on the calling thread with the default budget; the hub
    itself goes through ``payload_checks`` (the event loop kept free, its setting)."""
    raise_for(payload_errors(version, schema, payload))


def raise_for(errors: list[dict[str, Any]]) -> None:
    """422 for a payload's ``errors`` (``payload_errors``), if there are any."""
    if errors:
        raise ValidationFailed(
            "The payload does not match the job's schema.",
            errors=[
                {"loc": ["body", "payload", *error["loc"]], "msg": error["msg"]} for error in errors
            ],
        )


def payload_errors(
    version: Any, schema: dict[str, Any], payload: dict[str, Any]
) -> list[dict[str, Any]]:
    """``{"loc", "msg"}`` of the first failures of ``payload`` (loc: its path in the
    payload), by path; none when it matches. A validation that would apply more than
    ``MAX_KEYWORD_APPLICATIONS`` keywords, or take more than ``MAX_VALIDATION_SECONDS``, is
    refused (422) instead of finishing."""
    if not schema:  # {} accepts every payload (most jobs' schemas are not empty)
        return []
    return errors_in_full(compiled_validator(version, schema), payload)


def compiled_validator(version: Any, schema: dict[str, Any]) -> Any:
    """The validator of this version of a job's schema, compiled once (kept within a budget
    of schema bytes; not thread-safe: call it on one thread)."""
    return _validators.compiled(version, schema)


def errors_in_full(
    validator: Any, payload: dict[str, Any], seconds: float = MAX_VALIDATION_SECONDS
) -> list[dict[str, Any]]:
    """``errors_within`` the full budget of ``seconds`` (and the keyword applications that
    go with them); 422 past it."""
    try:
        return errors_within_seconds(validator, payload, seconds)
    except TooCostly:
        raise ValidationFailed(
            f"Checking this payload against the job's schema would take more than "
            f"{applications_within(seconds):,} steps or {seconds:g} seconds; send a "
            "smaller payload (or register the job with a simpler schema).",
            errors=[{"loc": ["body", "payload"], "msg": "too costly to validate"}],
        ) from None


def applications_within(seconds: float) -> int:
    """The keyword applications a validation of ``seconds`` may make: 1,000,000 for the
    default 2 s (2 to 7 µs each here: the deadline is the bound that counts on a busy
    machine, the count the one that does not depend on the machine)."""
    return round(MAX_KEYWORD_APPLICATIONS * seconds / MAX_VALIDATION_SECONDS)


def errors_within_seconds(
    validator: Any, payload: dict[str, Any], seconds: float
) -> list[dict[str, Any]]:
    """``payload_errors`` by a compiled ``validator`` within ``seconds`` of the calling
    thread's CPU time and the keyword applications that go with them: ``TooCostly`` past
    either."""
    applications = applications_within(seconds)
    try:
        errors = sorted(
            errors_within(validator, payload, applications, seconds, _ERRORS_READ),
            key=lambda e: list(e.absolute_path),
        )
    except Unresolvable as exc:  # a schema registered before references were checked
        raise ValidationFailed(
            "The job's schema has a reference that does not resolve within it; the job must "
            "be registered again with a schema that does.",
            errors=[{"loc": ["body", "payload"], "msg": f"cannot resolve {exc}"}],
        ) from None
    except RecursionError:  # a schema registered before endless references were refused
        raise ValidationFailed(
            "The job's schema refers back to itself without end; the job must be registered "
            "again with a schema that does not.",
            errors=[{"loc": ["body", "payload"], "msg": "the schema's references never end"}],
        ) from None
    return [
        {"loc": list(error.absolute_path), "msg": _cut(error.message)}
        for error in errors[:_MAX_ERRORS]
    ]
