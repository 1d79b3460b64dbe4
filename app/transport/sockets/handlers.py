"""Socket.IO event handlers (docs/protocol.md, "Socket.IO"). Thin: authenticate, authorise,
enter or leave rooms. Errors come back in the acknowledgement as problem objects."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import socketio

from taskhub.duty import Duty, Every
from taskhub.json_codec import wire_json
from taskhub.observability import metrics
from taskhub.observability.request_id import bound, socket_request_id
from taskhub.realtime.task_push import MAX_GRANTED_SLOTS, Grant, TaskPusher
from taskhub.rules.errors import (
    DomainError,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    ValidationFailed,
    WorkerNotJoined,
)
from taskhub.rules.naming import JobName, validate_room_id
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.rooms import job_room, room_room, worker_room
from taskhub.rules.user_limits import exempt_from_limits
from taskhub.runtime import Hub
from taskhub.services.users import hash_token
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
    principal: Principal
    token_digest: str
    workers: set[UUID] = field(default_factory=set)
    rooms: set[str] = field(default_factory=set)  # entered by its events, for the cap
    jobs: dict[UUID, set[str]] = field(default_factory=dict)  # joined job names per worker

    def reserve(self, rooms: set[str]) -> bool:
        """Count ``rooms`` as the socket's if the cap leaves space for the new ones among
        them (no await in between: concurrent joins of one socket cannot both pass)."""
        if len(self.rooms | rooms) > MAX_ROOMS_PER_SOCKET:
            return False
        self.rooms |= rooms
        return True


def _slots(data: Any) -> int:
    value = data.get("slots") if isinstance(data, dict) else None
    if type(value) is not int or not 0 <= value <= MAX_GRANTED_SLOTS:
        raise ValidationFailed(
            f"slots must be an integer from 0 to {MAX_GRANTED_SLOTS}.",
            errors=[{"loc": ["data", "slots"], "msg": "an integer in range is required"}],
        )
    return value


class SocketHandlers:
    def __init__(self, sio: socketio.AsyncServer, hub: Hub, admission: SocketAdmission) -> None:
        self.sio = sio
        self.hub = hub
        self.admission = admission
        self.sessions: dict[str, SocketSession] = {}
        # Connected sockets per user in this process (``TASKHUB_USER_MAX_SOCKETS``).
        self.user_sockets: dict[UUID, int] = {}
        self._exempt_users = frozenset(hub.settings.limits_exempt_users)
        self._recheck: Duty | None = None
        bus = hub.wake_bus
        self.pusher = TaskPusher(
            hub.db,
            hub.publisher,
            lease_seconds=hub.settings.task_lease_seconds,
            deliver=self._deliver_push,
            announce=bus.announce_available if bus is not None else None,
        )
        if bus is not None:
            bus.on_available = self.pusher.wake
        sio.on("connect", self.connect)
        sio.on("disconnect", self.disconnect)
        self.events = list(CLIENT_EVENTS)  # what the unknown-event answer lists
        for name in CLIENT_EVENTS:
            sio.on(name, acknowledged(getattr(self, name)))
        sio.on("*", self.unknown_event)

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
            await self._connect(sid, environ, auth)
            log.debug("socket connected")

    async def _connect(self, sid: str, environ: dict[str, Any], auth: Any) -> None:
        token = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(token, str) or not token:
            token = bearer_token(environ.get("HTTP_AUTHORIZATION"))
        principal = await self.hub.auth.authenticate(token) if token else None
        if principal is None or token is None:
            refusal = Unauthorized("A valid token is required: connect with auth={'token': ...}.")
            # The client's connect_error gets {"message": detail, "data": problem}.
            raise socketio.exceptions.ConnectionRefusedError(refusal.detail, problem_of(refusal))
        if self._over_socket_limit(principal):
            metrics.socket_session_refused("too-many-sockets")
            limit = self.hub.settings.user_max_sockets
            detail = f"A user may hold at most {limit} connected sockets: close one first."
            problem = problem_body(429, "too-many-sockets", "Too Many Sockets", detail)
            raise socketio.exceptions.ConnectionRefusedError(detail, problem)
        self.sessions[sid] = SocketSession(principal, hash_token(token))
        self.user_sockets[principal.id] = self.user_sockets.get(principal.id, 0) + 1
        self.admission.signed_in(environ)
        metrics.socket_connected()

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
        """Disconnect the sockets whose token has been revoked since they connected (and
        take up a changed superuser flag); the sids it disconnected."""
        sessions = dict(self.sessions)
        current = await self.hub.auth.current({s.token_digest for s in sessions.values()})
        revoked = []
        for sid, session in sessions.items():
            principal = current.get(session.token_digest)
            if principal is None:
                revoked.append(sid)
            else:
                session.principal = principal
        for sid in revoked:
            with bound(socket_request_id(sid)):
                log.info("socket disconnected: its token was revoked")
            await self.sio.disconnect(sid)
        return revoked

    def start(self) -> None:
        """Re-check the connected sockets' tokens as often as HTTP re-reads them (the
        authentication cache's lifetime; at least 1 s apart)."""
        interval = max(self.hub.settings.auth_cache_seconds, 1.0)
        self._recheck = self._recheck_every(interval)
        self._recheck.start()

    async def stop(self) -> None:
        self.admission.stop()
        if self._recheck is not None:
            await self._recheck.stop()

    def _recheck_every(self, interval: float) -> Duty:
        """The duty that runs ``recheck_tokens`` every ``interval`` seconds (a failed
        re-check is logged once per outage; the next runs as scheduled)."""
        return Every("socket-tokens", interval, self.recheck_tokens)

    async def disconnect(self, sid: str, *_reason: Any) -> None:
        session = self.sessions.pop(sid, None)
        if session is None:
            return
        environ = self.sio.get_environ(sid)
        if environ is not None:  # its Engine.IO session may stay: before sign-in again
            self.admission.signed_out(environ)
        user_id = session.principal.id
        left = self.user_sockets.get(user_id, 0) - 1
        if left > 0:
            self.user_sockets[user_id] = left
        else:
            self.user_sockets.pop(user_id, None)
        metrics.socket_disconnected()
        self.pusher.forget_socket(sid)
        with bound(socket_request_id(sid)):
            log.debug("socket disconnected")
            if session.workers:
                await self.hub.presence.detach(sid, set(session.workers))

    async def join_job_room(self, sid: str, data: Any) -> dict[str, Any]:
        """Enter ``jobs:{job_name}`` for a worker the socket's user owns, registered for
        that job."""
        try:
            session = self.sessions[sid]
            job = JobName.parse(text_field(data, "job_name"))
            job_name = job.full_name
            worker_id = uuid_field(data, "worker_id")
            rooms = {job_room(job_name), worker_room(worker_id)}
            if len(session.rooms | rooms) > MAX_ROOMS_PER_SOCKET:  # before any database work
                return TOO_MANY_ROOMS
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
        """Enter ``room:{room_id}``; any authenticated user may watch a valid room."""
        try:
            room_id = validate_room_id(text_field(data, "room_id"))
        except DomainError as exc:
            return problem_of(exc)
        session = self.sessions.get(sid)
        if session is None:
            return SOCKET_GONE
        if not session.reserve({room_room(room_id)}):
            return TOO_MANY_ROOMS
        await self.sio.enter_room(sid, room_room(room_id))
        return {"room_id": room_id}

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
            session = self.sessions.get(sid)
            if session is None:
                return SOCKET_GONE
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
        return reply

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

    async def _deliver_push(self, grant: Grant, records: list[TaskRecord]) -> bool:
        """Send pushed tasks to the grant's socket; whether it was still connected."""
        if grant.sid not in self.sessions:
            return False
        # (Written as a claim's answer writes them: Socket.IO's JSON is ``wire_json``.)
        tasks = [claimed_task_body(record) for record in records]
        payload = {"worker_id": str(grant.worker_id), "tasks": tasks}
        await self.sio.emit("task_pushed", payload, to=grant.sid)
        return True
