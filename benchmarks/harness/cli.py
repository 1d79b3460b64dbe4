"""The command line every scenario shares (``python -m benchmarks <scenario> --help``).

A scenario builds its parser with ``scenario_parser`` (its name and docstring, and the
common flags: ``--json-out``; for scenarios that start servers, ``--server-log-level`` and
``--pg-admin-url``) and hands its work to ``run_command``, which gives it target options
in a scratch directory of its own and runs it under ``run_main``: each result a JSON line
on stdout as soon as it is measured (and, with ``--json-out``, in that file), the tables
on stderr at the end, servers stopped on SIGINT, SIGTERM or SIGHUP, and an exit status
that says whether anything failed."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import resource
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

from benchmarks.harness.report import Results, log
from benchmarks.harness.targets import DEFAULT_PG_ADMIN_URL, TargetOptions, drop_templates

Work = Callable[[TargetOptions, Results], Awaitable[None]]


def scenario_parser(
    name: str, doc: str | None, *, servers: bool = True, server_log_level: str = "warning"
) -> argparse.ArgumentParser:
    """``python -m benchmarks <name>``'s parser (``name`` empty: the suite's), its help the
    scenario's docstring, with the common flags (those of the servers it starts only if it
    starts any)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}".rstrip(),
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json-out", type=Path, help="also write the JSON lines to this file")
    if servers:
        group = parser.add_argument_group("servers")
        group.add_argument(
            "--server-log-level",
            default=server_log_level,
            help=f"log level of the servers it starts (default {server_log_level})",
        )
        group.add_argument(
            "--pg-admin-url",
            default=DEFAULT_PG_ADMIN_URL,
            help="the PostgreSQL server its databases are made on (127.0.0.1 only)",
        )
    return parser


@asynccontextmanager
async def scratch_options(args: argparse.Namespace, name: str) -> AsyncIterator[TargetOptions]:
    """Target options in a temporary directory of the run's own, from the flags
    ``scenario_parser`` added (and ``--access-log``, where a scenario has it). Its hubs'
    databases are copies of a template migrated once per engine; the templates and the
    directory are removed after."""
    with tempfile.TemporaryDirectory(prefix=f"taskhub-{name}-") as workdir:
        access_log = bool(getattr(args, "access_log", False))
        options = TargetOptions(
            Path(workdir), args.server_log_level, access_log, args.pg_admin_url, templates={}
        )
        try:
            yield options
        finally:
            await drop_templates(options)


def run_command(
    args: argparse.Namespace, name: str, work: Work, render: Callable[[Results], str]
) -> int:
    """A scenario's body: ``work`` with target options in a scratch directory, under
    ``run_main``."""

    async def scratch(results: Results) -> None:
        async with scratch_options(args, name) as options:
            await work(options, results)

    return run_main(scratch, render, args.json_out)


def fail_fast_sniffio_import() -> None:
    """httpcore runs ``import sniffio`` on every request; without sniffio installed each attempt
    searches ``sys.path`` again, a quarter of this client's CPU. Make the import fail at once
    (the same outcome, for every target alike)."""
    if importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def raise_fd_limit(needed: int) -> int:
    """Raise this process's soft limit on open files to at least ``needed`` (capped by the
    hard limit); servers started afterwards inherit it. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def cancel_on_termination() -> None:
    """Turn SIGTERM and SIGHUP into cancellation, so that servers are stopped and the
    PostgreSQL database dropped on the way out (asyncio.run already does so for SIGINT)."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, task.cancel)


def run_main(
    work: Callable[[Results], Awaitable[None]],
    render: Callable[[Results], str],
    json_out: Path | None = None,
) -> int:
    """Run ``work`` (it appends its results, each already emitted), then write ``json_out``
    if asked and the tables on stderr, also after an interruption. Exit status: 130 if
    interrupted, 1 if any result has an error, else 0."""
    fail_fast_sniffio_import()
    results: Results = []

    async def guarded() -> None:
        cancel_on_termination()
        await work(results)

    code = 0
    try:
        asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: servers stopped")
        code = 130
    if json_out is not None:
        json_out.write_text("".join(json.dumps(result) + "\n" for result in results))
    log("\n" + render(results))
    return code or (1 if any(result.get("error") for result in results) else 0)


def csv_ints(text: str) -> list[int]:
    """``argparse`` type for a comma-separated list of positive integers."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1,4,16")
    return values


def csv_choices(text: str, allowed: Iterable[str], what: str) -> list[str]:
    """A comma-separated list of names, each one of ``allowed``."""
    allowed = list(allowed)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(names) - set(allowed))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {allowed}")
    return names


def choices(allowed: Iterable[str], what: str) -> Callable[[str], list[str]]:
    """``argparse`` type: ``csv_choices`` of ``allowed``."""
    names = tuple(allowed)

    def parse(text: str) -> list[str]:
        return csv_choices(text, names, what)

    parse.__name__ = what  # argparse names the type in its error messages
    return parse
