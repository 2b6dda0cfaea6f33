"""Web sessions from the per-process cache that every change of access clears, in every process.

A signed-in page costs no round trip to check its session once the session is warm; a session
signed out, or whose key is revoked, in another process is refused on the very next request
(the change returns only once every listening process dropped its cache). "Another process" is
a second ``Database`` on the same database with its own pool, listener and caches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memory_db import Database
from memory_db.database import create_engine
from memory_db.repositories import WebSessionRecord, hash_session_secret
from memory_db.repositories.records import ApiKeyRecord
from memory_db.unit_of_work import session_of
from memory_tools.operations import admin
from memory_tools.sessions import sign_out
from memory_tools.testing.web_app import WebApp, WebClient

from ..serving.test_key_cache import listening, round_trips

_EPOCH = text("SELECT epoch FROM mem_access_epoch")
_DELETE_ALL = text("DELETE FROM mem_web_sessions")
_EXPIRE_ALL = text(
    "UPDATE mem_web_sessions SET created_at = now() - interval '2 hours', "
    "expires_at = now() - interval '1 hour'"
)


@pytest.fixture
async def other_process(database_url: str) -> AsyncIterator[Database]:
    """Another process's view of the same database: its own pool, listener and caches."""
    other = Database(create_engine(database_url, pool_size=2))
    try:
        yield other
    finally:
        await other.close()


def _session_statements(sent: list[str]) -> list[str]:
    return [sql for sql in sent if "mem_web_sessions" in sql or "mem_api_keys" in sql]


def _secret(client: WebClient) -> str:
    secret = client.http.cookies.get("mem_session")
    assert secret is not None
    return secret


async def test_a_warm_session_costs_no_round_trip_per_request(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    database = webapp.services.database
    async with listening(database), browser_for() as client:
        with round_trips(database) as cold:  # sign-in, then its first page (cold)
            await client.sign_in(alice.key)
        with round_trips(database) as warm:
            assert (await client.get("/account")).status_code == 200
    # Cold: the sign-in writes the session; its first page reads it, with its key, and records
    # their use in one statement. Before the cache: three statements (the read, then a touch
    # of the session and one of the key) on every page.
    reads = [sql for sql in _session_statements(cold) if sql.lstrip().startswith("WITH seen")]
    assert len(reads) == 1, cold
    assert _session_statements(warm) == [], warm


async def test_a_session_signed_out_in_another_process_is_refused_on_the_next_request(
    browser_for: Callable[[], WebClient],
    make_person: Callable[..., Any],
    webapp: WebApp,
    other_process: Database,
) -> None:
    alice = await make_person("alice@example.com")
    database = webapp.services.database
    async with listening(database, other_process), browser_for() as client:
        await client.sign_in(alice.key)
        assert (await client.get("/account")).status_code == 200
        secret = _secret(client)
        assert database.session_cache.get(hash_session_secret(secret)) is not None
        # Ended through the other process (as the sign-out of another server would).
        async with other_process.unit_of_work() as uow:
            assert await sign_out(uow, secret)
        # Not later, by luck of timing: already when the sign-out returned.
        assert database.session_cache.get(hash_session_secret(secret)) is None
        refused = await client.get("/account")
        assert refused.status_code == 303 and "/sign-in" in refused.headers["location"]


async def test_a_session_whose_key_is_revoked_in_another_process_is_refused_next(
    browser_for: Callable[[], WebClient],
    make_person: Callable[..., Any],
    webapp: WebApp,
    other_process: Database,
) -> None:
    alice = await make_person("alice@example.com")
    database = webapp.services.database
    async with listening(database, other_process), browser_for() as client:
        await client.sign_in(alice.key)
        assert (await client.get("/account")).status_code == 200
        assert (await client.get("/account")).status_code == 200  # warm
        await admin.revoke_key(other_process, alice.key_id)
        refused = await client.get("/account")
        assert refused.status_code == 303 and "/sign-in" in refused.headers["location"]


async def test_a_sign_in_sweeping_expired_sessions_notifies_nothing(
    make_person: Callable[..., Any], database: Database
) -> None:
    alice = await make_person("alice@example.com")
    async with database.unit_of_work() as uow:
        await uow.web_sessions.create(alice.key_id, lifetime=timedelta(hours=1))
        await session_of(uow).execute(_EXPIRE_ALL)
    async with database.unit_of_work() as uow:
        before = (await session_of(uow).execute(_EPOCH)).scalar_one()
        # A sign-in deletes expired sessions on its way: no live session ends, no cache clears.
        await uow.web_sessions.create(alice.key_id, lifetime=timedelta(hours=1))
    async with database.unit_of_work() as uow:
        assert (await session_of(uow).execute(_EPOCH)).scalar_one() == before
        ended = await uow.web_sessions.end("wss_unknown")
        assert not ended
    async with database.unit_of_work() as uow:
        # Deleting a live session by hand is heard.
        await session_of(uow).execute(_DELETE_ALL)
    async with database.unit_of_work() as uow:
        assert (await session_of(uow).execute(_EPOCH)).scalar_one() == before + 1


class _State:
    trusted = True
    generation = 0


def test_a_cached_session_is_not_kept_past_its_expiry() -> None:
    from memory_db.repositories import WebSessionCache

    now = [0.0]
    cache = WebSessionCache(_State(), ttl_seconds=60, clock=lambda: now[0])
    at = datetime.now(UTC)
    key = ApiKeyRecord("akey_1", "a@example.com", None, ("read",), at, None, None)
    record = WebSessionRecord("wses_1", key, "csrf", at, at + timedelta(seconds=10))
    cache.put(cache.ticket(), "h", record, until=10.0)
    assert cache.get("h") is record
    now[0] = 10.0  # expired, though read well within the minute
    assert cache.get("h") is None
