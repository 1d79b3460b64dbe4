"""Socket.IO event handlers (docs/protocol.md, "Socket.IO"). Thin: authenticate, authorise,
enter or leave rooms. Errors come back in the acknowledgement as problem objects."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, cast
from uuid import UUID

import socketio
from starlette.requests import HTTPConnection

from taskhub.duty import Duty, Every
from taskhub.json_codec import load_json, wire_json
from taskhub.observability import metrics
from taskhub.observability.request_id import bound, socket_request_id
from taskhub.realtime import socket_json
from taskhub.realtime.task_push import MAX_GRANTED_SLOTS, Grant, TaskPusher
from taskhub.rules.authorisation import RoomAction, may_in_room
from taskhub.rules.errors import (
    DomainError,
    NotFound,
    PayloadTooLarge,
    SocketGone,
    TooManyRooms,
    TooManySockets,
    Unauthorized,
    ValidationFailed,
    WorkerNotJoined,
)
from taskhub.rules.naming import JobName, validate_room_id
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.rooms import job_room, room_room, worker_room
from taskhub.rules.user_limits import exempt_from_limits
from taskhub.runtime import Hub
from taskhub.services.identities import Caller, Identity
from taskhub.services.workers import check_serves, existing_workers, heartbeat
from taskhub.transport.credentials import bearer_token
from taskhub.transport.http.api import parse_body
from taskhub.transport.http.problems import problem_body
from taskhub.transport.http.schemas import TaskUpdateIn, claimed_task_body
from taskhub.transport.sockets.acks import (
    MAX_ROOMS_PER_SOCKET,
    SOCKET_GONE,
    TOO_MANY_ROOMS,
    acknowledged,
    problem_of,
    text_field,
    uuid_field,
)
from taskhub.transport.sockets.admission import SocketAdmission
from taskhub.transport.task_updates import apply_task_update

log = logging.getLogger(__name__)
CLIENT_EVENTS = (
    "join_job_room",
    "leave_job_room",
    "room_join",
    "room_leave",
    "worker_ready",
    "worker_pause",
    "task_update",
)


@dataclass(slots=True)
class SocketSession:
    identity: Identity
    caller: Caller
    workers: set[UUID] = field(default_factory=set)
    rooms: set[str] = field(default_factory=set)  # entered by its events, for the cap
    jobs: dict[UUID, set[str]] = field(default_factory=dict)  # joined job names per worker
    expiry: asyncio.TimerHandle | None = None  # ends a JWT's session at its expiry

    @property
    def principal(self) -> Principal:
        return self.identity.principal

    def reserve(self, rooms: set[str]) -> bool:
        """Count ``rooms`` as the socket's if the cap leaves space for the new ones among
        them (no await in between: concurrent joins of one socket cannot both pass)."""
        if len(self.rooms | rooms) > MAX_ROOMS_PER_SOCKET:
            return False
        self.rooms |= rooms
        return True


def _positional_arity(handler: Any) -> int | None:
    """How many positional arguments ``handler`` takes (None: any number)."""
    parameters = inspect.signature(handler).parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _slots(data: Any) -> int:
    value = data.get("slots") if isinstance(data, dict) else None
    if type(value) is not int or not 0 <= value <= MAX_GRANTED_SLOTS:
        raise ValidationFailed(
            f"slots must be an integer from 0 to {MAX_GRANTED_SLOTS}.",
            errors=[{"loc": ["data", "slots"], "msg": "an integer in range is required"}],
        )
    return value


class SocketHandlers:
    """Taskhub's events on a Socket.IO server. ``admission`` given, the server is Taskhub's
    own: its ``connect`` signs callers in (refusing strangers) and its ``disconnect``
    cleans up. Without it the server is a host application's: the host's ``connect`` and
    ``disconnect`` stay (Taskhub's work is chained after them), and a socket is signed in
    to Taskhub by its first Taskhub event. ``take_over``: Taskhub's events replace those
    the host registered under the same names (else the host's stay)."""

    def __init__(
        self,
        sio: socketio.AsyncServer,
        hub: Hub,
        admission: SocketAdmission | None,
        *,
        take_over: bool = False,
    ) -> None:
        self.sio = sio
        self.hub = hub
        self.admission = admission
        self.sessions: dict[str, SocketSession] = {}
        # A host's sockets: the CONNECT ``auth`` of each, for signing in on its first event.
        self._handshakes: dict[str, Any] = {}
        # Connected sockets per user in this process (``TASKHUB_USER_MAX_SOCKETS``).
        self.user_sockets: dict[UUID, int] = {}
        self._exempt_users = frozenset(hub.settings.limits_exempt_users)
        self._recheck: Duty | None = None
        self._expiring: set[asyncio.Future[None]] = set()
        self._plain_json = sio.packet_class.json is not socket_json
        bus = hub.wake_bus
        self.pusher = TaskPusher(
            hub.db,
            hub.publisher,
            lease_seconds=hub.settings.task_lease_seconds,
            deliver=self._deliver_push,
            closed=lambda principal: hub.rooms.closed_to(principal, RoomAction.WORK),
            announce=bus.announce_available if bus is not None else None,
        )
        if bus is not None:
            bus.on_available = self.pusher.wake
        if hub.rooms.private is not None:
            hub.rooms.private.on_change(self.evict_outsiders)
        handlers = sio.handlers.get("/", {})
        if admission is not None:
            sio.on("connect", self.connect)
            sio.on("disconnect", self.disconnect)
        else:
            sio.on("connect", self._after(handlers.get("connect"), self._host_connected))
            sio.on("disconnect", self._after(handlers.get("disconnect"), self.disconnect))
        self.events = list(CLIENT_EVENTS)  # what the unknown-event answer lists
        for name in CLIENT_EVENTS:
            self.register(name, getattr(self, name), take_over=take_over)
        if "*" not in handlers:
            sio.on("*", self.unknown_event)

    def register(self, name: str, handler: Any, *, take_over: bool = False) -> None:
        """Answer the client event ``name`` with ``handler`` (acknowledged), unless the
        server's host answers it already and Taskhub is not to take over."""
        if name in self.sio.handlers.get("/", {}) and not take_over:
            log.info("the host answers %r itself: Taskhub's handler is not registered", name)
            return
        self.sio.on(name, acknowledged(handler))

    @staticmethod
    def _after(host: Any, ours: Any) -> Any:
        """A handler that calls the host's (if any) with the arguments it takes (a
        ``connect`` handler may take no ``auth``, a ``disconnect`` one no reason), then
        ours unless the host's refused (``False``)."""
        if host is None:
            return ours
        taken = _positional_arity(host)

        async def chained(sid: str, *args: Any) -> Any:
            outcome = host(sid, *(args if taken is None else args[: taken - 1]))
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome is not False:
                await ours(sid, *args)
            return outcome

        return chained

    async def _host_connected(self, sid: str, _environ: Any, auth: Any = None) -> None:
        self._handshakes[sid] = auth

    async def unknown_event(self, event: str, sid: str, *_data: Any) -> dict[str, Any]:
        """Every client event is answered: one the protocol does not have with a 404."""
        with bound(socket_request_id(sid)):
            log.debug("unknown socket event %.100r", event)
        return problem_body(
            404,
            "not-found",
            "Not Found",
            f"No such event: {event[:100]!r}. Events: {', '.join(self.events)}.",
        )

    async def connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> None:
        with bound(socket_request_id(sid)):
            session = await self._sign_in(sid, environ, auth)
            if isinstance(session, DomainError):
                # The client's connect_error gets {"message": detail, "data": problem}.
                raise socketio.exceptions.ConnectionRefusedError(
                    session.detail, problem_of(session)
                )
            if self.admission is not None:
                self.admission.signed_in(environ)
            log.debug("socket connected")

    async def _sign_in(
        self, sid: str, environ: dict[str, Any], auth: Any
    ) -> SocketSession | DomainError:
        """The socket's session, signed in by its CONNECT's ``auth["token"]`` or the
        handshake's ``Authorization``, or the problem refusing it."""
        token = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(token, str) or not token:
            token = bearer_token(environ.get("HTTP_AUTHORIZATION"))
        # The handshake's request (python-socketio's ASGI driver keeps it in the environ).
        scope = environ.get("asgi.scope") or {"type": "http", "headers": []}
        caller = Caller(HTTPConnection(scope), token, sid, auth)
        try:
            identity = await self.hub.identities.identify(caller)
        except DomainError as exc:
            return exc
        if identity is None:
            return Unauthorized("A valid token is required: connect with auth={'token': ...}.")
        principal = identity.principal
        if self._over_socket_limit(principal):
            metrics.socket_session_refused("too-many-sockets")
            limit = self.hub.settings.user_max_sockets
            return TooManySockets(
                f"A user may hold at most {limit} connected sockets: close one first."
            )
        session = self.sessions[sid] = SocketSession(identity, caller)
        if identity.expires_at is not None:  # a JWT: signed out when it expires
            delay = max(identity.expires_at - time.time(), 0.0)
            session.expiry = asyncio.get_running_loop().call_later(
                delay, self._expire, sid, session
            )
        self.user_sockets[principal.id] = self.user_sockets.get(principal.id, 0) + 1
        metrics.socket_connected()
        return session

    async def session_of(self, sid: str) -> SocketSession:
        """The socket's session; on a host's server, signed in by its first Taskhub event
        (401 when the host's hook and the tokens know nobody; ``SOCKET_GONE`` when the
        socket is gone)."""
        session = self.sessions.get(sid)
        if session is not None:
            return session
        environ = self.sio.get_environ(sid)
        if self.admission is not None or environ is None:
            raise SocketGone("The socket is gone.")
        signed_in = await self._sign_in(sid, environ, self._handshakes.get(sid))
        if isinstance(signed_in, DomainError):
            raise signed_in
        if self.sio.get_environ(sid) is None:  # disconnected meanwhile: nobody cleans up
            await self.disconnect(sid)
            raise SocketGone("The socket is gone.")
        return signed_in

    async def check_room(self, session: SocketSession, room_id: str, action: RoomAction) -> None:
        """The room policy allows the socket's caller ``action`` in ``room_id``."""
        await self.hub.rooms.check(session.principal, room_id, action, session.caller)

    async def evict_outsiders(self, room_id: str | None = None) -> list[str]:
        """Take this process's sockets out of a private room's Socket.IO rooms once their
        users may no longer be there (a member removed or demoted, a room made private):
        ``room:{room_id}`` without ``read``, its jobs' ``jobs:…`` without ``work``. Called
        at once for a change made here (``PrivateRooms.on_change``) and, for changes made on
        other replicas, with every re-check of the tokens (None: every private room). The
        sids taken out of a room."""
        private = self.hub.rooms.private
        if private is None:
            return []
        rooms = await private.rooms()
        names = set(rooms) if room_id is None else {room_id}
        evicted: list[str] = []
        for sid, session in list(self.sessions.items()):
            leave = [
                room_room(name)
                for name in names
                if room_room(name) in session.rooms
                and not may_in_room(session.principal, rooms.get(name), RoomAction.READ)
            ]
            leave += [
                job_room(job_name)
                for jobs in session.jobs.values()
                for job_name in jobs
                if JobName.parse(job_name).room_id in names
                and not may_in_room(
                    session.principal, rooms.get(JobName.parse(job_name).room_id), RoomAction.WORK
                )
            ]
            for room in leave:
                session.rooms.discard(room)
                await self.sio.leave_room(sid, room)
            if leave:
                evicted.append(sid)
                with bound(socket_request_id(sid)):
                    log.info("socket left %s: its user may no longer be there", ", ".join(leave))
        return evicted

    def _over_socket_limit(self, principal: Principal) -> bool:
        """Whether ``principal`` holds ``TASKHUB_USER_MAX_SOCKETS`` sockets here already
        (0: no limit) and is held to the per-user limits."""
        settings = self.hub.settings
        limit = settings.user_max_sockets
        if not limit or self.user_sockets.get(principal.id, 0) < limit:
            return False
        return not exempt_from_limits(
            principal, self._exempt_users, settings.limits_exempt_superusers
        )

    async def recheck_tokens(self) -> list[str]:
        """End the sessions whose token was revoked since the socket signed in (and take up
        a changed superuser flag; a JWT's session ends at its expiry by a timer); on a
        host's server, also forget the sessions of sockets gone without Taskhub being told.
        On Taskhub's own server such a socket is disconnected; on a host's it only leaves
        Taskhub (its other business is the host's). The sids whose sessions ended."""
        sessions = dict(self.sessions)
        digests = {s.identity.token_digest for s in sessions.values()} - {None}
        current = await self.hub.auth.current(cast(set[str], digests))
        ended: dict[str, str] = {}
        for sid, session in sessions.items():
            identity = session.identity
            if identity.token_digest is not None:
                principal = current.get(identity.token_digest)
                if principal is None:
                    ended[sid] = "its token was revoked"
                elif principal != identity.principal:
                    session.identity = replace(identity, principal=principal)
            if self.admission is None and self.sio.get_environ(sid) is None:
                ended[sid] = "it is gone"
        for sid, why in ended.items():
            with bound(socket_request_id(sid)):
                log.info("socket signed out: %s", why)
            if self.admission is not None:
                await self.sio.disconnect(sid)
            else:
                await self.sign_out(sid)
        await self.evict_outsiders()  # rooms made private, members removed, elsewhere
        return list(ended)

    def start(self) -> None:
        """Re-check the connected sockets' tokens as often as HTTP re-reads them (the
        authentication cache's lifetime; at least 1 s apart)."""
        interval = max(self.hub.settings.auth_cache_seconds, 1.0)
        self._recheck = self._recheck_every(interval)
        self._recheck.start()

    async def stop(self) -> None:
        if self.admission is not None:
            self.admission.stop()
        if self._recheck is not None:
            await self._recheck.stop()

    def _recheck_every(self, interval: float) -> Duty:
        """The duty that runs ``recheck_tokens`` every ``interval`` seconds (a failed
        re-check is logged once per outage; the next runs as scheduled)."""
        return Every("socket-tokens", interval, self.recheck_tokens)

    async def disconnect(self, sid: str, *_reason: Any) -> None:
        self._handshakes.pop(sid, None)
        environ = self.sio.get_environ(sid)
        if sid in self.sessions and environ is not None and self.admission is not None:
            self.admission.signed_out(environ)  # its Engine.IO session may stay a while
        await self.sign_out(sid)

    def _expire(self, sid: str, session: SocketSession) -> None:
        """The session's sign-in expired: end it, as a revoked token's is ended."""
        if self.sessions.get(sid) is not session:
            return
        with bound(socket_request_id(sid)):
            log.info("socket signed out: its sign-in expired")
        ending = self.sio.disconnect(sid) if self.admission is not None else self.sign_out(sid)
        task = asyncio.ensure_future(ending)
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def sign_out(self, sid: str) -> None:
        """Forget the socket's session: its rooms of Taskhub, its workers' presence."""
        session = self.sessions.pop(sid, None)
        if session is None:
            return
        if session.expiry is not None:
            session.expiry.cancel()
        user_id = session.principal.id
        left = self.user_sockets.get(user_id, 0) - 1
        if left > 0:
            self.user_sockets[user_id] = left
        else:
            self.user_sockets.pop(user_id, None)
        metrics.socket_disconnected()
        self.pusher.forget_socket(sid)
        if self.admission is None:  # a host's socket stays connected: out of our rooms
            for room in session.rooms:
                await self.sio.leave_room(sid, room)
        with bound(socket_request_id(sid)):
            log.debug("socket signed out")
            if session.workers:
                await self.hub.presence.detach(sid, set(session.workers))

    async def join_job_room(self, sid: str, data: Any) -> dict[str, Any]:
        """Enter ``jobs:{job_name}`` for a worker the socket's user owns, registered for
        that job."""
        try:
            job = JobName.parse(text_field(data, "job_name"))
            job_name = job.full_name
            worker_id = uuid_field(data, "worker_id")
            session = await self.session_of(sid)
            rooms = {job_room(job_name), worker_room(worker_id)}
            if len(session.rooms | rooms) > MAX_ROOMS_PER_SOCKET:  # before any database work
                return TOO_MANY_ROOMS
            await self.check_room(session, job.room_id, RoomAction.WORK)
            # Proves ownership (404/403) and counts as a sign of life for the grace check.
            await heartbeat(self.hub.db, session.principal, worker_id)
            await check_serves(self.hub.db, worker_id, job)
        except DomainError as exc:
            return problem_of(exc)
        if sid not in self.sessions:  # gone while the checks ran: attach nothing (nobody
            # would detach it) and answer no one
            return SOCKET_GONE
        if worker_id not in session.workers and session.workers:
            await self._drop_removed_workers(sid, session)
            if sid not in self.sessions:
                return SOCKET_GONE
        if not session.reserve(rooms):  # other joins of this socket took the last places
            return TOO_MANY_ROOMS
        session.workers.add(worker_id)
        await self.hub.presence.attach(worker_id, sid)
        if sid not in self.sessions:  # gone while it was being shared: take it out again
            await self.hub.presence.detach(sid, {worker_id})
            return SOCKET_GONE
        await self.sio.enter_room(sid, job_room(job_name))
        await self.sio.enter_room(sid, worker_room(worker_id))  # task_cancelled for this worker
        session.jobs.setdefault(worker_id, set()).add(job_name)
        return {"job_name": job_name, "worker_id": str(worker_id)}

    async def _drop_removed_workers(self, sid: str, session: SocketSession) -> None:
        """Let go of the socket's worker ids whose workers the hub removed: a worker that
        registers again (the hub forgot its old id) joins again for the new id on the same
        socket, and the old one would otherwise stay in presence (and in Redis) and in its
        ``worker:`` room, taking a place under the cap, for as long as the socket lives.
        A socket may serve several live workers: only removed ones (ids are never reused)
        are let go."""
        held = set(session.workers)
        for worker_id in held - await existing_workers(self.hub.db, held):
            if worker_id not in session.workers:  # let go by a concurrent join meanwhile
                continue
            session.workers.discard(worker_id)
            session.jobs.pop(worker_id, None)
            session.rooms.discard(worker_room(worker_id))
            self.pusher.forget_worker(worker_id)
            log.debug("socket lets go of removed worker %s", worker_id)
            await self.sio.leave_room(sid, worker_room(worker_id))
            await self.hub.presence.forget_socket(worker_id, sid)

    async def leave_job_room(self, sid: str, data: Any) -> dict[str, Any]:
        try:
            job_name = text_field(data, "job_name")
        except DomainError as exc:
            return problem_of(exc)
        self._forget(sid, job_room(job_name))
        session = self.sessions.get(sid)
        for jobs in session.jobs.values() if session is not None else ():
            jobs.discard(job_name)
        await self.sio.leave_room(sid, job_room(job_name))
        return {"job_name": job_name}

    async def room_join(self, sid: str, data: Any) -> dict[str, Any]:
        """Enter ``room:{room_id}``: a signed-in caller the room policy lets read it."""
        try:
            room_id = await self.watch_room(sid, text_field(data, "room_id"))
        except DomainError as exc:
            return problem_of(exc)
        return {"room_id": room_id}

    async def watch_room(self, sid: str, room_id: str) -> str:
        """Let the socket receive the room's events (``room:{room_id}``), as ``room_join``
        does (a host that answers ``room_join`` itself calls this); the valid room id, or
        the problem (``DomainError``) refusing it."""
        room_id = validate_room_id(room_id)
        session = await self.session_of(sid)
        await self.check_room(session, room_id, RoomAction.READ)
        if sid not in self.sessions:
            raise SocketGone("The socket is gone.")
        if not session.reserve({room_room(room_id)}):
            raise TooManyRooms(TOO_MANY_ROOMS["detail"])
        await self.sio.enter_room(sid, room_room(room_id))
        return room_id

    async def room_leave(self, sid: str, data: Any) -> dict[str, Any]:
        try:
            room_id = text_field(data, "room_id")
        except DomainError as exc:
            return problem_of(exc)
        self._forget(sid, room_room(room_id))
        await self.sio.leave_room(sid, room_room(room_id))
        return {"room_id": room_id}

    def _forget(self, sid: str, room: str) -> None:
        """A left room no longer counts towards the socket's cap."""
        session = self.sessions.get(sid)
        if session is not None:
            session.rooms.discard(room)

    async def worker_ready(self, sid: str, data: Any) -> dict[str, Any]:
        """The socket's worker grants the hub ``slots`` more for pushed tasks
        (``realtime/task_push.py``); answered with the slots the hub holds for it now. The
        worker must have joined a job room through this socket (which proved it is the
        caller's)."""
        try:
            self._shortcuts_enabled()
            worker_id = uuid_field(data, "worker_id")
            slots = _slots(data)
            session = self._joined(sid, worker_id)
        except DomainError as exc:
            return problem_of(exc)
        jobs = session.jobs.get(worker_id, set())
        held = self.pusher.grant(sid, worker_id, session.principal, jobs, slots)
        return {"worker_id": str(worker_id), "slots": held}

    async def worker_pause(self, sid: str, data: Any) -> dict[str, Any]:
        """Take back what the socket's worker granted; answered with the slots returned (a
        push under way may still deliver tasks for the others)."""
        try:
            self._shortcuts_enabled()
            worker_id = uuid_field(data, "worker_id")
            self._joined(sid, worker_id)
        except DomainError as exc:
            return problem_of(exc)
        return {"worker_id": str(worker_id), "slots": await self.pusher.pause(worker_id, sid)}

    async def task_update(self, sid: str, data: Any) -> dict[str, Any]:
        """``PATCH /tasks/{task_id}`` over the socket: the same body beside ``task_id``,
        read by the same rules, answered with the same body (``transport/task_updates``),
        with the socket's user as the caller. Offered with the worker shortcuts."""
        try:
            self._shortcuts_enabled()
            session = await self.session_of(sid)
            task_id = uuid_field(data, "task_id")
            raw = wire_json({key: value for key, value in data.items() if key != "task_id"})
            if len(raw) > self.hub.settings.max_body_bytes:
                raise PayloadTooLarge(
                    f"An update may be at most {self.hub.settings.max_body_bytes} bytes."
                )
            body = parse_body(raw, TaskUpdateIn)
            reply = await apply_task_update(self.hub, session.principal, task_id, body)
        except DomainError as exc:
            return problem_of(exc)
        metrics.socket_task_update()
        return self._sendable(reply)

    def _shortcuts_enabled(self) -> None:
        if not self.hub.settings.worker_shortcuts:
            raise NotFound(
                "Task push and task_update are turned off on this hub (TASKHUB_WORKER_SHORTCUTS)."
            )

    def _joined(self, sid: str, worker_id: UUID) -> SocketSession:
        """The socket's session, if ``worker_id`` joined a job room through it (409)."""
        session = self.sessions.get(sid)
        if session is None or worker_id not in session.workers:
            raise WorkerNotJoined(
                f"Worker {worker_id} has not joined a job room on this socket: join_job_room first."
            )
        return session

    def _sendable(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A payload the server's JSON module can write: as it is for Taskhub's own
        (``socket_json`` writes records as answers do), else plain JSON values (a host's
        server with the standard library's ``json``)."""
        if self._plain_json:
            loaded: dict[str, Any] = load_json(wire_json(payload).decode())
            return loaded
        return payload

    async def _deliver_push(self, grant: Grant, records: list[TaskRecord]) -> bool:
        """Send pushed tasks to the grant's socket; whether it was still connected."""
        if grant.sid not in self.sessions:
            return False
        # (Written as a claim's answer writes them: Socket.IO's JSON is ``wire_json``.)
        tasks = [claimed_task_body(record) for record in records]
        payload = self._sendable({"worker_id": str(grant.worker_id), "tasks": tasks})
        await self.sio.emit("task_pushed", payload, to=grant.sid)
        return True
