"""Listing at scale: every listing statement reads an index range or a bounded set, never all.

A library of 10,000 assets (several vaults, owners, projects, folders, tags, kinds,
types, a trash) is written and analysed; then every shape of listing statement the tools and
the web app send (``memory_db.testing.library_rows.listing_shapes``, built by the repository
itself) is explained, planned both ways a prepared statement can be: with its values (a
custom plan) and without them (the generic plan PostgreSQL caches after five executions).
No plan may read the assets table sequentially, or sort rows it read without a bound
(docs/scaling.md#listing-at-scale has the figures at 100,000 assets).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from memory_db import Database
from memory_db.testing.library_rows import (
    explain,
    fill_library,
    listing_shapes,
    unbounded_reads,
)

OWNER, OTHER = "lister@example.com", "sharer@example.com"


async def test_every_listing_reads_an_index_range_or_a_bounded_set(database: Database) -> None:
    filled = await fill_library(database, OWNER, {"Library": 6_000, "Work": 2_000})
    [shared] = await fill_library(database, OTHER, {"Library": 2_000})
    problems: dict[str, list[str]] = {}
    async with database.unit_of_work() as uow:
        # The fill really holds what the shapes filter on (not an empty table's plans).
        assert await uow.session.scalar(text("SELECT count(*) FROM mem_assets")) == 10_000
        connection = await uow.session.connection()
        driver: Any = (await connection.get_raw_connection()).driver_connection
        for shape in listing_shapes(filled, shared):
            for generic in (False, True):
                plan = await explain(driver, shape.statement, generic=generic)
                unbounded = unbounded_reads(plan)
                if unbounded:
                    problems[f"{shape.name} ({'generic' if generic else 'custom'})"] = unbounded
    assert problems == {}
