"""The test server itself (``memory_db.testing.PostgresForTests``): settings and clones."""

from __future__ import annotations

from typing import Any

import asyncpg
from sqlalchemy import text

from memory_db.database import create_engine, to_plain_url
from memory_db.testing import PostgresForTests
from memory_db.testing.clone_supply import CloneSupply
from memory_db.unit_of_work import Database


async def test_a_tests_database_runs_without_a_flush_to_disk_per_commit(
    database: Database,
) -> None:
    async with database.engine.connect() as conn:
        fsync = (await conn.execute(text("SHOW fsync"))).scalar_one()
        # A clone of the migrated template: the schema is there.
        tables = (
            await conn.execute(
                text("SELECT count(*) FROM pg_tables WHERE tablename = 'mem_assets'")
            )
        ).scalar_one()
    assert fsync == "off"
    assert tables == 1


async def _databases(postgres: PostgresForTests) -> set[str]:
    conn: Any = await asyncpg.connect(to_plain_url(postgres.admin_url))
    try:
        rows = await conn.fetch("SELECT datname FROM pg_database WHERE datname LIKE 't\\_%'")
    finally:
        await conn.close()
    return {row["datname"] for row in rows}


async def test_a_clone_supply_hands_each_fresh_clone_out_once_and_drops_every_clone(
    postgres: PostgresForTests,
) -> None:
    supply = CloneSupply(postgres)
    supply.start()
    try:
        first = await supply.take()
        # A row written in the first clone, as a test would.
        database = Database(create_engine(postgres.url(first), pool_size=1))
        try:
            async with database.engine.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO mem_identities (owner_identity, quota_bytes) VALUES ('a@example.com', 1)"
                    )
                )
        finally:
            await database.close()
        supply.give_back(first)
        second = await supply.take()
        assert second != first
        database = Database(create_engine(postgres.url(second), pool_size=1))
        try:
            async with database.engine.connect() as conn:
                identities = (
                    await conn.execute(text("SELECT count(*) FROM mem_identities"))
                ).scalar_one()
                tables = (
                    await conn.execute(
                        text("SELECT count(*) FROM pg_tables WHERE tablename = 'mem_assets'")
                    )
                ).scalar_one()
        finally:
            await database.close()
        # A fresh clone of the migrated template: the schema, and nothing a test wrote.
        assert (identities, tables) == (0, 1)
        supply.give_back(second)
    finally:
        supply.stop()
    # The used clones and the one made ahead (a third) are gone.
    assert len(supply.made) == 3 and supply.made[:2] == [first, second]
    assert not set(supply.made) & await _databases(postgres)
