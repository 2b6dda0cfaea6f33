"""Alembic migrations, driven programmatically over an async engine."""

from __future__ import annotations

from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine


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


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply migrations up to ``revision``."""

    def run(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with engine.begin() as conn:
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
