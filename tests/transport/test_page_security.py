"""The page's security headers: the import map's hash is read from the page itself (so an
edit of the map never needs a hand-made hash), and a page without one is refused at start."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from taskhub.transport.page_security import (
    content_security_policy,
    import_map_hash,
    security_headers,
)

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
