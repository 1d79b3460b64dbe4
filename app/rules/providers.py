"""Rules of providers (docs/protocol.md, "Providers"): their names, who sees them, the
request hash of a read (exactly zndraw-joblib 0.1.7's), and how long a read waits. Pure."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from taskhub.rules.errors import (
    DomainError,
    Forbidden,
    InvalidCategory,
    ValidationFailed,
)
from taskhub.rules.naming import (
    GLOBAL_ROOM,
    INTERNAL_ROOM,
    MAX_CATEGORY_LENGTH,
    MAX_JOB_NAME_LENGTH,
    split_full_name,
    validate_room_id,
    visible_job_rooms,
)
from taskhub.rules.records import Principal

MAX_PROVIDER_NAME_LENGTH = MAX_JOB_NAME_LENGTH
MAX_CONTENT_TYPE_LENGTH = 255
# ``type/subtype`` and optional parameters, visible ASCII and spaces only: it is sent back
# as the ``Content-Type`` of every read (no CR/LF may reach a header).
_CONTENT_TYPE = re.compile(r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+(?:\s*;[ -~]*)?$")
_PREFER_WAIT = re.compile(r"\bwait=(\d+)\b")  # zndraw-joblib's own reading of ``Prefer``
# Seconds a reader whose wait ran out is told to wait before asking again (zndraw-joblib's).
RETRY_AFTER_SECONDS = 2
# ``X-Result-Status`` of a result that is a failure of the provider's read.
ERROR_RESULT = "error"


class ProviderNotFound(DomainError):
    slug, title, status = "provider-not-found", "Provider not found", 404


class ProviderTimeout(DomainError):
    """The provider did not answer the read within the wait (zndraw-joblib's 504)."""

    slug, title, status = "provider-timeout", "Gateway Timeout", 504
    retry_after = RETRY_AFTER_SECONDS


class ProviderExecutionFailed(DomainError):
    """A provider's read failed (``X-Result-Status: error``); the problem it posted is
    replayed to its readers, at its own status (this one's when it names none)."""

    slug, title, status = "provider-execution-failed", "Provider execution failed", 400


@dataclass(frozen=True, slots=True)
class ProviderName:
    room_id: str
    category: str
    name: str

    @property
    def full_name(self) -> str:
        return f"{self.room_id}:{self.category}:{self.name}"

    @classmethod
    def parse(cls, full_name: str) -> ProviderName:
        """Split ``room:category:name``; anything malformed is an unknown provider (404)."""
        parts = split_full_name(full_name)
        if parts is None:
            raise ProviderNotFound(f"Provider {full_name!r} not found.")
        return cls(*parts)


@dataclass(frozen=True, slots=True)
class ProviderRecord:
    """A provider as stored. ``user_id``/``worker_id`` None: an ``@internal`` one."""

    id: UUID
    room_id: str
    category: str
    name: str
    schema: dict[str, Any]
    content_type: str
    user_id: UUID | None
    worker_id: UUID | None
    created_at: datetime

    @property
    def full_name(self) -> str:
        return f"{self.room_id}:{self.category}:{self.name}"

    @property
    def is_internal(self) -> bool:
        return self.room_id == INTERNAL_ROOM


def visible_provider_rooms(room_id: str) -> tuple[str, ...]:
    """The rooms whose providers a room sees: as for jobs, its own, ``@global``'s and
    ``@internal``'s (from a reserved room, that room's only)."""
    return visible_job_rooms(room_id)


def visible_name(room_id: str, full_name: str) -> ProviderName:
    """``full_name`` parsed, if ``room_id`` may see providers of its room, else 404."""
    parsed = ProviderName.parse(full_name)
    if parsed.room_id not in visible_provider_rooms(room_id):
        raise ProviderNotFound(f"Provider {full_name!r} is not visible from room {room_id!r}.")
    return parsed


def check_registration(
    principal: Principal,
    room_id: str,
    category: str,
    name: str,
    *,
    allowed: list[str] | None,
    superuser_only: list[str],
) -> None:
    """Who may register which provider: ``@internal`` ones are the hub's (403), ``@global``
    ones and those of a superuser-only category are superusers' (403); the category is one
    of ``allowed`` (None: any, 400); the name is 1..128 characters without ':' (422)."""
    validate_room_id(room_id)
    if room_id == INTERNAL_ROOM:
        raise Forbidden("@internal providers are the hub's own: they cannot be registered.")
    if room_id == GLOBAL_ROOM and not principal.is_superuser:
        raise Forbidden("Only superusers may register providers in '@global'.")
    if not 0 < len(category) <= MAX_CATEGORY_LENGTH or ":" in category:
        raise InvalidCategory(
            f"A provider category is 1 to {MAX_CATEGORY_LENGTH} characters without ':'."
        )
    if allowed is not None and category not in allowed:
        raise InvalidCategory(
            f"Provider category {category!r} is not one of: {', '.join(allowed) or '(none)'}."
        )
    if category in superuser_only and not principal.is_superuser:
        raise Forbidden(f"Only superusers may register providers of category {category!r}.")
    validate_provider_name(name)


def validate_provider_name(name: str) -> str:
    if not name or ":" in name or len(name) > MAX_PROVIDER_NAME_LENGTH:
        raise ValidationFailed(
            f"Provider name must be 1..{MAX_PROVIDER_NAME_LENGTH} characters without ':'.",
            errors=[{"loc": ["body", "name"], "msg": "invalid provider name"}],
        )
    return name


def validate_content_type(content_type: str) -> str:
    """A media type fit to be sent back as a ``Content-Type`` header (422 otherwise)."""
    if len(content_type) > MAX_CONTENT_TYPE_LENGTH or not _CONTENT_TYPE.match(content_type):
        raise ValidationFailed(
            "content_type must be a media type (type/subtype, optional parameters), at most "
            f"{MAX_CONTENT_TYPE_LENGTH} visible ASCII characters.",
            errors=[{"loc": ["body", "content_type"], "msg": "not a media type"}],
        )
    return content_type


def may_see(principal: Principal, category: str, superuser_only: list[str]) -> bool:
    """Whether ``principal`` may see (list, read) a provider of ``category``."""
    return principal.is_superuser or category not in superuser_only


def check_may_see(principal: Principal, category: str, superuser_only: list[str]) -> None:
    if not may_see(principal, category, superuser_only):
        raise Forbidden(f"Providers of category {category!r} are for superusers only.")


def canonical_params(params: Mapping[str, Any]) -> str:
    """The read's parameters as zndraw-joblib writes them: compact JSON, keys sorted,
    non-ASCII escaped (``json.dumps`` defaults). Sent as ``provider_request``'s ``params``."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def request_hash(params: Mapping[str, Any]) -> str:
    """zndraw-joblib 0.1.7's request hash: SHA-256 (hex) of ``canonical_params``."""
    return hashlib.sha256(canonical_params(params).encode()).hexdigest()


def read_wait(prefer: str | None, *, default: int, most: int) -> tuple[int, bool]:
    """How long a read waits for its result, and whether the client asked (``Prefer:
    wait=N``, then ``min(N, most)``, answered with ``Preference-Applied``); else
    ``default``."""
    match = _PREFER_WAIT.search(prefer) if prefer else None
    if match is None:
        return default, False
    digits = match.group(1).lstrip("0") or "0"
    asked = most + 1 if len(digits) > len(str(most)) else int(digits)
    return min(asked, most), True


MAX_ERROR_DETAIL = 65_536  # characters of a failed read's text kept as its problem's detail


def failed_read_problem(raw: bytes) -> dict[str, Any]:
    """The problem a failed read (``X-Result-Status: error``) is replayed as: the JSON object
    the provider posted, with ``type``, ``title`` and an error ``status`` (400..599) filled
    in where it has none (``ProviderExecutionFailed``'s); any other body becomes that
    problem's ``detail``."""
    try:
        body = json.loads(raw) if raw.strip() else None
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        text = raw.decode("utf-8", errors="replace")[:MAX_ERROR_DETAIL]
        body = {"detail": text or "The provider's read failed."}
    status = body.get("status")
    if type(status) is not int or not 400 <= status <= 599:
        body["status"] = ProviderExecutionFailed.status
    body.setdefault("type", f"/v1/problems/{ProviderExecutionFailed.slug}")
    body.setdefault("title", ProviderExecutionFailed.title)
    return body
