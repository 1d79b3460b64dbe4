"""A private HAProxy in front of hub replicas, as production puts one.

``with Balancer([server.port for server in servers]) as balancer:`` starts ``haproxy`` on
a free port of 127.0.0.1 with its config (and admin socket) in a directory of its own:
requests go round-robin to replicas ``r0``, ``r1``, … that answer ``GET /readyz`` (checked
every 0.5 s); a response sets the cookie ``taskhub_replica`` naming its replica, and a
request that carries it goes there (stickiness: Engine.IO's polling transport needs every
request of a session on one replica; a websocket is one tunnel, kept for an hour).

- ``balancer.base_url`` (``http://127.0.0.1:<port>``) and ``balancer.url_on(host)``:
  browsers (Playwright) keep the cookie; aiohttp's cookie jar (Taskhub's SDK) drops
  cookies of an IP address, so give it ``url_on("localhost")``, as production gives it a
  host name; the test clients with websocket-only sockets need no cookie.
- ``balancer.pin(i)``: the ``Cookie`` header that sends a request to replica ``i``
  (``SocketProbe.connect(..., headers=...)``, ``httpx``'s ``headers=``), and
  ``pin_cookie(i)`` the same for Playwright's ``context.add_cookies``.
- ``balancer.servers()``: each replica's state as HAProxy sees it (``"UP"``, ``"DOWN"``…);
  ``start`` waits until all are ``UP``.

Stopped (SIGTERM, then SIGKILL) and its directory removed on exit. A missing ``haproxy``
binary is an error, never a skip. ``Balancer`` lives in ``benchmarks/harness/balancer.py``
(the chaos scenario's replicas sit behind it too).

``balanced_replicas(directory, count, env=...)`` is the whole production layout at once:
a fresh migrated PostgreSQL database, a ``PgBouncer`` in transaction mode in front of it,
``count`` ``taskhub serve`` processes on it through the bouncer (with
``TASKHUB_DATABASE_POOLER=transaction`` and the shared admin token; pass Redis in ``env``)
and a ``Balancer`` in front of them; it yields a ``BalancedReplicas``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.balancer import COOKIE, HAPROXY, Balancer, haproxy_binary
from tests.support.pgbouncer import PgBouncer
from tests.support.server import HubServer, new_admin_token, provisioned_database

__all__ = [
    "COOKIE",
    "HAPROXY",
    "BalancedReplicas",
    "Balancer",
    "balanced_replicas",
    "haproxy_binary",
]


@dataclass
class BalancedReplicas:
    """What ``balanced_replicas`` started."""

    replicas: list[HubServer]  # each also reachable straight at its own ``base_url``
    balancer: Balancer
    bouncer: PgBouncer
    direct_url: str  # the database itself, not through the bouncer (for test set-up)
    admin_token: str


@contextmanager
def balanced_replicas(
    directory: Path,
    count: int = 3,
    *,
    env: Mapping[str, str] | None = None,
    default_pool_size: int = 4,
) -> Iterator[BalancedReplicas]:
    """``count`` replicas (logs ``server-<i>.log`` in ``directory``) on a fresh database
    through PgBouncer in transaction mode, behind a sticky HAProxy; all stopped, the
    database dropped, after."""
    settings = {"TASKHUB_DATABASE_POOLER": "transaction", **(env or {})}
    with (
        PgBouncer(default_pool_size=default_pool_size) as bouncer,
        provisioned_database("postgres", directory) as url,
        ExitStack() as stack,
    ):
        admin_token = new_admin_token()
        replicas = [
            HubServer(
                bouncer.url(url),
                admin_token=admin_token,
                log_dir=directory,
                env=settings,
                log_name=f"server-{index}.log",
            )
            for index in range(count)
        ]
        for replica in replicas:
            stack.enter_context(replica)
        balancer = stack.enter_context(Balancer([replica.port for replica in replicas]))
        yield BalancedReplicas(replicas, balancer, bouncer, url, admin_token)
