"""Socket.IO room names: one per kind of audience, never shared between kinds."""

from uuid import UUID

from taskhub.rules.rooms import job_room, provider_room, room_room, worker_room


def test_each_kind_of_room_has_its_own_name_for_the_same_key() -> None:
    """A Taskhub room, a job, a worker and a provider named alike still reach different
    sockets (a room ``x`` must not get the ``task_available`` of a job ``x``)."""
    names = {room_room("x"), job_room("x"), worker_room("x"), provider_room("x")}
    assert len(names) == 4


def test_ids_are_named_by_their_text() -> None:
    """A worker or provider id given as a UUID or as its text is the same room (events
    carry text, the socket handlers hold UUIDs)."""
    worker = UUID("00000000-0000-0000-0000-000000000001")
    assert worker_room(worker) == worker_room(str(worker))
    assert provider_room(worker) == provider_room(str(worker))
    assert job_room("lab:modifiers:X") != job_room("lab:modifiers:Y")
