"""The pool's checkout ping: one round trip, and a connection the server ended is replaced."""

from __future__ import annotations

from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text

from memory_db import Database
from memory_db.database import create_engine, to_plain_url


async def test_a_pooled_connection_is_pinged_with_one_simple_query(database_url: str) -> None:
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
            raw = await connection.get_raw_connection()
            driver: Any = raw.driver_connection
        sent: list[str] = []
        driver.add_query_logger(lambda logged: sent.append(logged.query))
        async with engine.connect() as connection:  # the same pooled connection, pinged
            assert (await connection.get_raw_connection()).driver_connection is driver
            await anyio.sleep(0.05)  # asyncpg calls query loggers soon, not at once
            pinged = list(sent)
            await connection.execute(text("SELECT 2"))
        # SQLAlchemy's own ping sent BEGIN; ; ROLLBACK; (three round trips per checkout).
        assert pinged == ["SELECT 1"]
    finally:
        await engine.dispose()


async def test_a_connection_the_server_ended_is_replaced_at_checkout(database_url: str) -> None:
    database = Database(create_engine(database_url, pool_size=1))
    try:
        async with database.unit_of_work() as uow:
            first = (await uow.session.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        admin: Any = await asyncpg.connect(to_plain_url(database_url))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
        finally:
            await admin.close()
        await anyio.sleep(0.2)  # the pooled connection's socket is closed by the server
        async with database.unit_of_work() as uow:
            second = (await uow.session.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        assert second != first
    finally:
        await database.close()
