"""Listing at scale: PostgreSQL CPU per listing call, before and after revision 0020, in one run.

A library (``memory_db.testing.library_rows.fill_library``: 100,000 assets of one owner in two
vaults, and 10,000 of an owner who shares a vault) is written into a fresh embedded
PostgreSQL and copied into a second database without the listing indexes of revision 0020.
Then, for each listing shape (a selection of ``listing_shapes``: every order, filter and
place, one vault and every vault, the trash), statements alternate call by call:

- before: the statement ``main`` sent before revision 0020 (every vault in one ``IN`` list,
  the statuses as parameters; reproduced below), on the database without the new indexes;
- after: ``AssetRepository.list_statement`` / ``trash_statement``, on the migrated database.

Each call is a prepared statement on its own connection (as the server sends it), and the
backend's CPU time is read from ``/proc/<pid>/stat`` around the calls: CPU ms per call is
PostgreSQL's whole work for the statement (planning and execution). Wall time per call is
measured on the client. The target (issue 31): at most 5 ms of PostgreSQL CPU per listing
call at 100,000 assets.

It also prints the new indexes' size and the cost of inserting rows with and without them.

Usage: python benchmarks/listing.py [--size 100000] [--calls 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import DateTime, and_, func, literal, select, tuple_
from sqlalchemy.dialects import postgresql

from memory_db.database import create_engine, to_plain_url
from memory_db.repositories.assets import AnySelect
from memory_db.schema import Asset, AssetObject
from memory_db.testing import PostgresForTests
from memory_db.testing.library_rows import (
    TRASH_WINDOW,
    ListingShape,
    arguments,
    fill_library,
    listing_shapes,
)
from memory_db.unit_of_work import Database

OWNER, OTHER = "lister@example.com", "sharer@example.com"
NEW_INDEXES = (
    "ix_mem_assets_listed",
    "ix_mem_assets_listed_project",
    "ix_mem_assets_listed_folder",
    "ix_mem_assets_listed_host",
    "ix_mem_assets_trash",
    "ix_mem_assets_tags",
)
MEASURED = (
    "list newest: no filter, one vault",
    "list newest: no filter, every vault",
    "list oldest: no filter, one vault",
    "list newest after: no filter, one vault",
    "list oldest after: no filter, every vault",
    "list newest: project",
    "list newest: folder",
    "list newest: folder and subfolders",
    "list newest: tag, one vault",
    "list newest: rare tag, one vault",
    "list newest: absent tag, one vault",
    "list newest: untagged, one vault",
    "list newest: one source kind, one vault",
    "list newest: two source kinds, every vault",
    "list newest: source host, one vault",
    "list newest: mime type, one vault",
    "list newest: mime type, every vault",
    "list newest: created between, one vault",
    "trash: one vault",
    "trash: every vault",
    "trash after: every vault",
)
TARGET_MS = 5.0


def baseline(shape: ListingShape) -> AnySelect:
    """The statement ``main`` sent before revision 0020 for ``shape`` (its code, reproduced)."""
    pairs = [(s.owner_identity, s.physical_vault) for s in shape.scopes]
    statuses = ["deleted"] if shape.kind == "trash" else ["processing", "ready", "failed"]
    query = (
        select(Asset, AssetObject)
        .join(
            AssetObject,
            and_(
                AssetObject.id == Asset.object_id,
                AssetObject.owner_identity == Asset.owner_identity,
            ),
        )
        .where(
            tuple_(Asset.owner_identity, Asset.vault).in_(pairs),
            Asset.status.in_(statuses),
        )
    )
    if shape.kind == "trash":
        query = query.add_columns(Asset.deleted_at).where(
            Asset.purged_at.is_(None), Asset.deleted_at > func.now() - TRASH_WINDOW
        )
        if shape.after is not None:
            position = tuple_(Asset.deleted_at, Asset.id)
            marker = tuple_(
                literal(shape.after[0], DateTime(timezone=True)), literal(shape.after[1])
            )
            query = query.where(position < marker)
        return query.order_by(Asset.deleted_at.desc(), Asset.id.desc()).limit(shape.limit)
    query = query.where(*shape.filters.conditions())
    if shape.after is not None:
        position = tuple_(Asset.created_at, Asset.id)
        marker = tuple_(literal(shape.after[0], DateTime(timezone=True)), literal(shape.after[1]))
        query = query.where(position < marker if shape.newest_first else position > marker)
    if shape.newest_first:
        return query.order_by(Asset.created_at.desc(), Asset.id.desc()).limit(shape.limit)
    return query.order_by(Asset.created_at.asc(), Asset.id.asc()).limit(shape.limit)


def _cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


class Caller:
    """One connection sending one statement, prepared, and the CPU its backend spends."""

    def __init__(self, connection: Any, statement: AnySelect) -> None:
        done = statement.compile(
            dialect=postgresql.asyncpg.dialect(),  # type: ignore[attr-defined]
            compile_kwargs={"render_postcompile": True},
        )
        self.connection = connection
        self.sql = done.string
        self.arguments = arguments(done)
        self.cpu = 0.0
        self.wall: list[float] = []
        self.rows = 0

    async def call(self) -> None:
        pid = self.connection.get_server_pid()
        cpu = _cpu_ms(pid)
        started = time.perf_counter()
        rows = await self.connection.fetch(self.sql, *self.arguments)
        self.wall.append((time.perf_counter() - started) * 1000)
        self.cpu += _cpu_ms(pid) - cpu
        self.rows = len(rows)


async def _sizes(url: str) -> dict[str, int]:
    connection: Any = await asyncpg.connect(to_plain_url(url))
    try:
        rows = await connection.fetch(
            "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
            "WHERE relname = 'mem_assets'"
        )
    finally:
        await connection.close()
    return {name: size for name, size in rows}


async def _insert_cost(url: str, rows: int, owner: str) -> float:
    """Seconds to write a new ``owner`` with ``rows`` assets (and their objects)."""
    database = Database(create_engine(url, pool_size=1))
    try:
        started = time.perf_counter()
        await fill_library(database, owner, {"Library": rows})
        return time.perf_counter() - started
    finally:
        await database.close()


async def main(size: int, calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="listing-") as tmp:
        postgres = PostgresForTests(Path(tmp) / "pg")
        await postgres.start()
        try:
            after_db = await postgres.clone()
            url = postgres.url(after_db)
            database = Database(create_engine(url, pool_size=2))
            started = time.perf_counter()
            mine = await fill_library(
                database, OWNER, {"Library": size * 9 // 10, "Work": size // 10}
            )
            [shared] = await fill_library(database, OTHER, {"Library": size // 10})
            await database.close()
            print(f"filled {size * 11 // 10:,} assets in {time.perf_counter() - started:.0f} s")
            admin: Any = await asyncpg.connect(to_plain_url(postgres.admin_url))
            before_db = "before_" + after_db
            await admin.execute(f'CREATE DATABASE "{before_db}" TEMPLATE "{after_db}"')
            await admin.close()
            before_url = postgres.url(before_db)
            drop: Any = await asyncpg.connect(to_plain_url(before_url))
            for name in NEW_INDEXES:
                await drop.execute(f"DROP INDEX {name}")
            await drop.execute("VACUUM ANALYZE mem_assets")
            await drop.close()
            sizes = await _sizes(url)

            shapes = {s.name: s for s in listing_shapes(mine, shared)}
            pairs: list[tuple[str, Caller, Caller]] = []
            for name in MEASURED:
                shape = shapes[name]
                before = Caller(await asyncpg.connect(to_plain_url(before_url)), baseline(shape))
                connection = await asyncpg.connect(to_plain_url(url))
                if shape.filters.tags:  # as AssetRepository.list_visible plans a tag listing
                    await connection.execute("SET plan_cache_mode = force_custom_plan")
                after = Caller(connection, shape.statement)
                pairs.append((name, before, after))
            for _, before, after in pairs:  # warm: prepare, cache the pages
                for _ in range(3):
                    await before.call()
                    await after.call()
            for caller in [c for _, b, a in pairs for c in (b, a)]:
                caller.cpu, caller.wall = 0.0, []
            for _ in range(calls):
                for _, before, after in pairs:
                    await before.call()
                    await after.call()

            print(
                f"\nPostgreSQL CPU ms per call (backend /proc), wall p50 ms; {calls} calls each,"
                " before and after alternating; rows = rows returned"
            )
            print(
                f"{'shape':45} {'before cpu':>10} {'after cpu':>10} {'before p50':>10} "
                f"{'after p50':>10} {'rows':>5}  target"
            )
            failed = 0
            for name, before, after in pairs:
                b_cpu, a_cpu = before.cpu / calls, after.cpu / calls
                ok = a_cpu <= TARGET_MS
                failed += not ok
                print(
                    f"{name:45} {b_cpu:10.2f} {a_cpu:10.2f} "
                    f"{statistics.median(before.wall):10.2f} {statistics.median(after.wall):10.2f} "
                    f"{after.rows:5d}  {'PASS' if ok else 'FAIL'}"
                )
                if before.rows != after.rows:
                    print(f"  !! rows differ: before {before.rows}, after {after.rows}")
            for _, before, after in pairs:
                await before.connection.close()
                await after.connection.close()

            print("\nindex sizes (mem_assets), MiB:")
            for name in NEW_INDEXES:
                print(f"  {name:32} {sizes[name] / 2**20:8.1f}")
            print(
                f"  {'(all other mem_assets indexes)':32} "
                f"{sum(v for k, v in sizes.items() if k not in NEW_INDEXES) / 2**20:8.1f}"
            )

            rows = 10_000
            costs: dict[str, list[float]] = {"before": [], "after": []}
            for turn in range(2):  # interleaved
                owner = f"insert{turn}@example.com"
                costs["before"].append(await _insert_cost(before_url, rows, owner))
                costs["after"].append(await _insert_cost(url, rows, owner))
            b, a = min(costs["before"]), min(costs["after"])
            print(
                f"\ninsert {rows:,} assets (one INSERT ... SELECT each for objects and assets, "
                f"best of 2): without the new indexes {b:.2f} s, with them {a:.2f} s "
                f"({a / b:.2f}x)"
            )
            print(
                f"\nlisting within {TARGET_MS} ms of PostgreSQL CPU per call: "
                f"{'PASS' if not failed else f'FAIL ({failed} shapes)'}"
            )
        finally:
            postgres.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=30)
    options = parser.parse_args()
    asyncio.run(main(options.size, options.calls))
