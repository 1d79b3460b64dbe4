"""What the page reads to offer "Sign in with …" (``GET /auth/config.json``, before any
sign-in) and the page's policy allowing it to reach the provider: the configured public
client, or nothing at all without one; and the settings that configure it."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from taskhub.settings import Settings

ISSUER = "http://127.0.0.1:9/realms/lab"  # never reached: the page does, not the hub here


def connect_sources(response: httpx.Response) -> list[str]:
    policy = response.headers["content-security-policy"]
    (directive,) = [d for d in policy.split("; ") if d.startswith("connect-src ")]
    return directive.split()[1:]


class TestWithAProvider:
    @pytest.fixture
    def settings(self, database_url: str) -> Settings:
        return Settings(
            database_url=database_url,
            jwt_issuer=ISSUER,
            jwt_audience=["taskhub-page"],
            oidc_client_id="taskhub-page",
            oidc_provider_name="Lab login",
        )

    async def test_the_page_reads_its_client_without_a_token(self, http: httpx.AsyncClient) -> None:
        response = await http.get("/auth/config.json")
        assert response.status_code == 200
        assert response.json() == {
            "issuer": ISSUER,
            "client_id": "taskhub-page",
            "scopes": "openid profile email",
            "name": "Lab login",
        }
        assert "secret" not in response.text

    async def test_the_page_may_reach_the_providers_origin_and_no_other(
        self, http: httpx.AsyncClient
    ) -> None:
        assert connect_sources(await http.get("/")) == ["'self'", "http://127.0.0.1:9"]
        assert connect_sources(await http.get("/static/app.js")) == [
            "'self'",
            "http://127.0.0.1:9",
        ]


class TestWithoutAProvider:
    @pytest.fixture
    def settings(self, database_url: str) -> Settings:
        # Tokens of the issuer are accepted, but the page has no client of it.
        return Settings(database_url=database_url, jwt_issuer=ISSUER)

    async def test_the_page_is_told_there_is_none_and_reaches_only_the_hub(
        self, http: httpx.AsyncClient
    ) -> None:
        response = await http.get("/auth/config.json")
        assert response.status_code == 200
        assert response.json() == {}
        assert connect_sources(await http.get("/")) == ["'self'"]


def test_the_button_is_named_after_the_issuers_host_unless_told() -> None:
    from taskhub.transport.page_sign_in import page_sign_in

    settings = Settings(jwt_issuer="https://id.example.org/realms/lab", oidc_client_id="page")
    client = page_sign_in(settings)
    assert client is not None and client["name"] == "id.example.org"


def test_the_page_client_signs_in_with_the_hubs_issuer() -> None:
    with pytest.raises(ValidationError, match="needs TASKHUB_JWT_ISSUER"):
        Settings(oidc_client_id="page")
    assert Settings(oidc_client_id="  ").oidc_client_id is None  # blank: none


@pytest.mark.parametrize(
    ("scopes", "problem"),
    [("profile email", "must include openid"), ('openid "quoted"', "printable ASCII")],
)
def test_scopes_are_openid_ones(scopes: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Settings(jwt_issuer=ISSUER, oidc_client_id="page", oidc_scopes=scopes)


def test_scopes_are_kept_once_each_in_order() -> None:
    settings = Settings(
        jwt_issuer=ISSUER, oidc_client_id="page", oidc_scopes="openid  groups openid"
    )
    assert settings.oidc_scopes == "openid groups"
