"""``docs/protocol.md`` is in step with the code: its endpoint table lists exactly the
(method, path) pairs the app serves under the API prefix, its problem table every problem
type the code can answer with (at its status), and its Socket.IO section every event."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taskhub.main import API_PREFIX, ENDPOINTS, create_app
from taskhub.rules.errors import DomainError
from taskhub.rules.events import (
    JobsInvalidate,
    TaskAvailable,
    TaskCancelled,
    TaskLogged,
    TaskStatusChanged,
)
from taskhub.settings import Settings
from taskhub.transport.http import problems
from taskhub.transport.http.openapi import build_openapi, openapi_path
from taskhub.transport.sockets.handlers import CLIENT_EVENTS
from tests.support.server import REPO_ROOT

DOCUMENT = REPO_ROOT / "docs" / "protocol.md"
APP_SOURCES = REPO_ROOT / "app"
ENDPOINT_HEADER = ("Method", "Path", "Purpose", "Success status")
PROBLEM_HEADER = ("Slug", "Status", "When")
# A problem answered with a literal status and slug (``problem_body(409, "socket-…", …)``).
_LITERAL_PROBLEM = re.compile(r'problem_(?:body|response)\(\s*(\d{3}),\s*"([a-z][a-z0-9-]*)"')


def cells(line: str) -> list[str]:
    """The cells of a markdown table row, without surrounding spaces and backticks."""
    return [cell.strip().strip("`").strip() for cell in line.strip().strip("|").split("|")]


def table(text: str, header: tuple[str, ...]) -> list[list[str]]:
    """The rows of the one table of ``text`` whose header is ``header``."""
    lines = text.splitlines()
    starts = [
        i for i, line in enumerate(lines) if line.startswith("|") and cells(line) == list(header)
    ]
    assert len(starts) == 1, f"expected one table headed {header}, found {len(starts)}"
    rows = []
    for line in lines[starts[0] + 2 :]:  # past the header and its |---| line
        if not line.startswith("|"):
            break
        row = cells(line)
        assert len(row) == len(header), f"malformed row: {line!r}"
        rows.append(row)
    return rows


def documented_routes(text: str) -> set[tuple[str, str]]:
    rows = table(text, ENDPOINT_HEADER)
    routes = {(method, path) for method, path, _purpose, _status in rows}
    assert len(routes) == len(rows), "an endpoint is listed twice"
    return routes


def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    """What the app answers under the API prefix (HEAD aside: every GET answers it), as
    its endpoint records say and as its API router does."""
    from_endpoints = {(ep.method, openapi_path(API_PREFIX + ep.path)) for ep in ENDPOINTS}
    app = create_app(Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'hub.db'}"))
    from_routes = {(method, openapi_path(path)) for method, path in app.api.operations()}
    assert from_routes == from_endpoints
    return from_endpoints


def domain_errors() -> list[type[DomainError]]:
    found: list[type[DomainError]] = [DomainError]
    for cls in found:
        found.extend(sub for sub in cls.__subclasses__() if sub not in found)
    return found


def problem_types() -> dict[str, int]:
    """Every problem slug the code defines or answers with, and its status."""
    slugs: dict[str, set[int]] = {}
    for cls in domain_errors():
        slugs.setdefault(cls.slug, set()).add(cls.status)
    for status, error in problems.FRAMEWORK_ERRORS.items():
        slugs.setdefault(error.slug, set()).add(status)
    slugs.setdefault(problems.DATABASE_UNAVAILABLE, set()).add(503)
    for source in APP_SOURCES.rglob("*.py"):
        for status, slug in _LITERAL_PROBLEM.findall(source.read_text(encoding="utf-8")):
            slugs.setdefault(slug, set()).add(int(status))
    ambiguous = {slug: statuses for slug, statuses in slugs.items() if len(statuses) > 1}
    assert not ambiguous, f"one slug, several statuses: {ambiguous}"
    return {slug: statuses.pop() for slug, statuses in slugs.items()}


@pytest.fixture(scope="module")
def text() -> str:
    return DOCUMENT.read_text(encoding="utf-8")


def test_the_endpoint_table_is_what_the_app_serves(text: str, tmp_path: Path) -> None:
    documented = documented_routes(text)
    served = served_routes(tmp_path)
    assert not documented - served, f"documented, not served: {sorted(documented - served)}"
    assert not served - documented, f"served, not documented: {sorted(served - documented)}"
    openapi = build_openapi(ENDPOINTS, API_PREFIX)["paths"]
    assert {(m.upper(), path) for path, item in openapi.items() for m in item} == documented
    statuses = {(m, path): status for m, path, _purpose, status in table(text, ENDPOINT_HEADER)}
    for ep in ENDPOINTS:
        status = statuses[(ep.method, openapi_path(API_PREFIX + ep.path))]
        assert status.split()[0] == str(ep.status), (ep.method, ep.path, status)


def test_a_missing_or_extra_row_is_noticed(text: str, tmp_path: Path) -> None:
    served = served_routes(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith(("| GET |", "| POST |"))]
    assert rows
    assert documented_routes(text.replace(rows[0] + "\n", "", 1)) != served
    extra = f"{rows[0]}\n| DELETE | `{API_PREFIX}/tasks/{{task_id}}` | x | 204 |\n"
    assert documented_routes(text.replace(rows[0] + "\n", extra, 1)) != served


def test_every_problem_type_is_documented_with_its_status(text: str) -> None:
    rows = table(text, PROBLEM_HEADER)
    documented = {slug: status for slug, status, _when in rows}
    assert len(documented) == len(rows), "a problem type is listed twice"
    defined = problem_types()
    missing = set(defined) - set(documented)
    assert not missing, f"problem types missing from the document: {sorted(missing)}"
    wrong = {slug: (documented[slug], status) for slug, status in defined.items()
             if documented[slug] != str(status)}  # fmt: skip
    assert not wrong, f"documented status differs from the code's: {wrong}"
    handlers = (APP_SOURCES / "transport" / "http" / "problems.py").read_text(encoding="utf-8")
    unknown = {slug for slug in documented if slug not in defined and f'"{slug}"' not in handlers}
    assert not unknown, f"documented problem types the code does not have: {sorted(unknown)}"
    assert problems.problem_body(400, "x", "t", "d")["type"] == "/v1/problems/x"
    assert "`/v1/problems/<slug>`" in text


def test_the_base_path_and_every_socket_event_are_documented(text: str) -> None:
    assert f"`{API_PREFIX}`" in text
    socket_section = text.split("\n## Socket.IO\n", 1)[1].split("\n## ", 1)[0]
    emitted = [
        event.name
        for event in (TaskAvailable, TaskStatusChanged, JobsInvalidate, TaskCancelled, TaskLogged)
    ]
    for name in [*CLIENT_EVENTS, *emitted]:
        assert f"| `{name}` |" in socket_section, name
