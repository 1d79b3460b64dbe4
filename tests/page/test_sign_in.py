"""Signing in on the page with the hub's identity provider, in Chromium against a real hub
and a real OpenID Connect provider on 127.0.0.1 (authorization code with PKCE, the page a
public client): the person signs in at the provider, the page works as them, a reload keeps
them, signing out ends it here and at the provider. Which token the page sends, what an
expired one does, a forged answer, and a hub without a provider (the page as ever)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from taskhub.sdk import Worker
from tests.page.browser import ARTIFACTS, Pages, connection, job_button, task_item
from tests.page.conftest import HUB_ENV, PageHub
from tests.page.extensions import Brew
from tests.support.oidc_provider import AUDIENCE, OidcProvider, running_oidc_provider
from tests.support.server import HubServer, running_hub
from tests.support.waiting import eventually_sync

CLIENT_ID = "taskhub-page"
PROVIDER = "Test provider"
TOKEN_KEY = "taskhub.token"


@pytest.fixture(scope="module")
def running_provider() -> Iterator[OidcProvider]:
    with running_oidc_provider() as provider:
        yield provider


@pytest.fixture(scope="module")
def signing_hub(
    running_provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubServer]:
    """A hub whose page signs in with the provider; it accepts access tokens (``aud``:
    ``AUDIENCE``) and ID tokens (``aud``: the page's client id)."""
    env = {
        **HUB_ENV,
        "TASKHUB_JWT_ISSUER": running_provider.issuer,
        "TASKHUB_JWT_AUDIENCE": f"{AUDIENCE},{CLIENT_ID}",
        "TASKHUB_JWT_LEEWAY_SECONDS": "0",
        "TASKHUB_OIDC_CLIENT_ID": CLIENT_ID,
        "TASKHUB_OIDC_PROVIDER_NAME": PROVIDER,
    }
    with running_hub("sqlite", tmp_path_factory.mktemp("sign-in-hub"), env=env) as server:
        yield server


@pytest.fixture
def provider(running_provider: OidcProvider, signing_hub: HubServer) -> OidcProvider:
    running_provider.reset()
    running_provider.register_client(CLIENT_ID, f"{signing_hub.base_url}/")
    return running_provider


@pytest.fixture
def signing_pages(browser: Browser, signing_hub: HubServer) -> Iterator[Pages]:
    opened = Pages(browser, signing_hub.base_url)
    yield opened
    opened.close()


def sign_in_with_provider(page: Page, username: str) -> None:
    """Click the provider's button, sign in on its form, and wait to be back, connected."""
    page.get_by_role("button", name=f"Sign in with {PROVIDER}", exact=True).click()
    expect(page.get_by_role("heading", name="Sign in to the provider")).to_be_visible()
    page.get_by_label("User name").fill(username)
    page.get_by_role("button", name="Continue").click()
    expect(connection(page)).to_have_attribute("data-state", "connected")


def kept_token(page: Page) -> str | None:
    """The token the page keeps in this tab's storage."""
    token = page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})")
    return str(token) if token is not None else None


def bearer_claims(page: Page) -> dict[str, Any]:
    """The claims of the token the page keeps."""
    token = kept_token(page)
    assert token, "the page keeps no token"
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def test_a_person_signs_in_with_the_provider_works_reloads_and_signs_out(
    signing_hub: HubServer, provider: OidcProvider, signing_pages: Pages
) -> None:
    room = "lab-sign-in"
    alice = signing_hub.create_user("alice")
    with Worker(signing_hub.base_url, alice, [Brew], room=room, poll_interval=5.0) as worker:
        eventually_sync(lambda: worker.listening, 10, "the worker to join its job room")
        page = signing_pages.open(f"/?room={room}")
        expect(page.get_by_label("Token")).to_be_visible()  # pasting a token stays possible
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=ARTIFACTS / "sign-in-with-provider.png")

        sign_in_with_provider(page, "carol")
        expect(page).to_have_url(f"{signing_hub.base_url}/?room={room}")  # back where it began
        expect(page.locator("#whoami")).to_have_text("carol")
        claims = bearer_claims(page)
        assert claims["aud"] == AUDIENCE  # the access token: a JWT the hub accepts
        assert page.evaluate(f"localStorage.getItem({TOKEN_KEY!r})") is None  # this tab only
        # The provider saw the PKCE verifier and the public client, no secret.
        (redeemed,) = provider.token_requests
        assert redeemed["client_id"] == CLIENT_ID
        assert redeemed["redirect_uri"] == f"{signing_hub.base_url}/"
        assert redeemed["code_verifier"] and "client_secret" not in redeemed

        # The page works as carol: she submits from the form, the task runs, it is hers.
        expect(job_button(page, "Brew")).to_contain_text("1 worker")
        job_button(page, "Brew").click()
        page.get_by_label("Label").fill("signed in")
        page.get_by_label("Steps").fill("1")
        with page.expect_response(lambda r: r.request.method == "POST") as answer:
            page.get_by_role("button", name="Submit task").click()
        task = answer.value.json()
        expect(task_item(page, task["id"])).to_have_attribute("data-status", "completed")
        with httpx.Client(trust_env=False) as http:
            bearer = {"Authorization": f"Bearer {kept_token(page)}"}
            me = http.get(f"{signing_hub.base_url}/v1/joblib/users/me", headers=bearer).json()
        assert me["name"] == "carol" and task["submitted_by"] == me["id"]

        # A reload keeps her signed in.
        page.reload()
        expect(connection(page)).to_have_attribute("data-state", "connected")
        expect(page.locator("#whoami")).to_have_text("carol")
        expect(task_item(page, task["id"])).to_have_attribute("data-status", "completed")

        # Signing out ends it here and at the provider, which sends the browser back.
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("heading", name="Sign in", exact=True)).to_be_visible()
        expect(page.get_by_role("button", name=f"Sign in with {PROVIDER}")).to_be_visible()
        expect(page.locator("#whoami")).to_be_hidden()
        assert kept_token(page) is None
        (logout,) = provider.logouts
        assert logout["post_logout_redirect_uri"] == f"{signing_hub.base_url}/"
        assert logout["id_token_hint"] and logout["client_id"] == CLIENT_ID
        # The provider forgot her: signing in again asks who is there.
        page.get_by_role("button", name=f"Sign in with {PROVIDER}").click()
        expect(page.get_by_role("heading", name="Sign in to the provider")).to_be_visible()
    signing_pages.assert_no_console_errors()


def test_a_second_sign_in_at_a_provider_that_remembers_the_person_skips_its_form(
    provider: OidcProvider, signing_pages: Pages
) -> None:
    first = signing_pages.open("/")
    sign_in_with_provider(first, "erin")
    # Another tab of the same browser: the provider knows erin and sends her straight back.
    second = first.context.new_page()
    second.goto(first.url)
    expect(second.get_by_role("heading", name="Sign in", exact=True)).to_be_visible()
    second.get_by_role("button", name=f"Sign in with {PROVIDER}").click()
    expect(second.locator("#whoami")).to_have_text("erin")
    signing_pages.assert_no_console_errors()


def test_without_an_access_token_the_hub_accepts_the_page_sends_the_id_token(
    provider: OidcProvider, signing_pages: Pages
) -> None:
    provider.opaque_access_tokens = True
    page = signing_pages.open("/")
    page.get_by_label("Remember on this device").check()  # honoured through the provider
    sign_in_with_provider(page, "dave")
    expect(page.locator("#whoami")).to_have_text("dave")
    token = page.evaluate(f"localStorage.getItem({TOKEN_KEY!r})")
    assert token and kept_token(page) is None
    page.evaluate(f"sessionStorage.setItem({TOKEN_KEY!r}, {token!r})")  # to read its claims
    assert bearer_claims(page)["aud"] == CLIENT_ID
    signing_pages.assert_no_console_errors()


def test_when_the_token_expires_the_page_asks_to_sign_in_again(
    provider: OidcProvider, signing_pages: Pages
) -> None:
    provider.token_lifetime = 4
    page = signing_pages.open("/")
    sign_in_with_provider(page, "frank")
    expect(page.locator("#token-error")).to_have_text(
        "Your sign-in has expired. Sign in again.", timeout=15_000
    )
    expect(page.get_by_role("button", name=f"Sign in with {PROVIDER}")).to_be_visible()
    assert kept_token(page) is None
    # The socket may have been refused by the hub a moment before the page's own clock.
    signing_pages.assert_no_console_errors()


@pytest.mark.parametrize("field", ["state", "nonce"])
def test_an_answer_to_another_sign_in_is_refused(
    provider: OidcProvider, signing_pages: Pages, field: str
) -> None:
    page = signing_pages.open("/")
    page.get_by_role("button", name=f"Sign in with {PROVIDER}").click()
    expect(page.get_by_role("heading", name="Sign in to the provider")).to_be_visible()
    # The provider answers as if another sign-in had asked (another state, another nonce).
    page.locator(f'input[name="{field}"]').evaluate("(input) => { input.value = 'other'; }")
    page.get_by_label("User name").fill("mallory")
    page.get_by_role("button", name="Continue").click()
    expect(page.locator("#provider-error")).to_contain_text(f"Signing in with {PROVIDER} failed")
    expect(page).to_have_url(f"{signing_pages.base_url}/")
    assert len(provider.token_requests) == (0 if field == "state" else 1)
    expect(page.locator("#whoami")).to_be_hidden()
    assert kept_token(page) is None
    signing_pages.assert_no_console_errors()


def test_an_answer_to_a_sign_in_the_page_never_began_is_refused(
    provider: OidcProvider, signing_pages: Pages
) -> None:
    page = signing_pages.open("/?code=stolen&state=forged")
    expect(page.locator("#provider-error")).to_contain_text("began no sign-in")
    expect(page).to_have_url(f"{signing_pages.base_url}/")  # the code is not left in the URL
    assert provider.token_requests == []
    expect(page.locator("#whoami")).to_be_hidden()
    signing_pages.assert_no_console_errors()


def test_without_a_provider_the_page_offers_only_the_token(hub: PageHub, pages: Pages) -> None:
    page = pages.open("/")
    expect(page.get_by_label("Token")).to_be_visible()
    expect(page.locator("#provider-sign-in")).to_be_hidden()
    with httpx.Client(trust_env=False) as http:
        assert http.get(f"{hub.url}/auth/config.json").json() == {}
    pages.assert_no_console_errors()
