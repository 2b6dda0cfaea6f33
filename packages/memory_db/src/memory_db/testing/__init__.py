"""Test support shipped with memory-db: a real PostgreSQL for tests, cloned per test.

``PostgresForTests`` starts one embedded PostgreSQL, migrates a *template* database once, and
clones a fresh database from it for each test in milliseconds (``CREATE DATABASE ... TEMPLATE``).
The pytest fixtures built on it live in ``memory_db.testing.fixtures``.

The pytest fixture's server runs with ``fsync = off`` (``durable=False``,
:data:`NOT_DURABLE_SETTINGS`): its data is thrown away after the session, so a flush to disk
per commit and per cloned or dropped database buys nothing. It pays when the disk is busy (a
clone, 20 commits and a drop: 1.46 s median with fsync, 0.87 s without, on a machine shared
with other work); on a quiet machine the difference is within noise. It changes nothing a test
can observe: a killed or crashed PostgreSQL keeps every commit it acknowledged (the writes are
in the kernel's page cache); only a crash of the operating system could lose them, and no test
makes one. Benchmarks keep the default (durable) so that their figures are what a user's
server does.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import asyncpg

from memory_db.database import (
    EmbeddedPostgres,
    create_engine,
    drop_database,
    ensure_database,
    start_embedded,
    to_plain_url,
)
from memory_db.migrate import upgrade
from memory_db.pg_memory import SMALL, PostgresMemory

TEMPLATE_DATABASE = "memory_template"
# Server settings of a server started with durable=False (ALTER SYSTEM: kept across a
# restart); see the module's docstring.
NOT_DURABLE_SETTINGS = {"fsync": "off"}


class PostgresForTests:
    """One embedded server per test session, with a migrated template database."""

    def __init__(
        self, pgdata: Path, *, memory: PostgresMemory = SMALL, durable: bool = True
    ) -> None:
        self.pgdata = pgdata
        # Small by default, explicitly: a test run starts many clusters on one machine. A
        # benchmark at scale passes memory_db.pg_memory.size_for(...) as the server would.
        self.memory = memory
        self.durable = durable
        self.server: EmbeddedPostgres | None = None

    async def start(self) -> None:
        """Start the server and build the migrated template."""
        self.server = await start_embedded(self.pgdata, memory=self.memory)
        if not self.durable:
            await self._apply_settings(NOT_DURABLE_SETTINGS)
        await drop_database(self.server.admin_url(), TEMPLATE_DATABASE)
        await ensure_database(self.server.admin_url(), TEMPLATE_DATABASE)
        engine = create_engine(self.server.url(TEMPLATE_DATABASE), pool_size=1)
        try:
            await upgrade(engine)
        finally:
            await engine.dispose()

    async def _apply_settings(self, settings: dict[str, str]) -> None:
        """Set server ``settings``; connections opened from now on have them."""
        conn: Any = await asyncpg.connect(to_plain_url(self.admin_url))
        try:
            for name, value in settings.items():
                # Names and values are this module's constants, not input.
                await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

    def _running(self) -> EmbeddedPostgres:
        if self.server is None:
            raise RuntimeError("the test database server is not started: call start() first")
        return self.server

    @property
    def admin_url(self) -> str:
        """URL of the maintenance database."""
        return self._running().admin_url()

    def url(self, database: str) -> str:
        """URL of ``database`` on this server."""
        return self._running().url(database)

    async def create_empty(self) -> str:
        """A new, empty database (no schema); returns its name."""
        name = "t_" + secrets.token_hex(6)
        await ensure_database(self.admin_url, name)
        return name

    async def clone(self) -> str:
        """A new database cloned from the migrated template; returns its name."""
        name = "t_" + secrets.token_hex(6)
        await ensure_database(self.admin_url, name, template=TEMPLATE_DATABASE)
        return name

    async def drop(self, name: str) -> None:
        """Drop a test database."""
        await drop_database(self.admin_url, name)

    def stop(self) -> None:
        """Stop the server."""
        if self.server is not None:
            self.server.stop()
            self.server = None
