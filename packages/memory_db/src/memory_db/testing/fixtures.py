"""pytest fixtures: PostgreSQL, data directories for server processes, and S3 peers.

PostgreSQL: ``postgres``, ``database_url``, ``database``. Data directories for ``memory-server``
processes on the embedded default: ``migrated_pgdata``, ``embedded_data_dir``.

``postgres``, ``clone_supply``, ``migrated_pgdata``, ``moto_peer`` and ``s3rver_peer`` live for
the session (made on first use); ``database_url``, ``database`` and ``embedded_data_dir`` are
per test.

Load them from a root ``conftest.py`` with ``pytest_plugins = ["memory_db.testing.fixtures"]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog

from memory_db.database import create_engine
from memory_db.testing import PostgresForTests, copy_data_directory, make_migrated_data_directory
from memory_db.testing.clone_supply import CloneSupply
from memory_db.testing.s3_peers import MotoPeer, S3Peer, S3rverPeer, find_s3rver
from memory_db.unit_of_work import Database


def _run_apart(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end on an event loop of its own thread.

    A session fixture is made on first use, which may be inside a running event loop (a
    Playwright page's, an async test's), where ``asyncio.run`` refuses to start.
    """
    with ThreadPoolExecutor(max_workers=1) as apart:
        apart.submit(asyncio.run, work).result()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresForTests]:
    """One real PostgreSQL 18 + pgvector for the whole session, with a migrated template.

    Per pytest-xdist worker (a session each), under the worker's own base temp dir. Not durable
    (``fsync = off``): see :mod:`memory_db.testing`.
    """
    server = PostgresForTests(tmp_path_factory.mktemp("pg") / "data", durable=False)
    _run_apart(server.start())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def migrated_pgdata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped embedded-PostgreSQL data directory as a server's first start leaves it.

    Made once per session (per pytest-xdist worker, under its own base temp dir); tests get
    copies through ``embedded_data_dir``. Not durable, like ``postgres``.
    """
    pgdata = tmp_path_factory.mktemp("pg-migrated") / "postgres"
    _run_apart(make_migrated_data_directory(pgdata, durable=False))
    return pgdata


@pytest.fixture
def embedded_data_dir(tmp_path: Path, migrated_pgdata: Path) -> Path:
    """``tmp_path / "data"``, a ``MEMORY_DATA_DIR`` whose database is made and migrated already.

    A ``memory-server`` process started on it skips initdb and the migrations (seconds each
    time) and is otherwise what it is on its first start. Tests of that first start (initdb,
    migrating an empty database) use an empty directory instead.
    """
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    copy_data_directory(migrated_pgdata, data_dir / "postgres")
    return data_dir


@asynccontextmanager
async def _dropped_after(postgres: PostgresForTests, name: str) -> AsyncGenerator[str]:
    """The URL of database ``name``, dropped when the block ends."""
    try:
        yield postgres.url(name)
    finally:
        await postgres.drop(name)


@pytest.fixture(scope="session")
def clone_supply(postgres: PostgresForTests) -> Iterator[CloneSupply]:
    """Clones of the session's template made one ahead and dropped after use (per worker).

    See :mod:`memory_db.testing.clone_supply`: a test's set-up and teardown no longer wait for
    a ``CREATE DATABASE`` and a ``DROP DATABASE`` on two new connections.
    """
    supply = CloneSupply(postgres)
    supply.start()
    try:
        yield supply
    finally:
        supply.stop()


@pytest.fixture
async def database_url(postgres: PostgresForTests, clone_supply: CloneSupply) -> AsyncIterator[str]:
    """A fresh database cloned from the migrated template, dropped after the test."""
    name = await clone_supply.take()
    try:
        yield postgres.url(name)
    finally:
        clone_supply.give_back(name)


@pytest.fixture
async def empty_database_url(postgres: PostgresForTests) -> AsyncIterator[str]:
    """A fresh empty database (no tables: a server process migrates it), dropped after the test."""
    async with _dropped_after(postgres, await postgres.create_empty()) as url:
        yield url


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """A ``Database`` on a fresh migrated database."""
    db = Database(create_engine(database_url, pool_size=3))
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture(scope="session")
def moto_peer() -> Iterator[S3Peer]:
    """Moto's S3 server on 127.0.0.1 for the session."""
    peer = MotoPeer()
    described = peer.start()
    try:
        yield described
    finally:
        peer.stop()


@pytest.fixture(scope="session")
def s3rver_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Peer]:
    """s3rver (Node.js) on 127.0.0.1 for the session; fails when ``make deps-node`` was not run."""
    executable = find_s3rver(Path(__file__).parent)
    if executable is None:
        pytest.fail(
            "s3rver is not installed: run `make deps-node` (the Makefile's test target does)"
        )
    peer = S3rverPeer(tmp_path_factory.mktemp("s3rver"), executable)
    described = peer.start()
    try:
        yield described
    finally:
        peer.stop()


def pytest_configure(config: pytest.Config) -> None:
    """Render a logged exception as a plain traceback in test processes.

    A test process that never calls ``memory_db.logs.configure_logging`` keeps structlog's
    default console renderer, which draws an event's ``exc_info`` as a rich traceback with
    every frame's local variables: seconds of CPU per event when the locals are engines,
    sessions or images (an outage test spent about 10 s per refused call on it). The same
    default processors are kept; only the exception's rendering is the plain one the server
    processes use. A test that configures logging itself still replaces all of it.
    """
    del config
    processors = list(structlog.get_config()["processors"])
    if processors and isinstance(processors[-1], structlog.dev.ConsoleRenderer):
        processors[-1] = structlog.dev.ConsoleRenderer(
            exception_formatter=structlog.dev.plain_traceback
        )
        structlog.configure(processors=processors)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that runs against s3rver ``s3rver``: by parameter or by its fixture.

    So ``pytest -m "not s3rver"`` runs the rest of the suite on a machine without Node.js.
    """
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = list(callspec.params.values()) if callspec is not None else []
        if "s3rver_peer" in getattr(item, "fixturenames", ()) or "s3rver" in params:
            item.add_marker(pytest.mark.s3rver)
