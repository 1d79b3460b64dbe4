"""Providers over REST (docs/protocol.md, "Providers"), in-process, on both engines:
registration and adoption, listing and visibility, reads that wait for the provider's
answer (one ``provider_request`` per distinct read), results and failed reads, removal with
the worker, and bad input refused with a problem that changes nothing.

The provider here is played by the test: it sees the ``provider_request`` events the hub
publishes (``recorder``) and posts results over REST as the provider's owner."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest

from taskhub.clock import utcnow
from taskhub.main import TaskhubApp
from taskhub.realtime.event_payloads import event_payload
from taskhub.rules.events import ProviderRequest, ProviderResultReady, ProvidersInvalidate
from taskhub.rules.rooms import room_room
from taskhub.services.sweeps import remove_idle_silent_workers
from taskhub.settings import Settings
from tests.support.api import ApiClient, assert_problem
from tests.support.events import EventRecorder

ROOM = "lab"
SECRET = "filesystem"  # a superuser-only category here
MAX_RESULT = 64 * 1024
READERS = 50


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        long_poll_max_wait_seconds=5,
        provider_superuser_categories=[SECRET],
        provider_max_result_bytes=MAX_RESULT,
        provider_cache_max_bytes=4 * MAX_RESULT,
        provider_long_poll_max_seconds=10,
    )


def provider_body(name: str = "traj", category: str = "frames", **extra: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"index": {"type": "integer"}}}
    return {"category": category, "name": name, "schema": schema, **extra}


async def register(
    client: ApiClient, room: str = ROOM, status: int = 201, **body: Any
) -> dict[str, Any]:
    response = await client.put(f"/rooms/{room}/providers", json=provider_body(**body))
    assert response.status_code == status, response.text
    return response.json()


def read(
    client: ApiClient, full_name: str, wait: int | None = 5, room: str = ROOM, **params: Any
) -> Awaitable[httpx.Response]:
    headers = {} if wait is None else {"Prefer": f"wait={wait}"}
    return client.get(f"/rooms/{room}/providers/{full_name}", params=params, headers=headers)


def requests(recorder: EventRecorder) -> list[ProviderRequest]:
    return [event for event in recorder.events if isinstance(event, ProviderRequest)]


async def answer_requests(
    recorder: EventRecorder,
    owner: ApiClient,
    provider_id: str,
    body: Callable[[dict[str, str]], bytes],
    count: int = 1,
) -> list[ProviderRequest]:
    """Play the provider: wait for ``count`` provider_requests, post each one's answer."""
    await recorder.wait_for(lambda _events: len(requests(recorder)) >= count, 10)
    served = requests(recorder)[:count]
    for request in served:
        response = await owner.post(
            f"/providers/{provider_id}/results",
            content=body(json.loads(request.params)),
            headers={"X-Request-Hash": request.request_id},
        )
        assert response.status_code == 204, response.text
    return served


# --- registration, adoption, listing ---------------------------------------------------


async def test_registration_answers_zndraw_joblib_s_fields_and_adopts_a_worker(alice):
    first = await register(alice)
    assert set(first) == {
        "id", "room_id", "category", "name", "full_name", "schema", "worker_id", "created_at",
        "content_type",
    }  # fmt: skip
    assert first["full_name"] == f"{ROOM}:frames:traj"
    assert first["content_type"] == "application/json"
    assert first["created_at"].endswith("Z")
    worker = first["worker_id"]  # a new worker of alice's: the manager adopts it

    again = await register(alice, status=200, worker_id=worker, content_type="application/x-npy")
    assert again["id"] == first["id"] and again["worker_id"] == worker
    info = await alice.get(f"/rooms/{ROOM}/providers/{ROOM}:frames:traj/info")
    assert info.json() == again
    assert info.json()["content_type"] == "application/x-npy"

    listed = (await alice.get(f"/rooms/{ROOM}/providers")).json()
    assert listed == {"items": [again], "total": 1, "limit": 50, "offset": 0}


async def test_a_room_sees_its_own_global_and_internal_providers_only(alice, admin):
    await register(alice, room="lab")
    await register(alice, room="other", name="elsewhere")
    await register(admin, room="@global", name="shared")
    listed = (await alice.get("/rooms/lab/providers")).json()
    assert sorted(p["full_name"] for p in listed["items"]) == [
        "@global:frames:shared",
        "lab:frames:traj",
    ]
    hidden = await alice.get("/rooms/lab/providers/other:frames:elsewhere/info")
    assert_problem(hidden, 404, "provider-not-found")
    assert_problem(await read(alice, "other:frames:elsewhere"), 404, "provider-not-found")
    only_global = (await alice.get("/rooms/@global/providers")).json()
    assert [p["full_name"] for p in only_global["items"]] == ["@global:frames:shared"]


async def test_reserved_rooms_and_other_users_providers_are_refused(alice, bob, admin):
    assert_problem(await alice.put("/rooms/@global/providers", json=provider_body()), 403,
                   "forbidden")  # fmt: skip
    for client in (alice, admin):  # @internal providers are the hub's own
        response = await client.put("/rooms/@internal/providers", json=provider_body())
        assert_problem(response, 403, "forbidden")
    mine = await register(alice)
    theirs = await bob.put(f"/rooms/{ROOM}/providers", json=provider_body())
    assert_problem(theirs, 403, "forbidden")
    with_alices_worker = await bob.put(
        f"/rooms/{ROOM}/providers", json=provider_body(name="x", worker_id=mine["worker_id"])
    )
    assert_problem(with_alices_worker, 403, "forbidden")
    assert_problem(await bob.delete(f"/providers/{mine['id']}"), 403, "forbidden")
    denied = await bob.post(
        f"/providers/{mine['id']}/results", content=b"{}", headers={"X-Request-Hash": "a" * 64}
    )
    assert_problem(denied, 403, "forbidden")
    listed = (await admin.get(f"/rooms/{ROOM}/providers")).json()["items"]
    assert listed == [mine]  # nothing changed
    taken_over = await register(admin, status=200, worker_id=None)  # a superuser may
    assert taken_over["id"] == mine["id"] and taken_over["worker_id"] != mine["worker_id"]


@pytest.mark.parametrize(
    ("body", "status", "slug"),
    [
        ({"name": "a:b"}, 422, "validation-error"),
        ({"name": ""}, 422, "validation-error"),
        ({"name": "x" * 129}, 422, "validation-error"),
        ({"category": "a:b"}, 400, "invalid-category"),
        ({"content_type": "text/html\r\nSet-Cookie: x=1"}, 422, "validation-error"),
        ({"content_type": "json"}, 422, "validation-error"),
        ({"schema": []}, 422, "validation-error"),
        ({"worker_id": "not-a-uuid"}, 422, "validation-error"),
        ({"worker_id": "00000000-0000-0000-0000-000000000000"}, 404, "worker-not-found"),
    ],
)
async def test_malformed_registrations_are_refused_and_change_nothing(
    alice, admin, body, status, slug
):
    workers = (await admin.get("/workers")).json()["total"]
    response = await alice.put(f"/rooms/{ROOM}/providers", json={**provider_body(), **body})
    assert_problem(response, status, slug)
    assert (await alice.get(f"/rooms/{ROOM}/providers")).json()["total"] == 0
    assert (await admin.get("/workers")).json()["total"] == workers


async def test_a_bad_room_id_is_refused(alice):
    assert_problem(await alice.put("/rooms/a@b/providers", json=provider_body()), 400,
                   "invalid-room-id")  # fmt: skip
    assert_problem(await alice.get("/rooms/a:b/providers"), 400, "invalid-room-id")


async def test_superuser_only_categories_are_hidden_from_and_refused_to_others(alice, admin):
    secret = await register(admin, category=SECRET, name="root")
    assert_problem(
        await alice.put(f"/rooms/{ROOM}/providers", json=provider_body(category=SECRET)),
        403,
        "forbidden",
    )
    assert (await alice.get(f"/rooms/{ROOM}/providers")).json()["items"] == []
    assert [p["id"] for p in (await admin.get(f"/rooms/{ROOM}/providers")).json()["items"]] == [
        secret["id"]
    ]
    name = secret["full_name"]
    assert_problem(await alice.get(f"/rooms/{ROOM}/providers/{name}/info"), 403, "forbidden")
    assert_problem(await read(alice, name, path="/"), 403, "forbidden")


# --- reads ------------------------------------------------------------------------------


async def test_a_read_waits_for_the_provider_s_answer_then_is_cached(alice, bob, recorder):
    provider = await register(alice, content_type="application/octet-stream")
    name = provider["full_name"]
    reading = asyncio.ensure_future(read(bob, name, index="3", path="ü/x"))
    [request] = await answer_requests(
        recorder, alice, provider["id"], lambda params: b"\x00\xff" + params["index"].encode()
    )
    # zndraw-joblib's request: the hash of the sorted parameters as compact JSON (non-ASCII
    # escaped), the parameters as that text, the provider's full name.
    canonical = json.dumps({"index": "3", "path": "ü/x"}, sort_keys=True, separators=(",", ":"))
    assert event_payload(request) == {
        "request_id": hashlib.sha256(canonical.encode()).hexdigest(),
        "provider_name": name,
        "params": canonical,
    }
    answered = await reading
    assert answered.status_code == 200
    assert answered.content == b"\x00\xff3"
    assert answered.headers["content-type"] == "application/octet-stream"
    assert answered.headers["preference-applied"] == "wait=5"
    ready = [e for e in recorder.events if isinstance(e, ProviderResultReady)]
    assert [(e.room, event_payload(e)) for e in ready] == [
        (room_room(ROOM), {"provider_name": name, "request_hash": request.request_id})
    ]

    cached = await read(bob, name, wait=None, path="ü/x", index="3")  # another order
    assert cached.content == b"\x00\xff3"
    assert "preference-applied" not in cached.headers
    assert len(requests(recorder)) == 1


async def test_readers_of_one_read_cause_one_request_different_reads_one_each(alice, bob, recorder):
    provider = await register(alice)
    name = provider["full_name"]
    same = [asyncio.ensure_future(read(bob, name, index="1")) for _ in range(READERS)]
    different = [asyncio.ensure_future(read(bob, name, index=str(i))) for i in range(2, 6)]
    served = await answer_requests(
        recorder,
        alice,
        provider["id"],
        lambda params: json.dumps({"frame": int(params["index"])}).encode(),
        count=5,
    )
    assert sorted(json.loads(r.params)["index"] for r in served) == ["1", "2", "3", "4", "5"]
    assert [(await r).json() for r in same] == [{"frame": 1}] * READERS
    assert [(await r).json() for r in different] == [{"frame": i} for i in range(2, 6)]
    assert len(requests(recorder)) == 5


async def test_a_provider_that_never_answers_times_every_reader_out_with_one_request(
    alice, bob, recorder
):
    provider = await register(alice)
    answers = await asyncio.gather(*(read(bob, provider["full_name"], wait=1) for _ in range(10)))
    for answer in answers:
        body = assert_problem(answer, 504, "provider-timeout")
        assert answer.headers["retry-after"] == "2"
        assert provider["full_name"] in body["detail"]
    assert len(requests(recorder)) == 1  # the in-flight lock (30 s) holds


async def test_the_in_flight_lock_lets_one_request_out_per_its_ttl(
    app: TaskhubApp, alice, bob, recorder
):
    app.hub.settings.provider_inflight_ttl_seconds = 0.5
    provider = await register(alice)
    for _ in range(3):
        assert_problem(await read(bob, provider["full_name"], wait=0), 504, "provider-timeout")
    assert len(requests(recorder)) == 1
    await asyncio.sleep(0.6)  # the lock expires: the next read asks again
    assert_problem(await read(bob, provider["full_name"], wait=0), 504, "provider-timeout")
    assert len(requests(recorder)) == 2


async def test_the_wait_is_capped_and_defaults_to_five_seconds(app: TaskhubApp, alice, bob):
    app.hub.settings.provider_long_poll_max_seconds = 1
    app.hub.settings.provider_long_poll_default_seconds = 1
    provider = await register(alice)
    capped = await read(bob, provider["full_name"], wait=3600)
    assert "within 1s" in assert_problem(capped, 504, "provider-timeout")["detail"]
    default = await read(bob, provider["full_name"], wait=None, other="1")
    assert "within 1s" in assert_problem(default, 504, "provider-timeout")["detail"]


async def test_a_failed_read_is_replayed_as_its_problem(alice, bob, recorder):
    provider = await register(alice)
    name = provider["full_name"]
    reading = asyncio.ensure_future(read(bob, name, index="1"))
    await recorder.wait_for(lambda _e: len(requests(recorder)) == 1)
    problem = {
        "type": "/v1/problems/provider-execution-failed",
        "title": "Bad Request",
        "status": 422,
        "detail": "ValidationError: index must be below 10",
    }
    posted = await alice.post(
        f"/providers/{provider['id']}/results",
        json=problem,
        headers={"X-Request-Hash": requests(recorder)[0].request_id, "X-Result-Status": "error"},
    )
    assert posted.status_code == 204, posted.text
    for answer in (await reading, await read(bob, name, index="1")):
        assert answer.status_code == 422
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json() == problem

    reading = asyncio.ensure_future(read(bob, name, index="2"))
    await recorder.wait_for(lambda _e: len(requests(recorder)) == 2)
    await alice.post(
        f"/providers/{provider['id']}/results",
        content=b"KeyError: it broke",
        headers={"X-Request-Hash": requests(recorder)[1].request_id, "X-Result-Status": "error"},
    )
    body = assert_problem(await reading, 400, "provider-execution-failed")
    assert body["detail"] == "KeyError: it broke"


async def test_results_over_the_largest_allowed_are_refused_and_the_cache_evicts(
    app: TaskhubApp, alice, bob, recorder
):
    provider = await register(alice, content_type="application/octet-stream")
    pid, name = provider["id"], provider["full_name"]
    digest = hashlib.sha256(b'{"index":"0"}').hexdigest()
    too_big = await alice.post(
        f"/providers/{pid}/results",
        content=b"x" * (MAX_RESULT + 1),
        headers={"X-Request-Hash": digest},
    )
    assert_problem(too_big, 413, "payload-too-large")
    assert_problem(await read(bob, name, wait=0, index="0"), 504, "provider-timeout")

    for index in range(5):  # the cache holds 4 results of the largest size
        digest = hashlib.sha256(json.dumps({"index": str(index)}).replace(" ", "").encode())
        posted = await alice.post(
            f"/providers/{pid}/results",
            content=bytes([index]) * MAX_RESULT,
            headers={"X-Request-Hash": digest.hexdigest()},
        )
        assert posted.status_code == 204, posted.text
    assert app.hub.provider_results.stored_bytes == 4 * MAX_RESULT
    assert_problem(await read(bob, name, wait=0, index="0"), 504, "provider-timeout")  # evicted
    for index in range(1, 5):
        kept = await read(bob, name, wait=0, index=str(index))
        assert kept.content == bytes([index]) * MAX_RESULT


@pytest.mark.parametrize(
    ("headers", "slug"),
    [
        ({}, "validation-error"),
        ({"X-Request-Hash": "abc"}, "validation-error"),
        ({"X-Request-Hash": "A" * 64}, "validation-error"),
        ({"X-Request-Hash": "a" * 64, "X-Result-Status": "maybe"}, "validation-error"),
    ],
)
async def test_a_result_without_a_request_hash_is_refused(alice, bob, recorder, headers, slug):
    provider = await register(alice)
    response = await alice.post(
        f"/providers/{provider['id']}/results", content=b"1", headers=headers
    )
    assert_problem(response, 422, slug)
    assert not [e for e in recorder.events if isinstance(e, ProviderResultReady)]


async def test_unknown_and_malformed_providers_are_not_found(alice):
    for name in ("lab:frames:missing", "lab:frames", "lab::x", "a@b:frames:x", "nothing"):
        assert_problem(await read(alice, name), 404, "provider-not-found")
        info = await alice.get(f"/rooms/{ROOM}/providers/{name}/info")
        assert_problem(info, 404, "provider-not-found")
    missing = "00000000-0000-0000-0000-000000000000"
    assert_problem(await alice.delete(f"/providers/{missing}"), 404, "provider-not-found")
    posted = await alice.post(
        f"/providers/{missing}/results", content=b"1", headers={"X-Request-Hash": "a" * 64}
    )
    assert_problem(posted, 404, "provider-not-found")
    assert_problem(await alice.delete("/providers/nope"), 422, "validation-error")


async def test_a_deleted_provider_takes_no_results_and_is_gone_for_readers(alice, bob, recorder):
    provider = await register(alice)
    assert (await alice.delete(f"/providers/{provider['id']}")).status_code == 204
    assert [e.room for e in recorder.events if isinstance(e, ProvidersInvalidate)] == [
        room_room(ROOM),
        room_room(ROOM),
    ]
    posted = await alice.post(
        f"/providers/{provider['id']}/results", content=b"1", headers={"X-Request-Hash": "a" * 64}
    )
    assert_problem(posted, 404, "provider-not-found")
    assert_problem(await read(bob, provider["full_name"]), 404, "provider-not-found")
    again = await register(alice)  # the same name again is a new provider, with a new id
    assert again["id"] != provider["id"]


# --- removal with the worker ------------------------------------------------------------


async def test_deleting_the_worker_removes_its_providers_and_says_so(alice, bob, recorder):
    provider = await register(alice)
    await register(alice, room="other", worker_id=provider["worker_id"])
    before = len(recorder.events)
    assert (await alice.delete(f"/workers/{provider['worker_id']}")).status_code == 204
    invalidated = [e.room for e in recorder.events[before:] if isinstance(e, ProvidersInvalidate)]
    assert sorted(invalidated) == [room_room("lab"), room_room("other")]
    assert (await bob.get(f"/rooms/{ROOM}/providers")).json()["total"] == 0
    assert_problem(await read(bob, provider["full_name"]), 404, "provider-not-found")


async def test_a_swept_worker_takes_its_providers_along(app: TaskhubApp, alice, bob):
    provider = await register(alice)
    count, events = await remove_idle_silent_workers(app.hub.db, utcnow() + timedelta(seconds=1))
    assert count == 1
    assert [e.room for e in events if isinstance(e, ProvidersInvalidate)] == [room_room(ROOM)]
    assert (await bob.get(f"/rooms/{ROOM}/providers")).json()["total"] == 0
    assert_problem(await read(bob, provider["full_name"]), 404, "provider-not-found")
