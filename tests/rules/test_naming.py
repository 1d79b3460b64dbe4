"""Naming rules: room ids, categories, job full names."""

import pytest

from taskhub.rules.errors import InvalidCategory, InvalidRoomId, JobNotFound
from taskhub.rules.naming import (
    MAX_ROOM_ID_LENGTH,
    JobName,
    validate_category,
    validate_room_id,
    visible_job_rooms,
)


@pytest.mark.parametrize(
    "room",
    [
        "room1",
        "a b",
        "ünïcode",
        "a/b",
        "...",
        ".x",
        "x" * MAX_ROOM_ID_LENGTH,
        "@global",
        "@internal",
    ],
)
def test_valid_room_ids(room):
    assert validate_room_id(room) == room


@pytest.mark.parametrize(
    "room",
    [
        "",
        "@",
        "@globals",
        "a@b",
        "a:b",
        ":",
        "@global:x",
        "x" * (MAX_ROOM_ID_LENGTH + 1),
        ".",
        "..",
    ],
)
def test_invalid_room_ids(room):
    with pytest.raises(InvalidRoomId):
        validate_room_id(room)


def test_category_must_be_allowed():
    assert validate_category("analysis", ["analysis"]) == "analysis"
    with pytest.raises(InvalidCategory):
        validate_category("other", ["analysis"])


def test_full_name_round_trip():
    name = JobName.parse("@global:modifiers:Rotate")
    assert (name.room_id, name.category, name.name) == ("@global", "modifiers", "Rotate")
    assert name.full_name == "@global:modifiers:Rotate"


@pytest.mark.parametrize(
    "full_name", ["", "a:b", "a:b:c:d", "::", "a::c", "a@b:c:d", "@other:c:d", "a:b:"]
)
def test_malformed_full_names_are_unknown_jobs(full_name):
    with pytest.raises(JobNotFound):
        JobName.parse(full_name)


def test_a_room_sees_its_own_global_and_internal_jobs():
    assert visible_job_rooms("room1") == ("room1", "@global", "@internal")
    assert visible_job_rooms("@global") == ("@global",)
    assert visible_job_rooms("@internal") == ("@internal",)
