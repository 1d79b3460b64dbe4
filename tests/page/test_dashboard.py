"""The room page as an operator's dashboard, against a real hub: security headers on the
page and every asset (and no CSP violation while it is used), text only from tasks (no
markup runs), the task table's filters, search and sort (checked against the API's
totals), the detail panel with the keyboard, a narrow window, a burst of events, the
workers panel following a worker, the overview's charts matching GET stats, bulk cancel and
re-run, and a task's log live and after a reload. Screenshots of each view go to
/tmp/shots/."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from taskhub.sdk import Worker
from tests.page.browser import Pages, sign_in, task_item
from tests.page.conftest import PageHub
from tests.page.extensions import Brew, Narrate
from tests.support.server import REPO_ROOT
from tests.support.waiting import eventually_sync

SHOTS = Path("/tmp/shots")
EMPTY = {"type": "object", "properties": {}}
XSS = '<img src=x onerror="window.__pwned=1;alert(1)"><script>window.__pwned=2</script>'
NOT_FOUND = r"status of 404"
CONFLICT = r"status of 409"


def shot(page: Page, name: str, *, full_page: bool = False, of: str = "") -> None:
    """A screenshot of the page (or of the element ``of``) into /tmp/shots/."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    if of:
        page.locator(of).screenshot(path=str(SHOTS / f"{name}.png"))
    else:
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def register_q(hub: PageHub, room: str, token: str = "") -> tuple[str, str]:
    """Register job ``Q`` in ``room``: its full name and the registration's worker id."""
    with hub.rest(token or hub.alice) as rest:
        body = {"category": "analysis", "name": "Q", "schema": EMPTY}
        response = rest.put(f"/rooms/{room}/jobs", json=body)
        assert response.status_code == 201, response.text
    return f"{room}:analysis:Q", response.json()["worker_id"]


def submit(rest: httpx.Client, room: str, job: str, payload: Any = None) -> dict[str, Any]:
    response = rest.post(f"/rooms/{room}/tasks/{job}", json={"payload": payload or {}})
    assert response.status_code == 202, response.text
    return dict(response.json())


def fail_next(rest: httpx.Client, worker_id: str, error: str) -> dict[str, Any]:
    """Claim the next task as ``worker_id``, run it and report it failed with ``error``."""
    claim = rest.post("/tasks/claim", json={"worker_id": worker_id})
    assert claim.status_code == 200, claim.text
    task = claim.json()["task"]
    token = task.get("claim_token")
    for body in ({"status": "running"}, {"status": "failed", "error": error}):
        update = rest.patch(f"/tasks/{task['id']}", json={**body, "claim_token": token})
        assert update.status_code == 200, update.text
    return dict(task)


def open_room(hub: PageHub, pages: Pages, room: str, token: str = "", **kwargs: Any) -> Page:
    page = pages.open(f"/?room={room}", **kwargs)
    sign_in(page, token or hub.alice)
    return page


def csp_violations(page: Page) -> list[str]:
    return list(page.evaluate("() => window.__csp ?? []"))


def watch_csp(page: Page) -> None:
    page.evaluate(
        """() => {
          window.__csp = [];
          document.addEventListener("securitypolicyviolation",
            (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
        }"""
    )


def test_the_page_and_every_asset_carry_the_security_headers(hub: PageHub) -> None:
    index = (REPO_ROOT / "static" / "index.html").read_text()
    import_map = re.search(r'<script type="importmap">(.*?)</script>', index, re.DOTALL)
    assert import_map
    digest = base64.b64encode(hashlib.sha256(import_map.group(1).encode()).digest()).decode()
    page = httpx.get(f"{hub.url}/", trust_env=False)
    assets = ["/", "/static/app.js", "/static/style.css", "/static/favicon.svg"]
    assets += re.findall(r'"(/vendor/[^"]+)"', page.text)  # the import map's libraries
    assets += re.findall(r'href="(/vendor/[^"]+)"', page.text)  # uPlot's stylesheet
    assert any("uplot" in asset for asset in assets)
    for path in assets:
        response = httpx.get(f"{hub.url}{path}", trust_env=False)
        assert response.status_code == 200, path
        policy = response.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["default-src"] == "'self'"
        assert directives["script-src"] == f"'self' 'sha256-{digest}'"
        assert directives["style-src"] == "'self'"
        assert directives["object-src"] == "'none'"
        assert directives["frame-ancestors"] == "'none'"
        assert "unsafe-inline" not in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-frame-options"] == "DENY"


def test_task_text_is_shown_as_text_and_runs_nothing(hub: PageHub, room: str, pages: Pages) -> None:
    job, worker_id = register_q(hub, room)
    with hub.rest(hub.alice) as rest:
        task = submit(rest, room, job, {"label": XSS})
        fail_next(rest, worker_id, f"boom {XSS}")
    page = open_room(hub, pages, room)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    watch_csp(page)
    row = task_item(page, task["id"])
    expect(row).to_have_attribute("data-status", "failed")
    row.click()
    panel = page.locator("#detail")
    expect(panel.locator(".detail-error")).to_have_text(f"boom {XSS}")
    expect(panel.locator(".detail-payload")).to_contain_text(XSS.replace('"', '\\"'))
    assert page.locator("#detail img, #detail script, #tasks img").count() == 0
    assert page.evaluate("() => window.__pwned ?? null") is None
    assert dialogs == []
    assert csp_violations(page) == []
    pages.assert_no_console_errors(allowed=[NOT_FOUND])


def test_filters_and_search_narrow_the_table_as_the_api_does(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, worker_id = register_q(hub, room)
    with hub.rest(hub.alice) as rest:
        mine = [submit(rest, room, job, {"n": n}) for n in range(3)]
        failed = submit(rest, room, job, {"needle": "haystack-7"})
        # The oldest is claimed first: fail it... the first three go before, so fail all four.
        for _ in range(4):
            fail_next(rest, worker_id, "kaput")
    with hub.rest(hub.bob) as rest:
        bobs = [submit(rest, room, job, {"n": n}) for n in range(2)]
    page = open_room(hub, pages, room)
    watch_csp(page)
    expect(page.locator("#tasks-count")).to_have_text("6 tasks")
    page.get_by_role("checkbox", name="Failed").check()
    expect(page.locator("tr.task")).to_have_count(4)
    expect(page).to_have_url(re.compile(r"status=failed"))
    with hub.rest(hub.alice) as rest:
        total = rest.get(f"/rooms/{room}/tasks", params={"status": "failed"}).json()["total"]
    expect(page.locator("#tasks-count")).to_have_attribute("data-total", str(total))
    page.get_by_role("checkbox", name="Failed").uncheck()
    page.get_by_label("Submitter").select_option("me")
    expect(page.locator("tr.task")).to_have_count(4)  # alice's: not bob's two
    for task in bobs:
        expect(task_item(page, task["id"])).to_have_count(0)
    page.get_by_label("Submitter").select_option(label="bob")
    expect(page.locator("tr.task")).to_have_count(2)
    for task in bobs:
        expect(task_item(page, task["id"])).to_be_visible()
    page.get_by_label("Submitter").select_option("")
    page.get_by_label("Search").fill("haystack-7")
    expect(page.locator("tr.task")).to_have_count(1)
    expect(task_item(page, failed["id"])).to_be_visible()
    expect(page).to_have_url(re.compile(r"q=haystack-7"))
    shot(page, "table-with-filters", of="#tasks-panel")
    # The filter is in the address: a reload shows the same.
    page.reload()
    expect(page.locator("tr.task")).to_have_count(1)
    expect(page.get_by_label("Search")).to_have_value("haystack-7")
    page.get_by_label("Search").fill("")
    expect(page.locator("tr.task")).to_have_count(6)
    # Sorting by created, oldest first, says so in aria-sort.
    header = page.locator("th[data-sort=created_at]")
    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "ascending")
    expect(page.locator("tr.task").first).to_have_attribute("data-task-id", mine[0]["id"])
    assert csp_violations(page) == []


def test_a_task_opens_with_the_keyboard_and_escape_closes_it(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, _ = register_q(hub, room)
    with hub.rest(hub.alice) as rest:
        task = submit(rest, room, job, {"x": 1})
    page = open_room(hub, pages, room)
    row = task_item(page, task["id"])
    expect(row).to_be_visible()
    row.focus()
    page.keyboard.press("Enter")
    panel = page.locator("#detail")
    expect(panel).to_be_visible()
    expect(panel).to_be_focused()
    expect(panel.locator(".detail-payload")).to_contain_text('"x": 1')
    expect(page).to_have_url(re.compile(f"task={task['id']}"))
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(row).to_be_focused()
    pages.assert_no_console_errors(allowed=[NOT_FOUND])


def test_a_narrow_window_stacks_and_only_the_table_scrolls_sideways(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, _ = register_q(hub, room)
    with hub.rest(hub.alice) as rest:
        for n in range(3):
            submit(rest, room, job, {"n": n})
    page = open_room(hub, pages, room, viewport={"width": 400, "height": 800})
    expect(page.locator("tr.task")).to_have_count(3)
    watch_csp(page)
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    shot(page, "narrow-window", full_page=True)
    assert csp_violations(page) == []


def test_a_burst_of_events_leaves_the_page_responsive_and_the_table_right(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, worker_id = register_q(hub, room)
    page = open_room(hub, pages, room)
    expect(page.locator("#tasks-count")).to_have_text("0 tasks")
    count = 1500  # 3,000 task events: each submitted, then cancelled
    clients = [hub.rest(hub.alice) for _ in range(4)]
    # The job's one worker heartbeats through the burst: on a loaded machine the burst can
    # outlast the worker timeout, and a job nobody serves goes when its last task ends.
    heartbeat_every = 5.0
    last_heartbeat = time.monotonic()

    def submit_and_cancel(n: int) -> dict[str, Any]:
        rest = clients[n % len(clients)]
        task = submit(rest, room, job, {"n": n})
        rest.patch(f"/tasks/{task['id']}", json={"status": "cancelled"}).raise_for_status()
        return task

    with ThreadPoolExecutor(len(clients)) as pool, hub.rest(hub.alice) as beating:
        running = [pool.submit(submit_and_cancel, n) for n in range(count)]
        answered = 0
        while not all(future.done() for future in running):
            assert page.evaluate("() => 1 + 1") == 2  # the page answers mid-burst
            answered += 1
            if time.monotonic() - last_heartbeat > heartbeat_every:
                beating.patch(f"/workers/{worker_id}", json={}).raise_for_status()
                last_heartbeat = time.monotonic()
            page.wait_for_timeout(100)
        tasks = [future.result() for future in running]
    for client in clients:
        client.close()
    assert answered > 0
    newest = max(tasks, key=lambda task: task["created_at"])
    expect(page.locator("#tasks-count")).to_have_text(f"{count} tasks")
    expect(page.locator("tr.task")).to_have_count(50)
    expect(page.locator("tr.task").first).to_have_attribute("data-task-id", newest["id"])
    expect(page.locator('tr.task[data-status="cancelled"]')).to_have_count(50)
    counts = page.locator(f'#counts tr[data-job="{job}"]')
    expect(counts.locator('td[data-status="cancelled"]')).to_have_text(str(count))
    expect(counts.locator('td[data-status="pending"]')).to_have_text("0")
    assert page.evaluate("() => 1 + 1") == 2


def test_the_workers_panel_follows_a_worker_that_starts_and_leaves(
    hub: PageHub, room: str, pages: Pages
) -> None:
    page = open_room(hub, pages, room)
    workers = page.locator("#workers li.worker")
    expect(workers).to_have_count(0)
    with Worker(hub.url, hub.alice, [Brew], room=room, poll_interval=5.0) as serving:
        eventually_sync(lambda: serving.listening, 10, "the worker to join its job room")
        expect(workers).to_have_count(1)
        item = workers.first
        expect(item).to_contain_text("alice")
        expect(item).to_contain_text("Brew")
        expect(item.locator(".seen")).to_contain_text("seen")
        with hub.rest(hub.alice) as rest:
            task = submit(rest, room, f"{room}:analysis:Brew", {"label": "slow", "steps": 20})
        running = item.locator(f'.running button[data-task-id="{task["id"]}"]')
        expect(running).to_be_visible()
        shot(page, "workers-panel", of="#workers-panel")
        running.click()
        expect(page.locator("#detail")).to_have_attribute("data-task-id", task["id"])
        page.keyboard.press("Escape")
        with hub.rest(hub.alice) as rest:  # waits behind the running one
            submit(rest, room, f"{room}:analysis:Brew", {"label": "queued"})
    expect(workers).to_have_count(0)
    # Its job, with a task waiting and no worker left, is greyed in the jobs list.
    expect(page.locator("#jobs .job-button.no-worker")).to_have_count(1)
    expect(page.locator("#jobs .job-button.no-worker")).to_contain_text("no worker")


def test_the_charts_show_the_figures_of_get_stats(hub: PageHub, room: str, pages: Pages) -> None:
    job, worker_id = register_q(hub, room)
    with hub.rest(hub.alice) as rest:
        for n in range(3):
            submit(rest, room, job, {"n": n})
        fail_next(rest, worker_id, "kaput")
    page = open_room(hub, pages, room)
    watch_csp(page)
    page.get_by_label("Window").select_option("15m")
    table = page.locator('table.chart-data[data-chart="throughput"]')

    def matches() -> bool:
        with hub.rest(hub.alice) as rest:
            stats = rest.get(f"/rooms/{room}/stats", params={"window": "15m"}).json()
        shown = table.locator("tbody tr").evaluate_all(
            """(rows) => rows.map((r) => [r.dataset.start,
                 ...[...r.querySelectorAll("td")].map((td) => td.dataset.value)])"""
        )
        wanted = [
            [b["start"], *("" if b[k] is None else str(b[k]) for k in ("completed", "failed"))]
            for b in stats["buckets"]
        ]
        return shown == wanted

    eventually_sync(matches, 10, "the chart's table to hold the API's buckets", 0.2)
    counts = page.locator(f'#counts tr[data-job="{job}"]')
    expect(counts.locator('td[data-status="failed"]')).to_have_text("1")
    expect(counts.locator('td[data-status="pending"]')).to_have_text("2")
    # Live: a cancel moves a task from pending to cancelled in the counts table.
    with hub.rest(hub.alice) as rest:
        pending = rest.get(f"/rooms/{room}/tasks", params={"status": "pending"}).json()["items"]
        rest.patch(f"/tasks/{pending[0]['id']}", json={"status": "cancelled"}).raise_for_status()
    expect(counts.locator('td[data-status="cancelled"]')).to_have_text("1")
    expect(counts.locator('td[data-status="pending"]')).to_have_text("1")
    eventually_sync(matches, 10, "the tail to follow the cancel", 0.2)
    shot(page, "overview", of="#overview-panel")
    assert csp_violations(page) == []


def test_bulk_cancel_and_rerun_act_on_what_matched_and_report_refusals(
    hub: PageHub, room: str, pages: Pages
) -> None:
    job, _ = register_q(hub, room)
    with hub.rest(hub.alice) as rest:
        alices = [submit(rest, room, job, {"n": n}) for n in range(3)]
    with hub.rest(hub.bob) as rest:
        bobs = [submit(rest, room, job, {"n": n}) for n in range(2)]
    page = open_room(hub, pages, room)  # alice: not a superuser
    expect(page.locator("tr.task")).to_have_count(5)
    page.get_by_role("checkbox", name="Pending").check()
    expect(page.locator("tr.task")).to_have_count(5)
    page.get_by_role("button", name="Cancel all matching").click()
    dialog = page.locator("#bulk-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#bulk-dialog-text")).to_have_attribute("data-matched", "5")
    shot(page, "bulk-dialog")
    page.locator("#bulk-confirm").click()
    result = page.locator("#bulk-result")
    expect(result).to_have_attribute("data-succeeded", "3")
    expect(result).to_have_attribute("data-refused", "2")
    expect(result).to_contain_text("2 refused")
    for task in alices:
        assert hub.task(task["id"])["status"] == "cancelled"
    for task in bobs:
        assert hub.task(task["id"])["status"] == "pending"
    # Re-run two of alice's cancelled tasks, selected by their checkboxes.
    page.get_by_role("checkbox", name="Pending").uncheck()
    page.get_by_role("checkbox", name="Cancelled").check()
    expect(page.locator("tr.task")).to_have_count(3)
    for task in alices[:2]:
        task_item(page, task["id"]).locator("input.row-select").check()
    expect(page.locator("#selection-count")).to_have_text("2 tasks selected.")
    page.get_by_role("button", name="Re-run selected").click()
    expect(page.locator("#bulk-dialog-text")).to_have_attribute("data-matched", "2")
    page.locator("#bulk-confirm").click()
    expect(result).to_have_attribute("data-succeeded", "2")
    expect(result).to_have_attribute("data-refused", "0")
    with hub.rest(hub.alice) as rest:
        pending = rest.get(f"/rooms/{room}/tasks", params={"status": "pending"}).json()
    reruns = [t for t in pending["items"] if t.get("rerun_of")]
    assert sorted(t["rerun_of"] for t in reruns) == sorted(t["id"] for t in alices[:2])


def test_a_task_log_streams_into_the_detail_panel_and_is_there_after_a_reload(
    hub: PageHub, room: str, pages: Pages
) -> None:
    lines = [f"line {n} {XSS}" for n in range(3)]
    with Worker(hub.url, hub.alice, [Narrate], room=room, poll_interval=5.0) as serving:
        eventually_sync(lambda: serving.listening, 10, "the worker to join its job room")
        page = open_room(hub, pages, room)
        watch_csp(page)
        with hub.rest(hub.alice) as rest:
            task = submit(rest, room, f"{room}:analysis:Narrate", {"lines": lines})
        row = task_item(page, task["id"])
        expect(row).to_have_attribute("data-status", "running")
        row.click()
        log = page.locator("#detail .log .log-line .message")
        # Live: the lines come while the task still runs (it waits to be cancelled).
        expect(log).to_have_text(lines)
        expect(row).to_have_attribute("data-status", "running")
        assert page.locator("#detail .log img, #detail .log script").count() == 0
        expect(page.locator("#detail .log-line").first).to_have_attribute("data-level", "warning")
        shot(page, "detail-with-logs")
        assert csp_violations(page) == []
        page.reload()
        expect(page.locator("#detail")).to_have_attribute("data-task-id", task["id"])
        expect(log).to_have_text(lines)  # read from the hub
        page.locator("#detail").get_by_role("button", name="Cancel task").click()
        expect(task_item(page, task["id"])).to_have_attribute("data-status", "cancelled")
    assert page.evaluate("() => window.__pwned ?? null") is None
