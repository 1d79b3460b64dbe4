"""The room page shows a job's sharing policy (its claim order and running limits) and, in a
pending task's details, why it waits: its place in line, the order, and the running limit
that holds it back (``GET /tasks/{id}/place``), following the job's tasks live. On both
engines: PostgreSQL checks the limits in a trigger of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.page.browser import Pages, sign_in, task_item
from tests.page.conftest import HUB_ENV, PageHub
from tests.support.server import running_hub

SHOTS = Path("/tmp/shots")
EMPTY = {"type": "object", "properties": {}}
FAIR_BY_SUBMITTER = "Fair: one task per submitter in turn"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hub(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PageHub]:
    """The page tests' hub (alice and bob), on each engine in turn."""
    directory = tmp_path_factory.mktemp(f"fair-hub-{request.param}")
    with running_hub(request.param, directory, env=HUB_ENV) as server:
        yield PageHub(server, server.create_user("alice"), server.create_user("bob"))


def register(rest: httpx.Client, room: str, name: str, **policy: Any) -> tuple[str, str]:
    """Register job ``name`` in ``room`` with ``policy``: its full name and worker id."""
    body = {"category": "analysis", "name": name, "schema": EMPTY, **policy}
    response = rest.put(f"/rooms/{room}/jobs", json=body)
    assert response.status_code == 201, response.text
    job = response.json()
    for key, value in policy.items():
        assert job[key] == value, job
    return f"{room}:analysis:{name}", job["worker_id"]


def submit(rest: httpx.Client, room: str, job: str) -> str:
    response = rest.post(f"/rooms/{room}/tasks/{job}", json={"payload": {}})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def claim(rest: httpx.Client, worker_id: str, max_tasks: int = 1) -> dict[str, str]:
    """Claim up to ``max_tasks``: task id -> claim token."""
    response = rest.post("/tasks/claim", json={"worker_id": worker_id, "max_tasks": max_tasks})
    assert response.status_code == 200, response.text
    return {task["id"]: task["claim_token"] for task in response.json()["tasks"]}


def move(rest: httpx.Client, task_id: str, token: str, *statuses: str) -> None:
    for status in statuses:
        response = rest.patch(f"/tasks/{task_id}", json={"status": status, "claim_token": token})
        assert response.status_code == 200, response.text


def place(rest: httpx.Client, task_id: str) -> dict[str, Any]:
    response = rest.get(f"/tasks/{task_id}/place")
    assert response.status_code == 200, response.text
    return dict(response.json())


def ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def open_page(hub: PageHub, pages: Pages, token: str, query: str) -> Page:
    page = pages.open(f"/?{query}")
    sign_in(page, token)
    return page


def why_it_waits(page: Page) -> Locator:
    return page.locator("#detail .task-place")


def test_a_held_back_task_says_whose_share_is_full_until_it_frees(
    hub: PageHub, room: str, pages: Pages
) -> None:
    with hub.rest(hub.alice) as alice, hub.rest(hub.bob) as bob:
        job, worker = register(
            alice, room, "Fair", claim_order="fair-by-submitter", max_running_per_submitter=1
        )
        first, second = submit(alice, room, job), submit(alice, room, job)
        bobs = submit(bob, room, job)
        # One each: alice's second task waits for her first (her share is full).
        tokens = claim(alice, worker, max_tasks=3)
        assert set(tokens) == {first, bobs}
        move(alice, first, tokens[first], "running")
        held = place(alice, second)
        assert held["held_back"] == {"scope": "submitter", "running": 1, "limit": 1}
        line = f"{ordinal(held['queue_position'])} in line · {FAIR_BY_SUBMITTER}"

        # The job's policy, where the job is shown.
        page = open_page(hub, pages, hub.alice, f"room={room}&job={job}")
        expect(page.get_by_role("heading", name="Submit Fair")).to_be_visible()
        expect(page.locator("#job-policy .policy-order")).to_have_text(FAIR_BY_SUBMITTER)
        expect(page.locator("#job-policy .policy-limit")).to_have_text(
            ["At most 1 running per submitter"]
        )
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#submit-panel").screenshot(path=str(SHOTS / "fair-job.png"))

        # Alice's pending task: its place, and that her own running task holds it back.
        task_item(page, second).click()
        waits = why_it_waits(page)
        expect(waits.locator(".place-line")).to_have_text(line)
        expect(waits.locator(".place-limits")).to_have_text("At most 1 running per submitter")
        expect(waits.locator(".held-back")).to_have_text("Limited: 1 of yours running (limit 1)")
        page.screenshot(path=str(SHOTS / "fair-detail.png"))
        # Bob, from a link to the task: the same, as someone else's.
        other = open_page(hub, pages, hub.bob, f"room={room}&task={second}")
        expect(why_it_waits(other).locator(".held-back")).to_have_text(
            "Limited: 1 of this submitter's tasks running (limit 1)"
        )

        # Her first task ends: nothing holds the second back (the events of the job's tasks
        # refresh it); it keeps its place in line.
        move(alice, first, tokens[first], "completed")
        assert place(alice, second)["held_back"] is None
        for shown in (page, other):
            expect(why_it_waits(shown).locator(".held-back")).to_have_count(0)
            expect(why_it_waits(shown).locator(".place-line")).to_have_text(line)

        # Taken: no longer waiting, so no place at all.
        assert set(claim(alice, worker)) == {second}
        for shown in (page, other):
            expect(shown.locator("#detail .badge")).to_have_attribute("data-status", "claimed")
            expect(why_it_waits(shown)).to_be_hidden()
            expect(why_it_waits(shown).locator("p")).to_have_count(0)
    pages.assert_no_console_errors()


def test_a_fifo_job_without_limits_says_oldest_first_and_nothing_holds_back(
    hub: PageHub, room: str, pages: Pages
) -> None:
    with hub.rest(hub.alice) as alice:
        job, _ = register(alice, room, "Plain")
        tasks = [submit(alice, room, job) for _ in range(3)]
        shown = place(alice, tasks[2])
        assert (shown["claim_order"], shown["held_back"]) == ("fifo", None)
        assert shown["queue_position"] == 3

    page = open_page(hub, pages, hub.alice, f"room={room}&job={job}")
    expect(page.get_by_role("heading", name="Submit Plain")).to_be_visible()
    expect(page.locator("#job-policy .policy-order")).to_have_text("Oldest first")
    expect(page.locator("#job-policy .policy-limit")).to_have_count(0)

    task_item(page, tasks[2]).click()
    waits = why_it_waits(page)
    expect(waits.locator(".place-line")).to_have_text("3rd in line · Oldest first")
    expect(waits.locator(".place-limits")).to_have_count(0)
    expect(waits.locator(".held-back")).to_have_count(0)
    expect(page.locator("#detail")).not_to_contain_text("Limited")
    pages.assert_no_console_errors()
