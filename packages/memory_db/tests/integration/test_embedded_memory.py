"""The embedded PostgreSQL starts with the memory settings it is given, new or existing."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text
from structlog.testing import capture_logs

from memory_db.database import DEFAULT_DATABASE, start_embedded, to_plain_url
from memory_db.pg_memory import CONF_FILE, SMALL, PostgresMemory
from memory_db.runtime import open_database, open_runtime, warn_if_index_outgrows_buffers
from memory_db.settings import MemorySettings
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import session_of

SETTINGS = ("shared_buffers", "effective_cache_size", "work_mem", "maintenance_work_mem")


async def _shown(url: str) -> dict[str, str]:
    conn: Any = await asyncpg.connect(to_plain_url(url))
    try:
        rows = await conn.fetch(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[])",
            list(SETTINGS),
        )
    finally:
        await conn.close()
    return {row["name"]: _mb(int(row["setting"]), row["unit"]) for row in rows}


def _mb(setting: int, unit: str) -> str:
    # pg_settings gives shared_buffers and effective_cache_size in 8 kB pages, the others in kB.
    per = {"8kB": 8, "kB": 1}[unit]
    return f"{setting * per // 1024}MB"


@pytest.mark.slow
async def test_a_new_and_an_existing_data_directory_start_with_the_given_memory(
    tmp_path: Path,
) -> None:
    pgdata = tmp_path / "pg"
    first = PostgresMemory(
        shared_buffers_mb=48, effective_cache_size_mb=300, work_mem_mb=6, maintenance_work_mem_mb=80
    )
    server = await start_embedded(pgdata, memory=first)
    try:
        assert await _shown(server.admin_url()) == first.settings()
    finally:
        server.stop()
    # The same (now initialised) directory, started again with other figures: they apply.
    second = PostgresMemory(
        shared_buffers_mb=64, effective_cache_size_mb=512, work_mem_mb=8, maintenance_work_mem_mb=96
    )
    server = await start_embedded(pgdata, memory=second)
    try:
        assert await _shown(server.admin_url()) == second.settings()
    finally:
        server.stop()
    conf = (pgdata / "postgresql.conf").read_text()
    assert conf.count(f"include_if_exists = '{CONF_FILE}'") == 1  # included once, not per start


@pytest.mark.slow
async def test_the_server_runs_with_the_settings_overrides(tmp_path: Path) -> None:
    settings = MemorySettings(
        memory_data_dir=tmp_path / "data",
        memory_pg_memory_mb=1024,
        memory_pg_shared_buffers_mb=40,
        memory_pg_work_mem_mb=5,
    )
    database, embedded = await open_database(settings, migrate=False)
    try:
        assert embedded is not None
        assert await _shown(embedded.url(DEFAULT_DATABASE)) == {
            "shared_buffers": "40MB",  # overridden
            "effective_cache_size": "512MB",  # half of MEMORY_PG_MEMORY_MB
            "work_mem": "5MB",  # overridden
            "maintenance_work_mem": "128MB",  # an eighth of MEMORY_PG_MEMORY_MB
        }
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()


async def test_the_test_cluster_is_small(postgres: PostgresForTests) -> None:
    # The suite starts many clusters: none may size itself from the machine.
    assert await _shown(postgres.admin_url) == SMALL.settings()


def _fill(name: str, rows: int) -> list[str]:
    """SQL that puts ``rows`` random 1,024-d vectors in index table ``name``, graph rebuilt."""
    return [
        f"DROP INDEX {name}_hnsw",  # built once at the end: quicker than row by row
        f"INSERT INTO {name} (id, asset_id, object_id, owner_identity, vault, representation, "
        "model, dimensions, mime_type, source_kind, created_at, embedding, embedding_bits) "
        "SELECT encode(sha256(g::text::bytea), 'hex'), 'a' || g, 'o' || g, 'owner', 'v', "
        "'visual', 'm', 1024, 'image/png', 'upload', now(), "
        "(SELECT array_agg(random()) FROM generate_series(1, 1024) WHERE g > 0)::vector, "
        "repeat('1', 1024)::bit(1024) "
        f"FROM generate_series(1, {rows}) g",
        f"CREATE INDEX {name}_hnsw ON {name} USING hnsw (embedding vector_cosine_ops)",
    ]


@pytest.mark.slow
async def test_a_vector_index_larger_than_shared_buffers_is_logged_at_start(
    tmp_path: Path,
) -> None:
    settings = MemorySettings(
        memory_data_dir=tmp_path / "data",
        memory_pg_memory_mb=1024,
        memory_pg_shared_buffers_mb=16,  # the smallest allowed
        asset_embed_vector_type="vector",  # 4 kB a vector: few rows outgrow 16 MB
    )
    with capture_logs() as logs:
        runtime = await open_runtime(settings, public_base_url="http://127.0.0.1:9")
    try:
        assert not _warnings(logs)  # an empty index fits
        async with runtime.database.unit_of_work() as uow:
            for statement in _fill(runtime.vector_index, 2500):
                await session_of(uow).execute(text(statement))
        fit = await warn_if_index_outgrows_buffers(
            runtime.database, runtime.vector_index, embedded=True
        )
        assert fit  # as after a reindex: the graph is now larger than the buffers
    finally:
        await runtime.close()
    with capture_logs() as logs:
        runtime = await open_runtime(settings, public_base_url="http://127.0.0.1:9")
    await runtime.close()
    [warning] = _warnings(logs)
    assert warning["index"] == runtime.vector_index
    assert warning["shared_buffers_mb"] == 16.0
    assert warning["graph_mb"] > 16.0 and warning["table_mb"] > 0
    assert "MEMORY_PG_SHARED_BUFFERS_MB" in warning["advice"]
    assert warning["log_level"] == "warning"


def _warnings(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == "vector_index_exceeds_shared_buffers"]
