"""A host application with Taskhub inside it (docs/embedding.md): FastAPI + python-socketio,
its own JWT sign-in and rooms with an edit lock, one Socket.IO server and one port for its
browsers, Taskhub's SDK workers and zndraw-joblib's ``JobManager``.

Run it with ``uvicorn examples.host_app.main:asgi_app`` (settings: examples/host_app/README.md)."""
