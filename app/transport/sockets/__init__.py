"""Socket.IO: authenticated connections, room joins, and worker presence."""
