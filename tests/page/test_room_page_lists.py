"""The room page's task table against a real hub, without a worker (tasks stay pending
unless a test moves them): refetches that race with live events and with each other, a
reconnect on the second page, queue places behind tasks the page does not show, Cancel only
on tasks the viewer may cancel (and withdrawn when the hub refuses it), and the bound on a
page that live events grow (the newest stay on top, the page keeps its size, the next page
holds the others)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from playwright.sync_api import Page, expect

from tests.page.browser import Pages, reconnect, sign_in, task_item
from tests.page.conftest import PageHub

DISCONNECTED = r"net::ERR_INTERNET_DISCONNECTED"
FORBIDDEN = r"status of 403"
EMPTY = {"type": "object", "properties": {}}
PAGE = 50  # app.js: the rows of a page

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


def register_q(hub: PageHub, room: str, token: str = "") -> tuple[str, str]:
    """Register the job ``Q`` in ``room`` (alice's by default); its full name and the id of
    the worker the registration made."""
    with hub.rest(token or hub.alice) as rest:
        body = {"category": "analysis", "name": "Q", "schema": EMPTY}
        response = rest.put(f"/rooms/{room}/jobs", json=body)
        assert response.status_code == 201, response.text
    return f"{room}:analysis:Q", response.json()["worker_id"]


def job_with_tasks(hub: PageHub, room: str, count: int, token: str = "") -> tuple[str, list]:
    """Register the job ``Q`` in ``room`` and submit ``count`` tasks (oldest first)."""
    job, _ = register_q(hub, room, token)
    with hub.rest(token or hub.alice) as rest:
        url = f"/rooms/{room}/tasks/{job}"
        tasks = [rest.post(url, json={"payload": {}}).json() for _ in range(count)]
    return job, tasks


def submit(hub: PageHub, room: str, job: str, count: int, token: str = "") -> list:
    """Submit ``count`` tasks of ``job``, several at a time (in no particular order)."""
    url = f"/rooms/{room}/tasks/{job}"

    def post(_: int) -> Any:
        return rest.post(url, json={"payload": {}}).raise_for_status().json()

    with hub.rest(token or hub.alice) as rest, ThreadPoolExecutor(8) as pool:
        return list(pool.map(post, range(count)))


def cancel(hub: PageHub, tasks: list[dict[str, Any]], token: str = "") -> None:
    with hub.rest(token or hub.alice) as rest:
        for task in tasks:
            rest.patch(f"/tasks/{task['id']}", json={"status": "cancelled"}).raise_for_status()


def open_room(hub: PageHub, pages: Pages, room: str, token: str = "") -> Page:
    page = pages.open(f"/?room={room}")
    sign_in(page, token or hub.alice)
    return page


def shown_ids(page: Page) -> list[str]:
    return page.locator("tr.task").evaluate_all("(items) => items.map((i) => i.dataset.taskId)")


def wait_shown(page: Page, tasks: list[dict[str, Any]]) -> None:
    """Wait until every one of ``tasks`` is in the list (their events have come)."""
    ids = [task["id"] for task in tasks]
    page.wait_for_function(
        """(ids) => ids.every((id) => document.querySelector(`tr.task[data-task-id="${id}"]`))""",
        arg=ids,
    )


def status_box(page: Page, name: str) -> Any:
    return page.locator("#task-filters").get_by_role("checkbox", name=name, exact=True)


def test_a_task_that_arrives_while_the_list_is_read_again_stays_in_it(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, tasks = job_with_tasks(hub, room, 3)
    cancel(hub, tasks[:2])
    page = open_room(hub, pages, room)
    expect(page.locator("tr.task")).to_have_count(3)

    hold_answers(page, "status=pending")
    status_box(page, "Pending").check()
    page.wait_for_function("() => window.__held.length === 1")  # its snapshot is taken
    with hub.rest(hub.bob) as rest:
        late = rest.post(f"/rooms/{room}/tasks/{job}", json={"payload": {}}).json()
    expect(task_item(page, late["id"])).to_be_visible()  # from its event

    release_answer(page, 1)  # the snapshot without it
    expect(page.locator("tr.task")).to_have_count(2)
    expect(task_item(page, late["id"])).to_be_visible()
    expect(page.locator("#tasks-count")).to_have_text("2 tasks")
    pages.assert_no_console_errors()


def test_a_reconnect_keeps_the_page_its_open_details_and_the_focus(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, tasks = job_with_tasks(hub, room, 60)
    page = open_room(hub, pages, room)
    expect(page.locator("tr.task")).to_have_count(PAGE)
    page.get_by_role("button", name="Next").click()
    expect(page.locator("tr.task")).to_have_count(10)
    expect(page).to_have_url(re.compile(r"offset=50"))
    oldest = task_item(page, tasks[0]["id"])
    oldest.click()
    expect(page.locator("#detail")).to_have_attribute("data-task-id", tasks[0]["id"])
    newest_cancel = task_item(page, tasks[9]["id"]).get_by_role("button", name="Cancel")
    newest_cancel.focus()

    hold_answers(page, "/tasks?view=summary")
    reconnect(page)
    release_answer(page, 1)  # the page read again after the reconnect

    expect(page.locator("tr.task")).to_have_count(10)
    expect(page.locator("#page-info")).to_have_text("51\u201360 of 60")
    expect(page.locator("#detail")).to_have_attribute("data-task-id", tasks[0]["id"])
    expect(newest_cancel).to_be_focused()
    pages.assert_no_console_errors(allowed=[DISCONNECTED])


def test_only_the_answer_for_the_chosen_status_fills_the_list(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, tasks = job_with_tasks(hub, room, 5)
    cancel(hub, tasks[:2])
    page = open_room(hub, pages, room)
    expect(page.locator("tr.task")).to_have_count(5)

    hold_answers(page, "status=cancelled")
    status_box(page, "Cancelled").check()
    page.wait_for_function("() => window.__held.length === 1")
    status_box(page, "Cancelled").uncheck()
    status_box(page, "Pending").check()  # answered at once
    expect(page.locator("#tasks-count")).to_have_text("3 tasks")

    release_answer(page, 1)  # the late answer for "cancelled"
    expect(page.locator("#tasks-count")).to_have_text("3 tasks")
    expect(page.locator("tr.task[data-status=pending]")).to_have_count(3)
    expect(page.locator("tr.task")).to_have_count(3)
    pages.assert_no_console_errors()


def test_queue_places_move_when_tasks_older_than_the_first_page_leave_the_queue(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, tasks = job_with_tasks(hub, room, 55)
    page = open_room(hub, pages, room)
    expect(page.locator("tr.task")).to_have_count(PAGE)
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
        registered = rest.put("/rooms/@global/jobs", json=body)
        assert registered.status_code == 201
        elsewhere = rest.post(f"/rooms/{room}-other/tasks/{job}", json={"payload": {}}).json()
        here = rest.post(f"/rooms/{room}/tasks/{job}", json={"payload": {}}).json()
    page = open_room(hub, pages, room, admin)
    place = task_item(page, here["id"]).locator(".queue")
    expect(place).to_have_text("#2 in queue")

    cancel(hub, [elsewhere], admin)  # this room hears nothing of it
    expect(place).to_have_text("#1 in queue")
    cancel(hub, [here], admin)
    with hub.rest(admin) as rest:  # a worker serving @global is seen from every room
        rest.delete(f"/workers/{registered.json()['worker_id']}").raise_for_status()
    pages.assert_no_console_errors()


def cancel_button(page: Page, task: dict[str, Any]) -> Any:
    return task_item(page, task["id"]).get_by_role("button", name="Cancel")


def test_cancel_is_offered_only_on_tasks_the_viewer_may_cancel(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, (listed,) = job_with_tasks(hub, room, 1)  # alice's
    bobs = open_room(hub, pages, room, hub.bob)
    expect(bobs.locator("#whoami")).to_have_text("bob")
    admins = open_room(hub, pages, room, hub.server.admin_token)
    (live,) = submit(hub, room, job, 1)  # alice's, arriving by event
    (own,) = submit(hub, room, job, 1, hub.bob)
    wait_shown(bobs, [listed, live, own])
    wait_shown(admins, [listed, live, own])

    expect(cancel_button(bobs, own)).to_be_visible()
    for task in (listed, live):
        expect(task_item(bobs, task["id"])).to_have_attribute("data-status", "pending")
        expect(cancel_button(bobs, task)).to_be_hidden()
    for task in (listed, live, own):  # a superuser may cancel any
        expect(cancel_button(admins, task)).to_be_visible()

    bobs.reload()  # a stored token: who it is comes from the hub again
    expect(bobs.locator("#whoami")).to_have_text("bob")
    wait_shown(bobs, [listed, live, own])
    expect(cancel_button(bobs, own)).to_be_visible()
    expect(cancel_button(bobs, listed)).to_be_hidden()
    cancel_button(bobs, own).click()
    expect(task_item(bobs, own["id"])).to_have_attribute("data-status", "cancelled")
    expect(task_item(admins, own["id"])).to_have_attribute("data-status", "cancelled")
    pages.assert_no_console_errors()


def test_the_owner_of_the_worker_that_took_a_task_is_offered_its_cancel(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, worker = register_q(hub, room)  # alice's job, served by a worker of hers
    taken, waiting = (submit(hub, room, job, 1, hub.bob)[0] for _ in range(2))
    with hub.rest(hub.alice) as rest:
        claim = rest.post("/tasks/claim", json={"worker_id": worker}).raise_for_status()
        assert claim.json()["task"]["id"] == taken["id"]
    page = open_room(hub, pages, room)
    wait_shown(page, [taken, waiting])
    expect(task_item(page, taken["id"])).to_have_attribute("data-status", "claimed")
    expect(cancel_button(page, taken)).to_be_visible()  # bob's, but alice's worker took it
    expect(cancel_button(page, waiting)).to_be_hidden()
    cancel_button(page, taken).click()
    expect(task_item(page, taken["id"])).to_have_attribute("data-status", "cancelled")
    pages.assert_no_console_errors()


def test_a_hub_too_old_to_say_who_signs_in_all_the_same(
    hub: PageHub, room: str, pages: Pages
) -> None:
    _, (task,) = job_with_tasks(hub, room, 1)  # alice's
    page = pages.open(f"/?room={room}")
    # A replica of the version before (mid-upgrade) answers 404: no such route.
    page.route("**/v1/joblib/users/me", lambda route: route.fulfill(status=404, json={}))
    page.get_by_label("Token").fill("th_not-a-token")
    page.get_by_role("button", name="Sign in").click()  # the token is still checked
    expect(page.locator("#token-error")).to_have_text("The hub did not accept this token.")
    sign_in(page, hub.bob)
    expect(page.locator("#whoami")).to_be_hidden()
    item = task_item(page, task["id"])
    item.get_by_role("button", name="Cancel").click()  # offered: the page cannot tell
    expect(item.locator(".task-message")).to_contain_text("You may not cancel this task")
    pages.assert_no_console_errors(allowed=[FORBIDDEN, r"status of 404", r"status of 401"])


def test_cancel_is_withdrawn_when_the_hub_refuses_it(hub: PageHub, room: str, pages: Pages) -> None:
    _, (task,) = job_with_tasks(hub, room, 1)  # alice's
    page = open_room(hub, pages, room, hub.bob)
    # Reloaded with the stored token while the hub will not say who it is: the page cannot
    # tell what bob may cancel, offers Cancel, and withdraws it on the hub's 403.
    page.route("**/v1/joblib/users/me", lambda route: route.abort())
    page.reload()
    item = task_item(page, task["id"])
    expect(page.locator("#whoami")).to_be_hidden()
    item.get_by_role("button", name="Cancel").click()
    expect(item.locator(".task-message")).to_contain_text("You may not cancel this task")
    expect(item.get_by_role("button", name="Cancel")).to_be_hidden()
    expect(item).to_have_attribute("data-status", "pending")
    pages.assert_no_console_errors(allowed=[FORBIDDEN, r"ERR_FAILED"])


def test_live_events_keep_the_newest_on_top_and_the_page_at_its_size(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, older = job_with_tasks(hub, room, 5)
    page = open_room(hub, pages, room)
    expect(page.locator("tr.task")).to_have_count(5)
    newer = submit(hub, room, job, PAGE)
    expect(page.locator("#tasks-count")).to_have_text(f"{PAGE + 5} tasks")
    expect(page.locator("tr.task")).to_have_count(PAGE)
    newest = sorted(newer, key=lambda task: task["created_at"])[-1]
    expect(page.locator("tr.task").first).to_have_attribute("data-task-id", newest["id"])
    for gone in older:  # pushed to the next page
        expect(task_item(page, gone["id"])).to_have_count(0)
    page.get_by_role("button", name="Next").click()
    expect(page.locator("tr.task")).to_have_count(5)
    assert set(shown_ids(page)) == {task["id"] for task in older}
    pages.assert_no_console_errors()
