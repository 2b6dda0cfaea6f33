"""`make bench`: the cost of the MCP tool layer over direct repository calls, same run, same DB.

Baseline: creating a folder and listing a project's folders through the repositories inside one
unit of work. Measured: the same operations as MCP tool calls through an in-process fastmcp
Client (schema validation, key authentication, vault resolution, provenance, serialisation).
Prints operations per second and the ratio tool/baseline; no assertion, no fixed threshold.
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastmcp import Client

from memory_db import Database, MemorySettings, VaultScope
from memory_db.database import create_engine
from memory_db.storage import InMemoryAssetObjectStore, UrlSigner
from memory_db.testing import PostgresForTests
from memory_tools import MemoryServices, build_memory_server
from memory_tools.operations import admin

ROUNDS = 5
PER_ROUND = 60


async def _timed(operation: Callable[[int], Awaitable[object]]) -> float:
    """Median operations per second over ROUNDS rounds of PER_ROUND operations."""
    rates = []
    counter = 0
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(PER_ROUND):
            counter += 1
            await operation(counter)
        rates.append(PER_ROUND / (time.perf_counter() - start))
    return statistics.median(rates)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        postgres = PostgresForTests(Path(tmp) / "pg")
        await postgres.start()
        name = await postgres.clone()
        database = Database(create_engine(postgres.url(name)))
        try:
            await admin.create_identity(database, "bench@example.com", 10**12)
            key = (await admin.create_key(database, "bench@example.com", ["read", "write"])).secret
            scope = VaultScope("bench@example.com", "bench@example.com/Library")
            async with database.unit_of_work() as uow:
                project = await uow.projects.create(
                    scope, name="bench", description=None, created_by="bench@example.com"
                )
            services = MemoryServices(
                database=database,
                store=InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"bench").digest())),
                settings=MemorySettings(memory_data_dir=Path(tmp) / "data"),
                default_api_key=key,
            )

            async def repo_create(i: int) -> object:
                async with database.unit_of_work() as uow:
                    return await uow.folders.create(
                        scope, project_id=project.id, parent_id=None, name=f"r{i}"
                    )

            async def repo_list(_i: int) -> object:
                async with database.unit_of_work() as uow:
                    return await uow.folders.list(scope, project.id)

            async with Client(build_memory_server(services)) as client:

                async def tool_create(i: int) -> object:
                    return await client.call_tool(
                        "image_folder_create", {"projectId": project.id, "name": f"t{i}"}
                    )

                async def tool_list(_i: int) -> object:
                    return await client.call_tool("image_folder_list", {"projectId": project.id})

                rows = []
                for label, baseline, measured in (
                    ("folder create", repo_create, tool_create),
                    ("folder list", repo_list, tool_list),
                ):
                    base_rate = await _timed(baseline)
                    tool_rate = await _timed(measured)
                    rows.append((label, base_rate, tool_rate))
        finally:
            await database.close()
            await postgres.drop(name)
            postgres.stop()

    print(f"{'operation':<16}{'repository/s':>14}{'MCP tool/s':>14}{'tool cost x':>14}")
    for label, base_rate, tool_rate in rows:
        print(f"{label:<16}{base_rate:>14.1f}{tool_rate:>14.1f}{base_rate / tool_rate:>14.2f}")
    print(
        f"(median of {ROUNDS} rounds x {PER_ROUND} operations; 'tool cost x' = time per tool call "
        "divided by time per repository call, measured in this run on this machine)"
    )


if __name__ == "__main__":
    asyncio.run(main())
