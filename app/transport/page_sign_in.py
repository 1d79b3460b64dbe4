"""What the room page needs to offer "Sign in with …": ``GET /auth/config.json``, read
before sign-in (no token), answering the OpenID Connect client the page is (the issuer,
its public client id, the scopes it asks for, the button's label), or ``{}`` when the hub
has no provider for the page (``TASKHUB_OIDC_CLIENT_ID`` unset): the page then stays as
without one. Nothing secret is in it: a public client has no secret."""

from __future__ import annotations

from typing import TypedDict
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from taskhub.settings import Settings


class PageSignIn(TypedDict):
    issuer: str
    client_id: str
    scopes: str
    name: str


def page_sign_in(settings: Settings) -> PageSignIn | None:
    """The page's client, when one is configured."""
    if settings.oidc_client_id is None or settings.jwt_issuer is None:
        return None
    return PageSignIn(
        issuer=settings.jwt_issuer,
        client_id=settings.oidc_client_id,
        scopes=settings.oidc_scopes,
        name=settings.oidc_provider_name or urlsplit(settings.jwt_issuer).hostname or "",
    )


def provider_origin(settings: Settings) -> str | None:
    """The origin the page fetches from for sign-in (discovery, token endpoint), if any."""
    client = page_sign_in(settings)
    if client is None:
        return None
    parts = urlsplit(client["issuer"])
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


async def sign_in_config(request: Request) -> Response:
    """``GET /auth/config.json``: the page's client, or ``{}``."""
    client = page_sign_in(request.app.state.hub.settings)
    return JSONResponse(client or {}, headers={"cache-control": "no-cache"})
