"""``TASKHUB_ADMIN_TOKEN`` (issue #44, L4): a superuser's secret, so only a strong one is
taken (refused at settings, with the command that makes one), and a revoked one is not
granted again at the next start."""

from __future__ import annotations

import base64
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from taskhub.settings import MAKE_ADMIN_TOKEN_COMMAND, Settings, setting_errors
from tests.support.server import (
    REPO_ROOT,
    Backend,
    HubServer,
    new_admin_token,
    provisioned_database,
    server_env,
    taskhub_command,
)

STRONG = [
    "th_" + "Zq3-xV_9kLm2PwR7tYb4NcH8sJd1GfA6uEo5iKy0WnT",  # as ``taskhub users create``
    base64.b64encode(bytes(range(100, 132))).decode(),  # as ``openssl rand -base64 32``
    "0123456789abcdef" * 2,  # 32 characters, 16 different
]
WEAK = [
    "x",
    "hunter2",
    "th_" + "a" * 60,  # long, but three different characters
    "0123456789abcde" * 3,  # 45 characters, 15 different
    "th_" + "Zq3-xV_9kLm2PwR7tYb4NcH8s"[:28],  # 31 characters
    "th_Zq3-xV_9kLm2PwR7 tYb4NcH8sJd1GfA6uEo5iKy",  # a space: no bearer token
    "th_Zq3-xV_9kLm2PwR7ätYb4NcH8sJd1GfA6uEo5iKy",  # not ASCII
]


@pytest.mark.parametrize("token", STRONG)
def test_a_strong_admin_token_is_taken(token: str) -> None:
    assert Settings(admin_token=token).admin_token == token
    assert len(new_admin_token()) >= 32  # what the tests' servers use passes too
    assert Settings(admin_token=new_admin_token()).admin_token


@pytest.mark.parametrize("token", WEAK)
def test_a_weak_admin_token_is_refused_naming_the_command_that_makes_one(
    monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    monkeypatch.setenv("TASKHUB_ADMIN_TOKEN", token)
    with pytest.raises(ValidationError) as caught:
        Settings()
    described = setting_errors(caught.value)
    assert described.startswith("TASKHUB_ADMIN_TOKEN: too weak"), described
    assert MAKE_ADMIN_TOKEN_COMMAND in described, described
    assert len(token) < 8 or token not in described, described  # (never the value)


@pytest.mark.parametrize("token", ["", "   "])
def test_an_empty_admin_token_is_unset(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    """(An unset compose variable.)"""
    monkeypatch.setenv("TASKHUB_ADMIN_TOKEN", token)
    assert Settings().admin_token is None


def test_the_command_in_the_message_makes_a_token_that_is_taken() -> None:
    program, *arguments = shlex.split(MAKE_ADMIN_TOKEN_COMMAND)
    assert program == "python3"
    made = subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert made.startswith("th_")
    assert Settings(admin_token=made).admin_token == made


def test_serve_refuses_to_start_with_a_weak_admin_token(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hub.db'}"
    result = subprocess.run(
        taskhub_command("serve", "--port", "1"),
        cwd=REPO_ROOT,
        env=server_env(url, "x", None),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result
    assert "TASKHUB_ADMIN_TOKEN: too weak" in result.stderr, result
    assert MAKE_ADMIN_TOKEN_COMMAND in result.stderr, result
    assert "Traceback" not in result.stderr, result
    assert not (tmp_path / "hub.db").exists()


def revoke(database_url: str, token: str) -> subprocess.CompletedProcess[str]:
    """``taskhub tokens revoke -`` (the token on stdin) against ``database_url``."""
    env = server_env(database_url, new_admin_token(), None)
    return subprocess.run(
        taskhub_command("tokens", "revoke", "-"),
        cwd=REPO_ROOT,
        env=env,
        input=token + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_revoked_admin_token_is_not_granted_again_at_the_next_start(
    backend: Backend, tmp_path: Path
) -> None:
    admin = new_admin_token()
    with provisioned_database(backend, tmp_path) as url:
        server = HubServer(url, admin_token=admin, log_dir=tmp_path)
        with server, httpx.Client(base_url=server.base_url, trust_env=False) as http:
            me = http.get("/v1/joblib/users/me", headers=server.admin_headers)
            assert me.status_code == 200 and me.json()["is_superuser"], me.text
        revoked = revoke(url, admin)
        assert revoked.returncode == 0, revoked

        offset = len(server.output())
        with server, httpx.Client(base_url=server.base_url, trust_env=False) as http:
            refused = http.get("/v1/joblib/users/me", headers=server.admin_headers)
            assert refused.status_code == 401, refused.text
        restarted = server.output()[offset:]
        assert "TASKHUB_ADMIN_TOKEN was revoked" in restarted, restarted
        assert admin not in restarted
