"""The generated form and optional fields, as pydantic writes them: an optional nested object
(`window: Range | None = None`) and a nullable boolean (`override: bool | None = None`) are
sent only when the user gave them a value."""

from __future__ import annotations

import json

from playwright.sync_api import Request, expect

from tests.page.browser import Pages, field_error
from tests.page.conftest import PageHub
from tests.page.test_room_page import open_form_of, submit

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
