"""The database handle and its unit of work (one transaction, all repositories on it)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memory_db.database import is_connection_failure
from memory_db.errors import DatabaseUnavailable
from memory_db.repositories import (
    ApiKeyRepository,
    AssetRepository,
    FolderRepository,
    IdentityRepository,
    JobRepository,
    ObjectRepository,
    OrphanRepository,
    ProjectRepository,
    ProvenanceRepository,
    QuotaRepository,
    UsageRepository,
    VaultRepository,
)


class UnitOfWork:
    """Repositories sharing one session and one transaction."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.identities = IdentityRepository(session)
        self.api_keys = ApiKeyRepository(session)
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


class Database:
    """An engine and its session factory; made in an app's bootstrap, closed there."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncGenerator[UnitOfWork, None]:
        """Open a transaction: committed when the block succeeds, rolled back when it raises.

        A lost or refused connection (at the start, inside the block or at commit) leaves as
        ``DatabaseUnavailable``, the one error callers need to know for an outage.
        """
        try:
            async with self._sessions() as session, session.begin():
                yield UnitOfWork(session)
        except Exception as exc:
            if is_connection_failure(exc):
                raise DatabaseUnavailable("the database is unavailable") from exc
            raise

    @asynccontextmanager
    async def single_statements(self) -> AsyncGenerator[UnitOfWork, None]:
        """Repositories outside any transaction: each statement commits on its own.

        No BEGIN and COMMIT round trips, for work that is one statement on a hot path (the key
        check of every HTTP request and tool call). Never for statements that must succeed or
        fail together, or reads that must agree with each other. Outages as in
        :meth:`unit_of_work`.
        """
        try:
            async with self.engine.connect() as connection:
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                async with AsyncSession(connection, expire_on_commit=False) as session:
                    yield UnitOfWork(session)
        except Exception as exc:
            if is_connection_failure(exc):
                raise DatabaseUnavailable("the database is unavailable") from exc
            raise

    async def close(self) -> None:
        """Dispose the engine's connection pool."""
        await self.engine.dispose()
