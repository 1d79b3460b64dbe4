"""One payload's validation holds the event loop for a bounded time whatever the job's
schema (any user's) and the payload (any room member's): keywords whose work grows with the
schema or the value are written to stay cheap, and a deadline stops what is left."""

import pytest

from taskhub.rules.errors import ValidationFailed
from taskhub.validation.payloads import (
    MAX_VALIDATION_SECONDS,
    check_schema,
    payload_errors,
    validate_payload,
)
from taskhub.validation.schema_validator import (
    LinearTimeValidator,
    TooCostly,
    _EnumMembers,
    _json_key,
    errors_within,
)

BIG_ENUM = [f"v{i}" for i in range(20_000)]  # 170 kB of schema


def items_of(schema: dict) -> dict:
    return {"type": "object", "properties": {"xs": {"type": "array", "items": schema}}}


def errors(schema: dict, payload: object, applications: int = 10**9, seconds: float = 60.0):
    return errors_within(LinearTimeValidator(schema), payload, applications, seconds, 1_000)


def test_a_big_enum_is_looked_up_not_compared_with_every_member():
    """Compared member by member, 100,000 items took 277 s of the event loop; these 50,000
    would stop at the deadline."""
    schema = items_of({"enum": BIG_ENUM})
    check_schema(schema)
    assert payload_errors(object(), schema, {"xs": ["v19999"] * 50_000}) == []
    refused = payload_errors(object(), schema, {"xs": ["v0", "w", "v1"]})
    assert [error["loc"] for error in refused] == [["xs", 1]]
    assert len(refused[0]["msg"]) < 300, "the message quotes the enum cut short"


@pytest.mark.parametrize(
    ("members", "value", "member"),
    [
        ([1, "a"], 1.0, True),
        ([1, "a"], True, False),
        ([0, "a"], False, False),
        ([None], None, True),
        ([{"a": 1, "b": [1, 2]}], {"b": [1.0, 2], "a": 1}, True),
        ([[1, 2]], [2, 1], False),
        ([{"x": True}], {"x": 1}, False),
        (["a", "b"], ["a"], False),
        ([[]], [], True),
    ],
    ids=["int and float", "true is not 1", "false is not 0", "null", "key order",
         "array order", "nested boolean", "array among strings", "empty array"],
)  # fmt: skip
def test_enum_members_follow_json_equality(members, value, member):
    assert (errors({"enum": members}, value) == []) is member


def test_a_schema_naming_thousands_of_properties_walks_the_smaller_side():
    """10,000 named properties against 50,000 small objects: 32 s walked from the schema's
    side, well within the deadline from the objects' side."""
    properties = {f"p{i}": {"type": "integer"} for i in range(10_000)}
    schema = items_of({"properties": properties})
    assert payload_errors(object(), schema, {"xs": [{"p9999": 1}] * 50_000}) == []
    refused = payload_errors(object(), schema, {"xs": [{"p3": "three", "other": 1}]})
    assert [error["loc"] for error in refused] == [["xs", 0, "p3"]]


def test_a_failing_branch_of_any_of_or_one_of_is_read_only_to_its_first_error():
    """Whether a branch matches is all that counts: the first branch fails at its first
    item, and reading its other 99,999 would double the cost of the whole."""
    many = list(range(100_000))
    for keyword in ("anyOf", "oneOf"):
        schema = {keyword: [{"items": {"type": "string"}}, {"items": {"type": "integer"}}]}
        assert errors(schema, many, applications=150_000) == [], keyword


def test_one_of_still_refuses_a_value_that_matches_two_branches():
    schema = {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}, {"type": "string"}]}
    assert errors(schema, -1) == []
    assert errors(schema, "s") == []
    (both,) = errors(schema, 1)
    assert "is valid under each of" in both.message
    (neither,) = errors(schema, -1.5)
    assert "is not valid under any of the given schemas" in neither.message


def test_messages_quote_big_values_cut_short():
    """A message quoting a whole mebibyte value, built for each failing branch of a union,
    had cost seconds (and put the value back into the 422)."""
    big = {f"k{i}": "x" * 10 for i in range(40_000)}
    schema = {"anyOf": [{"type": "string", "minLength": i} for i in range(500)]}
    check_schema(schema)
    (refused,) = payload_errors(object(), schema, big)
    assert refused["loc"] == []
    assert len(refused["msg"]) < 300
    assert refused["msg"].startswith("{'k0': 'xxxxxxxxxx', 'k1'"), "in the object's own order"


def test_only_the_first_errors_are_built():
    """20,000 required properties missing from each of 50,000 objects: a billion errors if
    all were built; the answer lists the first 20 by path."""
    schema = items_of({"required": [f"p{i}" for i in range(20_000)]})
    check_schema(schema)
    refused = payload_errors(object(), schema, {"xs": [{"a": 1}] * 50_000})
    assert len(refused) == 20
    assert refused[0] == {"loc": ["xs", 0], "msg": "'p0' is a required property"}


@pytest.mark.parametrize(
    "schema",
    [
        {"patternProperties": {f"^q{i}$": {"type": "integer"} for i in range(900)}},
        {
            "patternProperties": {f"^q{i}$": {"type": "integer"} for i in range(900)},
            "additionalProperties": {"type": "integer"},
        },
        {"uniqueItems": True},
    ],
    ids=["patternProperties", "additionalProperties beside patterns", "uniqueItems"],
)
def test_the_deadline_stops_one_keyword_s_own_loop(schema):
    """One application of these keywords walks the whole value: 900 patterns against 60,000
    keys is 54 million matches. The deadline is looked at inside the loop."""
    value = {f"k{i}": 1 for i in range(60_000)}
    if "uniqueItems" in schema:
        value = [[i, str(i), [i]] for i in range(300_000)]
    with pytest.raises(TooCostly):
        errors(schema, value, seconds=0.01)


def test_a_payload_past_the_deadline_is_refused_with_a_422():
    schema = {"patternProperties": {f"^q{i}$": {"type": "integer"} for i in range(900)}}
    check_schema(schema)
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), schema, {f"k{i}": 1 for i in range(60_000)})
    assert refused.value.errors == [{"loc": ["body", "payload"], "msg": "too costly to validate"}]
    assert f"{MAX_VALIDATION_SECONDS:g} seconds" in refused.value.detail


EVERY_ITEM = {"items": {"type": "integer", "minimum": 0}}  # 1 + 2 applications an item


def test_the_count_of_keyword_applications_is_a_bound_of_its_own():
    with pytest.raises(TooCostly):
        errors(EVERY_ITEM, list(range(1_000)), applications=1_500)
    assert errors(EVERY_ITEM, list(range(1_000)), applications=2_500) == []


def test_the_enum_lookups_kept_stay_within_a_budget_of_members():
    """They outlive no more than their budget: any user may register big enums."""
    kept = _EnumMembers(budget=5)
    small, other, big = ["a", "b"], ["c", "d", "e"], list("fghijk")
    first = kept.of(small)
    assert kept.of(small) is first, "kept"
    kept.of(other)
    assert kept.of(small) is first, "2 + 3 members: both kept"
    assert kept.of(big) is not kept.of(big), "6 members: over the budget alone, never kept"
    kept.of(["x"])  # 6 members held: the oldest goes
    assert kept.of(small) is not first
    assert _json_key("c") in kept.of(other).keys


@pytest.mark.parametrize(
    ("const", "value", "equal"),
    [(1, 1.0, True), (1, True, False), ({"a": [1]}, {"a": [1.0]}, True), ([1, 2], [2, 1], False)],
    ids=["int and float", "true is not 1", "nested", "array order"],
)
def test_const_follows_json_equality(const, value, equal):
    assert (errors({"const": const}, value) == []) is equal


def test_a_422_lists_messages_of_at_most_500_characters():
    """jsonschema's own keywords quote whole values: a 100 kB string that is too long."""
    schema = {"properties": {"s": {"maxLength": 10}, "c": {"const": "x" * 1_000}}}
    refused = payload_errors(object(), schema, {"s": "y" * 100_000, "c": "z"})
    assert [error["loc"] for error in refused] == [["c"], ["s"]]
    assert all(len(error["msg"]) <= 500 for error in refused)
    assert refused[1]["msg"].endswith("…")
