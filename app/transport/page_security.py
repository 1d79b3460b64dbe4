"""Security headers: the room page's and its assets' (``/``, ``/static/*``, ``/vendor/*``),
and a default set on every other response the hub writes.

The page: a strict Content-Security-Policy: scripts only from the hub itself, plus the
page's one inline script, its import map, allowed by the SHA-256 of its exact text (read
from index.html when the app starts, so an edit of the map never needs a hand-made hash);
no inline styles, no plugins, no framing, no other origins (but the identity provider's,
for the page's sign-in, when one is configured). With it, the usual hardening
headers: no MIME sniffing, no referrer, no framing (for browsers without CSP level 2).

Everything else (API JSON, problems, 404s, metrics, health, Socket.IO polling answers):
the same hardening headers and a policy allowing nothing (``SecurityHeaders``, around the
whole app), so that no answer can be sniffed into HTML, framed, or run anything if a
browser is ever pointed at it.
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


def content_security_policy(index_html: Path, sign_in_origin: str | None = None) -> str:
    """The page's policy: everything from the hub itself, nothing inline but the import map;
    with a provider to sign in with, requests to its origin too (its discovery document and
    token endpoint: the page leaves for its sign-in and sign-out pages by navigating, which
    no directive restricts)."""
    connect = "connect-src 'self'" + (f" {sign_in_origin}" if sign_in_origin else "")
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self' {import_map_hash(index_html)}",
            "style-src 'self'",
            "img-src 'self' data:",
            connect,
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


# Sent with every response, the page's included.
_HARDENING: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
# The policy of every response but the page and its assets: nothing may load or frame it.
DEFAULT_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    *_HARDENING,
)


def security_headers(
    index_html: Path, sign_in_origin: str | None = None
) -> list[tuple[bytes, bytes]]:
    """Every header the page and its assets are served with."""
    policy = content_security_policy(index_html, sign_in_origin)
    return [
        (b"content-security-policy", policy.encode("ascii")),
        *_HARDENING,
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


class SecurityHeaders:
    """ASGI wrapper of the whole app: every HTTP response gets ``DEFAULT_HEADERS``, but for
    those it already carries (the page's own policy, set by ``PageSecurity``, stays).
    Pure ASGI, so long-polls and streamed answers pass through untouched."""

    def __init__(
        self, app: ASGIApp, headers: tuple[tuple[bytes, bytes], ...] = DEFAULT_HEADERS
    ) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                # Engine.IO writes its header names capitalised ("Content-Type").
                present = {bytes(name).lower() for name, _ in headers}
                headers.extend(h for h in self.headers if h[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_secured)
