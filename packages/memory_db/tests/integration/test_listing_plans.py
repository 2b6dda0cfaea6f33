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

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memory_db import Database
from memory_db.repositories import AssetFilter, StoredAsset
from memory_db.schema import UNDATED_TAKEN_AT
from memory_db.testing.library_rows import (
    ABSENT_TAG,
    TAGS,
    explain,
    fill_library,
    listing_shapes,
    unbounded_reads,
)
from memory_db.unit_of_work import session_of

OWNER, OTHER = "lister@example.com", "sharer@example.com"


async def test_every_listing_reads_an_index_range_or_a_bounded_set(database: Database) -> None:
    filled = await fill_library(database, OWNER, {"Library": 6_000, "Work": 2_000})
    [shared] = await fill_library(database, OTHER, {"Library": 2_000})
    problems: dict[str, list[str]] = {}
    async with database.unit_of_work() as uow:
        # The fill really holds what the shapes filter on (not an empty table's plans).
        assert await session_of(uow).scalar(text("SELECT count(*) FROM mem_assets")) == 10_000
        connection = await session_of(uow).connection()
        driver: Any = (await connection.get_raw_connection()).driver_connection
        for shape in listing_shapes(filled, shared):
            for generic in (False, True):
                plan = await explain(driver, shape.statement, generic=generic)
                unbounded = unbounded_reads(plan)
                if unbounded:
                    problems[f"{shape.name} ({'generic' if generic else 'custom'})"] = unbounded
    assert problems == {}


def _key(row: StoredAsset, by_taken: bool) -> tuple[datetime, str]:
    """Where a listed asset stands in its order (undated: the year 1000, as in the taken order)."""
    asset = row.asset
    if by_taken:
        return (asset.taken_at or datetime.fromisoformat(UNDATED_TAKEN_AT), asset.id)
    return (asset.created_at, asset.id)


@pytest.mark.parametrize("by_taken", [False, True], ids=["created", "taken"])
@pytest.mark.parametrize("newest_first", [True, False])
async def test_paging_through_merged_vaults_and_folders_meets_every_asset_once_in_order(
    database: Database, newest_first: bool, by_taken: bool
) -> None:
    mine = await fill_library(database, OWNER, {"Library": 300, "Work": 120}, projects_per_vault=2)
    [shared] = await fill_library(database, OTHER, {"Library": 90}, projects_per_vault=1)
    project, folder, child = mine[0].folders[0]
    cases = {
        "every vault": ([v.scope for v in [*mine, shared]], AssetFilter()),
        "every vault, tagged": ([v.scope for v in mine], AssetFilter(tags=(TAGS[3],))),
        "folder and subfolders": (
            [mine[0].scope],
            AssetFilter(project_id=project, folder_ids=(folder, child)),
        ),
    }
    async with database.unit_of_work() as uow:
        for name, (scopes, filters) in cases.items():
            everything = await uow.assets.list_visible(
                scopes, filters, newest_first=newest_first, limit=10_000, by_taken=by_taken
            )
            expected = sorted((_key(row, by_taken) for row in everything), reverse=newest_first)
            # The rows came in that order too, undated ones last when the newest come first.
            assert [_key(row, by_taken) for row in everything] == expected, name
            assert len(expected) > 7, name  # more than one page
            seen: list[tuple[datetime, str]] = []
            after: tuple[datetime, str] | None = None
            while True:
                page = await uow.assets.list_visible(
                    scopes,
                    filters,
                    newest_first=newest_first,
                    limit=7,
                    after=after,
                    by_taken=by_taken,
                )
                seen += [_key(row, by_taken) for row in page]
                if len(page) < 7:
                    break
                after = seen[-1]
            assert seen == expected, name
        # The trash pages the same way, most recently deleted first, over every vault.
        scopes = [v.scope for v in [*mine, shared]]
        window = timedelta(days=7)
        whole = await uow.assets.trash(scopes, window=window, limit=10_000)
        trashed: list[tuple[datetime, str]] = []
        marker: tuple[datetime, str] | None = None
        while True:
            rows = await uow.assets.trash(scopes, window=window, limit=4, after=marker)
            trashed += [(row.deleted_at, row.stored.asset.id) for row in rows]
            if len(rows) < 4:
                break
            marker = trashed[-1]
    assert trashed == sorted(((r.deleted_at, r.stored.asset.id) for r in whole), reverse=True)
    assert len(trashed) > 8


async def test_a_tag_listing_is_planned_with_its_values(database: Database) -> None:
    # A generic plan of `tags @> $1` walks the whole vault for a tag no asset holds.
    [library] = await fill_library(database, OWNER, {"Library": 50}, projects_per_vault=1)
    async with database.unit_of_work() as uow:
        mode = text("SELECT current_setting('plan_cache_mode')")
        await uow.assets.list_visible([library.scope], AssetFilter(), newest_first=True, limit=5)
        assert await session_of(uow).scalar(mode) == "auto"
        tagged = AssetFilter(tags=(ABSENT_TAG,))
        found = await uow.assets.list_visible([library.scope], tagged, newest_first=True, limit=5)
        assert found == []
        assert await session_of(uow).scalar(mode) == "force_custom_plan"
    async with database.unit_of_work() as uow:  # transaction-local: the next one plans as usual
        assert (
            await session_of(uow).scalar(text("SELECT current_setting('plan_cache_mode')"))
            == "auto"
        )
