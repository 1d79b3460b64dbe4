"""Naming rules for rooms, categories and job full names (``room:category:name``)."""

from __future__ import annotations

from dataclasses import dataclass

from taskhub.rules.errors import InvalidCategory, InvalidRoomId, JobNotFound, ValidationFailed

GLOBAL_ROOM = "@global"
INTERNAL_ROOM = "@internal"
RESERVED_ROOMS = frozenset({GLOBAL_ROOM, INTERNAL_ROOM})
MAX_ROOM_ID_LENGTH = 128
MAX_JOB_NAME_LENGTH = 128
UNADDRESSABLE_ROOM_IDS = frozenset({".", ".."})  # URL dot-segments, even percent-encoded
MAX_CATEGORY_LENGTH = 64  # of an allowed category (the setting checks its list)
# The rules below as ECMA-262 regular expressions, for the OpenAPI document (lengths apart).
ROOM_ID_PATTERN = r"^(?:@global|@internal|(?!\.\.?$)[^@:]+)$"
JOB_NAME_PATTERN = r"^[^:]+$"
FULL_NAME_PATTERN = r"^[^:]+:[^:]+:[^:]+$"


def validate_room_id(room_id: str) -> str:
    """Return ``room_id`` if it is ``@global``, ``@internal`` or a plain room id."""
    if room_id in RESERVED_ROOMS:
        return room_id
    if not room_id or "@" in room_id or ":" in room_id:
        raise InvalidRoomId(
            f"Room id {room_id!r} is invalid: it must be non-empty and contain neither '@' "
            "nor ':' (only '@global' and '@internal' are reserved names)."
        )
    if room_id in UNADDRESSABLE_ROOM_IDS:
        raise InvalidRoomId(
            f"Room id {room_id!r} is invalid: as a URL path segment it means a directory, "
            "so clients (browsers among them) could never address it."
        )
    if len(room_id) > MAX_ROOM_ID_LENGTH:
        raise InvalidRoomId(f"Room id is longer than {MAX_ROOM_ID_LENGTH} characters.")
    return room_id


def validate_category(category: str, allowed: list[str]) -> str:
    if category not in allowed:
        raise InvalidCategory(f"Category {category!r} is not one of: {', '.join(allowed)}.")
    return category


def validate_job_name(name: str) -> str:
    if not name or ":" in name or len(name) > MAX_JOB_NAME_LENGTH:
        raise ValidationFailed(
            f"Job name must be 1..{MAX_JOB_NAME_LENGTH} characters without ':'.",
            errors=[{"loc": ["body", "name"], "msg": "invalid job name"}],
        )
    return name


def is_internal_job(full_name: str) -> bool:
    """Whether a job's full name is one of the ``@internal`` jobs (run by the hub's executor)."""
    return full_name.startswith(f"{INTERNAL_ROOM}:")


def is_reserved(room_id: str) -> bool:
    return room_id in RESERVED_ROOMS


def visible_job_rooms(room_id: str) -> tuple[str, ...]:
    """The job rooms whose jobs a room can see and use."""
    if room_id in RESERVED_ROOMS:
        return (room_id,)
    return (room_id, GLOBAL_ROOM, INTERNAL_ROOM)


@dataclass(frozen=True, slots=True)
class JobName:
    room_id: str
    category: str
    name: str

    @property
    def full_name(self) -> str:
        return f"{self.room_id}:{self.category}:{self.name}"

    @classmethod
    def parse(cls, full_name: str) -> JobName:
        """Split ``room:category:name``; anything malformed is an unknown job (404)."""
        parts = split_full_name(full_name)
        if parts is None:
            raise JobNotFound(f"Job {full_name!r} not found.")
        return cls(*parts)


def split_full_name(full_name: str) -> tuple[str, str, str] | None:
    """``(room_id, category, name)`` of a job's or provider's full name; None if it is
    malformed (not three non-empty parts, or an invalid room id)."""
    parts = full_name.split(":")
    if len(parts) != 3 or not all(parts):
        return None
    room_id, category, name = parts
    try:
        validate_room_id(room_id)
    except InvalidRoomId:
        return None
    return room_id, category, name


def full_name(room_id: str, category: str, name: str) -> str:
    return f"{room_id}:{category}:{name}"
