"""``taskhub worker MODULE:CLASS …``: serve Extension (and Provider) classes from the
command line."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from taskhub.sdk.errors import TaskhubError
from taskhub.sdk.extension import GLOBAL_ROOM, Extension, job_identity
from taskhub.sdk.provider import Provider

DEFAULT_URL = "http://127.0.0.1:8000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "extensions",
        nargs="+",
        metavar="MODULE:CLASS",
        help="Extensions to serve as jobs, Providers to serve as providers (named by class)",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("TASKHUB_URL", DEFAULT_URL),
        help=f"hub URL (env TASKHUB_URL, default {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token", default=os.environ.get("TASKHUB_TOKEN"), help="API token (env TASKHUB_TOKEN)"
    )
    parser.add_argument(
        "--room", default=GLOBAL_ROOM, help="room to register the jobs in (default @global)"
    )
    parser.add_argument("--concurrency", type=int, default=1, help="tasks run at once")
    parser.add_argument(
        "--server-timeout",
        type=float,
        default=60.0,
        help="the hub's TASKHUB_WORKER_TIMEOUT_SECONDS (default 60)",
    )
    parser.add_argument(
        "--heartbeat-interval", type=float, default=None, help="default: server timeout / 4"
    )
    parser.add_argument("--poll-interval", type=float, default=2.0, help="claim backstop (s)")
    parser.add_argument(
        "--drain-timeout", type=float, default=30.0, help="on SIGINT/SIGTERM, wait this long"
    )
    parser.add_argument("--no-sockets", action="store_true", help="poll only, no Socket.IO")
    parser.add_argument(
        "--no-push", action="store_true", help="claim only: no tasks pushed over Socket.IO"
    )
    parser.add_argument(
        "--no-socket-updates",
        action="store_true",
        help="report run ends by HTTP PATCH only, not over Socket.IO",
    )
    parser.add_argument(
        "--app-dir", default=".", help="directory put on sys.path first (default: cwd)"
    )
    parser.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=["debug", "info", "warning", "error", "critical"],
    )
    parser.add_argument(
        "--capture-log-level",
        default=None,
        type=str.lower,
        choices=["debug", "info", "warning", "error", "critical"],
        help="least level of a run's logging records sent to its task's log "
        "(env TASKHUB_LOG_CAPTURE_LEVEL, default info)",
    )


def load_class(target: str) -> type[Extension] | type[Provider]:
    """Import ``package.module:ClassName``: an Extension or a Provider class."""
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr, None) if module_name else None
    if isinstance(cls, type) and issubclass(cls, Provider):
        if not isinstance(getattr(cls, "category", None), str):
            raise TypeError(f"{target!r}: a Provider needs a category")
        return cls
    return load_extension(target)


def load_extension(target: str) -> type[Extension]:
    """Import ``package.module:ClassName``."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{target!r}: expected MODULE:CLASS, e.g. examples.rotate:Rotate")
    module = importlib.import_module(module_name)
    try:
        extension = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{target!r}: module {module_name} has no attribute {attr!r}") from None
    job_identity(extension)  # TypeError when it is not a usable Extension
    return extension


def run_worker(args: argparse.Namespace) -> int:
    """Entry point of ``taskhub worker``; returns the exit code."""
    from taskhub.sdk.worker import Worker  # only here: the hub's own commands never need it

    level = args.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level != "DEBUG":  # one line per request is noise at INFO
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.capture_log_level is not None:
        from taskhub.sdk.logs import set_capture_level

        set_capture_level(args.capture_log_level)
    if not args.token:
        print("taskhub worker: a token is required (--token or TASKHUB_TOKEN)", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.abspath(args.app_dir))
    try:
        classes = [load_class(target) for target in args.extensions]
        worker = Worker(
            args.url,
            args.token,
            [cls for cls in classes if issubclass(cls, Extension)],
            room=args.room,
            concurrency=args.concurrency,
            server_timeout=args.server_timeout,
            heartbeat_interval=args.heartbeat_interval,
            poll_interval=args.poll_interval,
            drain_timeout=args.drain_timeout,
            sockets=not args.no_sockets,
            push=not args.no_push,
            socket_updates=not args.no_socket_updates,
        )
        for cls in classes:
            if issubclass(cls, Provider):
                worker.provide(cls)
    except (ImportError, TypeError, ValueError) as exc:
        print(f"taskhub worker: {exc}", file=sys.stderr)
        return 2
    try:
        worker.run_forever()
    except TaskhubError as exc:
        print(f"taskhub worker: {exc}", file=sys.stderr)
        return 1
    return 0
