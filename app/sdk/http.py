"""REST plumbing shared by the worker and the submit client: authentication, problem
documents mapped to exceptions, and retries of transient failures with backoff.

Retry rule: a connection that was never established is always retried; other transport
errors and 429/500/502/503/504 answers are retried only for requests that are safe to
repeat (``idempotent=True``). 401/403/404/409/422 are never retried, nor is a URL that can
never work (a client refuses one at once: ``check_url``). A request's first retry is
logged as a warning naming the URL; its final error names the URL too. ``retry_for``
bounds the whole request: each attempt's timeout is cut to what is left of it (unless the
caller sets ``http_timeout``, e.g. a long-poll that outlasts its retry budget).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from taskhub.sdk.errors import HubUnavailable, ProblemError, problem_error
from taskhub.sdk.transport import HubTransport

log = logging.getLogger("taskhub.sdk")

API_PREFIX = "/v1/joblib"
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
PERMANENT_SLUGS = frozenset({"internal-job-not-configured"})
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
NEVER_WORKS = (httpx.UnsupportedProtocol,)
RETRY_SECONDS = 30.0  # how long a request retries by default (read when a client is made)
MIN_ATTEMPT_SECONDS = 0.25  # the least time an attempt gets, however little of its budget is left


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with ±``jitter`` relative randomisation."""

    initial: float = 0.2
    maximum: float = 5.0
    factor: float = 2.0
    jitter: float = 0.2

    def delays(self) -> Iterator[float]:
        delay = self.initial
        while True:
            yield delay * random.uniform(1 - self.jitter, 1 + self.jitter)
            delay = min(delay * self.factor, self.maximum)


def check_url(url: str) -> str:
    """``url`` without its trailing ``/``; ``ValueError`` when it can never reach a hub (no
    ``http://``/``https://`` scheme, no host, not a URL)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"invalid hub URL {shown_url(url)!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(
            f"invalid hub URL {shown_url(url)!r}: expected http://host[:port] or https://host[:port]"
        )
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ValueError(f"invalid hub URL {shown_url(url)!r}: no such port {parsed.port}")
    return url.rstrip("/")


def shown_url(url: str) -> str:
    """``url`` as logs and errors show it: a password in it masked."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return url
    if not parsed.password:
        return url
    return str(parsed.copy_with(username=parsed.username, password="***"))


def raise_for_problem(response: httpx.Response) -> httpx.Response:
    """Return a successful response; raise the matching ``ProblemError`` otherwise."""
    if response.status_code < 400:
        return response
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"title": response.reason_phrase, "detail": response.text[:500]}
    raise problem_error(response.status_code, body)


def _is_transient_response(response: httpx.Response) -> bool:
    if response.status_code not in TRANSIENT_STATUSES:
        return False
    try:
        slug = str(response.json().get("type", "")).rsplit("/", 1)[-1]
    except (ValueError, AttributeError):
        return True
    return slug not in PERMANENT_SLUGS


def _describe(outcome: httpx.Response | Exception) -> str:
    if isinstance(outcome, httpx.Response):
        return f"HTTP {outcome.status_code}"
    return f"{type(outcome).__name__}: {outcome}" if str(outcome) else type(outcome).__name__


class _Attempts:
    """Book-keeping of one request's retries (shared by the sync and async clients)."""

    def __init__(self, what: str, retry_for: float, backoff: Backoff, idempotent: bool) -> None:
        self.what = what
        self.deadline = time.monotonic() + retry_for
        self.delays = backoff.delays()
        self.idempotent = idempotent
        self.failed = 0  # attempts that failed so far

    def timeout(self, default: float) -> float:
        """An attempt's timeout: ``default``, cut to what is left of the retry budget (so
        that ``retry_for`` bounds the whole request, not only the time spent retrying)."""
        return min(default, max(self.deadline - time.monotonic(), MIN_ATTEMPT_SECONDS))

    def next_delay(self, outcome: httpx.Response | Exception) -> float:
        """Seconds to wait before retrying after ``outcome``; raise when it is final (a
        ``ProblemError`` says whether it answered a retry: an earlier attempt may have been
        applied although its answer was lost)."""
        self.failed += 1
        if isinstance(outcome, httpx.Response):
            if not _is_transient_response(outcome) or not self.idempotent:
                try:
                    raise_for_problem(outcome)
                except ProblemError as exc:
                    exc.retried = self.failed > 1
                    raise
        elif isinstance(outcome, NEVER_WORKS):
            raise HubUnavailable(f"{self.what} failed: {_describe(outcome)}") from outcome
        elif not isinstance(outcome, NOT_SENT) and not self.idempotent:
            raise HubUnavailable(
                f"{self.what} failed: {_describe(outcome)} (it may or may not have been applied)"
            ) from outcome
        delay = next(self.delays)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            unavailable = HubUnavailable(f"{self.what} failed: {_describe(outcome)}")
            if isinstance(outcome, httpx.Response):
                unavailable.status = outcome.status_code
                raise unavailable
            raise unavailable from outcome
        if self.failed == 1:
            log.warning(
                "%s: %s; retrying (for up to %s)",
                self.what,
                _describe(outcome),
                "ever" if remaining == math.inf else f"{remaining:.1f}s",
            )
        else:
            log.debug("%s: %s; retrying in %.2fs", self.what, _describe(outcome), delay)
        return min(delay, remaining)


def segment(value: str) -> str:
    """A room id or job full name as one URL path segment (``@`` and ``:`` stay raw)."""
    return quote(value, safe="@:")


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "User-Agent": "taskhub-sdk"}


class AsyncHub:
    """Authenticated async REST client of one hub."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retry_for: float | None = None,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.url = check_url(url)
        self.timeout = timeout
        self.retry_for = RETRY_SECONDS if retry_for is None else retry_for
        self.backoff = backoff
        self._http = httpx.AsyncClient(
            base_url=self.url + API_PREFIX,
            headers=_headers(token),
            timeout=timeout,
            transport=HubTransport(),
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        http_timeout: float | None = None,
        retry_for: float | None = None,
        idempotent: bool = True,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        attempts = _Attempts(
            f"{method} {shown_url(self.url)}{API_PREFIX}{path}",
            self.retry_for if retry_for is None else retry_for,
            self.backoff,
            idempotent,
        )
        while True:
            timeout = attempts.timeout(self.timeout) if http_timeout is None else http_timeout
            outcome: httpx.Response | Exception
            try:
                outcome = await self._http.request(
                    method,
                    path,
                    json=json,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=timeout,
                )
                if outcome.status_code < 400:
                    return outcome
            except httpx.TransportError as exc:
                outcome = exc
            await asyncio.sleep(attempts.next_delay(outcome))

    async def aclose(self) -> None:
        await self._http.aclose()


class SyncHub:
    """Authenticated blocking REST client of one hub."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retry_for: float | None = None,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.url = check_url(url)
        self.timeout = timeout
        self.retry_for = RETRY_SECONDS if retry_for is None else retry_for
        self.backoff = backoff
        self._http = httpx.Client(
            base_url=self.url + API_PREFIX, headers=_headers(token), timeout=timeout
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        http_timeout: float | None = None,
        retry_for: float | None = None,
        idempotent: bool = True,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        attempts = _Attempts(
            f"{method} {shown_url(self.url)}{API_PREFIX}{path}",
            self.retry_for if retry_for is None else retry_for,
            self.backoff,
            idempotent,
        )
        while True:
            timeout = attempts.timeout(self.timeout) if http_timeout is None else http_timeout
            outcome: httpx.Response | Exception
            try:
                outcome = self._http.request(
                    method,
                    path,
                    json=json,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=timeout,
                )
                if outcome.status_code < 400:
                    return outcome
            except httpx.TransportError as exc:
                outcome = exc
            time.sleep(attempts.next_delay(outcome))

    def close(self) -> None:
        self._http.close()
