"""``/v1/joblib/rooms/{room_id}`` and its members (docs/protocol.md, "Private rooms"): a
room's visibility and the caller's role there; who its members are and with which role."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel
from starlette.responses import Response

from taskhub.rules.authorisation import MemberKind, RoomAction, RoomRole
from taskhub.rules.errors import ValidationFailed
from taskhub.services import rooms as service
from taskhub.store.rooms import MemberRow
from taskhub.transport.http.api import Api, ApiRequest, json_response

api = Api()
Visibility = Literal["open", "private"]
Role = Literal["viewer", "member", "maintainer"]
Action = Literal["read", "submit", "work", "register", "manage"]


class RoomOut(BaseModel):
    room_id: str
    visibility: Visibility
    role: Role | None  # the caller's role in a private room (None: open, or superuser)
    actions: list[Action]  # what the caller may do there (the room rule's answer)


class RoomIn(BaseModel):
    visibility: Visibility


class MemberOut(BaseModel):
    kind: Literal["user", "group"]
    subject: str  # a user's id, or a group's name
    role: Role
    name: str | None  # the user's name once Taskhub has seen the user
    created_at: datetime

    @classmethod
    def of(cls, row: MemberRow) -> MemberOut:
        return cls.model_validate(
            {
                "kind": row.kind.value,
                "subject": row.subject,
                "role": row.role.value,
                "name": row.name,
                "created_at": row.created_at,
            }
        )


class MembersOut(BaseModel):
    items: list[MemberOut]


class MemberIn(BaseModel):
    role: Role


async def _room(req: ApiRequest) -> Response:
    view = await service.show_room(
        req.hub.rooms.private_rooms(), req.principal, req.path("room_id")
    )
    return json_response(
        RoomOut.model_validate(
            {
                "room_id": view.room_id,
                "visibility": view.visibility,
                "role": view.role.value if view.role is not None else None,
                "actions": [action.value for action in view.actions],
            }
        )
    )


@api.route("GET", "/rooms/{room_id:room}", response=RoomOut, errors=(400,), room=RoomAction.READ)
async def get_room(req: ApiRequest) -> Response:
    """The room's visibility, and the caller's role and actions there."""
    return await _room(req)


@api.route(
    "PUT",
    "/rooms/{room_id:room}",
    body=RoomIn,
    response=RoomOut,
    errors=(400,),
    room=RoomAction.MANAGE,
)
async def set_visibility(req: ApiRequest) -> Response:
    """Make the room private (its caller becomes a maintainer) or open again (its members
    are kept for when it is made private again)."""
    body = await req.body(RoomIn)
    await service.set_visibility(
        req.hub.db,
        req.hub.rooms.private_rooms(),
        req.path("room_id"),
        body.visibility,
        maintainer=req.principal.id,
    )
    return await _room(req)


@api.route(
    "GET",
    "/rooms/{room_id:room}/members",
    response=MembersOut,
    errors=(400,),
    room=RoomAction.MANAGE,
)
async def list_members(req: ApiRequest) -> Response:
    """The room's members, users and groups, with their roles."""
    rows = await service.list_members(req.hub.db, req.path("room_id"))
    return json_response(MembersOut(items=[MemberOut.of(row) for row in rows]))


@api.route(
    "PUT",
    "/rooms/{room_id:room}/members/{kind}/{subject}",
    status=201,
    body=MemberIn,
    response=MemberOut,
    errors=(400,),
    room=RoomAction.MANAGE,
)
async def put_member(req: ApiRequest) -> Response:
    """Add a member (``kind``: ``user``, by id; ``group``, by name) or change its role
    (201 new, 200 changed)."""
    body = await req.body(MemberIn)
    room_id, kind = req.path("room_id"), _kind(req)
    created = await service.put_member(
        req.hub.db,
        req.hub.rooms.private_rooms(),
        room_id,
        kind,
        req.path("subject"),
        RoomRole(body.role),
    )
    subject = service.member_subject(kind, req.path("subject"))
    rows = await service.list_members(req.hub.db, room_id)
    row = next(row for row in rows if (row.kind, row.subject) == (kind, subject))
    return json_response(MemberOut.of(row), 201 if created else 200)


@api.route(
    "DELETE",
    "/rooms/{room_id:room}/members/{kind}/{subject}",
    status=204,
    errors=(400,),
    room=RoomAction.MANAGE,
)
async def remove_member(req: ApiRequest) -> Response:
    """Remove a member; its sockets stop receiving the room's events."""
    await service.remove_member(
        req.hub.db,
        req.hub.rooms.private_rooms(),
        req.path("room_id"),
        _kind(req),
        req.path("subject"),
    )
    return Response(status_code=204)


def _kind(req: ApiRequest) -> MemberKind:
    value = req.path("kind")
    try:
        return MemberKind(value)
    except ValueError:
        raise ValidationFailed(
            "A member is a 'user' or a 'group'.",
            errors=[{"loc": ["path", "kind"], "msg": "Input should be 'user' or 'group'"}],
        ) from None
