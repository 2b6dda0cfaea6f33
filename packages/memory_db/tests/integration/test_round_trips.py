"""Round trips to the database: a checkout sends nothing, single statements nothing else."""

from __future__ import annotations

from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text

from memory_db import Database, DatabaseUnavailable, NestedUnitOfWork
from memory_db.database import create_engine, to_plain_url
from memory_db.unit_of_work import session_of


def _simple_queries(driver: Any) -> list[str]:
    """The simple-protocol queries ``driver`` (an asyncpg connection) sends from now on."""
    sent: list[str] = []

    def log(logged: Any) -> None:
        sent.append(logged.query)

    driver.add_query_logger(log)
    return sent


async def test_a_pooled_connection_is_handed_out_without_a_ping(database_url: str) -> None:
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
            raw = await connection.get_raw_connection()
            driver: Any = raw.driver_connection
        sent = _simple_queries(driver)
        async with engine.connect() as connection:  # the same pooled connection
            assert (await connection.get_raw_connection()).driver_connection is driver
            await connection.execute(text("SELECT 2"))
        await anyio.sleep(0.05)  # asyncpg calls query loggers soon, not at once
        # Before: SELECT 1 per checkout (and SQLAlchemy's own ping sent BEGIN; ; ROLLBACK;).
        assert "SELECT 1" not in sent
    finally:
        await engine.dispose()


async def test_a_connection_the_server_ended_is_replaced_at_checkout(database_url: str) -> None:
    database = Database(create_engine(database_url, pool_size=1))
    try:
        async with database.unit_of_work() as uow:
            first = (await session_of(uow).execute(text("SELECT pg_backend_pid()"))).scalar_one()
        admin: Any = await asyncpg.connect(to_plain_url(database_url))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
        finally:
            await admin.close()
        await anyio.sleep(0.2)  # the pooled connection's socket is closed by the server
        async with database.unit_of_work() as uow:
            second = (await session_of(uow).execute(text("SELECT pg_backend_pid()"))).scalar_one()
        assert second != first
    finally:
        await database.close()


async def test_a_single_statement_is_sent_without_begin_or_commit(database_url: str) -> None:
    database = Database(create_engine(database_url, pool_size=1))
    try:
        async with database.unit_of_work() as uow:
            await uow.identities.create("a@example.com", 10)
            _key, secret = await uow.api_keys.create("a@example.com", ["read"])
            connection = await session_of(uow).connection()
            driver: Any = (await connection.get_raw_connection()).driver_connection
        sent = _simple_queries(driver)
        async with database.single_statements() as uow:
            found = await uow.api_keys.resolve(secret)
        await anyio.sleep(0.05)  # asyncpg calls query loggers soon, not at once
        assert found is not None
        # no checkout ping, no BEGIN or COMMIT (asyncpg's query loggers see simple queries,
        # not the prepared lookup)
        assert sent == []
        # a statement that writes commits on its own
        sent.clear()
        async with database.single_statements() as uow:
            assert await uow.api_keys.use(secret) is not None
        await anyio.sleep(0.05)
        assert sent == []
        async with database.unit_of_work() as uow:
            (listed,) = await uow.api_keys.list_for("a@example.com")
            assert listed.last_used_at is not None
        # the same pooled connection is transactional again for the next unit of work
        sent.clear()
        async with database.unit_of_work() as uow:
            await uow.api_keys.resolve(secret)
        await anyio.sleep(0.05)
        assert sent[0].startswith("BEGIN") and sent[-1] == "COMMIT;"
    finally:
        await database.close()


async def test_single_statements_on_an_unreachable_database_are_database_unavailable() -> None:
    database = Database(create_engine("postgresql://nobody@127.0.0.1:1/none"))
    try:
        with pytest.raises(DatabaseUnavailable):
            async with database.single_statements() as uow:
                await uow.api_keys.resolve("mk_" + "x" * 40)
    finally:
        await database.close()


async def test_single_statements_are_one_checkout_per_task_like_a_unit_of_work(
    database_url: str,
) -> None:
    database = Database(create_engine(database_url, pool_size=1, max_overflow=0))
    try:
        with anyio.fail_after(5):  # without the guard this would wait for the one connection
            async with database.unit_of_work():
                with pytest.raises(NestedUnitOfWork):
                    async with database.single_statements():
                        pass
            async with database.single_statements():
                with pytest.raises(NestedUnitOfWork):
                    async with database.unit_of_work():
                        pass
            async with database.single_statements() as uow:  # the marker was cleared
                assert (await session_of(uow).execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await database.close()
