"""Sockets on a real ``taskhub serve`` (SQLite and PostgreSQL) held to the bounds of
issue #44: Engine.IO sessions that never sign in are closed and capped per address (M1),
binary Socket.IO packets are dropped unread (M2), bytes in an event answer 422 (L3), a
message past ``TASKHUB_MAX_SOCKET_MESSAGE_BYTES`` closes its connection, and a user holds
at most ``TASKHUB_USER_MAX_SOCKETS`` sockets (docs/operations.md, "Connections before
sign-in" and "Limits").

Raw sessions speak Engine.IO v4 / Socket.IO v5 over ``websockets`` (or HTTP long-polling
over ``httpx``), as the outside test did: ``0{...}`` opens, ``2``/``3`` ping and pong,
``40`` connects the namespace, ``42[...]`` is an event, ``43…`` its ack."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import socketio
import websockets
from websockets.asyncio.client import ClientConnection

from tests.support.metrics import Samples
from tests.support.names import unique
from tests.support.server import HubServer, running_hub
from tests.support.sockets import SocketProbe, assert_problem_ack
from tests.support.waiting import eventually
from tests.system.conftest import BACKENDS
from tests.system.test_task_push import new_owner
from tests.system.test_task_update_event import claimed_task

MAX_PER_ADDRESS = 3
MESSAGE_BYTES = 8192
USER_SOCKETS = 2
EXEMPT_USER = "carol-exempt"
# The module's shared server: sessions before sign-in last long enough not to expire
# while a test holds them.
SERVER_ENV = {
    "TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS": "60",
    "TASKHUB_MAX_UNAUTHENTICATED_PER_ADDRESS": str(MAX_PER_ADDRESS),
    "TASKHUB_MAX_SOCKET_MESSAGE_BYTES": str(MESSAGE_BYTES),
    "TASKHUB_USER_MAX_SOCKETS": str(USER_SOCKETS),
    "TASKHUB_LIMITS_EXEMPT_USERS": EXEMPT_USER,
}
# The server of the timeout tests: sessions before sign-in are closed after a second.
QUICK_TIMEOUT_SECONDS = 1
QUICK_ENV = {"TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS": str(QUICK_TIMEOUT_SECONDS)}
CLOSED_WITHIN = 15.0  # far past the timeout: a session still open then was never closed
PENDING = "taskhub_socket_sessions_pending_sign_in"
TIMED_OUT = "taskhub_socket_sessions_unauthenticated_closed_total"
REFUSED = "taskhub_socket_sessions_refused_total"
BINARY = "taskhub_socket_binary_refused_total"


class RawSession:
    """One Engine.IO websocket session, spoken by hand."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, base_url: str) -> RawSession:
        """Handshake; the server's OPEN packet is read."""
        ws = await websockets.connect(socket_url(base_url, "ws"), open_timeout=10, max_size=None)
        opening = await asyncio.wait_for(ws.recv(), 10)
        assert isinstance(opening, str) and opening.startswith("0{"), opening
        return cls(ws)

    async def send(self, message: str | bytes) -> None:
        await self.ws.send(message)

    async def next(self, within: float = 10.0) -> str:
        """The next message that is not a ping (pings are answered)."""
        async with asyncio.timeout(within):
            while True:
                message = await self.ws.recv()
                if message == "2":
                    await self.ws.send("3")
                    continue
                return str(message)

    async def sign_in(self, token: str) -> None:
        await self.send("40" + json.dumps({"token": token}))
        answer = await self.next()
        assert answer.startswith("40{"), answer

    async def ack(self, ack_id: int, within: float = 10.0) -> Any:
        """The data of the acknowledgement ``ack_id`` (``43<id>[data]``)."""
        answer = await self.next(within)
        prefix = f"43{ack_id}["
        assert answer.startswith(prefix), answer
        return json.loads(answer[len(prefix) - 1 :])[0]

    async def closed_by_server(self, within: float = CLOSED_WITHIN) -> bool:
        """Whether the server closes the connection within ``within`` seconds while this
        side keeps it alive as a hostile client would: every ping answered, a pong sent
        unasked every 0.2 s, Engine.IO's CLOSE packet ignored."""

        async def keep_alive() -> None:
            while True:
                await self.ws.send("3")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        if await self.ws.recv() == "2":
                            await self.ws.send("3")

        try:
            await asyncio.wait_for(keep_alive(), within)
        except websockets.ConnectionClosed:
            return True
        except TimeoutError:
            return False
        return False  # pragma: no cover (keep_alive only ends by raising)

    async def close(self) -> None:
        await self.ws.close()


def socket_url(base_url: str, scheme: str, transport: str = "websocket") -> str:
    host = base_url.split("://", 1)[1]
    return f"{scheme}://{host}/socket.io/?EIO=4&transport={transport}"


@contextlib.asynccontextmanager
async def raw_sessions(base_url: str, count: int) -> AsyncIterator[list[RawSession]]:
    sessions = [await RawSession.open(base_url) for _ in range(count)]
    try:
        yield sessions
    finally:
        for session in sessions:
            await session.close()


async def samples(base_url: str) -> Samples:
    async with httpx.AsyncClient(base_url=base_url, timeout=15.0, trust_env=False) as client:
        return Samples((await client.get("/metrics")).text)


async def none_pending(base_url: str) -> None:
    """Wait until the server counts no session before sign-in (those of earlier tests are
    gone: they all share one address)."""

    async def settled() -> bool:
        return (await samples(base_url)).count(PENDING) == 0

    await eventually(settled, 10, "sessions before sign-in gone")


@pytest.fixture(scope="module", params=BACKENDS)
def quick_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubServer]:
    """A server that closes sessions before sign-in after ``QUICK_TIMEOUT_SECONDS``."""
    directory: Path = tmp_path_factory.mktemp(f"quick-{request.param}")
    with running_hub(request.param, directory, env=QUICK_ENV) as server:
        yield server


# -- M1: sessions that never sign in ------------------------------------------------------


async def test_a_websocket_session_that_never_connects_is_closed_after_the_timeout(
    quick_server: HubServer,
) -> None:
    """No ``40`` ever, every ping answered and more: the server ends the websocket itself
    (close code 1008), and counts it."""
    before = (await samples(quick_server.base_url)).count(TIMED_OUT)
    session = await RawSession.open(quick_server.base_url)
    assert await session.closed_by_server(), "a session that never signed in stayed open"
    assert session.ws.close_code == 1008, session.ws.close_code
    after = await samples(quick_server.base_url)
    assert after.count(TIMED_OUT) >= before + 1
    await none_pending(quick_server.base_url)


async def test_a_polling_session_that_never_connects_is_closed_after_the_timeout(
    quick_server: HubServer,
) -> None:
    """On HTTP long-polling: the waiting poll is answered with Engine.IO's CLOSE packet,
    and the session is gone (a later request for it is 400)."""
    url = socket_url(quick_server.base_url, "http", "polling")
    async with httpx.AsyncClient(timeout=CLOSED_WITHIN + 30, trust_env=False) as client:
        opening = await client.get(url)
        assert opening.status_code == 200 and opening.text.startswith("0{"), opening.text
        sid = json.loads(opening.text[1:])["sid"]
        poll = await client.get(f"{url}&sid={sid}")
        assert poll.status_code == 200, poll.text
        assert "1" in poll.text.split("\x1e"), f"no CLOSE packet: {poll.text!r}"
        after = await client.get(f"{url}&sid={sid}")
        assert after.status_code == 400, after.text


async def test_a_socket_that_leaves_the_namespace_but_keeps_its_session_is_closed(
    quick_server: HubServer,
) -> None:
    """Signed in, then ``41`` (a Socket.IO disconnect) with the Engine.IO session kept
    open: it is before sign-in again, and closed like one that never signed in."""
    session = await RawSession.open(quick_server.base_url)
    await session.sign_in(quick_server.admin_token)
    await session.send("41")
    assert await session.closed_by_server(), "a session that left its namespace stayed open"


async def test_a_session_that_signs_in_in_time_stays_open(quick_server: HubServer) -> None:
    """The timeout is for sessions before sign-in only: a signed-in one outlives it."""
    session = await RawSession.open(quick_server.base_url)
    try:
        await session.sign_in(quick_server.admin_token)
        assert not await session.closed_by_server(within=3 * QUICK_TIMEOUT_SECONDS)
        await session.send(f'421["room_join",{{"room_id":"{unique("lab")}"}}]')
        assert set(await session.ack(1)) == {"room_id"}
    finally:
        await session.close()


async def test_an_address_holds_at_most_its_cap_of_sessions_before_sign_in(
    shared_server: HubServer,
) -> None:
    """The cap's next handshake is refused 429 ``too-many-connections`` (websocket and
    polling alike); a session that signs in frees its place."""
    base_url = shared_server.base_url
    await none_pending(base_url)
    before = (await samples(base_url)).count(REFUSED, {"reason": "too-many-connections"})
    async with raw_sessions(base_url, MAX_PER_ADDRESS) as sessions:
        assert (await samples(base_url)).count(PENDING) == MAX_PER_ADDRESS
        with pytest.raises(websockets.InvalidStatus) as refused:
            await RawSession.open(base_url)
        assert refused.value.response.status_code == 429
        async with httpx.AsyncClient(timeout=15.0, trust_env=False) as client:
            response = await client.get(socket_url(base_url, "http", "polling"))
        assert response.status_code == 429, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["retry-after"] == "60"  # the timeout: when places free up
        assert_problem_ack(response.json(), 429, "too-many-connections")
        after = (await samples(base_url)).count(REFUSED, {"reason": "too-many-connections"})
        assert after == before + 2

        await sessions[0].sign_in(shared_server.admin_token)
        assert (await samples(base_url)).count(PENDING) == MAX_PER_ADDRESS - 1
        one_more = await RawSession.open(base_url)  # the place it left
        await one_more.close()


async def test_before_sign_in_only_a_connect_is_read(shared_server: HubServer) -> None:
    """An event before ``40`` is not answered, nor logged (python-socketio would log a
    warning for each); the session signs in after."""
    log_offset = len(shared_server.output())
    session = await RawSession.open(shared_server.base_url)
    try:
        await session.send(f'421["room_join",{{"room_id":"{unique("lab")}"}}]')
        await session.sign_in(shared_server.admin_token)  # the next message is its answer
        await session.send(f'422["room_join",{{"room_id":"{unique("lab")}"}}]')
        assert set(await session.ack(2)) == {"room_id"}
    finally:
        await session.close()
    assert "not connected" not in shared_server.output()[log_offset:]


async def test_malformed_packets_are_dropped_without_a_traceback(shared_server: HubServer) -> None:
    """Text that is no Socket.IO packet, or an event that is not a named list, from a
    signed-in socket: dropped, nothing logged but at debug level; the socket goes on."""
    log_offset = len(shared_server.output())
    session = await RawSession.open(shared_server.base_url)
    try:
        await session.sign_in(shared_server.admin_token)
        for junk in ("4", "4x", '42{"a":1}', "42[]", "421", '42"room_join"', "49[1]", "42[1,"):
            await session.send(junk)
        room = unique("lab")
        await session.send(f'422["room_join",{{"room_id":"{room}"}}]')
        assert await session.ack(2) == {"room_id": room}
    finally:
        await session.close()
    assert "Traceback" not in shared_server.output()[log_offset:]


# -- M2 and L3: binary data ---------------------------------------------------------------


async def test_binary_packets_are_answered_422_and_their_attachments_dropped(
    shared_server: HubServer,
) -> None:
    """A binary event asking for an ack gets 422 ``validation-error`` at once (not after
    its attachments); one announcing 9,999,999,999 attachments is dropped, and so is
    every binary frame: the next text event is read and answered as usual."""
    base_url = shared_server.base_url
    before = await samples(base_url)
    session = await RawSession.open(base_url)
    try:
        await session.sign_in(shared_server.admin_token)
        await session.send('451-1["room_join",{"_placeholder":true,"num":0}]')
        assert_problem_ack(await session.ack(1), 422, "validation-error")
        await session.send('4599999999-["room_join",{"_placeholder":true,"num":0}]')
        for _ in range(3):
            await session.send(b"\x00" * (MESSAGE_BYTES // 2))
        room = unique("lab")
        await session.send(f'422["room_join",{{"room_id":"{room}"}}]')
        assert await session.ack(2) == {"room_id": room}
    finally:
        await session.close()
    after = await samples(base_url)
    assert after.count(BINARY, {"part": "packet"}) == before.count(BINARY, {"part": "packet"}) + 2
    assert (
        after.count(BINARY, {"part": "attachment"})
        == before.count(BINARY, {"part": "attachment"}) + 3
    )


# Another loopback address: the per-address cap counts the flooder's sessions, not hers.
BYSTANDER_ADDRESS = "127.0.0.2"


async def test_floods_before_sign_in_and_of_binary_frames_leave_another_user_served(
    shared_server: HubServer,
) -> None:
    """While one address holds its cap of sessions before sign-in (and has the next ones
    refused) and a signed-in socket of Alice's sends binary frames, Bob, on another
    address, signs a socket in, joins a room and has every REST read and submit answered:
    no 5xx, nothing of his refused. (The figures of such floods, the p95 of a bystander's
    requests beside the quiet ones: ``python -m benchmarks floods``.)"""
    base_url = shared_server.base_url
    await none_pending(base_url)
    alice = shared_server.create_user(unique("alice"))
    bob = shared_server.create_user(unique("bob"))
    transport = httpx.AsyncHTTPTransport(local_address=BYSTANDER_ADDRESS)
    async with (
        raw_sessions(base_url, MAX_PER_ADDRESS),
        httpx.AsyncClient(base_url=base_url, transport=transport, timeout=15.0) as http,
    ):
        owner = await new_owner(http, bob)
        with pytest.raises(websockets.InvalidStatus):  # the flooder's address is at its cap
            await RawSession.open(base_url)
        stop = asyncio.Event()

        async def binary_flood() -> int:
            """Alice's signed-in socket (a place freed for it first) sends frames."""
            frames = 0
            session = RawSession(
                await websockets.connect(
                    socket_url(base_url, "ws"),
                    max_size=None,
                    local_addr=(BYSTANDER_ADDRESS, 0),
                )
            )
            try:
                await session.next()  # OPEN
                await session.sign_in(alice)
                await session.send('4599999999-["room_join",{"_placeholder":true,"num":0}]')
                while not stop.is_set():
                    await session.send(b"\x00" * (MESSAGE_BYTES // 2))
                    frames += 1
                    await asyncio.sleep(0)
            finally:
                await session.close()
            return frames

        flooding = asyncio.create_task(binary_flood())
        answers = []
        bobs = RawSession(
            await websockets.connect(
                socket_url(base_url, "ws"), max_size=None, local_addr=(BYSTANDER_ADDRESS, 0)
            )
        )
        try:
            await bobs.next()  # OPEN
            await bobs.sign_in(bob)
            room = unique("lab")
            await bobs.send(f'421["room_join",{{"room_id":"{room}"}}]')
            assert await bobs.ack(1) == {"room_id": room}
            for _ in range(10):
                task = await owner.api.submit(owner.job, room=owner.room)
                answers.append((await owner.api.get(f"/tasks/{task['id']}")).status_code)
        finally:
            await bobs.close()
            stop.set()
        assert await flooding > 0
        assert answers == [200] * 10


async def test_bytes_in_a_task_update_answer_422_and_change_nothing(
    shared_server: HubServer, http: httpx.AsyncClient
) -> None:
    """python-socketio sends ``result: b"\\x00"`` as a binary event: the ack is 422, no
    500 and no traceback in the server's log; the task is as it was, and the same socket
    then reports it."""
    owner = await new_owner(http, shared_server.create_user(unique("alice")))
    task = await claimed_task(owner)
    log_offset = len(shared_server.output())
    async with SocketProbe("worker") as probe:
        await probe.connect(shared_server.base_url, owner.token)
        body = {"task_id": task["id"], "claim_token": task["claim_token"]}
        running = await probe.call("task_update", {**body, "status": "running"})
        assert running["status"] == "running", running
        refused = await probe.call("task_update", {**body, "status": "completed", "result": b"\0"})
        assert_problem_ack(refused, 422, "validation-error")
        assert await owner.api.task(task["id"]) == running
        done = await probe.call("task_update", {**body, "status": "completed", "result": 1})
        assert done["status"] == "completed", done
    assert "Traceback" not in shared_server.output()[log_offset:]


# -- the message bound --------------------------------------------------------------------


async def test_a_message_past_the_bound_closes_its_connection(shared_server: HubServer) -> None:
    """A message just within ``TASKHUB_MAX_SOCKET_MESSAGE_BYTES`` is read (and answered);
    one past it ends the connection."""
    session = await RawSession.open(shared_server.base_url)
    try:
        await session.sign_in(shared_server.admin_token)
        within = '421["room_join",{"room_id":"' + "a" * (MESSAGE_BYTES - 40) + '"}]'
        assert len(within) <= MESSAGE_BYTES
        await session.send(within)
        assert_problem_ack(await session.ack(1), 400, "invalid-room-id")
        past = '422["room_join",{"room_id":"' + "a" * MESSAGE_BYTES + '"}]'
        await session.send(past)
        assert await session.closed_by_server(), "a message past the bound was read"
    finally:
        await session.close()


# -- per-user sockets ---------------------------------------------------------------------


async def connect_error(base_url: str, token: str) -> Any:
    """The ``connect_error`` data of a refused connect with ``token``."""
    client = socketio.AsyncClient(reconnection=False)
    refusals: list[Any] = []
    client.on("connect_error", lambda data=None: refusals.append(data))
    with pytest.raises(socketio.exceptions.ConnectionError):
        await client.connect(
            base_url, auth={"token": token}, transports=["websocket"], wait_timeout=5
        )
    await client.disconnect()
    assert refusals, "no refusal from the server"
    return refusals[0]


async def test_a_user_holds_at_most_user_max_sockets(shared_server: HubServer) -> None:
    """Alice's third socket is refused 429 ``too-many-sockets`` while Bob still connects;
    once one of hers closes she may connect again."""
    base_url = shared_server.base_url
    alice = shared_server.create_user(unique("alice"))
    bob = shared_server.create_user(unique("bob"))
    before = (await samples(base_url)).count(REFUSED, {"reason": "too-many-sockets"})
    async with contextlib.AsyncExitStack() as stack:
        held = [await stack.enter_async_context(SocketProbe(f"a{i}")) for i in range(USER_SOCKETS)]
        for probe in held:
            await probe.connect(base_url, alice)
        refusal = await connect_error(base_url, alice)
        assert isinstance(refusal, dict), refusal
        assert_problem_ack(refusal["data"], 429, "too-many-sockets")
        refused = (await samples(base_url)).count(REFUSED, {"reason": "too-many-sockets"})
        assert refused == before + 1

        bystander = await stack.enter_async_context(SocketProbe("bob"))
        await bystander.connect(base_url, bob)
        await bystander.room_join(unique("lab"))

        await held[0].disconnect()
        again = await eventually(
            lambda: connected_probe(base_url, alice), 10, "alice connects once one closed"
        )
        await stack.enter_async_context(again)
        await again.room_join(unique("lab"))


async def connected_probe(base_url: str, token: str) -> SocketProbe | None:
    """A probe connected with ``token``; None if refused (the server may not have seen a
    close yet)."""
    probe = SocketProbe("again")
    try:
        await probe.connect(base_url, token)
    except socketio.exceptions.ConnectionError:
        await probe.client.disconnect()
        return None
    return probe


@pytest.mark.parametrize("who", ["superuser", "named"])
async def test_exempt_users_are_not_held_to_the_socket_limit(
    shared_server: HubServer, who: str
) -> None:
    """A superuser (``TASKHUB_LIMITS_EXEMPT_SUPERUSERS`` holds by default) and a user named
    in ``TASKHUB_LIMITS_EXEMPT_USERS`` hold more than ``TASKHUB_USER_MAX_SOCKETS``."""
    if who == "superuser":
        token = shared_server.create_user(unique("root"), superuser=True)
    else:
        token = shared_server.create_user(EXEMPT_USER)
    async with contextlib.AsyncExitStack() as stack:
        for index in range(USER_SOCKETS + 2):
            probe = await stack.enter_async_context(SocketProbe(f"{who}-{index}"))
            await probe.connect(shared_server.base_url, token)
        await probe.room_join(unique("lab"))
