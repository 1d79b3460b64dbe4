"""The page follows the hub's room-id rule (its copy, static/naming.js, is held to the hub's
table of room ids by tests/page/js/naming.test.mjs): a room the hub would refuse is never
opened, the lobby says why; a room the hub takes opens, @global among them."""

from __future__ import annotations

from urllib.parse import quote

from playwright.sync_api import expect

from tests.page.browser import Pages, connection, sign_in
from tests.page.conftest import PageHub


def test_a_room_the_hub_refuses_is_not_opened_and_the_lobby_says_why(
    hub: PageHub, pages: Pages
) -> None:
    page = pages.open(f"/?room={quote('a:b')}")
    sign_in(page, hub.alice)
    expect(page.get_by_role("heading", name="Choose a room")).to_be_visible()
    expect(page.locator("#room-view")).to_be_hidden()
    room_input = page.get_by_label("Room", exact=True)
    expect(room_input).to_have_value("a:b")
    expect(room_input).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#room-error")).to_have_text("A room name cannot contain @ or :.")

    before = page.url
    room_input.fill("..")
    page.keyboard.press("Enter")
    expect(page.locator("#room-error")).to_have_text("A room name cannot be . or .. alone.")
    assert page.url == before
    pages.assert_no_console_errors()


def test_a_room_the_hub_takes_opens_the_shared_room_and_long_names_alike(
    hub: PageHub, pages: Pages
) -> None:
    page = pages.open(f"/?room={quote('@global')}")
    sign_in(page, hub.alice)
    expect(page.locator("#room-view")).to_be_visible()
    expect(page.locator("#room-name")).to_have_text("@global")
    expect(page).to_have_title("@global · Taskhub")

    # 128 characters (code points) is the longest room id, whatever their UTF-16 length.
    room = "\N{GRINNING FACE}" * 128
    page.goto(f"{hub.url}/?room={quote(room)}")  # the token is this tab's: still signed in
    expect(page.locator("#room-name")).to_have_text(room)
    expect(page.locator("#room-error")).to_be_hidden()
    expect(connection(page)).to_have_attribute("data-state", "connected")
    pages.assert_no_console_errors()
