"""A model-based walk through a private room (a real server and sockets, both backends):
alice keeps ``secret`` and gives bob and carol changing roles (none, viewer, member,
maintainer), opens and closes it; everyone submits, reads, watches and claims. Whoever may
not read the room at a moment receives not a byte of it from then on: no REST body (task,
listing, stats, counts, queue positions, logs, workers) and no event names its room or its
tasks, and no claim of their worker takes its tasks.

Events on one socket arrive in the order they were sent, so after each step a task
submitted in the open room ``lobby`` is awaited on every socket: whatever the step caused
has arrived by then (``settle``)."""

from __future__ import annotations

import asyncio
import json

import httpx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from taskhub.main import create_app
from taskhub.services.users import create_user
from taskhub.settings import Settings
from tests.realtime.hubs import served
from tests.support.api import ApiClient
from tests.support.machines import ServiceMachine
from tests.support.properties import examples
from tests.support.sockets import SocketProbe

ROOM = "secret"
LOBBY = "lobby"
USERS = ("alice", "bob", "carol")
GUESTS = ("bob", "carol")
ROLES = (None, "viewer", "member", "maintainer")
RANK = {None: -1, "viewer": 0, "member": 1, "maintainer": 2}


class PrivateRoomWalk(ServiceMachine):
    def __init__(self) -> None:
        super().__init__()
        self.private = True
        self.roles: dict[str, str | None] = {"alice": "maintainer", "bob": None, "carol": None}
        self.secrets: set[str] = {ROOM}  # the room's name and its tasks' ids
        # Per user, the socket's index from which it may receive nothing of the room.
        self.shut_out_from: dict[str, int | None] = {}
        self.run(self._start())

    async def _start(self) -> None:
        self._served = served(create_app(Settings(database_url=self.url)))
        url = await self._served.__aenter__()
        self.http = httpx.AsyncClient(base_url=url)
        self.clients: dict[str, ApiClient] = {}
        self.ids: dict[str, str] = {}
        self.probes: dict[str, SocketProbe] = {}
        for name in USERS:
            user_id, token = await create_user(self.db, name)
            self.ids[name] = str(user_id)
            self.clients[name] = ApiClient(self.http, token)
            self.probes[name] = probe = SocketProbe(name)
            await probe.connect(url, token)
            await probe.room_join(LOBBY)
        alice = self.clients["alice"]
        self.job = (await alice.register(ROOM, schema={}))["full_name"]
        self.lobby_job = (await alice.register(LOBBY, schema={}))["full_name"]
        self.workers: dict[str, str] = {}
        for name in USERS:  # a worker each, serving a job every room sees
            self.workers[name] = (await self.clients[name].post("/workers")).json()["id"]
        _root_id, root_token = await create_user(self.db, "root", superuser=True)
        root = ApiClient(self.http, root_token)
        for name in USERS:
            await root.register("@global", name="Shared", schema={}, worker_id=self.workers[name])
        self.shared = "@global:modifiers:Shared"
        made = await alice.put(f"/rooms/{ROOM}", json={"visibility": "private"})
        assert made.status_code == 200, made.text
        for name in USERS:
            await self._join(name)
        await self._settle()
        for name in GUESTS:
            self.shut_out_from[name] = self.probes[name].mark()

    def teardown(self) -> None:
        async def stop() -> None:
            for probe in self.probes.values():
                await probe.disconnect()
            await self.http.aclose()
            await self._served.__aexit__(None, None, None)

        self.run(stop())
        left = asyncio.all_tasks(self.loop)  # the socket clients' and server's own
        for task in left:
            task.cancel()
        self.run(asyncio.gather(*left, return_exceptions=True))
        super().teardown()

    # The model: what the room rule says.

    def may(self, name: str, role: str) -> bool:
        return not self.private or RANK[self.roles[name]] >= RANK[role]

    def _leaks(self, text: str) -> list[str]:
        return [secret for secret in self.secrets if secret in text]

    async def _settle(self) -> None:
        """Every socket has received what was sent before now."""
        task = await self.clients["alice"].submit(self.lobby_job, LOBBY)
        for probe in self.probes.values():
            await probe.wait_status(task["id"], "pending")

    async def _join(self, name: str) -> None:
        ack = await self.probes[name].call("room_join", {"room_id": ROOM})
        if self.may(name, "viewer"):
            assert ack == {"room_id": ROOM}, ack
        else:
            assert ack["status"] == 404, ack

    async def _access_changed(self, before: dict[str, bool]) -> None:
        """After a change of roles or visibility: a user who lost the room is watched from
        here (what was sent before has arrived), one who gained it joins it."""
        await self._settle()
        for name in GUESTS:
            now = self.may(name, "viewer")
            if before[name] and not now:
                self.shut_out_from[name] = self.probes[name].mark()
            elif now:
                self.shut_out_from[name] = None
                if not before[name]:
                    await self._join(name)

    def _readers(self) -> dict[str, bool]:
        return {name: self.may(name, "viewer") for name in GUESTS}

    # The steps.

    @rule(name=st.sampled_from(GUESTS), role=st.sampled_from(ROLES))
    def set_role(self, name: str, role: str | None) -> None:
        async def step() -> None:
            before = self._readers()
            path = f"/rooms/{ROOM}/members/user/{self.ids[name]}"
            alice = self.clients["alice"]
            if role is None:
                response = await alice.delete(path)
                assert response.status_code in (204, 404), response.text
            else:
                response = await alice.put(path, json={"role": role})
                assert response.status_code in (200, 201), response.text
            self.roles[name] = role
            await self._access_changed(before)

        self.run(step())

    @rule(private=st.booleans())
    def set_visibility(self, private: bool) -> None:
        async def step() -> None:
            before = self._readers()
            visibility = "private" if private else "open"
            response = await self.clients["alice"].put(
                f"/rooms/{ROOM}", json={"visibility": visibility}
            )
            assert response.status_code == 200, response.text
            self.private = private
            await self._access_changed(before)

        self.run(step())

    @rule(name=st.sampled_from(USERS), shared=st.booleans())
    def submit(self, name: str, shared: bool) -> None:
        async def step() -> None:
            job = self.shared if shared else self.job
            response = await self.clients[name].post(
                f"/rooms/{ROOM}/tasks/{job}", json={"payload": {}}
            )
            if self.may(name, "member"):
                assert response.status_code == 202, response.text
                self.secrets.add(response.json()["id"])
            else:
                expected = 403 if self.may(name, "viewer") else 404
                assert response.status_code == expected, response.text
                assert not self._leaks(response.text.replace(f"'{ROOM}'", ""))

        self.run(step())

    @rule(name=st.sampled_from(USERS))
    def claim(self, name: str) -> None:
        async def step() -> None:
            response = await self.clients[name].post(
                "/tasks/claim", json={"worker_id": self.workers[name], "max_tasks": 3}
            )
            assert response.status_code == 200, response.text
            if not self.may(name, "member"):
                assert not self._leaks(response.text), response.text
            for task in response.json()["tasks"]:  # done, so that claims go on
                for status in ("running", "completed"):
                    done = await self.clients[name].transition(
                        task["id"], status, claim_token=task["claim_token"]
                    )
                    assert done.status_code == 200, done.text

        self.run(step())

    @rule(
        name=st.sampled_from(GUESTS),
        path=st.sampled_from(
            [
                "/rooms/{room}/tasks",
                "/rooms/{room}/stats",
                "/rooms/{room}/jobs",
                "/rooms/{room}/workers",
                "/rooms/{room}",
                "/rooms/{lobby}/tasks",
                "/rooms/{lobby}/workers",
                "/rooms/{lobby}/stats",
                "/workers",
                "/tasks/{task}",
                "/tasks/{task}/place",
                "/tasks/{task}/logs",
            ]
        ),
        data=st.data(),
    )
    def read(self, name: str, path: str, data: st.DataObject) -> None:
        tasks = sorted(self.secrets - {ROOM})
        task = (
            data.draw(st.sampled_from(tasks)) if tasks else "00000000-0000-0000-0000-000000000000"
        )

        async def step() -> None:
            url = path.format(room=ROOM, lobby=LOBBY, task=task)
            response = await self.clients[name].get(url)
            if self.may(name, "viewer"):
                assert response.status_code == 200 or "/tasks/" in url, response.text
                return
            assert response.status_code in (200, 404), response.text
            # What the path named (the room, a task) may come back in its 404.
            body = response.text.replace(f"'{ROOM}'", "").replace(f"Task {task} ", "")
            assert not self._leaks(body), (url, body)

        self.run(step())

    @invariant()
    def an_outsider_receives_nothing_of_the_room(self) -> None:
        self.run(self._settle())
        for name, since in self.shut_out_from.items():
            if since is None:
                continue
            received = json.dumps(self.probes[name].between(since))
            assert not self._leaks(received), (name, received)


def test_an_outsider_never_receives_a_byte_of_a_private_room(database_url: str) -> None:
    PrivateRoomWalk.url = database_url
    PrivateRoomWalk.TestCase.settings = settings(
        max_examples=examples(10),
        stateful_step_count=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    PrivateRoomWalk.TestCase().runTest()
