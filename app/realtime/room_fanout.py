"""A room event put on each recipient's queue in one loop, not sent by a task apiece.

python-socketio's ``AsyncManager.emit`` encodes an event once for a room, then sends it to
each participant in a task of its own (``server._send_eio_packet``: find the session,
check its pings, ``await queue.put``) and waits for them all: a room of a thousand
sockets costs a thousand tasks per event. ``RoomFanout.emit`` puts the one Engine.IO
packet straight on each session's queue (``put_nowait``) when the session is open, its
pings are on time and its queue is of ``direct_queue``, the class the server makes
sessions' queues of (which bounds them: its ``put_nowait`` drops and resyncs). Any other
recipient (a session gone, closed or whose pings timed out, which the library's path
warns of or closes; a queue of another class) goes the library's way, and so does any
other emit (an acknowledgement callback, binary data, no ``direct_queue``).

Both of Taskhub's managers use it: ``RoomFanoutManager`` on a single replica, and
``TaskhubRedisManager``, whose delivery in this process (of its own events and those of
other replicas) is ``AsyncPubSubManager._handle_emit``'s ``super().emit``: ``RoomFanout``
comes between ``AsyncPubSubManager`` and ``AsyncManager`` in its MRO.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import socketio
from engineio import packet as eio_packet
from socketio import packet as sio_packet


class RoomFanout(socketio.AsyncManager):
    """``AsyncManager`` whose emits without callback reach sessions with a ``direct_queue``
    in one loop (see the module). ``direct_queue`` is set once the server's queue class
    is known (``create_app``); until then every emit is the library's."""

    direct_queue: type[Any] | None = None

    async def emit(
        self,
        event: str,
        data: Any,
        namespace: str,
        room: Any = None,
        skip_sid: Any = None,
        callback: Any = None,
        to: Any = None,
        **kwargs: Any,
    ) -> None:
        room = to or room
        queue_class = self.direct_queue
        if callback is not None or queue_class is None or namespace not in self.rooms:
            await super().emit(
                event, data, namespace, room=room, skip_sid=skip_sid, callback=callback
            )
            return
        args = list(data) if isinstance(data, tuple) else [] if data is None else [data]
        encoded = self.server.packet_class(
            sio_packet.EVENT, namespace=namespace, data=[event, *args]
        ).encode()
        if not isinstance(encoded, str):  # binary: a header and attachments
            await super().emit(event, data, namespace, room=room, skip_sid=skip_sid)
            return
        packet = eio_packet.Packet(eio_packet.MESSAGE, encoded)
        skipped = skip_sid if isinstance(skip_sid, list) else [skip_sid]
        others = self._put_directly(packet, namespace, room, skipped, queue_class)
        if others:
            send = self.server._send_eio_packet
            await asyncio.wait([asyncio.create_task(send(eio_sid, packet)) for eio_sid in others])

    def _put_directly(
        self, packet: Any, namespace: str, room: Any, skipped: list[Any], queue_class: type[Any]
    ) -> list[str]:
        """Put ``packet`` on the queue of each participant that can take it now; the
        Engine.IO sids of the others, for the library's path."""
        eio = self.server.eio
        sessions = eio.sockets
        now = time.time()
        ping_timeout = eio.ping_timeout
        logged = eio.logger.isEnabledFor(logging.INFO)
        others = []
        for sid, eio_sid in self.get_participants(namespace, room):
            if sid in skipped:
                continue
            session = sessions.get(eio_sid)
            if (
                session is None
                or session.closed
                or not isinstance(session.queue, queue_class)
                or (session.last_ping and now - session.last_ping > ping_timeout)
            ):
                others.append(eio_sid)
                continue
            session.queue.put_nowait(packet)
            if logged:  # (as python-engineio's send logs each packet)
                eio.logger.info("%s: Sending packet MESSAGE data %s", eio_sid, packet.data)
        return others


class RoomFanoutManager(RoomFanout):
    """The manager of a single replica (all its rooms in this process)."""
