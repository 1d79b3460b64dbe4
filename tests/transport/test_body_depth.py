"""How deep a request body nests is read off its text, strings and their escapes included,
and agrees with the depth of the value it decodes to."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from taskhub.transport.http.api import nested_deeper_than
from tests.support.properties import examples

TRICKY_TEXT = st.text(alphabet='[]{}"\\:, ab\u00e9\U0001f600', max_size=12)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TRICKY_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(TRICKY_TEXT, children, max_size=4)
    ),
    max_leaves=30,
)


def depth(value: Any) -> int:
    """Objects and arrays nested in ``value``, itself at depth 1 (a scalar: 0)."""
    if isinstance(value, dict):
        return 1 + max((depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(item) for item in value), default=0)
    return 0


@settings(max_examples=examples(300), deadline=None)
@given(JSON_VALUES)
def test_the_depth_read_off_the_text_is_the_decoded_value_s(value: Any) -> None:
    expected = depth(value)
    texts = [
        orjson.dumps(value),
        json.dumps(value, indent=2).encode(),
        json.dumps(value, ensure_ascii=False).encode(),
    ]
    for text in texts:
        for limit in range(expected + 2):
            assert nested_deeper_than(text, limit) == (expected > limit), (text, limit)


def test_brackets_inside_strings_do_not_count() -> None:
    text = orjson.dumps({"a": "[[[[[[", 'b\\"[': "\\", "c": ["]]]", '"[{']})
    assert not nested_deeper_than(text, 2)
    assert nested_deeper_than(text, 1)
