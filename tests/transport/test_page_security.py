"""Security headers. The page's: the import map's hash is read from the page itself (so an
edit of the map never needs a hand-made hash), and a page without one is refused at start.
Everyone else's: every answer a running ``taskhub serve`` writes (API JSON, problems, 404s
under ``/static`` and the API, metrics, health, Engine.IO polling) carries ``nosniff``, no
framing, no referrer and a policy allowing nothing; the page and its assets keep theirs.
Headers do not depend on the database: one server on SQLite for the module."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from taskhub.transport.page_security import (
    content_security_policy,
    import_map_hash,
    security_headers,
)
from tests.support.server import HubServer, running_hub

PAGE = """<!doctype html><html><head>
<script type="importmap">
    { "imports": { "x": "/vendor/x.js" } }
  </script>
</head></html>"""


def test_the_import_map_is_allowed_by_the_hash_of_its_exact_text(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text(PAGE)
    text = '\n    { "imports": { "x": "/vendor/x.js" } }\n  '
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    assert import_map_hash(page) == f"'sha256-{digest}'"
    policy = content_security_policy(page)
    assert f"script-src 'self' 'sha256-{digest}'" in policy
    assert "unsafe-inline" not in policy
    page.write_text(PAGE.replace("x.js", "y.js"))  # another map, another hash
    assert import_map_hash(page) != f"'sha256-{digest}'"


def test_the_headers_name_every_protection(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text(PAGE)
    headers = dict(security_headers(page))
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert headers[b"referrer-policy"] == b"no-referrer"
    assert headers[b"x-frame-options"] == b"DENY"
    assert b"frame-ancestors 'none'" in headers[b"content-security-policy"]


def test_a_page_without_an_import_map_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<!doctype html><title>x</title>")
    with pytest.raises(ValueError, match="importmap"):
        import_map_hash(page)


# What every answer but the page's carries.
NOT_THE_PAGE = {
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with running_hub("sqlite", tmp_path_factory.mktemp("headers-hub")) as running:
        yield running


@pytest.fixture
def client(server: HubServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=10.0, trust_env=False) as http:
        yield http


def assert_hardened(response: httpx.Response) -> None:
    """The default headers, each exactly once (none added twice, none doubled)."""
    for name, value in NOT_THE_PAGE.items():
        assert response.headers.get_list(name) == [value], (name, response.headers)


def test_api_json_and_problem_answers_carry_the_headers(
    server: HubServer, client: httpx.Client
) -> None:
    me = client.get("/v1/joblib/users/me", headers=server.admin_headers)
    assert me.status_code == 200
    assert me.headers["content-type"].startswith("application/json")
    assert_hardened(me)

    unsigned = client.get("/v1/joblib/users/me")  # no token: a problem
    assert unsigned.status_code == 401
    assert unsigned.headers["content-type"].startswith("application/problem+json")
    assert_hardened(unsigned)

    broken = client.put(
        "/v1/joblib/rooms/lab/jobs",
        headers={**server.admin_headers, "Content-Type": "application/json"},
        content=b"{not json",
    )
    assert broken.status_code in (400, 422)
    assert broken.headers["content-type"].startswith("application/problem+json")
    assert_hardened(broken)


def test_not_found_answers_carry_the_headers(client: httpx.Client) -> None:
    for path in ("/static/no-such-file.js", "/v1/joblib/no-such-route", "/no-such-page"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert_hardened(response)


def test_health_metrics_and_openapi_carry_the_headers(client: httpx.Client) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert_hardened(response)


def test_engine_io_polling_answers_carry_the_headers(client: httpx.Client) -> None:
    handshake = client.get("/socket.io/", params={"EIO": "4", "transport": "polling"})
    assert handshake.status_code == 200
    assert handshake.text.startswith("0{"), handshake.text  # Engine.IO's OPEN packet
    assert '"sid"' in handshake.text
    assert_hardened(handshake)

    unknown = client.get(
        "/socket.io/", params={"EIO": "4", "transport": "polling", "sid": "no-such-session"}
    )
    assert unknown.status_code == 400
    assert_hardened(unknown)


def test_the_page_and_its_assets_keep_their_own_policy(client: httpx.Client) -> None:
    page = client.get("/")
    asset = client.get("/static/app.js")
    for response in (page, asset):
        assert response.status_code == 200
        [policy] = response.headers.get_list("content-security-policy")
        assert policy.startswith("default-src 'self'"), policy
        assert "script-src 'self' 'sha256-" in policy
        assert response.headers.get_list("x-content-type-options") == ["nosniff"]
        assert response.headers.get_list("x-frame-options") == ["DENY"]
        assert response.headers.get_list("referrer-policy") == ["no-referrer"]
