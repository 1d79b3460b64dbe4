"""Driving the room page in Debian's Chromium with Playwright: launch, pages that collect
console errors, signing in, and a log of every state a task's list item went through."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.server import REPO_ROOT

try:
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Locator, Page, expect
except ImportError as exc:  # a failure, never a skip
    raise ImportError(
        "The page tests need Playwright's Python package: .venv/bin/pip install -e '.[test]' "
        "(browsers come from Debian: apt-get install chromium; never `playwright install`)."
    ) from exc

CHROMIUM = Path("/usr/bin/chromium")
SOCKETIO_BUNDLE = REPO_ROOT / "static" / "vendor" / "socket.io" / "socket.io.esm.min.js"
ARTIFACTS = REPO_ROOT / "test-artifacts"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}

expect.set_options(timeout=10_000)


def missing_prerequisites() -> list[str]:
    """What the page tests cannot run without, as instructions."""
    problems = []
    if not CHROMIUM.is_file():
        problems.append(
            f"{CHROMIUM} is missing: apt-get update && apt-get install -y chromium "
            "(.ci/run installs it)"
        )
    if not SOCKETIO_BUNDLE.is_file():
        problems.append(
            f"{SOCKETIO_BUNDLE.relative_to(REPO_ROOT)} is missing: run `npm ci` in the "
            "repository (./dev test does)"
        )
    return problems


@dataclass
class Pages:
    """Browser contexts opened by one test (each its own person: storage, cookies), and
    the console errors and uncaught exceptions of their pages."""

    browser: Browser
    base_url: str
    contexts: list[BrowserContext] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def open(self, path: str = "/", *, viewport: dict[str, int] | None = None) -> Page:
        context = self.browser.new_context(viewport=viewport or {"width": 1280, "height": 900})
        self.contexts.append(context)
        page = context.new_page()
        page.on("console", lambda message: self._console(page, message))
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.goto(self.base_url + path)
        return page

    def _console(self, page: Page, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} (at {message.location.get('url', page.url)})")

    def assert_no_console_errors(self, allowed: Iterable[str] = ()) -> None:
        """No console error except those matching one of the ``allowed`` patterns."""
        patterns = [re.compile(pattern) for pattern in allowed]
        unexpected = [e for e in self.errors if not any(p.search(e) for p in patterns)]
        assert not unexpected, "browser console errors:\n" + "\n".join(unexpected)

    def close(self) -> None:
        for context in self.contexts:
            context.close()


def sign_in(page: Page, token: str) -> None:
    """Sign in through the form; the page then connects its socket."""
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(connection(page)).to_have_attribute("data-state", "connected")


def connection(page: Page) -> Locator:
    return page.locator("#connection")


def reconnect(page: Page) -> None:
    """Take the page's network away until it shows itself offline, then give it back until
    it is connected again (its socket reconnects, and the page re-reads what it shows)."""
    page.context.set_offline(True)
    expect(connection(page)).to_have_attribute("data-state", "offline")
    page.context.set_offline(False)
    expect(connection(page)).to_have_attribute("data-state", "connected")


def task_item(page: Page, task_id: str) -> Locator:
    return page.locator(f'tr.task[data-task-id="{task_id}"]')


def job_button(page: Page, name: str) -> Locator:
    return page.locator("#jobs").get_by_role("button", name=re.compile(rf"^{name}\b"))


def field_error(page: Page, input_id: str) -> Locator:
    return page.locator(f"#{input_id}-error")


# Records, for every task item, each (status, progress %) it showed: a MutationObserver
# sees every attribute change, even several within one event-loop turn.
_WATCH = """() => {
  window.__taskLog = [];
  const list = document.querySelector("#tasks");
  const record = (item) => {
    const bar = item.querySelector(".bar");
    window.__taskLog.push({
      id: item.dataset.taskId,
      status: item.dataset.status,
      progress: bar.closest(".progress").hidden ? null : bar.getAttribute("aria-valuenow"),
    });
  };
  new MutationObserver((mutations) => {
    for (const mutation of mutations) {
      const item = mutation.target.closest?.("tr.task");
      if (item) record(item);
      for (const node of mutation.addedNodes) if (node.matches?.("tr.task")) record(node);
    }
  }).observe(list, {
    subtree: true, childList: true, attributes: true,
    attributeFilter: ["data-status", "aria-valuenow"],
  });
}"""


def watch_tasks(page: Page) -> None:
    page.evaluate(_WATCH)


def task_log(page: Page, task_id: str) -> list[tuple[str, Any]]:
    """The (status, progress) states the item of ``task_id`` went through, without repeats."""
    entries = page.evaluate("(id) => window.__taskLog.filter((entry) => entry.id === id)", task_id)
    states: list[tuple[str, Any]] = []
    for entry in entries:
        state = (entry["status"], entry["progress"])
        if not states or states[-1] != state:
            states.append(state)
    return states


def statuses(log: list[tuple[str, Any]]) -> list[str]:
    """The statuses of a task log, without repeats."""
    seen: list[str] = []
    for status, _ in log:
        if not seen or seen[-1] != status:
            seen.append(status)
    return seen
