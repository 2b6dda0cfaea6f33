"""Signed links of a stdio server: where they point, and who serves them.

A stdio server has no HTTP port, yet the local object store's previews and original downloads
are signed links to ``/objects/...``. So, in this order:

1. ``MEMORY_PUBLIC_BASE_URL`` is set: links point there (a running HTTP server on the same
   data directory, or sharing ``MEMORY_SIGNING_SECRET``, serves them);
2. the S3 store: links go to the bucket, nothing to serve;
3. otherwise (``MEMORY_STDIO_LINKS=loopback``, the default) the server binds an ephemeral port
   on 127.0.0.1, announces it, and serves only the signed-object routes there for its life;
4. if that is switched off (``MEMORY_STDIO_LINKS=off``) or the port cannot be bound, previews
   carry the reason (``unavailable``) instead of a link nobody answers.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette

from memory_db import MemorySettings, get_logger
from memory_tools import MemoryServices
from memory_tools.serving.bootstrap import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    check_api_key,
    public_base_url,
    running,
)
from memory_tools.serving.http_routes import object_routes

log = get_logger(__name__)

LOOPBACK = "127.0.0.1"


@dataclass
class StdioLinks:
    """Where a stdio server's links point; ``listener`` is the loopback socket to serve."""

    base_url: str
    listener: socket.socket | None = None
    unavailable: str | None = None


def plan_stdio_links(settings: MemorySettings) -> StdioLinks:
    """Decide where links point (see the module docstring); binds the loopback port if needed."""
    if settings.memory_public_base_url:
        return StdioLinks(settings.memory_public_base_url)
    default = public_base_url(settings, DEFAULT_HOST, DEFAULT_PORT)
    if settings.asset_storage_provider == "s3":
        return StdioLinks(default)
    if settings.memory_stdio_links == "off":
        return StdioLinks(
            default,
            unavailable="preview links are not served over stdio (MEMORY_STDIO_LINKS=off); set "
            "MEMORY_PUBLIC_BASE_URL to a running HTTP server of this data directory",
        )
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, 0))
        listener.listen(64)
    except OSError as exc:
        listener.close()
        log.warning("stdio_links_unavailable", error=str(exc), exc_info=True)
        return StdioLinks(
            default,
            unavailable=f"no loopback port for preview links ({exc.strerror or exc}); set "
            "MEMORY_PUBLIC_BASE_URL to a running HTTP server of this data directory",
        )
    port = listener.getsockname()[1]
    return StdioLinks(f"http://{LOOPBACK}:{port}", listener=listener)


class _LinksServer(uvicorn.Server):
    """uvicorn without its signal handlers: SIGTERM and Ctrl+C stay with the command."""

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Leave the process's signal handlers alone."""
        yield


@asynccontextmanager
async def serving_links(services: MemoryServices, links: StdioLinks) -> AsyncGenerator[None, None]:
    """Serve the signed-object routes on ``links.listener`` for the lifetime of the block."""
    listener = links.listener
    if listener is None:
        yield
        return
    app = Starlette(routes=object_routes(services))
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    server = _LinksServer(config)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield
    finally:
        server.should_exit = True
        await task
        listener.close()


@asynccontextmanager
async def stdio_services(
    settings: MemorySettings, api_key: str, *, read_only: bool = False
) -> AsyncGenerator[tuple[MemoryServices, StdioLinks], None]:
    """The services of a stdio server acting as ``api_key``, with its links served.

    Plans where signed links point, opens the runtime, serves the links if that falls to this
    process, and fails at start-up (naming ``MEMORY_API_KEY``) when the key is not valid.
    """
    links = plan_stdio_links(settings)
    async with (
        running(
            settings,
            base_url=links.base_url,
            default_api_key=api_key,
            links_unavailable=links.unavailable,
            read_only=read_only,
        ) as (_runtime, services),
        serving_links(services, links),
    ):
        await check_api_key(services, api_key)
        yield services, links
