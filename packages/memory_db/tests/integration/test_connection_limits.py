"""What a process's pool may open, and what the server accepts (the --processes budget)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from memory_db import ConfigurationError, Database
from memory_db.database import connection_limits, create_engine, pool_capacity, to_async_url


async def test_a_pool_may_open_its_size_plus_its_overflow(database_url: str) -> None:
    engines = [
        create_engine(database_url, pool_size=3),
        create_engine(database_url, pool_size=4, max_overflow=0),
        create_engine(database_url, pool_size=2, max_overflow=5),
    ]
    try:
        assert [pool_capacity(engine) for engine in engines] == [6, 4, 7]
    finally:
        for engine in engines:
            await engine.dispose()


async def test_a_pool_without_a_bound_has_no_budget(database_url: str) -> None:
    engine = create_async_engine(to_async_url(database_url), poolclass=NullPool)
    try:
        with pytest.raises(ConfigurationError, match="NullPool"):
            pool_capacity(engine)
    finally:
        await engine.dispose()


async def test_the_limits_are_the_servers_settings(database: Database) -> None:
    async with database.engine.connect() as conn:
        shown = {
            name: int((await conn.execute(text(f"SELECT current_setting('{name}')"))).scalar_one())
            for name in (
                "max_connections",
                "superuser_reserved_connections",
                "reserved_connections",
            )
        }
    max_connections, reserved = await connection_limits(database.engine)
    assert max_connections == shown["max_connections"]
    assert reserved == shown["superuser_reserved_connections"] + shown["reserved_connections"]
    assert 0 < reserved < max_connections
