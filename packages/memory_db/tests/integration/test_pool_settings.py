"""The runtime's connection pool comes from the settings (MEMORY_DB_POOL_*, admitted calls)."""

from __future__ import annotations

from typing import Any

from memory_db import MemorySettings, open_database


async def test_the_runtime_opens_its_pool_from_the_settings(database_url: str) -> None:
    settings = MemorySettings(
        memory_database_url=database_url, memory_max_concurrent_calls=3, memory_db_pool_overflow=1
    )
    database, embedded = await open_database(settings, migrate=False)
    assert embedded is None
    try:
        pool: Any = database.engine.pool
        # calls + 2 per worker slot (two that embed, the lane of other kinds) + 2 spare + the
        # waiting calls' one LISTEN connection + the key cache's LISTEN connection
        assert (pool.size(), pool._max_overflow) == (3 + 2 * 3 + 2 + 1 + 1, 1)
    finally:
        await database.close()

    explicit = settings.model_copy(update={"memory_db_pool_size": 2})
    database, _ = await open_database(explicit, migrate=False)
    try:
        assert database.engine.pool.size() == 2  # type: ignore[attr-defined]
    finally:
        await database.close()
