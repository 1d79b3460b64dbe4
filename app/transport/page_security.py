"""Security headers of the room page and its assets (``/``, ``/static/*``, ``/vendor/*``).

A strict Content-Security-Policy: scripts only from the hub itself, plus the page's one
inline script, its import map, allowed by the SHA-256 of its exact text (read from
index.html when the app starts, so an edit of the map never needs a hand-made hash); no
inline styles, no plugins, no framing, no other origins. With it, the usual hardening
headers: no MIME sniffing, no referrer, no framing (for browsers without CSP level 2).
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_IMPORT_MAP = re.compile(r'<script type="importmap">(.*?)</script>', re.DOTALL)


def import_map_hash(index_html: Path) -> str:
    """The CSP source of the page's import map: ``'sha256-…'`` of its exact text."""
    found = _IMPORT_MAP.search(index_html.read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f'{index_html} has no <script type="importmap">')
    digest = hashlib.sha256(found.group(1).encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy(index_html: Path) -> str:
    """The page's policy: everything from the hub itself, nothing inline but the import map."""
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self' {import_map_hash(index_html)}",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def security_headers(index_html: Path) -> list[tuple[bytes, bytes]]:
    """Every header the page and its assets are served with."""
    return [
        (b"content-security-policy", content_security_policy(index_html).encode("ascii")),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    ]


class PageSecurity:
    """ASGI wrapper adding the page's security headers to every response of ``app``
    (replacing any the app set itself)."""

    def __init__(self, app: ASGIApp, headers: list[tuple[bytes, bytes]]) -> None:
        self.app = app
        self.headers = headers
        self._names = {name for name, _ in headers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", ()) if k not in self._names]
                message["headers"] = kept + self.headers
            await send(message)

        await self.app(scope, receive, send_secured)
