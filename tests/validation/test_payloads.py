"""A job's schema may refer only within itself (or to the JSON Schema metaschemas); a
payload is checked against it without fetching anything."""

import pytest

from taskhub.rules.errors import ValidationFailed
from taskhub.validation.payloads import _Validators, check_schema, validate_payload

RESOLVABLE = {
    "pointer": {"$defs": {"n": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/n"}}},
    "anchor": {
        "$defs": {"n": {"$anchor": "num", "type": "integer"}},
        "properties": {"x": {"$ref": "#num"}},
    },
    "embedded id": {
        "$id": "https://example.com/root",
        "$defs": {"n": {"$id": "number", "type": "integer"}},
        "properties": {"x": {"$ref": "number"}},
    },
    "pointer under an embedded id": {
        "$id": "https://example.com/root",
        "$defs": {
            "sub": {
                "$id": "sub",
                "$defs": {"n": {"type": "integer"}},
                "properties": {"x": {"$ref": "#/$defs/n"}},
            }
        },
        "$ref": "sub",
    },
    "dynamic anchor": {
        "$dynamicAnchor": "node",
        "properties": {"x": {"type": "integer"}, "kids": {"items": {"$dynamicRef": "#node"}}},
    },
    "metaschema": {
        "properties": {
            "x": {"type": "integer"},
            "s": {"$ref": "https://json-schema.org/draft/2020-12/schema"},
        }
    },
}
UNRESOLVABLE = {
    "missing pointer": ({"$ref": "#/$defs/missing"}, ["$ref"]),
    "remote": (
        {"properties": {"x": {"$ref": "http://127.0.0.1:9/x.json"}}},
        ["properties", "x", "$ref"],
    ),
    "relative to the root id, in a list": (
        {"$id": "https://example.com/root", "prefixItems": [{"$ref": "other.json"}]},
        ["prefixItems", 0, "$ref"],
    ),
    "missing anchor": ({"properties": {"x": {"$ref": "#nowhere"}}}, ["properties", "x", "$ref"]),
}


@pytest.mark.parametrize("schema", RESOLVABLE.values(), ids=RESOLVABLE)
def test_references_within_the_schema_resolve(schema):
    check_schema(schema)
    validate_payload(object(), schema, {"x": 1})
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), schema, {"x": "not a number"})
    assert refused.value.errors[0]["loc"] == ["body", "payload", "x"]


@pytest.mark.parametrize(("schema", "where"), UNRESOLVABLE.values(), ids=UNRESOLVABLE)
def test_other_references_are_refused_at_registration(schema, where):
    with pytest.raises(ValidationFailed) as refused:
        check_schema(schema)
    assert refused.value.errors[0]["loc"] == ["body", "schema", *where]


ENDLESS = {
    "itself": ({"$ref": "#"}, ["$ref"]),
    "through a condition": ({"if": {"$ref": "#"}}, ["if", "$ref"]),
    "a property's own": (
        {"properties": {"a": {"$ref": "#/properties/a"}}},
        ["properties", "a", "$ref"],
    ),
    "two definitions": (
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        ["$defs", "b", "$ref"],
    ),
    "under an id": (
        {"$id": "https://example.com/s", "allOf": [{"$ref": "s"}]},
        ["allOf", 0, "$ref"],
    ),
    "dynamic": (
        {"$dynamicAnchor": "n", "anyOf": [{"$dynamicRef": "#n"}]},
        ["anyOf", 0, "$dynamicRef"],
    ),
    "dependent": ({"dependentSchemas": {"a": {"$ref": "#"}}}, ["dependentSchemas", "a", "$ref"]),
}


@pytest.mark.parametrize(("schema", "where"), ENDLESS.values(), ids=ENDLESS)
def test_references_looping_on_the_same_payload_are_refused_at_registration(schema, where):
    with pytest.raises(ValidationFailed) as refused:
        check_schema(schema)
    assert refused.value.errors[0]["loc"] == ["body", "schema", *where]


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"kids": {"items": {"$ref": "#"}}}},
        {
            "$defs": {"n": {"type": "integer"}},
            "allOf": [{"$ref": "#/$defs/n"}, {"$ref": "#/$defs/n"}],
        },
        {"properties": {"s": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}},
    ],
    ids=["a tree descends", "one definition twice", "the metaschema"],
)
def test_references_that_descend_or_do_not_loop_are_kept(schema):
    check_schema(schema)


def test_a_looping_schema_stored_before_the_check_fails_its_payloads_with_a_422():
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), {"$ref": "#"}, {})
    assert refused.value.errors[0]["loc"] == ["body", "payload"]


def test_references_inside_instance_keywords_are_data():
    schema = {"properties": {"x": {"const": {"$ref": "nowhere"}}}, "default": {"$ref": "x"}}
    check_schema(schema)
    validate_payload(object(), schema, {"x": {"$ref": "nowhere"}})


def test_a_schema_stored_before_the_check_fails_its_payloads_with_a_422():
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), {"$ref": "#/$defs/missing"}, {})
    assert refused.value.errors[0]["loc"] == ["body", "payload"]


BACKTRACKING = "^(a+)+$"  # exponential in Python's re: 30 characters take seconds


def test_a_pattern_is_matched_in_linear_time():
    schema = {"properties": {"s": {"type": "string", "pattern": BACKTRACKING}}}
    check_schema(schema)
    validate_payload(object(), schema, {"s": "a" * 1000})
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), schema, {"s": "a" * 1000 + "!"})  # would never end
    assert refused.value.errors[0]["loc"] == ["body", "payload", "s"]


def test_property_patterns_are_matched_in_linear_time_too():
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {BACKTRACKING: {"type": "integer"}, "^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    check_schema(schema)
    validate_payload(object(), schema, {"name": "n", "aaa": 1, "x-note": "ok"})
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), schema, {"aaa": "not an integer"})
    assert refused.value.errors[0]["loc"] == ["body", "payload", "aaa"]
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), schema, {"a" * 1000 + "!": 1})  # matches no pattern
    assert "Additional properties are not allowed" in refused.value.errors[0]["msg"]


UNIQUE = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}


def test_unique_items_are_checked_in_linear_time():
    """jsonschema compares object items pair by pair: 20,000 of them (a 300 kB body) would
    hold the event loop for minutes."""
    many = [{"a": i, "b": [i, str(i)]} for i in range(20_000)]
    validate_payload(object(), UNIQUE, {"xs": many})
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), UNIQUE, {"xs": [*many, {"b": [7, "7"], "a": 7}]})
    assert refused.value.errors[0]["loc"] == ["body", "payload", "xs"]
    assert "non-unique" in refused.value.errors[0]["msg"]


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),
        ([True, 1], True),
        ([False, 0, None, "", [], {}], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
        ([[1, 2], [2, 1]], True),
        ([[1, {"x": [True]}], [1.0, {"x": [True]}]], False),
        ([{"x": 1}, {"x": True}], True),
    ],
    ids=["int and float", "true is not 1", "falsy values", "key order", "array order",
         "nested", "nested boolean"],
)  # fmt: skip
def test_unique_items_follow_json_equality(items, unique):
    if unique:
        validate_payload(object(), UNIQUE, {"xs": items})
    else:
        with pytest.raises(ValidationFailed):
            validate_payload(object(), UNIQUE, {"xs": items})


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"properties": {"s": {"pattern": "(?=a)b"}}}, ["properties", "s", "pattern"]),
        ({"patternProperties": {r"(a)\1": {}}}, ["patternProperties", r"(a)\1"]),
        (
            {"patternProperties": {"^a": {}}, "allOf": [{"unevaluatedProperties": False}]},
            ["allOf", 0, "unevaluatedProperties"],
        ),
    ],
    ids=["lookahead", "backreference", "unevaluated beside patternProperties"],
)
def test_patterns_the_hub_cannot_run_in_linear_time_are_refused(schema, where):
    with pytest.raises(ValidationFailed) as refused:
        check_schema(schema)
    assert refused.value.errors[0]["loc"] == ["body", "schema", *where]


def test_a_pattern_inside_instance_keywords_is_data():
    check_schema({"properties": {"s": {"const": {"pattern": "(?=x)"}}}})


def fanning_out(levels: int) -> dict:
    """Each level an ``anyOf`` of two references to the next: 2^levels subschemas for one
    value, from a schema of a few hundred bytes."""
    defs = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}


DOUBLING_WITH_DEPTH = {  # an allOf of two references that descends back into itself
    "$defs": {
        "n": {"allOf": [{"$ref": "#/$defs/m"}, {"$ref": "#/$defs/m"}]},
        "m": {"properties": {"x": {"$ref": "#/$defs/n"}}},
    },
    "$ref": "#/$defs/n",
}


@pytest.mark.parametrize(
    "schema",
    [fanning_out(10), DOUBLING_WITH_DEPTH],
    ids=["references fanning out", "doubling at every level of the payload"],
)
def test_a_schema_applying_too_many_subschemas_to_one_value_is_refused_at_registration(
    schema,
):
    """Either would hold the event loop for hours on a small payload (2^n applications)."""
    with pytest.raises(ValidationFailed) as refused:
        check_schema(schema)
    assert "subschemas to one payload value" in refused.value.detail


@pytest.mark.parametrize(
    "schema",
    [
        fanning_out(7),  # 510 for one value (the references count too): within 1,000
        {"properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}},
        {"anyOf": [{"properties": {f"p{i}": {"type": "integer"}}} for i in range(50)]},
    ],
    ids=["fanning out within the bound", "a tree", "a wide union"],
)
def test_schemas_applying_a_bounded_number_of_subschemas_are_kept(schema):
    check_schema(schema)


def test_a_payload_too_costly_to_validate_is_refused_not_validated_to_the_end():
    """A budget of keyword applications bounds any one validation (a schema stored before
    the registration check, or a big payload against a heavy schema)."""
    schema = fanning_out(7)
    schema["properties"]["xs"] = {"items": {"$ref": "#/$defs/d0"}}
    check_schema(schema)
    with pytest.raises(ValidationFailed) as refused:
        validate_payload(object(), schema, {"xs": [1] * 4_000})  # 4,000 values, ~510 schemas each
    assert refused.value.errors == [{"loc": ["body", "payload"], "msg": "too costly to validate"}]
    validate_payload(object(), schema, {"xs": ["a"] * 10})


def test_compiled_validators_are_kept_within_a_budget_of_schema_bytes():
    """Each holds its schema; any user may register big ones (the least recently used go)."""
    cache = _Validators(budget=3_200)  # three of these schemas (1,035 bytes each)
    schemas = {n: {"description": "x" * 1_000, "type": "object"} for n in range(4)}
    first = cache.compiled(0, schemas[0])
    for n in (1, 2):
        cache.compiled(n, schemas[n])
    assert cache.compiled(0, schemas[0]) is first, "kept, and now the most recently used"
    cache.compiled(3, schemas[3])  # over the budget: 1, the least recently used, goes
    assert cache.compiled(0, schemas[0]) is first
    assert cache.compiled(2, schemas[2]) is not None
    assert cache.compiled(1, schemas[1]) is not None  # compiled afresh
