"""The room page's providers panel in a real browser, against a real hub and an SDK worker
serving providers: the room's providers listed (and kept current live), a read form per
provider's parameters, the answer shown as JSON, or as its size and a download when it is
bytes, and a failed read's problem shown."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from taskhub.sdk import Worker
from tests.page.browser import Pages, sign_in
from tests.page.conftest import PageHub
from tests.sdk.providers import Broken, Frame, Squares
from tests.support.waiting import eventually_sync


@pytest.fixture
def provider_worker(hub: PageHub, room: str) -> Iterator[Worker]:
    """Alice's worker providing ``Squares`` (JSON), ``Frame`` (bytes) and ``Broken``."""
    worker = Worker(hub.url, hub.alice, room=room)
    worker.provide(Squares, name="squares")
    worker.provide(Frame, name="traj")
    worker.provide(Broken, name="broken")
    with worker:
        eventually_sync(lambda: worker.listening, 10, "the worker to join its provider rooms")
        yield worker


def provider_button(page: Page, name: str) -> object:
    return page.locator("#providers").get_by_role("button", name=name, exact=False)


def open_room(pages: Pages, hub: PageHub, room: str) -> Page:
    page = pages.open(f"/?room={room}")
    sign_in(page, hub.bob)
    return page


def test_a_room_s_providers_are_listed_and_read_from_the_page(
    hub: PageHub, room: str, provider_worker: Worker, pages: Pages
) -> None:
    page = open_room(pages, hub, room)
    providers = page.locator("#providers")
    expect(providers.get_by_role("button")).to_have_count(3)
    expect(providers).to_contain_text("squares")
    expect(providers).to_contain_text("this room")

    providers.get_by_role("button", name="squares").click()
    expect(page.get_by_role("heading", name="Read squares")).to_be_visible()
    page.locator("#read-form").get_by_label("N").fill("4")
    page.locator("#read-form").get_by_role("button", name="Read").click()
    answer = "12 bytes of application/json"  # "[0, 1, 4, 9]", as the SDK writes it
    expect(page.locator("#read-status")).to_have_text(answer)
    expect(page.locator("#read-result pre")).to_have_text("[\n  0,\n  1,\n  4,\n  9\n]")

    providers.get_by_role("button", name="traj").click()
    form = page.locator("#read-form")
    form.get_by_label("Size").fill("300")
    form.get_by_role("button", name="Read").click()
    expect(page.locator("#read-status")).to_have_text("300 bytes of application/octet-stream")
    download = page.locator("#read-result a[download]")
    expect(download).to_have_text("Download (300 bytes)")
    with page.expect_download() as downloaded:
        download.click()
    path = downloaded.value.path()
    assert path is not None and path.read_bytes() == bytes(i % 256 for i in range(300))

    providers.get_by_role("button", name="broken").click()
    form.get_by_role("button", name="Read").click()
    expect(page.locator("#read-status")).to_contain_text("ValueError: no such frame")
    pages.assert_no_console_errors(allowed=[r"status of 400"])


def test_the_list_follows_providers_that_come_and_go(hub: PageHub, room: str, pages: Pages) -> None:
    page = open_room(pages, hub, room)
    expect(page.locator("#providers")).to_contain_text("No providers in this room.")
    worker = Worker(hub.url, hub.alice, room=room)
    worker.provide(Squares, name="live")
    with worker:
        expect(page.locator("#providers").get_by_role("button", name="live")).to_be_visible()
    # The worker left the hub: its provider went with it (providers_invalidate).
    expect(page.locator("#providers")).to_contain_text("No providers in this room.")
    pages.assert_no_console_errors()
