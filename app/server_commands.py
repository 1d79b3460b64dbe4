"""The hub's commands: serve, migrate, users (create, list, update), tokens (create,
revoke), rooms (show, private, open, members, add, remove). They need the server extra;
``taskhub.cli`` adds them to the command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from asyncpg import PostgresError
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError

from taskhub.rules.authorisation import MemberKind, RoomRole
from taskhub.rules.errors import DomainError, NotFound
from taskhub.services import rooms, users
from taskhub.settings import Settings, setting_errors
from taskhub.store import migrations
from taskhub.store.database import Database, DatabaseUnavailable
from taskhub.store.deployment import database_file, is_embedded


def _run_with_db(settings: Settings, work: Callable[[Database], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        db = Database(settings)
        try:
            return await work(db)
        finally:
            await db.dispose()

    return asyncio.run(main())


def _check_sqlite_directory(settings: Settings) -> None:
    """Refuse an SQLite file in a directory that does not exist before the driver tries it
    (its worker thread would outlive the failed attempt and print a traceback at exit)."""
    path = database_file(settings.database_url)
    if path is not None and not path.parent.is_dir():
        raise OSError(f"unable to open database file (no directory {str(path.parent)!r})")


def _ready_schema(settings: Settings) -> None:
    """The embedded SQLite default migrates itself; PostgreSQL must already be at this
    code's revision (``SchemaOutdated`` otherwise: migrating is the operator's step)."""
    _check_sqlite_directory(settings)
    if is_embedded(settings.database_url):
        migrations.upgrade(settings.database_url)
    else:
        _run_with_db(settings, migrations.check_schema_current)


def cmd_migrate(settings: Settings, _args: argparse.Namespace) -> int:
    _check_sqlite_directory(settings)
    migrations.upgrade(settings.database_url)
    print(f"Database is at revision {migrations.head_revision()}.")
    return 0


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from taskhub import serving

    settings = settings.model_copy(
        update={"host": args.host, "port": args.port, "workers": args.workers or settings.workers}
    )
    problem = serving.workers_problem(settings) or serving.listen_problem(
        settings.host, settings.port
    )
    if problem is not None:
        return _refuse(problem)
    problem = _internal_jobs_problem(settings)
    if problem is not None:
        return _refuse(problem)
    _check_sqlite_directory(settings)
    problem = serving.serve_lock_problem(settings)
    if problem is not None:
        return _refuse(problem)
    _ready_schema(settings)
    if settings.redis_url:
        problem = _redis_problem(settings.redis_url)
        if problem is not None:
            return _refuse(f"cannot reach Redis at {_safe_url(settings.redis_url)}: {problem}")
    new_token = _run_with_db(settings, _bootstrap_admin(settings))
    print(f"Taskhub listening on http://{settings.host}:{settings.port}/", flush=True)
    print(f"  database: {_safe_url(settings.database_url)}", flush=True)
    if settings.workers > 1:
        print(f"  workers: {settings.workers}", flush=True)
    if new_token:
        print(f"  admin token (shown once): {new_token}", flush=True)
    return serving.serve(settings)


def _internal_jobs_problem(settings: Settings) -> str | None:
    """Why the ``@internal`` job modules cannot be loaded (before anything is created)."""
    from taskhub.dispatch.registry import BUILT_IN_MODULES, InternalRegistry, JobModulesUnusable

    try:
        InternalRegistry.from_modules([*BUILT_IN_MODULES, *settings.internal_job_modules])
    except JobModulesUnusable as exc:
        return f"TASKHUB_INTERNAL_JOB_MODULES: cannot load {exc}"
    return None


def _redis_problem(url: str) -> str | None:
    """Why Redis at ``url`` does not answer a PING, or None when it does."""
    import redis

    try:
        with redis.Redis.from_url(url, socket_timeout=3, socket_connect_timeout=3) as client:
            client.ping()
    except (redis.RedisError, OSError, ValueError) as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _bootstrap_admin(settings: Settings) -> Callable[[Database], Awaitable[str | None]]:
    """On the very first start (no users yet, no TASKHUB_ADMIN_TOKEN) create ``admin``."""

    async def work(db: Database) -> str | None:
        if settings.admin_token:
            await users.ensure_admin_token(db, settings.admin_token)
            return None
        if await users.count_users(db):
            return None
        _user_id, token = await users.create_user(db, "admin", superuser=True)
        return token

    return work


def cmd_users_create(settings: Settings, args: argparse.Namespace) -> int:
    _ready_schema(settings)
    _user_id, token = _run_with_db(
        settings, lambda db: users.create_user(db, args.name, superuser=args.superuser)
    )
    kind = "superuser" if args.superuser else "user"
    print(f"Created {kind} {args.name!r}. Token:")
    print(token)
    return 0


def cmd_users_list(settings: Settings, _args: argparse.Namespace) -> int:
    _ready_schema(settings)
    rows = [("NAME", "SUPERUSER", "TOKENS", "CREATED")]
    for user in _run_with_db(settings, users.list_users):
        created = user.created_at.isoformat(timespec="seconds")
        rows.append((user.name, "yes" if user.is_superuser else "no", str(user.tokens), created))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]))
    return 0


def cmd_users_update(settings: Settings, args: argparse.Namespace) -> int:
    """Grant or take away superuser rights; the user's tokens carry the change within
    ``TASKHUB_AUTH_CACHE_SECONDS``."""
    _ready_schema(settings)
    left = _run_with_db(settings, lambda db: users.set_superuser(db, args.name, args.superuser))
    print(f"{args.name!r} is {'now' if args.superuser else 'no longer'} a superuser.")
    if not left:
        print(
            "taskhub: no superuser is left; `taskhub users update NAME --superuser` or "
            "TASKHUB_ADMIN_TOKEN at the next start makes one.",
            file=sys.stderr,
        )
    return 0


def cmd_tokens_create(settings: Settings, args: argparse.Namespace) -> int:
    _ready_schema(settings)
    token = _run_with_db(settings, lambda db: users.create_token(db, args.name))
    print(f"New token for {args.name!r}:")
    print(token)
    return 0


def cmd_tokens_revoke(settings: Settings, args: argparse.Namespace) -> int:
    """Revoke one token (``-``: read it from stdin, out of the shell's history) or, with
    ``--user``, all of a user's. HTTP requests and sockets carrying it are refused within
    ``TASKHUB_AUTH_CACHE_SECONDS``."""
    _ready_schema(settings)
    if args.user is not None:
        count = _run_with_db(settings, lambda db: users.revoke_tokens_of(db, args.user))
        print(f"Revoked {count} token{'' if count == 1 else 's'} of {args.user!r}.")
        return 0
    token = sys.stdin.readline().strip() if args.token == "-" else args.token
    if not _run_with_db(settings, lambda db: users.revoke_token(db, token)):
        print("taskhub: no such token", file=sys.stderr)
        return 1
    print("Revoked the token.")
    return 0


def _rooms(db: Database) -> rooms.PrivateRooms:
    """This process's view of the private rooms (nothing to tell: the hub's processes read
    the change within ``TASKHUB_AUTH_CACHE_SECONDS``)."""
    return rooms.PrivateRooms(db, 0)


def cmd_rooms_show(settings: Settings, args: argparse.Namespace) -> int:
    _ready_schema(settings)
    visibility = _run_with_db(settings, lambda db: rooms.visibility(db, args.room))
    print(f"{args.room}: {visibility}")
    return cmd_rooms_members(settings, args)


def cmd_rooms_members(settings: Settings, args: argparse.Namespace) -> int:
    _ready_schema(settings)
    members = _run_with_db(settings, lambda db: rooms.list_members(db, args.room))
    rows = [("KIND", "MEMBER", "ROLE", "ID")]
    for member in members:
        shown = member.name if member.name is not None else member.subject
        rows.append((member.kind.value, shown, member.role.value, member.subject))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]))
    return 0


def cmd_rooms_private(settings: Settings, args: argparse.Namespace) -> int:
    """Make a room private; ``--maintainer NAME`` becomes its first maintainer."""
    _ready_schema(settings)

    async def work(db: Database) -> None:
        maintainer = (
            None if args.maintainer is None else await rooms.user_id_named(db, args.maintainer)
        )
        await rooms.set_visibility(db, _rooms(db), args.room, "private", maintainer=maintainer)

    _run_with_db(settings, work)
    print(f"{args.room!r} is private: only its members (and superusers) reach it.")
    return 0


def cmd_rooms_open(settings: Settings, args: argparse.Namespace) -> int:
    _ready_schema(settings)
    _run_with_db(
        settings,
        lambda db: rooms.set_visibility(db, _rooms(db), args.room, "open", maintainer=None),
    )
    print(f"{args.room!r} is open to every signed-in user (its members are kept).")
    return 0


async def _member(db: Database, args: argparse.Namespace) -> tuple[MemberKind, str]:
    if args.group is not None:
        return MemberKind.GROUP, args.group
    return MemberKind.USER, str(await rooms.user_id_named(db, args.user))


def cmd_rooms_add(settings: Settings, args: argparse.Namespace) -> int:
    """Add a member (a user by name, a group by its name in the identity claims) or change
    its role."""
    _ready_schema(settings)

    async def work(db: Database) -> bool:
        kind, subject = await _member(db, args)
        return await rooms.put_member(db, _rooms(db), args.room, kind, subject, RoomRole(args.role))

    created = _run_with_db(settings, work)
    who = args.user if args.group is None else f"group {args.group}"
    print(f"{who!r} {'is now' if created else 'stays'} a member of {args.room!r} as {args.role}.")
    return 0


def cmd_rooms_remove(settings: Settings, args: argparse.Namespace) -> int:
    _ready_schema(settings)

    who = args.user if args.group is None else f"group {args.group}"

    async def work(db: Database) -> None:
        kind, subject = await _member(db, args)
        try:
            await rooms.remove_member(db, _rooms(db), args.room, kind, subject)
        except NotFound:
            raise NotFound(f"{who!r} is not a member of {args.room!r}.") from None

    _run_with_db(settings, work)
    print(f"{who!r} is no longer a member of {args.room!r}.")
    return 0


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def _port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be 1 to 65535, not {number}")
    return number


def _user_name(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("a user name must not be empty or only spaces")
    if value != value.strip():
        raise argparse.ArgumentTypeError(f"{value!r}: no spaces around a user name")
    return value


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], summaries: Mapping[str, str]
) -> None:
    """The hub's subcommands, each run through :func:`run` (which reads the settings).
    ``summaries``: each command's one-line help, by name (``taskhub.cli`` owns them: it shows
    them without the server extra too)."""
    defaults = Settings.model_fields

    def command(name: str, func: Callable[[Settings, argparse.Namespace], int], **kw: Any) -> Any:
        parser = commands.add_parser(name, **kw)
        parser.set_defaults(func=run, server_func=func)
        return parser

    serve = command("serve", cmd_serve, help=summaries["serve"])
    serve.add_argument(
        "--host",
        default=None,
        help=f"address to listen on (default: TASKHUB_HOST, else {defaults['host'].default})",
    )
    serve.add_argument(
        "--port",
        type=_port,
        default=None,
        help=f"port to listen on, 1 to 65535 (default: TASKHUB_PORT, else "
        f"{defaults['port'].default})",
    )
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="worker processes on one socket, PostgreSQL and Redis only (default: "
        f"TASKHUB_WORKERS, else {defaults['workers'].default})",
    )

    command("migrate", cmd_migrate, help=summaries["migrate"])

    users_cmd = commands.add_parser("users", help=summaries["users"])
    users_sub = users_cmd.add_subparsers(dest="action", required=True)
    create = users_sub.add_parser("create", help="create a user and print its first token")
    create.add_argument("name", type=_user_name)
    create.add_argument("--superuser", action="store_true")
    create.set_defaults(func=run, server_func=cmd_users_create)
    listing = users_sub.add_parser("list", help="list users with their token counts")
    listing.set_defaults(func=run, server_func=cmd_users_list)
    update = users_sub.add_parser("update", help="grant or take away superuser rights")
    update.add_argument("name")
    update.add_argument(
        "--superuser",
        action=argparse.BooleanOptionalAction,
        required=True,
        help="--superuser grants, --no-superuser takes away",
    )
    update.set_defaults(func=run, server_func=cmd_users_update)

    tokens_cmd = commands.add_parser("tokens", help=summaries["tokens"])
    tokens_sub = tokens_cmd.add_subparsers(dest="action", required=True)
    token_create = tokens_sub.add_parser("create", help="issue another token for a user")
    token_create.add_argument("name")
    token_create.set_defaults(func=run, server_func=cmd_tokens_create)
    token_revoke = tokens_sub.add_parser("revoke", help="revoke a token, or all of a user's")
    which = token_revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("token", nargs="?", help="the token, or - to read it from stdin")
    which.add_argument("--user", metavar="NAME", help="revoke every token of this user")
    token_revoke.set_defaults(func=run, server_func=cmd_tokens_revoke)

    _add_rooms_commands(commands, summaries["rooms"])


def _add_rooms_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], summary: str
) -> None:
    rooms_cmd = commands.add_parser("rooms", help=summary)
    rooms_sub = rooms_cmd.add_subparsers(dest="action", required=True)
    actions = {
        "show": (cmd_rooms_show, "a room's visibility and members"),
        "private": (cmd_rooms_private, "keep a room to its members"),
        "open": (cmd_rooms_open, "open a room to every signed-in user again"),
        "members": (cmd_rooms_members, "list a room's members and roles"),
        "add": (cmd_rooms_add, "add a member to a room, or change its role"),
        "remove": (cmd_rooms_remove, "remove a member from a room"),
    }
    for name, (func, help_text) in actions.items():
        parser = rooms_sub.add_parser(name, help=help_text)
        parser.add_argument("room")
        parser.set_defaults(func=run, server_func=func)
        if name == "private":
            parser.add_argument("--maintainer", metavar="USER", help="its first maintainer")
        if name in ("add", "remove"):
            who = parser.add_mutually_exclusive_group(required=True)
            who.add_argument("--user", metavar="NAME", help="a user, by name")
            who.add_argument("--group", metavar="NAME", help="a group of the identity claims")
        if name == "add":
            parser.add_argument(
                "--role", choices=[role.value for role in RoomRole], default="member"
            )


def run(args: argparse.Namespace) -> int:
    """Read the settings and run one of the hub's commands; a problem of the machine, the
    settings or the database is one line on stderr."""
    try:
        settings = Settings()
    except ValidationError as exc:
        return _refuse(f"invalid settings: {setting_errors(exc)}")
    if args.command == "serve":
        args.host = settings.host if args.host is None else args.host
        args.port = settings.port if args.port is None else args.port
    try:
        return int(args.server_func(settings, args))
    except DomainError as exc:
        print(f"taskhub: {exc.detail}", file=sys.stderr)
        return 1
    except migrations.DatabaseUnfit as exc:
        return _refuse(str(exc))
    except (OSError, DBAPIError, PostgresError, DatabaseUnavailable) as exc:  # refused, no
        # such database or role … (``DatabaseUnavailable`` says what the driver said: its cause)
        if isinstance(exc, DatabaseUnavailable) and exc.__cause__ is not None:
            exc = exc.__cause__
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return _refuse(f"cannot use the database {_safe_url(settings.database_url)}: {reason}")


def _refuse(message: str) -> int:
    """A problem of the machine or its settings: one line on stderr, exit status 2."""
    print(f"taskhub: {message}", file=sys.stderr)
    return 2
