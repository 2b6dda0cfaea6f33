"""The database handle and its unit of work (one transaction, all repositories on it)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memory_db.database import is_connection_failure
from memory_db.errors import DatabaseUnavailable
from memory_db.repositories import (
    AccessChangeWatch,
    ApiKeyCache,
    ApiKeyRepository,
    ArtifactRepository,
    AssetRepository,
    AssetStateWatch,
    ContextRepository,
    FolderRepository,
    IdentityRepository,
    IntegrityRepository,
    JobRepository,
    NearDuplicateRepository,
    ObjectRepository,
    OpeningRepository,
    OrphanRepository,
    ProjectRepository,
    ProvenanceRepository,
    QuotaRepository,
    ReportRepository,
    SaveRepository,
    UsageRepository,
    VaultRepository,
    WebSessionCache,
    WebSessionRepository,
    WorkRepository,
    cached_api_key,
)
from memory_db.repositories.access_changes import ACCESS_CHANGED, settle_access_change

if TYPE_CHECKING:
    from memory_db.repositories.records import ApiKeyRecord
    from memory_db.vectors.repository import VectorIndexRepository

# Whether the running task (or the task that started it) has a unit of work open. Context
# variables are copied into child tasks, so a task started inside a unit of work sees it too.
_open_unit: ContextVar[bool] = ContextVar("memory_db_open_unit_of_work", default=False)


class NestedUnitOfWork(RuntimeError):
    """A unit of work was opened while the same task, or the task that started it, held one.

    Waiting for a second pooled connection while holding a first is how a full pool deadlocks:
    with enough such callers, every connection is held by one that waits for another. So it is
    refused at once, as the programming error it is, instead of stalling under load.
    """


class UnitOfWork:
    """Repositories sharing one session and one transaction.

    The session is private: the layers above memory_db reach the database only through the
    repositories (``scripts/check_layering.py`` refuses a ``.session`` read there). memory_db's
    own code and the tests read it with :func:`session_of`.
    """

    def __init__(
        self,
        session: AsyncSession,
        key_cache: ApiKeyCache | None = None,
        session_cache: WebSessionCache | None = None,
    ) -> None:
        self._session = session
        self.identities = IdentityRepository(session)
        self.api_keys = ApiKeyRepository(session, key_cache)
        self.vaults = VaultRepository(session)
        self.projects = ProjectRepository(session)
        self.folders = FolderRepository(session)
        self.provenance = ProvenanceRepository(session)
        self.usage = UsageRepository(session)
        self.quota = QuotaRepository(session)
        self.objects = ObjectRepository(session)
        self.assets = AssetRepository(session)
        self.jobs = JobRepository(session)
        self.orphans = OrphanRepository(session)
        self.integrity = IntegrityRepository(session)
        self.reports = ReportRepository(session)
        self.artifacts = ArtifactRepository(session)
        self.work = WorkRepository(session)
        self.web_sessions = WebSessionRepository(session, session_cache)
        self.contexts = ContextRepository(session)
        self.saves = SaveRepository(session)
        self.openings = OpeningRepository(session)
        self.near_duplicates = NearDuplicateRepository(session)
        self._vector_indexes: VectorIndexRepository | None = None
        self._after_commit: list[Callable[[], None]] = []

    @property
    def vector_indexes(self) -> VectorIndexRepository:
        """The vector indexes: the active one, rebuilds, searches and completions.

        Made on first use: it brings numpy, pgvector and the index DDL, which an operator
        command on identities or keys never needs (``apps/memory_server/tests/test_startup.py``).
        """
        if self._vector_indexes is None:
            from memory_db.vectors.repository import VectorIndexRepository

            self._vector_indexes = VectorIndexRepository(self._session)
        return self._vector_indexes

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once this unit's transaction has committed (never on a rollback).

        For effects outside the database that must agree with it, such as counting a change
        in the process's metrics: a change rolled back was never made, so it is not counted.
        """
        self._after_commit.append(callback)

    def _committed(self) -> None:
        for callback in self._after_commit:
            callback()

    @asynccontextmanager
    async def savepoint(self) -> AsyncGenerator[None, None]:
        """A savepoint: when the block raises, only what it wrote is rolled back.

        The exception still leaves the block; the unit's transaction goes on with what was
        written before it, so a caller can catch the error and carry on.
        """
        async with self._session.begin_nested():
            yield


def session_of(unit: UnitOfWork) -> AsyncSession:
    """The SQLAlchemy session of ``unit``: for memory_db's own statements and for tests.

    Never above memory_db, where SQL belongs behind a repository method
    (``scripts/check_layering.py`` refuses this import there).
    """
    return unit._session  # pyright: ignore[reportPrivateUsage]


@asynccontextmanager
async def _one_per_task() -> AsyncGenerator[None, None]:
    """The rules of every way to the database: one per task, outages as DatabaseUnavailable.

    A second one opened while the task (or the task that started it) holds one raises
    ``NestedUnitOfWork``; a lost or refused connection leaves as ``DatabaseUnavailable``.
    """
    if _open_unit.get():
        raise NestedUnitOfWork(
            "a unit of work is already open in this task: finish it before opening another"
        )
    marker = _open_unit.set(True)
    try:
        yield
    except Exception as exc:
        if is_connection_failure(exc):
            raise DatabaseUnavailable("the database is unavailable") from exc
        raise
    finally:
        _open_unit.reset(marker)


class Database:
    """An engine and its session factory; made in an app's bootstrap, closed there."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # This process's one LISTEN connection for callers waiting on an asset's state.
        self.asset_states = AssetStateWatch(engine)
        # What tells this process's key cache that access changed. Nothing is cached until
        # someone runs it (a server does, beside its pool: ``AccessChangeWatch.run``).
        self.access_changes = AccessChangeWatch(engine)
        self.key_cache = ApiKeyCache(self.access_changes)
        self.session_cache = WebSessionCache(self.access_changes)
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    def cached_api_key(self, secret: str) -> ApiKeyRecord | None:
        """The active key ``secret`` from this process's key cache: no connection is taken.

        None when the cache cannot say (see :func:`cached_api_key`); then check it in a unit
        of work (``api_keys.use``). An HTTP request's bearer check asks here first: a pool
        checkout and a session for a key the cache holds cost about 0.1 ms of every call.
        """
        return cached_api_key(self.key_cache, secret)

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncGenerator[UnitOfWork, None]:
        """Open a transaction: committed when the block succeeds, rolled back when it raises.

        A lost or refused connection (at the start, inside the block or at commit) leaves as
        ``DatabaseUnavailable``, the one error callers need to know for an outage.

        One task holds at most one unit of work at a time; opening a second inside the first
        (or in a task started inside it) raises ``NestedUnitOfWork``. Together with a pool at
        least as large as the number of tasks admitted at once, no checkout can then wait for
        a connection that only a waiting task could give back.
        """
        async with _one_per_task(), self._sessions() as session:
            async with session.begin():
                unit = UnitOfWork(session, self.key_cache, self.session_cache)
                yield unit
            if session.info.pop(ACCESS_CHANGED, False):
                # A revoked key or changed grant: no process may still believe a cache.
                await settle_access_change(self.engine)
            unit._committed()  # pyright: ignore[reportPrivateUsage]

    @asynccontextmanager
    async def single_statements(self) -> AsyncGenerator[UnitOfWork, None]:
        """Repositories outside any transaction: each statement commits on its own.

        No BEGIN and COMMIT round trips, for work that is one statement on a hot path (the key
        check of every HTTP request and tool call). Never for statements that must succeed or
        fail together, or reads that must agree with each other. Outages, and the one
        checkout per task, as in :meth:`unit_of_work`.
        """
        async with _one_per_task():
            async with self.engine.connect() as connection:
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                async with AsyncSession(connection, expire_on_commit=False) as session:
                    unit = UnitOfWork(session, self.key_cache, self.session_cache)
                    yield unit
                    changed = session.info.pop(ACCESS_CHANGED, False)
            if changed:  # with the connection given back: never wait for a second one
                await settle_access_change(self.engine)
            unit._committed()  # pyright: ignore[reportPrivateUsage]

    async def close(self) -> None:
        """Dispose the engine's connection pool."""
        await self.engine.dispose()
