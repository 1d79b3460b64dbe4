"""The host's own REST routes: sign-in, rooms and their edit lock, the page, health."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from examples.host_app.accounts import Accounts, HostUser
from examples.host_app.problems import HostProblem, room_locked, room_not_found
from examples.host_app.rooms import ROOM_ID_PATTERN, RoomRegistry

PAGE = Path(__file__).resolve().parent / "page.html"
RoomId = Annotated[str, PathParam(pattern=ROOM_ID_PATTERN)]


class Login(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    password: str | None = Field(default=None, max_length=256)


def signed_in(request: Request, authorization: Annotated[str | None, Header()] = None) -> HostUser:
    """The caller of a host route: a valid host JWT, else 401."""
    accounts: Accounts = request.app.state.accounts
    scheme, _, token = (authorization or "").partition(" ")
    user = accounts.verify(token.strip()) if scheme.lower() == "bearer" else None
    if user is None:
        raise HostProblem(401, "unauthorized", "Unauthorized", "Sign in: POST /auth/login.")
    return user


def rooms_of(request: Request) -> RoomRegistry:
    rooms: RoomRegistry = request.app.state.rooms
    return rooms


User = Annotated[HostUser, Depends(signed_in)]
Rooms = Annotated[RoomRegistry, Depends(rooms_of)]
router = APIRouter()


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(PAGE)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/auth/login")
async def login(body: Login, request: Request) -> dict[str, Any]:
    """A name buys a token; the superuser's name also needs its password."""
    accounts: Accounts = request.app.state.accounts
    user = accounts.sign_in(body.name, body.password)
    if user is None:
        raise HostProblem(401, "unauthorized", "Unauthorized", "Wrong name or password.")
    return {
        "access_token": accounts.issue(user),
        "token_type": "bearer",
        "user_id": str(user.id),
        "is_admin": user.is_admin,
    }


@router.get("/rooms/{room_id}")
async def show_room(room_id: RoomId, _user: User, rooms: Rooms) -> dict[str, Any]:
    room = await rooms.get(room_id)
    if room is None:
        raise room_not_found(room_id)
    return {"id": room.id, "locked": room.locked}


@router.post("/rooms/{room_id}", status_code=201)
async def create_room(room_id: RoomId, _user: User, rooms: Rooms) -> dict[str, Any]:
    if not await rooms.create(room_id):
        raise HostProblem(409, "room-exists", "Conflict", f"Room {room_id!r} exists already.")
    return {"id": room_id, "locked": False}


@router.post("/rooms/{room_id}/lock", status_code=201)
async def lock_room(room_id: RoomId, _user: User, rooms: Rooms) -> dict[str, Any]:
    """Lock the room for editing; the answer's ``lock_token`` is the one key to it."""
    room = await rooms.get(room_id)
    if room is None:
        raise room_not_found(room_id)
    token = await rooms.lock(room_id)
    if token is None:
        raise room_locked(room_id)
    return {"id": room_id, "locked": True, "lock_token": token}


@router.delete("/rooms/{room_id}/lock", status_code=204)
async def unlock_room(
    room_id: RoomId,
    _user: User,
    rooms: Rooms,
    lock_token: Annotated[str | None, Header()] = None,
) -> Response:
    if await rooms.get(room_id) is None:
        raise room_not_found(room_id)
    if lock_token is None or not await rooms.unlock(room_id, lock_token):
        raise room_locked(room_id)
    return Response(status_code=204)
