"""Keys checked from a per-process cache that every change of access clears, in every process.

An MCP call over HTTP is checked twice (the bearer, then the tool): on a warm cache neither
sends anything to the database. "Another process" here is a second ``Database`` on the same
database with its own pool and listener, as a second server or the CLI would have.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from fastmcp import Client
from sqlalchemy import event, text

from memory_db import Database
from memory_db.database import create_engine
from memory_db.repositories import access_changes
from memory_db.repositories.access_changes import ApiKeyCache
from memory_db.repositories.identities import hash_api_key
from memory_db.repositories.records import ApiKeyRecord
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.serving import build_http_server


@contextmanager
def round_trips(database: Database) -> Generator[list[str]]:
    """Every round trip ``database``'s pool makes meanwhile: statements, BEGIN, COMMIT, ROLLBACK.

    A checkout ping would not pass these events: it is asserted away in memory_db's
    ``test_round_trips.py`` (a checkout sends nothing).
    """
    sent: list[str] = []
    engine = database.engine.sync_engine

    def statement(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        sent.append(sql)

    def begin(_conn: Any) -> None:
        sent.append("BEGIN")

    def commit(_conn: Any) -> None:
        sent.append("COMMIT")

    def rollback(_conn: Any) -> None:
        sent.append("ROLLBACK")

    hooks = (
        ("before_cursor_execute", statement),
        ("begin", begin),
        ("commit", commit),
        ("rollback", rollback),
    )
    for name, hook in hooks:
        event.listen(engine, name, hook)
    try:
        yield sent
    finally:
        for name, hook in hooks:
            event.remove(engine, name, hook)


@contextmanager
def checkouts(database: Database) -> Generator[list[object]]:
    """Every connection ``database``'s pool hands out meanwhile."""
    taken: list[object] = []

    def checkout(connection: Any, _record: Any, _proxy: Any) -> None:
        taken.append(connection)

    event.listen(database.engine.sync_engine, "checkout", checkout)
    try:
        yield taken
    finally:
        event.remove(database.engine.sync_engine, "checkout", checkout)


@asynccontextmanager
async def listening(*databases: Database) -> AsyncGenerator[None]:
    """Run each database's access listener (as a server does) until the block ends."""
    async with anyio.create_task_group() as group:
        for database in databases:
            group.start_soon(database.access_changes.run)
        with anyio.fail_after(10):
            for database in databases:
                await database.access_changes.until(trusted=True)
        yield
        group.cancel_scope.cancel()


@pytest.fixture
async def other_process(database_url: str) -> AsyncIterator[Database]:
    """Another process's view of the same database: its own pool, listener and cache."""
    other = Database(create_engine(database_url, pool_size=2))
    try:
        yield other
    finally:
        await other.close()


def _key_statements(sent: list[str]) -> list[str]:
    return [sql for sql in sent if "mem_api_keys" in sql]


async def _key_id(database: Database, key: str) -> str:
    async with database.unit_of_work() as uow:
        record = await uow.api_keys.resolve(key)
    assert record is not None
    return record.id


async def test_a_warm_key_costs_no_round_trip_on_an_mcp_call(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    key = await make_key("alice@example.com")
    database = services.database
    async with listening(database), serve_http(build_http_server(services)) as url:
        with round_trips(database) as cold:  # the session's handshake, then the first call
            async with Client(url, auth=key) as client:
                await client.call_tool("image_project_list", {})
                with round_trips(database) as warm:
                    listed = await client.call_tool("image_project_list", {})
    assert listed.structured_content == {"projects": []}
    # Cold: the bearer check reads the key once (and records its use); the tool finds it
    # cached. Before the cache: two reads of the key for every call, one of them an UPDATE.
    assert len(_key_statements(cold)) == 1, cold
    # Warm: the authentication part of the call sends nothing at all.
    assert _key_statements(warm) == [], warm
    assert len(warm) < len(cold)


async def test_a_warm_bearer_check_takes_no_connection(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    key = await make_key("alice@example.com")
    database = services.database
    async with (
        listening(database),
        serve_http(build_http_server(services)) as url,
        Client(url, auth=key) as client,
    ):
        await client.call_tool("image_project_list", {})  # the key is read and cached
        with checkouts(database) as taken:
            listed = await client.call_tool("image_project_list", {})
    assert listed.structured_content == {"projects": []}
    # The tool's one unit of work. Before, the bearer check took a connection of its own to
    # find the key in the cache: a checkout, a session and a check-in on every call.
    assert len(taken) == 1, taken


async def test_a_key_revoked_in_another_process_is_refused_on_the_next_call(
    services: MemoryServices,
    make_key: Callable[..., Any],
    serve_http: Any,
    other_process: Database,
) -> None:
    key = await make_key("alice@example.com")
    async with (
        listening(services.database, other_process),
        serve_http(build_http_server(services)) as url,
        Client(url, auth=key) as client,
    ):
        await client.call_tool("image_project_list", {})
        with round_trips(services.database) as warm:
            await client.call_tool("image_project_list", {})
        assert _key_statements(warm) == []  # the key is cached here
        # Revoked through the other process (as `memory-server admin revoke-key` does):
        # when that returns, this process has dropped its cache, with no wait on our side.
        key_id = await _key_id(other_process, key)
        await admin.revoke_key(other_process, key_id)
        # Not later, by luck of timing: already when the revocation returned.
        assert services.database.key_cache.get(hash_api_key(key)) is None
        # The bearer check refuses it (HTTP 401, which the client raises).
        with pytest.raises(Exception, match="unauthenticated: the API key is unknown"):
            await client.call_tool("image_project_list", {})


async def test_a_changed_grant_applies_to_the_next_call(
    services: MemoryServices,
    make_key: Callable[..., Any],
    serve_http: Any,
    other_process: Database,
) -> None:
    await make_key("alice@example.com")
    bob = await make_key("bob@example.com", ("read",))
    await admin.grant(other_process, "alice@example.com", "Library", "bob@example.com", "read")
    shared = {"vault": "alice@example.com/Library"}
    async with (
        listening(services.database, other_process),
        serve_http(build_http_server(services)) as url,
        Client(url, auth=bob) as client,
    ):
        assert not (await client.call_tool("image_project_list", shared)).is_error
        await client.call_tool("image_project_list", shared)  # a warm key
        await admin.revoke_grant(other_process, "alice@example.com", "Library", "bob@example.com")
        refused = await client.call_tool("image_project_list", shared, raise_on_error=False)
        assert refused.is_error
        assert "not_found" in str(getattr(refused.content[0], "text", ""))


async def test_while_nothing_listens_the_cache_is_not_believed(
    services: MemoryServices,
    make_key: Callable[..., Any],
    serve_http: Any,
    other_process: Database,
) -> None:
    key = await make_key("alice@example.com")
    database = services.database
    watch = database.access_changes
    async with (
        listening(database),
        serve_http(build_http_server(services)) as url,
        Client(url, auth=key) as client,
    ):
        await client.call_tool("image_project_list", {})
        assert database.key_cache.get(hash_api_key(key)) is not None
        # The listening connection is lost (here: ended by the server, as in a restart).
        async with other_process.unit_of_work() as uow:
            ended = await session_of(uow).execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name LIKE 'memory-access:%'"
                )
            )
            assert ended.scalars().all() == [True]
        with anyio.fail_after(10):
            await watch.until(trusted=False)
        # Fail closed: the cached key is not believed, and a revocation nobody heard of (made
        # while this process listens to nothing) is refused on the next call.
        assert database.key_cache.get(hash_api_key(key)) is None
        async with other_process.unit_of_work() as uow:
            await session_of(uow).execute(
                text("UPDATE mem_api_keys SET revoked_at = now() WHERE key_hash = :h"),
                {"h": hash_api_key(key)},
            )
        with pytest.raises(Exception, match="unauthenticated: the API key is unknown"):
            await client.call_tool("image_project_list", {})
        # And the listener comes back by itself (it retries every second).
        with anyio.fail_after(10):
            await watch.until(trusted=True)


async def test_a_revocation_returns_only_once_every_listener_acknowledged_it(
    services: MemoryServices, make_key: Callable[..., Any], database_url: str
) -> None:
    import asyncpg  # type: ignore[import-untyped]

    from memory_db.database import to_plain_url

    key = await make_key("alice@example.com")
    key_id = await _key_id(services.database, key)
    # Another process's listener, driven by hand: it hears the change, then acknowledges.
    listener: Any = await asyncpg.connect(
        to_plain_url(database_url), server_settings={"application_name": "memory-access:0"}
    )
    heard: list[str] = []
    notified = anyio.Event()

    def hear(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        heard.append(payload)
        notified.set()

    await listener.add_listener(access_changes.ACCESS_CHANNEL, hear)
    acknowledged: list[bool] = []  # whether the listener had acknowledged, when revoke returned

    async def revoke() -> None:
        await admin.revoke_key(services.database, key_id)
        acknowledged.append(bool(heard) and heard[-1] == "acked")

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(revoke)
            with anyio.fail_after(10):
                await notified.wait()
            epoch = int(heard[-1])
            await listener.execute(f"SET application_name = 'memory-access:{epoch}'")
            heard.append("acked")
    finally:
        await listener.close()
    assert acknowledged == [True]


async def test_a_change_waits_for_every_listener_and_cuts_off_one_that_never_answers(
    services: MemoryServices,
    make_key: Callable[..., Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncpg  # type: ignore[import-untyped]

    from memory_db.database import to_plain_url

    key = await make_key("alice@example.com")
    # A stuck process: named as a listener that has handled nothing, and never answering.
    stuck: Any = await asyncpg.connect(
        to_plain_url(database_url), server_settings={"application_name": "memory-access:0"}
    )
    try:
        monkeypatch.setattr(access_changes, "SETTLE_TIMEOUT_SECONDS", 0.2)
        await admin.revoke_key(services.database, await _key_id(services.database, key))
        # The revocation returned, having ended the connection that never acknowledged it.
        with pytest.raises(
            (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)
        ):
            await stuck.fetchval("SELECT 1")
    finally:
        await stuck.close()


class _State:
    trusted = True
    generation = 0


def _record(key_id: str) -> ApiKeyRecord:
    return ApiKeyRecord(key_id, "a@example.com", None, ("read",), datetime.now(UTC), None, None)


def test_a_key_read_before_a_change_is_not_kept_after_it() -> None:
    state = _State()
    now = [0.0]
    cache = ApiKeyCache(state, ttl_seconds=60, clock=lambda: now[0])
    ticket = cache.ticket()
    state.generation += 1  # a notification arrived while the key was being read
    cache.put(ticket, "h", _record("akey_1"))
    assert cache.get("h") is None
    cache.put(cache.ticket(), "h", _record("akey_1"))
    assert cache.get("h") is not None
    now[0] = 60.0  # read again after a minute: that read records the key's use
    assert cache.get("h") is None
    cache.put(cache.ticket(), "h", _record("akey_1"))
    state.trusted = False  # listening stopped: nothing is believed, nothing is kept
    assert cache.get("h") is None
    assert cache.ticket() is None


async def test_a_metrics_scrape_with_a_warm_admin_key_costs_no_key_round_trip(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    import httpx

    operator = await make_key("ops@example.com", ("read", "admin"))
    database = services.database
    headers = {"Authorization": f"Bearer {operator}"}
    async with (
        listening(database),
        serve_http(build_http_server(services)) as url,
        httpx.AsyncClient() as http,
    ):
        scrape = url.removesuffix("/mcp") + "/metrics"
        assert (await http.get(scrape, headers=headers)).status_code == 200
        with round_trips(database) as warm:
            assert (await http.get(scrape, headers=headers)).status_code == 200
        # Before: every scrape read the key (`resolve`, no cache).
        assert _key_statements(warm) == [], warm
        # Revoked: the very next scrape is refused.
        await admin.revoke_key(database, await _key_id(database, operator))
        assert (await http.get(scrape, headers=headers)).status_code == 401


async def test_a_waiting_call_rechecks_its_key_from_the_cache(
    services: MemoryServices, make_key: Callable[..., Any], other_process: Database
) -> None:
    from memory_tools.access import Caller, authenticate, still_authenticated
    from memory_tools.errors import Unauthenticated

    key = await make_key("alice@example.com")
    database = services.database
    async with listening(database, other_process):
        async with database.single_statements() as uow:
            caller: Caller = await authenticate(uow, key)
        with round_trips(database) as warm:
            async with database.unit_of_work() as uow:
                await still_authenticated(uow, caller)
        # Before: `is_active` read the key on every look while a call waited.
        assert warm == [], warm
        await admin.revoke_key(other_process, caller.key_id)
        with pytest.raises(Unauthenticated):
            async with database.unit_of_work() as uow:
                await still_authenticated(uow, caller)


async def test_a_change_wakes_on_the_acknowledgement_instead_of_polling(
    services: MemoryServices,
    make_key: Callable[..., Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncpg  # type: ignore[import-untyped]

    from memory_db.database import to_plain_url

    key = await make_key("alice@example.com")
    key_id = await _key_id(services.database, key)
    # Without an acknowledgement heard it would look again only after a minute: only the
    # announcement can end the wait in time.
    monkeypatch.setattr(access_changes, "SETTLE_RECHECK_SECONDS", 60.0, raising=False)
    listener: Any = await asyncpg.connect(
        to_plain_url(database_url), server_settings={"application_name": "memory-access:0"}
    )
    heard: list[str] = []
    notified = anyio.Event()

    def hear(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        heard.append(payload)
        notified.set()

    await listener.add_listener(access_changes.ACCESS_CHANNEL, hear)
    try:
        # The revocation returns on the announcement, well before the minute is up.
        with round_trips(services.database) as sent, anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(admin.revoke_key, services.database, key_id)
                await notified.wait()
                # Held back a while, as a busy process would: a poll would look again and
                # again meanwhile (every 5 ms before); a wait on the announcement does not.
                await anyio.sleep(0.2)
                await listener.execute(
                    "SELECT set_config('application_name', $1, false), pg_notify($2, $1)",
                    f"memory-access:{heard[-1]}",
                    access_changes.ACK_CHANNEL,
                )
    finally:
        await listener.close()
    looks = [sql for sql in sent if "pg_stat_activity" in sql]
    # Once before the acknowledgement, once after it (the one that finds nobody behind).
    assert len(looks) == 2, looks
