"""Who a caller is: Taskhub's ``th_`` tokens first, then the hub's other sources of
identity in order; a principal another source vouches for gets a user row on first sight,
under a name of its own, and an identity with an expiry ends then."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import select
from starlette.requests import HTTPConnection

from taskhub.rules.errors import IdentityUnavailable
from taskhub.rules.records import Principal
from taskhub.services import identities as module
from taskhub.services.identities import Caller, HostIdentities, Identities, Identity
from taskhub.services.users import Authenticator, create_user, hash_token
from taskhub.store import users as user_store
from taskhub.store.database import Database
from taskhub.store.tables import user_table

CAROL = Principal(uuid.UUID("6f1f7f52-5d1e-4d0b-9d43-7b0b7d1d9c01"), "carol", False)


def caller(token: str | None) -> Caller:
    scope = {"type": "http", "headers": [], "path": "/", "query_string": b""}
    return Caller(HTTPConnection(scope), token)


class Known:
    """A source that knows one token."""

    def __init__(self, token: str, identity: Identity) -> None:
        self.token, self.identity, self.asked = token, identity, 0

    async def identify(self, who: Caller) -> Identity | None:
        self.asked += 1
        return self.identity if who.token == self.token else None


async def users_named(db: Database) -> dict[str, Any]:
    async with db.read() as conn:
        rows = await conn.execute(select(user_table.c.name, user_table.c.id))
        return {row.name: row.id for row in rows}


@pytest.fixture
def tokens(db: Database) -> Authenticator:
    return Authenticator(db, ttl=0.0)


async def test_a_taskhub_token_is_the_tokens_to_answer_and_is_watched_for_revocation(db, tokens):
    _, token = await create_user(db, "alice")
    source = Known(token, Identity(CAROL))
    identity = await Identities(db, tokens, [source]).identify(caller(token))
    assert identity is not None and identity.principal.name == "alice"
    assert identity.token_digest == hash_token(token)
    assert source.asked == 0


async def test_another_sources_principal_gets_a_user_row_on_first_sight(db, tokens):
    identities = Identities(db, tokens, [Known("host-jwt", Identity(CAROL))])
    identity = await identities.identify(caller("host-jwt"))
    assert identity == Identity(CAROL)
    assert (await users_named(db))["carol"] == CAROL.id


async def test_a_name_held_by_another_user_is_kept_apart_by_the_id(db, tokens):
    await create_user(db, "carol")
    await Identities(db, tokens, [Known("jwt", Identity(CAROL))]).identify(caller("jwt"))
    named = await users_named(db)
    assert named[f"carol~{CAROL.id.hex[:8]}"] == CAROL.id
    assert named["carol"] != CAROL.id


async def test_a_changed_superuser_flag_is_written_and_an_unchanged_one_is_not(
    db, tokens, monkeypatch
):
    writes: list[str] = []
    real = user_store.upsert_user

    async def counted(conn: Any, user_id: Any, name: str, *, superuser: bool) -> None:
        writes.append(name)
        await real(conn, user_id, name, superuser=superuser)

    monkeypatch.setattr(user_store, "upsert_user", counted)
    promoted = Principal(CAROL.id, CAROL.name, True)
    source = Known("jwt", Identity(CAROL))
    identities = Identities(db, tokens, [source])
    await asyncio.gather(*(identities.identify(caller("jwt")) for _ in range(5)))
    assert writes == ["carol"]  # five first requests at once: one write
    source.identity = Identity(promoted)
    await identities.identify(caller("jwt"))
    async with db.read() as conn:
        flag = await conn.scalar(
            select(user_table.c.is_superuser).where(user_table.c.id == CAROL.id)
        )
    assert flag is True
    assert writes == ["carol", "carol"]


async def test_an_identity_past_its_expiry_is_nobody(db, tokens):
    expired = Identity(CAROL, expires_at=time.time() - 1)
    assert await Identities(db, tokens, [Known("jwt", expired)]).identify(caller("jwt")) is None


async def test_a_token_no_source_knows_is_tried_as_an_operators_admin_token(db, tokens):
    await create_user(db, "root", superuser=True)
    plain = "an-admin-token-without-the-prefix-0123456789"
    async with db.write() as conn:
        user_id = await user_store.user_named(conn, "root")
        assert user_id is not None
        await user_store.insert_token(conn, user_id, hash_token(plain))
    identities = Identities(db, tokens, [Known("other", Identity(CAROL))])
    identity = await identities.identify(caller(plain))
    assert identity is not None and identity.principal.is_superuser
    assert await identities.identify(caller("nobody-knows-this")) is None
    assert await identities.identify(caller(None)) is None


async def test_a_host_hook_that_raises_or_misbehaves_is_unavailable_not_a_crash(db, tokens):
    async def raising(_caller: Caller) -> Principal | None:
        raise RuntimeError("the host's user table is down")

    async def misbehaving(_caller: Caller) -> Any:
        return {"id": "not a principal"}

    for hook in (raising, misbehaving):
        identities = Identities(db, tokens, [HostIdentities(hook)])
        with pytest.raises(IdentityUnavailable):
            await identities.identify(caller("host-token"))
    assert "carol" not in await users_named(db)


async def test_watching_an_expiring_identity_sets_the_event_at_its_expiry(db, tokens):
    identities = Identities(db, tokens)
    with identities.watch(Identity(CAROL, expires_at=time.time() + 0.2)) as ended:
        assert not ended.is_set()
        await asyncio.wait_for(ended.wait(), 10)
    with identities.watch(Identity(CAROL)) as never:  # the host's to revoke
        await asyncio.sleep(0.05)
        assert not never.is_set()


def test_the_known_users_memory_is_bounded():
    assert module.KNOWN_USERS <= 100_000
