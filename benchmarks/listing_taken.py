"""Listing by capture time at scale: PostgreSQL CPU per call of the ``taken`` order and filters.

The library of ``benchmarks/listing.py`` (``fill_library``: 100,000 assets of one owner in two
vaults and 10,000 of an owner who shares a vault; four in five carry a capture time) is
written into a fresh embedded PostgreSQL, and the capture-time shapes of ``listing_shapes``
are sent as the server sends them (``listing.Caller``: a prepared statement per connection,
the backend's CPU from ``/proc``), call by call in turn. The target (issue 31): at most 5 ms
of PostgreSQL CPU per listing call at 100,000 assets. It also prints every index's size.

Usage: python benchmarks/listing_taken.py [--size 100000] [--calls 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from memory_db import Database
from memory_db.database import create_engine, to_plain_url
from memory_db.testing import PostgresForTests
from memory_db.testing.library_rows import fill_library, listing_shapes

sys.path.insert(0, str(Path(__file__).parent))
import listing

MEASURED = (
    "list taken: no filter, one vault",
    "list taken: no filter, every vault",
    "list taken after: no filter, one vault",
    "list taken reversed: no filter, one vault",
    "list taken: project",
    "list taken: folder",
    "list taken: folder and subfolders",
    "list taken: source host, one vault",
    "list taken: tag, one vault",
    "list taken: taken between, one vault",
    "list taken: taken between, every vault",
    "list newest: taken between, one vault",
    "list newest: taken before, every vault",
)


async def main(size: int, calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="listing-taken-") as tmp:
        postgres = PostgresForTests(Path(tmp) / "pg")
        await postgres.start()
        try:
            url = postgres.url(await postgres.clone())
            database = Database(create_engine(url, pool_size=2))
            started = time.perf_counter()
            owner, other = listing.OWNER, listing.OTHER
            mine = await fill_library(
                database, owner, {"Library": size * 9 // 10, "Work": size // 10}
            )
            [shared] = await fill_library(database, other, {"Library": size // 10})
            await database.close()
            print(f"filled {size * 11 // 10:,} assets in {time.perf_counter() - started:.0f} s")
            shapes = {shape.name: shape for shape in listing_shapes(mine, shared)}
            callers: list[tuple[str, listing.Caller]] = []
            for name in MEASURED:
                connection: Any = await asyncpg.connect(to_plain_url(url))
                if shapes[name].filters.tags:  # as AssetRepository.list_visible plans a tag
                    await connection.execute("SET plan_cache_mode = force_custom_plan")
                callers.append((name, listing.Caller(connection, shapes[name].statement)))
            for _, caller in callers:  # warm: prepare, cache the pages
                for _ in range(3):
                    await caller.call()
                caller.cpu, caller.wall = 0.0, []
            for _ in range(calls):
                for _, caller in callers:
                    await caller.call()
            print("| listing (page of 25 + 1) | CPU ms / call | p50 ms |")
            print("|---|---|---|")
            for name, caller in callers:
                median = statistics.median(caller.wall)
                print(f"| {name} | {caller.cpu / calls:.1f} | {median:.1f} |")
            for name, nbytes in sorted((await listing._sizes(url)).items()):
                print(f"| `{name}` | {nbytes / 2**20:.1f} MiB |")
        finally:
            postgres.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=30)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.size, arguments.calls))
