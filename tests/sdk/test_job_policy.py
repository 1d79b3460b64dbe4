"""An Extension class may set its job's sharing policy (docs/protocol.md, "Fair sharing and
running limits"): the worker registers the job with it."""

from __future__ import annotations

from taskhub.sdk import Client, Worker
from tests.sdk.conftest import Hub
from tests.sdk.extensions import Echo, SharedFairly


def job(hub: Hub, full_name: str, room: str) -> dict:
    with hub.rest() as rest:
        return dict(rest.get(f"/rooms/{room}/jobs/{full_name}").raise_for_status().json())


def test_a_worker_registers_the_policy_its_extension_sets(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [SharedFairly, Echo], room=room),
        Client(hub.url, hub.user_token) as client,
    ):
        shared = job(hub, f"{room}:analysis:SharedFairly", room)
        assert shared["claim_order"] == "fair-by-submitter"
        assert shared["max_running_per_submitter"] == 2
        plain = job(hub, f"{room}:analysis:Echo", room)
        assert plain["claim_order"] == "fifo" and plain["max_running_per_submitter"] is None
        handle = client.submit(SharedFairly(text="served"), room=room)
        assert handle.result(timeout=10) == "served"
