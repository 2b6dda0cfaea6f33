"""Alembic migrations, driven programmatically over an async engine."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory_db.errors import ConfigurationError

# The oldest versions the schema and queries need (docs/runbooks/external-postgres.md): pgvector
# 0.8.0 for HNSW iterative scans (hnsw.iterative_scan, hnsw.max_scan_tuples), PostgreSQL 15 as
# the oldest major version its project still supports.
MIN_POSTGRES = (15,)
MIN_PGVECTOR = (0, 8, 0)


def include_name(name: str | None, type_: str, _parent_names: Any) -> bool:
    """Compare only tables the models declare: versioned vector tables are made at runtime."""
    from memory_db.schema import Base

    if type_ == "table":
        return name in Base.metadata.tables
    return True


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at the migrations shipped in this package."""
    config = Config()
    location = resources.files("memory_db") / "migrations"
    config.set_main_option("script_location", str(location))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision shipped in this package."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("no migrations found")
    return head


def version_tuple(version: str) -> tuple[int, ...]:
    """The leading dotted numbers of a version string: ``"0.8.1"`` → ``(0, 8, 1)``."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def unsupported(postgres_num: int, pgvector: str | None) -> str | None:
    """Why a server of ``server_version_num`` with this pgvector cannot hold the schema."""
    major = postgres_num // 10000
    if (major,) < MIN_POSTGRES:
        return f"PostgreSQL {major} is not supported; use PostgreSQL {MIN_POSTGRES[0]} or newer"
    needed = ".".join(map(str, MIN_PGVECTOR))
    if pgvector is None:
        return (
            f"the vector extension (pgvector {needed} or newer) is not available on this "
            "PostgreSQL; install pgvector, or have a superuser run CREATE EXTENSION vector"
        )
    if version_tuple(pgvector) < MIN_PGVECTOR:
        return (
            f"pgvector {pgvector} is too old; {needed} or newer is needed "
            "(ALTER EXTENSION vector UPDATE after upgrading the package)"
        )
    return None


async def check_server(conn: AsyncConnection) -> None:
    """Refuse a PostgreSQL or pgvector older than the schema needs (``ConfigurationError``).

    The installed extension's version counts; before it is created, the version the server
    would create.
    """
    postgres_num = int(await conn.scalar(text("SHOW server_version_num")) or 0)
    pgvector = await conn.scalar(
        text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    ) or await conn.scalar(
        text("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
    )
    reason = unsupported(postgres_num, None if pgvector is None else str(pgvector))
    if reason is not None:
        raise ConfigurationError(f"MEMORY_DATABASE_URL: {reason}")


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply migrations up to ``revision``, after checking the server's versions."""

    def run(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with engine.begin() as conn:
        await check_server(conn)
        # Several processes starting at once on one database (`serve --processes N`, servers
        # behind a proxy) would otherwise run the same migration side by side, and all but one
        # fail on the tables the first created. The lock lasts until this transaction ends;
        # who waited then finds the schema at head and has nothing to do.
        await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('memory_migrations'))"))
        await conn.run_sync(run)


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    """Revert migrations down to ``revision``."""

    def run(connection: Connection) -> None:
        command.downgrade(alembic_config(connection), revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or None for an empty database."""

    def run(connection: Connection) -> Any:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(run)
