"""Settings come from ``TASKHUB_*`` variables; an unusable value stops the hub at start."""

import pytest
from pydantic import ValidationError

from taskhub.settings import Settings, setting_errors


@pytest.mark.parametrize(
    ("raw", "categories"),
    [("a, b,,c", ["a", "b", "c"]), ('["x", "y"]', ["x", "y"]), ("c" * 64, ["c" * 64])],
)
def test_categories_are_a_comma_or_json_list(monkeypatch, raw, categories):
    monkeypatch.setenv("TASKHUB_ALLOWED_CATEGORIES", raw)
    assert Settings().allowed_categories == categories


@pytest.mark.parametrize("raw", ["", "  "])
def test_empty_categories_mean_the_default_ones(monkeypatch, raw):
    """(An unset compose variable: seen refusing every job, "not one of: .")"""
    monkeypatch.setenv("TASKHUB_ALLOWED_CATEGORIES", raw)
    assert Settings().allowed_categories == ["modifiers", "selections", "analysis"]


@pytest.mark.parametrize("raw", ["[]", ","])
def test_a_list_of_no_category_is_refused(monkeypatch, raw):
    assert "no category at all" in refusal(monkeypatch, "TASKHUB_ALLOWED_CATEGORIES", raw)


@pytest.mark.parametrize("raw", ["c" * 65, "a:b", '["ok", ""]'])
def test_a_category_that_could_not_name_a_job_is_refused(monkeypatch, raw):
    monkeypatch.setenv("TASKHUB_ALLOWED_CATEGORIES", raw)
    with pytest.raises(ValidationError, match="a category is 1 to 64 characters"):
        Settings()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:///taskhub.db",
        "sqlite+aiosqlite:////var/lib/taskhub/hub.db",
        "sqlite+aiosqlite://",
        "postgresql+asyncpg://user:secret@db.example:5432/taskhub",
    ],
)
def test_the_async_database_drivers_are_accepted(monkeypatch, url):
    monkeypatch.setenv("TASKHUB_DATABASE_URL", url)
    assert Settings().database_url == url


def refusal(monkeypatch, variable: str, value: str) -> str:
    """How the settings describe their refusal of ``variable=value`` (it names the variable)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    described = setting_errors(caught.value)
    assert described.startswith(f"{variable}: "), described
    return described


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user:secret@localhost/taskhub",  # psycopg2: a sync driver
        "postgresql+psycopg://user:secret@localhost/taskhub",
        "mysql://localhost/taskhub",
        "sqlite:///taskhub.db",  # pysqlite: a sync driver
        "garbage",
        "",
    ],
)
def test_a_database_url_the_hub_cannot_use_is_refused_naming_the_accepted_forms(monkeypatch, url):
    described = refusal(monkeypatch, "TASKHUB_DATABASE_URL", url)
    assert "sqlite+aiosqlite:///" in described and "postgresql+asyncpg://" in described
    assert "secret" not in described


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://:secret@cache.example:6380/1", "unix:///tmp/r.s"]
)
def test_redis_urls_are_accepted(monkeypatch, url):
    monkeypatch.setenv("TASKHUB_REDIS_URL", url)
    assert Settings().redis_url == url


def test_an_empty_redis_url_means_no_redis(monkeypatch):
    monkeypatch.setenv("TASKHUB_REDIS_URL", "")
    assert Settings().redis_url is None


@pytest.mark.parametrize(
    "url",
    [
        "notaurl",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://:secret@127.0.0.1:port/0",
        "unix://",
        "redis://:secret@127.0.0.1:6379/x",  # redis-py would use database 0
        "redis://:secret@127.0.0.1:6379/9?foo=1",  # an option redis-py does not have
    ],
)
def test_a_redis_url_that_is_not_one_is_refused(monkeypatch, url):
    described = refusal(monkeypatch, "TASKHUB_REDIS_URL", url)
    assert "redis://host:port/db" in described
    assert "secret" not in described


DURATIONS = [
    "TASKHUB_WORKER_TIMEOUT_SECONDS",
    "TASKHUB_TASK_LEASE_SECONDS",
    "TASKHUB_SWEEPER_INTERVAL_SECONDS",
    "TASKHUB_INTERNAL_TASK_TIMEOUT_SECONDS",
    "TASKHUB_LONG_POLL_MAX_WAIT_SECONDS",
    "TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS",
    "TASKHUB_INTERNAL_REDELIVERY_SECONDS",
    "TASKHUB_RETRY_BACKOFF_SECONDS",
    "TASKHUB_RETRY_BACKOFF_MAX_SECONDS",
    "TASKHUB_TASK_RETENTION_SECONDS",
    "TASKHUB_AUTH_CACHE_SECONDS",
    "TASKHUB_GRACEFUL_SHUTDOWN_SECONDS",
    "TASKHUB_SQLITE_BUSY_TIMEOUT_MS",
    "TASKHUB_DB_POOL_TIMEOUT_SECONDS",
    "TASKHUB_DB_STATEMENT_TIMEOUT_SECONDS",
    "TASKHUB_PAYLOAD_VALIDATION_SECONDS",
]


@pytest.mark.parametrize("variable", DURATIONS)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e12"])
def test_a_duration_that_is_not_finite_or_absurdly_long_is_refused(monkeypatch, variable, value):
    """(Seen: a lease of inf or 1e12 seconds, 500s on every claim and heartbeat.)"""
    refusal(monkeypatch, variable, value)


@pytest.mark.parametrize(
    ("variable", "longest"),
    [
        ("TASKHUB_TASK_LEASE_SECONDS", "31622400"),  # 366 days
        ("TASKHUB_WORKER_TIMEOUT_SECONDS", "31622400"),
        ("TASKHUB_TASK_RETENTION_SECONDS", "3162240000"),  # 100 years
        ("TASKHUB_SQLITE_BUSY_TIMEOUT_MS", "86400000"),  # a day
        ("TASKHUB_PAYLOAD_VALIDATION_SECONDS", "60"),
    ],
)
def test_durations_are_accepted_up_to_their_documented_bound(monkeypatch, variable, longest):
    monkeypatch.setenv(variable, longest)
    name = variable.removeprefix("TASKHUB_").lower()
    assert getattr(Settings(), name) == float(longest)


@pytest.mark.parametrize(
    "variable", ["TASKHUB_DB_POOL_TIMEOUT_SECONDS", "TASKHUB_DB_STATEMENT_TIMEOUT_SECONDS"]
)
@pytest.mark.parametrize("value", ["0", "-1"])
def test_database_waits_are_bounded_by_a_positive_duration(monkeypatch, variable, value):
    """(No wait on the database may be unbounded: 0 is not "no limit".)"""
    refusal(monkeypatch, variable, value)


def test_database_waits_default_to_seconds_not_a_minute():
    settings = Settings()
    assert (settings.db_pool_timeout_seconds, settings.db_statement_timeout_seconds) == (10, 30)


@pytest.mark.parametrize("value", ["0", "-1", "61"])
def test_a_payload_s_validation_takes_a_bounded_positive_time(monkeypatch, value):
    """(0 is not "no limit": a payload's validation holds a thread, and a request.)"""
    refusal(monkeypatch, "TASKHUB_PAYLOAD_VALIDATION_SECONDS", value)
