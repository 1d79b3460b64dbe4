"""A real, small OpenID Connect provider on 127.0.0.1 for tests: a Starlette app under
uvicorn in a thread, serving what a relying party reads from a provider.

- ``/.well-known/openid-configuration``: the discovery document (``issuer``, ``jwks_uri``,
  ``userinfo_endpoint``, the sign-in endpoints below, and ``discovery_extras``, which
  ``reset`` keeps);
- ``/jwks``: the public halves of ``published`` keys (``jwks_reads`` counts the reads;
  ``jwks_down`` answers 503);
- ``/userinfo`` and ``/v1/auth/users/me`` (ZnDraw's): ``userinfo[token]``, else 401;
- sign-in for a public client (``register_client``; authorization code with PKCE S256):
  ``/authorize``, a login form (a user name, a button, consent implied) that remembers its
  user in a cookie, so that a second sign-in skips the form as a real provider's does;
  ``/token``, which checks the code, the client id, the redirect URI and the PKCE verifier
  and answers an ID token (``aud``: the client) and an access token (``aud``:
  ``AUDIENCE``, or an opaque one with ``opaque_access_tokens``), both ``token_lifetime``
  long; ``/logout``, the RP-initiated logout that forgets that user; CORS for the origins
  of the registered redirect URIs.

``sign`` issues tokens with any of its keys (``SigningKey``, RSA or EC, generated with
``cryptography``); ``rotate`` publishes a new key and withdraws the old ones.
"""

from __future__ import annotations

import base64
import hashlib
import html
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.support.server import HOST, free_port

AUDIENCE = "taskhub"
SESSION_COOKIE = "provider-session"


@dataclass(frozen=True)
class Grant:
    """An authorization code's request, kept until the code is redeemed (once)."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    nonce: str | None
    scope: str
    username: str


def pkce_challenge(verifier: str) -> str:
    """The S256 challenge of a PKCE verifier (RFC 7636 4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class SigningKey:
    """A private key of the provider and the ``kid``/``alg`` it is published under."""

    kid: str
    algorithm: str  # RS256 or ES256
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

    @classmethod
    def generate(cls, algorithm: str = "RS256") -> SigningKey:
        private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
        if algorithm == "RS256":
            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif algorithm == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        else:
            raise ValueError(algorithm)
        return cls(f"{algorithm.lower()}-{uuid.uuid4().hex[:8]}", algorithm, private)

    def jwk(self) -> dict[str, Any]:
        """The public JWK, as a JWKS lists it."""
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        return {**jwk, "kid": self.kid, "alg": self.algorithm, "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclass
class OidcProvider:
    """The provider's state; tests change it between requests (``reset`` restores it)."""

    port: int
    app: Starlette = field(init=False)
    _initial: list[SigningKey] = field(init=False)
    published: list[SigningKey] = field(default_factory=list)
    userinfo: dict[str, dict[str, Any]] = field(default_factory=dict)
    discovery_extras: dict[str, Any] = field(default_factory=dict)
    # Sign-in: client id -> its redirect URIs (post-logout ones too); codes not yet redeemed;
    # the signed-in users by session cookie; what was asked of ``/token`` and ``/logout``.
    clients: dict[str, set[str]] = field(default_factory=dict)
    grants: dict[str, Grant] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    logouts: list[dict[str, str]] = field(default_factory=list)
    token_lifetime: int = 300
    opaque_access_tokens: bool = False
    jwks_down: bool = False
    jwks_reads: int = 0
    discovery_reads: int = 0
    userinfo_reads: int = 0

    def __post_init__(self) -> None:
        # The keys published at first, made once (``reset`` publishes them again).
        self._initial = [SigningKey.generate("ES256"), SigningKey.generate("RS256")]
        self.app = Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._discovery),
                Route("/jwks", self._jwks),
                Route("/userinfo", self._userinfo),
                Route("/v1/auth/users/me", self._userinfo),
                Route("/authorize", self._authorize, methods=["GET", "POST"]),
                Route("/token", self._token, methods=["POST", "OPTIONS"]),
                Route("/logout", self._logout),
            ]
        )
        self.reset()

    @property
    def issuer(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/jwks",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "end_session_endpoint": f"{self.issuer}/logout",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            **self.discovery_extras,
        }

    @property
    def key(self) -> SigningKey:
        """The key ``sign`` uses unless told another: the newest published."""
        return self.published[-1]

    def reset(self) -> None:
        self.published = list(self._initial)
        self.userinfo = {}
        self.clients = {}
        self.grants = {}
        self.sessions = {}
        self.token_requests = []
        self.logouts = []
        self.token_lifetime = 300
        self.opaque_access_tokens = False
        self.jwks_down = False
        self.jwks_reads = self.discovery_reads = self.userinfo_reads = 0

    def rotate(self, algorithm: str = "RS256") -> SigningKey:
        """Publish a new key and withdraw every other one."""
        self.published = [SigningKey.generate(algorithm)]
        return self.key

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """Valid claims for the ``AUDIENCE``, five minutes long; ``None`` drops a claim."""
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "alice-sub",
            "preferred_username": "alice",
            "iat": now,
            "exp": now + 300,
            **overrides,
        }
        return {name: value for name, value in claims.items() if value is not None}

    def sign(
        self, key: SigningKey | None = None, headers: dict[str, Any] | None = None, **claims: Any
    ) -> str:
        """A token of ``claims`` (over the defaults of ``claims()``) signed with ``key``."""
        key = key or self.key
        return jwt.encode(
            self.claims(**claims),
            key.private,
            algorithm=key.algorithm,
            headers={"kid": key.kid, **(headers or {})},
        )

    def register_client(self, client_id: str, *redirect_uris: str) -> None:
        """A public client (no secret) that may be sent back to ``redirect_uris``."""
        self.clients[client_id] = set(redirect_uris)

    async def _discovery(self, request: Request) -> Response:
        self.discovery_reads += 1
        return self._cors(request, JSONResponse(self.discovery))

    def _cors(self, request: Request, response: Response) -> Response:
        """Let the pages of registered clients read ``response`` (CORS)."""
        origin = request.headers.get("origin")
        allowed = {origin_of(uri) for uris in self.clients.values() for uri in uris}
        if origin is not None and origin in allowed:
            response.headers["access-control-allow-origin"] = origin
            response.headers["vary"] = "Origin"
            if request.method == "OPTIONS":
                response.headers["access-control-allow-methods"] = "GET, POST"
                response.headers["access-control-allow-headers"] = "content-type, accept"
        return response

    async def _authorize(self, request: Request) -> Response:
        """The authorization endpoint: a request it cannot send back is a 400 page; else a
        signed-in user (the cookie) goes straight back with a code, anyone else gets the
        login form, whose POST carries the request on and signs its user in."""
        if request.method == "POST":
            fields = dict(parse_qsl((await request.body()).decode()))
            asked = {k: v for k, v in fields.items() if k != "username"}
            username = fields.get("username", "").strip()
        else:
            asked = dict(request.query_params)
            username = self.sessions.get(request.cookies.get(SESSION_COOKIE, ""), "")
        client_id, redirect_uri = asked.get("client_id", ""), asked.get("redirect_uri", "")
        if redirect_uri not in self.clients.get(client_id, set()):
            return HTMLResponse("<h1>Unknown client or redirect URI</h1>", status_code=400)
        back: dict[str, str] = {"state": asked["state"]} if "state" in asked else {}
        scopes = asked.get("scope", "").split()
        if asked.get("response_type") != "code" or "openid" not in scopes:
            return _redirect(redirect_uri, error="unsupported_response_type", **back)
        if asked.get("code_challenge_method") != "S256" or not asked.get("code_challenge"):
            return _redirect(redirect_uri, error="invalid_request", **back)
        if not username:
            return HTMLResponse(_login_form(asked))
        code = secrets.token_urlsafe(24)
        self.grants[code] = Grant(
            client_id,
            redirect_uri,
            asked["code_challenge"],
            asked.get("nonce"),
            " ".join(scopes),
            username,
        )
        response = _redirect(redirect_uri, code=code, iss=self.issuer, **back)
        if request.method == "POST":
            session = secrets.token_urlsafe(24)
            self.sessions[session] = username
            response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="lax")
        return response

    async def _token(self, request: Request) -> Response:
        """The token endpoint, for public clients: the code once, with the client id, the
        redirect URI and the PKCE verifier of its request."""
        if request.method == "OPTIONS":
            return self._cors(request, Response(status_code=204))
        fields = dict(parse_qsl((await request.body()).decode()))
        self.token_requests.append(fields)
        grant = self.grants.pop(fields.get("code", ""), None)
        if fields.get("grant_type") != "authorization_code":
            return self._cors(request, _token_error("unsupported_grant_type"))
        if (
            grant is None
            or fields.get("client_id") != grant.client_id
            or fields.get("redirect_uri") != grant.redirect_uri
            or pkce_challenge(fields.get("code_verifier", "")) != grant.code_challenge
        ):
            return self._cors(request, _token_error("invalid_grant"))
        identity = {"sub": grant.username, "preferred_username": grant.username}
        life = {"exp": int(time.time()) + self.token_lifetime}
        id_token = self.sign(
            aud=grant.client_id, azp=grant.client_id, nonce=grant.nonce, **identity, **life
        )
        if self.opaque_access_tokens:
            access_token = secrets.token_urlsafe(32)
        else:
            access_token = self.sign(scope=grant.scope, **identity, **life)
        answer = {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": self.token_lifetime,
            "id_token": id_token,
            "scope": grant.scope,
        }
        return self._cors(request, JSONResponse(answer, headers={"cache-control": "no-store"}))

    async def _logout(self, request: Request) -> Response:
        """RP-initiated logout: forget the session, then back to a registered address."""
        asked = dict(request.query_params)
        self.logouts.append(asked)
        self.sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
        back = asked.get("post_logout_redirect_uri")
        registered = {uri for uris in self.clients.values() for uri in uris}
        response: Response
        if back is not None and back in registered:
            extra = {"state": asked["state"]} if "state" in asked else {}
            response = _redirect(back, **extra)
        else:
            response = HTMLResponse("<h1>Signed out</h1>")
        response.delete_cookie(SESSION_COOKIE)
        return response

    async def _jwks(self, request: Request) -> Response:
        self.jwks_reads += 1
        if self.jwks_down:
            return JSONResponse({"error": "down"}, status_code=503)
        return JSONResponse({"keys": [key.jwk() for key in self.published]})

    async def _userinfo(self, request: Request) -> Response:
        self.userinfo_reads += 1
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        answer = self.userinfo.get(token) if scheme.lower() == "bearer" else None
        if answer is None:
            return JSONResponse({"detail": "Unauthorized"}, status_code=401)
        return JSONResponse(answer)


def _redirect(url: str, **query: str) -> Response:
    return RedirectResponse(f"{url}{'&' if '?' in url else '?'}{urlencode(query)}", 303)


def _token_error(error: str) -> Response:
    return JSONResponse({"error": error}, status_code=400, headers={"cache-control": "no-store"})


def _login_form(asked: dict[str, str]) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in asked.items()
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Provider</title>'
        '<link rel="icon" href="data:,">'
        '</head><body><h1>Sign in to the provider</h1><form method="post" action="/authorize">'
        f'{hidden}<label for="username">User name</label>'
        '<input id="username" name="username" autocomplete="username" required>'
        '<button type="submit">Continue</button></form></body></html>'
    )


@contextmanager
def running_oidc_provider() -> Iterator[OidcProvider]:
    """An ``OidcProvider`` served on a free port of 127.0.0.1 until the block ends."""
    provider = OidcProvider(free_port())
    config = uvicorn.Config(
        provider.app, host=HOST, port=provider.port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="oidc-provider", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test OpenID provider did not start")
        time.sleep(0.01)
    try:
        yield provider
    finally:
        server.should_exit = True
        thread.join(timeout=10)
