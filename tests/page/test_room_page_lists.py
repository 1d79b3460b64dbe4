"""The room page's task list against a real hub, without a worker (tasks stay pending
unless a test moves them): refetches that race with live events and with each other, a
reconnect after "Load more", queue places behind tasks the page does not show, and a task
that is not the viewer's to cancel."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from tests.page.browser import Pages, connection, sign_in, task_item
from tests.page.conftest import PageHub

DISCONNECTED = r"net::ERR_INTERNET_DISCONNECTED"
FORBIDDEN = r"status of 403"
EMPTY = {"type": "object", "properties": {}}

# Hold back the answers of the page's fetches whose URL contains `pattern`: each request
# reaches the hub (its snapshot is taken) and then waits for `window.__held.shift()()`.
# `window.__answered` counts the held answers read: a wait for it returns after the page
# has handled that answer (the rest of its handling runs in the same task).
HOLD_ANSWERS = """(pattern) => {
  const fetch = window.fetch;
  window.__held = [];
  window.__answered = 0;
  window.fetch = async (url, init) => {
    const response = await fetch(url, init);
    if (!String(url).includes(pattern)) return response;
    await new Promise((release) => window.__held.push(release));
    const json = response.json.bind(response);
    response.json = async () => {
      const data = await json();
      window.__answered += 1;
      return data;
    };
    return response;
  };
}"""


def hold_answers(page: Page, pattern: str) -> None:
    page.evaluate(HOLD_ANSWERS, pattern)


def release_answer(page: Page, answered: int) -> None:
    """Let the oldest held answer through and wait until the page has handled it."""
    page.wait_for_function("() => window.__held.length > 0")
    page.evaluate("() => window.__held.shift()()")
    page.wait_for_function("(n) => window.__answered >= n", arg=answered)


def job_with_tasks(hub: PageHub, room: str, count: int, token: str = "") -> tuple[str, list]:
    """Register the job ``Q`` in ``room`` and submit ``count`` tasks (oldest first)."""
    job = f"{room}:analysis:Q"
    with hub.rest(token or hub.alice) as rest:
        body = {"category": "analysis", "name": "Q", "schema": EMPTY}
        assert rest.put(f"/rooms/{room}/jobs", json=body).status_code == 201
        url = f"/rooms/{room}/tasks/{job}"
        tasks = [rest.post(url, json={"payload": {}}).json() for _ in range(count)]
    return job, tasks


def cancel(hub: PageHub, tasks: list[dict[str, Any]], token: str = "") -> None:
    with hub.rest(token or hub.alice) as rest:
        for task in tasks:
            rest.patch(f"/tasks/{task['id']}", json={"status": "cancelled"}).raise_for_status()


def open_room(hub: PageHub, pages: Pages, room: str, token: str = "") -> Page:
    page = pages.open(f"/?room={room}")
    sign_in(page, token or hub.alice)
    return page


def test_a_task_that_arrives_while_the_list_is_read_again_stays_in_it(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, tasks = job_with_tasks(hub, room, 3)
    cancel(hub, tasks[:2])
    page = open_room(hub, pages, room)
    expect(page.locator("li.task")).to_have_count(3)

    hold_answers(page, "status=pending")
    page.get_by_label("Status", exact=True).select_option("pending")
    page.wait_for_function("() => window.__held.length === 1")  # its snapshot is taken
    with hub.rest(hub.bob) as rest:
        late = rest.post(f"/rooms/{room}/tasks/{job}", json={"payload": {}}).json()
    expect(task_item(page, late["id"])).to_be_visible()  # from its event

    release_answer(page, 1)  # the snapshot without it
    expect(page.locator("li.task")).to_have_count(2)
    expect(task_item(page, late["id"])).to_be_visible()
    expect(page.locator("#tasks-count")).to_have_text("2 tasks")
    pages.assert_no_console_errors()


def test_a_reconnect_keeps_the_loaded_tasks_and_their_open_details(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, tasks = job_with_tasks(hub, room, 60)
    page = open_room(hub, pages, room)
    expect(page.locator("li.task")).to_have_count(50)
    page.get_by_role("button", name="Load more").click()
    expect(page.locator("li.task")).to_have_count(60)
    oldest = task_item(page, tasks[0]["id"])
    oldest.locator(".payload summary").click()
    newest_cancel = task_item(page, tasks[-1]["id"]).get_by_role("button", name="Cancel")
    newest_cancel.focus()

    hold_answers(page, "/tasks?limit=")
    page.context.set_offline(True)
    expect(connection(page)).to_have_attribute("data-state", "offline")
    page.context.set_offline(False)
    expect(connection(page)).to_have_attribute("data-state", "connected")
    release_answer(page, 1)  # the list read again after the reconnect

    expect(page.locator("li.task")).to_have_count(60)
    expect(page.get_by_role("button", name="Load more")).to_be_hidden()
    expect(oldest.locator(".payload")).to_have_attribute("open", "")
    expect(newest_cancel).to_be_focused()
    pages.assert_no_console_errors(allowed=[DISCONNECTED])


def test_only_the_answer_for_the_chosen_status_fills_the_list(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, tasks = job_with_tasks(hub, room, 5)
    cancel(hub, tasks[:2])
    page = open_room(hub, pages, room)
    expect(page.locator("li.task")).to_have_count(5)

    hold_answers(page, "status=cancelled")
    status = page.get_by_label("Status", exact=True)
    status.select_option("cancelled")
    page.wait_for_function("() => window.__held.length === 1")
    status.select_option("pending")  # answered at once
    expect(page.locator("#tasks-count")).to_have_text("3 tasks")

    release_answer(page, 1)  # the late answer for "cancelled"
    expect(page.locator("#tasks-count")).to_have_text("3 tasks")
    expect(page.locator("li.task[data-status=pending]")).to_have_count(3)
    expect(page.locator("li.task")).to_have_count(3)
    pages.assert_no_console_errors()


def test_queue_places_move_when_tasks_older_than_the_first_page_leave_the_queue(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, tasks = job_with_tasks(hub, room, 55)
    page = open_room(hub, pages, room)
    expect(page.locator("li.task")).to_have_count(50)
    newest = task_item(page, tasks[-1]["id"]).locator(".queue")
    expect(newest).to_have_text("#55 in queue")

    cancel(hub, tasks[:3])  # the three oldest: not on the page
    expect(newest).to_have_text("#52 in queue")
    assert hub.task(tasks[-1]["id"])["queue_position"] == 52
    pages.assert_no_console_errors()


def test_queue_places_of_a_global_job_move_when_another_room_s_task_leaves(
    hub: PageHub, room: str, pages: Pages
) -> None:
    admin = hub.server.admin_token
    name = f"Shared{room[-8:]}"  # @global jobs outlive the test's room
    job = f"@global:analysis:{name}"
    with hub.rest(admin) as rest:
        body = {"category": "analysis", "name": name, "schema": EMPTY}
        assert rest.put("/rooms/@global/jobs", json=body).status_code == 201
        elsewhere = rest.post(f"/rooms/{room}-other/tasks/{job}", json={"payload": {}}).json()
        here = rest.post(f"/rooms/{room}/tasks/{job}", json={"payload": {}}).json()
    page = open_room(hub, pages, room, admin)
    place = task_item(page, here["id"]).locator(".queue")
    expect(place).to_have_text("#2 in queue")

    cancel(hub, [elsewhere], admin)  # this room hears nothing of it
    expect(place).to_have_text("#1 in queue")
    cancel(hub, [here], admin)
    pages.assert_no_console_errors()


def test_cancel_is_withdrawn_from_a_task_the_hub_does_not_let_the_viewer_cancel(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, (task,) = job_with_tasks(hub, room, 1)  # alice's
    page = open_room(hub, pages, room, hub.bob)
    item = task_item(page, task["id"])
    item.get_by_role("button", name="Cancel").click()
    expect(item.locator(".task-message")).to_contain_text("You may not cancel this task")
    expect(item.get_by_role("button", name="Cancel")).to_be_hidden()
    expect(item).to_have_attribute("data-status", "pending")
    pages.assert_no_console_errors(allowed=[FORBIDDEN])
