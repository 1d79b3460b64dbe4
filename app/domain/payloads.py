"""Payloads are validated against their job's JSON Schema (draft 2020-12) at submit, and a
job's schema must itself be a valid JSON Schema at registration."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from app.domain.errors import ValidationFailed

_MAX_ERRORS = 20
_CACHE_SIZE = 1024
_validators: OrderedDict[Any, Draft202012Validator] = OrderedDict()


def check_schema(schema: dict[str, Any]) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValidationFailed(
            "The job's schema is not a valid JSON Schema.",
            errors=[{"loc": ["body", "schema", *exc.absolute_path], "msg": exc.message}],
        ) from None


def validate_payload(version: Any, schema: dict[str, Any], payload: dict[str, Any]) -> None:
    """Raise 422 listing the failing paths. ``version`` identifies this schema of this job
    (e.g. ``(job_id, updated_at)``) so its compiled validator is reused."""
    validator = _validators.get(version)
    if validator is None:
        validator = Draft202012Validator(schema)
        _validators[version] = validator
        if len(_validators) > _CACHE_SIZE:
            _validators.popitem(last=False)
    errors = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
    if errors:
        raise ValidationFailed(
            "The payload does not match the job's schema.",
            errors=[
                {"loc": ["body", "payload", *error.absolute_path], "msg": error.message}
                for error in errors[:_MAX_ERRORS]
            ],
        )
