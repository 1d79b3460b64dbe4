"""``taskhub``, the command line.

``worker`` comes with the base install (the worker SDK); ``serve``, ``migrate``, ``users``,
``tokens`` and ``rooms`` are the hub's and need its dependencies (``pip install
'taskhub[server]'``): without them each says so in one line.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from taskhub import __version__
from taskhub.sdk.cli import add_arguments as add_worker_arguments
from taskhub.sdk.cli import run_worker

SERVER_EXTRA = "pip install 'taskhub[server]'"
SERVER_COMMANDS = {
    "serve": "run the hub (HTTP + Socket.IO)",
    "migrate": "upgrade the database schema to this version",
    "users": "manage users",
    "tokens": "manage tokens",
    "rooms": "manage private rooms and their members",
}
DESCRIPTION = (
    "Taskhub: serve the hub, migrate its database, manage users, tokens and private rooms, "
    "and serve "
    "Extension classes as a worker. Settings come from TASKHUB_* environment variables."
)


def server_commands() -> ModuleType | str:
    """The hub's commands, or the name of the missing dependency that keeps them out."""
    try:
        from taskhub import server_commands as module
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "taskhub":
            raise
        return exc.name
    return module


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="taskhub", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"taskhub {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    hub = server_commands()
    if isinstance(hub, str):
        for name, summary in SERVER_COMMANDS.items():
            stand_in = commands.add_parser(
                name, help=f"{summary} (needs the server extra)", add_help=False
            )
            stand_in.add_argument("rest", nargs=argparse.REMAINDER)
            stand_in.set_defaults(func=lambda args, missing=hub: _needs_server(args, missing))
    else:
        hub.add_commands(commands, SERVER_COMMANDS)
    worker = commands.add_parser("worker", help="serve Extension classes as a worker")
    add_worker_arguments(worker)
    worker.set_defaults(func=run_worker)
    return parser


def _needs_server(args: argparse.Namespace, missing: str) -> int:
    print(
        f"taskhub {args.command}: the hub is not installed (no module {missing!r}); "
        f"install it with: {SERVER_EXTRA}",
        file=sys.stderr,
    )
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
