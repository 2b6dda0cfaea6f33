"""Test support shipped with memory-db: a real PostgreSQL for tests, cloned per test.

``PostgresForTests`` starts one embedded PostgreSQL, migrates a *template* database once, and
clones a fresh database from it for each test in milliseconds (``CREATE DATABASE ... TEMPLATE``).
The pytest fixtures built on it live in ``memory_db.testing.fixtures``.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from memory_db.database import (
    EmbeddedPostgres,
    create_engine,
    drop_database,
    ensure_database,
    start_embedded,
)
from memory_db.migrate import upgrade
from memory_db.pg_memory import SMALL, PostgresMemory

TEMPLATE_DATABASE = "memory_template"


class PostgresForTests:
    """One embedded server per test session, with a migrated template database."""

    def __init__(self, pgdata: Path, *, memory: PostgresMemory = SMALL) -> None:
        self.pgdata = pgdata
        # Small by default, explicitly: a test run starts many clusters on one machine. A
        # benchmark at scale passes memory_db.pg_memory.size_for(...) as the server would.
        self.memory = memory
        self.server: EmbeddedPostgres | None = None

    async def start(self) -> None:
        """Start the server and build the migrated template."""
        self.server = await start_embedded(self.pgdata, memory=self.memory)
        await drop_database(self.server.admin_url(), TEMPLATE_DATABASE)
        await ensure_database(self.server.admin_url(), TEMPLATE_DATABASE)
        engine = create_engine(self.server.url(TEMPLATE_DATABASE), pool_size=1)
        try:
            await upgrade(engine)
        finally:
            await engine.dispose()

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
