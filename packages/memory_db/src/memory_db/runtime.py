"""Open and close what the settings describe: database (embedded or URL) and object store."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from memory_db.database import (
    DEFAULT_DATABASE,
    EmbeddedPostgres,
    create_engine,
    ensure_database,
    start_embedded,
)
from memory_db.errors import ConfigurationError
from memory_db.files import create_secret_file
from memory_db.logs import get_logger
from memory_db.migrate import current_revision, head_revision, upgrade
from memory_db.settings import MemorySettings
from memory_db.unit_of_work import Database

if TYPE_CHECKING:
    from memory_db.embedding import Embedder
    from memory_db.storage import AssetObjectStore, UrlSigner

# The embedders, the object stores and the vector index are imported by the functions that
# open them (open_runtime and its helpers), not here: open_database is all an operator command
# such as `admin list-keys` needs, and numpy, httpx and botocore would double its start-up.

log = get_logger(__name__)


def load_signing_secret(settings: MemorySettings) -> bytes:
    """``MEMORY_SIGNING_SECRET``, or a random secret kept (0600) in the data directory."""
    if settings.memory_signing_secret is not None:
        value = settings.memory_signing_secret.get_secret_value().encode("utf-8")
        if len(value) < 32:
            raise ConfigurationError("MEMORY_SIGNING_SECRET: must be at least 32 characters")
        return value
    path = settings.memory_data_dir / "signing.key"
    settings.memory_data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        create_secret_file(path, secrets.token_urlsafe(48).encode("ascii"))
    value = path.read_bytes().strip()
    if len(value) < 32:
        raise ConfigurationError(f"signing key file {path.name} is too short")
    return value


def build_object_store(
    settings: MemorySettings, *, public_base_url: str, signer: UrlSigner
) -> AssetObjectStore:
    """The object store ``ASSET_STORAGE_PROVIDER`` selects."""
    from memory_db.storage import LocalAssetObjectStore, S3AssetObjectStore

    if settings.asset_storage_provider == "s3":
        if not (settings.asset_s3_bucket and settings.asset_s3_region):  # settings check it too
            raise ConfigurationError(
                "ASSET_S3_BUCKET and ASSET_S3_REGION are required with ASSET_STORAGE_PROVIDER=s3"
            )
        return S3AssetObjectStore(
            bucket=settings.asset_s3_bucket,
            region=settings.asset_s3_region,
            endpoint_url=settings.asset_s3_endpoint,
            access_key_id=(
                settings.asset_s3_access_key_id.get_secret_value()
                if settings.asset_s3_access_key_id
                else None
            ),
            secret_access_key=(
                settings.asset_s3_secret_access_key.get_secret_value()
                if settings.asset_s3_secret_access_key
                else None
            ),
            force_path_style=settings.asset_s3_force_path_style,
        )
    return LocalAssetObjectStore(settings.objects_dir, signer, public_base_url)


@dataclass
class Runtime:
    """The opened database, object store and signer; close it on shutdown."""

    settings: MemorySettings
    database: Database
    store: AssetObjectStore
    signer: UrlSigner
    embedder: Embedder
    vector_index: str
    embedded: EmbeddedPostgres | None = None
    closed: bool = field(default=False)

    async def supervise(self) -> None:
        """Until cancelled, restart the embedded server whenever it dies.

        With ``MEMORY_DATABASE_URL`` there is nothing to restart: the pool replaces connections
        the server ended and reconnects once the database is back.
        """
        if self.embedded is not None:
            await supervise_embedded(self.embedded, self.database)

    async def close(self) -> None:
        """Close the store and the pool, then release the embedded server."""
        if self.closed:
            return
        self.closed = True
        await self.embedder.close()
        await self.store.close()
        await self.database.close()
        if self.embedded is not None:
            self.embedded.stop()
            log.info("embedded_postgres_released")


EMBEDDED_CHECK_SECONDS = 1.0
EMBEDDED_RETRY_MAX_SECONDS = 5.0


async def supervise_embedded(
    embedded: EmbeddedPostgres, database: Database, *, interval: float = EMBEDDED_CHECK_SECONDS
) -> None:
    """Watch the embedded postmaster until cancelled; when it dies, start it again.

    A postmaster killed from outside (OOM killer, ``kill -9``) leaves every pooled connection
    dead and nothing that would restart it. This loop notices within ``interval`` seconds,
    restarts the server (PostgreSQL's crash recovery keeps every committed transaction),
    retrying while the old server's processes linger, then empties the pool so the next
    checkout connects afresh. Calls in between fail with ``DatabaseUnavailable``.
    """
    while True:
        await anyio.sleep(interval)
        if not await anyio.to_thread.run_sync(embedded.alive):
            await _recover_embedded(embedded, database)


async def _recover_embedded(embedded: EmbeddedPostgres, database: Database) -> None:
    log.error("embedded_postgres_died", pgdata=str(embedded.pgdata))
    began = time.monotonic()
    delay = 0.25
    while True:
        try:
            started = await anyio.to_thread.run_sync(embedded.restart)
        except Exception:
            log.warning("embedded_postgres_restart_failed", exc_info=True)
            started = False
        if started or await anyio.to_thread.run_sync(embedded.alive):
            break
        await anyio.sleep(delay)
        delay = min(delay * 2, EMBEDDED_RETRY_MAX_SECONDS)
    await database.engine.dispose()  # drop connections to the dead server
    log.info(
        "embedded_postgres_recovered",
        restarted_here=started,
        seconds=round(time.monotonic() - began, 2),
    )


async def open_database(
    settings: MemorySettings, *, migrate: bool
) -> tuple[Database, EmbeddedPostgres | None]:
    """Connect to ``MEMORY_DATABASE_URL`` or start the embedded server (which migrates itself).

    ``migrate``: apply the migrations (``memory-server migrate``). The embedded server is
    migrated without being asked, but only when it is not at head already: a command against
    a running server's database (an `admin` command) then loads no migration code.
    """
    embedded: EmbeddedPostgres | None = None
    migrate_if_behind = False
    if settings.memory_database_url is None:
        settings.memory_data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        embedded = await start_embedded(
            Path(settings.postgres_dir), memory=settings.embedded_postgres_memory
        )
        await ensure_database(embedded.admin_url(), DEFAULT_DATABASE)
        url = embedded.url(DEFAULT_DATABASE)
        migrate_if_behind = True
    else:
        url = settings.memory_database_url.get_secret_value()
    engine = create_engine(
        url, pool_size=settings.db_pool_size, max_overflow=settings.memory_db_pool_overflow
    )
    try:
        revision = None if migrate else await current_revision(engine)
        if migrate or (migrate_if_behind and revision != head_revision()):
            await upgrade(engine)
            revision = await current_revision(engine)
        if revision != head_revision():
            raise ConfigurationError(
                f"database schema is at {revision or 'nothing'}, this build needs "
                f"{head_revision()}: run `memory-server migrate`"
            )
    except BaseException:
        await engine.dispose()
        if embedded is not None:
            embedded.stop()
        raise
    return Database(engine), embedded


async def open_runtime(
    settings: MemorySettings, *, public_base_url: str, migrate: bool = False
) -> Runtime:
    """Open database and object store as the settings describe."""
    from memory_db.embedding import build_embedder
    from memory_db.storage import UrlSigner

    signer = UrlSigner(load_signing_secret(settings))
    embedder = build_embedder(settings)
    database, embedded = await open_database(settings, migrate=migrate)
    try:
        vector_index = await prepare_vector_index(database, settings, embedder)
        await warn_if_index_outgrows_buffers(
            database, vector_index, embedded=settings.uses_embedded_database
        )
    except BaseException:
        await database.close()
        if embedded is not None:
            embedded.stop()
        await embedder.close()
        raise
    store = build_object_store(settings, public_base_url=public_base_url, signer=signer)
    return Runtime(
        settings=settings,
        database=database,
        store=store,
        signer=signer,
        embedder=embedder,
        vector_index=vector_index,
        embedded=embedded,
    )


async def prepare_vector_index(
    database: Database, settings: MemorySettings, embedder: Embedder
) -> str:
    """Create ``ASSET_EMBED_INDEX`` on first start, recording the embedder that fills it.

    Once the alias exists, the index it points at decides which embedder every process uses
    (``memory_db.embedding.Embedders``): after ``memory-server reindex`` switched it to another
    model or dimension, a process configured for the old one keeps working, and says so once.
    """
    from memory_db.embedding import EmbedderIdentity
    from memory_db.vectors import DEFAULT_ALIAS

    identity = EmbedderIdentity(settings.asset_embed_provider, embedder.model, embedder.dimensions)
    async with database.unit_of_work() as uow:
        name = await uow.vector_indexes.ensure_default(
            settings.asset_embed_index,
            dimensions=embedder.dimensions,
            alias=DEFAULT_ALIAS,
            element=settings.asset_embed_vector_type,
            identity=identity,
            m=settings.asset_vector_graph_m,
        )
        active = await uow.vector_indexes.identity(name)
        graph = await uow.vector_indexes.graph_m(name)
    if graph < settings.asset_vector_graph_m:
        # A graph built before 32 became the default (or with ASSET_VECTOR_GRAPH_M=16) keeps
        # working; searching a large library walks about twice the candidates it would.
        log.info(
            "vector_index_graph_narrower",
            index=name,
            graph_m=graph,
            configured_m=settings.asset_vector_graph_m,
            advice="memory-server reindex builds a new index with the configured graph",
        )
    if active is not None and active != identity:
        log.info(
            "vector_index_embedder_differs",
            index=name,
            index_embedder=str(active),
            configured_embedder=str(identity),
        )
    return name


MIB = 1024 * 1024


async def warn_if_index_outgrows_buffers(database: Database, name: str, *, embedded: bool) -> bool:
    """Log ``vector_index_exceeds_shared_buffers`` when index ``name``'s graph outgrew them.

    Called at start-up and after a reindex switched the alias. A graph larger than
    ``shared_buffers`` is read from the OS cache page by page on every search: measured at
    100,000 images (520 MB graph, 128 MB buffers), 9-13 ms of PostgreSQL CPU per text search
    (docs/scaling.md). Returns whether it warned.
    """
    async with database.unit_of_work() as uow:
        fit = await uow.vector_indexes.cache_fit(name)
    if fit.graph_fits:
        return False
    wanted_mb = -(-(fit.graph_bytes + fit.table_bytes) // MIB)  # the graph and the hot table
    advice = (
        f"set MEMORY_PG_SHARED_BUFFERS_MB to at least {wanted_mb} (or MEMORY_PG_MEMORY_MB to four "
        "times that) and restart"
        if embedded
        else f"raise the database's shared_buffers to at least {wanted_mb}MB and restart it "
        "(docs/runbooks/external-postgres.md)"
    )
    log.warning(
        "vector_index_exceeds_shared_buffers",
        index=name,
        graph_mb=round(fit.graph_bytes / MIB, 1),
        table_mb=round(fit.table_bytes / MIB, 1),
        shared_buffers_mb=round(fit.shared_buffers_bytes / MIB, 1),
        advice=advice,
    )
    return True
