"""The room page's visibility badge and members panel in a real browser: alice makes her
room private from the page and adds bob as a viewer; bob's page shows the room as private
with his role, and no members panel (a viewer does not manage the room); an outsider is
refused the room."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.page.browser import Pages, sign_in
from tests.page.conftest import PageHub


def test_a_maintainer_keeps_a_room_private_and_names_its_members(
    hub: PageHub, room: str, pages: Pages
) -> None:
    with hub.rest(hub.bob) as rest:
        bobs_id = rest.get("/users/me").json()["id"]

    alices = pages.open(f"/?room={room}")
    sign_in(alices, hub.alice)
    expect(alices.locator("#room-visibility")).to_have_text("open")
    panel = alices.locator("#members-panel")
    panel.get_by_role("button", name="Make this room private").click()
    expect(alices.locator("#room-visibility")).to_have_text("private · maintainer")
    expect(panel.locator("#members li")).to_have_count(1)
    expect(panel.locator("#members")).to_contain_text("alice")

    panel.get_by_label("User id or group name").fill(bobs_id)
    panel.get_by_label("Role", exact=True).select_option("viewer")
    panel.get_by_role("button", name="Add").click()
    expect(panel.locator("#members li")).to_have_count(2)
    expect(panel.get_by_label("Role of bob")).to_have_value("viewer")

    bobs = pages.open(f"/?room={room}")
    sign_in(bobs, hub.bob)
    expect(bobs.locator("#room-visibility")).to_have_text("private · viewer")
    expect(bobs.locator("#members-panel")).to_be_hidden()

    panel.get_by_role("button", name="Remove").nth(1).click()
    expect(panel.locator("#members li")).to_have_count(1)
    with hub.rest(hub.bob) as rest:
        assert rest.get(f"/rooms/{room}/tasks").status_code == 404
