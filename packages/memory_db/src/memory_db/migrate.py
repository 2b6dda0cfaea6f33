"""Alembic migrations, driven programmatically over an async engine.

Knowing whether a database is at the newest revision (:func:`head_revision`,
:func:`current_revision`) needs neither alembic nor the migration scripts: the first reads the
scripts' ``revision``/``down_revision`` lines as text, the second the ``alembic_version`` row.
Loading alembic and executing every script (one of them imports numpy) took about a third of
an `admin` command's start-up, for a database that was at head all along; alembic now loads
only when there is something to migrate.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory_db.errors import ConfigurationError

if TYPE_CHECKING:
    from alembic.config import Config

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
    from alembic.config import Config

    config = Config()
    location = resources.files("memory_db") / "migrations"
    config.set_main_option("script_location", str(location))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


_REVISION_LINE = re.compile(
    r'^(down_revision|revision)(?:\s*:[^=]*)?\s*=\s*(?:"([^"]+)"|None)\s*$', re.MULTILINE
)


@cache
def head_revision() -> str:
    """The newest revision shipped in this package (the one no other revision revises).

    Read from the scripts' text, as alembic reads their module variables; a test checks that
    both agree.
    """
    revisions: set[str] = set()
    revised: set[str] = set()
    for script in (resources.files("memory_db") / "migrations" / "versions").iterdir():
        if not script.name.endswith(".py") or script.name.startswith("_"):
            continue
        found = dict(_REVISION_LINE.findall(script.read_text("utf-8")))
        if found.get("revision"):
            revisions.add(found["revision"])
        if found.get("down_revision"):
            revised.add(found["down_revision"])
    heads = revisions - revised
    if len(heads) != 1:
        raise RuntimeError(f"expected one migration head, found {sorted(heads) or 'none'}")
    return heads.pop()


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
    from alembic import command

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
    await _forget_connections(engine)


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    """Revert migrations down to ``revision``."""
    from alembic import command

    def run(connection: Connection) -> None:
        command.downgrade(alembic_config(connection), revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)
    await _forget_connections(engine)


async def _forget_connections(engine: AsyncEngine) -> None:
    """Close the pool's connections: the next ones learn the types as the schema now has them.

    A connection knows pgvector's types by the ids they had when it opened
    (``memory_db.vector_wire``): one opened before the extension was created, or before it was
    dropped and created again, would send a vector in a form the server no longer expects.
    """
    await engine.dispose()


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or None for an empty database.

    alembic's own answer (``MigrationContext.get_current_revision``) reads the same table.
    """
    async with engine.connect() as conn:
        if await conn.scalar(text("SELECT to_regclass('alembic_version')")) is None:
            return None
        rows = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
    if len(rows) > 1:
        raise ConfigurationError(
            f"database schema has several revisions ({', '.join(sorted(r[0] for r in rows))})"
        )
    return str(rows[0][0]) if rows else None
