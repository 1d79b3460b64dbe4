"""The generated form and optional fields, as pydantic writes them: an optional nested object
(`window: Range | None = None`) and a nullable boolean (`override: bool | None = None`) are
sent only when the user gave them a value. Patterns are the hub's to check (RE2, linear
time), never the browser's backtracking RegExp: its 422 is shown on the field."""

from __future__ import annotations

import json

from playwright.sync_api import Page, Request, Response, expect

from tests.page.browser import Pages, field_error
from tests.page.conftest import PageHub
from tests.page.test_room_page import UNPROCESSABLE, open_form_of, submit

SCHEMA = {
    "type": "object",
    "$defs": {
        "Range": {
            "type": "object",
            "title": "Range",
            "required": ["lo", "hi"],
            "properties": {
                "lo": {"type": "integer", "title": "Lo"},
                "hi": {"type": "integer", "title": "Hi"},
            },
        },
        "Opts": {
            "type": "object",
            "title": "Opts",
            "properties": {"verbose": {"type": "boolean", "default": False, "title": "Verbose"}},
        },
    },
    "properties": {
        "name": {"type": "string", "title": "Name", "default": "x"},
        "window": {
            "anyOf": [{"$ref": "#/$defs/Range"}, {"type": "null"}],
            "default": None,
            "title": "Window",
        },
        "override": {
            "anyOf": [{"type": "boolean"}, {"type": "null"}],
            "default": None,
            "title": "Override",
        },
        "opts": {
            "anyOf": [{"$ref": "#/$defs/Opts"}, {"type": "null"}],
            "default": None,
            "title": "Extra",
        },
    },
}


def test_optional_fields_left_alone_are_not_sent_and_do_not_block_the_form(
    hub: PageHub, room: str, pages: Pages
) -> None:
    page = open_form_of(hub, pages, room, "Ranges", SCHEMA)
    expect(page.get_by_role("group", name="Window")).to_be_visible()
    task = submit(page)
    assert task["payload"] == {"name": "x"}, task
    pages.assert_no_console_errors()


def test_an_optional_group_once_edited_needs_its_required_fields(
    hub: PageHub, room: str, pages: Pages
) -> None:
    page = open_form_of(hub, pages, room, "Ranges", SCHEMA)
    posts: list[Request] = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)
    window = page.get_by_role("group", name="Window")
    window.get_by_label("Lo").fill("1")
    page.get_by_role("button", name="Submit task").click()
    expect(field_error(page, "payload-window-hi")).to_have_text("Required.")
    assert posts == []

    window.get_by_label("Hi").fill("2")
    page.get_by_role("group", name="Extra").get_by_label("Verbose").check()
    task = submit(page)
    assert task["payload"] == {"name": "x", "window": {"lo": 1, "hi": 2}, "opts": {"verbose": True}}
    pages.assert_no_console_errors()


def test_a_nullable_boolean_can_be_left_unset_or_be_true_or_false(
    hub: PageHub, room: str, pages: Pages
) -> None:
    page = open_form_of(hub, pages, room, "Ranges", SCHEMA)
    override = page.get_by_label("Override", exact=True)
    expect(override.locator("option")).to_have_text(["(not set)", "Yes", "No"])
    expect(override).to_have_value("")
    override.select_option(label="No")
    assert submit(page)["payload"] == {"name": "x", "override": False}
    override.select_option(label="Yes")
    assert submit(page)["payload"] == {"name": "x", "override": True}
    pages.assert_no_console_errors()


# MAX_FIELDS in static/schema-form.js: the most fields one generated form builds.
MAX_FIELDS = 500


def wide_schema(width: int, depth: int = 6) -> dict:
    """About 1 KB: ``depth`` levels of ``width`` properties, each a ``$ref`` to the next
    level, so a form of every field would have width**depth inputs (5: 15,625)."""
    defs: dict[str, dict] = {
        f"d{level}": {
            "type": "object",
            "properties": {f"p{i}": {"$ref": f"#/$defs/d{level + 1}"} for i in range(width)},
        }
        for level in range(depth)
    }
    defs[f"d{depth}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def test_a_schema_too_wide_for_a_form_gets_one_json_field_for_the_payload(
    hub: PageHub, room: str, pages: Pages
) -> None:
    """A small schema naming thousands of fields (its levels share ``$ref``s) does not build
    them all: the form stops at MAX_FIELDS and asks for the payload as JSON instead."""
    page = open_form_of(hub, pages, room, "Wide", wide_schema(5))
    expect(page.locator("#submit-panel")).to_be_visible()
    fields = page.locator("#form-fields").locator("input, select, textarea, fieldset").count()
    assert fields <= MAX_FIELDS, f"the form built {fields} fields"
    expect(page.locator("#form-fields")).to_contain_text("too large for a form")
    payload = page.get_by_label("Payload (JSON object)")
    expect(page.locator("#form-fields textarea")).to_have_count(1)
    expect(page.locator("#form-fields input, #form-fields fieldset")).to_have_count(0)

    # Checked as JSON in the browser before anything is sent.
    posts: list[Request] = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)
    payload.fill('{"p0": ')
    page.get_by_role("button", name="Submit task").click()
    expect(field_error(page, "payload-payload")).to_contain_text("Not valid JSON")
    assert posts == []

    sent = {"p0": {"p1": {"p2": {"p3": {"p4": {"p0": "deep"}}}}}, "p4": {}}
    payload.fill(json.dumps(sent))
    task = submit(page)
    assert task["payload"] == sent, task
    assert hub.task(task["id"])["payload"] == sent
    pages.assert_no_console_errors()


# Catastrophic for a backtracking matcher: on a string of a's and one other character, it
# tries every way of splitting the a's (2**n). RE2, the hub's, answers in linear time.
NESTED_QUANTIFIER = "^(a+)+$"
# 32 characters: about 45 s of a frozen tab in a browser that ran the pattern.
EVIL_DEFAULT = "a" * 31 + "!"
# Well past what the answer takes, far short of the freeze.
WITHIN_SECONDS = 5_000


def submit_is_answered(page: Page) -> Response:
    """Click "Submit task" and return the hub's answer, both within a few seconds: a tab
    frozen in a pattern match neither gets the click through nor sends the request."""
    with page.expect_response(
        lambda r: r.request.method == "POST" and "/v1/joblib/rooms/" in r.url,
        timeout=WITHIN_SECONDS,
    ) as answer:
        page.get_by_role("button", name="Submit task").click(timeout=WITHIN_SECONDS)
    return answer.value


def test_a_pattern_that_backtracks_is_left_to_the_hub_and_its_error_shown(
    hub: PageHub, room: str, pages: Pages
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "word": {
                "type": "string",
                "title": "Word",
                "pattern": NESTED_QUANTIFIER,
                "default": EVIL_DEFAULT,
            },
        },
    }
    page = open_form_of(hub, pages, room, "Backtrack", schema)
    expect(page.get_by_label("Word", exact=True)).to_have_value(EVIL_DEFAULT)

    answer = submit_is_answered(page)
    assert answer.status == 422, answer.text()
    error = field_error(page, "payload-word")
    expect(error).to_contain_text("does not match", timeout=WITHIN_SECONDS)
    expect(error).to_contain_text(NESTED_QUANTIFIER)
    expect(page.locator("#submit-status")).to_contain_text("The hub rejected the input")

    page.get_by_label("Word", exact=True).fill("aaaa")  # matches: the task is submitted
    task = submit(page)
    assert task["payload"] == {"word": "aaaa"}, task
    expect(error).to_be_hidden()
    pages.assert_no_console_errors(allowed=[UNPROCESSABLE])


def test_a_value_off_its_pattern_is_sent_and_the_hubs_error_shown(
    hub: PageHub, room: str, pages: Pages
) -> None:
    """An ordinary pattern the browser could have run: still the hub's to check."""
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "title": "Code", "pattern": "^[a-z]{3}$"}},
    }
    page = open_form_of(hub, pages, room, "Codes", schema)
    code = page.get_by_label("Code", exact=True)
    code.fill("ABCD")
    answer = submit_is_answered(page)
    assert answer.status == 422, answer.text()
    assert answer.request.post_data_json == {"payload": {"code": "ABCD"}}
    error = field_error(page, "payload-code")
    expect(error).to_contain_text("'ABCD' does not match '^[a-z]{3}$'")
    expect(code).to_have_attribute("aria-invalid", "true")

    code.fill("abc")
    assert submit(page)["payload"] == {"code": "abc"}
    expect(error).to_be_hidden()
    pages.assert_no_console_errors(allowed=[UNPROCESSABLE])
