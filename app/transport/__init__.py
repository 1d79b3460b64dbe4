"""Transport: HTTP routes and Socket.IO handlers. Thin: parse, authorise, call a service,
publish its events after commit, serialise."""
