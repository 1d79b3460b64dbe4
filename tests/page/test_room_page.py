"""The room page in a real browser against a real hub and worker: sign in, open a room,
submit from the generated form, watch the task live (also from a second person's phone),
validation messages from the browser and from the hub, cancel, reconnect."""

from __future__ import annotations

import json

from playwright.sync_api import Locator, Page, Request, expect

from taskhub.sdk import Worker
from tests.page.browser import (
    ARTIFACTS,
    PHONE,
    Pages,
    connection,
    field_error,
    job_button,
    sign_in,
    statuses,
    task_item,
    task_log,
    watch_tasks,
)
from tests.page.conftest import PageHub
from tests.page.extensions import Ping

# Chrome reports failed requests on the console; only these are expected, where noted.
UNPROCESSABLE = r"status of 422"
DISCONNECTED = r"net::ERR_INTERNET_DISCONNECTED"


def submit(page: Page) -> dict:
    """Click "Submit task" and return the hub's answer (the task, or a problem)."""
    with page.expect_response(
        lambda r: r.request.method == "POST" and "/v1/joblib/rooms/" in r.url
    ) as answer:
        page.get_by_role("button", name="Submit task").click()
    return dict(answer.value.json())


def open_job(page: Page, room: str) -> None:
    """Open the room's Brew job with the keyboard and wait for its form."""
    expect(job_button(page, "Brew")).to_contain_text("1 worker")
    job_button(page, "Brew").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Submit Brew")).to_be_visible()
    expect(page).to_have_url(f"{page.url.split('?')[0]}?room={room}&job={room}%3Aanalysis%3ABrew")


def test_a_task_goes_live_from_the_form_to_its_result_for_everyone_in_the_room(
    hub: PageHub, room: str, worker: Worker, pages: Pages
) -> None:
    # Alice signs in, picks the room in the lobby; Bob follows a shared link on his phone.
    alice = pages.open("/")
    sign_in(alice, hub.alice)
    expect(alice.get_by_role("heading", name="Choose a room")).to_be_visible()
    alice.get_by_label("Room", exact=True).fill(room)
    alice.keyboard.press("Enter")
    expect(alice).to_have_url(f"{hub.url}/?room={room}")
    expect(alice.locator("#workers li.worker")).to_have_count(1)
    expect(alice.locator("#jobs")).to_contain_text("ValidatePayload")  # @internal jobs too

    bob = pages.open(f"/?room={room}", viewport=PHONE)
    sign_in(bob, hub.bob)
    expect(bob.get_by_role("heading", name=f"Room {room}")).to_be_visible()
    watch_tasks(alice)
    watch_tasks(bob)

    open_job(alice, room)
    expect(alice.get_by_role("textbox", name="Label")).to_have_attribute("required", "")
    expect(alice.get_by_label("Steps")).to_have_value("4")  # defaults from the schema
    expect(alice.get_by_role("textbox", name="Note")).not_to_have_attribute("required", "")
    expect(alice.get_by_label("Mode").locator("option")).to_have_text(["fast", "careful"])
    alice.get_by_label("Label").fill("first batch")
    alice.get_by_label("Steps").fill("5")
    alice.get_by_label("Mode").select_option(label="careful")
    alice.get_by_label("Verbose").check()
    alice.get_by_role("group", name="Origin").get_by_label("X").fill("1.5")
    alice.get_by_label("Tags (JSON array)").fill('["a", "b"]')
    task = submit(alice)
    assert task["status"] == "pending"
    assert task["payload"] == {
        "label": "first batch",
        "steps": 5,
        "mode": "careful",
        "verbose": True,
        "origin": {"x": 1.5, "y": 0},
        "tags": ["a", "b"],
    }

    for page in (alice, bob):  # the run takes 1.5 s
        item = task_item(page, task["id"])
        expect(item).to_have_attribute("data-status", "running")
        expect(item.locator(".progress-text")).to_contain_text("step")
    ARTIFACTS.mkdir(exist_ok=True)
    alice.evaluate("window.scrollTo(0, 0)")
    alice.screenshot(path=ARTIFACTS / "room-page-running.png")
    for page in (alice, bob):
        item = task_item(page, task["id"])
        expect(item).to_have_attribute("data-status", "completed")
        expect(item.get_by_role("button", name="Cancel")).to_be_hidden()
        expect(item.locator(".progress")).to_be_hidden()  # no stale "step 3 of 4"
        expect(item.locator(".col-ran")).not_to_be_empty()
        # The row's details: the result, and how it went.
        item.click()
        detail = page.locator("#detail")
        expect(detail.locator(".detail-result")).to_contain_text('"FIRST BATCH"')
        expect(detail.locator(".timeline")).to_contain_text("Completed")
        expect(detail.locator(".detail-progress")).to_have_text("Progress 100%")

    for page in (alice, bob):
        log = task_log(page, task["id"])
        assert statuses(log)[-2:] == ["running", "completed"], log
        progress_while_running = {p for status, p in log if status == "running"}
        assert len(progress_while_running) >= 3, f"progress did not move live: {log}"
    # The item went through the lifecycle in order; it may first show as running when the
    # worker's event came within the animation frame of the form's answer (one render).
    lifecycle = ["pending", "claimed", "running", "completed"]
    seen = statuses(task_log(alice, task["id"]))
    assert seen[0] in ("pending", "running") and seen == sorted(seen, key=lifecycle.index), seen
    # Bob's list got the task from the events; its details read the payload.
    expect(bob.locator("#detail .detail-payload")).to_contain_text('"first batch"')
    expect(alice.locator("#tasks-count")).to_have_text("1 task")

    alice.screenshot(path=ARTIFACTS / "room-page.png", full_page=True)
    bob.screenshot(path=ARTIFACTS / "room-page-phone.png", full_page=True)

    # The token is remembered: a reload shows the room again, straight from the hub.
    bob.reload()
    expect(task_item(bob, task["id"])).to_have_attribute("data-status", "completed")
    pages.assert_no_console_errors()


def test_invalid_input_is_shown_next_to_its_field_from_the_browser_and_from_the_hub(
    hub: PageHub, room: str, worker: Worker, pages: Pages
) -> None:
    page = pages.open(f"/?room={room}&job={room}:analysis:Brew")  # a link to the form
    sign_in(page, hub.alice)
    expect(page.get_by_role("heading", name="Submit Brew")).to_be_visible()
    posts: list[Request] = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)

    # Checked in the browser: nothing is sent.
    page.get_by_label("Steps").fill("0")
    page.get_by_role("group", name="Origin").get_by_label("Y").fill("500")
    page.get_by_label("Tags (JSON array)").fill("[1, ")
    page.get_by_role("button", name="Submit task").click()
    expect(field_error(page, "payload-label")).to_have_text("Required.")
    expect(field_error(page, "payload-steps")).to_have_text("Must be at least 1.")
    expect(field_error(page, "payload-origin-y")).to_have_text("Must be at most 100.")
    expect(field_error(page, "payload-tags")).to_contain_text("Not valid JSON")
    expect(page.get_by_label("Label")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Label")).to_be_focused()
    expect(page.locator("#submit-status")).to_have_text("4 fields need attention.")
    assert posts == []

    # Only the hub knows the items must be strings: its 422 lands next to the field.
    page.get_by_label("Label").fill("second")
    page.get_by_label("Steps").fill("2")
    page.get_by_role("group", name="Origin").get_by_label("Y").fill("0")
    page.get_by_label("Tags (JSON array)").fill("[1, 2]")
    problem = submit(page)
    assert problem["status"] == 422
    assert problem["errors"][0]["loc"] == ["body", "payload", "tags", 0]
    tags_error = field_error(page, "payload-tags")
    expect(tags_error).to_have_text(
        "[0]: 1 is not of type 'string'\n[1]: 2 is not of type 'string'"
    )
    expect(page.get_by_label("Tags (JSON array)")).to_have_attribute("aria-invalid", "true")
    expect(field_error(page, "payload-label")).to_be_hidden()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "room-page-422.png", full_page=True)

    # Fixed, it goes through and the messages are gone.
    page.get_by_label("Tags (JSON array)").fill('["ok"]')
    task = submit(page)
    expect(tags_error).to_be_hidden()
    expect(task_item(page, task["id"])).to_have_attribute("data-status", "completed")
    pages.assert_no_console_errors(allowed=[UNPROCESSABLE])


def test_pending_and_running_tasks_can_be_cancelled(
    hub: PageHub, room: str, worker: Worker, pages: Pages
) -> None:
    page = pages.open(f"/?room={room}&job={room}:analysis:Brew")
    sign_in(page, hub.alice)
    page.get_by_label("Label").fill("long")
    page.get_by_label("Steps").fill("50")  # 15 s: runs until cancelled
    running = submit(page)
    expect(task_item(page, running["id"])).to_have_attribute("data-status", "running")
    queued = submit(page)  # the worker runs one task at a time: this one waits
    queued_item = task_item(page, queued["id"])
    expect(queued_item).to_have_attribute("data-status", "pending")
    expect(queued_item.locator(".queue")).to_have_text("#1 in queue")

    queued_item.get_by_role("button", name="Cancel").click()
    expect(queued_item).to_have_attribute("data-status", "cancelled")
    running_item = task_item(page, running["id"])
    running_item.get_by_role("button", name="Cancel").click()
    expect(running_item).to_have_attribute("data-status", "cancelled")
    expect(running_item.get_by_role("button", name="Cancel")).to_be_hidden()
    assert {hub.task(t["id"])["status"] for t in (running, queued)} == {"cancelled"}

    # The status filter asks the hub and keeps following live changes.
    def status(name: str) -> Locator:
        return page.locator("#task-filters").get_by_role("checkbox", name=name, exact=True)

    status("Cancelled").check()
    expect(page.locator("tr.task")).to_have_count(2)
    status("Cancelled").uncheck()
    status("Running").check()
    expect(page.locator("tr.task")).to_have_count(0)
    expect(page.locator("#tasks-empty")).to_be_visible()
    page.get_by_label("Steps").fill("3")
    third = submit(page)
    expect(task_item(page, third["id"])).to_be_visible()  # while it runs
    expect(page.locator("tr.task")).to_have_count(0)  # and gone once completed
    status("Running").uncheck()
    expect(task_item(page, third["id"])).to_have_attribute("data-status", "completed")
    pages.assert_no_console_errors()


def test_queue_places_follow_a_task_that_goes_ahead_and_leaves(
    hub: PageHub, room: str, worker: Worker, pages: Pages
) -> None:
    page = pages.open(f"/?room={room}&job={room}:analysis:Brew")
    sign_in(page, hub.alice)
    page.get_by_label("Label").fill("long")
    page.get_by_label("Steps").fill("50")  # 15 s: occupies the worker until cancelled
    running = submit(page)
    expect(task_item(page, running["id"])).to_have_attribute("data-status", "running")
    first, second = submit(page), submit(page)

    def places() -> None:
        for task_id in (first["id"], second["id"], urgent["id"]):
            place = hub.task(task_id)["queue_position"]
            expect(task_item(page, task_id).locator(".queue")).to_have_text(f"#{place} in queue")

    with hub.rest(hub.alice) as rest:  # a higher priority goes ahead of both
        urgent = rest.post(
            f"/rooms/{room}/tasks/{room}:analysis:Brew",
            json={"payload": {"label": "urgent", "steps": 1}, "priority": 10},
        ).json()
    assert urgent["queue_position"] == 1
    places()
    expect(task_item(page, first["id"]).locator(".queue")).to_have_text("#2 in queue")

    task_item(page, urgent["id"]).get_by_role("button", name="Cancel").click()
    expect(task_item(page, urgent["id"])).to_have_attribute("data-status", "cancelled")
    expect(task_item(page, first["id"]).locator(".queue")).to_have_text("#1 in queue")
    expect(task_item(page, second["id"]).locator(".queue")).to_have_text("#2 in queue")
    for task in (running, first, second):
        task_item(page, task["id"]).get_by_role("button", name="Cancel").click()
    pages.assert_no_console_errors()


def open_form_of(hub: PageHub, pages: Pages, room: str, name: str, schema: dict) -> Page:
    """Register alice's job ``name`` with ``schema`` in ``room`` and open its form."""
    with hub.rest(hub.alice) as rest:
        body = {"category": "analysis", "name": name, "schema": schema}
        assert rest.put(f"/rooms/{room}/jobs", json=body).status_code == 201
    page = pages.open(f"/?room={room}&job={room}:analysis:{name}")
    sign_in(page, hub.alice)
    return page


def test_each_label_names_its_own_field_and_big_integers_are_refused(
    hub: PageHub, room: str, pages: Pages
) -> None:
    """Property names that differ only in characters an element id cannot hold."""
    schema = {
        "type": "object",
        "properties": {
            "名前": {"type": "string", "title": "Name"},
            "年齢": {"type": "integer", "title": "Age"},
        },
    }
    page = open_form_of(hub, pages, room, "Names", schema)
    expect(page.get_by_label("Name", exact=True)).to_have_attribute("type", "text")
    expect(page.get_by_label("Age", exact=True)).to_have_attribute("type", "number")
    ids = page.locator(".schema-form [id]").evaluate_all("nodes => nodes.map(n => n.id)")
    assert len(ids) == len(set(ids)), ids

    # An integer a JavaScript number cannot hold exactly is refused, not rounded.
    page.get_by_label("Name", exact=True).fill("x")
    page.get_by_label("Age", exact=True).fill("9007199254740993")
    sent: list[Request] = []
    page.on("request", lambda r: sent.append(r) if r.method == "POST" else None)
    page.get_by_role("button", name="Submit task").click()
    age = page.locator(".field", has=page.get_by_label("Age", exact=True))
    expect(age.locator(".field-error")).to_contain_text("Too large to send exactly")
    assert sent == []
    pages.assert_no_console_errors()


def test_a_required_nullable_field_left_empty_sends_null_and_lookalike_choices_differ(
    hub: PageHub, room: str, pages: Pages
) -> None:
    schema = {
        "type": "object",
        "required": ["count"],
        "properties": {
            "count": {"anyOf": [{"type": "integer"}, {"type": "null"}], "title": "Count"},
            "pick": {"enum": [1, "1"], "title": "Pick"},
        },
    }
    page = open_form_of(hub, pages, room, "Choices", schema)
    pick = page.get_by_label("Pick", exact=True)
    expect(pick.locator("option")).to_have_text(["(not set)", "1", '"1"'])
    pick.select_option(label='"1"')
    task = submit(page)
    assert task["payload"] == {"count": None, "pick": "1"}, task
    pages.assert_no_console_errors()


def test_the_page_shows_its_connection_and_rejoins_the_room_after_a_reconnect(
    hub: PageHub, room: str, worker: Worker, pages: Pages
) -> None:
    page = pages.open(f"/#/{room}")  # the short form of a room link
    sign_in(page, hub.alice)
    expect(page).to_have_url(f"{hub.url}/?room={room}")
    expect(connection(page)).to_have_text("Connected")
    watch_tasks(page)

    page.context.set_offline(True)
    expect(connection(page)).to_have_attribute("data-state", "offline")
    expect(connection(page)).to_have_text("Offline")
    page.context.set_offline(False)
    expect(connection(page)).to_have_attribute("data-state", "connected")
    page.wait_for_timeout(500)  # let the resync after the reconnect finish

    # A task submitted elsewhere now reaches the page only through the re-joined room.
    with hub.rest(hub.bob) as rest:
        payload = {"label": "from a script", "steps": 2}
        answer = rest.post(f"/rooms/{room}/tasks/{room}:analysis:Brew", json={"payload": payload})
        assert answer.status_code == 202, answer.text
        task = answer.json()
    item = task_item(page, task["id"])
    expect(item).to_have_attribute("data-status", "completed")
    assert "running" in statuses(task_log(page, task["id"]))
    item.click()
    expect(page.locator("#detail .detail-result")).to_contain_text(json.dumps("FROM A SCRIPT"))

    # Signing out forgets the token.
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.evaluate("localStorage.getItem('taskhub.token')") is None
    assert page.evaluate("sessionStorage.getItem('taskhub.token')") is None
    pages.assert_no_console_errors(allowed=[DISCONNECTED])


def test_jobs_and_workers_come_and_go_live(
    hub: PageHub, room: str, worker: Worker, pages: Pages
) -> None:
    page = pages.open(f"/?room={room}")
    sign_in(page, hub.bob)
    expect(job_button(page, "Brew")).to_be_visible()
    workers = page.locator("#workers li.worker")
    expect(workers).to_have_count(1)

    # A superuser's worker serves Ping in this room and globally (seen in every room).
    pinger = Worker(hub.url, hub.server.admin_token, room=room)
    pinger.register(Ping)
    pinger.register(Ping, room="@global")
    with pinger:
        expect(job_button(page, "Ping")).to_have_count(2)
        for button in job_button(page, "Ping").all():
            expect(button).to_contain_text("1 worker")
        expect(page.locator("#jobs h3", has_text="Global")).to_be_visible()
        expect(workers).to_have_count(2)
    # It left: its jobs (no pending task) are gone, from this room and from @global.
    expect(job_button(page, "Ping")).to_have_count(0)
    expect(workers).to_have_count(1)
    pages.assert_no_console_errors()


# The page's task table, run in the browser: events of one task may arrive out of order
# (they come from several processes: replicas, the taskiq worker); `version` orders them.
LATE_EVENTS = """async () => {
  const { TaskTable } = await import("/static/tasks.js");
  const table = new TaskTable(document.createElement("tbody"), {});
  const event = (status, version) => ({
    id: "0192e8a0-0000-7000-8000-000000000001", name: "lab:analysis:Brew", room_id: "lab",
    status, version, created_at: "2026-11-22T08:00:00+00:00", started_at: null,
    completed_at: null, queue_position: null, worker_id: null, error: null, attempt: 1,
    progress: null, progress_message: null, result: null, priority: 0, max_attempts: 1,
    run_at: null,
  });
  const seen = [];
  for (const [status, version] of [["pending", 1], ["running", 3], ["completed", 4],
                                   ["claimed", 2], ["pending", 1]]) {
    table.push(event(status, version));
    table.flush();
    seen.push(table.task(event().id)?.status);
  }
  const { name, ...snapshot } = event("running", 3);
  table.setPage([{ ...snapshot, job_name: name }]);
  seen.push(table.task(event().id)?.status);
  return seen;
}"""


def test_a_late_event_does_not_take_a_task_back_to_an_earlier_state(pages: Pages) -> None:
    page = pages.open("/")
    assert page.evaluate(LATE_EVENTS) == [
        "pending",
        "running",
        "completed",
        "completed",  # claimed (version 2) came after completed (version 4)
        "completed",
        "completed",  # a REST answer older than the events
    ]
    pages.assert_no_console_errors()
