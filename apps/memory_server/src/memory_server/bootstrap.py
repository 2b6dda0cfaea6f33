"""Wiring: settings → runtime (database, object store) → services. No business logic here."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import anyio

from memory_db import ConfigurationError, MemorySettings, Runtime, get_logger, open_runtime
from memory_tools import MemoryServices, ToolFailure, authenticate
from memory_tools.ingest import SafeFetcher
from memory_tools.ingest.fetch import fetch_policy
from memory_tools.ingest.images import lock_down_libvips
from memory_tools.worker import EmbeddingWorker, WorkerConfig

log = get_logger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def public_base_url(settings: MemorySettings, host: str, port: int) -> str:
    """Where signed object links point: ``MEMORY_PUBLIC_BASE_URL`` or this server's address."""
    if settings.memory_public_base_url:
        return settings.memory_public_base_url
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def stdio_api_key(settings: MemorySettings) -> str:
    """The key a stdio server acts as; ``ConfigurationError`` when ``MEMORY_API_KEY`` is unset."""
    if settings.memory_api_key is None:
        raise ConfigurationError(
            "MEMORY_API_KEY: required for --transport stdio (the server acts as that key's "
            "identity); create one with `memory-server admin create-key`"
        )
    return settings.memory_api_key.get_secret_value()


async def check_api_key(services: MemoryServices, key: str) -> None:
    """Fail at start-up, naming the variable, when the stdio key is unknown or revoked."""
    async with services.database.unit_of_work() as uow:
        try:
            await authenticate(uow, key)
        except ToolFailure as failure:
            raise ConfigurationError(f"MEMORY_API_KEY: {failure.message}") from None


@asynccontextmanager
async def running(
    settings: MemorySettings,
    *,
    base_url: str,
    default_api_key: str | None = None,
    migrate: bool = False,
    links_unavailable: str | None = None,
) -> AsyncGenerator[tuple[Runtime, MemoryServices], None]:
    """Open the runtime and services for the lifetime of the block, then close them."""
    # Before anything can decode an image: only the four accepted loaders stay reachable.
    try:
        lock_down_libvips()
    except RuntimeError as exc:
        raise ConfigurationError(str(exc)) from None
    runtime = await open_runtime(settings, public_base_url=base_url, migrate=migrate)
    fetcher = SafeFetcher(fetch_policy(settings))
    try:
        services = MemoryServices(
            database=runtime.database,
            store=runtime.store,
            settings=settings,
            default_api_key=default_api_key,
            embedder=runtime.embedder,
            fetcher=fetcher,
            links_unavailable=links_unavailable,
        )
        yield runtime, services
    finally:
        await fetcher.aclose()
        await runtime.close()


def worker_config(
    settings: MemorySettings,
    concurrency: int | None = None,
    *,
    batch_size: int | None = None,
    lease_seconds: float | None = None,
) -> WorkerConfig:
    """Worker pacing from the settings (concurrency, sweep interval) and the command line."""
    default = WorkerConfig()
    lease = lease_seconds or default.lease_seconds
    return WorkerConfig(
        concurrency=concurrency or settings.asset_embed_worker_concurrency or default.concurrency,
        batch_size=batch_size or default.batch_size,
        lease_seconds=lease,
        heartbeat_seconds=lease / 4,
        sweep_seconds=settings.asset_worker_sweep_seconds,
    )


@asynccontextmanager
async def background_worker(
    services: MemoryServices, config: WorkerConfig
) -> AsyncGenerator[EmbeddingWorker, None]:
    """Run an embedding worker beside the server for the lifetime of the block."""
    worker = EmbeddingWorker(services, config)
    async with anyio.create_task_group() as group:
        ready = anyio.Event()
        group.start_soon(lambda: worker.run(ready=ready))
        await ready.wait()
        try:
            yield worker
        finally:
            group.cancel_scope.cancel()
