"""``benchmarks/load.py`` times save -> searchable to the commit that made the asset ready.

Work after that commit rewrites the asset's row (the text OCR reads, then its fused vector), so
the row's own ``xmin`` names the last of it, not the moment the asset was first found. The
benchmark's trigger notes the transaction that first made each asset ``ready``; this test runs
it on a real database: the noted transaction is the one that made the asset ready, whatever
rewrote the row afterwards.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import text

from memory_db import Database
from memory_db.testing.library_rows import fill_library
from memory_db.unit_of_work import session_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark scripts import each other from it
load: Any = importlib.import_module("load")

OWNER = "bench@example.com"


async def _write(database: Database, statement: str, asset: str) -> str:
    """Run ``statement`` on ``asset`` in a transaction of its own; its row's new ``xmin``."""
    async with database.unit_of_work() as uow:
        written = await session_of(uow).execute(text(statement), {"a": asset})
        return str(written.scalar_one())


async def test_the_transaction_that_first_made_an_asset_ready_is_the_one_timed(
    database: Database,
) -> None:
    await fill_library(database, OWNER, {"Library": 100})  # one asset in a hundred processing
    await load.note_ready_transactions(database)
    async with database.unit_of_work() as uow:
        asset = (
            await session_of(uow).execute(
                text("SELECT id FROM mem_assets WHERE status = 'processing' LIMIT 1")
            )
        ).scalar_one()

    readied = await _write(
        database, "UPDATE mem_assets SET status = 'ready' WHERE id = :a RETURNING xmin", asset
    )
    # Later work on the ready asset, as OCR's completion and its fused vector's write: the
    # status is set again to what it was, and the row gets a new version.
    rewritten = await _write(
        database,
        "UPDATE mem_assets SET status = status, ocr_text = 'read later', updated_at = now()"
        " WHERE id = :a RETURNING xmin",
        asset,
    )
    assert rewritten != readied

    async with database.unit_of_work() as uow:
        noted = (
            await session_of(uow).execute(
                text(f"SELECT xid::text FROM {load.READY_TABLE} WHERE asset_id = :a"),
                {"a": asset},
            )
        ).scalar_one()
        others = (
            await session_of(uow).execute(text(f"SELECT count(*) FROM {load.READY_TABLE}"))
        ).scalar_one()
    assert noted == readied
    assert others == 1  # the assets ready before the trigger was added are not noted
