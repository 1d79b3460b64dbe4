"""Signing in with an identity provider's JWT at the REST door (docs/operations.md, "Signing
in with an identity provider"), beside Taskhub's own ``th_`` tokens, against a real OpenID
Connect provider on 127.0.0.1, on both engines: the provider's users are users of the hub
(their rows made on first sight, their tasks theirs), a token that does not hold is 401, a
provider whose keys cannot be read is 503, and a long-poll ends when its JWT does. A socket
opened with a JWT (the ``token`` of its ``auth``) is disconnected when the JWT expires."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import socketio

from taskhub.main import create_app
from taskhub.services.users import list_users
from taskhub.settings import Settings
from taskhub.store.database import Database
from tests.conftest import Users
from tests.realtime.hubs import served
from tests.support.api import JOB, ApiClient, assert_problem
from tests.support.oidc_provider import AUDIENCE, OidcProvider, running_oidc_provider
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually

# A JWT that expires while its long-poll waits: this long, and the poll's answer within
# as long again and plenty of room for a slow machine.
SHORT_LIFE = 2
EXPIRED_WITHIN = SHORT_LIFE + 8


@pytest.fixture(scope="module")
def running_provider() -> Iterator[OidcProvider]:
    with running_oidc_provider() as provider:
        yield provider


@pytest.fixture
def provider(running_provider: OidcProvider) -> OidcProvider:
    running_provider.reset()
    return running_provider


@pytest.fixture
def settings(database_url: str, provider: OidcProvider) -> Settings:
    return Settings(
        database_url=database_url,
        long_poll_max_wait_seconds=60,
        jwt_issuer=provider.issuer,
        jwt_audience=[AUDIENCE],
        jwt_leeway_seconds=0,
        jwt_superuser_group="taskhub-admins",
    )


def signed_in(http: httpx.AsyncClient, token: str) -> ApiClient:
    return ApiClient(http, token)


async def test_a_providers_token_signs_in_as_its_user(
    http: httpx.AsyncClient, provider: OidcProvider, db: Database
) -> None:
    response = await signed_in(http, provider.sign(sub="248289761001")).get("/users/me")
    assert response.status_code == 200, response.text
    expected = uuid.uuid5(uuid.NAMESPACE_URL, f"{provider.issuer}#248289761001")
    assert response.json() == {"id": str(expected), "name": "alice", "is_superuser": False}
    assert "alice" in [user.name for user in await list_users(db)]


async def test_a_group_of_the_token_makes_a_superuser(
    http: httpx.AsyncClient, provider: OidcProvider
) -> None:
    token = provider.sign(sub="root-sub", preferred_username="ops", groups=["taskhub-admins"])
    response = await signed_in(http, token).get("/users/me")
    assert response.status_code == 200, response.text
    assert response.json()["is_superuser"] is True


async def test_the_tasks_of_a_signed_in_user_are_theirs_at_every_sign_in(
    http: httpx.AsyncClient, provider: OidcProvider, tokens: Users
) -> None:
    """Two tokens of one subject (the second with a new key after a rotation would be the
    same) are one user: it registers, submits and cancels its own task."""
    first = signed_in(http, provider.sign(sub="248289761001"))
    await first.register()
    task = await first.submit(JOB)
    again = signed_in(http, provider.sign(sub="248289761001", exp=int(time.time()) + 600))
    me = (await again.get("/users/me")).json()
    assert (await again.task(task["id"]))["submitted_by"] == me["id"]
    response = await again.patch(f"/tasks/{task['id']}", json={"status": "cancelled"})
    assert response.status_code == 200, response.text
    # Taskhub's own tokens still work beside JWTs
    assert (await ApiClient(http, tokens.bob).get("/users/me")).json()["name"] == "bob"


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"exp": int(time.time()) - 60}, id="expired"),
        pytest.param({"aud": "another-client"}, id="wrong-aud"),
        pytest.param({"iss": "https://elsewhere.example"}, id="wrong-iss"),
        pytest.param({"sub": None}, id="no-sub"),
    ],
)
async def test_a_token_that_does_not_hold_is_401(
    http: httpx.AsyncClient, provider: OidcProvider, claims: dict[str, object]
) -> None:
    response = await signed_in(http, provider.sign(**claims)).get("/users/me")
    assert_problem(response, 401, "unauthorized")


async def test_a_provider_whose_keys_cannot_be_read_is_503(
    http: httpx.AsyncClient, provider: OidcProvider, tokens: Users
) -> None:
    provider.jwks_down = True
    response = await signed_in(http, provider.sign()).get("/users/me")
    body = assert_problem(response, 503, "identity-unavailable")
    assert "keys could not be read" in body["detail"]
    assert response.headers["retry-after"] == "5"
    # the hub serves on: Taskhub's own tokens are not the provider's
    assert (await ApiClient(http, tokens.alice).get("/users/me")).status_code == 200


async def test_a_long_poll_ends_when_its_token_expires(
    http: httpx.AsyncClient, provider: OidcProvider, tokens: Users
) -> None:
    alice = ApiClient(http, tokens.alice)
    await alice.register()
    task = await alice.submit(JOB)
    reader = signed_in(http, provider.sign(exp=int(time.time()) + SHORT_LIFE))
    started = time.monotonic()
    response = await asyncio.wait_for(
        reader.get(f"/tasks/{task['id']}", headers={"Prefer": "wait=60"}), EXPIRED_WITHIN
    )
    assert_problem(response, 401, "unauthorized")
    assert time.monotonic() - started < EXPIRED_WITHIN


async def test_a_socket_signs_in_with_a_jwt_and_is_disconnected_when_it_expires(
    settings: Settings, provider: OidcProvider
) -> None:
    async with served(create_app(settings)) as url, SocketProbe("jwt") as probe:
        await probe.connect(url, provider.sign(exp=int(time.time()) + SHORT_LIFE))
        await probe.room_join("room1")
        await eventually(lambda: not probe.client.connected, EXPIRED_WITHIN, "disconnected")


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"exp": int(time.time()) - 60}, id="expired"),
        pytest.param({"aud": "another-client"}, id="wrong-aud"),
    ],
)
async def test_a_socket_with_a_token_that_does_not_hold_is_refused(
    settings: Settings, provider: OidcProvider, claims: dict[str, object]
) -> None:
    async with served(create_app(settings)) as url, SocketProbe("refused") as probe:
        with pytest.raises(socketio.exceptions.ConnectionError):
            await probe.connect(url, provider.sign(**claims))
