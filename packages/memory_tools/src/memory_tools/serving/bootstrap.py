"""Wiring: settings → runtime (database, object store) → services. No business logic here."""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import anyio

from memory_db import ConfigurationError, MemorySettings, Runtime, get_logger, open_runtime
from memory_db.describing import build_describer
from memory_tools import MemoryServices, ToolFailure, authenticate
from memory_tools.ingest import SafeFetcher
from memory_tools.ingest.fetch import fetch_policy
from memory_tools.ingest.images import lock_down_libvips
from memory_tools.jobs.worker import JobWorker, WorkerConfig

# Re-exported (links, serve): defined apart so that parsing a command line does not load this.
from memory_tools.serving.defaults import DEFAULT_HOST as DEFAULT_HOST
from memory_tools.serving.defaults import DEFAULT_PORT as DEFAULT_PORT
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.calls import write_key_activity

log = get_logger(__name__)


def public_base_url(settings: MemorySettings, host: str, port: int) -> str:
    """Where signed object links point: ``MEMORY_PUBLIC_BASE_URL`` or this server's address."""
    if settings.memory_public_base_url:
        return settings.memory_public_base_url
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def bind_listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening, for uvicorn to serve on.

    A taken or forbidden address is a ``ConfigurationError`` naming it and how to pick another,
    so the command ends with one line and exit status 2 instead of a traceback.
    """
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigurationError(f"--host: cannot resolve {host!r} ({exc})") from None
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a restart may reuse a port whose old connections are in TIME_WAIT.
        # On Linux this never lets two servers listen on one port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise ConfigurationError(
                f"{shown} is already in use (another server?): stop it, or choose another "
                "port with --port (make run PORT=...)"
            ) from None
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationError(f"cannot listen on {shown}: {reason}") from None
    return sock


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
async def supervised(runtime: Runtime) -> AsyncGenerator[None, None]:
    """Run ``runtime.supervise`` and the access-change listener beside the block.

    ``supervise`` restarts a dead embedded PostgreSQL; the listener (``Database.access_changes``)
    lets this process's calls find active keys in its cache, and clears it on every change.

    What the block raises leaves as itself, not wrapped in the task group's exception group, so
    callers still see a ``ConfigurationError`` or ``Terminated`` as such.
    """
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(runtime.supervise)
            # Lets calls find active keys in this process's cache (cleared on any change).
            group.start_soon(runtime.database.access_changes.run)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


def warn_of_dev_hosts(settings: MemorySettings) -> None:
    """One warning naming the ``ASSET_FETCH_DEV_HOSTS`` pairs, when there are any.

    The allowance opens loopback or private destinations to every caller of the server: an
    operator must see it in the log of each start, not find it by surprise.
    """
    if settings.asset_fetch_dev_hosts:
        log.warning(
            "fetch_dev_hosts_allowed",
            hosts=[str(pair) for pair in settings.asset_fetch_dev_hosts],
            note=(
                "ASSET_FETCH_DEV_HOSTS lets URL fetches and screenshots reach these host:port "
                "pairs even at loopback or private addresses; for development only"
            ),
        )


@asynccontextmanager
async def running(
    settings: MemorySettings,
    *,
    base_url: str,
    default_api_key: str | None = None,
    migrate: bool = False,
    links_unavailable: str | None = None,
    read_only: bool = False,
) -> AsyncGenerator[tuple[Runtime, MemoryServices], None]:
    """Open the runtime and services for the lifetime of the block, then close them.

    ``read_only``: a ``--read-only`` server's services (``MemoryServices.read_only``).
    """
    # Before anything can decode an image: only the four accepted loaders stay reachable.
    try:
        lock_down_libvips()
    except RuntimeError as exc:
        raise ConfigurationError(str(exc)) from None
    runtime = await open_runtime(settings, public_base_url=base_url, migrate=migrate)
    warn_of_dev_hosts(settings)
    fetcher = SafeFetcher(fetch_policy(settings))
    describer = build_describer(settings)
    services: MemoryServices | None = None
    try:
        services = MemoryServices(
            database=runtime.database,
            store=runtime.store,
            settings=settings,
            default_api_key=default_api_key,
            embedder=runtime.embedder,
            describer=describer,
            fetcher=fetcher,
            public_base_url=base_url,
            links_unavailable=links_unavailable,
            read_only=read_only,
        )
        async with supervised(runtime):
            yield runtime, services
    finally:
        if services is not None:
            with anyio.CancelScope(shield=True):  # a stop by signal still writes the counts
                await write_key_activity(services)
        await fetcher.aclose()
        if describer is not None:
            await describer.close()
        if services is not None:
            await services.embedders.close()
        await runtime.close()


def worker_config(
    settings: MemorySettings,
    concurrency: int | None = None,
    *,
    batch_size: int | None = None,
    lease_seconds: float | None = None,
) -> WorkerConfig:
    """Worker pacing from the settings (concurrency, sweep, reconcile) and the command line."""
    default = WorkerConfig()
    lease = lease_seconds or default.lease_seconds
    return WorkerConfig(
        concurrency=concurrency or settings.worker_concurrency,
        batch_size=batch_size or default.batch_size,
        lease_seconds=lease,
        heartbeat_seconds=lease / 4,
        sweep_seconds=settings.asset_worker_sweep_seconds,
        reconcile_seconds=settings.asset_worker_reconcile_seconds or None,
    )


@asynccontextmanager
async def background_worker(
    services: MemoryServices, config: WorkerConfig
) -> AsyncGenerator[JobWorker, None]:
    """Run an embedding worker beside the server for the lifetime of the block."""
    worker = job_worker(services, config)
    async with anyio.create_task_group() as group:
        ready = anyio.Event()
        group.start_soon(lambda: worker.run(ready=ready))
        await ready.wait()
        try:
            yield worker
        finally:
            group.cancel_scope.cancel()
