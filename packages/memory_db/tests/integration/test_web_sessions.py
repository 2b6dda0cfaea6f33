"""Web sessions: only the secret's hash is stored; expiry, sign-out and revocation end them."""

from __future__ import annotations

from datetime import timedelta

import anyio
from sqlalchemy import delete, select

from memory_db import Database
from memory_db.repositories import WEB_SESSION_PREFIX, hash_session_secret
from memory_db.schema import ApiKey, WebSession
from memory_db.unit_of_work import session_of


async def _key(database: Database, owner: str = "alice@example.com") -> str:
    async with database.unit_of_work() as uow:
        await uow.identities.create(owner, 1000)
        record, _secret = await uow.api_keys.create(owner, ["read"])
    return record.id


async def test_a_session_resolves_to_its_key_and_stores_only_a_hash(database: Database) -> None:
    key_id = await _key(database)
    async with database.unit_of_work() as uow:
        session_id, secret = await uow.web_sessions.create(key_id, lifetime=timedelta(hours=1))
    assert secret.startswith(WEB_SESSION_PREFIX)
    async with database.unit_of_work() as uow:
        found = await uow.web_sessions.resolve(secret)
        row = await session_of(uow).scalar(select(WebSession).where(WebSession.id == session_id))
    assert found is not None and found.id == session_id and found.key.id == key_id
    assert found.key.owner_identity == "alice@example.com" and found.key.scopes == ("read",)
    assert row is not None and row.token_hash == hash_session_secret(secret)
    assert secret not in (row.token_hash, row.csrf_token, row.id)
    assert len(found.csrf_token) >= 32


async def test_unknown_malformed_and_expired_secrets_resolve_to_nothing(
    database: Database,
) -> None:
    key_id = await _key(database)
    async with database.unit_of_work() as uow:
        _, secret = await uow.web_sessions.create(key_id, lifetime=timedelta(seconds=1))
    async with database.unit_of_work() as uow:
        assert await uow.web_sessions.resolve(secret) is not None
        assert await uow.web_sessions.resolve(secret + "x") is None
        assert await uow.web_sessions.resolve(secret.removeprefix(WEB_SESSION_PREFIX)) is None
        assert await uow.web_sessions.resolve(WEB_SESSION_PREFIX + "x" * 500) is None
    await anyio.sleep(1.2)
    async with database.unit_of_work() as uow:
        assert await uow.web_sessions.resolve(secret) is None
        # The next sign-in deletes what has expired.
        await uow.web_sessions.create(key_id, lifetime=timedelta(hours=1))
        left = (await session_of(uow).scalars(select(WebSession))).all()
    assert len(left) == 1


async def test_sign_out_and_revocation_end_a_session(database: Database) -> None:
    key_id = await _key(database)
    async with database.unit_of_work() as uow:
        _, first = await uow.web_sessions.create(key_id, lifetime=timedelta(hours=1))
        _, second = await uow.web_sessions.create(key_id, lifetime=timedelta(hours=1))
    async with database.unit_of_work() as uow:
        assert await uow.web_sessions.end(first) is True
        assert await uow.web_sessions.end(first) is False
        assert await uow.web_sessions.resolve(first) is None
        assert await uow.web_sessions.resolve(second) is not None
        await uow.api_keys.revoke(key_id)
    async with database.unit_of_work() as uow:
        assert await uow.web_sessions.resolve(second) is None
        # Deleting the key deletes its sessions.
        await session_of(uow).execute(delete(ApiKey).where(ApiKey.id == key_id))
        assert (await session_of(uow).scalars(select(WebSession))).all() == []
