"""Naming rules: room ids, categories, job full names."""

import json
from pathlib import Path

import pytest

from taskhub.rules.errors import InvalidCategory, InvalidRoomId, JobNotFound
from taskhub.rules.naming import (
    MAX_ROOM_ID_LENGTH,
    JobName,
    validate_category,
    validate_room_id,
    visible_job_rooms,
)

# The room ids of these tests are also the page's (static/naming.js keeps a copy of the rule:
# tests/page/js/naming.test.mjs reads the same table).
ROOM_IDS = json.loads((Path(__file__).parent / "room_ids.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("room", ROOM_IDS["valid"])
def test_valid_room_ids(room):
    assert validate_room_id(room) == room


@pytest.mark.parametrize("room", ROOM_IDS["invalid"])
def test_invalid_room_ids(room):
    with pytest.raises(InvalidRoomId):
        validate_room_id(room)


def test_the_table_holds_the_length_bounds():
    """Both sides of MAX_ROOM_ID_LENGTH, counted in code points (the emoji are two UTF-16
    units each: the page's copy must count as Python does)."""
    lengths = {len(room) for room in ROOM_IDS["valid"]}
    too_long = {len(room) for room in ROOM_IDS["invalid"]}
    assert MAX_ROOM_ID_LENGTH in lengths
    assert MAX_ROOM_ID_LENGTH + 1 in too_long
    utf16_units = {len(room.encode("utf-16-le")) // 2 for room in ROOM_IDS["valid"]}
    assert 2 * MAX_ROOM_ID_LENGTH in utf16_units


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
