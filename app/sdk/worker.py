"""``Worker``: serve Extension classes as jobs of a Taskhub, from sync or async code."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, overload

from taskhub.sdk.engine import WorkerConfig, WorkerEngine
from taskhub.sdk.extension import GLOBAL_ROOM, Extension, JobSpec
from taskhub.sdk.http import check_url
from taskhub.sdk.provider import Provider, ProviderSpec

log = logging.getLogger("taskhub.sdk")
E = type[Extension]


class Worker:
    """Registers Extension classes as jobs and runs their tasks.

    Blocking::

        worker = Worker("http://127.0.0.1:8000", token, [Rotate], room="lab")
        worker.run_forever()        # SIGINT/SIGTERM: drain, leave, return

    From a script, serving in a background thread: ``with worker: ...``.
    In asyncio: ``await worker.serve()`` or ``async with worker: ...``.

    Stopping (``stop()``, a signal, or cancelling ``serve()``): no new claims, in-flight
    runs finish up to ``drain_timeout``, then the worker reports what still runs failed
    (retried while attempts are left) and leaves the hub. A hard stop (``drain=False``, a
    second signal or cancel) skips the drain and is done within a few seconds.

    ``push`` (with ``sockets``): slots left idle are granted to the hub, which then sends
    tasks over the Socket.IO link as they are submitted, already started (docs/protocol.md,
    "Task push"); off, the worker only claims. ``socket_updates`` (with ``sockets``): run
    ends are reported over the link (``task_update``) rather than by ``PATCH``, whenever
    the hub offers it (docs/protocol.md, "Task updates over Socket.IO").

    ``server_timeout`` is the hub's ``TASKHUB_WORKER_TIMEOUT_SECONDS``; the heartbeat
    interval (default a quarter of it) may be at most a third of it.
    """

    def __init__(
        self,
        url: str,
        token: str,
        extensions: Iterable[E] = (),
        *,
        room: str = GLOBAL_ROOM,
        concurrency: int = 1,
        server_timeout: float = 60.0,
        heartbeat_interval: float | None = None,
        poll_interval: float = 2.0,
        drain_timeout: float = 30.0,
        startup_timeout: float = 30.0,
        sockets: bool = True,
        push: bool = True,
        socket_updates: bool = True,
        socketio_path: str = "socket.io",
        http_timeout: float = 10.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if server_timeout <= 0 or poll_interval <= 0 or drain_timeout < 0:
            raise ValueError("server_timeout and poll_interval must be > 0, drain_timeout >= 0")
        interval = server_timeout / 4 if heartbeat_interval is None else heartbeat_interval
        if not 0 < interval <= server_timeout / 3:
            raise ValueError(
                f"heartbeat_interval ({interval}s) must be > 0 and at most a third of the "
                f"hub's worker timeout ({server_timeout}s), or the hub may drop a live worker"
            )
        self.room = room
        self.config = WorkerConfig(
            url=check_url(url),
            token=token,
            concurrency=concurrency,
            heartbeat_interval=interval,
            poll_interval=poll_interval,
            drain_timeout=drain_timeout,
            startup_timeout=startup_timeout,
            sockets=sockets,
            socketio_path=socketio_path,
            http_timeout=http_timeout,
            server_timeout=server_timeout,
            push=push,
            socket_updates=socket_updates,
        )
        self._specs: dict[str, JobSpec] = {}
        self._providers: dict[str, ProviderSpec] = {}
        self._engine: WorkerEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_request: tuple[bool, float | None] | None = None  # a stop() before serving
        self._thread: threading.Thread | None = None
        self._settled = threading.Event()  # ready, or serving ended
        self._error: BaseException | None = None
        self._serving: asyncio.Task[None] | None = None
        for extension in extensions:
            self.register(extension)

    # -- registration ----------------------------------------------------------

    @overload
    def register(self, extension: E, *, room: str | None = None) -> E: ...
    @overload
    def register(self, extension: None = None, *, room: str | None = None) -> Callable[[E], E]: ...

    def register(
        self, extension: E | None = None, *, room: str | None = None
    ) -> E | Callable[[E], E]:
        """Serve ``extension`` in ``room`` (default: the worker's room). Usable as a
        decorator, with or without arguments."""

        def add(cls: E) -> E:
            if self._engine is not None:
                raise RuntimeError("register extensions before the worker starts serving")
            spec = JobSpec.of(cls, self.room if room is None else room)
            if spec.full_name in self._specs:
                raise ValueError(f"{spec.full_name} is registered twice")
            self._specs[spec.full_name] = spec
            return cls

        return add if extension is None else add(extension)

    def provide(
        self,
        provider: type[Provider],
        *,
        name: str | None = None,
        handler: Any = None,
        room: str | None = None,
    ) -> ProviderSpec:
        """Serve reads of ``provider`` as ``room:category:name`` (``name`` default: the
        class name; ``room``: the worker's), each read given ``handler``. Needs the
        Socket.IO link (``sockets``): the hub sends reads over it."""
        if self._engine is not None:
            raise RuntimeError("add providers before the worker starts serving")
        if not self.config.sockets:
            raise ValueError("a provider's reads come over Socket.IO: serve it with sockets=True")
        spec = ProviderSpec(
            provider, name or provider.__name__, self.room if room is None else room, handler
        )
        if spec.full_name in self._providers:
            raise ValueError(f"{spec.full_name} is provided twice")
        self._providers[spec.full_name] = spec
        return spec

    @property
    def providers(self) -> list[str]:
        """Full names of the providers served."""
        return list(self._providers)

    @property
    def jobs(self) -> list[str]:
        """Full names of the registered jobs."""
        return list(self._specs)

    @property
    def worker_id(self) -> str | None:
        """The hub's id of this worker while serving (a new one per serving session)."""
        return self._engine.worker_id if self._engine else None

    @property
    def listening(self) -> bool:
        """Socket.IO connected and all job rooms joined (else the worker only polls)."""
        return self._engine is not None and self._engine.listening

    @property
    def active_tasks(self) -> list[str]:
        """Ids of the tasks running now."""
        return self._engine.active_task_ids if self._engine else []

    # -- asyncio -----------------------------------------------------------------

    async def serve(self, *, handle_signals: bool | None = None) -> None:
        """Serve until ``stop()`` (or SIGINT/SIGTERM when ``handle_signals``; default: when
        running in the main thread). Returns after the drain; raises if the worker had to
        give up (e.g. ``AuthError``). Cancelled, it stops as ``stop()`` does (cancelled
        again: as ``stop(drain=False)``), then raises ``CancelledError``."""
        if handle_signals is None:
            handle_signals = threading.current_thread() is threading.main_thread()
        await self._serve(self._begin(), handle_signals)

    async def __aenter__(self) -> Worker:
        engine = self._begin()
        serving = asyncio.create_task(self._serve(engine, False), name="taskhub-worker")
        self._serving = serving
        ready = asyncio.create_task(engine.ready.wait())
        await asyncio.wait([serving, ready], return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if serving.done():
            serving.result()  # raises the start-up error
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        if self._serving is None:
            return
        try:
            await self._serving
        except Exception:
            if exc is None:
                raise
            log.exception("The worker failed while serving")

    # -- blocking ------------------------------------------------------------------

    def run_forever(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM (in the main thread) or ``stop()``."""
        asyncio.run(self.serve())

    def start(self, timeout: float | None = None) -> Worker:
        """Serve from a background thread; returns once registered (raises start-up errors;
        after a ``TimeoutError`` the worker stops instead of going on in the background)."""
        engine = self._begin()
        self._thread = threading.Thread(
            target=self._thread_main, args=(engine,), name="taskhub-worker", daemon=True
        )
        self._thread.start()
        if not self._settled.wait(timeout):
            self.stop(drain=False)
            raise TimeoutError(f"the worker did not start within {timeout}s")
        if self._error is not None:
            raise self._error
        return self

    def close(self, timeout: float | None = None, *, drain: bool = True) -> None:
        """Stop the background worker (draining by default) and wait for it to leave; with
        a ``timeout``, the worker cuts its drain short so as to have left by then."""
        self.stop(drain=drain, timeout=timeout)
        self.wait(timeout)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the background worker has stopped; raise what stopped it, if any."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the worker did not stop within {timeout}s")
        if self._error is not None:
            raise self._error

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except Exception:
            if exc is None:
                raise
            log.exception("The worker failed while serving")

    # -- from any thread ------------------------------------------------------------

    def stop(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Ask the worker to stop: no new claims, in-flight runs finish (up to
        ``drain_timeout``) unless ``drain=False``, then it leaves the hub. With a
        ``timeout``, it cuts the drain short so as to be done within about that many
        seconds. Thread-safe."""
        engine, loop = self._engine, self._loop
        if engine is None or loop is None:
            if self._stop_request is not None:
                drain = drain and self._stop_request[0]
                timeout = _sooner(timeout, self._stop_request[1])
            self._stop_request = (drain, timeout)
            return
        with contextlib.suppress(RuntimeError):  # the loop has finished already
            loop.call_soon_threadsafe(lambda: engine.request_stop(drain=drain, within=timeout))

    # -- internals --------------------------------------------------------------------

    def _begin(self) -> WorkerEngine:
        if self._engine is not None:
            raise RuntimeError("a Worker serves once; create a new Worker to serve again")
        if not self._specs and not self._providers:
            raise ValueError("register at least one Extension (or Provider) before serving")
        self._engine = WorkerEngine(
            self.config,
            list(self._specs.values()),
            providers=list(self._providers.values()),
            on_ready=self._settled.set,
        )
        return self._engine

    async def _serve(self, engine: WorkerEngine, handle_signals: bool) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        if self._stop_request is not None:
            drain, within = self._stop_request
            engine.request_stop(drain=drain, within=within)
        installed = self._install_signals(loop, engine) if handle_signals else []
        try:
            await engine.run()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _thread_main(self, engine: WorkerEngine) -> None:
        try:
            asyncio.run(self._serve(engine, False))
        except BaseException as exc:
            self._error = exc
        finally:
            self._settled.set()

    @staticmethod
    def _install_signals(
        loop: asyncio.AbstractEventLoop, engine: WorkerEngine
    ) -> list[signal.Signals]:
        received: list[signal.Signals] = []

        def on_signal(sig: signal.Signals) -> None:
            if received:
                log.warning("%s again: stopping now", sig.name)
                engine.request_stop(drain=False)
                return
            received.append(sig)
            log.info("%s: draining (send it again to stop without draining)", sig.name)
            engine.request_stop()

        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal, sig)
                installed.append(sig)
        return installed


def _sooner(a: float | None, b: float | None) -> float | None:
    """The shorter of two optional timeouts."""
    return b if a is None else a if b is None else min(a, b)
