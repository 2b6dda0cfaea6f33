"""pytest fixtures: ``postgres`` (session), ``database_url`` and ``database`` (per test).

Load them from a root ``conftest.py`` with ``pytest_plugins = ["memory_db.testing.fixtures"]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from memory_db.database import create_engine
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresForTests]:
    """One real PostgreSQL 18 + pgvector for the whole session, with a migrated template."""
    server = PostgresForTests(tmp_path_factory.mktemp("pg") / "data")
    asyncio.run(server.start())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def database_url(postgres: PostgresForTests) -> AsyncIterator[str]:
    """A fresh database cloned from the migrated template, dropped after the test."""
    name = await postgres.clone()
    try:
        yield postgres.url(name)
    finally:
        await postgres.drop(name)


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """A ``Database`` on a fresh migrated database."""
    db = Database(create_engine(database_url, pool_size=3))
    try:
        yield db
    finally:
        await db.close()
