"""The test server itself (``memory_db.testing.PostgresForTests``): settings and clones."""

from __future__ import annotations

from sqlalchemy import text

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
