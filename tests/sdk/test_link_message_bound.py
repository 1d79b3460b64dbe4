"""The SDK never sends a ``task_update`` the hub would close its link for: a report that
may pass ``LINK_MESSAGE_BYTES`` as the client's JSON spells it goes by PATCH
(``sdk.realtime.fits_link``), and that bound is well within the hub's default
``TASKHUB_MAX_SOCKET_MESSAGE_BYTES``."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from taskhub.sdk.execution import json_ready
from taskhub.sdk.realtime import LINK_MESSAGE_BYTES, fits_link
from taskhub.settings import Settings

CLAIM_TOKEN = "0190b3d2-6c7a-7d1e-9a55-3f0c2b1d4e5f"
HUB_DEFAULT = Settings.model_fields["max_socket_message_bytes"].default


def message_length(body: dict[str, Any]) -> int:
    """The Engine.IO message ``task_update`` with ``body`` makes (python-socketio's text
    packet: ``42<ack id>["task_update", {...}]``), with the claim fields the worker adds."""
    update = {**body, "claim_token": CLAIM_TOKEN, "task_id": CLAIM_TOKEN}
    update["claim_next"] = {"worker_id": CLAIM_TOKEN, "max_tasks": 100, "start": True}
    return len("42999" + json.dumps(["task_update", update], separators=(",", ":")))


def test_the_link_bound_is_within_the_hubs_default_message_bound() -> None:
    assert HUB_DEFAULT >= 2 * LINK_MESSAGE_BYTES


def test_a_long_error_in_characters_json_escapes_at_length_goes_by_patch() -> None:
    """65,536 characters (the SDK's cut) of an astral emoji: 12 characters each once
    escaped, 768 KiB; the same length of ASCII, 64 KiB, goes over the link."""
    emoji = {"status": "failed", "error": "\U0001f600" * 65_536}
    assert not fits_link(emoji, 0)
    ascii_error = {"status": "failed", "error": "x" * 65_536}
    assert fits_link(ascii_error, 0)


def test_a_result_within_the_sdks_64_kib_fits_however_it_is_spelled() -> None:
    for char in ("x", "\u00e9", "\u4e2d", "\U0001f600"):
        text = char * (64 * 1024 // len(char.encode()) - 16)
        result, size = json_ready({"echo": text})
        assert size <= 64 * 1024
        body = {"status": "completed", "result": result}
        assert fits_link(body, size)
        assert message_length(body) <= HUB_DEFAULT


@given(
    result=st.text(max_size=3000),
    error=st.one_of(st.none(), st.text(max_size=3000)),
    repeat=st.integers(1, 60),
)
def test_a_report_that_fits_stays_within_the_bound_as_sent(
    result: str, error: str | None, repeat: int
) -> None:
    """Whatever the characters: a report ``fits_link`` passes makes a message within
    ``LINK_MESSAGE_BYTES``."""
    plain, size = json_ready({"text": result * repeat})
    body: dict[str, Any] = {"status": "failed" if error else "completed", "result": plain}
    if error is not None:
        body["error"] = error * repeat
    if fits_link(body, size):
        assert message_length(body) <= LINK_MESSAGE_BYTES
