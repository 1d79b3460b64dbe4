"""Payloads are validated against their job's JSON Schema (draft 2020-12) at submit, and a
job's schema must itself be a valid JSON Schema at registration, whose references
(``$ref``, ``$dynamicRef``) all resolve within it and never loop on the same payload
(``app/domain/schema_references.py``), and whose patterns run in linear time
(``app/domain/schema_validator.py``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from app.domain.errors import ValidationFailed
from app.domain.schema_references import endless_references, unresolved_references
from app.domain.schema_validator import LinearTimeValidator, unusable_patterns

_MAX_ERRORS = 20
_CACHE_SIZE = 1024
_validators: OrderedDict[Any, Any] = OrderedDict()
# No retrieval: a reference to anything but the schema itself or the JSON Schema
# metaschemas does not resolve (the library's default would fetch URLs, blocking the hub,
# from wherever a schema points).
_WITHIN_THE_SCHEMA: Registry[Any] = METASCHEMAS


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


def validate_payload(version: Any, schema: dict[str, Any], payload: dict[str, Any]) -> None:
    """Raise 422 listing the failing paths. ``version`` identifies this schema of this job
    (e.g. ``(job_id, updated_at)``) so its compiled validator is reused."""
    validator = _validators.get(version)
    if validator is None:
        validator = LinearTimeValidator(schema, registry=_WITHIN_THE_SCHEMA)
        _validators[version] = validator
        if len(_validators) > _CACHE_SIZE:
            _validators.popitem(last=False)
    try:
        errors = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
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
    if errors:
        raise ValidationFailed(
            "The payload does not match the job's schema.",
            errors=[
                {"loc": ["body", "payload", *error.absolute_path], "msg": error.message}
                for error in errors[:_MAX_ERRORS]
            ],
        )
