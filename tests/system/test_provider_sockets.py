"""Providers over Socket.IO, against a real server (docs/protocol.md, "Providers"):
``join_provider_room`` is for the owner of the provider's worker only; the joined socket
gets each read's ``provider_request`` (zndraw-joblib's payload), the room its
``provider_result_ready`` and ``providers_invalidate``; the provider's socket going away
removes its worker, and its providers with it, after the grace period."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx
import pytest

from tests.support.api import ApiClient, assert_problem
from tests.support.names import unique
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe, assert_problem_ack

SERVER_ENV = {"TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": "0.5"}
GRACE_WAIT = 15.0  # the removal comes within the grace period and a sweep of presence


@pytest.fixture
def users(shared_server: HubServer) -> dict[str, str]:
    return {name: shared_server.create_user(unique(name)) for name in ("alice", "bob")}


def request_id(params: dict[str, str]) -> str:
    canonical = "{" + ",".join(f'"{k}":"{v}"' for k, v in sorted(params.items())) + "}"
    return hashlib.sha256(canonical.encode()).hexdigest()


async def test_only_the_owner_of_the_provider_s_worker_joins_and_gets_its_requests(
    http: httpx.AsyncClient, shared_server: HubServer, users: dict[str, str], lab: str
) -> None:
    alice, bob = ApiClient(http, users["alice"]), ApiClient(http, users["bob"])
    registered = await alice.put(
        f"/rooms/{lab}/providers", json={"category": "frames", "name": "traj", "schema": {}}
    )
    assert registered.status_code == 201, registered.text
    provider = registered.json()
    name, worker = provider["full_name"], provider["worker_id"]
    other_worker = (await alice.post("/workers")).json()["id"]

    async with (
        SocketProbe("provider") as mine,
        SocketProbe("intruder") as intruder,
        SocketProbe("browser") as browser,
    ):
        await mine.connect(shared_server.base_url, users["alice"])
        await intruder.connect(shared_server.base_url, users["bob"])
        await browser.connect(shared_server.base_url, users["bob"])
        await browser.room_join(lab)

        join = {"provider_name": name, "worker_id": worker}
        assert await mine.call("join_provider_room", join) == join
        assert_problem_ack(await intruder.call("join_provider_room", join), 403, "forbidden")
        with_other = {"provider_name": name, "worker_id": other_worker}
        assert_problem_ack(await mine.call("join_provider_room", with_other), 403, "forbidden")
        unknown = {"provider_name": f"{lab}:frames:nope", "worker_id": worker}
        assert_problem_ack(
            await mine.call("join_provider_room", unknown), 404, "provider-not-found"
        )
        for bad in ({"provider_name": name}, {"provider_name": name, "worker_id": "x"}, []):
            assert_problem_ack(await mine.call("join_provider_room", bad), 422, "validation-error")

        params = {"index": "4"}
        reading = asyncio.ensure_future(
            bob.get(f"/rooms/{lab}/providers/{name}", params=params, headers={"Prefer": "wait=10"})
        )
        request = await mine.wait_for("provider_request")
        assert request.data == {
            "request_id": request_id(params),
            "provider_name": name,
            "params": '{"index":"4"}',
        }
        posted = await alice.post(
            f"/providers/{provider['id']}/results",
            content=b"[1,2,3]",
            headers={"X-Request-Hash": request.data["request_id"]},
        )
        assert posted.status_code == 204, posted.text
        answered = await reading
        assert answered.status_code == 200 and answered.json() == [1, 2, 3]
        ready = await browser.wait_for("provider_result_ready")
        assert ready.data == {"provider_name": name, "request_hash": request_id(params)}

        # Left: its next read goes to nobody (it times out); the intruder never got any.
        assert await mine.call("leave_provider_room", join) == {"provider_name": name}
        mark = mine.mark()
        timed_out = await bob.get(
            f"/rooms/{lab}/providers/{name}", params={"index": "5"}, headers={"Prefer": "wait=1"}
        )
        assert_problem(timed_out, 504, "provider-timeout")
        assert await mine.call("join_provider_room", join) == join
        again = asyncio.ensure_future(
            bob.get(f"/rooms/{lab}/providers/{name}", params={"index": "6"},
                    headers={"Prefer": "wait=10"})
        )  # fmt: skip
        sentinel = await mine.wait_for("provider_request", after=mark)
        assert sentinel.data["params"] == '{"index":"6"}'  # not the read made while it had left
        await alice.post(
            f"/providers/{provider['id']}/results",
            content=b"6",
            headers={"X-Request-Hash": sentinel.data["request_id"]},
        )
        assert (await again).json() == 6
        assert intruder.named("provider_request") == []


async def test_the_provider_s_socket_gone_removes_its_worker_and_providers(
    http: httpx.AsyncClient, shared_server: HubServer, users: dict[str, str], lab: str
) -> None:
    alice = ApiClient(http, users["alice"])
    provider = (
        await alice.put(
            f"/rooms/{lab}/providers", json={"category": "frames", "name": "traj", "schema": {}}
        )
    ).json()
    async with SocketProbe("browser") as browser:
        await browser.connect(shared_server.base_url, users["bob"])
        await browser.room_join(lab)
        async with SocketProbe("provider") as socket:
            await socket.connect(shared_server.base_url, users["alice"])
            join: dict[str, Any] = {
                "provider_name": provider["full_name"],
                "worker_id": provider["worker_id"],
            }
            assert await socket.call("join_provider_room", join) == join
            mark = browser.mark()
        invalidated = await browser.wait_for("providers_invalidate", after=mark, within=GRACE_WAIT)
        assert invalidated.data == {}
    assert (await alice.get(f"/rooms/{lab}/providers")).json()["items"] == []
    workers = (await alice.get("/workers", params={"limit": 500})).json()["items"]
    assert provider["worker_id"] not in {worker["id"] for worker in workers}
